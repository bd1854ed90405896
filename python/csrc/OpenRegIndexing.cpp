// The indexing and data-movement family on the device engine. Each op
// builds a TensorIterator (ATen's checks and broadcasting) and launches an
// engine op over it; ATen's CPU and CUDA registrations of these ops are
// device-specific functions, so the argument checks are repeated here with
// ATen's messages.

#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/TensorIterator.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/WrapDimUtilsMulti.h>
#include <ATen/native/IndexKernel.h>
#include <ATen/native/IndexingUtils.h>
#include <ATen/native/RangeFactories.h>
#include <ATen/native/ReductionType.h>
#include <ATen/native/Resize.h>
#include <ATen/native/TensorAdvancedIndexing.h>
#include <ATen/ops/_index_put_impl_native.h>
#include <ATen/ops/cat_meta.h>
#include <ATen/ops/gather_native.h>
#include <ATen/ops/roll_native.h>
#include <ATen/ops/arange_native.h>
#include <ATen/ops/linspace_native.h>
#include <ATen/ops/tril_meta.h>
#include <ATen/ops/triu_meta.h>
#include <ATen/ops/index_add_meta.h>
#include <ATen/ops/index_copy_meta.h>
#include <ATen/ops/index_reduce_meta.h>
#include <ATen/ops/isin_meta.h>
#include <ATen/ops/narrow_copy_native.h>
#include <ATen/ops/pixel_shuffle_native.h>
#include <ATen/ops/pixel_unshuffle_native.h>
#include <ATen/ops/scatter_reduce_native.h>
#include <ATen/ops/index_native.h>
#include <ATen/ops/scatter_add_native.h>
#include <ATen/ops/scatter_native.h>
#include <torch/library.h>

#include <functional>

#include "OpenRegEngine.h"
#include "OpenRegStructured.h"

namespace openreg::indexing {
using namespace openreg::engine;
namespace {

using at::Tensor;
using c10::Scalar;
using structured::counted_name;
using structured::engine_handles;
using structured::fallback;

// self[mask] = value, in place: where(mask, value, self) on the device. A
// CPU value travels in the parameter block, as a Python number does.
Tensor& masked_fill_with(Tensor& self, const Tensor& mask, const Tensor& value) {
  TORCH_CHECK(mask.scalar_type() == at::kBool, "masked_fill_ only supports boolean masks, but got mask with dtype ",
              mask.scalar_type());
  if (at::has_internal_overlap(self) == at::MemOverlap::Yes) {
    TORCH_WARN("Use of masked_fill_ on expanded tensors is deprecated. Please clone() the tensor before performing "
               "this operation. This also applies to advanced indexing e.g. tensor[mask] = scalar");
  }
  at::assert_no_partial_overlap(self, mask);
  auto iter = at::TensorIteratorConfig()
                  .set_check_mem_overlap(false)
                  .check_all_same_dtype(false)
                  .resize_outputs(false)
                  .allow_cpu_scalars(true)
                  .add_output(self)
                  .add_const_input(mask)
                  .add_const_input(value)
                  .add_const_input(self)
                  .build();
  launch_elementwise(iter, OR_OP_WHERE, {}, compute_of(self.scalar_type()));
  return self;
}

Tensor& masked_fill_scalar(Tensor& self, const Tensor& mask, const Scalar& value) {
  using Op = at::_ops::masked_fill__Scalar;
  if (!engine_handles(self, mask, value)) {
    return fallback<Op>(self, mask, value);
  }
  openreg::count_op(counted_name<Op>(), true);
  return masked_fill_with(self, mask, at::scalar_tensor(value, self.options().device(at::kCPU)));
}

Tensor& masked_fill_tensor(Tensor& self, const Tensor& mask, const Tensor& value) {
  using Op = at::_ops::masked_fill__Tensor;
  TORCH_CHECK(value.dim() == 0,
              "masked_fill_ only supports a 0-dimensional value tensor, but got tensor with ", value.dim(),
              " dimension(s).");
  if (!engine_handles(self, mask, value)) {
    return fallback<Op>(self, mask, value);
  }
  openreg::count_op(counted_name<Op>(), true);
  // A 0-dim CPU value is read on the host like a Python number; a device one
  // is broadcast on the device, converted to self's dtype there.
  return masked_fill_with(self, mask, value.device().is_cpu() ? value.to(self.scalar_type()) : value);
}

// ---- gather and scatter along one dimension, index_select, index_add ----

// `t` viewed with at least one dimension (gather and friends treat a 0-dim
// tensor as one of size 1).
Tensor at_least_1d(const Tensor& t) {
  return t.dim() == 0 ? t.view({1}) : t;
}

// `t` restrided to `shape` with stride 0 along `dim`: the indexed operand,
// whose offset along `dim` comes from the index.
Tensor restride_dim(const Tensor& t, int64_t dim, at::IntArrayRef shape) {
  auto strides = t.strides().vec();
  strides[dim] = 0;
  return t.as_strided(shape, strides);
}

// The byte stride of `t` along `dim`.
int64_t byte_stride(const Tensor& t, int64_t dim) {
  return t.stride(dim) * static_cast<int64_t>(t.element_size());
}

at::TensorIteratorConfig index_config() {
  at::TensorIteratorConfig config;
  config.set_check_mem_overlap(false).check_all_same_dtype(false).resize_outputs(false);
  return config;
}

// result[i][j][k] = self[i][index[i][j][k]][k] (dim 1), over index's shape.
void gather_kernel(const Tensor& result, const Tensor& self, int64_t dim, const Tensor& index) {
  if (index.numel() == 0) {
    return;
  }
  const Tensor src = at_least_1d(self);
  const Tensor idx = at_least_1d(index);
  dim = c10::maybe_wrap_dim(dim, src.dim());
  const Tensor out = at_least_1d(result);
  const Tensor from = restride_dim(src, dim, idx.sizes());
  auto iter = index_config().add_output(out).add_const_input(from).add_const_input(idx).build();
  launch_index(iter, OR_INDEX_GATHER, 0, 1, {src.size(dim)}, {byte_stride(src, dim)}, false);
}

// The index kernel's op for a reduction (a mean sums, then divides).
or_index_op scatter_op_of(at::native::ReductionType reduce) {
  using at::native::ReductionType;
  switch (reduce) {
    case ReductionType::PROD:
      return OR_INDEX_SCATTER_MUL;
    case ReductionType::MAX:
      return OR_INDEX_SCATTER_MAX;
    case ReductionType::MIN:
      return OR_INDEX_SCATTER_MIN;
    default:
      return OR_INDEX_SCATTER_ADD;
  }
}

void scatter_into(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, or_index_op op);

bool reduced_float(const Tensor& t) {
  return t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16;
}

// CPU's scatter kernels add and multiply float16 and bfloat16 elements in
// float32 and round once at the end (scatter_add, scatter with reduce,
// scatter_reduce's sum, prod and mean's sum; index_add when it takes
// scatter_add's path): the same scatter on float32 copies, rounded back into
// self. Adding in the element's own type rounded every step, and differed
// from CPU in about half of the elements that received several values.
void scatter_in_float(const Tensor& self, const std::function<void(const Tensor&)>& scatter) {
  Tensor wide = self.to(at::kFloat);
  scatter(wide);
  self.copy_(wide);
}

// self[i][index[i][j][k]][k] = src[i][j][k] (or += with scatter_add), over index's shape.
void scatter_into(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, or_index_op op) {
  if (index.numel() == 0) {
    return;
  }
  if ((op == OR_INDEX_SCATTER_ADD || op == OR_INDEX_SCATTER_MUL) && reduced_float(self)) {
    const Tensor wide_src = src.to(at::kFloat);
    scatter_in_float(self, [&](const Tensor& wide) { scatter_into(wide, dim, index, wide_src, op); });
    return;
  }
  const Tensor dst = at_least_1d(self);
  const Tensor idx = at_least_1d(index);
  dim = c10::maybe_wrap_dim(dim, dst.dim());
  const Tensor from = src.dim() == 0 ? src.expand(idx.sizes()) : src.as_strided(idx.sizes(), src.strides());
  const Tensor to = restride_dim(dst, dim, idx.sizes());
  auto iter = index_config().add_output(to).add_const_input(from).add_const_input(idx).build();
  launch_index(iter, op, 1, 0, {dst.size(dim)}, {byte_stride(dst, dim)}, false);
}

void scatter_kernel(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  scatter_into(self, dim, index, src, OR_INDEX_SCATTER);
}

void scatter_fill_kernel(const Tensor& self, int64_t dim, const Tensor& index, const Scalar& value) {
  scatter_into(self, dim, index, at::scalar_tensor(value, self.options()), OR_INDEX_SCATTER);
}

void scatter_add_kernel(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  scatter_into(self, dim, index, src, OR_INDEX_SCATTER_ADD);
}

// scatter(..., reduce='add' | 'multiply').
or_index_op scatter_reduction(const at::native::ReductionType& reduce) {
  TORCH_CHECK(reduce == at::native::ReductionType::SUM || reduce == at::native::ReductionType::PROD,
              "openreg: scatter reduces only with 'add' and 'multiply' here");
  return reduce == at::native::ReductionType::SUM ? OR_INDEX_SCATTER_ADD : OR_INDEX_SCATTER_MUL;
}

void scatter_reduce_kernel(const Tensor& self, const int64_t dim, const Tensor& index, const Tensor& src,
                           const at::native::ReductionType& reduce) {
  scatter_into(self, dim, index, src, scatter_reduction(reduce));
}

void scatter_scalar_reduce_kernel(const Tensor& self, const int64_t dim, const Tensor& index, const Scalar& value,
                                  const at::native::ReductionType& reduce) {
  scatter_into(self, dim, index, at::scalar_tensor(value, self.options()), scatter_reduction(reduce));
}

// scatter_reduce(..., reduce='sum' | 'prod' | 'mean' | 'amax' | 'amin'): ATen's
// impl fills excluded slots with the identity first and divides means after.
void scatter_reduce_two_kernel(const Tensor& self, const int64_t dim, const Tensor& index, const Tensor& src,
                               const at::native::ReductionType& reduce) {
  scatter_into(self, dim, index, src, scatter_op_of(reduce));
}

// Advanced indexing: out = self[indices...] and self[indices...] = values.
void index_kernel(at::TensorIteratorBase& iter, at::IntArrayRef sizes, at::IntArrayRef strides) {
  launch_index(iter, OR_INDEX_GATHER, 0, 1, sizes, strides, true);
}

void index_put_kernel(at::TensorIterator& iter, at::IntArrayRef sizes, at::IntArrayRef strides, bool accumulate) {
  launch_index(iter, accumulate ? OR_INDEX_SCATTER_ADD : OR_INDEX_SCATTER, 1, 0, sizes, strides, true);
}

// self[indices] = value (+= with accumulate), built as ATen's AdvancedIndex
// builds it (whose constructor libtorch does not export): ATen calls this
// for accumulating puts on accelerators.
void index_put_with_sort_kernel(Tensor& self, const c10::List<std::optional<Tensor>>& index_list, const Tensor& value,
                                bool accumulate, bool /*unsafe*/) {
  at::native::checkIndexTensorTypes(index_list, /*allow_int=*/true);
  auto indices = at::native::expandTensors(self, index_list, /*ensure_same_device=*/true);
  try {
    indices = at::expand_outplace(indices);
  } catch (std::exception&) {
    TORCH_CHECK_INDEX(false, "shape mismatch: indexing tensors could not be broadcast together");
  }
  while (indices.size() < static_cast<size_t>(self.dim())) {
    indices.emplace_back();
  }
  Tensor src = self;
  if (!at::native::hasContiguousSubspace(indices)) {
    std::tie(src, indices) = at::native::transposeToFront(src, indices);
  }
  at::DimVector sizes, strides;
  int64_t before = 0, after = 0;
  Tensor first;
  for (int64_t d = 0; d < src.dim(); ++d) {
    if (indices[d].defined()) {
      sizes.push_back(src.size(d));
      strides.push_back(byte_stride(src, d));
      first = first.defined() ? first : indices[d];
    } else {
      (first.defined() ? after : before) += 1;
    }
  }
  // src over the iteration shape: the dimensions before the indexed ones,
  // the index's shape (stride 0: the offset comes from the indices), the rest.
  at::DimVector shape(src.sizes().begin(), src.sizes().begin() + before);
  at::DimVector st(src.strides().begin(), src.strides().begin() + before);
  shape.append(first.sizes().begin(), first.sizes().end());
  st.append(first.dim(), 0);
  shape.append(src.sizes().end() - after, src.sizes().end());
  st.append(src.strides().end() - after, src.strides().end());
  const Tensor restrided = src.as_strided(shape, st);
  std::vector<Tensor> views;
  for (const Tensor& index : indices) {
    if (!index.defined()) {
      continue;
    }
    at::DimVector view(before, 1);
    view.append(index.sizes().begin(), index.sizes().end());
    view.append(after, 1);
    views.push_back(index.to(self.device()).reshape(view));
  }
  const Tensor values = value.device() == self.device() ? value : value.to(self.device());
  at::TensorIteratorConfig config = index_config();
  config.add_output(restrided).add_const_input(values);
  for (const Tensor& v : views) {
    config.add_const_input(v);
  }
  auto iter = config.build();
  launch_index(iter, accumulate ? OR_INDEX_SCATTER_ADD : OR_INDEX_SCATTER, 1, 0, sizes, strides, true);
}

// arange and linspace: ATen's native functions size and check the output
// (a 1-D tensor) and call these.
void arange_kernel(at::TensorIterator& iter, const Scalar& start, const Scalar& /*size*/, const Scalar& step) {
  launch_positions(OR_POSITION_ARANGE, iter.tensor(0), iter.tensor(0), {start, step});
}

void linspace_kernel(at::TensorIterator& iter, const Scalar& start, const Scalar& end, int64_t steps) {
  // integer outputs start from the ends converted to their type, as on CPU
  const bool integral = !at::isFloatingType(iter.dtype(0));
  const double a = integral ? static_cast<double>(start.toLong()) : start.toDouble();
  const double b = integral ? static_cast<double>(end.toLong()) : end.toDouble();
  const double step = steps > 1 ? (b - a) / static_cast<double>(steps - 1) : 0.0;
  launch_positions(OR_POSITION_LINSPACE, iter.tensor(0), iter.tensor(0), {a, b, step, steps});
}

} // namespace
} // namespace openreg::indexing

namespace at::native {
using namespace openreg::indexing;
REGISTER_PRIVATEUSE1_DISPATCH(gather_stub, &gather_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(scatter_stub, &scatter_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(scatter_fill_stub, &scatter_fill_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(scatter_add_stub, &scatter_add_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(scatter_reduce_stub, &scatter_reduce_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(scatter_scalar_reduce_stub, &scatter_scalar_reduce_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(scatter_reduce_two_stub, &scatter_reduce_two_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(index_stub, &index_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(index_put_stub, &index_put_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(arange_stub, &arange_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(linspace_stub, &linspace_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(index_put_with_sort_stub, &index_put_with_sort_kernel)
} // namespace at::native

namespace openreg::indexing {
namespace {

Tensor& index_select_out(const Tensor& self, int64_t dim, const Tensor& index, Tensor& result) {
  using Op = at::_ops::index_select_out;
  if (!engine_handles(self, result)) {
    return fallback<Op>(self, dim, index, result);
  }
  openreg::count_op(counted_name<Op>(), true);
  dim = c10::maybe_wrap_dim(dim, self.dim());
  TORCH_CHECK_INDEX(index.dim() <= 1, "index_select(): Index is supposed to be a vector");
  TORCH_CHECK(index.scalar_type() == at::kLong || index.scalar_type() == at::kInt,
              "index_select(): Expected dtype int32 or int64 for index");
  TORCH_CHECK(self.scalar_type() == result.scalar_type(), "index_select(): self and result must have the same scalar "
              "type");
  at::assert_no_internal_overlap(result);
  at::assert_no_overlap(result, self);
  at::assert_no_overlap(result, index);
  const Tensor idx = index.reshape({-1});
  auto sizes = self.sizes().vec();
  if (self.dim() > 0) {
    sizes[dim] = idx.numel();
  }
  at::native::resize_output(result, sizes);
  if (result.numel() == 0) {
    return result;
  }
  const Tensor src = at_least_1d(self);
  const Tensor out = at_least_1d(result);
  std::vector<int64_t> idx_strides(out.dim(), 0);
  idx_strides[dim] = idx.stride(0);
  const Tensor from = restride_dim(src, dim, out.sizes());
  const Tensor idx_r = idx.as_strided(out.sizes(), idx_strides);
  auto iter = index_config().add_output(out).add_const_input(from).add_const_input(idx_r).build();
  launch_index(iter, OR_INDEX_GATHER, 0, 1, {src.size(dim)}, {byte_stride(src, dim)}, false);
  return result;
}

Tensor index_select(const Tensor& self, int64_t dim, const Tensor& index) {
  Tensor result = at::empty({0}, self.options());
  return index_select_out(self, dim, index, result);
}

// `source` scattered into `out` along `d` through the 1-d `index` (slice j of
// source to slice index[j] of out), with op OR_INDEX_SCATTER (index_copy),
// SCATTER_ADD (index_add, scaled by alpha), SCATTER_MUL, SCATTER_MAX or
// SCATTER_MIN (index_reduce); repeated indices apply in index order.
void scatter_along(const Tensor& out, int64_t d, const Tensor& index, const Tensor& source, or_index_op op,
                   const Scalar& alpha = 1) {
  if (index.numel() == 0 || out.numel() == 0) {
    return;
  }
  const Tensor dst = at_least_1d(out);
  const Tensor src = at_least_1d(source);
  const Tensor idx = index.reshape({-1});
  std::vector<int64_t> idx_strides(src.dim(), 0);
  idx_strides[d] = idx.stride(0);
  const Tensor to = restride_dim(dst, d, src.sizes());
  const Tensor idx_r = idx.as_strided(src.sizes(), idx_strides);
  auto iter = index_config().add_output(to).add_const_input(src).add_const_input(idx_r).build();
  launch_index(iter, op, 1, 0, {dst.size(d)}, {byte_stride(dst, d)}, false, alpha);
}

// The functional, in-place and out= forms of a structured op whose meta
// returns precomputed values (so OPENREG_STRUCTURED cannot take it):
// `Run::run(op, self, rest...)` runs the meta and the device work.
template <class Meta, class Run, class FunctionalOp, class InplaceOp, class OutOp, class... Rest>
struct PrecomputedForms {
  static Tensor functional(const Tensor& self, Rest... rest) {
    if (!engine_handles(self, rest...)) {
      return fallback<FunctionalOp>(self, rest...);
    }
    openreg::count_op(counted_name<FunctionalOp>(), true);
    structured::Functional<Meta> op;
    Run::run(op, self, rest...);
    return std::move(op.outputs_[0]);
  }

  static Tensor& inplace(Tensor& self, Rest... rest) {
    if (!engine_handles(self, rest...)) {
      return fallback<InplaceOp>(self, rest...);
    }
    openreg::count_op(counted_name<InplaceOp>(), true);
    structured::Inplace<Meta> op(self);
    Run::run(op, self, rest...);
    return self;
  }

  static Tensor& out(const Tensor& self, Rest... rest, Tensor& out) {
    if (!engine_handles(self, rest..., out)) {
      return fallback<OutOp>(self, rest..., out);
    }
    openreg::count_op(counted_name<OutOp>(), true);
    structured::Out<Meta> op(out);
    Run::run(op, self, rest...);
    return out;
  }

  static void register_all(torch::Library& m) {
    m.impl(structured::schema_name<FunctionalOp>().c_str(), TORCH_FN(functional));
    m.impl(structured::schema_name<InplaceOp>().c_str(), TORCH_FN(inplace));
    m.impl(structured::schema_name<OutOp>().c_str(), TORCH_FN(out));
  }
};

// The meta's output: self itself (in place) or a copy of self to work on.
template <class Form>
const Tensor& output_from(Form& op, const Tensor& self) {
  const Tensor& out = op.maybe_get_output(0);
  if (!out.is_same(self)) {
    out.copy_(self);
  }
  return out;
}

// Whether CPU's index_add runs as scatter_add (adding float16 and bfloat16
// in float32): a tensor of two or more dimensions indexed along its first or
// last, alpha 1, an int64 index, and source of out's sizes but along dim.
bool takes_scatter_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& source,
                       const Scalar& alpha) {
  if (out.dim() < 2 || (dim != 0 && dim != out.dim() - 1) || !alpha.equal(1.0) ||
      index.scalar_type() != at::kLong || source.dim() != out.dim()) {
    return false;
  }
  for (int64_t d = 0; d < out.dim(); ++d) {
    if (d != dim && out.size(d) != source.size(d)) {
      return false;
    }
  }
  return true;
}

// index_add: alpha * source added into the slices index names.
struct IndexAddRun {
  template <class Form>
  static void run(Form& op, const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source,
                  const Scalar& alpha) {
    auto pre = op.meta(self, dim, index, source, alpha);
    const Tensor& out = output_from(op, self);
    if (takes_scatter_add(out, pre.dim, index, source, alpha) && reduced_float(out)) {
      const Tensor wide_source = source.to(at::kFloat);
      scatter_in_float(out, [&](const Tensor& wide) {
        scatter_along(wide, pre.dim, index, wide_source, OR_INDEX_SCATTER_ADD, alpha);
      });
      return;
    }
    scatter_along(out, pre.dim, index, source, OR_INDEX_SCATTER_ADD, alpha);
  }
};
using IndexAdd = PrecomputedForms<at::meta::structured_index_add, IndexAddRun, at::_ops::index_add,
                                  at::_ops::index_add_, at::_ops::index_add_out, int64_t, const Tensor&,
                                  const Tensor&, const Scalar&>;

// index_copy: source's slices copied to the slices index names.
struct IndexCopyRun {
  template <class Form>
  static void run(Form& op, const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source) {
    auto pre = op.meta(self, dim, index, source);
    scatter_along(output_from(op, self), pre.dim, index, source, OR_INDEX_SCATTER);
  }
};
using IndexCopy = PrecomputedForms<at::meta::structured_index_copy, IndexCopyRun, at::_ops::index_copy,
                                   at::_ops::index_copy_, at::_ops::index_copy_out, int64_t, const Tensor&,
                                   const Tensor&>;

// The value a reduction starts from where the output's own values are left
// out (include_self=False), as CPU's index_reduce and scatter_reduce take it.
Scalar reduction_identity(at::native::ReductionType reduce, at::ScalarType dtype) {
  using at::native::ReductionType;
  Scalar value = 0;
  AT_DISPATCH_ALL_TYPES_AND3(at::kBool, at::kHalf, at::kBFloat16, dtype, "reduction_identity", [&] {
    using limits = std::numeric_limits<scalar_t>;
    if (reduce == ReductionType::PROD) {
      value = 1;
    } else if (reduce == ReductionType::MAX) {
      value = limits::has_infinity ? Scalar(-limits::infinity()) : Scalar(limits::lowest());
    } else if (reduce == ReductionType::MIN) {
      value = limits::has_infinity ? Scalar(limits::infinity()) : Scalar(limits::max());
    }
  });
  return value;
}

// index_reduce: source's slices reduced ('prod', 'mean', 'amax', 'amin') into
// the slices index names, with or without their own values; a mean divides by
// the number of contributions (floor division for integers), as CPU.
struct IndexReduceRun {
  template <class Form>
  static void run(Form& op, const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source,
                  c10::string_view reduce_name, bool include_self) {
    auto pre = op.meta(self, dim, index, source, reduce_name, include_self);
    const Tensor& out = output_from(op, self);
    const auto reduce = at::native::get_operator_enum(reduce_name, /*use_new_options=*/true);
    if (!include_self) {
      const_cast<Tensor&>(out).index_fill_(pre.dim, index, reduction_identity(reduce, out.scalar_type()));
    }
    scatter_along(out, pre.dim, index, source, scatter_op_of(reduce));
    if (reduce == at::native::ReductionType::MEAN) {
      Tensor counts = include_self ? at::ones_like(out) : at::zeros_like(out);
      counts.index_add_(pre.dim, index, at::ones_like(source));
      counts.masked_fill_(counts == 0, 1);
      if (out.is_floating_point()) {
        const_cast<Tensor&>(out).div_(counts);
      } else {
        const_cast<Tensor&>(out).div_(counts, "floor");
      }
    }
  }
};
using IndexReduce = PrecomputedForms<at::meta::structured_index_reduce, IndexReduceRun, at::_ops::index_reduce,
                                     at::_ops::index_reduce_, at::_ops::index_reduce_out, int64_t, const Tensor&,
                                     const Tensor&, c10::string_view, bool>;

// take: the elements of self (as if flattened) at `index`, negative
// positions counting from the end, into index's shape.
Tensor& take_out(const Tensor& self, const Tensor& index, Tensor& out) {
  using Op = at::_ops::take_out;
  if (!engine_handles(self, out)) {
    return fallback<Op>(self, index, out);
  }
  openreg::count_op(counted_name<Op>(), true);
  TORCH_CHECK(index.scalar_type() == at::kLong, "take(): Expected a long tensor for index, but got ",
              index.scalar_type());
  TORCH_CHECK(self.scalar_type() == out.scalar_type(), "take(): self and out expected to have the same dtype, but got "
              "self.dtype = ", self.scalar_type(), " and out.dtype = ", out.scalar_type());
  TORCH_CHECK(self.device() == out.device() && self.device() == index.device(), "take(): self, index and out "
              "expected to be in the same device, but got self.device = ", self.device(), ", index.device = ",
              index.device(), ", and out.device = ", out.device());
  TORCH_CHECK_INDEX(!(self.numel() == 0 && index.numel() != 0), "take(): tried to take from an empty tensor");
  at::assert_no_internal_overlap(out);
  at::assert_no_overlap(out, index);
  at::assert_no_overlap(out, self);
  at::native::resize_output(out, index.sizes());
  if (index.numel() == 0) {
    return out;
  }
  const Tensor flat = self.reshape({-1});
  const Tensor from = flat.as_strided(index.sizes(), std::vector<int64_t>(index.dim(), 0));
  auto iter = index_config().add_output(out).add_const_input(from).add_const_input(index).build();
  launch_index(iter, OR_INDEX_GATHER, 0, 1, {flat.numel()}, {byte_stride(flat, 0)}, true);
  return out;
}

Tensor take(const Tensor& self, const Tensor& index) {
  Tensor out = at::empty({0}, self.options());
  return take_out(self, index, out);
}

// put_: source's elements written (or added) to self's (as if flattened) at `index`.
Tensor& put_(Tensor& self, const Tensor& index, const Tensor& source, bool accumulate) {
  using Op = at::_ops::put_;
  if (!engine_handles(self, source)) {
    return fallback<Op>(self, index, source, accumulate);
  }
  openreg::count_op(counted_name<Op>(), true);
  TORCH_CHECK_INDEX(index.scalar_type() == at::kLong, "put_(): Expected a long tensor for index, but got ",
                    index.scalar_type());
  TORCH_CHECK(self.scalar_type() == source.scalar_type(), "put_(): self and source expected to have the same dtype, "
              "but got self.dtype = ", self.scalar_type(), " and source.dtype = ", source.scalar_type());
  TORCH_CHECK(self.device() == source.device() && self.device() == index.device(), "put_(): self, index and source "
              "expected to be in the same device, but got self.device = ", self.device(), ", index.device = ",
              index.device(), ", and source.device = ", source.device());
  TORCH_CHECK_INDEX(source.numel() == index.numel(), "put_(): Expected source and index to have the same number of "
                    "elements, but got source.numel() = ", source.numel(), ", index.numel() = ", index.numel());
  TORCH_CHECK_INDEX(!(self.numel() == 0 && index.numel() != 0), "put_(): Tried to put elements into an empty tensor");
  at::assert_no_internal_overlap(self);
  at::assert_no_overlap(self, index);
  at::assert_no_overlap(self, source);
  if (index.numel() == 0) {
    return self;
  }
  const Tensor work = self.is_contiguous() ? self : self.contiguous();
  const Tensor flat = work.view({-1});
  const Tensor to = flat.as_strided(index.sizes(), std::vector<int64_t>(index.dim(), 0));
  const Tensor from = source.reshape(index.sizes());
  auto iter = index_config().add_output(to).add_const_input(from).add_const_input(index).build();
  launch_index(iter, accumulate ? OR_INDEX_SCATTER_ADD : OR_INDEX_SCATTER, 1, 0, {flat.numel()},
               {byte_stride(flat, 0)}, true);
  if (!work.is_same(self)) {
    self.copy_(work);
  }
  return self;
}

// repeat_interleave(repeats): i repeated repeats[i] times. Each block's start
// gets a mark (several marks where blocks are empty); the running count of
// marks is the block index. The total is read back unless output_size names it.
Tensor repeat_interleave_indices(const Tensor& repeats, std::optional<c10::SymInt> output_size) {
  using Op = at::_ops::repeat_interleave_Tensor;
  if (!engine_handles(repeats)) {
    return fallback<Op>(repeats, output_size);
  }
  openreg::count_op(counted_name<Op>(), true);
  TORCH_CHECK(repeats.dim() == 1, "repeat_interleave only accept 1D vector as repeat");
  TORCH_CHECK(repeats.scalar_type() == at::kLong || repeats.scalar_type() == at::kInt,
              "repeats has to be Long or Int tensor");
  const int64_t n = repeats.size(0);
  if (n == 0) {
    return at::empty_like(repeats, at::MemoryFormat::Contiguous);
  }
  const Tensor ends = repeats.cumsum(0, at::kLong);
  int64_t total = 0;
  if (output_size.has_value()) {
    total = output_size->expect_int();
  } else {
    const Tensor read = at::stack({ends.select(0, n - 1), repeats.lt(0).any().to(at::kLong)}).cpu();
    total = read.const_data_ptr<int64_t>()[0];
    TORCH_CHECK(read.const_data_ptr<int64_t>()[1] == 0, "repeats can not be negative");
  }
  Tensor marks = at::zeros({total + 1}, repeats.options().dtype(at::kLong));
  if (n > 1) {
    marks.index_add_(0, ends.narrow(0, 0, n - 1).clamp(0, total), at::ones({n - 1}, marks.options()));
  }
  return marks.narrow(0, 0, total).cumsum(0).to(repeats.scalar_type());
}

// self.index_fill_(dim, index, value): value scattered to every slice index names.
Tensor& index_fill_with(Tensor& self, int64_t dim, const Tensor& index, const Tensor& value) {
  TORCH_CHECK_INDEX(index.dim() <= 1, "index_fill_(): Expected a 1-D index tensor, got ", index.dim(), "-D");
  TORCH_CHECK(index.scalar_type() == at::kLong, "index_fill_(): Expected dtype int64 for index.");
  at::assert_no_internal_overlap(self);
  if (at::has_internal_overlap(self) == at::MemOverlap::Yes) {
    TORCH_WARN("Use of index_fill_ on expanded tensors is deprecated. Please clone() the tensor before performing "
               "this operation. This also applies to advanced indexing e.g. tensor[index] = tensor");
  }
  dim = c10::maybe_wrap_dim(dim, self.dim());
  const Tensor idx = index.reshape({-1});
  if (idx.numel() == 0 || self.numel() == 0) {
    return self;
  }
  const Tensor dst = at_least_1d(self);
  auto shape = dst.sizes().vec();
  shape[dim] = idx.numel();
  std::vector<int64_t> idx_strides(dst.dim(), 0);
  idx_strides[dim] = idx.stride(0);
  const Tensor to = restride_dim(dst, dim, shape);
  const Tensor from = value.to(self.scalar_type()).expand(shape);
  const Tensor idx_r = idx.as_strided(shape, idx_strides);
  auto iter = index_config().add_output(to).add_const_input(from).add_const_input(idx_r).build();
  launch_index(iter, OR_INDEX_SCATTER, 1, 0, {dst.size(dim)}, {byte_stride(dst, dim)}, true);
  return self;
}

Tensor& index_fill_scalar(Tensor& self, int64_t dim, const Tensor& index, const Scalar& value) {
  using Op = at::_ops::index_fill__int_Scalar;
  if (!engine_handles(self, value)) {
    return fallback<Op>(self, dim, index, value);
  }
  openreg::count_op(counted_name<Op>(), true);
  return index_fill_with(self, dim, index, at::scalar_tensor(value, self.options()));
}

Tensor& index_fill_tensor(Tensor& self, int64_t dim, const Tensor& index, const Tensor& value) {
  using Op = at::_ops::index_fill__int_Tensor;
  TORCH_CHECK(value.dim() == 0, "index_fill_ only supports a 0-dimensional value tensor, but got tensor with ",
              value.dim(), " dimension(s).");
  if (!engine_handles(self, value)) {
    return fallback<Op>(self, dim, index, value);
  }
  openreg::count_op(counted_name<Op>(), true);
  return index_fill_with(self, dim, index, value.to(self.device()));
}

// Advanced indexing's forms (the meta precomputes the indexed sizes and strides).
template <class Form>
void index_run(Form& op, const Tensor& self, const c10::List<std::optional<Tensor>>& indices) {
  auto pre = op.meta(self, at::IOptTensorListRef(indices));
  op.impl(self, pre.sizes, pre.strides, op.maybe_get_output(0));
}

Tensor index(const Tensor& self, const c10::List<std::optional<Tensor>>& indices) {
  using Op = at::_ops::index_Tensor;
  if (!engine_handles(self)) {
    return fallback<Op>(self, indices);
  }
  openreg::count_op(counted_name<Op>(), true);
  structured::Functional<at::native::structured_index_out> op;
  index_run(op, self, indices);
  return std::move(op.outputs_[0]);
}

Tensor& index_out(const Tensor& self, const c10::List<std::optional<Tensor>>& indices, Tensor& out) {
  using Op = at::_ops::index_Tensor_out;
  if (!engine_handles(self, out)) {
    return fallback<Op>(self, indices, out);
  }
  openreg::count_op(counted_name<Op>(), true);
  structured::Out<at::native::structured_index_out> op(out);
  index_run(op, self, indices);
  return out;
}

// The coordinates of the nonzero elements: counted on the device, the count
// read back (the output's size depends on it, as on CUDA), then written.
Tensor& nonzero_out(const Tensor& self, Tensor& result) {
  using Op = at::_ops::nonzero_out;
  if (!engine_handles(self)) {
    return fallback<Op>(self, result);
  }
  openreg::count_op(counted_name<Op>(), true);
  TORCH_CHECK(result.scalar_type() == at::kLong, "nonzero for openreg tensors expects the out tensor to be int64, "
              "got ", result.scalar_type());
  TORCH_CHECK(self.numel() < std::numeric_limits<int>::max(), "nonzero is not supported for tensors with more than "
              "INT_MAX elements, See https://github.com/pytorch/pytorch/issues/51871");
  const int64_t count = self.numel() == 0 ? 0 : (self != 0).sum().item<int64_t>();
  at::native::resize_output(result, {count, self.dim()});
  launch_nonzero(result, self, count);
  return result;
}

Tensor nonzero(const Tensor& self) {
  Tensor result = at::empty({0}, self.options().dtype(at::kLong));
  return nonzero_out(self, result);
}

// nonzero_static: the first `size` coordinates of nonzero elements (nonzero's,
// on the device), padded with fill_value to `size` rows.
Tensor nonzero_static(const Tensor& self, c10::SymInt size_sym, int64_t fill_value) {
  using Op = at::_ops::nonzero_static;
  if (!engine_handles(self)) {
    return fallback<Op>(self, size_sym, fill_value);
  }
  openreg::count_op(counted_name<Op>(), true);
  const int64_t size = size_sym.expect_int();
  TORCH_CHECK(size >= 0, "nonzero_static: 'size' must be an non-negative integer, but got size = ", size);
  const Tensor found = at::nonzero(self);
  Tensor result = at::full({size, self.dim()}, fill_value, self.options().dtype(at::kLong));
  const int64_t n = std::min(size, found.size(0));
  if (n > 0) {
    result.narrow(0, 0, n).copy_(found.narrow(0, 0, n));
  }
  return result;
}

// self[mask], with self and mask broadcast together (as CPU does).
Tensor masked_select(const Tensor& self, const Tensor& mask) {
  using Op = at::_ops::masked_select;
  if (!engine_handles(self, mask)) {
    return fallback<Op>(self, mask);
  }
  openreg::count_op(counted_name<Op>(), true);
  TORCH_CHECK(mask.scalar_type() == at::kBool, "masked_select: expected BoolTensor for mask");
  auto [mask_b, self_b] = at::expand_outplace(mask, self);
  return self_b->index({*mask_b});
}

// self's elements where mask (broadcast to self) is true take source's
// first elements, in row-major order: the mask's nonzero positions, then a
// put, both on the device.
Tensor& masked_scatter_(Tensor& self, const Tensor& mask, const Tensor& source) {
  using Op = at::_ops::masked_scatter_;
  if (!engine_handles(self, mask, source)) {
    return fallback<Op>(self, mask, source);
  }
  TORCH_CHECK(mask.scalar_type() == at::kBool, "masked_scatter_ only supports boolean masks, but got mask with dtype ",
              mask.scalar_type());
  TORCH_CHECK(self.scalar_type() == source.scalar_type(),
              "masked_scatter: expected self and source to have same dtypes but got", self.scalar_type(), " and ",
              source.scalar_type());
  openreg::count_op(counted_name<Op>(), true);
  const Tensor positions = at::nonzero(mask.expand(self.sizes()));
  const int64_t count = positions.size(0);
  TORCH_CHECK(source.numel() >= count, "Number of elements of source < number of ones in mask");
  if (count == 0) {
    return self;
  }
  const Tensor values = source.reshape({-1}).narrow(0, 0, count);
  if (self.dim() == 0) {
    return self.copy_(values.reshape({}));
  }
  c10::List<std::optional<Tensor>> indices;
  for (const Tensor& column : positions.unbind(1)) {
    indices.push_back(column);
  }
  return self.index_put_(indices, values);
}

// cat: ATen's meta checks shapes and picks the result's dtype and memory
// format; each input is then copied into its slice on the device (copy_
// converts dtypes there).
template <class Form>
void cat_run(Form& op, const at::ITensorListRef& tensors, int64_t dim) {
  auto pre = op.meta(tensors, dim);
  const Tensor& result = op.maybe_get_output(0);
  if (result.numel() == 0) {
    return;
  }
  int64_t offset = 0;
  for (const Tensor& t : tensors) {
    if (t.dim() == 1 && t.numel() == 0) {
      continue; // the legacy empty tensor, which cat skips
    }
    const int64_t n = t.size(pre.dim);
    if (n > 0) {
      result.narrow(pre.dim, offset, n).copy_(t);
    }
    offset += n;
  }
}

bool cat_handles(const at::ITensorListRef& tensors) {
  bool ok = true;
  for (const Tensor& t : tensors) {
    ok = ok && engine_handles(t);
  }
  return ok;
}

Tensor cat(const at::ITensorListRef& tensors, int64_t dim) {
  using Op = at::_ops::cat;
  if (!cat_handles(tensors)) {
    return fallback<Op>(tensors, dim);
  }
  openreg::count_op(counted_name<Op>(), true);
  structured::Functional<at::meta::structured_cat> op;
  cat_run(op, tensors, dim);
  return std::move(op.outputs_[0]);
}

Tensor& cat_out(const at::ITensorListRef& tensors, int64_t dim, Tensor& out) {
  using Op = at::_ops::cat_out;
  if (!cat_handles(tensors) || !engine_handles(out)) {
    return fallback<Op>(tensors, dim, out);
  }
  openreg::count_op(counted_name<Op>(), true);
  structured::Out<at::meta::structured_cat> op(out);
  cat_run(op, tensors, dim);
  return out;
}

// flip: one copy whose source walks the flipped dimensions backwards.
Tensor flip(const Tensor& self, at::IntArrayRef dims) {
  using Op = at::_ops::flip;
  if (!engine_handles(self)) {
    return fallback<Op>(self, dims);
  }
  openreg::count_op(counted_name<Op>(), true);
  const auto flipped = at::dim_list_to_bitset(dims, self.dim()); // wraps, rejects repeats
  Tensor out = at::empty_like(self, at::MemoryFormat::Preserve);
  launch_flip(out, self, flipped.to_ullong());
  return out;
}

// roll: ATen's own (narrow and cat, per dimension), on device ops.
Tensor roll(const Tensor& self, c10::SymIntArrayRef shifts, at::IntArrayRef dims) {
  using Op = at::_ops::roll;
  if (!engine_handles(self)) {
    return fallback<Op>(self, shifts, dims);
  }
  openreg::count_op(counted_name<Op>(), true);
  return at::native::roll(self, C10_AS_INTARRAYREF_SLOW(shifts), dims);
}

// tril / triu: ATen's meta shapes the output; one positional kernel.
template <or_position_op Op>
void triangle_impl(at::impl::MetaBase& op, const Tensor& self, int64_t diagonal) {
  launch_positions(Op, op.maybe_get_output(0), self, {diagonal});
}

// eye: zeros with ones on the diagonal (a strided view), both device fills.
// ---- isin: a sort of the test elements and a binary search per element ----

// out[i] = elements[i] is among test (or is not, with invert), in the dtype
// both promote to, as CPU's sorting path compares them.
void isin_impl(at::impl::MetaBase& op, const Tensor& elements, const Tensor& test, bool /*assume_unique*/,
               bool invert) {
  const Tensor& out = op.maybe_get_output(0);
  if (out.numel() == 0) {
    return;
  }
  if (test.numel() == 0) {
    out.fill_(invert);
    return;
  }
  const auto common = at::result_type(elements, test);
  const Tensor sorted = std::get<0>(at::sort(test.reshape({-1}).to(common), /*stable=*/false, 0, false));
  const Tensor flat = elements.reshape({-1}).to(common);
  // NaNs sort last but would stop the binary search: searched as +inf (an
  // element is still compared with the value itself, and NaN equals nothing)
  const Tensor keys = at::isFloatingType(common) ? at::where(sorted.isnan(), INFINITY, sorted) : sorted;
  const Tensor pos = at::searchsorted(keys, flat).clamp_max_(sorted.numel() - 1);
  Tensor found = sorted.gather(0, pos).eq_(flat);
  if (invert) {
    found.logical_not_();
  }
  out.copy_(found.view(elements.sizes()));
}

void isin_scalar_impl(at::impl::MetaBase& op, const Tensor& elements, const Scalar& test, bool /*assume_unique*/,
                      bool invert) {
  Tensor out = op.maybe_get_output(0);
  if (invert) {
    at::ne_out(out, elements, test);
  } else {
    at::eq_out(out, elements, test);
  }
}

// isin(Scalar, Tensor): the element as a 0-dim tensor on the device.
Tensor isin_scalar_tensor(const Scalar& element, const Tensor& test, bool assume_unique, bool invert) {
  return at::isin(at::scalar_tensor(element, test.options()), test, assume_unique, invert);
}

Tensor& isin_scalar_tensor_out(const Scalar& element, const Tensor& test, bool assume_unique, bool invert,
                               Tensor& out) {
  return at::isin_out(out, at::scalar_tensor(element, test.options()), test, assume_unique, invert);
}

// tril_indices / triu_indices: the coordinates (2, N) of a row x col
// triangle, in row-major order: the nonzero positions of a triangle of ones.
template <bool Lower>
Tensor triangle_indices(int64_t row, int64_t col, int64_t offset, std::optional<at::ScalarType> dtype,
                        std::optional<at::Layout> layout, std::optional<c10::Device> device, std::optional<bool>) {
  using Op = std::conditional_t<Lower, at::_ops::tril_indices, at::_ops::triu_indices>;
  openreg::count_op(counted_name<Op>(), true);
  const char* name = Lower ? "tril_indices" : "triu_indices";
  TORCH_CHECK(row >= 0, "row must be non-negative, got", row);
  TORCH_CHECK(col >= 0, "col must be non-negative, got", col);
  const auto type = dtype.value_or(at::kLong);
  TORCH_CHECK_NOT_IMPLEMENTED(type == at::kLong || type == at::kInt, "\"", name, "\" not implemented for '",
                              c10::toString(type), "'");
  TORCH_CHECK(!layout.has_value() || *layout == at::kStrided, name, ": only strided tensors");
  const auto options = at::TensorOptions().device(device.value_or(c10::Device(c10::DeviceType::PrivateUse1)));
  const Tensor ones = at::ones({row, col}, options.dtype(at::kBool));
  const Tensor triangle = Lower ? ones.tril(offset) : ones.triu(offset);
  return triangle.nonzero().t().to(type).contiguous();
}

// narrow_copy: the slice copied on the device.
Tensor narrow_copy(const Tensor& self, int64_t dim, c10::SymInt start, c10::SymInt length) {
  using Op = at::_ops::narrow_copy;
  if (!engine_handles(self)) {
    return fallback<Op>(self, dim, start, length);
  }
  openreg::count_op(counted_name<Op>(), true);
  return self.narrow_symint(dim, std::move(start), std::move(length)).clone(at::MemoryFormat::Contiguous);
}

// channel_shuffle: (N, g, C/g, ...) with the two group dimensions swapped.
Tensor channel_shuffle(const Tensor& self, c10::SymInt groups_sym) {
  using Op = at::_ops::channel_shuffle;
  if (!engine_handles(self)) {
    return fallback<Op>(self, groups_sym);
  }
  openreg::count_op(counted_name<Op>(), true);
  const int64_t groups = groups_sym.expect_int();
  TORCH_CHECK(self.dim() > 2, "channel_shuffle expects input to have at least 3 dimensions, but got input with ",
              self.dim(), " dimension(s)");
  TORCH_CHECK(groups > 0, "Number of groups to divide channels in must be positive.", " Value of groups:", groups);
  const int64_t c = self.size(1);
  TORCH_CHECK(c % groups == 0, "Number of channels must be divisible by groups. Got ", c, " channels and ", groups,
              " groups.");
  auto shape = self.sizes().vec();
  shape[1] = c / groups;
  shape.insert(shape.begin() + 1, groups);
  return self.reshape(shape).transpose(1, 2).contiguous(self.suggest_memory_format()).view(self.sizes());
}

// logspace: base ** (the linspace of exponents), both on the device, in CPU's
// arithmetic: for floating results the exponents and powers in double from
// the ends converted to the result's type; for integer results in float32.
Tensor& logspace_out(const Scalar& start, const Scalar& end, int64_t steps, double base, Tensor& result) {
  using Op = at::_ops::logspace_out;
  if (!engine_handles(result, start, end)) {
    return fallback<Op>(start, end, steps, base, result);
  }
  openreg::count_op(counted_name<Op>(), true);
  TORCH_CHECK(steps >= 0, "number of steps must be non-negative");
  if (result.numel() != steps) {
    result.resize_({steps});
  }
  if (steps == 0) {
    return result;
  }
  if (steps == 1) {
    result.fill_(std::pow(base, start.to<double>()));
    return result;
  }
  const bool integral = !at::isFloatingType(result.scalar_type());
  double a = 0.0, b = 0.0, step = 0.0;
  AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, result.scalar_type(), "logspace", [&] {
    const scalar_t first = start.to<scalar_t>();
    const scalar_t last = end.to<scalar_t>();
    a = static_cast<double>(first);
    b = static_cast<double>(last);
    step = integral ? static_cast<double>(static_cast<float>(last - first) / static_cast<float>(steps - 1))
                    : static_cast<double>(last - first) / static_cast<double>(steps - 1);
  });
  const Tensor exponents = at::empty({steps}, result.options().dtype(integral ? at::kFloat : at::kDouble));
  launch_positions(OR_POSITION_LINSPACE, exponents, exponents, {a, b, step, steps});
  const Scalar base_value = integral ? Scalar(static_cast<double>(static_cast<float>(base))) : Scalar(base);
  result.copy_(at::pow(base_value, exponents));
  return result;
}

Tensor& eye_out(int64_t n, int64_t m, Tensor& result) {
  using Op = at::_ops::eye_m_out;
  if (!engine_handles(result)) {
    return fallback<Op>(n, m, result);
  }
  openreg::count_op(counted_name<Op>(), true);
  TORCH_CHECK(n >= 0, "n must be greater or equal to 0, got ", n);
  TORCH_CHECK(m >= 0, "m must be greater or equal to 0, got ", m);
  result.resize_({n, m});
  result.zero_();
  if (n > 0 && m > 0) {
    result.diagonal().fill_(1);
  }
  return result;
}

Tensor& eye_n_out(int64_t n, Tensor& result) {
  return eye_out(n, n, result);
}

// ---- unique ----

// The distinct values of `self` in ascending order (NaNs each their own, as
// CPU's sort-based unique), the position of each element's value among them
// (inverse, shaped like self) and how often each occurs: a stable sort, a
// mask of where the sorted values change, and scans over it. Only the count
// of distinct values (the output's size) is read back, as any backend must.
std::tuple<Tensor, Tensor, Tensor> unique_sorted(const Tensor& self, bool consecutive, bool return_inverse,
                                                 bool return_counts) {
  const Tensor flat = self.reshape({-1});
  const int64_t n = flat.numel();
  Tensor values = flat, order;
  if (!consecutive) {
    auto [sorted, perm] = flat.sort(/*stable=*/true, /*dim=*/0, /*descending=*/false);
    values = sorted;
    order = perm;
  }
  Tensor starts = at::ones({n}, flat.options().dtype(at::kBool)); // where a new value begins
  if (n > 1) {
    starts.narrow(0, 1, n - 1).copy_(values.narrow(0, 1, n - 1).ne(values.narrow(0, 0, n - 1)));
  }
  Tensor unique = values.masked_select(starts);
  Tensor inverse, counts;
  if (return_inverse || return_counts) {
    const Tensor group = starts.cumsum(0).sub_(1); // each sorted element's value's position
    if (return_inverse) {
      inverse = consecutive ? group : at::empty({n}, group.options()).scatter_(0, order, group);
      inverse = inverse.view(self.sizes());
    }
    if (return_counts) {
      counts = at::zeros({unique.numel()}, group.options()).index_add_(0, group, at::ones_like(group));
    }
  }
  if (!inverse.defined()) {
    inverse = at::empty({0}, self.options().dtype(at::kLong));
  }
  if (!counts.defined()) {
    counts = at::empty({0}, self.options().dtype(at::kLong));
  }
  return {unique, inverse, counts};
}

// `sorted` may be false: sorted output is one valid order (CPU sorts too).
std::tuple<Tensor, Tensor> unique_kernel(const Tensor& self, bool /*sorted*/, bool return_inverse) {
  if (!structured::engine_handles(self)) {
    return structured::fallback<at::_ops::_unique>(self, true, return_inverse);
  }
  openreg::count_op(structured::counted_name<at::_ops::_unique>(), true);
  auto [values, inverse, counts] = unique_sorted(self, false, return_inverse, false);
  return {values, inverse};
}

std::tuple<Tensor, Tensor, Tensor> unique2_kernel(const Tensor& self, bool /*sorted*/, bool return_inverse,
                                                  bool return_counts) {
  if (!structured::engine_handles(self)) {
    return structured::fallback<at::_ops::_unique2>(self, true, return_inverse, return_counts);
  }
  openreg::count_op(structured::counted_name<at::_ops::_unique2>(), true);
  return unique_sorted(self, false, return_inverse, return_counts);
}

std::tuple<Tensor, Tensor, Tensor> unique_consecutive_kernel(const Tensor& self, bool return_inverse,
                                                             bool return_counts, std::optional<int64_t> dim) {
  if (!structured::engine_handles(self) || (dim.has_value() && self.dim() > 1)) {
    // along a dimension of a multi-dimensional tensor: ATen's kernel, through the fallback
    return structured::fallback<at::_ops::unique_consecutive>(self, return_inverse, return_counts, dim);
  }
  openreg::count_op(structured::counted_name<at::_ops::unique_consecutive>(), true);
  return unique_sorted(self, true, return_inverse, return_counts);
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("flip", TORCH_FN(flip));
  OPENREG_STRUCTURED(m, tril, triangle_impl<OR_POSITION_TRIL>, tril, tril_, tril_out);
  OPENREG_STRUCTURED(m, triu, triangle_impl<OR_POSITION_TRIU>, triu, triu_, triu_out);
  OPENREG_NATIVE(m, arange_start_out, at::native::arange_out);
  OPENREG_NATIVE(m, linspace_out, at::native::linspace_out);
  m.impl("logspace.out", TORCH_FN(logspace_out));
  OPENREG_STRUCTURED(m, isin_Tensor_Tensor, isin_impl, isin_Tensor_Tensor, none, isin_Tensor_Tensor_out);
  OPENREG_STRUCTURED(m, isin_Tensor_Scalar, isin_scalar_impl, isin_Tensor_Scalar, none, isin_Tensor_Scalar_out);
  m.impl("isin.Scalar_Tensor", TORCH_FN(isin_scalar_tensor));
  m.impl("isin.Scalar_Tensor_out", TORCH_FN(isin_scalar_tensor_out));
  m.impl("tril_indices", TORCH_FN(triangle_indices<true>));
  m.impl("triu_indices", TORCH_FN(triangle_indices<false>));
  m.impl("narrow_copy", TORCH_FN(narrow_copy));
  m.impl("channel_shuffle", TORCH_FN(channel_shuffle));
  OPENREG_NATIVE(m, pixel_shuffle, at::native::math_pixel_shuffle);
  OPENREG_NATIVE(m, pixel_unshuffle, at::native::math_pixel_unshuffle);
  m.impl("roll", TORCH_FN(roll));
  m.impl("eye.m_out", TORCH_FN(eye_out));
  m.impl("eye.out", TORCH_FN(eye_n_out));
  m.impl("cat", TORCH_FN(cat));
  m.impl("cat.out", TORCH_FN(cat_out));
  OPENREG_STRUCTURED_NATIVE(m, gather_out, gather, none, gather_out);
  OPENREG_STRUCTURED_NATIVE(m, scatter_src_out, scatter_src, scatter__src, scatter_src_out);
  OPENREG_STRUCTURED_NATIVE(m, scatter_value_out, scatter_value, scatter__value, scatter_value_out);
  OPENREG_STRUCTURED_NATIVE(m, scatter_reduce_out, scatter_reduce, scatter__reduce, scatter_reduce_out);
  OPENREG_STRUCTURED_NATIVE(m, scatter_value_reduce_out, scatter_value_reduce, scatter__value_reduce,
                            scatter_value_reduce_out);
  OPENREG_STRUCTURED_NATIVE(m, scatter_add, scatter_add, scatter_add_, scatter_add_out);
  m.impl("index_select", TORCH_FN(index_select));
  m.impl("index_select.out", TORCH_FN(index_select_out));
  OPENREG_STRUCTURED_NATIVE(m, scatter_reduce_two, scatter_reduce_two, scatter_reduce__two, scatter_reduce_two_out);
  IndexAdd::register_all(m);
  IndexCopy::register_all(m);
  IndexReduce::register_all(m);
  m.impl("take", TORCH_FN(take));
  m.impl("take.out", TORCH_FN(take_out));
  m.impl("put_", TORCH_FN(put_));
  m.impl("repeat_interleave.Tensor", TORCH_FN(repeat_interleave_indices));
  m.impl("index_fill_.int_Scalar", TORCH_FN(index_fill_scalar));
  m.impl("index_fill_.int_Tensor", TORCH_FN(index_fill_tensor));
  m.impl("index.Tensor", TORCH_FN(index));
  m.impl("index.Tensor_out", TORCH_FN(index_out));
  OPENREG_NATIVE(m, _index_put_impl_, at::native::_index_put_impl_);
  m.impl("nonzero", TORCH_FN(nonzero));
  m.impl("nonzero.out", TORCH_FN(nonzero_out));
  m.impl("nonzero_static", TORCH_FN(nonzero_static));
  m.impl("masked_select", TORCH_FN(masked_select));
  m.impl("masked_scatter_", TORCH_FN(masked_scatter_));
  m.impl("masked_fill_.Scalar", TORCH_FN(masked_fill_scalar));
  m.impl("masked_fill_.Tensor", TORCH_FN(masked_fill_tensor));
  m.impl("_unique", TORCH_FN(unique_kernel));
  m.impl("_unique2", TORCH_FN(unique2_kernel));
  m.impl("unique_consecutive", TORCH_FN(unique_consecutive_kernel));
}

} // namespace openreg::indexing
