// Output handling of the structured-op forms (see OpenRegStructured.h), as
// ATen's generated registrations do it for CPU.

#include "OpenRegStructured.h"

#include <ATen/ATen.h>
#include <ATen/native/Resize.h>

namespace openreg::structured {

Tensor create_out(at::IntArrayRef sizes, at::IntArrayRef strides, const at::TensorOptions& options) {
  if (strides.empty()) {
    return at::empty(sizes, options);
  }
  return at::empty_strided(sizes, strides, options);
}

void resize_out(const Tensor& out, at::IntArrayRef sizes, at::IntArrayRef strides, const at::TensorOptions& options) {
  TORCH_CHECK(options.dtype() == out.dtype(), "Expected out tensor to have dtype ", options.dtype(), ", but got ",
              out.dtype(), " instead");
  TORCH_CHECK(options.device() == out.device(), "Expected out tensor to have device ", options.device(), ", but got ",
              out.device(), " instead");
  const bool resized = at::native::resize_output(out, sizes);
  // Restride only what was resized: an out= tensor of the right shape keeps
  // its strides, and the iterator writes through them.
  if (resized) {
    if (!strides.empty()) {
      TORCH_INTERNAL_ASSERT(!options.memory_format_opt().has_value());
      out.as_strided_(sizes, strides);
    } else if (options.memory_format_opt().has_value()) {
      out.unsafeGetTensorImpl()->empty_tensor_restride(*options.memory_format_opt());
    }
  }
}

void check_inplace(const Tensor& self, at::IntArrayRef sizes, const at::TensorOptions& options) {
  TORCH_CHECK(options.dtype() == self.dtype(), "Bad in-place call: input tensor dtype ", self.dtype(),
              " and output tensor dtype ", options.dtype(), " should match");
  TORCH_CHECK(options.device() == self.device(), "Bad in-place call: input tensor device ", self.device(),
              " and output tensor device ", options.device(), " should match");
  TORCH_CHECK(sizes == self.sizes(), "Bad in-place call: input tensor size ", self.sizes(),
              " and output tensor size ", sizes, " should match");
}

} // namespace openreg::structured
