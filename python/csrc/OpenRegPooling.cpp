// Pooling, upsampling and padding, with their backward ops, written with
// device ops after ATen's own checks: average pooling (2-d, and 1-d through
// it), adaptive average and max pooling, nearest (legacy and exact) and
// linear upsampling in 1, 2 and 3 dimensions, and reflection and replication
// padding in 1, 2 and 3 dimensions.
//
// Windows are visited in CPU's order, so a window's sum, average or maximum
// is CPU's bit for bit: average pooling is one launch of the engine's `pool`
// kernel; adaptive windows are strided views when they are all alike, one
// elementwise launch per window position, else gathers of each window's
// a-th row and b-th column.
// Index tables (which input row each output row reads) are computed on the
// host from the sizes alone, with ATen's own index functions, and copied to
// the device as launch data; values never leave the device. float16 and
// bfloat16 compute in float32, as CPU's opmath.

#include <algorithm>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/native/AdaptivePooling.h>
#include <ATen/native/Padding.h>
#include <ATen/native/UpSample.h>
#include <ATen/ops/adaptive_max_pool2d_backward_meta.h>
#include <ATen/ops/adaptive_max_pool2d_meta.h>
#include <ATen/ops/avg_pool2d_backward_meta.h>
#include <ATen/ops/avg_pool2d_meta.h>
#include <torch/library.h>

#include "OpenRegEngine.h"
#include "OpenRegNN.h"
#include "OpenRegStructured.h"

namespace openreg::nn {
namespace {

using structured::Functional;

Tensor long_table(const std::vector<int64_t>& values, const Tensor& like) {
  return at::tensor(values, at::TensorOptions().dtype(at::kLong)).to(like.device());
}

// A 1-d table of `values` shaped to broadcast along dimension `dim` of an
// `ndim`-dimensional tensor.
Tensor along(const Tensor& table, int64_t dim, int64_t ndim) {
  std::vector<int64_t> shape(ndim, 1);
  shape[dim] = table.numel();
  return table.view(shape);
}

// (N, C, H, W): a 3-d (C, H, W) input gains a batch of one.
Tensor batched(const Tensor& t) {
  return t.dim() == 3 ? t.unsqueeze(0) : t;
}

// ---- fixed windows ----

struct Window2d {
  int64_t kh, kw, sh, sw, ph, pw;
};

Window2d window2d(at::IntArrayRef kernel_size, at::IntArrayRef stride, at::IntArrayRef padding) {
  Window2d w{};
  w.kh = kernel_size[0];
  w.kw = kernel_size.size() == 1 ? w.kh : kernel_size[1];
  w.sh = stride.empty() ? w.kh : stride[0];
  w.sw = stride.empty() ? w.kw : (stride.size() == 1 ? w.sh : stride[1]);
  w.ph = padding[0];
  w.pw = padding.size() == 1 ? w.ph : padding[1];
  return w;
}

// Window position (i, j) of every output at once: a strided view of `padded`.
Tensor window_position(const Tensor& padded, const Window2d& w, int64_t oh, int64_t ow, int64_t i, int64_t j) {
  const auto s = padded.strides();
  return padded.as_strided({padded.size(0), padded.size(1), oh, ow}, {s[0], s[1], w.sh * s[2], w.sw * s[3]},
                           padded.storage_offset() + i * s[2] + j * s[3]);
}

// Each window's sum, its positions added in CPU's order (row by row).
Tensor window_sum(const Tensor& padded, const Window2d& w, int64_t oh, int64_t ow) {
  Tensor sum = at::zeros({padded.size(0), padded.size(1), oh, ow}, padded.options());
  for (int64_t i = 0; i < w.kh; ++i) {
    for (int64_t j = 0; j < w.kw; ++j) {
      sum.add_(window_position(padded, w, oh, ow, i, j));
    }
  }
  return sum;
}

// Adds `values` (N, C, oh, ow) into every position of its window: the
// backward of window_sum, into an (N, C, H, W) gradient (windows without
// padding).
Tensor window_spread(const Tensor& values, const Window2d& w, int64_t H, int64_t W) {
  const int64_t oh = values.size(2), ow = values.size(3);
  Tensor grad = at::zeros({values.size(0), values.size(1), H, W}, values.options());
  for (int64_t i = 0; i < w.kh; ++i) {
    for (int64_t j = 0; j < w.kw; ++j) {
      window_position(grad, w, oh, ow, i, j).add_(values);
    }
  }
  return grad;
}

// The dtypes CPU averages (others go to the fallback, which refuses them as CPU does).
bool averages(at::ScalarType dtype) {
  return at::isFloatingType(dtype) || dtype == at::kLong;
}

// One launch of the pool kernel's `op` from `src` into `out` (planes of
// out's last two sizes), through a contiguous NCHW result.
Tensor& pool_into(Tensor& out, const Tensor& src, engine::or_pool_op op, const engine::PoolWindow& window) {
  if (out.numel() == 0) {
    return out;
  }
  const Tensor x = pool_operand(batched(src));
  const Tensor result = at::empty({x.size(0), x.size(1), out.size(-2), out.size(-1)}, x.options());
  engine::launch_pool(op, x, result, Tensor(), window);
  out.copy_(result.view(out.sizes()));
  return out;
}

engine::PoolWindow avg_window(at::IntArrayRef kernel_size, at::IntArrayRef stride, at::IntArrayRef padding,
                              bool count_include_pad, std::optional<int64_t> divisor_override) {
  const Window2d w = window2d(kernel_size, stride, padding);
  return {{w.kh, w.kw}, {w.sh, w.sw}, {w.ph, w.pw}, {1, 1}, count_include_pad, divisor_override.value_or(0)};
}

// Each window's sum in CPU's order over the divisor CPU uses: one `pool`
// launch.
Tensor avg_pool2d_kernel(const Tensor& input, at::IntArrayRef kernel_size, at::IntArrayRef stride,
                         at::IntArrayRef padding, bool ceil_mode, bool count_include_pad,
                         std::optional<int64_t> divisor_override) {
  if (!structured::engine_handles(input) || !averages(input.scalar_type())) {
    return structured::fallback<at::_ops::avg_pool2d>(input, kernel_size, stride, padding, ceil_mode,
                                                      count_include_pad, divisor_override);
  }
  Functional<at::meta::structured_avg_pool2d> op; // ATen's checks; the output in the input's memory format
  op.meta(input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override);
  return pool_into(op.outputs_[0], input, engine::OR_POOL_AVG,
                   avg_window(kernel_size, stride, padding, count_include_pad, divisor_override));
}

// Each output's gradient over its divisor, added into every input of its
// window: one `pool` launch.
Tensor avg_pool2d_backward_kernel(const Tensor& grad_output, const Tensor& input, at::IntArrayRef kernel_size,
                                  at::IntArrayRef stride, at::IntArrayRef padding, bool ceil_mode,
                                  bool count_include_pad, std::optional<int64_t> divisor_override) {
  if (!structured::engine_handles(grad_output, input) || !at::isFloatingType(input.scalar_type())) {
    return structured::fallback<at::_ops::avg_pool2d_backward>(grad_output, input, kernel_size, stride, padding,
                                                               ceil_mode, count_include_pad, divisor_override);
  }
  Functional<at::meta::structured_avg_pool2d_backward> op;
  op.meta(grad_output, input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override);
  return pool_into(op.outputs_[0], grad_output, engine::OR_POOL_AVG_BACKWARD,
                   avg_window(kernel_size, stride, padding, count_include_pad, divisor_override));
}

// ---- variable windows: adaptive pooling ----

// Output position o's window along one dimension: input positions
// [start(o), end(o)) as ATen cuts them; each window's a-th position (its
// last one where the window is shorter) and whether it exists.
struct AdaptiveAxis {
  std::vector<int64_t> start, length;
  int64_t longest = 0;
  bool uniform = false; // every window the same length and stride: fixed windows

  AdaptiveAxis(int64_t in, int64_t out) : start(out), length(out) {
    for (int64_t o = 0; o < out; ++o) {
      start[o] = at::native::start_index(o, out, in);
      length[o] = at::native::end_index(o, out, in) - start[o];
      longest = std::max(longest, length[o]);
    }
    uniform = in % out == 0;
  }

  std::vector<int64_t> position(int64_t a) const {
    std::vector<int64_t> p(start.size());
    for (size_t o = 0; o < p.size(); ++o) {
      p[o] = start[o] + std::min(a, length[o] - 1);
    }
    return p;
  }

  std::vector<int64_t> inside(int64_t a) const {
    std::vector<int64_t> p(start.size());
    for (size_t o = 0; o < p.size(); ++o) {
      p[o] = a < length[o];
    }
    return p;
  }
};

// Every window's position (a, b), in CPU's order: its index into the
// H x W plane (oh, ow), whether it lies inside its window (undefined where
// every window has it) and, when `x` is defined, the (N, C, oh, ow) gather of
// x's elements there.
template <class Visit>
void each_adaptive_position(const Tensor& x, int64_t W, const AdaptiveAxis& rows, const AdaptiveAxis& cols,
                            const Tensor& like, Visit visit) {
  const int64_t all_rows = *std::min_element(rows.length.begin(), rows.length.end());
  const int64_t all_cols = *std::min_element(cols.length.begin(), cols.length.end());
  std::vector<Tensor> col_tables;
  for (int64_t b = 0; b < cols.longest; ++b) {
    col_tables.push_back(long_table(cols.position(b), like));
  }
  for (int64_t a = 0; a < rows.longest; ++a) {
    const Tensor r = long_table(rows.position(a), like);
    const Tensor picked_rows = x.defined() ? x.index_select(2, r) : Tensor();
    for (int64_t b = 0; b < cols.longest; ++b) {
      const Tensor& c = col_tables[b];
      const Tensor index = along(r, 2, 4) * W + along(c, 3, 4);
      Tensor inside;
      if (a >= all_rows || b >= all_cols) {
        inside = along(long_table(rows.inside(a), like), 2, 4)
                     .mul(along(long_table(cols.inside(b), like), 3, 4))
                     .to(at::kBool);
      }
      visit(x.defined() ? picked_rows.index_select(3, c) : Tensor(), index, inside);
    }
  }
}

Tensor lengths(const AdaptiveAxis& axis, int64_t dim, const Tensor& like) {
  return along(long_table(axis.length, like), dim, 4);
}

void check_adaptive_input(const Tensor& input, at::IntArrayRef output_size, const char* op) {
  TORCH_CHECK(output_size.size() == 2, op, ": output_size must be 2");
  TORCH_CHECK(input.dim() == 3 || input.dim() == 4, op, "(): Expected 3D or 4D tensor, but got ", input.sizes());
  for (const int64_t i : {-2, -1}) {
    TORCH_CHECK(input.size(i) > 0, op, "(): Expected input to have non-zero size for non-batch dimensions, but input "
                "has sizes ", input.sizes(), " with dimension ", i + input.dim(), " being empty");
  }
}

// Each window's sum over its size, CPU's `sum / kh / kw`.
Tensor adaptive_avg_pool2d_kernel(const Tensor& input, c10::SymIntArrayRef output_size_sym) {
  if (!structured::engine_handles(input)) {
    return structured::fallback<at::_ops::_adaptive_avg_pool2d>(input, output_size_sym);
  }
  const auto output_size = C10_AS_INTARRAYREF_SLOW(output_size_sym);
  check_adaptive_input(input, output_size, "adaptive_avg_pool2d");
  check_floating(input, "adaptive_avg_pool2d");
  const Tensor x = in_opmath(batched(input));
  const int64_t oh = output_size[0], ow = output_size[1];
  const AdaptiveAxis rows(x.size(2), oh), cols(x.size(3), ow);
  Tensor sum;
  if (rows.uniform && cols.uniform) {
    const Window2d w{rows.longest, cols.longest, rows.longest, cols.longest, 0, 0};
    sum = window_sum(x, w, oh, ow);
  } else {
    sum = at::zeros({x.size(0), x.size(1), oh, ow}, x.options());
    each_adaptive_position(x, x.size(3), rows, cols, x, [&](const Tensor& v, const Tensor&, const Tensor& inside) {
      sum.add_(inside.defined() ? at::where(inside, v, 0) : v);
    });
  }
  std::vector<int64_t> out_shape(input.sizes().begin(), input.sizes().end() - 2);
  out_shape.push_back(oh);
  out_shape.push_back(ow);
  Tensor out = at::empty(out_shape, input.options().memory_format(input.suggest_memory_format()));
  out.copy_(sum.div(lengths(rows, 2, x)).div_(lengths(cols, 3, x)).view(out_shape));
  return out;
}

// Each output's gradient / kh / kw, added into every input of its window.
Tensor adaptive_avg_pool2d_backward_kernel(const Tensor& grad_output, const Tensor& input) {
  if (!structured::engine_handles(grad_output, input)) {
    return structured::fallback<at::_ops::_adaptive_avg_pool2d_backward>(grad_output, input);
  }
  check_floating(input, "adaptive_avg_pool2d_backward");
  TORCH_CHECK(grad_output.dim() == input.dim(), "adaptive_avg_pool2d_backward(): Expected grad_output to have the "
              "same number of dimensions as input, got ", grad_output.dim(), " and ", input.dim());
  const Tensor g = in_opmath(batched(grad_output));
  const int64_t H = input.size(-2), W = input.size(-1), oh = g.size(2), ow = g.size(3);
  const AdaptiveAxis rows(H, oh), cols(W, ow);
  const Tensor share = g.div(lengths(rows, 2, g)).div_(lengths(cols, 3, g));
  Tensor grad;
  if (rows.uniform && cols.uniform) {
    grad = window_spread(share, Window2d{rows.longest, cols.longest, rows.longest, cols.longest, 0, 0}, H, W);
  } else {
    grad = at::zeros({g.size(0), g.size(1), H * W}, g.options());
    each_adaptive_position(Tensor(), W, rows, cols, g, [&](const Tensor&, const Tensor& index, const Tensor& inside) {
      const Tensor part = inside.defined() ? at::where(inside, share, 0) : share;
      grad.scatter_add_(2, index.expand({g.size(0), g.size(1), oh, ow}).reshape({g.size(0), g.size(1), oh * ow}),
                        part.reshape({g.size(0), g.size(1), oh * ow}));
    });
  }
  Tensor grad_input = at::empty_like(input, input.suggest_memory_format());
  grad_input.copy_(grad.view(input.sizes()));
  return grad_input;
}

std::tuple<Tensor, Tensor> adaptive_max_pool2d_kernel(const Tensor& input, at::IntArrayRef output_size) {
  if (!structured::engine_handles(input)) {
    return structured::fallback<at::_ops::adaptive_max_pool2d>(input, output_size);
  }
  check_floating(input, "adaptive_max_pool2d");
  Functional<at::meta::structured_adaptive_max_pool2d> op; // checks; output and indices
  op.meta(input, output_size);
  Tensor& out = op.outputs_[0];
  Tensor& indices = op.outputs_[1];
  if (out.numel() == 0) {
    return {out, indices};
  }
  const Tensor x = batched(input);
  const int64_t oh = output_size[0], ow = output_size[1];
  const AdaptiveAxis rows(x.size(2), oh), cols(x.size(3), ow);
  const Tensor first = along(long_table(rows.start, x), 2, 4) * x.size(3) + along(long_table(cols.start, x), 3, 4);
  WindowMax best{at::full({x.size(0), x.size(1), oh, ow}, lowest_of(x.scalar_type()), x.options()),
                 first.expand({x.size(0), x.size(1), oh, ow})};
  each_adaptive_position(x, x.size(3), rows, cols, x, [&](const Tensor& v, const Tensor& index, const Tensor& inside) {
    best.visit(v, index, inside);
  });
  out.copy_(best.values.view(out.sizes()));
  indices.copy_(best.indices.view(indices.sizes()));
  return {out, indices};
}

Tensor adaptive_max_pool2d_backward_kernel(const Tensor& grad_output, const Tensor& input, const Tensor& indices) {
  if (!structured::engine_handles(grad_output, input, indices)) {
    return structured::fallback<at::_ops::adaptive_max_pool2d_backward>(grad_output, input, indices);
  }
  Functional<at::meta::structured_adaptive_max_pool2d_backward> op;
  op.meta(grad_output, input, indices);
  Tensor& grad_input = op.outputs_[0];
  grad_input.copy_(scatter_to_picks(grad_output, input, indices));
  return grad_input;
}

// ---- upsampling ----

// The input position each output position reads along one dimension.
std::vector<int64_t> nearest_table(int64_t in, int64_t out, std::optional<double> scale, bool exact) {
  std::vector<int64_t> table(out);
  for (int64_t o = 0; o < out; ++o) {
    table[o] = exact ? at::native::nearest_exact_idx(o, in, out, scale) : at::native::nearest_idx(o, in, out, scale);
  }
  return table;
}

// The spatial sizes of an (N, C, spatial...) shape.
std::vector<int64_t> spatial(at::IntArrayRef sizes) {
  return {sizes.begin() + 2, sizes.end()};
}

void check_upsample(at::IntArrayRef input_size, at::IntArrayRef output_size, size_t dims) {
  TORCH_CHECK(output_size.size() == dims, "It is expected output_size equals to ", dims, ", but got size ",
              output_size.size());
  TORCH_CHECK(input_size.size() == dims + 2, "It is expected input_size equals to ", dims + 2, ", but got size ",
              input_size.size());
  for (size_t d = 0; d < dims; ++d) {
    TORCH_CHECK(input_size[2 + d] > 0 && output_size[d] > 0, "Input and output sizes should be greater than 0, but "
                "got input ", input_size, " and output ", output_size);
  }
}

// `t` in `dtype` and memory `format` (as CPU allocates upsampling's
// results): itself when it already is, else a converted copy.
Tensor as_layout(const Tensor& t, at::ScalarType dtype, at::MemoryFormat format) {
  if (t.scalar_type() == dtype && t.is_contiguous(format)) {
    return t;
  }
  Tensor out = at::empty(t.sizes(), t.options().dtype(dtype).memory_format(format));
  out.copy_(t);
  return out;
}

// Nearest upsampling reads one input position per output position along each
// dimension: a gather per dimension. Its backward adds each output's
// gradient into the position it read, one dimension at a time.
template <class Op, bool Exact, class... Scales>
Tensor upsample_nearest_kernel(const Tensor& input, c10::SymIntArrayRef output_size_sym, Scales... scales) {
  if (!structured::engine_handles(input)) {
    return structured::fallback<Op>(input, output_size_sym, scales...);
  }
  const auto output_size = C10_AS_INTARRAYREF_SLOW(output_size_sym);
  check_upsample(input.sizes(), output_size, sizeof...(Scales));
  const std::vector<std::optional<double>> scale{scales...};
  Tensor x = input;
  for (size_t d = 0; d < scale.size(); ++d) {
    x = x.index_select(2 + d, long_table(nearest_table(input.size(2 + d), output_size[d], scale[d], Exact), x));
  }
  return as_layout(x, input.scalar_type(), input.suggest_memory_format());
}

template <class Op, bool Exact, class... Scales>
Tensor upsample_nearest_backward_kernel(const Tensor& grad_output, c10::SymIntArrayRef output_size_sym,
                                        c10::SymIntArrayRef input_size_sym, Scales... scales) {
  if (!structured::engine_handles(grad_output)) {
    return structured::fallback<Op>(grad_output, output_size_sym, input_size_sym, scales...);
  }
  const auto output_size = C10_AS_INTARRAYREF_SLOW(output_size_sym);
  const auto input_size = C10_AS_INTARRAYREF_SLOW(input_size_sym);
  check_upsample(input_size, output_size, sizeof...(Scales));
  TORCH_CHECK(spatial(grad_output.sizes()) == std::vector<int64_t>(output_size.begin(), output_size.end()) &&
                  grad_output.size(0) == input_size[0] && grad_output.size(1) == input_size[1],
              "Expected grad_output to have the size of the upsampled input: got ", grad_output.sizes(),
              " for output_size ", output_size, " and input_size ", input_size);
  const std::vector<std::optional<double>> scale{scales...};
  Tensor g = in_opmath(grad_output);
  for (size_t d = scale.size(); d-- > 0;) {
    std::vector<int64_t> shape(g.sizes().begin(), g.sizes().end());
    shape[2 + d] = input_size[2 + d];
    g = at::zeros(shape, g.options())
            .index_add_(2 + d, long_table(nearest_table(input_size[2 + d], output_size[d], scale[d], Exact), g), g);
  }
  return as_layout(g, grad_output.scalar_type(), grad_output.suggest_memory_format());
}

// Linear interpolation along one dimension: each output position reads two
// input positions with weights, computed as CPU computes them (the weights
// in the input's dtype, the arithmetic in its compute type).
struct LinearTable {
  Tensor index0, index1, lambda0, lambda1;
};

LinearTable linear_table(int64_t in, int64_t out, bool align_corners, std::optional<double> scale,
                         at::ScalarType dtype, const Tensor& like) {
  std::vector<int64_t> i0(out), i1(out);
  std::vector<double> l0(out), l1(out);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dtype, "upsample_linear", [&] {
    using opmath_t = at::opmath_type<scalar_t>;
    const opmath_t ratio = at::native::area_pixel_compute_scale<opmath_t>(in, out, align_corners, scale);
    for (int64_t o = 0; o < out; ++o) {
      scalar_t lambda0, lambda1;
      at::native::compute_source_index_and_lambda<scalar_t, opmath_t>(i0[o], i1[o], lambda0, lambda1, ratio, o, in,
                                                                        out, align_corners);
      l0[o] = static_cast<double>(lambda0);
      l1[o] = static_cast<double>(lambda1);
    }
  });
  const auto weights = [&](const std::vector<double>& l) {
    return at::tensor(l, at::TensorOptions().dtype(at::kDouble)).to(like.device()).to(opmath(dtype));
  };
  return {long_table(i0, like), long_table(i1, like), weights(l0), weights(l1)};
}

// Dimensions are interpolated innermost first: CPU's sum, w0 * (h0 * ...),
// nests the same way.
template <class Op, class... Scales>
Tensor upsample_linear_kernel(const Tensor& input, c10::SymIntArrayRef output_size_sym, bool align_corners,
                              Scales... scales) {
  if (!structured::engine_handles(input)) {
    return structured::fallback<Op>(input, output_size_sym, align_corners, scales...);
  }
  check_floating(input, "upsample_linear");
  const auto output_size = C10_AS_INTARRAYREF_SLOW(output_size_sym);
  check_upsample(input.sizes(), output_size, sizeof...(Scales));
  const std::vector<std::optional<double>> scale{scales...};
  Tensor x = in_opmath(input);
  for (size_t d = scale.size(); d-- > 0;) {
    const int64_t dim = 2 + d;
    const LinearTable t = linear_table(input.size(dim), output_size[d], align_corners, scale[d], input.scalar_type(), x);
    x = x.index_select(dim, t.index0)
            .mul_(along(t.lambda0, dim, x.dim()))
            .add_(x.index_select(dim, t.index1).mul_(along(t.lambda1, dim, x.dim())));
  }
  return as_layout(x, input.scalar_type(), input.suggest_memory_format());
}

template <class Op, class... Scales>
Tensor upsample_linear_backward_kernel(const Tensor& grad_output, c10::SymIntArrayRef output_size_sym,
                                       c10::SymIntArrayRef input_size_sym, bool align_corners, Scales... scales) {
  if (!structured::engine_handles(grad_output)) {
    return structured::fallback<Op>(grad_output, output_size_sym, input_size_sym, align_corners, scales...);
  }
  check_floating(grad_output, "upsample_linear_backward");
  const auto output_size = C10_AS_INTARRAYREF_SLOW(output_size_sym);
  const auto input_size = C10_AS_INTARRAYREF_SLOW(input_size_sym);
  check_upsample(input_size, output_size, sizeof...(Scales));
  TORCH_CHECK(spatial(grad_output.sizes()) == std::vector<int64_t>(output_size.begin(), output_size.end()) &&
                  grad_output.size(0) == input_size[0] && grad_output.size(1) == input_size[1],
              "Expected grad_output to have the size of the upsampled input: got ", grad_output.sizes(),
              " for output_size ", output_size, " and input_size ", input_size);
  const std::vector<std::optional<double>> scale{scales...};
  Tensor g = in_opmath(grad_output);
  for (size_t d = 0; d < scale.size(); ++d) {
    const int64_t dim = 2 + d;
    const LinearTable t =
        linear_table(input_size[dim], output_size[d], align_corners, scale[d], grad_output.scalar_type(), g);
    std::vector<int64_t> shape(g.sizes().begin(), g.sizes().end());
    shape[dim] = input_size[dim];
    g = at::zeros(shape, g.options())
            .index_add_(dim, t.index0, g * along(t.lambda0, dim, g.dim()))
            .index_add_(dim, t.index1, g * along(t.lambda1, dim, g.dim()));
  }
  return as_layout(g, grad_output.scalar_type(), grad_output.suggest_memory_format());
}

// ---- reflection and replication padding ----

// The input position each output position reads along one padded dimension
// (a negative pad crops).
Tensor pad_table(int64_t in, int64_t before, int64_t after, bool reflect, const Tensor& like) {
  std::vector<int64_t> table(in + before + after);
  for (int64_t o = 0; o < static_cast<int64_t>(table.size()); ++o) {
    int64_t i = o - before;
    if (reflect) {
      i = i < 0 ? -i : (i >= in ? 2 * (in - 1) - i : i);
    } else {
      i = std::clamp<int64_t>(i, 0, in - 1);
    }
    table[o] = i;
  }
  return long_table(table, like);
}

template <class Op, int Dims, bool Reflect>
Tensor pad_kernel(const Tensor& input, c10::SymIntArrayRef padding_sym) {
  if (!structured::engine_handles(input)) {
    return structured::fallback<Op>(input, padding_sym);
  }
  const auto padding = C10_AS_INTARRAYREF_SLOW(padding_sym);
  at::native::padding::pad_shape_check(input, padding, Dims, Reflect);
  Tensor x = input;
  for (int64_t i = 0; i < Dims; ++i) {
    const int64_t dim = input.dim() - 1 - i;
    x = x.index_select(dim, pad_table(input.size(dim), padding[2 * i], padding[2 * i + 1], Reflect, x));
  }
  return x;
}

// Each output's gradient added into the position it read.
template <class Op, int Dims, bool Reflect>
Tensor pad_backward_kernel(const Tensor& grad_output, const Tensor& input, c10::SymIntArrayRef padding_sym) {
  if (!structured::engine_handles(grad_output, input)) {
    return structured::fallback<Op>(grad_output, input, padding_sym);
  }
  const auto padding = C10_AS_INTARRAYREF_SLOW(padding_sym);
  at::native::padding::check_valid_input(input, padding, Dims);
  at::native::padding::pad_backward_shape_check(grad_output, input, padding, Dims);
  Tensor g = grad_output;
  for (int64_t i = 0; i < Dims; ++i) {
    const int64_t dim = input.dim() - 1 - i;
    std::vector<int64_t> shape(g.sizes().begin(), g.sizes().end());
    shape[dim] = input.size(dim);
    g = at::zeros(shape, g.options())
            .index_add_(dim, pad_table(input.size(dim), padding[2 * i], padding[2 * i + 1], Reflect, g), g);
  }
  return g;
}

using Scale = std::optional<double>;

// ---- max unpooling ----

// max_unpool2d/3d: zeros, with each input value written to the position its
// index names in its plane (the last write wins when indices repeat, as in
// CPU's loop); an index outside the plane stops the scatter (the device-side
// check, reported at the next synchronizing call).
Tensor max_unpool(const Tensor& self, const Tensor& indices, at::IntArrayRef output_size, int64_t dims) {
  const char* name = dims == 2 ? "max_unpooling2d" : "max_unpooling3d";
  TORCH_CHECK(indices.scalar_type() == at::kLong, "elements in indices should be type int64 but got: ",
              indices.scalar_type());
  TORCH_CHECK(static_cast<int64_t>(output_size.size()) == dims, "There should be exactly ", dims,
              " elements in output_size, but got ", output_size.size(), " elements.");
  TORCH_CHECK(self.dim() == dims + 1 || self.dim() == dims + 2, "Input to ", name, " should be a ", dims + 1, "d or ",
              dims + 2, "d Tensor, but got a tensor with ", self.dim(), " dimensions.");
  TORCH_CHECK(self.sizes() == indices.sizes(), "Expected shape of indices to be same as that of the input tensor (",
              self.sizes(), ") but got indices tensor with shape: ", indices.sizes());
  for (int64_t d = 1; d < self.dim(); ++d) {
    TORCH_CHECK(self.size(d) > 0, name, "_forward_out(): Expected input to have non-zero size for non-batch "
                "dimensions, but got ", self.sizes(), " with dimension ", d, " being empty.");
  }
  auto shape = self.sizes().vec();
  int64_t plane = 1;
  for (int64_t d = 0; d < dims; ++d) {
    shape[self.dim() - dims + d] = output_size[d];
    plane *= output_size[d];
  }
  Tensor out = at::zeros(shape, self.options());
  const int64_t outer = self.dim() == dims + 2 ? self.size(0) * self.size(1) : self.size(0);
  if (out.numel() > 0 && self.numel() > 0) {
    out.view({outer, plane}).scatter_(1, indices.reshape({outer, -1}), self.reshape({outer, -1}));
  }
  return out;
}

Tensor max_unpool2d_kernel(const Tensor& self, const Tensor& indices, c10::SymIntArrayRef output_size) {
  if (!structured::engine_handles(self, indices)) {
    return structured::fallback<at::_ops::max_unpool2d>(self, indices, output_size);
  }
  openreg::count_op(structured::counted_name<at::_ops::max_unpool2d>(), true);
  return max_unpool(self, indices, C10_AS_INTARRAYREF_SLOW(output_size), 2);
}

Tensor max_unpool3d_kernel(const Tensor& self, const Tensor& indices, c10::SymIntArrayRef output_size,
                           at::IntArrayRef stride, at::IntArrayRef padding) {
  if (!structured::engine_handles(self, indices)) {
    return structured::fallback<at::_ops::max_unpool3d>(self, indices, output_size, stride, padding);
  }
  openreg::count_op(structured::counted_name<at::_ops::max_unpool3d>(), true);
  TORCH_CHECK(stride.size() == 3 && stride[0] > 0 && stride[1] > 0 && stride[2] > 0,
              "strides should be greater than zero, but got stride: ", stride);
  TORCH_CHECK(padding.size() == 3, "There should be exactly three elements (depth, height, width) in padding, but got: ",
              padding.size(), " elements.");
  return max_unpool(self, indices, C10_AS_INTARRAYREF_SLOW(output_size), 3);
}

} // namespace
} // namespace openreg::nn

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  using namespace openreg::nn;
  namespace ops = at::_ops;
  m.impl("max_unpool2d", TORCH_FN(max_unpool2d_kernel));
  m.impl("max_unpool3d", TORCH_FN(max_unpool3d_kernel));
  m.impl("avg_pool2d", TORCH_FN(avg_pool2d_kernel));
  m.impl("avg_pool2d_backward", TORCH_FN(avg_pool2d_backward_kernel));
  m.impl("_adaptive_avg_pool2d", TORCH_FN(adaptive_avg_pool2d_kernel));
  m.impl("_adaptive_avg_pool2d_backward", TORCH_FN(adaptive_avg_pool2d_backward_kernel));
  m.impl("adaptive_max_pool2d", TORCH_FN(adaptive_max_pool2d_kernel));
  m.impl("adaptive_max_pool2d_backward", TORCH_FN(adaptive_max_pool2d_backward_kernel));

  m.impl("upsample_nearest1d", TORCH_FN((upsample_nearest_kernel<ops::upsample_nearest1d, false, Scale>)));
  m.impl("upsample_nearest2d", TORCH_FN((upsample_nearest_kernel<ops::upsample_nearest2d, false, Scale, Scale>)));
  m.impl("upsample_nearest3d",
         TORCH_FN((upsample_nearest_kernel<ops::upsample_nearest3d, false, Scale, Scale, Scale>)));
  m.impl("_upsample_nearest_exact1d", TORCH_FN((upsample_nearest_kernel<ops::_upsample_nearest_exact1d, true, Scale>)));
  m.impl("_upsample_nearest_exact2d",
         TORCH_FN((upsample_nearest_kernel<ops::_upsample_nearest_exact2d, true, Scale, Scale>)));
  m.impl("_upsample_nearest_exact3d",
         TORCH_FN((upsample_nearest_kernel<ops::_upsample_nearest_exact3d, true, Scale, Scale, Scale>)));
  m.impl("upsample_nearest1d_backward",
         TORCH_FN((upsample_nearest_backward_kernel<ops::upsample_nearest1d_backward, false, Scale>)));
  m.impl("upsample_nearest2d_backward",
         TORCH_FN((upsample_nearest_backward_kernel<ops::upsample_nearest2d_backward, false, Scale, Scale>)));
  m.impl("upsample_nearest3d_backward",
         TORCH_FN((upsample_nearest_backward_kernel<ops::upsample_nearest3d_backward, false, Scale, Scale, Scale>)));
  m.impl("_upsample_nearest_exact1d_backward",
         TORCH_FN((upsample_nearest_backward_kernel<ops::_upsample_nearest_exact1d_backward, true, Scale>)));
  m.impl("_upsample_nearest_exact2d_backward",
         TORCH_FN((upsample_nearest_backward_kernel<ops::_upsample_nearest_exact2d_backward, true, Scale, Scale>)));
  m.impl("_upsample_nearest_exact3d_backward",
         TORCH_FN(
             (upsample_nearest_backward_kernel<ops::_upsample_nearest_exact3d_backward, true, Scale, Scale, Scale>)));

  m.impl("upsample_linear1d", TORCH_FN((upsample_linear_kernel<ops::upsample_linear1d, Scale>)));
  m.impl("upsample_bilinear2d", TORCH_FN((upsample_linear_kernel<ops::upsample_bilinear2d, Scale, Scale>)));
  m.impl("upsample_trilinear3d", TORCH_FN((upsample_linear_kernel<ops::upsample_trilinear3d, Scale, Scale, Scale>)));
  m.impl("upsample_linear1d_backward",
         TORCH_FN((upsample_linear_backward_kernel<ops::upsample_linear1d_backward, Scale>)));
  m.impl("upsample_bilinear2d_backward",
         TORCH_FN((upsample_linear_backward_kernel<ops::upsample_bilinear2d_backward, Scale, Scale>)));
  m.impl("upsample_trilinear3d_backward",
         TORCH_FN((upsample_linear_backward_kernel<ops::upsample_trilinear3d_backward, Scale, Scale, Scale>)));

  m.impl("reflection_pad1d", TORCH_FN((pad_kernel<ops::reflection_pad1d, 1, true>)));
  m.impl("reflection_pad2d", TORCH_FN((pad_kernel<ops::reflection_pad2d, 2, true>)));
  m.impl("reflection_pad3d", TORCH_FN((pad_kernel<ops::reflection_pad3d, 3, true>)));
  m.impl("replication_pad1d", TORCH_FN((pad_kernel<ops::replication_pad1d, 1, false>)));
  m.impl("replication_pad2d", TORCH_FN((pad_kernel<ops::replication_pad2d, 2, false>)));
  m.impl("replication_pad3d", TORCH_FN((pad_kernel<ops::replication_pad3d, 3, false>)));
  m.impl("reflection_pad1d_backward", TORCH_FN((pad_backward_kernel<ops::reflection_pad1d_backward, 1, true>)));
  m.impl("reflection_pad2d_backward", TORCH_FN((pad_backward_kernel<ops::reflection_pad2d_backward, 2, true>)));
  m.impl("reflection_pad3d_backward", TORCH_FN((pad_backward_kernel<ops::reflection_pad3d_backward, 3, true>)));
  m.impl("replication_pad1d_backward", TORCH_FN((pad_backward_kernel<ops::replication_pad1d_backward, 1, false>)));
  m.impl("replication_pad2d_backward", TORCH_FN((pad_backward_kernel<ops::replication_pad2d_backward, 2, false>)));
  m.impl("replication_pad3d_backward", TORCH_FN((pad_backward_kernel<ops::replication_pad3d_backward, 3, false>)));
}
