// What the foreach ops (OpenRegForeach.cpp) share with the fused optimizer
// steps (OpenRegOptim.cpp): when lists of tensors can take one launch of the
// engine's list kernels (`elementwise_list`, `optim_list`).
#pragma once

#include <initializer_list>

#include <ATen/core/Tensor.h>

namespace openreg::foreach_ops {

// Whether the lists take one launch: every tensor contiguous, of one float
// dtype, on one openreg device, the lists of one length and the tensors of a
// position of one shape.
bool on_engine(std::initializer_list<at::TensorList> lists);

} // namespace openreg::foreach_ops
