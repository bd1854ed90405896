// The device-compute engine, host side: turns an ATen TensorIterator into a
// parameter block for the built-in engine (device-kernels/engine/, module 0
// on every device) and launches it on the current stream. The device-side
// contract is device-kernels/engine/openreg_engine.h, shared with this file.
//
// TensorIterator (the iterator CUDA's gpu_kernel runs over) does the work a
// backend should not redo: output shape and allocation, broadcasting, type
// promotion, memory format, and reducing the iteration to a few coalesced
// dimensions with byte strides. The engine applies one op per launch.
#pragma once

#include <initializer_list>
#include <string_view>

#include <ATen/TensorIterator.h>
#include <c10/core/Scalar.h>

#include "openreg_engine.h"

namespace openreg::engine {

// Whether the engine handles tensors of this dtype (the real types and bool;
// not complex, the unsigned wide types, float8 or quantized ones).
bool supports_dtype(at::ScalarType dtype);

// The type an op computes in for a common dtype: float32 for float16,
// bfloat16 and float32 (PyTorch's opmath), float64, or int64 for the integer
// types and bool.
or_compute compute_of(at::ScalarType dtype);

// Launches `op` over `iter` on the current stream of the iterator's device.
// Operand 0 is the output, then the op's inputs, as TensorIterator orders
// them; CPU scalars (Python numbers, 0-dim CPU tensors) travel in the block.
// `args` are the op's scalar arguments (alpha, clamp bounds, ...), converted
// to the compute type. `compute` defaults to the iterator's common dtype.
// Raises (before anything runs) if an operand is on another device or of a
// dtype the engine does not handle.
void launch_elementwise(at::TensorIteratorBase& iter, or_op op, std::initializer_list<c10::Scalar> args = {},
                        std::optional<or_compute> compute = std::nullopt);

// Raises NotImplementedError ("<op>" not implemented for '<dtype>'), as
// ATen's dtype dispatch does on CPU, unless `ok`.
void check_dtype(bool ok, std::string_view op, at::ScalarType dtype);

} // namespace openreg::engine
