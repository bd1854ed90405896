// Neural-network ops written with device ops: softmax and log_softmax with
// their backward ops, and nll_loss (so cross_entropy with class indices)
// with its backward, for 2-d (nll_loss) and spatial (nll_loss2d) inputs. ATen's meta functions check the arguments and allocate
// the outputs as for CPU; the values come from reductions, elementwise ops,
// gather and scatter on the device engine, each dispatched (and counted) on
// its own. float16 and bfloat16 inputs compute in float32, as CPU's opmath.
//
// An out-of-range class index stops the device's gather (a device-side
// check, as CUDA's assert) and is reported at the next synchronizing call.

#include <limits>

#include <ATen/ATen.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/ops/_log_softmax_backward_data_meta.h>
#include <ATen/ops/_log_softmax_meta.h>
#include <ATen/ops/_softmax_backward_data_meta.h>
#include <ATen/ops/_softmax_meta.h>
#include <ATen/ops/nll_loss_backward_meta.h>
#include <ATen/ops/nll_loss_forward_meta.h>
#include <torch/library.h>

#include "OpenRegEngine.h"
#include "OpenRegStructured.h"

namespace openreg::nn {
namespace {

using at::Tensor;
using structured::Functional;

// The type the op computes in: float32 for the 16-bit floats.
at::ScalarType opmath(at::ScalarType dtype) {
  return dtype == at::kHalf || dtype == at::kBFloat16 ? at::kFloat : dtype;
}

Tensor in_opmath(const Tensor& t) {
  return t.scalar_type() == opmath(t.scalar_type()) ? t : t.to(opmath(t.scalar_type()));
}

void check_floating(const Tensor& t, const char* op) {
  engine::check_dtype(at::isFloatingType(t.scalar_type()), op, t.scalar_type());
}

// softmax (log_softmax when `log`) of `self` along `dim` into `out`:
// exp(x - max) / sum(exp(x - max)), or (x - max) - log(sum(exp(x - max))).
void softmax_into(const Tensor& out, const Tensor& self, int64_t dim, bool log) {
  if (self.numel() == 0) {
    return;
  }
  const Tensor x = in_opmath(self);
  const int64_t d = at::maybe_wrap_dim(dim, x.dim());
  Tensor shifted = x - x.amax(d, /*keepdim=*/true);
  Tensor result;
  if (log) {
    result = shifted.sub_(shifted.exp().sum(d, /*keepdim=*/true).log_());
  } else {
    result = shifted.exp_();
    result.div_(result.sum(d, /*keepdim=*/true));
  }
  out.copy_(result);
}

template <class Op, bool Log, class Meta>
Tensor softmax_entry(const Tensor& self, int64_t dim, bool half_to_float) {
  if (!structured::engine_handles(self)) {
    return structured::fallback<Op>(self, dim, half_to_float);
  }
  check_floating(self, Log ? "log_softmax" : "softmax");
  Functional<Meta> op;
  op.meta(self, dim, half_to_float);
  softmax_into(op.outputs_[0], self, dim, Log);
  return std::move(op.outputs_[0]);
}

// softmax: grad_input = y * (g - sum(g * y)); log_softmax: g - exp(y) * sum(g).
template <class Op, bool Log, class Meta>
Tensor softmax_backward_entry(const Tensor& grad_output, const Tensor& output, int64_t dim,
                              at::ScalarType input_dtype) {
  if (!structured::engine_handles(grad_output, output)) {
    return structured::fallback<Op>(grad_output, output, dim, input_dtype);
  }
  check_floating(output, Log ? "log_softmax_backward" : "softmax_backward");
  Functional<Meta> op;
  op.meta(grad_output, output, dim, input_dtype);
  const Tensor& grad_input = op.outputs_[0];
  if (grad_input.numel() == 0) {
    return std::move(op.outputs_[0]);
  }
  const Tensor g = in_opmath(grad_output);
  const Tensor y = in_opmath(output);
  const int64_t d = at::maybe_wrap_dim(dim, y.dim());
  if (Log) {
    grad_input.copy_(g - y.exp() * g.sum(d, /*keepdim=*/true));
  } else {
    const Tensor gy = g * y;
    grad_input.copy_(gy - y * gy.sum(d, /*keepdim=*/true));
  }
  return std::move(op.outputs_[0]);
}

// nll_loss over a class dimension 1: a 1-d input (C) is one row (1, C), its
// 0-d target (1); (N, C) and (N, C, d1, ...) inputs have targets (N, d1, ...).
Tensor with_rows(const Tensor& self) {
  return self.dim() == 1 ? self.unsqueeze(0) : self;
}

// What forward and backward share: each target's class, clamped to a valid
// index where it is ignored (int64, the target's shape with a dimension 1
// inserted, for gather and scatter), whether it counts, and its weight (0
// where it does not).
struct Picks {
  Tensor safe;
  Tensor valid;
  Tensor weight;
};

Picks picks(const Tensor& self, const Tensor& target, const std::optional<Tensor>& weight, int64_t ignore_index,
            at::ScalarType dtype) {
  const Tensor t = (self.dim() == 1 ? target.reshape({1}) : target).to(at::kLong);
  Picks p;
  p.valid = t.ne(ignore_index);
  const Tensor safe = at::where(p.valid, t, 0);
  p.safe = safe.unsqueeze(1);
  if (weight.has_value() && weight->defined()) {
    const Tensor zero = at::zeros({}, t.options().dtype(dtype));
    p.weight = at::where(p.valid, in_opmath(*weight).index_select(0, safe.reshape({-1})).view(t.sizes()), zero);
  } else {
    p.weight = p.valid.to(dtype);
  }
  return p;
}

// output and total_weight, as CPU's nll_loss: per-target -w * x[class] (0
// where ignored), or their sum, or their sum over the sum of the weights.
void nll_loss_values(const Tensor& self, const Tensor& target, const std::optional<Tensor>& weight,
                     int64_t reduction, int64_t ignore_index, const Tensor& output, const Tensor& total_weight) {
  const at::ScalarType dtype = opmath(self.scalar_type());
  if (self.numel() == 0) { // nothing to pick: CPU's empty sum, and mean (nan)
    total_weight.zero_();
    if (output.numel() > 0) {
      output.fill_(reduction == at::Reduction::Mean ? std::numeric_limits<double>::quiet_NaN() : 0.0);
    }
    return;
  }
  const Picks p = picks(self, target, weight, ignore_index, dtype);
  const Tensor x = in_opmath(with_rows(self));
  const Tensor zero = at::zeros({}, x.options());
  const Tensor losses = at::where(p.valid, x.gather(1, p.safe).squeeze(1).mul(p.weight).neg(), zero);
  if (reduction == at::Reduction::None && self.dim() >= 2) {
    output.copy_(losses);
    total_weight.zero_();
    return;
  }
  const Tensor sum = losses.sum();
  const Tensor weights = p.weight.sum();
  total_weight.copy_(weights);
  output.copy_(reduction == at::Reduction::Mean ? sum / weights : sum);
}

// grad_input: zeros but -w * g at each counted target's class, g the
// target's output grad (none), or the one grad (sum) over the total weight
// (mean).
void nll_loss_grad(const Tensor& grad_output, const Tensor& self, const Tensor& target,
                   const std::optional<Tensor>& weight, int64_t reduction, int64_t ignore_index,
                   const Tensor& total_weight, const Tensor& grad_input) {
  grad_input.zero_();
  if (self.numel() == 0) {
    return;
  }
  const at::ScalarType dtype = opmath(self.scalar_type());
  const Picks p = picks(self, target, weight, ignore_index, dtype);
  Tensor g = in_opmath(grad_output);
  if (!(reduction == at::Reduction::None && self.dim() >= 2)) {
    g = g.reshape({}).expand(p.valid.sizes());
    if (reduction == at::Reduction::Mean) {
      g = g / in_opmath(total_weight);
    }
  }
  const Tensor zero = at::zeros({}, g.options());
  Tensor values = at::where(p.valid, p.weight.mul(g).neg(), zero).unsqueeze(1);
  if (values.scalar_type() != grad_input.scalar_type()) {
    values = values.to(grad_input.scalar_type());
  }
  with_rows(grad_input).scatter_(1, p.safe, values);
}

at::OptionalTensorRef optional_ref(const std::optional<Tensor>& t) {
  return t.has_value() && t->defined() ? at::OptionalTensorRef(*t) : at::OptionalTensorRef();
}

std::tuple<Tensor, Tensor> nll_loss_forward_kernel(const Tensor& self, const Tensor& target,
                                                   const std::optional<Tensor>& weight, int64_t reduction,
                                                   int64_t ignore_index) {
  if (!structured::engine_handles(self, target, weight)) {
    return structured::fallback<at::_ops::nll_loss_forward>(self, target, weight, reduction, ignore_index);
  }
  check_floating(self, "nll_loss");
  Functional<at::meta::structured_nll_loss_forward> op; // checks, allocates output and total_weight
  op.meta(self, target, optional_ref(weight), reduction, ignore_index);
  nll_loss_values(self, target, weight, reduction, ignore_index, op.outputs_[0], op.outputs_[1]);
  return {std::move(op.outputs_[0]), std::move(op.outputs_[1])};
}

Tensor nll_loss_backward_kernel(const Tensor& grad_output, const Tensor& self, const Tensor& target,
                                const std::optional<Tensor>& weight, int64_t reduction, int64_t ignore_index,
                                const Tensor& total_weight) {
  if (!structured::engine_handles(grad_output, self, target, weight, total_weight)) {
    return structured::fallback<at::_ops::nll_loss_backward>(grad_output, self, target, weight, reduction,
                                                             ignore_index, total_weight);
  }
  check_floating(self, "nll_loss_backward");
  Functional<at::meta::structured_nll_loss_backward> op;
  op.meta(grad_output, self, target, optional_ref(weight), reduction, ignore_index, total_weight);
  nll_loss_grad(grad_output, self, target, weight, reduction, ignore_index, total_weight, op.outputs_[0]);
  return std::move(op.outputs_[0]);
}

// nll_loss2d (ATen has no meta for it): (N, C, H, W) inputs, (N, H, W) targets.
void check_nll_loss2d(const Tensor& self, const Tensor& target, const std::optional<Tensor>& weight) {
  TORCH_CHECK(target.dim() == 3, "only batches of spatial targets supported (3D tensors) but got targets of dimension: ",
              target.dim());
  TORCH_CHECK(self.dim() == 4, "only batches of spatial inputs supported (4D tensors), but got input of dimension: ",
              self.dim());
  TORCH_CHECK(!weight.has_value() || !weight->defined() || weight->numel() == self.size(1),
              "weight tensor should be defined either for all or no classes");
  TORCH_CHECK(self.size(0) == target.size(0) && self.size(2) == target.size(1) && self.size(3) == target.size(2),
              "input and target batch or spatial sizes don't match: target ", target.sizes(), ", input ",
              self.sizes());
  TORCH_CHECK(target.device() == self.device(), "Expected all tensors to be on the same device, but found at least "
              "two devices, ", self.device(), " and ", target.device(), "!");
}

std::tuple<Tensor, Tensor> nll_loss2d_forward_kernel(const Tensor& self, const Tensor& target,
                                                     const std::optional<Tensor>& weight, int64_t reduction,
                                                     int64_t ignore_index) {
  if (!structured::engine_handles(self, target, weight)) {
    return structured::fallback<at::_ops::nll_loss2d_forward>(self, target, weight, reduction, ignore_index);
  }
  check_floating(self, "nll_loss2d");
  check_nll_loss2d(self, target, weight);
  Tensor output = reduction == at::Reduction::None ? at::empty(target.sizes(), self.options()) : at::empty({}, self.options());
  Tensor total_weight = at::empty({}, self.options());
  nll_loss_values(self, target, weight, reduction, ignore_index, output, total_weight);
  return {output, total_weight};
}

Tensor nll_loss2d_backward_kernel(const Tensor& grad_output, const Tensor& self, const Tensor& target,
                                  const std::optional<Tensor>& weight, int64_t reduction, int64_t ignore_index,
                                  const Tensor& total_weight) {
  if (!structured::engine_handles(grad_output, self, target, weight, total_weight)) {
    return structured::fallback<at::_ops::nll_loss2d_backward>(grad_output, self, target, weight, reduction,
                                                               ignore_index, total_weight);
  }
  check_floating(self, "nll_loss2d_backward");
  check_nll_loss2d(self, target, weight);
  Tensor grad_input = at::empty_like(self, at::MemoryFormat::Contiguous);
  nll_loss_grad(grad_output, self, target, weight, reduction, ignore_index, total_weight, grad_input);
  return grad_input;
}

} // namespace
} // namespace openreg::nn

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  using namespace openreg::nn;
  m.impl("_softmax", TORCH_FN((softmax_entry<at::_ops::_softmax, false, at::meta::structured__softmax>)));
  m.impl("_log_softmax", TORCH_FN((softmax_entry<at::_ops::_log_softmax, true, at::meta::structured__log_softmax>)));
  m.impl("_softmax_backward_data",
         TORCH_FN((softmax_backward_entry<at::_ops::_softmax_backward_data, false,
                                          at::meta::structured__softmax_backward_data>)));
  m.impl("_log_softmax_backward_data",
         TORCH_FN((softmax_backward_entry<at::_ops::_log_softmax_backward_data, true,
                                          at::meta::structured__log_softmax_backward_data>)));
  m.impl("nll_loss_forward", TORCH_FN(nll_loss_forward_kernel));
  m.impl("nll_loss_backward", TORCH_FN(nll_loss_backward_kernel));
  m.impl("nll_loss2d_forward", TORCH_FN(nll_loss2d_forward_kernel));
  m.impl("nll_loss2d_backward", TORCH_FN(nll_loss2d_backward_kernel));
}
