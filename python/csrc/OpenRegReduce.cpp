// The reduction family on the device engine: sum, mean, prod, nansum,
// amax/amin, max/min (values and indices, and over everything), argmax/
// argmin, aminmax, all/any, vector norms, var/std (and with the mean),
// cumsum/cumprod/cummax/cummin/logcumsumexp, and the order statistics over
// the device's stable sort (median, nanmedian, kthvalue, mode). Composite ops
// built from these (logsumexp, count_nonzero's and norm's Python paths,
// clip_grad_norm_, torch.equal, trace, ...) follow without entries or with
// one-line ones.
//
// ATen's own native functions and structured impls do the argument work
// (dims, keepdim, dtype=, output shape and dtype, empty inputs); they call a
// DispatchStub, whose PrivateUse1 entry below launches the engine's `reduce`
// kernel over the TensorIterator they built (engine::launch_reduce). ATen
// restricts var/std to CPU and CUDA, so those few are written here over the
// same iterator.

#include <cmath>
#include <limits>
#include <tuple>

#include <ATen/ATen.h>
#include <ATen/native/ReduceAllOps.h>
#include <ATen/native/ReduceOps.h>
#include <ATen/native/ReduceOpsUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/native/Sorting.h>
#include <ATen/native/TensorCompare.h>
#include <ATen/ops/all_native.h>
#include <ATen/ops/amax_native.h>
#include <ATen/ops/amin_native.h>
#include <ATen/ops/aminmax_native.h>
#include <ATen/ops/any_native.h>
#include <ATen/ops/argmax_native.h>
#include <ATen/ops/argmin_native.h>
#include <ATen/ops/cumprod_native.h>
#include <ATen/ops/cumsum_native.h>
#include <ATen/ops/norm_native.h>
#include <ATen/ops/linalg_vector_norm_native.h>
#include <ATen/ops/max_native.h>
#include <ATen/ops/mean_native.h>
#include <ATen/ops/min_native.h>
#include <ATen/ops/nansum_native.h>
#include <ATen/ops/prod_native.h>
#include <ATen/ops/sort_native.h>
#include <ATen/ops/sum_native.h>
#include <ATen/ops/topk_meta.h>
#include <torch/library.h>

#include "OpenRegEngine.h"
#include "OpenRegStructured.h"

namespace openreg::reduce {
using namespace openreg::engine; // the engine's ops: OR_REDUCE_SUM, ...
namespace {

using at::Tensor;
using at::TensorIterator;
using c10::Scalar;

// ---- DispatchStub entries: ATen's native functions call these ----

template <or_reduce_op Op>
void reduce_kernel(TensorIterator& iter) {
  launch_reduce(iter, Op);
}

void vector_norm_kernel(TensorIterator& iter, const Scalar& ord) {
  launch_reduce(iter, OR_REDUCE_NORM, {ord.toDouble()});
}

void std_var_kernel(TensorIterator& iter, double correction, bool take_sqrt) {
  launch_reduce(iter, OR_REDUCE_VAR, {correction, take_sqrt ? 1.0 : 0.0});
}

template <or_reduce_op Op>
void scan_kernel(const Tensor& result, const Tensor& self, int64_t dim) {
  launch_scan(result, self, dim, Op);
}

// max.dim / min.dim: values and indices along `dim`.
template <or_reduce_op Op>
void minmax_dim_kernel(const Tensor& values, const Tensor& indices, const Tensor& self, int64_t dim, bool keepdim) {
  auto iter = at::meta::make_reduction(self, values, indices, dim, keepdim, self.scalar_type(), at::kLong);
  launch_reduce(iter, Op);
}

// max() / min(): the extreme of every element, into a 0-dim result.
template <or_reduce_op Op>
void reduce_all_kernel(Tensor& result, const Tensor& self) {
  auto iter = at::native::make_reduction("openreg_reduce_all", result, self, std::nullopt, false, self.scalar_type());
  launch_reduce(iter, Op);
}

void sort_kernel(const at::TensorBase& self, const at::TensorBase& values, const at::TensorBase& indices, int64_t dim,
                 bool descending, bool /*stable: the device's sort always is*/) {
  (void)self; // ATen has copied self into values
  launch_sort(Tensor(values), Tensor(indices), dim, descending);
}

void aminmax_kernel(const Tensor& self, int64_t dim, bool keepdim, Tensor& min, Tensor& max) {
  auto iter = at::meta::make_reduction(self, min, max, dim, keepdim, self.scalar_type(), self.scalar_type());
  launch_reduce(iter, OR_REDUCE_MINMAX);
}

void aminmax_allreduce_kernel(const Tensor& self, Tensor& min, Tensor& max) {
  auto iter = at::native::make_reduction("aminmax", min, max, self, std::nullopt, false, self.scalar_type());
  launch_reduce(iter, OR_REDUCE_MINMAX);
}

} // namespace
} // namespace openreg::reduce

namespace at::native {
using namespace openreg::reduce;
using namespace openreg::engine;
REGISTER_PRIVATEUSE1_DISPATCH(sum_stub, &reduce_kernel<OR_REDUCE_SUM>)
REGISTER_PRIVATEUSE1_DISPATCH(nansum_stub, &reduce_kernel<OR_REDUCE_NANSUM>)
REGISTER_PRIVATEUSE1_DISPATCH(prod_stub, &reduce_kernel<OR_REDUCE_PROD>)
REGISTER_PRIVATEUSE1_DISPATCH(mean_stub, &reduce_kernel<OR_REDUCE_MEAN>)
REGISTER_PRIVATEUSE1_DISPATCH(and_stub, &reduce_kernel<OR_REDUCE_ALL>)
REGISTER_PRIVATEUSE1_DISPATCH(or_stub, &reduce_kernel<OR_REDUCE_ANY>)
REGISTER_PRIVATEUSE1_DISPATCH(max_values_stub, &reduce_kernel<OR_REDUCE_MAX>)
REGISTER_PRIVATEUSE1_DISPATCH(min_values_stub, &reduce_kernel<OR_REDUCE_MIN>)
REGISTER_PRIVATEUSE1_DISPATCH(argmax_stub, &reduce_kernel<OR_REDUCE_ARGMAX>)
REGISTER_PRIVATEUSE1_DISPATCH(argmin_stub, &reduce_kernel<OR_REDUCE_ARGMIN>)
REGISTER_PRIVATEUSE1_DISPATCH(norm_stub, &vector_norm_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(std_var_stub, &std_var_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(cumsum_stub, &scan_kernel<OR_REDUCE_CUMSUM>)
REGISTER_PRIVATEUSE1_DISPATCH(cumprod_stub, &scan_kernel<OR_REDUCE_CUMPROD>)
REGISTER_PRIVATEUSE1_DISPATCH(max_stub, &minmax_dim_kernel<OR_REDUCE_MAX_INDEX>)
REGISTER_PRIVATEUSE1_DISPATCH(min_stub, &minmax_dim_kernel<OR_REDUCE_MIN_INDEX>)
REGISTER_PRIVATEUSE1_DISPATCH(max_all_stub, &reduce_all_kernel<OR_REDUCE_MAX>)
REGISTER_PRIVATEUSE1_DISPATCH(min_all_stub, &reduce_all_kernel<OR_REDUCE_MIN>)
REGISTER_PRIVATEUSE1_DISPATCH(aminmax_stub, &aminmax_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(sort_stub, &sort_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(aminmax_allreduce_stub, &aminmax_allreduce_kernel)
} // namespace at::native

namespace openreg::reduce {
namespace {

using structured::counted_name;
using structured::engine_handles;
using structured::fallback;

// ---- var / std (ATen's own functions accept only CPU and CUDA tensors) ----

void warn_degrees_of_freedom(const char* fname, const TensorIterator& iter, double correction) {
  const int64_t n = iter.num_output_elements() == 0 ? 0 : iter.numel() / iter.num_output_elements();
  if (static_cast<double>(n) - correction <= 0) {
    TORCH_WARN(fname, "(): degrees of freedom is <= 0. Correction should be strictly less than the reduction "
               "factor (input numel divided by output numel).");
  }
}

void check_var_input(const char* fname, const Tensor& self) {
  TORCH_CHECK(self.layout() == at::Layout::Strided, fname, " only supports strided layout, got: ", self.layout());
  TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(self.scalar_type()),
                              "std and var only support floating point and complex dtypes");
}

// var (or std when `take_sqrt`) of `self` over `dim` into `result`; also
// the mean into `mean` when it is given (var_mean, std_mean).
void std_var(const char* fname, Tensor& result, Tensor* mean, const Tensor& self, at::OptionalIntArrayRef dim,
             const std::optional<Scalar>& correction_opt, bool keepdim, bool take_sqrt) {
  check_var_input(fname, self);
  const double correction = correction_opt.value_or(1).toDouble();
  const at::ScalarType dtype = result.defined() ? result.scalar_type() : self.scalar_type();
  TensorIterator iter = mean != nullptr
                            ? at::native::make_reduction(fname, result, *mean, self, dim, keepdim, dtype)
                            : at::native::make_reduction(fname, result, self, dim, keepdim, dtype);
  warn_degrees_of_freedom(fname, iter, correction);
  if (iter.numel() == 0) {
    result.fill_(std::numeric_limits<double>::quiet_NaN());
    if (mean != nullptr) {
      mean->fill_(std::numeric_limits<double>::quiet_NaN());
    }
    return;
  }
  launch_reduce(iter, OR_REDUCE_VAR, {correction, take_sqrt ? 1.0 : 0.0});
}

template <bool TakeSqrt>
struct StdVar {
  using Functional = std::conditional_t<TakeSqrt, at::_ops::std_correction, at::_ops::var_correction>;
  using OutOp = std::conditional_t<TakeSqrt, at::_ops::std_correction_out, at::_ops::var_correction_out>;
  using WithMean = std::conditional_t<TakeSqrt, at::_ops::std_mean_correction, at::_ops::var_mean_correction>;
  static constexpr const char* name = TakeSqrt ? "std" : "var";
  static constexpr const char* name_mean = TakeSqrt ? "std_mean" : "var_mean";

  static Tensor functional(const Tensor& self, at::OptionalIntArrayRef dim, const std::optional<Scalar>& correction,
                           bool keepdim) {
    if (!engine_handles(self)) {
      return fallback<Functional>(self, dim, correction, keepdim);
    }
    openreg::count_op(counted_name<Functional>(), true);
    Tensor result = at::empty({0}, self.options().dtype(c10::toRealValueType(self.scalar_type())));
    std_var(name, result, nullptr, self, dim, correction, keepdim, TakeSqrt);
    return result;
  }

  static Tensor& out(const Tensor& self, at::OptionalIntArrayRef dim, const std::optional<Scalar>& correction,
                     bool keepdim, Tensor& result) {
    if (!engine_handles(self, result)) {
      return fallback<OutOp>(self, dim, correction, keepdim, result);
    }
    openreg::count_op(counted_name<OutOp>(), true);
    std_var(name, result, nullptr, self, dim, correction, keepdim, TakeSqrt);
    return result;
  }

  static std::tuple<Tensor, Tensor> with_mean(const Tensor& self, at::OptionalIntArrayRef dim,
                                              const std::optional<Scalar>& correction, bool keepdim) {
    if (!engine_handles(self)) {
      return fallback<WithMean>(self, dim, correction, keepdim);
    }
    openreg::count_op(counted_name<WithMean>(), true);
    const auto options = self.options().dtype(c10::toRealValueType(self.scalar_type()));
    Tensor result = at::empty({0}, options);
    Tensor mean = at::empty({0}, options);
    std_var(name_mean, result, &mean, self, dim, correction, keepdim, TakeSqrt);
    return {std::move(result), std::move(mean)};
  }
};

// count_nonzero: a comparison and a sum, both on the device (as CUDA does it).
Tensor count_nonzero(const Tensor& self, at::IntArrayRef dims) {
  using Op = at::_ops::count_nonzero_dim_IntList;
  if (!engine_handles(self)) {
    return fallback<Op>(self, dims);
  }
  openreg::count_op(counted_name<Op>(), true);
  return (self != 0).sum(dims);
}

// ---- scans with their own entries: cummax/cummin's helpers, logcumsumexp ----

// cummax / cummin: ATen's composite allocates values and indices (self's
// shape) and calls this helper.
template <or_reduce_op Op>
void cum_extreme_helper(const Tensor& self, Tensor& values, Tensor& indices, int64_t dim) {
  using HelperOp = std::conditional_t<Op == OR_REDUCE_CUMMAX, at::_ops::_cummax_helper, at::_ops::_cummin_helper>;
  if (!engine_handles(self, values, indices)) {
    fallback<HelperOp>(self, values, indices, dim);
    return;
  }
  openreg::count_op(counted_name<HelperOp>(), true);
  launch_scan(values, self, c10::maybe_wrap_dim(dim, self.dim()), Op, indices);
}

Tensor& logcumsumexp_out(const Tensor& self, int64_t dim, Tensor& out) {
  using Op = at::_ops::_logcumsumexp_out;
  if (!engine_handles(self, out)) {
    return fallback<Op>(self, dim, out);
  }
  openreg::count_op(counted_name<Op>(), true);
  const int64_t d = c10::maybe_wrap_dim(dim, self.dim());
  at::native::resize_output(out, self.sizes());
  if (self.numel() == 0) {
    return out;
  }
  TORCH_CHECK(out.scalar_type() == self.scalar_type(), "logcumsumexp: expected out of dtype ", self.scalar_type());
  launch_scan(out, self, d, OR_REDUCE_LOGCUMSUMEXP);
  return out;
}

Tensor logcumsumexp(const Tensor& self, int64_t dim) {
  Tensor out = at::empty_like(self, at::MemoryFormat::Contiguous);
  return logcumsumexp_out(self, dim, out);
}

// ---- order statistics: a stable sort along the dimension, then one pick ----

// The slice of `t` at positions `pos` (one per line, `dim` of size 1).
Tensor pick(const Tensor& t, int64_t dim, const Tensor& pos) {
  return t.gather(dim, pos);
}

// values and indices at position `pos` (int64, keepdim shape) of the sorted
// lines of `self` along `dim`, squeezed unless `keepdim`.
std::tuple<Tensor, Tensor> pick_sorted(const Tensor& sorted, const Tensor& order, int64_t dim, const Tensor& pos,
                                       bool keepdim) {
  Tensor values = pick(sorted, dim, pos);
  Tensor indices = pick(order, dim, pos);
  if (!keepdim) {
    values = values.squeeze(dim);
    indices = indices.squeeze(dim);
  }
  return {values, indices};
}

// The dimension an order statistic works along, and `self` with at least one dimension.
std::pair<Tensor, int64_t> line_input(const Tensor& self, int64_t dim) {
  const int64_t d = c10::maybe_wrap_dim(dim, self.dim(), /*wrap_scalar=*/true);
  return {self.dim() == 0 ? self.view({1}) : self, self.dim() == 0 ? 0 : d};
}

void check_nonempty_line(const Tensor& self, int64_t dim, const char* name) {
  TORCH_CHECK_INDEX(self.dim() == 0 || self.size(dim) > 0, name, "(): Expected reduction dim ", dim,
                    " to have non-zero size.");
}

// median / nanmedian along `dim`: the lower median ((n - 1) / 2 in sorted order).
// median: a line holding NaN gives NaN and the position of its first NaN (the
// stable sort puts NaNs last, in their order); nanmedian ignores NaNs (a line of
// only NaNs gives its first).
std::tuple<Tensor, Tensor> median_dim_impl(const Tensor& self_in, int64_t dim_in, bool keepdim, bool ignore_nan) {
  check_dtype(self_in.scalar_type() != at::kBool, ignore_nan ? "nanmedian" : "median", at::kBool);
  auto [self, dim] = line_input(self_in, dim_in);
  check_nonempty_line(self_in, dim, ignore_nan ? "nanmedian" : "median");
  auto [sorted, order] = at::sort(self, /*stable=*/true, dim, /*descending=*/false);
  const int64_t n = self.size(dim);
  Tensor pos;
  if (at::isFloatingType(self.scalar_type())) {
    const Tensor nans = self.isnan().sum(dim, /*keepdim=*/true);
    pos = ignore_nan ? (n - nans - 1).clamp_min(0).div(2, "floor") : at::where(nans > 0, n - nans, (n - 1) / 2);
  } else {
    auto shape = self.sizes().vec();
    shape[dim] = 1;
    pos = at::full(shape, (n - 1) / 2, self.options().dtype(at::kLong));
  }
  auto [values, indices] = pick_sorted(sorted, order, dim, pos, keepdim || self_in.dim() == 0);
  if (self_in.dim() == 0) {
    return {values.reshape(at::IntArrayRef{}), indices.reshape(at::IntArrayRef{})};
  }
  return {values, indices};
}

// median() / nanmedian() of every element: the same pick over the flattened
// tensor (NaN for an empty one, as CPU).
Tensor median_all_impl(const Tensor& self, bool ignore_nan) {
  if (self.numel() == 0) {
    return at::full({}, std::numeric_limits<float>::quiet_NaN(), self.options().dtype(at::kFloat))
        .to(self.scalar_type());
  }
  return std::get<0>(median_dim_impl(self.reshape({-1}), 0, false, ignore_nan)).reshape(at::IntArrayRef{});
}

// kthvalue: the k-th smallest (NaN above every number), the last of topk's k smallest.
std::tuple<Tensor, Tensor> kthvalue_impl(const Tensor& self_in, int64_t k, int64_t dim_in, bool keepdim) {
  check_dtype(self_in.scalar_type() != at::kBool, "kthvalue", at::kBool);
  auto [self, dim] = line_input(self_in, dim_in);
  const int64_t n = self.size(dim);
  TORCH_CHECK(k >= 1 && k <= n, "kthvalue(): selected number k out of range for dimension ", dim);
  auto [sorted, order] = at::topk(self, k, dim, /*largest=*/false, /*sorted=*/true);
  auto [values, indices] = pick_sorted(sorted.narrow(dim, k - 1, 1), order.narrow(dim, k - 1, 1), dim,
                                       at::zeros({1}, self.options().dtype(at::kLong)).expand(
                                           sorted.narrow(dim, 0, 1).sizes()),
                                       keepdim || self_in.dim() == 0);
  if (self_in.dim() == 0) {
    return {values.reshape(at::IntArrayRef{}), indices.reshape(at::IntArrayRef{})};
  }
  return {values, indices};
}

// mode: the most frequent value of each line (the smallest of equally
// frequent ones, as CPU) and the position of one of its occurrences. In
// sorted order each run of equal values ends where its length peaks; the
// first position of the longest run's end is the answer.
std::tuple<Tensor, Tensor> mode_impl(const Tensor& self_in, int64_t dim_in, bool keepdim) {
  auto [self, dim] = line_input(self_in, dim_in);
  check_nonempty_line(self_in, dim, "mode");
  auto [sorted, order] = at::sort(self, /*stable=*/true, dim, /*descending=*/false);
  const int64_t n = self.size(dim);
  auto view = std::vector<int64_t>(self.dim(), 1);
  view[dim] = n;
  const Tensor position = at::arange(n, self.options().dtype(at::kLong)).view(view).expand(sorted.sizes());
  // a run starts where the value differs from the one before it
  const Tensor starts = at::cat({at::ones_like(sorted.narrow(dim, 0, 1), at::kBool),
                                 sorted.narrow(dim, 1, n - 1).ne(sorted.narrow(dim, 0, n - 1))},
                                dim);
  const Tensor run_start = std::get<0>(at::where(starts, position, 0).cummax(dim));
  const Tensor length = position - run_start;
  const Tensor pos = length.argmax(dim, /*keepdim=*/true);
  auto [values, indices] = pick_sorted(sorted, order, dim, pos, keepdim || self_in.dim() == 0);
  if (self_in.dim() == 0) {
    return {values.reshape(at::IntArrayRef{}), indices.reshape(at::IntArrayRef{})};
  }
  return {values, indices};
}

// The out= forms: the results copied into (resized) outputs, as ATen's
// composite out= functions do.
std::tuple<Tensor&, Tensor&> into(std::tuple<Tensor, Tensor> result, Tensor& values, Tensor& indices) {
  TORCH_CHECK(values.scalar_type() == std::get<0>(result).scalar_type(), "expected values of dtype ",
              std::get<0>(result).scalar_type(), " but got ", values.scalar_type());
  TORCH_CHECK(indices.scalar_type() == at::kLong, "expected indices of dtype Long but got ", indices.scalar_type());
  at::native::resize_output(values, std::get<0>(result).sizes());
  at::native::resize_output(indices, std::get<1>(result).sizes());
  values.copy_(std::get<0>(result));
  indices.copy_(std::get<1>(result));
  return {values, indices};
}

template <bool IgnoreNan>
struct Median {
  using Dim = std::conditional_t<IgnoreNan, at::_ops::nanmedian_dim, at::_ops::median_dim>;
  using DimOut = std::conditional_t<IgnoreNan, at::_ops::nanmedian_dim_values, at::_ops::median_dim_values>;
  using All = std::conditional_t<IgnoreNan, at::_ops::nanmedian, at::_ops::median>;

  static std::tuple<Tensor, Tensor> dim(const Tensor& self, int64_t d, bool keepdim) {
    if (!engine_handles(self)) {
      return fallback<Dim>(self, d, keepdim);
    }
    openreg::count_op(counted_name<Dim>(), true);
    return median_dim_impl(self, d, keepdim, IgnoreNan);
  }

  static std::tuple<Tensor&, Tensor&> dim_out(const Tensor& self, int64_t d, bool keepdim, Tensor& values,
                                              Tensor& indices) {
    if (!engine_handles(self, values, indices)) {
      return fallback<DimOut>(self, d, keepdim, values, indices);
    }
    openreg::count_op(counted_name<DimOut>(), true);
    return into(median_dim_impl(self, d, keepdim, IgnoreNan), values, indices);
  }

  static Tensor all(const Tensor& self) {
    if (!engine_handles(self)) {
      return fallback<All>(self);
    }
    openreg::count_op(counted_name<All>(), true);
    return median_all_impl(self, IgnoreNan);
  }
};

std::tuple<Tensor, Tensor> kthvalue(const Tensor& self, c10::SymInt k, int64_t dim, bool keepdim) {
  using Op = at::_ops::kthvalue;
  if (!engine_handles(self)) {
    return fallback<Op>(self, k, dim, keepdim);
  }
  openreg::count_op(counted_name<Op>(), true);
  return kthvalue_impl(self, k.expect_int(), dim, keepdim);
}

std::tuple<Tensor&, Tensor&> kthvalue_out(const Tensor& self, c10::SymInt k, int64_t dim, bool keepdim,
                                          Tensor& values, Tensor& indices) {
  using Op = at::_ops::kthvalue_values;
  if (!engine_handles(self, values, indices)) {
    return fallback<Op>(self, k, dim, keepdim, values, indices);
  }
  openreg::count_op(counted_name<Op>(), true);
  return into(kthvalue_impl(self, k.expect_int(), dim, keepdim), values, indices);
}

std::tuple<Tensor, Tensor> mode(const Tensor& self, int64_t dim, bool keepdim) {
  using Op = at::_ops::mode;
  if (!engine_handles(self)) {
    return fallback<Op>(self, dim, keepdim);
  }
  openreg::count_op(counted_name<Op>(), true);
  return mode_impl(self, dim, keepdim);
}

std::tuple<Tensor&, Tensor&> mode_out(const Tensor& self, int64_t dim, bool keepdim, Tensor& values,
                                      Tensor& indices) {
  using Op = at::_ops::mode_values;
  if (!engine_handles(self, values, indices)) {
    return fallback<Op>(self, dim, keepdim, values, indices);
  }
  openreg::count_op(counted_name<Op>(), true);
  return into(mode_impl(self, dim, keepdim), values, indices);
}

// ---- composites of the reductions ----

// torch.equal: same shape and every element equal (NaN never is), read back
// as CPU reads its answer.
bool equal(const Tensor& self, const Tensor& other) {
  using Op = at::_ops::equal;
  if (!engine_handles(self, other)) {
    return fallback<Op>(self, other);
  }
  openreg::count_op(counted_name<Op>(), true);
  TORCH_CHECK(self.device() == other.device(), "Cannot compare two tensors on different devices. Got: ",
              self.device(), " and ", other.device());
  if (self.sizes() != other.sizes()) {
    return false;
  }
  if (self.numel() == 0) {
    return true;
  }
  return at::eq(self, other).all().item<bool>();
}

// trace: the sum of the diagonal (integers summed into int64, as CPU).
Tensor trace(const Tensor& self) {
  using Op = at::_ops::trace;
  if (!engine_handles(self)) {
    return fallback<Op>(self);
  }
  openreg::count_op(counted_name<Op>(), true);
  TORCH_CHECK(self.dim() == 2, "trace: expected a matrix, but got tensor with dim ", self.dim());
  return self.diagonal().sum();
}

// torch.norm(x, p, dim, keepdim[, dtype]): ATen's structured norm, whose
// impl reaches linalg_vector_norm (its meta takes p as OptionalScalarRef).
at::OptionalScalarRef scalar_ref(const std::optional<Scalar>& p) {
  return p.has_value() ? at::OptionalScalarRef(&*p) : at::OptionalScalarRef();
}

Tensor norm_dim(const Tensor& self, const std::optional<Scalar>& p, at::IntArrayRef dim, bool keepdim) {
  using Op = at::_ops::norm_ScalarOpt_dim;
  if (!engine_handles(self)) {
    return fallback<Op>(self, p, dim, keepdim);
  }
  openreg::count_op(counted_name<Op>(), true);
  structured::Functional<at::native::structured_norm_out> op;
  op.meta(self, scalar_ref(p), dim, keepdim);
  op.impl(self, scalar_ref(p), dim, keepdim, op.maybe_get_output(0));
  return std::move(op.outputs_[0]);
}

Tensor& norm_dim_out(const Tensor& self, const std::optional<Scalar>& p, at::IntArrayRef dim, bool keepdim,
                     Tensor& out) {
  using Op = at::_ops::norm_out;
  if (!engine_handles(self, out)) {
    return fallback<Op>(self, p, dim, keepdim, out);
  }
  openreg::count_op(counted_name<Op>(), true);
  structured::Out<at::native::structured_norm_out> op(out);
  op.meta(self, scalar_ref(p), dim, keepdim);
  op.impl(self, scalar_ref(p), dim, keepdim, op.maybe_get_output(0));
  return out;
}

Tensor norm_dim_dtype(const Tensor& self, const std::optional<Scalar>& p, at::IntArrayRef dim, bool keepdim,
                      at::ScalarType dtype) {
  using Op = at::_ops::norm_ScalarOpt_dim_dtype;
  if (!engine_handles(self)) {
    return fallback<Op>(self, p, dim, keepdim, dtype);
  }
  openreg::count_op(counted_name<Op>(), true);
  structured::Functional<at::native::structured_norm_dtype_out> op;
  op.meta(self, scalar_ref(p), dim, keepdim, dtype);
  op.impl(self, scalar_ref(p), dim, keepdim, dtype, op.maybe_get_output(0));
  return std::move(op.outputs_[0]);
}

Tensor& norm_dim_dtype_out(const Tensor& self, const std::optional<Scalar>& p, at::IntArrayRef dim, bool keepdim,
                           at::ScalarType dtype, Tensor& out) {
  using Op = at::_ops::norm_dtype_out;
  if (!engine_handles(self, out)) {
    return fallback<Op>(self, p, dim, keepdim, dtype, out);
  }
  openreg::count_op(counted_name<Op>(), true);
  structured::Out<at::native::structured_norm_dtype_out> op(out);
  op.meta(self, scalar_ref(p), dim, keepdim, dtype);
  op.impl(self, scalar_ref(p), dim, keepdim, dtype, op.maybe_get_output(0));
  return out;
}

// ---- two-output structured ops: max.dim, min.dim, aminmax ----

// The functional and out= forms of a structured op with two outputs whose
// native class is `Native`; `Call::run(op, self, rest...)` runs its meta and impl.
template <class Native, class Call, class FunctionalOp, class OutOp, class... Rest>
struct TwoOutputs {
  static std::tuple<Tensor, Tensor> functional(const Tensor& self, Rest... rest) {
    if (!engine_handles(self)) {
      return fallback<FunctionalOp>(self, rest...);
    }
    openreg::count_op(counted_name<FunctionalOp>(), true);
    structured::Functional<Native> op;
    Call::run(op, self, rest...);
    return {std::move(op.outputs_[0]), std::move(op.outputs_[1])};
  }

  static std::tuple<Tensor&, Tensor&> out(const Tensor& self, Rest... rest, Tensor& out0, Tensor& out1) {
    if (!engine_handles(self, out0, out1)) {
      return fallback<OutOp>(self, rest..., out0, out1);
    }
    openreg::count_op(counted_name<OutOp>(), true);
    structured::Out<Native> op(out0, out1);
    Call::run(op, self, rest...);
    return {out0, out1};
  }
};

// max.dim / min.dim: the meta wraps `dim` and hands it to the impl.
struct MinMaxDim {
  template <class Op>
  static void run(Op& op, const Tensor& self, int64_t dim, bool keepdim) {
    auto pre = op.meta(self, dim, keepdim);
    op.impl(self, pre.dim, keepdim, op.maybe_get_output(0), op.maybe_get_output(1));
  }
};

struct AminMax {
  template <class Op>
  static void run(Op& op, const Tensor& self, std::optional<int64_t> dim, bool keepdim) {
    op.meta(self, dim, keepdim);
    op.impl(self, dim, keepdim, op.maybe_get_output(0), op.maybe_get_output(1));
  }
};

struct SortStable {
  template <class Op>
  static void run(Op& op, const Tensor& self, std::optional<bool> stable, int64_t dim, bool descending) {
    op.meta(self, stable, dim, descending);
    op.impl(self, stable, dim, descending, op.maybe_get_output(0), op.maybe_get_output(1));
  }
};

// topk: ATen's meta checks k and shapes the outputs; the device keeps the
// first k of its stable sort's order (largest first when `largest`), so ties
// keep their order, in one pass over each line (a heap of k) while k is small
// against the line, else by sorting it.
struct TopK {
  template <class Op>
  static void run(Op& op, const Tensor& self, int64_t k, int64_t dim, bool largest, bool sorted) {
    (void)sorted; // the result is always sorted
    op.meta(self, k, dim, largest, sorted);
    const Tensor& values = op.maybe_get_output(0);
    const Tensor& indices = op.maybe_get_output(1);
    if (values.numel() == 0) {
      return;
    }
    const int64_t d = c10::maybe_wrap_dim(dim, self.dim(), /*wrap_scalar=*/true);
    const int64_t line = self.dim() == 0 ? 1 : self.size(d);
    if (k * 4 <= line) {
      launch_topk(self, values, indices, d, k, largest);
      return;
    }
    auto [all_values, all_indices] = at::sort(self, /*stable=*/true, d, /*descending=*/largest);
    values.copy_(self.dim() == 0 ? all_values : all_values.narrow(d, 0, k));
    indices.copy_(self.dim() == 0 ? all_indices : all_indices.narrow(d, 0, k));
  }
};

using SortOp = TwoOutputs<at::native::structured_sort_stable_out, SortStable, at::_ops::sort_stable,
                          at::_ops::sort_values_stable, std::optional<bool>, int64_t, bool>;
using TopKOp = TwoOutputs<at::meta::structured_topk, TopK, at::_ops::topk, at::_ops::topk_values, int64_t, int64_t,
                          bool, bool>;

using MaxDim = TwoOutputs<at::native::structured_max_out, MinMaxDim, at::_ops::max_dim, at::_ops::max_dim_max,
                          int64_t, bool>;
using MinDim = TwoOutputs<at::native::structured_min_out, MinMaxDim, at::_ops::min_dim, at::_ops::min_dim_min,
                          int64_t, bool>;
using AminMaxOp = TwoOutputs<at::native::structured_aminmax_out, AminMax, at::_ops::aminmax, at::_ops::aminmax_out,
                             std::optional<int64_t>, bool>;

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  // sums, means, products (the no-dim sum and mean are composites over these)
  OPENREG_STRUCTURED_NATIVE(m, sum_out, sum_dim_IntList, none, sum_IntList_out);
  OPENREG_STRUCTURED_NATIVE(m, mean_out, mean_dim, none, mean_out);
  OPENREG_STRUCTURED_NATIVE(m, prod_out, prod_dim_int, none, prod_int_out);
  OPENREG_NATIVE(m, prod, at::native::prod);
  OPENREG_NATIVE(m, prod_out, at::native::prod_out);
  OPENREG_NATIVE(m, nansum, at::native::nansum);
  OPENREG_NATIVE(m, nansum_out, at::native::nansum_out);
  m.impl("count_nonzero.dim_IntList", TORCH_FN(count_nonzero));
  // extremes and their indices
  OPENREG_STRUCTURED_NATIVE(m, amax_out, amax, none, amax_out);
  OPENREG_STRUCTURED_NATIVE(m, amin_out, amin, none, amin_out);
  OPENREG_STRUCTURED_NATIVE(m, argmax_out, argmax, none, argmax_out);
  OPENREG_STRUCTURED_NATIVE(m, argmin_out, argmin, none, argmin_out);
  OPENREG_NATIVE(m, max, at::native::max);
  OPENREG_NATIVE(m, max_unary_out, at::native::max_unary_out);
  OPENREG_NATIVE(m, min, at::native::min);
  OPENREG_NATIVE(m, min_unary_out, at::native::min_unary_out);
  // all / any
  OPENREG_STRUCTURED_NATIVE(m, all_out, all_dim, none, all_out);
  OPENREG_STRUCTURED_NATIVE(m, all_dims_out, all_dims, none, all_dims_out);
  OPENREG_STRUCTURED_NATIVE(m, all_all_out, all, none, all_all_out);
  OPENREG_STRUCTURED_NATIVE(m, any_out, any_dim, none, any_out);
  OPENREG_STRUCTURED_NATIVE(m, any_dims_out, any_dims, none, any_dims_out);
  OPENREG_STRUCTURED_NATIVE(m, any_all_out, any, none, any_all_out);
  // norms (torch.norm and Tensor.norm reach linalg_vector_norm for strided tensors)
  OPENREG_STRUCTURED_NATIVE(m, linalg_vector_norm_out, linalg_vector_norm, none, linalg_vector_norm_out);
  // scans
  OPENREG_STRUCTURED_NATIVE(m, cumsum_out, cumsum, cumsum_, cumsum_out);
  OPENREG_STRUCTURED_NATIVE(m, cumprod_out, cumprod, cumprod_, cumprod_out);
  // var / std
  m.impl("var.correction", TORCH_FN(StdVar<false>::functional));
  m.impl("var.correction_out", TORCH_FN(StdVar<false>::out));
  m.impl("var_mean.correction", TORCH_FN(StdVar<false>::with_mean));
  m.impl("std.correction", TORCH_FN(StdVar<true>::functional));
  m.impl("std.correction_out", TORCH_FN(StdVar<true>::out));
  m.impl("std_mean.correction", TORCH_FN(StdVar<true>::with_mean));
  // two outputs
  m.impl("max.dim", TORCH_FN(MaxDim::functional));
  m.impl("max.dim_max", TORCH_FN(MaxDim::out));
  m.impl("min.dim", TORCH_FN(MinDim::functional));
  m.impl("min.dim_min", TORCH_FN(MinDim::out));
  m.impl("aminmax", TORCH_FN(AminMaxOp::functional));
  m.impl("aminmax.out", TORCH_FN(AminMaxOp::out));
  m.impl("sort.stable", TORCH_FN(SortOp::functional));
  m.impl("sort.values_stable", TORCH_FN(SortOp::out));
  m.impl("topk", TORCH_FN(TopKOp::functional));
  m.impl("topk.values", TORCH_FN(TopKOp::out));
  // scans with indices, log-sum-exp scans
  m.impl("_cummax_helper", TORCH_FN(cum_extreme_helper<OR_REDUCE_CUMMAX>));
  m.impl("_cummin_helper", TORCH_FN(cum_extreme_helper<OR_REDUCE_CUMMIN>));
  m.impl("_logcumsumexp", TORCH_FN(logcumsumexp));
  m.impl("_logcumsumexp.out", TORCH_FN(logcumsumexp_out));
  // order statistics
  m.impl("median.dim", TORCH_FN(Median<false>::dim));
  m.impl("median.dim_values", TORCH_FN(Median<false>::dim_out));
  m.impl("median", TORCH_FN(Median<false>::all));
  m.impl("nanmedian.dim", TORCH_FN(Median<true>::dim));
  m.impl("nanmedian.dim_values", TORCH_FN(Median<true>::dim_out));
  m.impl("nanmedian", TORCH_FN(Median<true>::all));
  m.impl("kthvalue", TORCH_FN(kthvalue));
  m.impl("kthvalue.values", TORCH_FN(kthvalue_out));
  m.impl("mode", TORCH_FN(mode));
  m.impl("mode.values", TORCH_FN(mode_out));
  // composites
  m.impl("equal", TORCH_FN(equal));
  m.impl("trace", TORCH_FN(trace));
  m.impl("norm.ScalarOpt_dim", TORCH_FN(norm_dim));
  m.impl("norm.out", TORCH_FN(norm_dim_out));
  m.impl("norm.ScalarOpt_dim_dtype", TORCH_FN(norm_dim_dtype));
  m.impl("norm.dtype_out", TORCH_FN(norm_dim_dtype_out));
}

} // namespace openreg::reduce
