// The indexing and data-movement family on the device engine. Each op
// builds a TensorIterator (ATen's checks and broadcasting) and launches an
// engine op over it; ATen's CPU and CUDA registrations of these ops are
// device-specific functions, so the argument checks are repeated here with
// ATen's messages.

#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/TensorIterator.h>
#include <torch/library.h>

#include "OpenRegEngine.h"
#include "OpenRegStructured.h"

namespace openreg::indexing {
using namespace openreg::engine;
namespace {

using at::Tensor;
using c10::Scalar;
using structured::counted_name;
using structured::engine_handles;
using structured::fallback;

// self[mask] = value, in place: where(mask, value, self) on the device. A
// CPU value travels in the parameter block, as a Python number does.
Tensor& masked_fill_with(Tensor& self, const Tensor& mask, const Tensor& value) {
  TORCH_CHECK(mask.scalar_type() == at::kBool, "masked_fill_ only supports boolean masks, but got mask with dtype ",
              mask.scalar_type());
  if (at::has_internal_overlap(self) == at::MemOverlap::Yes) {
    TORCH_WARN("Use of masked_fill_ on expanded tensors is deprecated. Please clone() the tensor before performing "
               "this operation. This also applies to advanced indexing e.g. tensor[mask] = scalar");
  }
  at::assert_no_partial_overlap(self, mask);
  auto iter = at::TensorIteratorConfig()
                  .set_check_mem_overlap(false)
                  .check_all_same_dtype(false)
                  .resize_outputs(false)
                  .allow_cpu_scalars(true)
                  .add_output(self)
                  .add_const_input(mask)
                  .add_const_input(value)
                  .add_const_input(self)
                  .build();
  launch_elementwise(iter, OR_OP_WHERE, {}, compute_of(self.scalar_type()));
  return self;
}

Tensor& masked_fill_scalar(Tensor& self, const Tensor& mask, const Scalar& value) {
  using Op = at::_ops::masked_fill__Scalar;
  if (!engine_handles(self, mask, value)) {
    return fallback<Op>(self, mask, value);
  }
  openreg::count_op(counted_name<Op>(), true);
  return masked_fill_with(self, mask, at::scalar_tensor(value, self.options().device(at::kCPU)));
}

Tensor& masked_fill_tensor(Tensor& self, const Tensor& mask, const Tensor& value) {
  using Op = at::_ops::masked_fill__Tensor;
  TORCH_CHECK(value.dim() == 0,
              "masked_fill_ only supports a 0-dimensional value tensor, but got tensor with ", value.dim(),
              " dimension(s).");
  if (!engine_handles(self, mask, value)) {
    return fallback<Op>(self, mask, value);
  }
  openreg::count_op(counted_name<Op>(), true);
  // A 0-dim CPU value is read on the host like a Python number; a device one
  // is broadcast on the device, converted to self's dtype there.
  return masked_fill_with(self, mask, value.device().is_cpu() ? value.to(self.scalar_type()) : value);
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("masked_fill_.Scalar", TORCH_FN(masked_fill_scalar));
  m.impl("masked_fill_.Tensor", TORCH_FN(masked_fill_tensor));
}

} // namespace openreg::indexing
