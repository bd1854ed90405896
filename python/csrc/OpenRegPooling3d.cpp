// 3-d pooling on the device, as 2-d pooling per kernel depth: max and
// average pooling (with indices, ceil_mode, padding, dilation, divisors) and
// adaptive average and max pooling, with their backward ops.
//
// A window of a 3-d pooling is a stack of kD 2-d windows, one per kernel
// depth, each at the same (h, w) position of another input depth: kernel
// depth k sees, for output depth t, input depth t * sD + k * dD - pD. So
// for each k the input is viewed as (N * C * oD) planes of one depth each
// (a strided view, copied once), pooled in 2-d by the device's own 2-d
// kernels, and the kD results are combined in kernel order: a maximum that
// is larger or NaN replaces the one found so far (CPU's first maximum, last
// NaN, in its depth-height-width scan), sums add. Adaptive windows are
// boxes, so their averages and maxima are separable: first over height and
// width, then over depth. Divisors depend only on sizes and are computed on
// the host.

#include <algorithm>
#include <array>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/native/Pool.h>
#include <torch/library.h>

#include "OpenRegEngine.h"
#include "OpenRegStructured.h"

namespace openreg::pooling3d {
namespace {

using at::Tensor;
using structured::counted_name;
using structured::engine_handles;
using structured::fallback;

using Triple = std::array<int64_t, 3>;

Triple triple(at::IntArrayRef v, const char* op, const char* name, Triple fill) {
  TORCH_CHECK(v.empty() || v.size() == 1 || v.size() == 3, op, ": ", name,
              " must either be a single int, or a tuple of three ints");
  if (v.empty()) {
    return fill;
  }
  return v.size() == 1 ? Triple{v[0], v[0], v[0]} : Triple{v[0], v[1], v[2]};
}

// A 4-d input, or a 5-d one whose batch alone may be empty (CPU's rule).
void check_input(const Tensor& self, const char* op) {
  const bool ok = (self.dim() == 4 || self.dim() == 5) && self.size(-1) > 0 && self.size(-2) > 0 &&
                  self.size(-3) > 0 && self.size(-4) > 0;
  TORCH_CHECK(ok, op, ": Expected 4D or 5D tensor with non-zero sizes outside the batch, but got ", self.sizes());
}

// The output of a pooling over an empty batch: (0, C, oD, oH, oW).
Tensor empty_batch(const Tensor& self, at::IntArrayRef out) {
  return at::empty({0, self.size(1), out[0], out[1], out[2]}, self.options());
}

// A 3-d pooling's geometry: input (N, C, D, H, W) (a 4-d input is one
// sample), kernel, stride, padding, dilation and the output's sizes.
struct Pool3d {
  Triple kernel, stride, padding, dilation, in, out;
  int64_t N, C;
  bool batched;
};

Pool3d pool3d_geometry(const Tensor& self, at::IntArrayRef kernel_size, at::IntArrayRef stride,
                       at::IntArrayRef padding, at::IntArrayRef dilation, bool ceil_mode, const char* op) {
  check_input(self, op);
  Pool3d p{};
  p.kernel = triple(kernel_size, op, "kernel_size", {0, 0, 0});
  p.stride = triple(stride, op, "stride", p.kernel);
  p.padding = triple(padding, op, "padding", {0, 0, 0});
  p.dilation = triple(dilation, op, "dilation", {1, 1, 1});
  TORCH_CHECK(!kernel_size.empty(), op, ": kernel_size must either be a single int, or a tuple of three ints");
  p.batched = self.dim() == 5;
  p.N = p.batched ? self.size(0) : 1;
  p.C = self.size(-4);
  for (int i = 0; i < 3; ++i) {
    p.in[i] = self.size(self.dim() - 3 + i);
    TORCH_CHECK(p.kernel[i] > 0, "kernel size should be greater than zero, but got kD: ", p.kernel[0], " kH: ",
                p.kernel[1], " kW: ", p.kernel[2]);
    TORCH_CHECK(p.stride[i] > 0, "stride should be greater than zero, but got dT: ", p.stride[0], " dH: ",
                p.stride[1], " dW: ", p.stride[2]);
    TORCH_CHECK(p.dilation[i] > 0, "dilation should be greater than zero, but got dilationT: ", p.dilation[0],
                " dilationH: ", p.dilation[1], " dilationW: ", p.dilation[2]);
    TORCH_CHECK(p.padding[i] >= 0 && p.kernel[i] / 2 >= p.padding[i],
                "pad should be smaller than or equal to half of kernel size, but got kT: ", p.kernel[0], " kW: ",
                p.kernel[2], " kH: ", p.kernel[1], " padT: ", p.padding[0], " padW: ", p.padding[2], " padH: ",
                p.padding[1]);
    p.out[i] = at::native::pooling_output_shape<int64_t>(p.in[i], p.kernel[i], p.padding[i], p.stride[i],
                                                         p.dilation[i], ceil_mode);
  }
  TORCH_CHECK(p.out[0] >= 1 && p.out[1] >= 1 && p.out[2] >= 1, "Given input size: (", p.C, "x", p.in[0], "x",
              p.in[1], "x", p.in[2], "). Calculated output size: (", p.C, "x", p.out[0], "x", p.out[1], "x",
              p.out[2], "). Output size is too small");
  return p;
}

// x as (N, C, D, H, W), padded along depth with zeros so that every kernel
// depth of every output depth lies inside (max pooling never takes a
// padding depth, average pooling adds its zeros).
Tensor padded_depth(const Pool3d& p, const Tensor& self) {
  const Tensor x = p.batched ? self : self.unsqueeze(0);
  const int64_t needed = (p.out[0] - 1) * p.stride[0] + p.dilation[0] * (p.kernel[0] - 1) + 1;
  const int64_t right = std::max<int64_t>(0, needed - p.in[0] - p.padding[0]);
  if (p.padding[0] == 0 && right == 0) {
    return x;
  }
  return at::constant_pad_nd(x, {0, 0, 0, 0, p.padding[0], right}, 0);
}

// The padded input at kernel depth k, one plane per (sample, channel, output
// depth): (N * C * oD, H, W), copied from a strided view.
Tensor planes_at(const Pool3d& p, const Tensor& padded, int64_t k) {
  const auto st = padded.strides();
  return padded
      .as_strided({p.N, p.C, p.out[0], p.in[1], p.in[2]}, {st[0], st[1], p.stride[0] * st[2], st[3], st[4]},
                  padded.storage_offset() + k * p.dilation[0] * st[2])
      .reshape({p.N * p.C * p.out[0], p.in[1], p.in[2]});
}

Tensor unbatched(const Pool3d& p, const Tensor& t) {
  return p.batched ? t : t.squeeze(0);
}

// ---- max pooling ----

// A max pooling's input gradient: each output gradient added to the input
// position its index names (flat within its depth-height-width volume), in
// output order (CPU's loop order).
Tensor scatter_to_indices(const Tensor& grad_output, const Tensor& self, const Tensor& indices) {
  const int64_t volume = self.size(-3) * self.size(-2) * self.size(-1);
  const int64_t planes = self.numel() / volume;
  Tensor grad = at::zeros({planes, volume}, grad_output.options());
  grad.scatter_add_(1, indices.reshape({planes, -1}), grad_output.reshape({planes, -1}));
  return grad.view(self.sizes());
}

std::tuple<Tensor, Tensor> max_pool3d_kernel(const Tensor& self, at::IntArrayRef kernel_size,
                                             at::IntArrayRef stride, at::IntArrayRef padding,
                                             at::IntArrayRef dilation, bool ceil_mode) {
  using Op = at::_ops::max_pool3d_with_indices;
  if (!engine_handles(self) || self.scalar_type() == at::kBool) {
    return fallback<Op>(self, kernel_size, stride, padding, dilation, ceil_mode);
  }
  openreg::count_op(counted_name<Op>(), true);
  const Pool3d p = pool3d_geometry(self, kernel_size, stride, padding, dilation, ceil_mode, "max_pool3d");
  if (self.numel() == 0) {
    return {empty_batch(self, p.out), empty_batch(self, p.out).to(at::kLong)};
  }
  const Tensor padded = padded_depth(p, self);
  const int64_t plane = p.in[1] * p.in[2];
  const Tensor first_depth = at::arange(p.out[0], self.options().dtype(at::kLong)).mul_(p.stride[0]).sub_(p.padding[0]);
  Tensor values, indices, found;
  for (int64_t k = 0; k < p.kernel[0]; ++k) {
    auto [v, i] = at::max_pool2d_with_indices(planes_at(p, padded, k), {p.kernel[1], p.kernel[2]},
                                              {p.stride[1], p.stride[2]}, {p.padding[1], p.padding[2]},
                                              {p.dilation[1], p.dilation[2]}, ceil_mode);
    v = v.view({p.N, p.C, p.out[0], p.out[1], p.out[2]});
    const Tensor depth = (first_depth + k * p.dilation[0]).view({1, 1, p.out[0], 1, 1});
    const Tensor flat = i.view(v.sizes()) + depth * plane;
    // a kernel depth in the padding never counts (so a window of -infs keeps its first input position)
    const Tensor inside = depth.ge(0).logical_and_(depth.lt(p.in[0])).expand(v.sizes());
    if (!values.defined()) {
      values = v;
      indices = flat;
      found = inside;
      continue;
    }
    const Tensor take = inside.logical_and(v.gt(values).logical_or_(v.isnan()).logical_or_(found.logical_not()));
    values = at::where(take, v, values);
    indices = at::where(take, flat, indices);
    found = found.logical_or(inside);
  }
  return {unbatched(p, values.contiguous()), unbatched(p, indices.contiguous())};
}

Tensor max_pool3d_backward_kernel(const Tensor& grad_output, const Tensor& self, at::IntArrayRef kernel_size,
                                  at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation,
                                  bool ceil_mode, const Tensor& indices) {
  using Op = at::_ops::max_pool3d_with_indices_backward;
  if (!engine_handles(grad_output, self)) {
    return fallback<Op>(grad_output, self, kernel_size, stride, padding, dilation, ceil_mode, indices);
  }
  openreg::count_op(counted_name<Op>(), true);
  if (self.numel() == 0) {
    return at::zeros_like(self);
  }
  pool3d_geometry(self, kernel_size, stride, padding, dilation, ceil_mode, "max_pool3d_backward"); // its checks
  return scatter_to_indices(grad_output, self, indices);
}

// ---- average pooling ----

// Per output position along one dimension: the window's size counting the
// padding (clipped to the padded input) and counting only the input.
std::pair<std::vector<int64_t>, std::vector<int64_t>> window_sizes(int64_t in, int64_t out, int64_t k, int64_t s,
                                                                   int64_t pad) {
  std::vector<int64_t> with_pad(out), inside(out);
  for (int64_t o = 0; o < out; ++o) {
    const int64_t start = o * s - pad;
    const int64_t end = std::min(start + k, in + pad);
    with_pad[o] = end - start;
    inside[o] = std::min(end, in) - std::max<int64_t>(start, 0);
  }
  return {with_pad, inside};
}

// The divisor of every output (oD, oH, oW) as CPU's avg_pool3d takes it: the
// override, or the window's size with or without padding; 1 for a window
// wholly in the padding (whose sum, and so output, is 0).
Tensor divisors(const Pool3d& p, bool count_include_pad, std::optional<int64_t> divisor_override,
                const Tensor& like) {
  std::array<std::pair<std::vector<int64_t>, std::vector<int64_t>>, 3> sizes;
  for (int i = 0; i < 3; ++i) {
    sizes[i] = window_sizes(p.in[i], p.out[i], p.kernel[i], p.stride[i], p.padding[i]);
  }
  std::vector<double> d;
  d.reserve(p.out[0] * p.out[1] * p.out[2]);
  for (int64_t t = 0; t < p.out[0]; ++t) {
    for (int64_t h = 0; h < p.out[1]; ++h) {
      for (int64_t w = 0; w < p.out[2]; ++w) {
        const int64_t inside = sizes[0].second[t] * sizes[1].second[h] * sizes[2].second[w];
        const int64_t with_pad = sizes[0].first[t] * sizes[1].first[h] * sizes[2].first[w];
        const bool empty = sizes[0].second[t] <= 0 || sizes[1].second[h] <= 0 || sizes[2].second[w] <= 0;
        d.push_back(empty ? 1.0
                          : static_cast<double>(divisor_override ? *divisor_override
                                                                 : count_include_pad ? with_pad : inside));
      }
    }
  }
  return at::tensor(d, at::TensorOptions().dtype(at::kDouble))
      .view({p.out[0], p.out[1], p.out[2]})
      .to(like.device(), like.scalar_type());
}

void check_divisor(std::optional<int64_t> divisor_override) {
  TORCH_CHECK(!divisor_override.has_value() || *divisor_override != 0, "divisor must be not zero");
}

Tensor avg_pool3d_kernel(const Tensor& self, at::IntArrayRef kernel_size, at::IntArrayRef stride,
                         at::IntArrayRef padding, bool ceil_mode, bool count_include_pad,
                         std::optional<int64_t> divisor_override) {
  using Op = at::_ops::avg_pool3d;
  if (!engine_handles(self) || self.scalar_type() == at::kBool) {
    return fallback<Op>(self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override);
  }
  openreg::count_op(counted_name<Op>(), true);
  check_divisor(divisor_override);
  const Pool3d p = pool3d_geometry(self, kernel_size, stride, padding, {1, 1, 1}, ceil_mode, "avg_pool3d");
  if (self.numel() == 0) {
    return empty_batch(self, p.out);
  }
  const Tensor padded = padded_depth(p, self);
  Tensor sums;
  for (int64_t k = 0; k < p.kernel[0]; ++k) {
    const Tensor part = at::avg_pool2d(planes_at(p, padded, k), {p.kernel[1], p.kernel[2]}, {p.stride[1], p.stride[2]},
                                       {p.padding[1], p.padding[2]}, ceil_mode, /*count_include_pad=*/true,
                                       /*divisor_override=*/1);
    sums = sums.defined() ? sums.add_(part) : part;
  }
  const Tensor d = divisors(p, count_include_pad, divisor_override, sums);
  // integers divide as CPU's kernel does in C++: truncating
  const Tensor out = at::div(sums.view({p.N, p.C, p.out[0], p.out[1], p.out[2]}), d,
                             at::isFloatingType(self.scalar_type()) ? std::nullopt
                                                                    : std::optional<c10::string_view>("trunc"));
  return unbatched(p, out);
}

// The output gradients divided by their windows' divisors, spread back over
// each kernel depth's 2-d windows (avg_pool2d's backward with divisor 1) and
// added at that depth.
Tensor avg_pool3d_backward_kernel(const Tensor& grad_output, const Tensor& self, at::IntArrayRef kernel_size,
                                  at::IntArrayRef stride, at::IntArrayRef padding, bool ceil_mode,
                                  bool count_include_pad, std::optional<int64_t> divisor_override) {
  using Op = at::_ops::avg_pool3d_backward;
  if (!engine_handles(grad_output, self) || !at::isFloatingType(self.scalar_type())) {
    return fallback<Op>(grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad,
                        divisor_override);
  }
  openreg::count_op(counted_name<Op>(), true);
  if (self.numel() == 0) {
    return at::zeros_like(self);
  }
  check_divisor(divisor_override);
  const Pool3d p = pool3d_geometry(self, kernel_size, stride, padding, {1, 1, 1}, ceil_mode, "avg_pool3d_backward");
  const Tensor d = divisors(p, count_include_pad, divisor_override, grad_output);
  const Tensor g = (grad_output.reshape({p.N, p.C, p.out[0], p.out[1], p.out[2]}) / d)
                       .reshape({p.N * p.C * p.out[0], p.out[1], p.out[2]});
  const Tensor shape_like = at::empty({p.N * p.C * p.out[0], p.in[1], p.in[2]}, grad_output.options());
  Tensor padded = at::zeros_like(padded_depth(p, self));
  for (int64_t k = 0; k < p.kernel[0]; ++k) {
    const Tensor part = at::avg_pool2d_backward(g, shape_like, {p.kernel[1], p.kernel[2]}, {p.stride[1], p.stride[2]},
                                                {p.padding[1], p.padding[2]}, ceil_mode, true, 1);
    const auto st = padded.strides();
    padded
        .as_strided({p.N, p.C, p.out[0], p.in[1], p.in[2]}, {st[0], st[1], p.stride[0] * st[2], st[3], st[4]},
                    padded.storage_offset() + k * st[2])
        .add_(part.view({p.N, p.C, p.out[0], p.in[1], p.in[2]}));
  }
  return padded.narrow(2, p.padding[0], p.in[0]).contiguous().view(self.sizes());
}

// ---- adaptive pooling: over height and width, then over depth ----

// x (N, C, D, H, W) as (N, C * D, H, W) pooled to (oH, oW), then as
// (N, C, D, oH * oW) pooled along depth to (oD, oH * oW): each a 2-d adaptive
// pooling whose second dimension keeps its size.
Tensor adaptive_avg_pool3d_kernel(const Tensor& self, c10::SymIntArrayRef output_size_sym) {
  using Op = at::_ops::_adaptive_avg_pool3d;
  if (!engine_handles(self) || !at::isFloatingType(self.scalar_type())) {
    return fallback<Op>(self, output_size_sym);
  }
  openreg::count_op(counted_name<Op>(), true);
  const auto output_size = C10_AS_INTARRAYREF_SLOW(output_size_sym);
  TORCH_CHECK(output_size.size() == 3, "adaptive_avg_pool3d: output_size must be 3");
  check_input(self, "adaptive_avg_pool3d()");
  if (self.numel() == 0) {
    return empty_batch(self, output_size);
  }
  const Tensor x = self.dim() == 5 ? self : self.unsqueeze(0);
  const int64_t N = x.size(0), C = x.size(1), D = x.size(2), H = x.size(3), W = x.size(4);
  const Tensor hw = at::_adaptive_avg_pool2d(x.reshape({N, C * D, H, W}), {output_size[1], output_size[2]});
  const Tensor out = at::_adaptive_avg_pool2d(hw.view({N, C, D, output_size[1] * output_size[2]}),
                                              {output_size[0], output_size[1] * output_size[2]});
  const Tensor result = out.view({N, C, output_size[0], output_size[1], output_size[2]});
  return self.dim() == 5 ? result : result.squeeze(0);
}

Tensor adaptive_avg_pool3d_backward_kernel(const Tensor& grad_output, const Tensor& self) {
  using Op = at::_ops::_adaptive_avg_pool3d_backward;
  if (!engine_handles(grad_output, self) || !at::isFloatingType(self.scalar_type())) {
    return fallback<Op>(grad_output, self);
  }
  openreg::count_op(counted_name<Op>(), true);
  if (self.numel() == 0) {
    return at::zeros_like(self);
  }
  const Tensor x = self.dim() == 5 ? self : self.unsqueeze(0);
  const int64_t N = x.size(0), C = x.size(1), D = x.size(2), H = x.size(3), W = x.size(4);
  const int64_t oD = grad_output.size(-3), oH = grad_output.size(-2), oW = grad_output.size(-1);
  const Tensor g = grad_output.reshape({N, C, oD, oH * oW});
  const Tensor g_depth = at::_adaptive_avg_pool2d_backward(g, at::empty({N, C, D, oH * oW}, g.options()));
  const Tensor g_plane = at::_adaptive_avg_pool2d_backward(g_depth.reshape({N, C * D, oH, oW}),
                                                           at::empty({N, C * D, H, W}, g.options()));
  return g_plane.view(self.sizes());
}

// Maxima of the height-width windows (with their flat h * W + w), then of
// the depth windows over those; the index combines both (d * H * W + hw).
std::tuple<Tensor, Tensor> adaptive_max_pool3d_kernel(const Tensor& self, at::IntArrayRef output_size) {
  using Op = at::_ops::adaptive_max_pool3d;
  if (!engine_handles(self) || !at::isFloatingType(self.scalar_type())) {
    return fallback<Op>(self, output_size);
  }
  openreg::count_op(counted_name<Op>(), true);
  TORCH_CHECK(output_size.size() == 3, "adaptive_max_pool3d: internal error: output_size.size() must be 3");
  check_input(self, "adaptive_max_pool3d()");
  if (self.numel() == 0) {
    return {empty_batch(self, output_size), empty_batch(self, output_size).to(at::kLong)};
  }
  const Tensor x = self.dim() == 5 ? self : self.unsqueeze(0);
  const int64_t N = x.size(0), C = x.size(1), D = x.size(2), H = x.size(3), W = x.size(4);
  const int64_t oD = output_size[0], oH = output_size[1], oW = output_size[2];
  auto [hw_values, hw_indices] = at::adaptive_max_pool2d(x.reshape({N, C * D, H, W}), {oH, oW});
  auto [values, depth_indices] =
      at::adaptive_max_pool2d(hw_values.view({N, C, D, oH * oW}), {oD, oH * oW}); // indices: d * (oH oW) + j
  const Tensor j = at::arange(oH * oW, depth_indices.options()).view({1, 1, 1, oH * oW});
  const Tensor d = (depth_indices - j).div_(oH * oW, "floor");
  const Tensor hw = hw_indices.view({N, C, D, oH * oW}).gather(2, d);
  Tensor indices = (d * (H * W) + hw).view({N, C, oD, oH, oW});
  Tensor result = values.view({N, C, oD, oH, oW});
  if (self.dim() == 4) {
    return {result.squeeze(0), indices.squeeze(0)};
  }
  return {result, indices};
}

Tensor adaptive_max_pool3d_backward_kernel(const Tensor& grad_output, const Tensor& self, const Tensor& indices) {
  using Op = at::_ops::adaptive_max_pool3d_backward;
  if (!engine_handles(grad_output, self)) {
    return fallback<Op>(grad_output, self, indices);
  }
  openreg::count_op(counted_name<Op>(), true);
  if (self.numel() == 0) {
    return at::zeros_like(self);
  }
  return scatter_to_indices(grad_output, self, indices);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("max_pool3d_with_indices", TORCH_FN(max_pool3d_kernel));
  m.impl("max_pool3d_with_indices_backward", TORCH_FN(max_pool3d_backward_kernel));
  m.impl("avg_pool3d", TORCH_FN(avg_pool3d_kernel));
  m.impl("avg_pool3d_backward", TORCH_FN(avg_pool3d_backward_kernel));
  m.impl("_adaptive_avg_pool3d", TORCH_FN(adaptive_avg_pool3d_kernel));
  m.impl("_adaptive_avg_pool3d_backward", TORCH_FN(adaptive_avg_pool3d_backward_kernel));
  m.impl("adaptive_max_pool3d", TORCH_FN(adaptive_max_pool3d_kernel));
  m.impl("adaptive_max_pool3d_backward", TORCH_FN(adaptive_max_pool3d_backward_kernel));
}

} // namespace
} // namespace openreg::pooling3d
