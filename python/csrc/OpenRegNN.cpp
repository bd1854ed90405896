// Neural-network ops. Softmax and log_softmax with their backward ops, and
// logsumexp, run the engine's `softmax` kernel (one launch each), and
// nll_loss and nll_loss2d (so cross_entropy with class indices) with their
// backward ops, the engine's `nll_loss` kernel. The others are written with
// device ops: layer and
// batch normalization with their backward ops; the dense embedding gradient
// and max_norm renormalization; dropout's backward; isposinf/isneginf; 1-d
// and 2-d convolution (im2col and the engine's GEMM) and max pooling, with
// their backward ops. ATen's meta functions check the arguments and allocate
// the outputs as for CPU; the values come from reductions, elementwise ops,
// gather and scatter on the device engine, each dispatched (and counted) on
// its own. float16 and bfloat16 inputs compute in float32, as CPU's opmath.
//
// An out-of-range class index stops the device's gather (a device-side
// check, as CUDA's assert) and is reported at the next synchronizing call.

#include <algorithm>
#include <initializer_list>
#include <limits>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/ops/_log_softmax_backward_data_meta.h>
#include <ATen/ops/_log_softmax_meta.h>
#include <ATen/ops/_softmax_backward_data_meta.h>
#include <ATen/ops/_softmax_meta.h>
#include <ATen/ops/logsumexp_native.h>
#include <ATen/ops/nll_loss_backward_meta.h>
#include <ATen/ops/nll_loss_forward_meta.h>
#include <ATen/native/Pool.h>
#include <ATen/native/layer_norm.h>
#include <torch/library.h>

#include "OpenRegEngine.h"
#include "OpenRegNN.h"
#include "OpenRegStructured.h"

namespace openreg::nn {

at::ScalarType opmath(at::ScalarType dtype) {
  return dtype == at::kHalf || dtype == at::kBFloat16 ? at::kFloat : dtype;
}

Tensor in_opmath(const Tensor& t) {
  return t.scalar_type() == opmath(t.scalar_type()) ? t : t.to(opmath(t.scalar_type()));
}

bool defined(const std::optional<Tensor>& t) {
  return t.has_value() && t->defined();
}

void check_floating(const Tensor& t, const char* op) {
  engine::check_dtype(at::isFloatingType(t.scalar_type()), op, t.scalar_type());
}

c10::Scalar lowest_of(at::ScalarType dtype) {
  c10::Scalar lowest;
  AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, dtype, "max_pool2d", [&] {
    lowest = std::numeric_limits<scalar_t>::has_infinity ? c10::Scalar(-std::numeric_limits<double>::infinity())
                                                          : c10::Scalar(std::numeric_limits<scalar_t>::lowest());
  });
  return lowest;
}

void WindowMax::visit(const Tensor& candidate, const Tensor& index, const Tensor& inside) {
  Tensor take = at::gt(candidate, values);
  if (at::isFloatingType(candidate.scalar_type())) {
    take.logical_or_(at::isnan(candidate));
  }
  if (inside.defined()) {
    take.logical_and_(inside);
  }
  values = at::where(take, candidate, values);
  indices = at::where(take, index, indices);
}

Tensor pool_operand(const Tensor& t) {
  const at::ScalarType dtype = at::isFloatingType(t.scalar_type()) ? opmath(t.scalar_type()) : at::kLong;
  return t.to(dtype).contiguous();
}

Tensor scatter_to_picks(const Tensor& grad_output, const Tensor& input, const Tensor& indices,
                        const engine::PoolWindow& window) {
  TORCH_CHECK(indices.sizes() == grad_output.sizes(), "max pooling backward: expected indices of the gradient's "
              "shape ", grad_output.sizes(), ", got ", indices.sizes());
  TORCH_CHECK(indices.scalar_type() == at::kLong, "max pooling backward: expected int64 indices, got ",
              indices.scalar_type());
  const Tensor g = pool_operand(grad_output);
  const Tensor grad = at::empty(input.sizes(), g.options());
  engine::launch_pool(engine::OR_POOL_MAX_BACKWARD, g, grad, indices.contiguous(), window);
  return grad.to(grad_output.scalar_type());
}

namespace {

using structured::Functional;

template <class Op, bool Log, class Meta>
Tensor softmax_entry(const Tensor& self, int64_t dim, bool half_to_float) {
  if (!structured::engine_handles(self)) {
    return structured::fallback<Op>(self, dim, half_to_float);
  }
  check_floating(self, Log ? "log_softmax" : "softmax");
  Functional<Meta> op;
  op.meta(self, dim, half_to_float);
  engine::launch_softmax(Log ? engine::OR_SOFTMAX_LOG_SOFTMAX : engine::OR_SOFTMAX_SOFTMAX, op.outputs_[0], self,
                         Tensor(), dim);
  return std::move(op.outputs_[0]);
}

// logsumexp over one dimension of a float32 or float64 tensor: one launch of
// the softmax kernel (its maximum and exp-sum passes, one value per line).
// Several dimensions, other dtypes, 0-d and empty tensors take ATen's
// composite (max, exp, sum and log, each on the device).
Tensor logsumexp_entry(const Tensor& self, at::IntArrayRef dims, bool keepdim) {
  if (dims.size() != 1 || self.dim() == 0 || self.numel() == 0 ||
      (self.scalar_type() != at::kFloat && self.scalar_type() != at::kDouble)) {
    return at::native::logsumexp(self, dims, keepdim);
  }
  const int64_t dim = at::maybe_wrap_dim(dims[0], self.dim());
  auto shape = self.sizes().vec();
  shape[dim] = 1;
  Tensor result = at::empty(shape, self.options());
  engine::launch_softmax(engine::OR_SOFTMAX_LOGSUMEXP, result.expand(self.sizes()), self, Tensor(), dim);
  return keepdim ? result : result.squeeze(dim);
}

// softmax: grad_input = y * (g - sum(g * y)); log_softmax: g - exp(y) * sum(g).
template <class Op, bool Log, class Meta>
Tensor softmax_backward_entry(const Tensor& grad_output, const Tensor& output, int64_t dim,
                              at::ScalarType input_dtype) {
  if (!structured::engine_handles(grad_output, output)) {
    return structured::fallback<Op>(grad_output, output, dim, input_dtype);
  }
  check_floating(output, Log ? "log_softmax_backward" : "softmax_backward");
  Functional<Meta> op;
  op.meta(grad_output, output, dim, input_dtype);
  engine::launch_softmax(Log ? engine::OR_SOFTMAX_LOG_SOFTMAX_BACKWARD : engine::OR_SOFTMAX_SOFTMAX_BACKWARD,
                         op.outputs_[0], grad_output, output, dim);
  return std::move(op.outputs_[0]);
}

// What CPU's nll_loss kernels take besides the meta checks: a weight of the
// input's dtype; a spatial target of int64 (nll_loss2d), as their messages
// say. (ATen's nll_loss meta checks the target's dtype, Long or Byte.)
void check_nll_dtypes(const Tensor& self, const Tensor& target, const std::optional<Tensor>& weight, bool spatial) {
  TORCH_CHECK(!defined(weight) || weight->scalar_type() == self.scalar_type(), "expected scalar type ",
              self.scalar_type(), " but found ", weight->scalar_type());
  if (spatial) {
    TORCH_CHECK(target.scalar_type() == at::kLong || target.scalar_type() == at::kByte,
                "expected target dtype to be Long or Byte, but got ", target.scalar_type());
    TORCH_CHECK(target.scalar_type() == at::kLong, "expected scalar type Long but found ", target.scalar_type());
  }
}

// output and total_weight of nll_loss or nll_loss2d: one launch of the
// engine's nll_loss kernel; for an empty input (no rows, or no classes),
// CPU's: total_weight 0, the output an empty sum (0) or its mean (nan).
void nll_loss_values(const Tensor& self, const Tensor& target, const std::optional<Tensor>& weight,
                     int64_t reduction, int64_t ignore_index, const Tensor& output, const Tensor& total_weight) {
  if (self.numel() == 0) {
    total_weight.zero_();
    if (output.numel() > 0) {
      output.fill_(reduction == at::Reduction::Mean ? std::numeric_limits<double>::quiet_NaN() : 0.0);
    }
    return;
  }
  engine::launch_nll(false, self, target, defined(weight) ? weight->reshape({-1}) : Tensor(), reduction,
                     ignore_index, output, total_weight);
}

// grad_input of nll_loss or nll_loss2d: zeros, then -w g at each counted
// row's class (one launch of the engine's nll_loss kernel).
void nll_loss_grad(const Tensor& grad_output, const Tensor& self, const Tensor& target,
                   const std::optional<Tensor>& weight, int64_t reduction, int64_t ignore_index,
                   const Tensor& total_weight, const Tensor& grad_input) {
  grad_input.zero_();
  if (self.numel() > 0) {
    engine::launch_nll(true, grad_input, target, defined(weight) ? weight->reshape({-1}) : Tensor(), reduction,
                       ignore_index, grad_output, total_weight);
  }
}

at::OptionalTensorRef optional_ref(const std::optional<Tensor>& t) {
  return defined(t) ? at::OptionalTensorRef(*t) : at::OptionalTensorRef();
}

std::tuple<Tensor, Tensor> nll_loss_forward_kernel(const Tensor& self, const Tensor& target,
                                                   const std::optional<Tensor>& weight, int64_t reduction,
                                                   int64_t ignore_index) {
  if (!structured::engine_handles(self, target, weight)) {
    return structured::fallback<at::_ops::nll_loss_forward>(self, target, weight, reduction, ignore_index);
  }
  check_floating(self, "nll_loss");
  Functional<at::meta::structured_nll_loss_forward> op; // checks, allocates output and total_weight
  op.meta(self, target, optional_ref(weight), reduction, ignore_index);
  check_nll_dtypes(self, target, weight, false);
  nll_loss_values(self, target, weight, reduction, ignore_index, op.outputs_[0], op.outputs_[1]);
  return {std::move(op.outputs_[0]), std::move(op.outputs_[1])};
}

Tensor nll_loss_backward_kernel(const Tensor& grad_output, const Tensor& self, const Tensor& target,
                                const std::optional<Tensor>& weight, int64_t reduction, int64_t ignore_index,
                                const Tensor& total_weight) {
  if (!structured::engine_handles(grad_output, self, target, weight, total_weight)) {
    return structured::fallback<at::_ops::nll_loss_backward>(grad_output, self, target, weight, reduction,
                                                             ignore_index, total_weight);
  }
  check_floating(self, "nll_loss_backward");
  Functional<at::meta::structured_nll_loss_backward> op;
  op.meta(grad_output, self, target, optional_ref(weight), reduction, ignore_index, total_weight);
  check_nll_dtypes(self, target, weight, false);
  nll_loss_grad(grad_output, self, target, weight, reduction, ignore_index, total_weight, op.outputs_[0]);
  return std::move(op.outputs_[0]);
}

// nll_loss2d (ATen has no meta for it): (N, C, H, W) inputs, (N, H, W) targets.
void check_nll_loss2d(const Tensor& self, const Tensor& target, const std::optional<Tensor>& weight) {
  TORCH_CHECK(target.dim() == 3, "only batches of spatial targets supported (3D tensors) but got targets of dimension: ",
              target.dim());
  TORCH_CHECK(self.dim() == 4, "only batches of spatial inputs supported (4D tensors), but got input of dimension: ",
              self.dim());
  TORCH_CHECK(!weight.has_value() || !weight->defined() || weight->numel() == self.size(1),
              "weight tensor should be defined either for all or no classes");
  TORCH_CHECK(self.size(0) == target.size(0) && self.size(2) == target.size(1) && self.size(3) == target.size(2),
              "input and target batch or spatial sizes don't match: target ", target.sizes(), ", input ",
              self.sizes());
  TORCH_CHECK(target.device() == self.device(), "Expected all tensors to be on the same device, but found at least "
              "two devices, ", self.device(), " and ", target.device(), "!");
  check_nll_dtypes(self, target, weight, true);
}

std::tuple<Tensor, Tensor> nll_loss2d_forward_kernel(const Tensor& self, const Tensor& target,
                                                     const std::optional<Tensor>& weight, int64_t reduction,
                                                     int64_t ignore_index) {
  if (!structured::engine_handles(self, target, weight)) {
    return structured::fallback<at::_ops::nll_loss2d_forward>(self, target, weight, reduction, ignore_index);
  }
  check_floating(self, "nll_loss2d");
  check_nll_loss2d(self, target, weight);
  Tensor output = reduction == at::Reduction::None ? at::empty(target.sizes(), self.options()) : at::empty({}, self.options());
  Tensor total_weight = at::empty({}, self.options());
  nll_loss_values(self, target, weight, reduction, ignore_index, output, total_weight);
  return {output, total_weight};
}

Tensor nll_loss2d_backward_kernel(const Tensor& grad_output, const Tensor& self, const Tensor& target,
                                  const std::optional<Tensor>& weight, int64_t reduction, int64_t ignore_index,
                                  const Tensor& total_weight) {
  if (!structured::engine_handles(grad_output, self, target, weight, total_weight)) {
    return structured::fallback<at::_ops::nll_loss2d_backward>(grad_output, self, target, weight, reduction,
                                                               ignore_index, total_weight);
  }
  check_floating(self, "nll_loss2d_backward");
  check_nll_loss2d(self, target, weight);
  // CPU's checks of the gradient (nll_loss2d has no meta function)
  if (reduction == at::Reduction::None) {
    TORCH_CHECK(grad_output.dim() == 3 && grad_output.sizes() == target.sizes(),
                "nll_loss2d_backward: size mismatch (got grad_output: ", grad_output.sizes(), ", target: ",
                target.sizes(), ")");
  } else {
    TORCH_CHECK(grad_output.dim() <= 1 && grad_output.numel() == 1,
                "Expected a single element grad_output tensor, but got: ", grad_output.sizes());
  }
  TORCH_CHECK(total_weight.numel() == 1, "expected total_weight to be a single element tensor, got: ",
              total_weight.sizes(), " (", total_weight.numel(), " elements)");
  Tensor grad_input = at::empty_like(self, at::MemoryFormat::Contiguous);
  nll_loss_grad(grad_output, self, target, weight, reduction, ignore_index, total_weight, grad_input);
  return grad_input;
}

// ---- normalization ----

std::vector<int64_t> reduced_dims_except(int64_t ndim, int64_t keep) {
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < ndim; ++d) {
    if (d != keep) {
      dims.push_back(d);
    }
  }
  return dims;
}

// The dtype of a normalization's statistics: float32 when a 16-bit input
// comes with float32 parameters (CPU's "mixed type"), else the input's.
at::ScalarType stats_dtype(const Tensor& input, std::initializer_list<const std::optional<Tensor>*> params) {
  for (const auto* param : params) {
    if (defined(*param) && (*param)->scalar_type() != input.scalar_type()) {
      return opmath(input.scalar_type());
    }
  }
  return input.scalar_type();
}

// Whether every defined tensor is float32: the engine's norm kernel takes
// float32 operands only.
bool all_float(std::initializer_list<Tensor> tensors) {
  return std::all_of(tensors.begin(), tensors.end(),
                     [](const Tensor& t) { return !t.defined() || t.scalar_type() == at::kFloat; });
}

// Whether the norm kernel suits `groups` groups of `elements` in all: its
// workers split the groups, so one large group (a single row or channel)
// would run on one worker; the composites split it.
bool norm_kernel_fits(int64_t groups, int64_t elements) {
  return groups > 1 || elements < (int64_t{1} << 16);
}

// y = (x - mean) * rstd * weight + bias over the last dimensions
// (normalized_shape); mean and rstd keep the leading dimensions, with ones
// for the normalized ones, as CPU returns them.
std::tuple<Tensor, Tensor, Tensor> layer_norm_kernel(const Tensor& input, c10::SymIntArrayRef normalized_shape_sym,
                                                     const std::optional<Tensor>& weight,
                                                     const std::optional<Tensor>& bias, double eps) {
  if (!structured::engine_handles(input, weight, bias)) {
    return structured::fallback<at::_ops::native_layer_norm>(input, normalized_shape_sym, weight, bias, eps);
  }
  check_floating(input, "native_layer_norm");
  const auto normalized_shape = C10_AS_INTARRAYREF_SLOW(normalized_shape_sym);
  const auto [M, N] = at::native::_check_layer_norm_inputs(input, normalized_shape, weight.value_or(Tensor()),
                                                           bias.value_or(Tensor()));
  const int64_t axis = input.dim() - static_cast<int64_t>(normalized_shape.size());
  std::vector<int64_t> stat_shape(input.sizes().begin(), input.sizes().begin() + axis);
  stat_shape.resize(input.dim(), 1);
  const at::ScalarType stats = stats_dtype(input, {&weight, &bias});
  if (M == 0 || N == 0) {
    const Tensor mean = at::full(stat_shape, N == 0 ? std::numeric_limits<double>::quiet_NaN() : 0.0,
                                 input.options().dtype(stats));
    return {at::empty_like(input, at::MemoryFormat::Contiguous), mean, mean.clone()};
  }
  const Tensor x = in_opmath(input).reshape({M, N});
  const Tensor w = defined(weight) ? in_opmath(*weight).reshape({N}).contiguous() : Tensor();
  const Tensor b = defined(bias) ? in_opmath(*bias).reshape({N}).contiguous() : Tensor();
  if (all_float({x, w, b}) && norm_kernel_fits(M, M * N)) {
    // one launch of the engine's norm kernel: the steps below, rounded as there
    Tensor y = at::empty({M, N}, x.options()), mean = at::empty({M}, x.options()), rstd = at::empty({M}, x.options());
    engine::launch_norm(engine::OR_NORM_LAYER_FORWARD, M, N, 1, 0, eps, {y, mean, rstd}, {x.contiguous(), w, b});
    return {y.to(input.scalar_type()).reshape(input.sizes()), mean.to(stats).reshape(stat_shape),
            rstd.to(stats).reshape(stat_shape)};
  }
  auto [var, mean] = at::var_mean(x, {1}, /*correction=*/0, /*keepdim=*/true);
  const Tensor rstd = var.add_(eps).rsqrt_();
  // x * rstd + (-rstd * mean), then * weight + bias, as CPU's kernel: two
  // passes over the rows
  Tensor y = engine::mul_add(x, rstd, rstd * mean.neg());
  if (defined(weight) && defined(bias)) {
    y = engine::mul_add(y, in_opmath(*weight).reshape({1, N}), in_opmath(*bias).reshape({1, N}));
  } else if (defined(weight)) {
    y.mul_(in_opmath(*weight).reshape({1, N}));
  } else if (defined(bias)) {
    y.add_(in_opmath(*bias).reshape({1, N}));
  }
  return {y.to(input.scalar_type()).reshape(input.sizes()), mean.to(stats).reshape(stat_shape),
          rstd.to(stats).reshape(stat_shape)};
}

// d/dx of layer_norm: rstd * (gw - mean(gw) - xhat * mean(gw * xhat)) per
// row, gw = grad * weight; the weight's gradient sums grad * xhat over the
// rows, the bias's sums grad.
std::tuple<Tensor, Tensor, Tensor> layer_norm_backward_kernel(const Tensor& grad_out, const Tensor& input,
                                                              c10::SymIntArrayRef normalized_shape_sym,
                                                              const Tensor& mean, const Tensor& rstd,
                                                              const std::optional<Tensor>& weight,
                                                              const std::optional<Tensor>& bias,
                                                              std::array<bool, 3> output_mask) {
  if (!structured::engine_handles(grad_out, input, mean, rstd, weight, bias)) {
    return structured::fallback<at::_ops::native_layer_norm_backward>(grad_out, input, normalized_shape_sym, mean,
                                                                      rstd, weight, bias, output_mask);
  }
  check_floating(input, "native_layer_norm_backward");
  const auto normalized_shape = C10_AS_INTARRAYREF_SLOW(normalized_shape_sym);
  const auto [M, N] = at::native::_check_layer_norm_inputs(input, normalized_shape, weight.value_or(Tensor()),
                                                           bias.value_or(Tensor()));
  Tensor grad_input, grad_weight, grad_bias;
  const Tensor x = in_opmath(input).reshape({M, N});
  const Tensor g = in_opmath(grad_out).reshape({M, N});
  const Tensor r = in_opmath(rstd).reshape({M, 1});
  const Tensor w = defined(weight) ? in_opmath(*weight).reshape({N}).contiguous() : Tensor();
  const Tensor mu = in_opmath(mean).reshape({M}).contiguous();
  // the norm kernel's dense float32 operands, made once for both of its launches below
  const bool kernel = all_float({x, g, r, mu}) && M > 0 && N > 0;
  const Tensor gc = kernel ? g.contiguous() : Tensor(), xc = kernel ? x.contiguous() : Tensor();
  const Tensor rc = kernel ? r.reshape({M}).contiguous() : Tensor();
  if (output_mask[0] && kernel && all_float({w}) && norm_kernel_fits(M, M * N)) {
    // one launch of the engine's norm kernel: the steps below, rounded as there (the means summed in
    // an order of their own)
    Tensor gi = at::empty({M, N}, x.options());
    engine::launch_norm(engine::OR_NORM_LAYER_BACKWARD, M, N, 1, 0, 0.0, {gi}, {gc, xc, w, mu, rc});
    grad_input = gi.to(input.scalar_type()).reshape(input.sizes());
    output_mask[0] = false;
  }
  bool weight_grad = output_mask[1] && defined(weight), bias_grad = output_mask[2] && defined(bias);
  if ((weight_grad || bias_grad) && kernel) {
    // the column sums of g * xhat and g in one launch of the norm kernel (float64 sums, down the rows)
    const Tensor dw = weight_grad ? at::empty({N}, x.options()) : Tensor();
    const Tensor db = bias_grad ? at::empty({N}, x.options()) : Tensor();
    engine::launch_norm(engine::OR_NORM_LAYER_PARAMS, M, N, 1, 0, 0.0, {dw, db}, {gc, xc, Tensor(), mu, rc});
    if (weight_grad) {
      grad_weight = dw.to(weight->scalar_type()).reshape(weight->sizes());
    }
    if (bias_grad) {
      grad_bias = db.to(bias->scalar_type()).reshape(bias->sizes());
    }
    weight_grad = bias_grad = false;
  }
  const Tensor xhat = output_mask[0] || weight_grad ? engine::mul_add(x, r, r * mu.reshape({M, 1}).neg()) : Tensor();
  if (output_mask[0]) {
    // rstd * gw - rstd * mean(gw) - xhat * rstd * mean(gw * xhat): two
    // multiply-adds with per-row constants
    const Tensor gw = defined(weight) ? g * w.reshape({1, N}) : g;
    const Tensor gi = engine::mul_add(xhat, (gw * xhat).mean(1, /*keepdim=*/true).mul_(r).neg_(),
                                      engine::mul_add(gw, r, gw.mean(1, /*keepdim=*/true).mul_(r).neg_()));
    grad_input = gi.to(input.scalar_type()).reshape(input.sizes());
  }
  if (weight_grad) {
    grad_weight = (g * xhat).sum(0).to(weight->scalar_type()).reshape(weight->sizes());
  }
  if (bias_grad) {
    grad_bias = g.sum(0).to(bias->scalar_type()).reshape(bias->sizes());
  }
  return {grad_input, grad_weight, grad_bias};
}

// Batch normalization over every dimension but the channels (dimension 1).
// Training: the batch's mean and biased variance normalize, the running
// statistics move by `momentum` (the variance unbiased), and save_mean and
// save_invstd are returned for the backward; evaluation: the running
// statistics normalize and the saved ones are empty, as on CPU.
std::tuple<Tensor, Tensor, Tensor> batch_norm_kernel(const Tensor& input, const std::optional<Tensor>& weight,
                                                     const std::optional<Tensor>& bias,
                                                     const std::optional<Tensor>& running_mean,
                                                     const std::optional<Tensor>& running_var, bool training,
                                                     double momentum, double eps) {
  if (!structured::engine_handles(input, weight, bias, running_mean, running_var)) {
    return structured::fallback<at::_ops::native_batch_norm>(input, weight, bias, running_mean, running_var, training,
                                                             momentum, eps);
  }
  check_floating(input, "native_batch_norm");
  TORCH_CHECK(input.dim() >= 2, "batch_norm: expected an input with at least 2 dimensions, got ", input.dim());
  const int64_t C = input.size(1);
  TORCH_CHECK(training || (defined(running_mean) && defined(running_var)),
              "running_mean and running_var must be defined in evaluation mode");
  const at::ScalarType stats = stats_dtype(input, {&weight, &bias, &running_mean, &running_var});
  std::vector<int64_t> channel_shape(input.dim(), 1);
  channel_shape[1] = C;
  const Tensor x = in_opmath(input);
  const auto dims = reduced_dims_except(input.dim(), 1);
  Tensor mean, invstd, save_mean, save_invstd;
  if (training) {
    const int64_t n = input.numel() / std::max<int64_t>(C, 1);
    TORCH_CHECK(n > 1 || input.numel() == 0, "Expected more than 1 value per channel when training, got input size ",
                input.sizes());
    auto [var, batch_mean] = at::var_mean(x, dims, /*correction=*/0, /*keepdim=*/false);
    mean = batch_mean;
    invstd = (var + eps).rsqrt_();
    if (defined(running_mean)) {
      running_mean->mul_(1.0 - momentum).add_(batch_mean.to(running_mean->scalar_type()), momentum);
    }
    if (defined(running_var)) {
      const double unbias = n > 1 ? static_cast<double>(n) / static_cast<double>(n - 1) : 1.0;
      running_var->mul_(1.0 - momentum).add_((var * unbias).to(running_var->scalar_type()), momentum);
    }
    save_mean = mean.to(stats);
    save_invstd = invstd.to(stats);
  } else {
    mean = in_opmath(*running_mean);
    invstd = (in_opmath(*running_var) + eps).rsqrt_();
    save_mean = at::empty({0}, input.options().dtype(stats));
    save_invstd = at::empty({0}, input.options().dtype(stats));
  }
  // x * alpha + beta, alpha = invstd * weight, beta = bias - mean * alpha, as
  // CPU's kernel: one pass
  const Tensor alpha = defined(weight) ? invstd * in_opmath(*weight) : invstd;
  const Tensor beta = defined(bias) ? in_opmath(*bias) - mean * alpha : (mean * alpha).neg_();
  const Tensor y = engine::mul_add(x, alpha.reshape(channel_shape), beta.reshape(channel_shape));
  return {y.to(input.scalar_type()), save_mean, save_invstd};
}

// batch_norm_backward_kernel's training path in two launches of the
// engine's norm kernel, float32 NCHW-contiguous: the channels' sums of g and
// of g * (x - mean) in one pass, then the input's gradient in another; the
// composite's steps, rounded as there (the sums in an order of their own).
std::tuple<Tensor, Tensor, Tensor> batch_norm_backward_fused(const Tensor& grad, const Tensor& input,
                                                             const std::optional<Tensor>& weight, const Tensor& mean,
                                                             const Tensor& invstd, std::array<bool, 3> output_mask,
                                                             at::ScalarType dtype) {
  const int64_t N = input.size(0), C = input.size(1), plane = input.numel() / (N * C);
  const Tensor g = grad.contiguous(), x = input.contiguous(), m = mean.contiguous();
  Tensor sum_g = at::empty({C}, x.options()), dot = at::empty({C}, x.options());
  engine::launch_norm(engine::OR_NORM_BATCH_STATS, C, plane, N, C * plane, 0.0, {sum_g, dot}, {g, x, Tensor(), m});
  Tensor grad_input, grad_weight, grad_bias;
  if (output_mask[0]) {
    const Tensor scale = (defined(weight) ? invstd * in_opmath(*weight).reshape({C}) : invstd).contiguous();
    const double n = static_cast<double>(N * plane);
    const Tensor mean_term = (sum_g / n).mul_(scale).neg_();
    const Tensor projection = (dot / n).mul_(invstd).mul_(invstd).mul_(scale).neg_();
    grad_input = at::empty_like(x);
    engine::launch_norm(engine::OR_NORM_BATCH_BACKWARD, C, plane, N, C * plane, 0.0, {grad_input},
                        {g, x, scale, m, projection, mean_term});
    grad_input = grad_input.to(dtype);
  }
  const at::ScalarType param = defined(weight) ? weight->scalar_type() : dtype;
  if (output_mask[1]) {
    grad_weight = (dot * invstd).to(param);
  }
  if (output_mask[2]) {
    grad_bias = sum_g.to(param);
  }
  return {grad_input, grad_weight, grad_bias};
}

std::tuple<Tensor, Tensor, Tensor> batch_norm_backward_kernel(
    const Tensor& grad_out, const Tensor& input, const std::optional<Tensor>& weight,
    const std::optional<Tensor>& running_mean, const std::optional<Tensor>& running_var,
    const std::optional<Tensor>& save_mean, const std::optional<Tensor>& save_invstd, bool train, double eps,
    std::array<bool, 3> output_mask) {
  if (!structured::engine_handles(grad_out, input, weight, running_mean, running_var, save_mean, save_invstd)) {
    return structured::fallback<at::_ops::native_batch_norm_backward>(
        grad_out, input, weight, running_mean, running_var, save_mean, save_invstd, train, eps, output_mask);
  }
  check_floating(input, "native_batch_norm_backward");
  const int64_t C = input.size(1);
  std::vector<int64_t> channel_shape(input.dim(), 1);
  channel_shape[1] = C;
  const auto dims = reduced_dims_except(input.dim(), 1);
  const Tensor mean = in_opmath(train ? *save_mean : *running_mean).reshape(channel_shape);
  const Tensor invstd =
      (train ? in_opmath(*save_invstd) : (in_opmath(*running_var) + eps).rsqrt()).reshape(channel_shape);
  const Tensor x = in_opmath(input);
  const Tensor g = in_opmath(grad_out);
  // float32 NCHW-contiguous training: the norm kernel (channels_last keeps its layout below)
  if (train && input.numel() > 0 && x.is_contiguous() && norm_kernel_fits(C, input.numel()) &&
      all_float({x, g, mean, invstd, defined(weight) ? in_opmath(*weight) : Tensor()})) {
    return batch_norm_backward_fused(g, x, weight, mean.reshape({C}), invstd.reshape({C}), output_mask,
                                     input.scalar_type());
  }
  const Tensor centered = x - mean;
  const Tensor sum_g = g.sum(dims).reshape(channel_shape);
  const Tensor dot = (g * centered).sum(dims).reshape(channel_shape); // sum of g * (x - mean)
  Tensor grad_input, grad_weight, grad_bias;
  if (output_mask[0]) {
    const Tensor scale = defined(weight) ? invstd * in_opmath(*weight).reshape(channel_shape) : invstd;
    if (train) {
      // (g - sum_g / n - (x - mean) * dot * invstd^2 / n) * scale, as two
      // multiply-adds with per-channel constants
      const double n = static_cast<double>(input.numel() / std::max<int64_t>(C, 1));
      const Tensor mean_term = (sum_g / n).mul_(scale).neg_();
      const Tensor projection = (dot / n).mul_(invstd).mul_(invstd).mul_(scale).neg_();
      grad_input = engine::mul_add(centered, projection, engine::mul_add(g, scale, mean_term));
    } else {
      grad_input = g * scale;
    }
    grad_input = grad_input.to(input.scalar_type());
  }
  if (output_mask[1]) {
    grad_weight = (dot * invstd).reshape({C}).to(defined(weight) ? weight->scalar_type() : input.scalar_type());
  }
  if (output_mask[2]) {
    grad_bias = sum_g.reshape({C}).to(defined(weight) ? weight->scalar_type() : input.scalar_type());
  }
  return {grad_input, grad_weight, grad_bias};
}

// The entry points torch.export and functionalization use, over the same
// kernels: `_native_batch_norm_legit` (with or without running statistics),
// `_batch_norm_with_update` (training; its `reserve` is empty, as CPU's) and
// its backward.
std::tuple<Tensor, Tensor, Tensor> batch_norm_legit_kernel(const Tensor& input, const std::optional<Tensor>& weight,
                                                           const std::optional<Tensor>& bias, Tensor& running_mean,
                                                           Tensor& running_var, bool training, double momentum,
                                                           double eps) {
  return batch_norm_kernel(input, weight, bias, running_mean, running_var, training, momentum, eps);
}

std::tuple<Tensor, Tensor, Tensor> batch_norm_legit_no_stats_kernel(const Tensor& input,
                                                                    const std::optional<Tensor>& weight,
                                                                    const std::optional<Tensor>& bias, bool training,
                                                                    double momentum, double eps) {
  return batch_norm_kernel(input, weight, bias, std::nullopt, std::nullopt, training, momentum, eps);
}

std::tuple<Tensor, Tensor, Tensor, Tensor> batch_norm_with_update_kernel(const Tensor& input,
                                                                         const std::optional<Tensor>& weight,
                                                                         const std::optional<Tensor>& bias,
                                                                         Tensor& running_mean, Tensor& running_var,
                                                                         double momentum, double eps) {
  auto [out, save_mean, save_invstd] =
      batch_norm_kernel(input, weight, bias, running_mean, running_var, /*training=*/true, momentum, eps);
  return {out, save_mean, save_invstd, at::empty({0}, input.options().dtype(at::kByte))};
}

std::tuple<Tensor, Tensor, Tensor> batch_norm_update_backward_kernel(
    const Tensor& grad_out, const Tensor& input, const Tensor& weight, const std::optional<Tensor>& running_mean,
    const std::optional<Tensor>& running_var, const std::optional<Tensor>& save_mean,
    const std::optional<Tensor>& save_invstd, bool update, double eps, std::array<bool, 3> output_mask,
    const Tensor& /*reserve*/) {
  return batch_norm_backward_kernel(grad_out, input, weight, running_mean, running_var, save_mean, save_invstd, update,
                                    eps, output_mask);
}

// y = (x - mean[n, g]) * scale + bias[c] per (n, c), scale = rstd[n, g] *
// weight[c]: two passes over x after the groups' statistics (ATen's composite
// ran five launches). CPU's kernel folds the mean into the shift,
// x * scale + (bias - scale * mean), one pass that loses the digits of x - mean
// when the mean is large against the deviation (a group of one element gives
// about 1e-5 instead of 0). mean and rstd are (N, G).
std::tuple<Tensor, Tensor, Tensor> group_norm_kernel(const Tensor& input, const std::optional<Tensor>& weight,
                                                     const std::optional<Tensor>& bias, c10::SymInt N_sym,
                                                     c10::SymInt C_sym, c10::SymInt HxW_sym, int64_t group,
                                                     double eps) {
  if (!structured::engine_handles(input, weight, bias)) {
    return structured::fallback<at::_ops::native_group_norm>(input, weight, bias, N_sym, C_sym, HxW_sym, group, eps);
  }
  check_floating(input, "native_group_norm");
  const int64_t N = N_sym.expect_int(), C = C_sym.expect_int(), HxW = HxW_sym.expect_int();
  TORCH_CHECK(group > 0 && C % group == 0, "Expected number of channels in input to be divisible by num_groups, but "
              "got input of shape ", input.sizes(), " and num_groups=", group);
  TORCH_CHECK(input.numel() == N * C * HxW, "Expected input to have ", N * C * HxW, " elements, got ", input.numel());
  TORCH_CHECK(HxW > 0, "Expected HxW to be greater than 0, got ", HxW);
  TORCH_CHECK(!defined(weight) || (weight->dim() == 1 && weight->numel() == C), "Expected weight to be a vector of size "
              "equal to the number of channels in input, but got weight of shape ", weight->sizes(), " and input of "
              "shape ", input.sizes());
  TORCH_CHECK(!defined(bias) || (bias->dim() == 1 && bias->numel() == C), "Expected bias to be a vector of size equal "
              "to the number of channels in input, but got bias of shape ", bias->sizes(), " and input of shape ",
              input.sizes());
  const at::ScalarType stats = stats_dtype(input, {&weight, &bias});
  if (input.numel() == 0) {
    const Tensor mean = at::full({N, group}, std::numeric_limits<double>::quiet_NaN(),
                                 input.options().dtype(stats));
    return {at::empty_like(input, at::MemoryFormat::Contiguous), mean, mean.clone()};
  }
  const int64_t D = C / group;
  const Tensor x = in_opmath(input).reshape({N, group, D * HxW});
  auto [var, mean] = at::var_mean(x, {2}, /*correction=*/0, /*keepdim=*/true); // (N, G, 1)
  const Tensor rstd = var.add_(eps).rsqrt_();
  const Tensor scale = defined(weight) ? rstd * in_opmath(*weight).reshape({1, group, D}) : rstd.expand({N, group, D});
  const Tensor centered = (x - mean).view({N, group, D, HxW});
  const Tensor y = defined(bias) ? engine::mul_add(centered, scale.reshape({N, group, D, 1}),
                                                   in_opmath(*bias).reshape({1, group, D, 1}))
                                 : centered.mul_(scale.reshape({N, group, D, 1}));
  return {y.to(input.scalar_type()).reshape(input.sizes()), mean.to(stats).reshape({N, group}),
          rstd.to(stats).reshape({N, group})};
}

// Group normalization's backward over (N, G, D * HxW) groups, D = C / G:
// grad_input = rstd * (gw - mean(gw) - xhat * mean(gw * xhat)) per group,
// gw = grad * weight[c]; the weight's gradient sums grad * xhat per channel,
// the bias's sums grad.
std::tuple<Tensor, Tensor, Tensor> group_norm_backward_kernel(const Tensor& grad_out, const Tensor& input,
                                                              const Tensor& mean, const Tensor& rstd,
                                                              const std::optional<Tensor>& weight, c10::SymInt N_sym,
                                                              c10::SymInt C_sym, c10::SymInt HxW_sym, int64_t group,
                                                              std::array<bool, 3> output_mask) {
  if (!structured::engine_handles(grad_out, input, mean, rstd, weight)) {
    return structured::fallback<at::_ops::native_group_norm_backward>(grad_out, input, mean, rstd, weight, N_sym,
                                                                      C_sym, HxW_sym, group, output_mask);
  }
  check_floating(input, "native_group_norm_backward");
  const int64_t N = N_sym.expect_int(), C = C_sym.expect_int(), HxW = HxW_sym.expect_int();
  TORCH_CHECK(group > 0 && C % group == 0, "Expected number of channels in input to be divisible by num_groups, but "
              "got input of shape ", input.sizes(), " and num_groups=", group);
  TORCH_CHECK(input.numel() == N * C * HxW, "Expected input to have ", N * C * HxW, " elements, got ", input.numel());
  TORCH_CHECK(mean.numel() == N * group && rstd.numel() == N * group, "Expected mean and rstd to have ", N * group,
              " elements");
  Tensor grad_input, grad_weight, grad_bias;
  if (input.numel() == 0) {
    const auto zeros = [&](bool wanted) {
      return wanted ? at::zeros({C}, input.options().dtype(defined(weight) ? weight->scalar_type() : input.scalar_type()))
                    : Tensor();
    };
    return {output_mask[0] ? at::empty_like(input) : Tensor(), zeros(output_mask[1]), zeros(output_mask[2])};
  }
  const int64_t D = C / group;
  const Tensor x = in_opmath(input).reshape({N, group, D, HxW});
  const Tensor g = in_opmath(grad_out).reshape({N, group, D, HxW});
  const Tensor r = in_opmath(rstd).reshape({N, group, 1, 1});
  const Tensor mu = in_opmath(mean).reshape({N, group, 1, 1});
  Tensor xhat; // (x - mean) rstd, made when a step below needs it
  const auto normalized = [&] {
    if (!xhat.defined()) {
      xhat = (x - mu).mul_(r);
    }
    return xhat;
  };
  if (output_mask[0]) {
    const Tensor gw = defined(weight) ? g * in_opmath(*weight).reshape({1, group, D, 1}) : g;
    const int64_t rows = N * group, length = D * HxW;
    if (all_float({x, gw, r, mu}) && norm_kernel_fits(rows, rows * length)) {
      // each group a row of layer norm's backward without a weight (the
      // weight already in gw): one launch of the norm kernel for the steps
      // below, rounded as there (the means summed in an order of their own)
      Tensor gi = at::empty({rows, length}, x.options());
      engine::launch_norm(engine::OR_NORM_LAYER_BACKWARD, rows, length, 1, 0, 0.0, {gi},
                          {gw.contiguous(), x.contiguous(), Tensor(), mu.reshape({rows}).contiguous(),
                           r.reshape({rows}).contiguous()});
      grad_input = gi.to(input.scalar_type()).reshape(input.sizes());
    } else {
      const Tensor xh = normalized();
      Tensor gi = gw - gw.mean({2, 3}, /*keepdim=*/true);
      gi.sub_(xh * (gw * xh).mean({2, 3}, /*keepdim=*/true)).mul_(r);
      grad_input = gi.to(input.scalar_type()).reshape(input.sizes());
    }
  }
  const at::ScalarType param_dtype = defined(weight) ? weight->scalar_type() : input.scalar_type();
  if (output_mask[1]) {
    grad_weight = (g * normalized()).sum({0, 3}).reshape({C}).to(param_dtype);
  }
  if (output_mask[2]) {
    grad_bias = g.sum({0, 3}).reshape({C}).to(param_dtype);
  }
  return {grad_input, grad_weight, grad_bias};
}

// ---- binary cross entropy, log-sigmoid ----

// CPU checks every input and target lies in [0, 1] (CUDA asserts on the
// device); here one device reduction answers for the whole tensor.
void check_unit_interval(const Tensor& t, const char* what) {
  if (t.numel() > 0) {
    TORCH_CHECK(!(t.lt(0).logical_or_(t.gt(1)).logical_or_(t.isnan())).any().item<bool>(), "all elements of ", what,
                " should be between 0 and 1");
  }
}

Tensor reduce_loss(const Tensor& loss, int64_t reduction) {
  if (reduction == at::Reduction::Mean) {
    return loss.mean();
  }
  return reduction == at::Reduction::Sum ? loss.sum() : loss;
}

// -w * (t * max(log(x), -100) + (1 - t) * max(log(1 - x), -100)), as CPU
// computes it: (t - 1) * log1p(-x) - t * log(x), each log clamped at -100.
Tensor binary_cross_entropy_kernel(const Tensor& self, const Tensor& target, const std::optional<Tensor>& weight,
                                   int64_t reduction) {
  if (!structured::engine_handles(self, target, weight)) {
    return structured::fallback<at::_ops::binary_cross_entropy>(self, target, weight, reduction);
  }
  check_floating(self, "binary_cross_entropy");
  TORCH_CHECK(self.sizes() == target.sizes(), "Using a target size (", target.sizes(), ") that is different to the "
              "input size (", self.sizes(), ") is deprecated. Please ensure they have the same size.");
  check_unit_interval(self, "input");
  check_unit_interval(target, "target");
  const Tensor x = in_opmath(self), t = in_opmath(target);
  Tensor loss = (t - 1).mul_(at::log1p(-x).clamp_min_(-100)).sub_(t * at::log(x).clamp_min_(-100));
  if (defined(weight)) {
    loss.mul_(in_opmath(*weight));
  }
  return reduce_loss(loss, reduction).to(self.scalar_type());
}

// grad * (x - t) / max((1 - x) * x, 1e-12) * w, over the element count for
// the mean.
Tensor binary_cross_entropy_backward_kernel(const Tensor& grad_output, const Tensor& self, const Tensor& target,
                                            const std::optional<Tensor>& weight, int64_t reduction) {
  if (!structured::engine_handles(grad_output, self, target, weight)) {
    return structured::fallback<at::_ops::binary_cross_entropy_backward>(grad_output, self, target, weight,
                                                                         reduction);
  }
  check_floating(self, "binary_cross_entropy_backward");
  const Tensor x = in_opmath(self), t = in_opmath(target);
  Tensor grad = in_opmath(grad_output) * (x - t) / ((1 - x) * x).clamp_min_(1e-12);
  if (defined(weight)) {
    grad.mul_(in_opmath(*weight));
  }
  if (reduction == at::Reduction::Mean && self.numel() > 0) {
    grad.div_(static_cast<double>(self.numel()));
  }
  return grad.to(self.scalar_type());
}

// log(z / (1 - z)), z = x clamped to [eps, 1 - eps] when eps is given (the
// gradient of binary_cross_entropy with respect to its target).
Tensor logit_kernel(const Tensor& self, std::optional<double> eps) {
  if (!structured::engine_handles(self)) {
    return structured::fallback<at::_ops::logit>(self, eps);
  }
  const Tensor x = at::isIntegralType(self.scalar_type(), true) ? self.to(at::kFloat) : in_opmath(self);
  // CPU's x < lo ? lo : (x > hi ? hi : x): lo wins when eps > 0.5
  const Tensor z = eps.has_value() ? at::where(x.lt(*eps), *eps, at::where(x.gt(1.0 - *eps), 1.0 - *eps, x)) : x;
  const Tensor out = at::log(z / (1 - z));
  return at::isFloatingType(self.scalar_type()) ? out.to(self.scalar_type()) : out;
}

// grad / (x (1 - x)); with eps, 0 outside [eps, 1 - eps]; without, NaN
// outside [0, 1].
Tensor logit_backward_kernel(const Tensor& grad_output, const Tensor& self, std::optional<double> eps) {
  if (!structured::engine_handles(grad_output, self)) {
    return structured::fallback<at::_ops::logit_backward>(grad_output, self, eps);
  }
  check_floating(self, "logit_backward");
  const Tensor x = in_opmath(self);
  const Tensor grad = in_opmath(grad_output) / (x * (1 - x));
  const Tensor outside = eps.has_value() ? x.lt(*eps).logical_or_(x.gt(1.0 - *eps)) : x.lt(0).logical_or_(x.gt(1));
  const double fill = eps.has_value() ? 0.0 : std::numeric_limits<double>::quiet_NaN();
  return at::where(outside, fill, grad).to(self.scalar_type());
}

// log(sigmoid(x)) = min(x, 0) - log1p(exp(-|x|)). The buffer CPU returns
// (exp(-|x|)) is recomputed by the backward, as CUDA does: it is empty.
std::tuple<Tensor, Tensor> log_sigmoid_forward_kernel(const Tensor& self) {
  if (!structured::engine_handles(self)) {
    return structured::fallback<at::_ops::log_sigmoid_forward>(self);
  }
  check_floating(self, "log_sigmoid_forward");
  const Tensor x = in_opmath(self);
  Tensor out = x.clamp_max(0).sub_(at::log1p(at::exp(-x.abs())));
  return {out.to(self.scalar_type()), at::empty({0}, self.options())};
}

// grad * (1 - q) for x < 0, grad * q otherwise, q = z / (1 + z), z = exp(-|x|).
Tensor log_sigmoid_backward_kernel(const Tensor& grad_output, const Tensor& self, const Tensor& buffer) {
  if (!structured::engine_handles(grad_output, self, buffer)) {
    return structured::fallback<at::_ops::log_sigmoid_backward>(grad_output, self, buffer);
  }
  check_floating(self, "log_sigmoid_backward");
  const Tensor x = in_opmath(self);
  const Tensor z = at::exp(-x.abs());
  const Tensor q = z / (z + 1);
  return (in_opmath(grad_output) * at::where(x.lt(0), 1 - q, q)).to(self.scalar_type());
}

// ---- embedding, dropout, infinities ----

// Each index's row of the gradient added into its weight row (in index
// order: deterministic); padding rows get nothing; with scale_grad_by_freq
// each row is divided by how often its index occurs. The rows are added as
// an accumulating index_put_, which rounds float16 and bfloat16 after every
// addition as CPU's embedding backward does (index_add of such a gradient
// adds in float32 on CPU, as scatter_add does).
Tensor embedding_dense_backward_kernel(const Tensor& grad_output, const Tensor& indices, c10::SymInt num_weights_sym,
                                       c10::SymInt padding_idx_sym, bool scale_grad_by_freq) {
  if (!structured::engine_handles(grad_output, indices)) {
    return structured::fallback<at::_ops::embedding_dense_backward>(grad_output, indices, num_weights_sym,
                                                                    padding_idx_sym, scale_grad_by_freq);
  }
  const int64_t num_weights = num_weights_sym.expect_int();
  const int64_t padding_idx = padding_idx_sym.expect_int();
  TORCH_CHECK(indices.scalar_type() == at::kLong || indices.scalar_type() == at::kInt,
              "embedding_backward: expected indices of type Long or Int, got ", indices.scalar_type());
  const int64_t D = grad_output.size(-1);
  const Tensor idx = indices.reshape({-1});
  Tensor g = grad_output.reshape({-1, D});
  if (padding_idx >= 0) {
    g = at::where(idx.ne(padding_idx).unsqueeze(1), g, 0);
  }
  if (scale_grad_by_freq) {
    const Tensor counts = at::zeros({num_weights}, idx.options().dtype(at::kLong))
                              .index_add_(0, idx, at::ones_like(idx, idx.options().dtype(at::kLong)));
    g = g / counts.index_select(0, idx).unsqueeze(1).to(g.scalar_type());
  }
  return at::zeros({num_weights, D}, grad_output.options()).index_put_({idx}, g, /*accumulate=*/true);
}

// embedding's max_norm: each looked-up row whose p-norm exceeds max_norm is
// scaled to max_norm / (norm + 1e-7), in place. A repeated index writes the
// same row twice.
Tensor& embedding_renorm_kernel(Tensor& self, const Tensor& indices, double max_norm, double norm_type) {
  if (!structured::engine_handles(self, indices)) {
    return structured::fallback<at::_ops::embedding_renorm_>(self, indices, max_norm, norm_type);
  }
  TORCH_CHECK(self.dim() == 2, "embedding_renorm_(): input must be 2-D, got ", self.dim(), "-D");
  TORCH_CHECK(indices.scalar_type() == at::kLong || indices.scalar_type() == at::kInt,
              "embedding_renorm_(): expected indices of type Long or Int, got ", indices.scalar_type());
  const Tensor idx = indices.reshape({-1});
  if (idx.numel() == 0) {
    return self;
  }
  const Tensor rows = self.index_select(0, idx);
  const Tensor norms = at::linalg_vector_norm(rows, norm_type, {1}, /*keepdim=*/true);
  const Tensor scale = at::where(norms > max_norm, max_norm / (norms + 1e-7), at::ones({}, norms.options()));
  self.index_put_({idx}, rows * scale);
  return self;
}

Tensor native_dropout_backward_kernel(const Tensor& grad_output, const Tensor& mask, double scale) {
  if (!structured::engine_handles(grad_output, mask)) {
    return structured::fallback<at::_ops::native_dropout_backward>(grad_output, mask, scale);
  }
  return grad_output * mask.to(grad_output.scalar_type()) * scale;
}

template <bool Positive>
Tensor isinf_signed_kernel(const Tensor& self) {
  if (!structured::engine_handles(self)) {
    return Positive ? structured::fallback<at::_ops::isposinf>(self) : structured::fallback<at::_ops::isneginf>(self);
  }
  if (!at::isFloatingType(self.scalar_type())) {
    return at::zeros_like(self, self.options().dtype(at::kBool));
  }
  const double inf = std::numeric_limits<double>::infinity();
  return self.eq(Positive ? inf : -inf);
}

// ---- convolution (1-d and 2-d, plain and transposed) ----

using Pair = std::array<int64_t, 2>;

Tensor pad2d(const Tensor& x, const Pair& padding) {
  if (padding[0] == 0 && padding[1] == 0) {
    return x;
  }
  return at::constant_pad_nd(x, {padding[1], padding[1], padding[0], padding[0]}, 0);
}

// The windows of an (N, C, H, W) input zero-padded by `padding` as a
// contiguous (N, groups, C/groups * kh * kw, OH * OW) tensor (im2col): one
// launch of the engine's window copy (any dtype of 2, 4 or 8 bytes), else
// a device copy of a strided view of the padded input.
Tensor im2col(const Tensor& x, int64_t groups, int64_t kh, int64_t kw, const Pair& stride, const Pair& padding,
              const Pair& dilation, int64_t oh, int64_t ow) {
  const int64_t N = x.size(0), C = x.size(1);
  const int64_t esize = static_cast<int64_t>(x.element_size());
  if (esize == 2 || esize == 4 || esize == 8) {
    Tensor cols = at::empty({N, groups, C / groups * kh * kw, oh * ow}, x.options());
    engine::launch_windows(engine::OR_POOL_IM2COL, x.contiguous(), cols, oh, ow,
                           {{kh, kw}, stride, padding, dilation});
    return cols;
  }
  const Tensor padded = pad2d(x, padding);
  const auto s = padded.strides();
  const Tensor windows = padded.as_strided(
      {N, groups, C / groups, kh, kw, oh, ow},
      {s[0], C / groups * s[1], s[1], dilation[0] * s[2], dilation[1] * s[3], stride[0] * s[2], stride[1] * s[3]});
  return windows.reshape({N, groups, C / groups * kh * kw, oh * ow});
}

// The windows `cols` (N, C, kh, kw, oh, ow) added back into an (N, C, H, W)
// image at their positions (col2im): each image element sums the window
// elements read from it in window order, from 0. float32 and float64: one
// launch of the engine's window sum; other dtypes: one strided add per
// window position into a zero-padded image, whose padding is then cut off
// (the same sums in the same order).
Tensor col2im_sum(const Tensor& cols, int64_t H, int64_t W, const Pair& padding, const Pair& stride,
                  const Pair& dilation) {
  const int64_t N = cols.size(0), C = cols.size(1), kh = cols.size(2), kw = cols.size(3);
  const int64_t oh = cols.size(4), ow = cols.size(5);
  if (cols.scalar_type() == at::kFloat || cols.scalar_type() == at::kDouble) {
    Tensor image = at::empty({N, C, H, W}, cols.options());
    engine::launch_windows(engine::OR_POOL_COL2IM, image, cols.contiguous(), oh, ow,
                           {{kh, kw}, stride, padding, dilation});
    return image;
  }
  Tensor padded = at::zeros({N, C, H + 2 * padding[0], W + 2 * padding[1]}, cols.options());
  const auto s = padded.strides();
  for (int64_t i = 0; i < kh; ++i) {
    for (int64_t j = 0; j < kw; ++j) {
      padded
          .as_strided({N, C, oh, ow}, {s[0], s[1], stride[0] * s[2], stride[1] * s[3]},
                      padded.storage_offset() + i * dilation[0] * s[2] + j * dilation[1] * s[3])
          .add_(cols.select(2, i).select(2, j));
    }
  }
  return padded.slice(2, padding[0], padding[0] + H).slice(3, padding[1], padding[1] + W).contiguous();
}

// A plain 2-d convolution's geometry: input (N, C, H, W), weight (O, C/g, kh,
// kw), output (N, O, oh, ow). A transposed convolution is the input gradient
// of the plain one whose output has the transposed one's input shape, with
// the same weight: its input is the plain one's output, and its output the
// plain one's input. 1-d convolutions gain a height of 1.
struct Conv2d {
  std::array<int64_t, 2> stride, padding, dilation;
  int64_t groups, N, C, H, W, O, kh, kw, oh, ow;
  bool one_d;
};

std::optional<Conv2d> conv2d_geometry(const Tensor& input, const Tensor& weight, at::IntArrayRef stride,
                                      at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed,
                                      at::IntArrayRef output_padding, int64_t groups) {
  if (input.dim() != weight.dim() || (input.dim() != 3 && input.dim() != 4) || groups < 1 ||
      weight.size(0) % groups != 0 || input.size(1) != (transposed ? weight.size(0) : weight.size(1) * groups)) {
    return std::nullopt; // other shapes: ATen's checks and kernels, through the fallback
  }
  Conv2d c{};
  c.one_d = input.dim() == 3;
  const auto pick = [&](at::IntArrayRef v, int64_t fill) -> std::optional<std::array<int64_t, 2>> {
    const size_t n = c.one_d ? 1 : 2;
    if (v.size() != 1 && v.size() != n) {
      return std::nullopt;
    }
    return c.one_d ? std::array<int64_t, 2>{fill, v[0]} : std::array<int64_t, 2>{v[0], v.size() == 1 ? v[0] : v[1]};
  };
  const auto s = pick(stride, 1), p = pick(padding, 0), d = pick(dilation, 1);
  const auto op = transposed ? pick(output_padding, 0) : std::optional<std::array<int64_t, 2>>({0, 0});
  if (!s || !p || !d || !op) {
    return std::nullopt;
  }
  c.stride = *s;
  c.padding = *p;
  c.dilation = *d;
  c.groups = groups;
  c.N = input.size(0);
  c.kh = c.one_d ? 1 : weight.size(2);
  c.kw = weight.size(-1);
  const int64_t in_h = c.one_d ? 1 : input.size(2), in_w = input.size(-1);
  for (int i = 0; i < 2; ++i) {
    if (c.stride[i] < 1 || c.dilation[i] < 1 || c.padding[i] < 0 || (*op)[i] < 0 ||
        ((*op)[i] >= c.stride[i] && (*op)[i] >= c.dilation[i])) {
      return std::nullopt;
    }
  }
  const std::array<int64_t, 2> k{c.kh, c.kw};
  const auto plain_out = [&](int64_t in, int i) {
    const int64_t span = c.dilation[i] * (k[i] - 1) + 1;
    return in + 2 * c.padding[i] < span ? int64_t{-1} : (in + 2 * c.padding[i] - span) / c.stride[i] + 1;
  };
  if (transposed) {
    c.C = weight.size(1) * groups;
    c.O = weight.size(0);
    c.oh = in_h;
    c.ow = in_w;
    c.H = (in_h - 1) * c.stride[0] - 2 * c.padding[0] + c.dilation[0] * (c.kh - 1) + (*op)[0] + 1;
    c.W = (in_w - 1) * c.stride[1] - 2 * c.padding[1] + c.dilation[1] * (c.kw - 1) + (*op)[1] + 1;
    if (c.H < 1 || c.W < 1) {
      return std::nullopt;
    }
  } else {
    c.C = input.size(1);
    c.O = weight.size(0);
    c.H = in_h;
    c.W = in_w;
    c.oh = plain_out(in_h, 0);
    c.ow = plain_out(in_w, 1);
    if (c.oh < 0 || c.ow < 0) {
      return std::nullopt;
    }
  }
  return c;
}

// A tensor of the op as 4-d: 1-d convolutions' (N, C, L) as (N, C, 1, L).
Tensor as4d(const Conv2d& c, const Tensor& t) {
  return c.one_d ? t.unsqueeze(2) : t;
}

Tensor from4d(const Conv2d& c, const Tensor& t) {
  return c.one_d ? t.squeeze(2) : t;
}

// ---- Winograd F(2x2, 3x3) ----
//
// A 3 x 3, stride 1 float32 convolution with enough channels on both sides
// computes each 2 x 2 tile of its output from a 4 x 4 input patch in
// Winograd's transformed space: 16 products (O x C) @ (C x tiles), one bmm
// launch, instead of (O x 9 C) @ (9 C x 4 tiles): 2.25x fewer multiplies,
// for three transform launches (or_pool's WINOGRAD ops). The transforms
// multiply by 0, +-1 and 0.5 only, so the result differs from a direct sum
// by rounding of the same size; it does not depend on the worker count.
// They also subtract patch elements, so an infinite input would give NaN
// where the direct sum is +-inf: a fix-up launch recomputes each NaN of a
// result as the direct sum (CPU's infinities and NaNs; a scan when there is
// none).

// Channels below which im2col and one product are as fast: the transformed
// products' depth is C (O for the input gradient) instead of 9 C, and the
// transforms cost more than im2col's copy.
constexpr int64_t kWinogradChannels = 16;

bool winograd_fits(const Conv2d& c, const Tensor& x) {
  return x.scalar_type() == at::kFloat && c.groups == 1 && c.kh == 3 && c.kw == 3 && c.stride == Pair{1, 1} &&
         c.dilation == Pair{1, 1} && c.C >= kWinogradChannels && c.O >= kWinogradChannels;
}

// A transformed operand of `rows` x `tiles` per point, (16, rows, tiles),
// its 16 points a cache line more than a multiple of 64 bytes apart: dense,
// they usually lie a multiple of 4 KiB apart, and the 16 rows a tile row of
// the transforms writes or reads then share one L1 cache set and evict each
// other between the two halves of each line (8 x 8 tiles per plane: the
// output transform took 1.8x, the gradient's 2.3x as long).
Tensor winograd_space(int64_t rows, int64_t tiles, const at::TensorOptions& options) {
  const int64_t point = (rows * tiles + 15) / 16 * 16 + 16;
  return at::empty({16 * point}, options).as_strided({16, rows, tiles}, {point, tiles, 1});
}

// The kernels (O, C, 3, 3) in the transformed space, (16, O, C); rotated by
// 180 degrees if `rotated`.
Tensor winograd_weight(const Tensor& weight, bool rotated) {
  Tensor u = at::empty({16, weight.size(0), weight.size(1)}, weight.options());
  engine::launch_winograd(rotated ? engine::OR_POOL_WINOGRAD_WEIGHT_ROTATED : engine::OR_POOL_WINOGRAD_WEIGHT,
                          weight.contiguous(), u, 1, 0, 0, {0, 0});
  return u;
}

// The 3 x 3 convolution of x (N, C, H, W), zero-padded by `padding`, with
// `weight` (O, C, 3, 3), or (rotated) with its kernels rotated by 180 degrees
// and transposed, (C, O) for the input gradient: (N, O, oh, ow), each NaN
// of the result recomputed as the direct sum.
Tensor winograd_conv(const Tensor& x, const Tensor& weight, bool rotated, const Pair& padding, int64_t oh,
                     int64_t ow) {
  const Tensor input = x.contiguous(), w = weight.contiguous();
  const int64_t N = input.size(0), C = input.size(1), O = rotated ? w.size(1) : w.size(0);
  const int64_t th = (oh + 1) / 2, tw = (ow + 1) / 2;
  Tensor out = at::empty({N, O, oh, ow}, input.options());
  if (out.numel() == 0) {
    return out;
  }
  Tensor u = winograd_weight(w, rotated);
  const Tensor patches = winograd_space(C, N * th * tw, input.options());
  engine::launch_winograd(engine::OR_POOL_WINOGRAD_INPUT, input, patches, C, th, tw, padding);
  const Tensor products = winograd_space(O, N * th * tw, input.options());
  engine::launch_gemm(16, O, N * th * tw, C, engine::gemm_matrices(rotated ? u.transpose(1, 2) : u),
                      engine::gemm_matrices(patches), engine::gemm_matrices(products), 0, 1);
  engine::launch_winograd(engine::OR_POOL_WINOGRAD_OUTPUT, products, out, O, th, tw, {0, 0});
  engine::launch_winograd_fixup(rotated ? engine::OR_POOL_WINOGRAD_FIXUP_ROTATED : engine::OR_POOL_WINOGRAD_FIXUP, out,
                                input, w, padding);
  return out;
}

// The weight gradient of winograd_conv(x, weight, false, ...): the adjoint of each
// step, U's gradient (16, O, C) the product of the output gradient's tiles
// (16, O, N * tiles) and the input's (16, C, N * tiles) over all tiles, then
// G^T dU G per kernel.
Tensor winograd_weight_grad(const Conv2d& c, const Tensor& x, const Tensor& grad) {
  const int64_t th = (c.oh + 1) / 2, tw = (c.ow + 1) / 2;
  Tensor weight_grad = at::empty({c.O, c.C, 3, 3}, x.options());
  if (c.N * th * tw == 0) {
    return weight_grad.zero_();
  }
  const Tensor input = x.contiguous(), output_grad = grad.contiguous();
  const Tensor patches = winograd_space(c.C, c.N * th * tw, x.options());
  engine::launch_winograd(engine::OR_POOL_WINOGRAD_INPUT, input, patches, c.C, th, tw, c.padding);
  const Tensor tiles = winograd_space(c.O, c.N * th * tw, x.options());
  engine::launch_winograd(engine::OR_POOL_WINOGRAD_GRAD, output_grad, tiles, c.O, th, tw, {0, 0});
  const Tensor u_grad = at::bmm(tiles, patches.transpose(1, 2)); // (16, O, C)
  engine::launch_winograd(engine::OR_POOL_WINOGRAD_WEIGHT_GRAD, u_grad, weight_grad, 1, 0, 0, {0, 0});
  engine::launch_winograd_fixup(engine::OR_POOL_WINOGRAD_WEIGHT_GRAD_FIXUP, weight_grad, input, output_grad,
                                c.padding);
  return weight_grad;
}

// A depthwise convolution (one input and one output channel per group) of
// float32: each group's product has one row, so instead of im2col and a
// product per group, the kh * kw windows of the padded input (strided
// views) are multiplied by their weight per channel and added, a launch
// each, in window order. (64 channels of (8, 32, 32) and a 3 x 3 kernel:
// 6 ms of device time through the products, 2.2 this way.)
bool depthwise_fits(const Conv2d& c, const Tensor& x) {
  return x.scalar_type() == at::kFloat && c.groups > 1 && c.C == c.groups && c.O == c.groups;
}

Tensor depthwise_forward(const Conv2d& c, const Tensor& x, const Tensor& weight) {
  const Tensor w = weight.reshape({c.O, c.kh * c.kw});
  // With stride 1, each window of a channel's plane is that plane read
  // from an offset, so the products run over whole planes (rows of the
  // padded width, whose last kw - 1 columns are dropped at the end): long
  // rows instead of a launch's worth of rows of ow elements. One more
  // padded row keeps the last plane's windows inside the tensor.
  const bool flat = c.stride == Pair{1, 1};
  const Tensor padded = flat ? at::constant_pad_nd(x, {c.padding[1], c.padding[1], c.padding[0], c.padding[0] + 1}, 0)
                             : pad2d(x, c.padding);
  const Tensor xp = padded.contiguous();
  const int64_t hp = xp.size(2), wp = xp.size(3);
  const int64_t width = flat ? wp : c.ow;
  Tensor out = at::empty({c.N, c.O, c.oh, width}, x.options());
  for (int64_t ky = 0; ky < c.kh; ++ky) {
    for (int64_t kx = 0; kx < c.kw; ++kx) {
      const int64_t offset = xp.storage_offset() + ky * c.dilation[0] * wp + kx * c.dilation[1];
      const Tensor window =
          flat ? xp.as_strided({c.N, c.C, c.oh * wp}, {c.C * hp * wp, hp * wp, 1}, offset).view(out.sizes())
               : xp.as_strided({c.N, c.C, c.oh, c.ow}, {c.C * hp * wp, hp * wp, c.stride[0] * wp, c.stride[1]}, offset);
      const Tensor wk = w.select(1, ky * c.kw + kx).view({1, c.O, 1, 1});
      if (ky == 0 && kx == 0) {
        at::mul_out(out, window, wk);
      } else {
        out.addcmul_(window, wk);
      }
    }
  }
  return flat ? out.narrow(3, 0, c.ow).contiguous() : out;
}

// The plain convolution: out[n, g] = weight[g] (O/g, K) @ cols[n, g] (K, P).
Tensor conv_forward(const Conv2d& c, const Tensor& x, const Tensor& weight) {
  if (winograd_fits(c, x)) {
    return winograd_conv(x, weight, false, c.padding, c.oh, c.ow);
  }
  if (depthwise_fits(c, x)) {
    return depthwise_forward(c, x, weight);
  }
  const int64_t g = c.groups;
  Tensor out = at::empty({c.N, g, c.O / g, c.oh * c.ow}, x.options());
  if (out.numel() > 0) {
    const Tensor cols = im2col(x, g, c.kh, c.kw, c.stride, c.padding, c.dilation, c.oh, c.ow);
    const Tensor w = weight.reshape({g, c.O / g, -1});
    for (int64_t gi = 0; gi < g; ++gi) {
      // every sample against the group's weight: a batch whose weight has batch stride 0
      Tensor out_group = out.select(1, gi);
      at::bmm_out(out_group, w[gi].expand({c.N, c.O / g, w.size(2)}), cols.select(1, gi));
    }
  }
  return out.view({c.N, c.O, c.oh, c.ow});
}

// The plain convolution's weight gradient for output gradient `grad`:
// grad_weight[g] = sum over samples of grad[n, g] @ cols[n, g]^T, or for
// 3 x 3 kernels the adjoint of the Winograd convolution.
Tensor conv_weight_grad(const Conv2d& c, const Tensor& x, const Tensor& grad) {
  if (winograd_fits(c, x)) {
    return winograd_weight_grad(c, x, grad);
  }
  if (depthwise_fits(c, x) && c.stride == Pair{1, 1}) {
    // every window of the padded input as planes read from an offset (one
    // overlapping view, the kernel's positions first, as depthwise_forward
    // reads them) times grad widened to the padded width, summed over
    // samples and the real positions (the widened columns' products, of
    // whatever the windows read there, are left out of the sum): two
    // launches over long rows instead of a product, a sum and a copy per
    // channel
    const Tensor xp =
        at::constant_pad_nd(x, {c.padding[1], c.padding[1], c.padding[0], c.padding[0] + 1}, 0).contiguous();
    const int64_t hp = xp.size(2), wp = xp.size(3);
    const Tensor windows = xp.as_strided({c.kh, c.kw, c.N, c.C, c.oh * wp},
                                         {c.dilation[0] * wp, c.dilation[1], c.C * hp * wp, hp * wp, 1},
                                         xp.storage_offset());
    const Tensor g = at::constant_pad_nd(grad.reshape({c.N, c.O, c.oh, c.ow}), {0, wp - c.ow}, 0);
    Tensor products = at::empty({c.kh, c.kw, c.N, c.C, c.oh * wp}, x.options());
    at::mul_out(products, windows, g.reshape({1, 1, c.N, c.O, c.oh * wp}));
    return products.view({c.kh, c.kw, c.N, c.C, c.oh, wp})
        .narrow(5, 0, c.ow)
        .sum({2, 4, 5})
        .permute({2, 0, 1})
        .contiguous()
        .view({c.O, 1, c.kh, c.kw});
  }
  const int64_t g = c.groups;
  const Tensor cols = im2col(x, g, c.kh, c.kw, c.stride, c.padding, c.dilation, c.oh, c.ow);
  const Tensor gr = grad.reshape({c.N, g, c.O / g, c.oh * c.ow});
  Tensor gw = at::empty({g, c.O / g, cols.size(2)}, x.options());
  for (int64_t gi = 0; gi < g; ++gi) {
    gw[gi].copy_(at::bmm(gr.select(1, gi), cols.select(1, gi).transpose(1, 2)).sum(0));
  }
  return gw.view({c.O, c.C / g, c.kh, c.kw});
}

// The plain convolution's input gradient for output gradient `grad`: W^T @
// grad added back into each window position of the padded input (col2im),
// or for 3 x 3 kernels the Winograd convolution of grad with the rotated
// kernels.
Tensor conv_input_grad(const Conv2d& c, const Tensor& weight, const Tensor& grad) {
  if (winograd_fits(c, grad) && c.padding[0] <= 2 && c.padding[1] <= 2) {
    // the convolution of grad, padded by 2 - padding, with the kernels
    // rotated and transposed (C, O)
    return winograd_conv(grad, weight, true, {2 - c.padding[0], 2 - c.padding[1]}, c.H, c.W);
  }
  const int64_t g = c.groups, P = c.oh * c.ow;
  const int64_t K = c.C / g * c.kh * c.kw;
  const Pair flipped_padding{c.dilation[0] * (c.kh - 1) - c.padding[0], c.dilation[1] * (c.kw - 1) - c.padding[1]};
  // (a transposed convolution's output padding makes the input larger than
  // that convolution's output: those take the products below)
  const bool adjoint_fits = c.H == c.oh + flipped_padding[0] - c.padding[0] &&
                            c.W == c.ow + flipped_padding[1] - c.padding[1];
  if (depthwise_fits(c, grad) && c.stride == Pair{1, 1} && flipped_padding[0] >= 0 && flipped_padding[1] >= 0 &&
      adjoint_fits) {
    // with stride 1, the depthwise convolution of grad with the flipped
    // kernels, padded by dilation (k - 1) - padding
    Conv2d adjoint = c;
    adjoint.H = c.oh;
    adjoint.W = c.ow;
    adjoint.oh = c.H;
    adjoint.ow = c.W;
    adjoint.padding = flipped_padding;
    return depthwise_forward(adjoint, grad, weight.flip({2, 3}));
  }
  const Tensor gr = grad.reshape({c.N, g, c.O / g, P});
  Tensor cols_grad = at::empty({c.N, g, K, P}, grad.options());
  const Tensor w = weight.reshape({g, c.O / g, K});
  if (c.O == g) {
    // one output channel per group (a depthwise convolution): each group's
    // product is an outer product, one broadcast multiply for all of them
    // instead of a product of inner dimension 1 per group
    at::mul_out(cols_grad, w.view({1, g, K, 1}), gr);
  } else {
    for (int64_t gi = 0; gi < g; ++gi) {
      Tensor cols_group = cols_grad.select(1, gi);
      at::bmm_out(cols_group, w[gi].t().expand({c.N, K, c.O / g}), gr.select(1, gi));
    }
  }
  return col2im_sum(cols_grad.view({c.N, c.C, c.kh, c.kw, c.oh, c.ow}), c.H, c.W, c.padding, c.stride, c.dilation);
}

// ---- unfold and fold (im2col, col2im) ----

// The geometry of F.unfold / F.fold: each of the four arguments two
// positive (padding: non-negative) numbers, as ATen's shape checks ask.
struct Blocks {
  std::array<int64_t, 2> kernel, dilation, padding, stride;
};

Blocks blocks_of(at::IntArrayRef kernel_size, at::IntArrayRef dilation, at::IntArrayRef padding,
                 at::IntArrayRef stride) {
  const auto two = [](at::IntArrayRef v, const char* name, int64_t least) {
    TORCH_CHECK(v.size() == 2, "It is expected ", name, " equals to 2, but got size ", v.size());
    TORCH_CHECK(v[0] >= least && v[1] >= least, name, " should be ", least == 0 ? "non-negative" : "greater than zero",
                ", but got ", name, ": ", v[0], " ", v[1]);
    return std::array<int64_t, 2>{v[0], v[1]};
  };
  return {two(kernel_size, "kernel_size", 1), two(dilation, "dilation", 1), two(padding, "padding", 0),
          two(stride, "stride", 1)};
}

// The number of sliding blocks along each spatial dimension of an H x W image.
std::array<int64_t, 2> block_counts(const Blocks& b, int64_t H, int64_t W) {
  const std::array<int64_t, 2> in{H, W};
  std::array<int64_t, 2> n{};
  for (int i = 0; i < 2; ++i) {
    n[i] = (in[i] + 2 * b.padding[i] - (b.dilation[i] * (b.kernel[i] - 1) + 1)) / b.stride[i] + 1;
  }
  TORCH_CHECK(n[0] >= 1 && n[1] >= 1, "Given input with spatial size (", H, ", ", W, "), kernel_size=(",
              b.kernel[0], ", ", b.kernel[1], "), dilation=(", b.dilation[0], ", ", b.dilation[1], "), padding=(",
              b.padding[0], ", ", b.padding[1], "), calculated shape of the array of sliding blocks as (", n[0],
              ", ", n[1], "), but its components must be at least one.");
  return n;
}

// F.unfold: every kh x kw block of the (padded) image as a column, (N, C kh kw, L).
Tensor im2col_kernel(const Tensor& self, at::IntArrayRef kernel_size, at::IntArrayRef dilation,
                     at::IntArrayRef padding, at::IntArrayRef stride) {
  if (!structured::engine_handles(self)) {
    return structured::fallback<at::_ops::im2col>(self, kernel_size, dilation, padding, stride);
  }
  openreg::count_op(structured::counted_name<at::_ops::im2col>(), true);
  const Blocks b = blocks_of(kernel_size, dilation, padding, stride);
  TORCH_CHECK((self.dim() == 3 && self.size(0) > 0 && self.size(1) > 0 && self.size(2) > 0) ||
                  (self.dim() == 4 && self.size(1) > 0 && self.size(2) > 0 && self.size(3) > 0),
              "Expected 3D or 4D (batch mode) tensor for input with possibly 0 batch size and non-zero dimensions "
              "for input, but got: ", self.sizes());
  const Tensor x = self.dim() == 3 ? self.unsqueeze(0) : self;
  const int64_t N = x.size(0), C = x.size(1);
  const auto n = block_counts(b, x.size(2), x.size(3));
  Tensor cols = N == 0 ? at::empty({0, 1, C * b.kernel[0] * b.kernel[1], n[0] * n[1]}, x.options())
                       : im2col(x, 1, b.kernel[0], b.kernel[1], b.stride, b.padding, b.dilation, n[0], n[1]);
  cols = cols.view({N, C * b.kernel[0] * b.kernel[1], n[0] * n[1]});
  return self.dim() == 3 ? cols.squeeze(0) : cols;
}

// F.fold: the columns (N, C kh kw, L) summed back into an H x W image.
Tensor col2im_kernel(const Tensor& self, c10::SymIntArrayRef output_size_sym, at::IntArrayRef kernel_size,
                     at::IntArrayRef dilation, at::IntArrayRef padding, at::IntArrayRef stride) {
  if (!structured::engine_handles(self)) {
    return structured::fallback<at::_ops::col2im>(self, output_size_sym, kernel_size, dilation, padding, stride);
  }
  openreg::count_op(structured::counted_name<at::_ops::col2im>(), true);
  const auto output_size = C10_AS_INTARRAYREF_SLOW(output_size_sym);
  TORCH_CHECK(output_size.size() == 2, "It is expected output_size equals to 2, but got size ", output_size.size());
  const Blocks b = blocks_of(kernel_size, dilation, padding, stride);
  TORCH_CHECK((self.dim() == 2 && self.size(0) > 0 && self.size(1) > 0) ||
                  (self.dim() == 3 && self.size(1) > 0 && self.size(2) > 0),
              "Expected 2D or 3D (batch mode) tensor for input with possibly 0 batch size and non-zero dimensions "
              "for input, but got: ", self.sizes());
  const Tensor x = self.dim() == 2 ? self.unsqueeze(0) : self;
  const int64_t window = b.kernel[0] * b.kernel[1];
  TORCH_CHECK(x.size(1) % window == 0, "Expected size of input's dimension 1 to be divisible by the product of "
              "kernel_size, but got input.size(1)=", x.size(1), " and kernel_size=(", b.kernel[0], ", ", b.kernel[1],
              ").");
  const auto n = block_counts(b, output_size[0], output_size[1]);
  TORCH_CHECK(x.size(2) == n[0] * n[1], "Given output_size=(", output_size[0], ", ", output_size[1],
              "), kernel_size=(", b.kernel[0], ", ", b.kernel[1], "), dilation=(", b.dilation[0], ", ", b.dilation[1],
              "), padding=(", b.padding[0], ", ", b.padding[1], "), stride=(", b.stride[0], ", ", b.stride[1],
              "), expected size of input's dimension 2 to match the calculated number of sliding blocks ", n[0],
              " * ", n[1], " = ", n[0] * n[1], ", but got input.size(2)=", x.size(2), ".");
  const int64_t N = x.size(0), C = x.size(1) / window;
  const Tensor image = col2im_sum(x.reshape({N, C, b.kernel[0], b.kernel[1], n[0], n[1]}), output_size[0],
                                  output_size[1], b.padding, b.stride, b.dilation);
  return self.dim() == 2 ? image.squeeze(0) : image;
}

// ---- 3-d convolution: a sum over the kernel's depth of 2-d convolutions ----

// A plain 3-d convolution's geometry (as Conv2d's, transposed ones described
// by the plain one they are the input gradient of): the 2-d problem of one
// kernel depth slice, whose batch is N * od (every output depth's input
// plane), and the depth's own sizes.
struct Conv3d {
  Conv2d plane;
  int64_t N, D, kd, od, sd, pd, dd;
};

std::optional<Conv3d> conv3d_geometry(const Tensor& input, const Tensor& weight, at::IntArrayRef stride,
                                      at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed,
                                      at::IntArrayRef output_padding, int64_t groups) {
  if (input.dim() != 5 || weight.dim() != 5 || input.size(2) < 1 || groups < 1 || weight.size(0) % groups != 0 ||
      input.size(1) != (transposed ? weight.size(0) : weight.size(1) * groups)) {
    return std::nullopt;
  }
  const auto three = [](at::IntArrayRef v, int64_t fill) -> std::optional<std::array<int64_t, 3>> {
    if (v.empty()) {
      return std::array<int64_t, 3>{fill, fill, fill};
    }
    if (v.size() != 1 && v.size() != 3) {
      return std::nullopt;
    }
    return v.size() == 1 ? std::array<int64_t, 3>{v[0], v[0], v[0]} : std::array<int64_t, 3>{v[0], v[1], v[2]};
  };
  const auto s = three(stride, 1), p = three(padding, 0), d = three(dilation, 1);
  const auto op = transposed ? three(output_padding, 0) : std::optional<std::array<int64_t, 3>>({0, 0, 0});
  if (!s || !p || !d || !op) {
    return std::nullopt;
  }
  // the depth: of the plain convolution's input (D) and output (od)
  const int64_t kd = weight.size(2);
  int64_t D, od;
  if (transposed) {
    od = input.size(2);
    D = (od - 1) * (*s)[0] - 2 * (*p)[0] + (*d)[0] * (kd - 1) + (*op)[0] + 1;
  } else {
    D = input.size(2);
    const int64_t span = (*d)[0] * (kd - 1) + 1;
    od = D + 2 * (*p)[0] < span ? -1 : (D + 2 * (*p)[0] - span) / (*s)[0] + 1;
  }
  if ((*s)[0] < 1 || (*d)[0] < 1 || (*p)[0] < 0 || (*op)[0] < 0 || ((*op)[0] >= (*s)[0] && (*op)[0] >= (*d)[0]) ||
      D < 1 || od < 1) {
    return std::nullopt;
  }
  // the 2-d problem: one depth plane of input and weight
  const Tensor plane_input = input.select(2, 0);
  const Tensor plane_weight = weight.select(2, 0);
  const std::array<int64_t, 2> s2{(*s)[1], (*s)[2]}, p2{(*p)[1], (*p)[2]}, d2{(*d)[1], (*d)[2]};
  const std::array<int64_t, 2> op2{(*op)[1], (*op)[2]};
  auto plane = conv2d_geometry(plane_input, plane_weight, s2, p2, d2, transposed, op2, groups);
  if (!plane) {
    return std::nullopt;
  }
  const int64_t N = input.size(0);
  plane->N = N * od;
  return Conv3d{*plane, N, D, kd, od, (*s)[0], (*p)[0], (*d)[0]};
}

// The depth-padded x (N, C, D, H, W) seen at kernel depth k: (N, od, C, H, W),
// one input plane per output depth.
Tensor depth_windows(const Conv3d& c, const Tensor& padded, int64_t k) {
  const auto st = padded.strides();
  return padded.as_strided({c.N, c.od, padded.size(1), padded.size(3), padded.size(4)},
                           {st[0], c.sd * st[2], st[1], st[3], st[4]},
                           padded.storage_offset() + k * c.dd * st[2]);
}

Tensor pad_depth(const Conv3d& c, const Tensor& x) {
  return c.pd == 0 ? x : at::constant_pad_nd(x, {0, 0, 0, 0, c.pd, c.pd}, 0);
}

// The plain 3-d convolution: for each kernel depth, the 2-d convolution of
// every output depth's input plane with that depth's weight, summed.
Tensor conv3d_forward(const Conv3d& c, const Tensor& x, const Tensor& weight) {
  const Tensor padded = pad_depth(c, x);
  Tensor out;
  for (int64_t k = 0; k < c.kd; ++k) {
    const Tensor planes = depth_windows(c, padded, k).reshape({c.N * c.od, x.size(1), x.size(3), x.size(4)});
    const Tensor part = conv_forward(c.plane, planes, weight.select(2, k));
    out = out.defined() ? out.add_(part) : part;
  }
  return out.view({c.N, c.od, c.plane.O, c.plane.oh, c.plane.ow}).permute({0, 2, 1, 3, 4}).contiguous();
}

// grad (N, O, od, oh, ow) as the 2-d problem's output gradient (N * od, O, oh, ow).
Tensor depth_major(const Conv3d& c, const Tensor& grad) {
  return grad.permute({0, 2, 1, 3, 4}).reshape({c.N * c.od, c.plane.O, c.plane.oh, c.plane.ow});
}

Tensor conv3d_weight_grad(const Conv3d& c, const Tensor& x, const Tensor& grad) {
  const Tensor padded = pad_depth(c, x);
  const Tensor g = depth_major(c, grad);
  std::vector<Tensor> slices;
  for (int64_t k = 0; k < c.kd; ++k) {
    const Tensor planes = depth_windows(c, padded, k).reshape({c.N * c.od, x.size(1), x.size(3), x.size(4)});
    slices.push_back(conv_weight_grad(c.plane, planes, g));
  }
  return at::stack(slices, 2);
}

// Each kernel depth's 2-d input gradient added back at its input depths.
Tensor conv3d_input_grad(const Conv3d& c, const Tensor& weight, const Tensor& grad) {
  const Tensor g = depth_major(c, grad);
  const int64_t C = c.plane.C, H = c.plane.H, W = c.plane.W;
  Tensor padded = at::zeros({c.N, C, c.D + 2 * c.pd, H, W}, grad.options());
  for (int64_t k = 0; k < c.kd; ++k) {
    depth_windows(c, padded, k).add_(conv_input_grad(c.plane, weight.select(2, k), g).view({c.N, c.od, C, H, W}));
  }
  return padded.narrow(2, c.pd, c.D).contiguous();
}

// Plain: conv_forward, plus bias. Transposed: the plain convolution's input
// gradient of the input, plus bias.
Tensor convolution_kernel(const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias,
                          c10::SymIntArrayRef stride_sym, c10::SymIntArrayRef padding_sym,
                          c10::SymIntArrayRef dilation_sym, bool transposed, c10::SymIntArrayRef output_padding_sym,
                          c10::SymInt groups_sym) {
  const auto stride = C10_AS_INTARRAYREF_SLOW(stride_sym), padding = C10_AS_INTARRAYREF_SLOW(padding_sym);
  const auto dilation = C10_AS_INTARRAYREF_SLOW(dilation_sym);
  const auto output_padding = C10_AS_INTARRAYREF_SLOW(output_padding_sym);
  const int64_t groups = groups_sym.expect_int();
  const bool handled = structured::engine_handles(input, weight, bias) && input.scalar_type() != at::kBool &&
                       input.scalar_type() == weight.scalar_type();
  if (const auto c3 = handled ? conv3d_geometry(input, weight, stride, padding, dilation, transposed, output_padding,
                                                groups)
                              : std::nullopt) {
    Tensor result = transposed ? conv3d_input_grad(*c3, weight, input) : conv3d_forward(*c3, input, weight);
    if (defined(bias)) {
      result.add_(bias->reshape({1, result.size(1), 1, 1, 1}));
    }
    return result;
  }
  const auto geometry = conv2d_geometry(input, weight, stride, padding, dilation, transposed, output_padding, groups);
  if (!geometry || !handled) {
    return structured::fallback<at::_ops::convolution>(input, weight, bias, stride_sym, padding_sym, dilation_sym,
                                                       transposed, output_padding_sym, groups_sym);
  }
  const Conv2d& c = *geometry;
  Tensor result = transposed ? conv_input_grad(c, as4d(c, weight), as4d(c, input))
                             : conv_forward(c, as4d(c, input), as4d(c, weight));
  if (defined(bias)) {
    result.add_(bias->reshape({1, result.size(1), 1, 1}));
  }
  return from4d(c, result);
}

// grad_bias sums grad_output over samples and positions. Plain: the weight
// and input gradients above. Transposed: the input's gradient is the plain
// convolution of grad_output, the weight's is the plain weight gradient with
// grad_output as the input and the input as the output gradient.
std::tuple<Tensor, Tensor, Tensor> convolution_backward_kernel(
    const Tensor& grad_output, const Tensor& input, const Tensor& weight, at::OptionalSymIntArrayRef bias_sizes,
    c10::SymIntArrayRef stride_sym, c10::SymIntArrayRef padding_sym, c10::SymIntArrayRef dilation_sym,
    bool transposed, c10::SymIntArrayRef output_padding_sym, c10::SymInt groups_sym, std::array<bool, 3> output_mask) {
  const auto stride = C10_AS_INTARRAYREF_SLOW(stride_sym), padding = C10_AS_INTARRAYREF_SLOW(padding_sym);
  const auto dilation = C10_AS_INTARRAYREF_SLOW(dilation_sym);
  const auto output_padding = C10_AS_INTARRAYREF_SLOW(output_padding_sym);
  const int64_t groups = groups_sym.expect_int();
  const bool handled = structured::engine_handles(grad_output, input, weight) && input.scalar_type() != at::kBool;
  if (const auto c3 = handled ? conv3d_geometry(input, weight, stride, padding, dilation, transposed, output_padding,
                                                groups)
                              : std::nullopt) {
    Tensor grad_input, grad_weight, grad_bias;
    if (output_mask[2]) {
      grad_bias = grad_output.sum({0, 2, 3, 4});
    }
    if (output_mask[1]) {
      grad_weight = transposed ? conv3d_weight_grad(*c3, grad_output, input)
                               : conv3d_weight_grad(*c3, input, grad_output);
    }
    if (output_mask[0]) {
      grad_input = transposed ? conv3d_forward(*c3, grad_output, weight) : conv3d_input_grad(*c3, weight, grad_output);
    }
    return {grad_input, grad_weight, grad_bias};
  }
  const auto geometry = conv2d_geometry(input, weight, stride, padding, dilation, transposed, output_padding, groups);
  if (!geometry || !handled) {
    return structured::fallback<at::_ops::convolution_backward>(grad_output, input, weight, bias_sizes, stride_sym,
                                                                padding_sym, dilation_sym, transposed,
                                                                output_padding_sym, groups_sym, output_mask);
  }
  const Conv2d& c = *geometry;
  const Tensor x = as4d(c, input), w = as4d(c, weight), grad = as4d(c, grad_output);
  Tensor grad_input, grad_weight, grad_bias;
  if (output_mask[2]) {
    grad_bias = grad.sum({0, 2, 3});
  }
  if (output_mask[1]) {
    grad_weight = from4d(c, transposed ? conv_weight_grad(c, grad, x) : conv_weight_grad(c, x, grad));
  }
  if (output_mask[0]) {
    grad_input = from4d(c, transposed ? conv_forward(c, grad, w) : conv_input_grad(c, w, grad));
  }
  return {grad_input, grad_weight, grad_bias};
}

// ---- max pooling (2-d) ----

struct Pool2d {
  std::array<int64_t, 2> kernel, stride, padding, dilation;
  int64_t oh, ow;
};

Pool2d pool2d_geometry(const Tensor& input, at::IntArrayRef kernel_size, at::IntArrayRef stride,
                       at::IntArrayRef padding, at::IntArrayRef dilation, bool ceil_mode) {
  TORCH_CHECK(kernel_size.size() == 1 || kernel_size.size() == 2,
              "max_pool2d: kernel_size must either be a single int, or a tuple of two ints");
  TORCH_CHECK(stride.empty() || stride.size() == 1 || stride.size() == 2,
              "max_pool2d: stride must either be omitted, a single int, or a tuple of two ints");
  TORCH_CHECK(padding.size() == 1 || padding.size() == 2, "max_pool2d: padding must either be a single int, or a tuple of two ints");
  TORCH_CHECK(dilation.size() == 1 || dilation.size() == 2,
              "max_pool2d: dilation must be either a single int, or a tuple of two ints");
  TORCH_CHECK(input.dim() == 3 || input.dim() == 4, "non-empty 3D or 4D (batch mode) tensor expected for input");
  const auto two = [](at::IntArrayRef v) { return std::array<int64_t, 2>{v[0], v.size() == 1 ? v[0] : v[1]}; };
  Pool2d p;
  p.kernel = two(kernel_size);
  p.stride = stride.empty() ? p.kernel : two(stride);
  p.padding = two(padding);
  p.dilation = two(dilation);
  TORCH_CHECK(p.kernel[0] > 0 && p.kernel[1] > 0, "kernel_size should be greater than zero");
  TORCH_CHECK(p.dilation[0] > 0 && p.dilation[1] > 0, "dilation should be greater than zero");
  const int64_t H = input.size(-2), W = input.size(-1);
  p.oh = at::native::pooling_output_shape<int64_t>(H, p.kernel[0], p.padding[0], p.stride[0], p.dilation[0], ceil_mode);
  p.ow = at::native::pooling_output_shape<int64_t>(W, p.kernel[1], p.padding[1], p.stride[1], p.dilation[1], ceil_mode);
  TORCH_CHECK(p.oh > 0 && p.ow > 0, "Given input size: (", input.sizes(), "). Calculated output size: (", p.oh, "x",
              p.ow, "). Output size is too small");
  return p;
}

// Each window's maximum (the first of equals; the last NaN) and its position
// as an index into the input's H x W plane, as CPU returns them: one `pool`
// launch.
std::tuple<Tensor, Tensor> max_pool2d_with_indices_kernel(const Tensor& input, at::IntArrayRef kernel_size,
                                                          at::IntArrayRef stride, at::IntArrayRef padding,
                                                          at::IntArrayRef dilation, bool ceil_mode) {
  if (!structured::engine_handles(input) || input.scalar_type() == at::kBool) {
    return structured::fallback<at::_ops::max_pool2d_with_indices>(input, kernel_size, stride, padding, dilation,
                                                                   ceil_mode);
  }
  const Pool2d p = pool2d_geometry(input, kernel_size, stride, padding, dilation, ceil_mode);
  const Tensor x = pool_operand(input.dim() == 3 ? input.unsqueeze(0) : input);
  Tensor values = at::empty({x.size(0), x.size(1), p.oh, p.ow}, x.options());
  Tensor indices = at::empty(values.sizes(), x.options().dtype(at::kLong));
  engine::launch_pool(engine::OR_POOL_MAX, x, values, indices, {p.kernel, p.stride, p.padding, p.dilation});
  values = values.to(input.scalar_type());
  if (input.dim() == 3) {
    return {values.squeeze(0), indices.squeeze(0)};
  }
  return {values, indices};
}

// The gradient goes to the input element each window picked, added up where
// windows overlap (in window order: deterministic).
Tensor max_pool2d_with_indices_backward_kernel(const Tensor& grad_output, const Tensor& input,
                                               at::IntArrayRef kernel_size, at::IntArrayRef stride,
                                               at::IntArrayRef padding, at::IntArrayRef dilation, bool ceil_mode,
                                               const Tensor& indices) {
  if (!structured::engine_handles(grad_output, input, indices)) {
    return structured::fallback<at::_ops::max_pool2d_with_indices_backward>(grad_output, input, kernel_size, stride,
                                                                            padding, dilation, ceil_mode, indices);
  }
  const auto p = pool2d_geometry(input, kernel_size, stride, padding, dilation, ceil_mode); // the forward's checks
  return scatter_to_picks(grad_output, input, indices, {p.kernel, p.stride, p.padding, p.dilation});
}

} // namespace
} // namespace openreg::nn

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  using namespace openreg::nn;
  m.impl("logsumexp", TORCH_FN(logsumexp_entry));
  m.impl("_softmax", TORCH_FN((softmax_entry<at::_ops::_softmax, false, at::meta::structured__softmax>)));
  m.impl("_log_softmax", TORCH_FN((softmax_entry<at::_ops::_log_softmax, true, at::meta::structured__log_softmax>)));
  m.impl("_softmax_backward_data",
         TORCH_FN((softmax_backward_entry<at::_ops::_softmax_backward_data, false,
                                          at::meta::structured__softmax_backward_data>)));
  m.impl("_log_softmax_backward_data",
         TORCH_FN((softmax_backward_entry<at::_ops::_log_softmax_backward_data, true,
                                          at::meta::structured__log_softmax_backward_data>)));
  m.impl("nll_loss_forward", TORCH_FN(nll_loss_forward_kernel));
  m.impl("nll_loss_backward", TORCH_FN(nll_loss_backward_kernel));
  m.impl("nll_loss2d_forward", TORCH_FN(nll_loss2d_forward_kernel));
  m.impl("nll_loss2d_backward", TORCH_FN(nll_loss2d_backward_kernel));
  m.impl("native_layer_norm", TORCH_FN(layer_norm_kernel));
  m.impl("native_group_norm", TORCH_FN(group_norm_kernel));
  m.impl("native_layer_norm_backward", TORCH_FN(layer_norm_backward_kernel));
  m.impl("native_batch_norm", TORCH_FN(batch_norm_kernel));
  m.impl("native_batch_norm_backward", TORCH_FN(batch_norm_backward_kernel));
  m.impl("_native_batch_norm_legit", TORCH_FN(batch_norm_legit_kernel));
  m.impl("_native_batch_norm_legit.no_stats", TORCH_FN(batch_norm_legit_no_stats_kernel));
  m.impl("_batch_norm_with_update", TORCH_FN(batch_norm_with_update_kernel));
  m.impl("batch_norm_backward", TORCH_FN(batch_norm_update_backward_kernel));
  m.impl("native_group_norm_backward", TORCH_FN(group_norm_backward_kernel));
  m.impl("binary_cross_entropy", TORCH_FN(binary_cross_entropy_kernel));
  m.impl("binary_cross_entropy_backward", TORCH_FN(binary_cross_entropy_backward_kernel));
  m.impl("logit", TORCH_FN(logit_kernel));
  m.impl("logit_backward", TORCH_FN(logit_backward_kernel));
  m.impl("im2col", TORCH_FN(im2col_kernel));
  m.impl("col2im", TORCH_FN(col2im_kernel));
  m.impl("log_sigmoid_forward", TORCH_FN(log_sigmoid_forward_kernel));
  m.impl("log_sigmoid_backward", TORCH_FN(log_sigmoid_backward_kernel));
  m.impl("embedding_dense_backward", TORCH_FN(embedding_dense_backward_kernel));
  m.impl("native_dropout_backward", TORCH_FN(native_dropout_backward_kernel));
  m.impl("embedding_renorm_", TORCH_FN(embedding_renorm_kernel));
  m.impl("isposinf", TORCH_FN(isinf_signed_kernel<true>));
  m.impl("isneginf", TORCH_FN(isinf_signed_kernel<false>));
  m.impl("convolution", TORCH_FN(convolution_kernel));
  m.impl("convolution_backward", TORCH_FN(convolution_backward_kernel));
  m.impl("max_pool2d_with_indices", TORCH_FN(max_pool2d_with_indices_kernel));
  m.impl("max_pool2d_with_indices_backward", TORCH_FN(max_pool2d_with_indices_backward_kernel));
}
