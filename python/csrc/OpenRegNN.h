// What the neural-network translation units share (OpenRegNN.cpp,
// OpenRegPooling.cpp): the compute type of 16-bit floats, dtype checks, and
// the running maximum over window positions that max pooling and adaptive
// max pooling fold.
#pragma once

#include <optional>

#include <ATen/core/Tensor.h>
#include <c10/core/Scalar.h>

#include "OpenRegEngine.h"

namespace openreg::nn {

using at::Tensor;

// The type an op computes in: float32 for the 16-bit floats.
at::ScalarType opmath(at::ScalarType dtype);
// `t` in its compute type (itself when that is its dtype).
Tensor in_opmath(const Tensor& t);
bool defined(const std::optional<Tensor>& t);
// Rejects non-floating inputs with the engine's message for `op`.
void check_floating(const Tensor& t, const char* op);
// -inf for floating dtypes, the lowest value for integers: what max pooling
// starts from, and pads with.
c10::Scalar lowest_of(at::ScalarType dtype);

// The maximum over a window's positions, visited in CPU's order, and where it
// was: a candidate takes the maximum when it is greater or NaN (so among equal
// maxima the first wins, and the last NaN). `values` starts at lowest_of;
// `indices` at each window's first position.
struct WindowMax {
  Tensor values;
  Tensor indices;
  // One window position for every output at once: `candidate` values, their
  // `index` into the input plane, and (if defined) which of them lie inside
  // their window.
  void visit(const Tensor& candidate, const Tensor& index, const Tensor& inside = Tensor());
};

// `t` as the `pool` kernel takes it: dense, in float32 or float64 (16-bit
// floats in float32), integers in int64.
Tensor pool_operand(const Tensor& t);

// Max pooling's backward: each output's gradient added into the input
// element its window picked (`indices` into the H x W plane), in output order
// where windows overlap (deterministic); an index outside the plane stops the
// device's kernel. `window`: the forward's windows, when it had regular ones
// (2 x 2 windows of stride 2 take a path of their own).
Tensor scatter_to_picks(const Tensor& grad_output, const Tensor& input, const Tensor& indices,
                        const engine::PoolWindow& window = {{1, 1}, {1, 1}, {0, 0}, {1, 1}});

} // namespace openreg::nn
