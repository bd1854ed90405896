// What the foreach ops (OpenRegForeach.cpp) share with the fused optimizer
// steps (OpenRegOptim.cpp): when lists of tensors can take one launch of the
// engine's `elementwise_list` kernel.
#pragma once

#include <initializer_list>
#include <vector>

#include <ATen/core/Tensor.h>

namespace openreg::foreach_ops {

// Whether the lists take one launch: every tensor contiguous, of one float
// dtype, on one openreg device, the lists of one length and the tensors of a
// position of one shape.
bool on_engine(std::initializer_list<at::TensorList> lists);

// Whether `other` can be the one value of every position of lists whose
// first is `self`: a 0-dim tensor of self's dtype on self's device.
bool device_scalar(at::TensorList self, const at::Tensor& other);

// New contiguous tensors shaped as `self`'s, for out-of-place forms.
std::vector<at::Tensor> outputs_like(at::TensorList self);

// A scalar for every position (a scalar operand the same for all).
std::vector<at::Scalar> repeated(const at::Scalar& value, size_t n);

} // namespace openreg::foreach_ops
