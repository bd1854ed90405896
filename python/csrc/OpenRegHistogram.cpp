// Binning on the device engine: searchsorted and bucketize (the engine's
// `search` kernel, CPU's binary search), bincount (index_add of ones or
// weights) and histc (ATen's histogram_histc_out over a PrivateUse1 entry
// for its linear-bins stub).
//
// The argument checks are ATen's own (BucketizationUtils.h) or CPU's,
// written out where ATen keeps them in its CPU kernels.

#include <algorithm>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/native/BucketizationUtils.h>
#include <ATen/native/Histogram.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/histc_native.h>
#include <torch/library.h>

#include "OpenRegEngine.h"
#include "OpenRegStructured.h"

namespace openreg::histogram {
namespace {

using at::Tensor;
using c10::Scalar;
using structured::counted_name;
using structured::engine_handles;
using structured::fallback;

// ---- searchsorted / bucketize ----

// The positions of `values` in the sorted last dimension of `sorted` (through
// `sorter` when given) into `out`, after ATen's own checks and promotion.
Tensor& searchsorted_into(const Tensor& sorted, const Tensor& values, bool out_int32, bool right,
                          std::optional<c10::string_view> side, const std::optional<Tensor>& sorter_opt,
                          Tensor& out) {
  const Tensor sorter = sorter_opt.value_or(Tensor());
  at::native::searchsorted_pre_check(sorted, values, out, out_int32, right, side, sorter);
  at::native::resize_output(out, values.sizes());
  if (values.numel() == 0) {
    return out;
  }
  Tensor trimmed_values, trimmed_sorted, trimmed_sorter;
  at::native::searchsorted_maybe_trim_input_tensors(trimmed_values, trimmed_sorted, trimmed_sorter, values, sorted,
                                                    sorter);
  const Tensor& v = trimmed_values.defined() ? trimmed_values : values;
  Tensor seq = trimmed_sorted.defined() ? trimmed_sorted : sorted;
  if (sorter.defined()) {
    // the sequence in sorted order: one gather, then a plain search
    seq = seq.gather(-1, trimmed_sorter.defined() ? trimmed_sorter : sorter);
  }
  const bool upper = right || (side.has_value() && *side == "right");
  if (out.is_contiguous()) {
    engine::launch_search(out, v, seq, upper);
  } else {
    Tensor result = at::empty(out.sizes(), out.options());
    engine::launch_search(result, v, seq, upper);
    out.copy_(result);
  }
  return out;
}

at::TensorOptions position_options(const Tensor& like, bool out_int32) {
  return like.options().dtype(out_int32 ? at::kInt : at::kLong);
}

Tensor& searchsorted_out(const Tensor& sorted, const Tensor& self, bool out_int32, bool right,
                         std::optional<c10::string_view> side, const std::optional<Tensor>& sorter, Tensor& out) {
  using Op = at::_ops::searchsorted_Tensor_out;
  if (!engine_handles(sorted, self, out)) {
    return fallback<Op>(sorted, self, out_int32, right, side, sorter, out);
  }
  openreg::count_op(counted_name<Op>(), true);
  return searchsorted_into(sorted, self, out_int32, right, side, sorter, out);
}

Tensor searchsorted(const Tensor& sorted, const Tensor& self, bool out_int32, bool right,
                    std::optional<c10::string_view> side, const std::optional<Tensor>& sorter) {
  using Op = at::_ops::searchsorted_Tensor;
  if (!engine_handles(sorted, self)) {
    return fallback<Op>(sorted, self, out_int32, right, side, sorter);
  }
  openreg::count_op(counted_name<Op>(), true);
  Tensor out = at::empty({0}, position_options(self, out_int32));
  return searchsorted_into(sorted, self, out_int32, right, side, sorter, out);
}

Tensor searchsorted_scalar(const Tensor& sorted, const Scalar& self, bool out_int32, bool right,
                           std::optional<c10::string_view> side, const std::optional<Tensor>& sorter) {
  using Op = at::_ops::searchsorted_Scalar;
  if (!engine_handles(sorted, self)) {
    return fallback<Op>(sorted, self, out_int32, right, side, sorter);
  }
  openreg::count_op(counted_name<Op>(), true);
  const Tensor value = at::native::searchsorted_scalar_tensor(self, sorted.device());
  Tensor out = at::empty({0}, position_options(sorted, out_int32));
  return searchsorted_into(sorted, value, out_int32, right, side, sorter, out);
}

void check_boundaries(const Tensor& boundaries) {
  TORCH_CHECK(boundaries.dim() == 1, "boundaries tensor must be 1 dimension, but got dim(", boundaries.dim(), ")");
}

Tensor& bucketize_out(const Tensor& self, const Tensor& boundaries, bool out_int32, bool right, Tensor& out) {
  using Op = at::_ops::bucketize_Tensor_out;
  if (!engine_handles(self, boundaries, out)) {
    return fallback<Op>(self, boundaries, out_int32, right, out);
  }
  openreg::count_op(counted_name<Op>(), true);
  check_boundaries(boundaries);
  return searchsorted_into(boundaries, self, out_int32, right, std::nullopt, std::nullopt, out);
}

Tensor bucketize(const Tensor& self, const Tensor& boundaries, bool out_int32, bool right) {
  using Op = at::_ops::bucketize_Tensor;
  if (!engine_handles(self, boundaries)) {
    return fallback<Op>(self, boundaries, out_int32, right);
  }
  openreg::count_op(counted_name<Op>(), true);
  check_boundaries(boundaries);
  Tensor out = at::empty({0}, position_options(self, out_int32));
  return searchsorted_into(boundaries, self, out_int32, right, std::nullopt, std::nullopt, out);
}

Tensor bucketize_scalar(const Scalar& self, const Tensor& boundaries, bool out_int32, bool right) {
  using Op = at::_ops::bucketize_Scalar;
  if (!engine_handles(self, boundaries)) {
    return fallback<Op>(self, boundaries, out_int32, right);
  }
  openreg::count_op(counted_name<Op>(), true);
  check_boundaries(boundaries);
  const Tensor value = at::native::searchsorted_scalar_tensor(self, boundaries.device());
  Tensor out = at::empty({0}, position_options(boundaries, out_int32));
  return searchsorted_into(boundaries, value, out_int32, right, std::nullopt, std::nullopt, out);
}

// ---- bincount ----

// Counts (or sums of weights) per value of a 1-d non-negative integer
// tensor: one index_add in input order, so sums are CPU's to the bit. The
// length, max(input) + 1 or minlength, is read back, as CPU reads it.
Tensor bincount(const Tensor& self, const std::optional<Tensor>& weights_opt, c10::SymInt minlength_sym) {
  using Op = at::_ops::bincount;
  if (!engine_handles(self, weights_opt)) {
    return fallback<Op>(self, weights_opt, minlength_sym);
  }
  openreg::count_op(counted_name<Op>(), true);
  const int64_t minlength = minlength_sym.expect_int();
  TORCH_CHECK(minlength >= 0, "minlength should be >= 0");
  TORCH_CHECK(at::isIntegralType(self.scalar_type(), /*includeBool=*/false),
              "\"bincount\" not implemented for '", self.scalar_type(), "'");
  const Tensor weights = weights_opt.value_or(Tensor());
  const bool has_weights = weights.defined();
  // CPU's result type: int64 counts, float32 sums of float32 weights, else float64
  const at::ScalarType result_type =
      !has_weights ? at::kLong : (weights.scalar_type() == at::kFloat ? at::kFloat : at::kDouble);
  if (self.dim() == 1 && self.numel() == 0) {
    return at::zeros({minlength}, self.options().dtype(at::kLong));
  }
  TORCH_CHECK(self.dim() == 1, "bincount only supports 1-d non-negative integral inputs.");
  if (has_weights) {
    TORCH_CHECK(weights.dim() == 1 && weights.size(0) == self.size(0),
                "weights should be 1-d and have the same length as input");
  }
  const auto [lowest, highest] = at::aminmax(self);
  const Tensor extremes = at::stack({lowest.to(at::kLong), highest.to(at::kLong)}).cpu();
  const int64_t* ends = extremes.const_data_ptr<int64_t>();
  TORCH_CHECK(ends[0] >= 0, "bincount only supports 1-d non-negative integral inputs.");
  const int64_t bins = std::max(ends[1] + 1, minlength);
  Tensor result = at::zeros({bins}, self.options().dtype(result_type));
  const Tensor addend = has_weights ? weights.to(result_type) : at::ones({self.size(0)}, result.options());
  result.index_add_(0, self.to(at::kLong), addend);
  return result;
}

// ---- histc: ATen's histogram_histc_out, over this entry for its stub ----

// The histogram of `self` over `bin_edges[0]` (a linear progression, one
// dimension: torch.histc) into `hist` (already sized, self's dtype), as CPU's
// linear kernel places elements: the bin by division (with `local_search`,
// corrected against the neighbouring edges, so an element on an edge lands
// where binary search would put it; histc asks for none), the last bin
// closed on the right, elements outside the range and NaNs left out.
void histogram_linear_kernel(const Tensor& self, const std::optional<Tensor>& weight, bool density, Tensor& hist,
                             const at::TensorList& bin_edges, bool local_search) {
  TORCH_CHECK(bin_edges.size() == 1 && !weight.has_value() && !density,
              "openreg: only torch.histc's one-dimensional histograms run on the device");
  TORCH_CHECK(at::isFloatingType(self.scalar_type()), "\"histc\" not implemented for '", self.scalar_type(), "'");
  const Tensor& edges = bin_edges[0];
  const int64_t bins = edges.numel() - 1;
  hist.zero_();
  if (self.numel() == 0 || bins < 1) {
    return;
  }
  const Tensor x = self.reshape({-1});
  const Tensor lo = edges.select(0, 0);
  const Tensor hi = edges.select(0, bins);
  const Tensor inside = x.ge(lo).logical_and_(x.le(hi));
  // the bin by division, in the input's dtype (CPU's formula), kept in range
  const Tensor guess = x.sub(lo).mul_(static_cast<double>(bins)).div_(hi - lo).nan_to_num_(0).clamp_(0, bins);
  const Tensor pos = guess.to(at::kLong);
  Tensor bin = pos;
  if (local_search) {
    // CPU's local search: pos_min - 1 + the number of edges in [pos_min, pos + 2) at or below x
    const Tensor first = (pos - 1).clamp_min_(0);
    bin = first - 1;
    for (int64_t j = 0; j < 3; ++j) {
      const Tensor at_edge = (first + j).clamp_max_(bins);
      const Tensor counted = (first + j).lt(pos + 2).logical_and_((first + j).le(bins));
      bin = bin + edges.index_select(0, at_edge).le(x).logical_and_(counted).to(at::kLong);
    }
  }
  bin = bin.clamp(0, bins - 1); // the last bin includes its right edge
  hist.index_add_(0, bin, inside.to(hist.scalar_type()));
}

} // namespace
} // namespace openreg::histogram

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(histogramdd_linear_stub, &openreg::histogram::histogram_linear_kernel)
} // namespace at::native

namespace openreg::histogram {
namespace {

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("searchsorted.Tensor", TORCH_FN(searchsorted));
  m.impl("searchsorted.Tensor_out", TORCH_FN(searchsorted_out));
  m.impl("searchsorted.Scalar", TORCH_FN(searchsorted_scalar));
  m.impl("bucketize.Tensor", TORCH_FN(bucketize));
  m.impl("bucketize.Tensor_out", TORCH_FN(bucketize_out));
  m.impl("bucketize.Scalar", TORCH_FN(bucketize_scalar));
  m.impl("bincount", TORCH_FN(bincount));
  OPENREG_NATIVE(m, histc, at::native::histogram_histc);
  OPENREG_NATIVE(m, histc_out, at::native::histogram_histc_out);
}

} // namespace
} // namespace openreg::histogram
