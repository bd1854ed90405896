// Embedding bags on the device: nn.EmbeddingBag / F.embedding_bag's forward
// (sum, mean and max of each bag's rows, per-sample weights, padding_idx,
// include_last_offset) and its gradients, for the weight and for the
// per-sample weights.
//
// A bag is the run of indices between two offsets. Every index gets its bag
// (offset2bag: a mark at each bag's start, counted by a cumulative sum), then
// the rows are gathered and added into their bags with index_add, in index
// order, as CPU's loop adds them; the maximum is a scatter_reduce. The
// offsets' first and last values are read back once, as CPU reads them, for
// its checks.

#include <limits>

#include <ATen/ATen.h>
#include <ATen/ops/_embedding_bag_backward_native.h>
#include <torch/library.h>

#include "OpenRegEngine.h"
#include "OpenRegStructured.h"

namespace openreg::embedding_bag {
namespace {

using at::Tensor;
using structured::counted_name;
using structured::engine_handles;
using structured::fallback;

constexpr int64_t kSum = 0, kMean = 1, kMax = 2;

const char* mode_name(int64_t mode) {
  return mode == kSum ? "sum" : mode == kMean ? "mean" : "max";
}

// The number of bags and each index's bag, after CPU's checks of the offsets.
struct Bags {
  int64_t count;
  Tensor of_index; // int64, one per index
};

Bags bags_of(const Tensor& indices, const Tensor& offsets, bool include_last_offset) {
  TORCH_CHECK(indices.dim() == 1, "input has to be a 1D or 2D Tensor, but got Tensor of dimension ", indices.dim());
  TORCH_CHECK(offsets.dim() == 1, "offsets has to be a 1D Tensor, but got Tensor of dimension ", offsets.dim());
  TORCH_CHECK(indices.scalar_type() == at::kLong || indices.scalar_type() == at::kInt,
              "embedding_bag: expected indices of type Long or Int, got ", indices.scalar_type());
  TORCH_CHECK(offsets.scalar_type() == indices.scalar_type(), "embedding_bag: expected offsets of type ",
              indices.scalar_type(), " (the indices'), got ", offsets.scalar_type());
  const int64_t n = indices.numel();
  int64_t count = offsets.numel() - (include_last_offset ? 1 : 0);
  TORCH_CHECK(count >= 0, "include_last_offset: number of offset should be at least 1");
  if (offsets.numel() > 0) {
    const Tensor ends = at::stack({offsets.select(0, 0), offsets.select(0, -1)}).to(at::kLong).cpu();
    const int64_t first = ends.const_data_ptr<int64_t>()[0], last = ends.const_data_ptr<int64_t>()[1];
    TORCH_CHECK(first == 0, "offsets[0] has to be 0, i.e., the first sequence in the mini-batch has to start from "
                "position 0. However, got ", first);
    TORCH_CHECK(last <= n, "offsets[-1] can not be greater than input's length ", n, ", but got offsets[-1] of ",
                last);
  }
  Tensor marks = at::zeros({n + 1}, indices.options().dtype(at::kLong));
  if (count > 1) {
    // a mark where each bag after the first starts (several where bags are empty)
    const Tensor starts = offsets.narrow(0, 1, count - 1).to(at::kLong).clamp(0, n);
    marks.index_add_(0, starts, at::ones({count - 1}, marks.options()));
  }
  return {count, marks.narrow(0, 0, n).cumsum(0)};
}

// Whether each index counts (not padding_idx).
Tensor counted(const Tensor& indices, int64_t padding_idx) {
  return padding_idx >= 0 ? indices.ne(padding_idx) : at::ones_like(indices, indices.options().dtype(at::kBool));
}

// (output, offset2bag, bag_size, max_indices), as the four results of
// _embedding_bag: bag_size counts each bag's non-padding indices; for max,
// max_indices holds the weight row of each maximum (-1 in empty bags).
std::tuple<Tensor, Tensor, Tensor, Tensor> forward(const Tensor& weight, const Tensor& indices_in,
                                                   const Tensor& offsets, int64_t mode,
                                                   const std::optional<Tensor>& per_sample_weights,
                                                   bool include_last_offset, int64_t padding_idx) {
  TORCH_CHECK(weight.dim() == 2, "weight has to be a 2D Tensor, but got Tensor of dimension ", weight.dim());
  TORCH_CHECK(mode >= kSum && mode <= kMax, "embedding_bag: unknown mode ", mode);
  const bool weighted = per_sample_weights.has_value() && per_sample_weights->defined();
  if (weighted) {
    TORCH_CHECK(mode == kSum, "embedding_bag: per_sample_weights was not None. per_sample_weights is only supported "
                "for mode='sum' (got mode='", mode_name(mode), "'). Please open a feature request on GitHub.");
    TORCH_CHECK(per_sample_weights->sizes() == indices_in.sizes(), "embedding_bag: per_sample_weights must have the "
                "same shape as input, got ", per_sample_weights->sizes(), " and ", indices_in.sizes());
  }
  const Bags bags = bags_of(indices_in, offsets, include_last_offset);
  const Tensor indices = indices_in.to(at::kLong);
  const int64_t D = weight.size(1);
  const Tensor keep = counted(indices, padding_idx);
  Tensor rows = weight.index_select(0, indices); // (n, D); an index out of range stops the gather
  Tensor bag_size = at::zeros({bags.count}, indices.options());
  bag_size.index_add_(0, bags.of_index, keep.to(at::kLong));
  Tensor output;
  Tensor max_indices = at::empty({0}, indices.options());
  if (mode == kMax) {
    const Tensor lowest = at::full({}, -std::numeric_limits<double>::infinity(), weight.options());
    const Tensor candidates = at::where(keep.unsqueeze(1), rows, lowest); // padding never wins
    const Tensor bag_rows = bags.of_index.unsqueeze(1).expand({indices.numel(), D});
    output = at::zeros({bags.count, D}, weight.options())
                 .scatter_reduce_(0, bag_rows, candidates, "amax", /*include_self=*/false);
    // the first index reaching each bag's maximum, as CPU's strict comparison keeps it
    const Tensor position = at::arange(indices.numel(), indices.options()).unsqueeze(1).expand({indices.numel(), D});
    const Tensor reached = candidates.eq(output.index_select(0, bags.of_index)).logical_and_(keep.unsqueeze(1));
    const Tensor first = at::full({bags.count, D}, indices.numel(), indices.options())
                             .scatter_reduce_(0, bag_rows, at::where(reached, position, indices.numel()), "amin");
    const int64_t n = indices.numel();
    const Tensor empty = first.eq(n);
    if (n == 0) {
      max_indices = at::full({bags.count, D}, -1, indices.options());
    } else {
      const Tensor row = indices.index_select(0, first.clamp_max(n - 1).reshape({-1})).view(first.sizes());
      max_indices = at::where(empty, -1, row);
    }
    output = at::where(empty, 0, output); // an empty bag gives zeros
  } else {
    if (weighted) {
      rows = rows * per_sample_weights->to(weight.scalar_type()).unsqueeze(1);
    }
    rows = at::where(keep.unsqueeze(1), rows, 0);
    output = at::zeros({bags.count, D}, weight.options()).index_add_(0, bags.of_index, rows);
    if (mode == kMean) {
      output = output / bag_size.clamp_min(1).unsqueeze(1).to(weight.scalar_type());
    }
  }
  return {output, bags.of_index, bag_size, max_indices};
}

template <class Op>
std::tuple<Tensor, Tensor, Tensor, Tensor> embedding_bag_kernel(const Tensor& weight, const Tensor& indices,
                                                                const Tensor& offsets, bool scale_grad_by_freq,
                                                                int64_t mode, bool sparse,
                                                                const std::optional<Tensor>& per_sample_weights,
                                                                bool include_last_offset, int64_t padding_idx) {
  if (!engine_handles(weight, per_sample_weights)) { // (sparse: the gradient's layout; the forward is the same)
    return fallback<Op>(weight, indices, offsets, scale_grad_by_freq, mode, sparse, per_sample_weights,
                        include_last_offset, padding_idx);
  }
  openreg::count_op(counted_name<Op>(), true);
  return forward(weight, indices, offsets, mode, per_sample_weights, include_last_offset, padding_idx);
}

// The weight's gradient: each counted index's row gets its bag's gradient
// (scaled by its per-sample weight, divided by the bag's size for means; for
// max, only the maxima's rows), in index order; with scale_grad_by_freq,
// divided by how often the index occurs.
Tensor dense_backward(const Tensor& grad, const Tensor& indices_in, const Tensor& offset2bag, const Tensor& bag_size,
                      const Tensor& max_indices, c10::SymInt num_weights_sym, bool scale_grad_by_freq, int64_t mode,
                      const std::optional<Tensor>& per_sample_weights, int64_t padding_idx) {
  using Op = at::_ops::_embedding_bag_dense_backward;
  if (!engine_handles(grad, per_sample_weights)) {
    return fallback<Op>(grad, indices_in, offset2bag, bag_size, max_indices, num_weights_sym, scale_grad_by_freq, mode,
                        per_sample_weights, padding_idx);
  }
  openreg::count_op(counted_name<Op>(), true);
  const int64_t num_weights = num_weights_sym.expect_int();
  const Tensor indices = indices_in.to(at::kLong);
  const int64_t D = grad.size(1);
  Tensor result = at::zeros({num_weights, D}, grad.options());
  Tensor freq;
  if (scale_grad_by_freq) {
    freq = at::zeros({num_weights}, grad.options()).index_add_(0, indices, at::ones_like(indices, grad.options()));
  }
  if (mode == kMax) {
    const Tensor valid = max_indices.ge(0);
    const Tensor rows = max_indices.clamp_min(0);
    Tensor contribution = at::where(valid, grad, 0);
    if (scale_grad_by_freq) {
      contribution = contribution / freq.index_select(0, rows.reshape({-1})).view(rows.sizes()).clamp_min(1);
    }
    return result.scatter_add_(0, rows, contribution);
  }
  Tensor rows = grad.index_select(0, offset2bag);
  if (mode == kMean) {
    rows = rows / bag_size.index_select(0, offset2bag).clamp_min(1).unsqueeze(1).to(grad.scalar_type());
  }
  if (per_sample_weights.has_value() && per_sample_weights->defined()) {
    rows = rows * per_sample_weights->to(grad.scalar_type()).unsqueeze(1);
  }
  if (scale_grad_by_freq) {
    rows = rows / freq.index_select(0, indices).unsqueeze(1);
  }
  rows = at::where(counted(indices, padding_idx).unsqueeze(1), rows, 0);
  return result.index_add_(0, indices, rows);
}

// The per-sample weights' gradient (mode sum): the dot product of each
// index's bag gradient with its weight row; 0 for padding.
Tensor per_sample_weights_backward(const Tensor& grad, const Tensor& weight, const Tensor& indices_in,
                                   const Tensor& offsets, const Tensor& offset2bag, int64_t mode,
                                   int64_t padding_idx) {
  using Op = at::_ops::_embedding_bag_per_sample_weights_backward;
  if (!engine_handles(grad, weight)) {
    return fallback<Op>(grad, weight, indices_in, offsets, offset2bag, mode, padding_idx);
  }
  openreg::count_op(counted_name<Op>(), true);
  TORCH_CHECK(mode == kSum, "embedding_bag_backward: per_sample_weights only supported for mode='sum'");
  const Tensor indices = indices_in.to(at::kLong);
  const Tensor dots = (grad.index_select(0, offset2bag) * weight.index_select(0, indices)).sum(1);
  return at::where(counted(indices, padding_idx), dots, 0);
}

// The gradient's entry: ATen's own function, which picks the dense backward
// above (or the sparse one, through the fallback: the devices have no sparse
// tensors).
Tensor backward(const Tensor& grad, const Tensor& indices, const Tensor& offsets, const Tensor& offset2bag,
                const Tensor& bag_size, const Tensor& max_indices, c10::SymInt num_weights, bool scale_grad_by_freq,
                int64_t mode, bool sparse, const std::optional<Tensor>& per_sample_weights, int64_t padding_idx) {
  openreg::count_op(counted_name<at::_ops::_embedding_bag_backward>(), true);
  return at::native::_embedding_bag_backward_symint(grad, indices, offsets, offset2bag, bag_size, max_indices,
                                                    std::move(num_weights), scale_grad_by_freq, mode, sparse,
                                                    per_sample_weights, padding_idx);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_embedding_bag_backward", TORCH_FN(backward));
  m.impl("_embedding_bag", TORCH_FN(embedding_bag_kernel<at::_ops::_embedding_bag>));
  m.impl("_embedding_bag_forward_only", TORCH_FN(embedding_bag_kernel<at::_ops::_embedding_bag_forward_only>));
  m.impl("_embedding_bag_dense_backward", TORCH_FN(dense_backward));
  m.impl("_embedding_bag_per_sample_weights_backward", TORCH_FN(per_sample_weights_backward));
}

} // namespace
} // namespace openreg::embedding_bag
