// Operators of the `openreg` namespace: the registration styles PyTorch's
// OpenReg demonstrates for a backend's own operators, each on device kernels.
//
// - torch.ops.openreg.custom_abs: a new operator with its schema
//   (TORCH_LIBRARY), a device kernel (PrivateUse1: the engine's ABS over a
//   TensorIterator), a meta kernel (Meta: shapes for fake tensors and
//   torch.compile), and its autograd formula registered on
//   AutogradPrivateUse1 (a C++ torch::autograd::Function).
// - torch.ops.openreg.custom_autograd_fn_returns_self and
//   custom_autograd_fn_aliasing: autograd Functions whose forward returns its
//   input itself, or a view of it (schema `Tensor(a) -> Tensor(a)`), with a
//   backward that halves the gradient: the cases autograd must handle for
//   outputs that alias inputs.
//
// docs/integration-guide.md walks through these and the other registration
// styles in this folder.

#include <ATen/ATen.h>
#include <ATen/TensorIterator.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include "OpenRegEngine.h"

namespace openreg::custom {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The device kernel: |x| on the engine, for every real dtype it computes.
at::Tensor custom_abs_device(const at::Tensor& input) {
  TORCH_CHECK(!input.is_complex(), "openreg::custom_abs: complex input is not supported (use torch.abs)");
  auto out = at::empty_like(input);
  auto iter = at::TensorIterator::unary_op(out, input);
  engine::launch_elementwise(iter, engine::OR_OP_ABS);
  return out;
}

// The meta kernel: the output's shape, dtype and layout, no data.
at::Tensor custom_abs_meta(const at::Tensor& input) {
  TORCH_CHECK(!input.is_complex(), "openreg::custom_abs: complex input is not supported (use torch.abs)");
  return at::empty_like(input);
}

// Autograd: d|x|/dx = sgn(x). The forward redispatches below the autograd
// keys to the device (or meta) kernel.
struct CustomAbs final : torch::autograd::Function<CustomAbs> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input) {
    ctx->save_for_backward({input});
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("openreg::custom_abs", "")
                         .typed<at::Tensor(const at::Tensor&)>();
    return op.call(input);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto input = ctx->get_saved_variables()[0];
    return {grads[0] * input.sgn()};
  }
};

at::Tensor custom_abs_autograd(const at::Tensor& input) {
  return CustomAbs::apply(input);
}

// Forward returns its input unchanged; backward halves the gradient.
struct ReturnsSelf final : torch::autograd::Function<ReturnsSelf> {
  static at::Tensor forward(AutogradContext*, const at::Tensor& self) {
    return self;
  }
  static variable_list backward(AutogradContext*, variable_list grads) {
    return {grads[0] * 0.5};
  }
};

// Forward returns a view of its input (same storage); backward halves the gradient.
struct Aliasing final : torch::autograd::Function<Aliasing> {
  static at::Tensor forward(AutogradContext*, const at::Tensor& self) {
    return self.view_symint(self.sym_sizes());
  }
  static variable_list backward(AutogradContext*, variable_list grads) {
    return {grads[0] * 0.5};
  }
};

at::Tensor custom_autograd_fn_returns_self(const at::Tensor& self) {
  return ReturnsSelf::apply(self);
}

at::Tensor custom_autograd_fn_aliasing(const at::Tensor& self) {
  return Aliasing::apply(self);
}

} // namespace

TORCH_LIBRARY(openreg, m) {
  m.def("custom_abs(Tensor input) -> Tensor");
  m.def("custom_autograd_fn_returns_self(Tensor input) -> Tensor");
  m.def("custom_autograd_fn_aliasing(Tensor(a) input) -> Tensor(a)");
}

TORCH_LIBRARY_IMPL(openreg, PrivateUse1, m) {
  m.impl("custom_abs", TORCH_FN(custom_abs_device));
}

TORCH_LIBRARY_IMPL(openreg, Meta, m) {
  m.impl("custom_abs", TORCH_FN(custom_abs_meta));
}

TORCH_LIBRARY_IMPL(openreg, AutogradPrivateUse1, m) {
  m.impl("custom_abs", TORCH_FN(custom_abs_autograd));
  m.impl("custom_autograd_fn_returns_self", TORCH_FN(custom_autograd_fn_returns_self));
  m.impl("custom_autograd_fn_aliasing", TORCH_FN(custom_autograd_fn_aliasing));
}

} // namespace openreg::custom
