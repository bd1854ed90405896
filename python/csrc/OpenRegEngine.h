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

#include <array>
#include <initializer_list>
#include <string_view>

#include <ATen/TensorIterator.h>
#include <ATen/core/Tensor.h>
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

// Launches `op` over lists of tensors, one launch for up to OR_LIST_MAX of
// their positions (torch's _foreach_ ops; or_elementwise_list): for each i,
// lists[0][i] = op(lists[1][i], ...). Every tensor is contiguous and of one
// float dtype, and the tensors of a position have one shape, on one device
// (the caller checks). `args` as for launch_elementwise; `values`, one per
// position, go to args[0] (value_to 0) or are operand `value_to`, a scalar
// that follows the tensor operands (value_to == lists.size()). The lists of
// the operands in `broadcast_mask` hold 0-dim device tensors instead, each
// read as one value for its whole position.
void launch_elementwise_list(or_op op, const std::vector<at::TensorList>& lists,
                             std::initializer_list<c10::Scalar> args = {}, int value_to = -1,
                             c10::ArrayRef<c10::Scalar> values = {}, uint32_t broadcast_mask = 0);

// Launches one step of a fused optimizer (or_optim_list) over lists of
// tensors, one launch for up to OR_LIST_MAX parameters: `head` holds the
// optimizer, dtype, flags and hyperparameters (the item count and the
// addresses are filled here); `lists` are the parameters, their gradients and
// the optimizer's states (Adam: exp_avgs, exp_avg_sqs, max_exp_avg_sqs with
// amsgrad; Adagrad: state_sums; SGD with momentum: the momentum buffers),
// every tensor contiguous and of head.dtype, with one shape per position, on
// one device; `steps` the 0-dim step counts (none for SGD); `lr`,
// `grad_scale`, `found_inf` 0-dim device tensors or undefined (head's flags
// say which are used). The caller checks all of that.
void launch_optim_list(const or_optim_head& head, const std::vector<at::TensorList>& lists, at::TensorList steps,
                       const at::Tensor& lr, const at::Tensor& grad_scale, const at::Tensor& found_inf);

// Launches reduction `op` over a reduction iterator (ATen's make_reduction:
// its one or two outputs, then the input; reduced dimensions have output
// stride 0). `args` as for launch_elementwise (in float64 or int64, by the
// input's dtype). Raises before anything runs as launch_elementwise does.
void launch_reduce(at::TensorIteratorBase& iter, or_reduce_op op, std::initializer_list<c10::Scalar> args = {});

// Launches scan `op` (OR_REDUCE_CUMSUM, CUMPROD, CUMMAX, CUMMIN or
// LOGCUMSUMEXP) of `self` along `dim` (wrapped) into `result`, of the same
// shape; in place when they are the same tensor. CUMMAX and CUMMIN also
// write the positions of the running extremes into `indices` (int64, same
// shape); the other scans take none.
void launch_scan(const at::Tensor& result, const at::Tensor& self, int64_t dim, or_reduce_op op,
                 const at::Tensor& indices = {});

// Softmax-like op `op` (OR_SOFTMAX_*) along `dim` (negative counts from the end) into `result`:
// forward ops read `input`; backward ops read the gradient `input` and the
// forward's output `y`; SOFTMAX_LOGSUMEXP also writes each line's
// log-sum-exp to `y` (expanded along `dim`). All of one shape; floating dtypes.
void launch_softmax(or_softmax_op op, const at::Tensor& result, const at::Tensor& input, const at::Tensor& y,
                    int64_t dim);

// nll_loss over `input` (rows x classes, one row of classes, or N x classes
// x H x W with targets N x H x W: nll_loss2d): forward
// (`backward` false) writes `out` (a value per row for reduction NONE of a
// 2-d or 4-d input, else one value) and `total_weight`; backward writes -w g at each
// counted row's class into `input` (grad_input, zeroed by the caller), `out`
// being grad_output and `total_weight` the forward's. `weight` may be
// undefined. One launch (see or_nll in openreg_engine.h).
void launch_nll(bool backward, const at::Tensor& input, const at::Tensor& target, const at::Tensor& weight,
                int64_t reduction, int64_t ignore_index, const at::Tensor& out, const at::Tensor& total_weight);

// a * b + c with two roundings (CPU's normalization kernels compute
// x * alpha + beta so), broadcast and promoted as a binary op would: one
// elementwise launch into a new tensor. Floating dtypes.
at::Tensor mul_add(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c);

// A 2-d pooling window: sizes, strides, padding and dilation (height, width);
// for averages, whether padding counts and the divisor override (0: none).
struct PoolWindow {
  std::array<int64_t, 2> kernel, stride, padding, dilation;
  bool count_include_pad = true;
  int64_t divisor = 0;
};

// Pooling op `op` (OR_POOL_*) over dense (..., H, W) planes, in float32,
// float64 or int64 (see or_pool): forward ops read `in` (the input) and
// write `out0` (the output) and, for MAX, `out1` (int64 indices); backward
// ops read `in` (the output's gradient) and, for MAX_BACKWARD, the indices
// `out1`, and write `out0` (the input's gradient) whole.
void launch_pool(or_pool_op op, const at::Tensor& in, const at::Tensor& out0, const at::Tensor& out1,
                 const PoolWindow& window);

// Convolution's window copies over dense (..., H, W) `image` planes and dense
// `cols` (kernel[0] * kernel[1] * oh * ow elements per plane: window
// position, output row, output column): OR_POOL_IM2COL writes `cols` (0 in
// the padding; any dtype of 2, 4 or 8 bytes), OR_POOL_COL2IM writes `image`
// whole, each element the sum of the column elements read from it, in
// window order (float32 or float64).
void launch_windows(or_pool_op op, const at::Tensor& image, const at::Tensor& cols, int64_t oh, int64_t ow,
                    const PoolWindow& window);

// The transforms of a 3 x 3, stride 1 float32 convolution computed as
// Winograd's F(2x2, 3x3) (OR_POOL_WINOGRAD_*, see or_pool), dense operands:
// the WEIGHT ops read kernels (..., 3, 3) and write (16, kernels); INPUT
// reads images (N, channels, H, W) and writes (16, channels, N, th * tw) for
// th x tw tiles of 2 x 2 outputs whose 4 x 4 patches start at -padding;
// OUTPUT reads such products and writes (N, channels, H, W) outputs with th
// = (H + 1) / 2, tw = (W + 1) / 2. The weight gradient's adjoints: GRAD
// reads (N, channels, H, W) output gradients and writes their tiles as
// OUTPUT reads them; WEIGHT_GRAD reads (16, kernels) and writes (..., 3, 3).
// The tiles' operand, (16, channels, N * th * tw), may have its 16 points
// further apart than dense (winograd_space in OpenRegNN.cpp pads them).
void launch_winograd(or_pool_op op, const at::Tensor& in, const at::Tensor& out, int64_t channels, int64_t th,
                     int64_t tw, const std::array<int64_t, 2>& padding);

// Recomputes each NaN element of a Winograd result as the direct sum (the
// transforms turn an infinite input into NaN where that sum is +-inf):
// FIXUP: `result` the output (N, O, oh, ow) of `input` (N, C, H, W) with
// kernels `other` (O, C, 3, 3); FIXUP_ROTATED: with the input gradient's
// kernels, `other` (C, O, 3, 3) rotated; WEIGHT_GRAD_FIXUP: `result` the
// weight gradient (O, C, 3, 3) of `input` and output gradient `other` (N, O,
// oh, ow). float32, dense.
void launch_winograd_fixup(or_pool_op op, const at::Tensor& result, const at::Tensor& input, const at::Tensor& other,
                           const std::array<int64_t, 2>& padding);

// The normalization kernel (OR_NORM_*, see or_norm), float32 operands,
// dense: `groups` rows of `length` (layer norm), or channels of `planes`
// runs of `length` elements `plane_stride` apart (batch norm, NCHW). `out`
// and `in` by slot (out0..out2, in0..in5); an undefined tensor is absent (0).
void launch_norm(or_norm_op op, int64_t groups, int64_t length, int64_t planes, int64_t plane_stride, double eps,
                 std::initializer_list<at::Tensor> out, std::initializer_list<at::Tensor> in);

// Sorts `values` in place along `dim` (stable; NaN above every number) and
// writes each element's original position into `indices` (int64, same shape).
void launch_sort(const at::Tensor& values, const at::Tensor& indices, int64_t dim, bool descending);

// The first k elements of `self` along `dim` in launch_sort's order (largest
// first when `largest`) into `values` and their positions into `indices`
// (int64), both k long along `dim`; 1 <= k <= self.size(dim).
void launch_topk(const at::Tensor& self, const at::Tensor& values, const at::Tensor& indices, int64_t dim, int64_t k,
                 bool largest);

// Launches indexing op `op` over `iter`, whose operand `direct` is walked as
// usual, operand `indexed` is the indexed tensor restrided to the iteration
// (stride 0 along indexed dimensions), and every other operand is an index
// tensor (int64 or int32) for the dimension of size `indexed_sizes[k]` and
// byte stride `indexed_strides[k]`. Negative indices count from the end when
// `wrap`; an index out of range stops the kernel (a device-side check).
// `alpha` scales OR_INDEX_SCATTER_ADD's addend.
void launch_index(at::TensorIteratorBase& iter, or_index_op op, int direct, int indexed, at::IntArrayRef indexed_sizes,
                  at::IntArrayRef indexed_strides, bool wrap, const c10::Scalar& alpha = 1);

// Copies `self` into `out` (same shape and dtype) reversed along the
// dimensions set in `flip` (bit d: dimension d), on the device.
void launch_flip(const at::Tensor& out, const at::Tensor& self, uint64_t flip);

// Launches positional op `op` (openreg_engine.h) writing `out`, reading `in`
// for TRIL/TRIU (may be `out` itself). `args` in the compute type: float64,
// or int64 for ARANGE into an integer tensor.
void launch_positions(or_position_op op, const at::Tensor& out, const at::Tensor& in,
                      std::initializer_list<c10::Scalar> args);

// For every element of `values`, the position in its sorted line of
// `sequence` (the last dimension; a 1-d sequence serves every value, an n-d
// one has the values' leading dimensions) of the first element >= it (> it
// when `right`), into `out` (int64 or int32, values' shape), by CPU's
// binary search.
void launch_search(const at::Tensor& out, const at::Tensor& values, const at::Tensor& sequence, bool right);

// Writes the coordinates of `self`'s first `count` nonzero elements (row-major
// order) into `result`, an int64 [count, self.dim()] tensor on self's device.
void launch_nonzero(const at::Tensor& result, const at::Tensor& self, int64_t count);

// One operand of launch_gemm: a tensor (its device, dtype and data) read as
// `batch` matrices through element strides (batch, row, column). A vector is a
// one-column (or one-row) matrix whose other stride is never stepped.
struct GemmOperand {
  const at::Tensor& tensor;
  std::array<int64_t, 3> strides;
};

// The matrices of a 2-d (one batch) or 3-d tensor.
GemmOperand gemm_matrices(const at::Tensor& t);

// out = beta * out + alpha * a @ b for `batch` triples of matrices (a: m x k,
// b: k x n, out: m x n) of one dtype on one device; beta == 0 only writes
// out. `out` must not overlap a or b. Raises before anything runs on a
// device or dtype mismatch, or for bool.
void launch_gemm(int64_t batch, int64_t m, int64_t n, int64_t k, const GemmOperand& a, const GemmOperand& b,
                 const GemmOperand& out, const c10::Scalar& beta, const c10::Scalar& alpha);

// Fills `out` with random op `op` (openreg_engine.h) drawn from Philox with
// `seed` and `offset` (the generator's; each launch takes a new offset).
// `probabilities` (BERNOULLI), if defined, is broadcast to out's shape.
// `args` in float64, or int64 for RANGE (from, count).
void launch_random(or_random_op op, const at::Tensor& out, const at::Tensor& probabilities,
                   std::initializer_list<c10::Scalar> args, uint64_t seed, uint64_t offset);

// Raises NotImplementedError ("<op>" not implemented for '<dtype>'), as
// ATen's dtype dispatch does on CPU, unless `ok`.
void check_dtype(bool ok, std::string_view op, at::ScalarType dtype);

} // namespace openreg::engine
