// The fused optimizer steps torch.optim calls with fused=True: Adam, AdamW,
// SGD and Adagrad, each with a float or a tensor learning rate.
//
// They run as the engine's optim_list kernel: one launch for the whole list,
// one pass over each parameter's tensors, with the arithmetic of ATen's CPU
// fused kernels; the step counts, a tensor learning rate, GradScaler's
// grad_scale and found_inf are read on the device, so the step brings nothing
// back to the host. Lists the kernel does not take (mixed dtypes, strided
// tensors, scalars on another device) run the same steps as device ops per
// parameter, which read found_inf on the host.
//
// With grad_scale the gradients are divided by it and stored back so, as on
// CPU, and a found_inf of 1 skips the whole step.

#include <ATen/ATen.h>
#include <torch/library.h>

#include <functional>
#include <vector>

#include "OpenRegEngine.h"
#include "OpenRegForeach.h"
#include "OpenRegStructured.h"

namespace openreg::optim {
namespace {

using at::Tensor;
using at::TensorList;

// A learning rate as a float or a (0-d) tensor.
struct Lr {
  double value;
  Tensor tensor;

  // t * lr
  Tensor times(const Tensor& t) const {
    return tensor.defined() ? t * tensor : t * value;
  }

  // lr / t, t of float64 (as the kernels divide)
  Tensor over(const Tensor& t) const {
    return tensor.defined() ? tensor.to(at::kDouble) / t : value / t;
  }
};

Lr lr_of(double lr) {
  return {lr, Tensor()};
}

// A CPU tensor's value is read here, as CPU's fused kernels read theirs; a
// device tensor's stays on the device.
Lr lr_of(const Tensor& lr) {
  return lr.device().is_cpu() ? Lr{lr.item<double>(), Tensor()} : Lr{0.0, lr};
}

bool lists_on_engine(std::initializer_list<TensorList> lists) {
  for (const TensorList list : lists) {
    for (const Tensor& t : list) {
      if (t.defined() && !engine::supports_dtype(t.scalar_type())) {
        return false;
      }
    }
  }
  return true;
}

// The lists every step needs hold a tensor for each parameter (the optional
// ones, max_exp_avg_sqs and momentum buffers, are checked where they are used).
void check_lengths(TensorList params, std::initializer_list<TensorList> lists, const char* op) {
  for (const TensorList list : lists) {
    TORCH_CHECK(list.size() == params.size(), op, ": expected every tensor list to have ", params.size(),
                " tensors, got ", list.size());
  }
}

// Whether GradScaler found an inf or NaN in the gradients: the step is skipped.
bool skip_step(const std::optional<Tensor>& found_inf) {
  return found_inf.has_value() && found_inf->defined() && found_inf->item<double>() == 1.0;
}

// The gradient as the step uses it: unscaled (and stored back so, as CPU's
// fused kernels do), and negated to maximize.
Tensor step_grad(const Tensor& grad, const std::optional<Tensor>& grad_scale, bool maximize) {
  if (grad_scale.has_value() && grad_scale->defined()) {
    grad.div_(*grad_scale);
  }
  return maximize ? grad.neg() : grad;
}

// Runs one parameter's per-parameter `step` on `item` (the parameter and its
// states, undefined where absent) and the gradient `g`: in place, or for
// float16 and bfloat16 on float32 copies written back after, as the kernel
// and CPU's fused kernels compute those types (in half precision eps would
// round to 0, and every product would round).
void in_opmath(const std::vector<Tensor>& item, const Tensor& g,
               const std::function<void(const std::vector<Tensor>&, const Tensor&)>& step) {
  const at::ScalarType dtype = item[0].scalar_type();
  if (dtype != at::kHalf && dtype != at::kBFloat16) {
    step(item, g);
    return;
  }
  std::vector<Tensor> wide;
  for (const Tensor& t : item) {
    wide.push_back(t.defined() ? t.to(at::kFloat) : t);
  }
  step(wide, g.to(at::kFloat));
  for (size_t k = 0; k < item.size(); ++k) {
    if (item[k].defined()) {
      item[k].copy_(wide[k]);
    }
  }
}

// Whether `t` can be a scalar operand of the engine's optim_list kernel (a
// step count, a tensor learning rate, grad_scale, found_inf): one float32 or
// float64 element on the parameters' device.
bool step_scalar(TensorList params, const Tensor& t) {
  return t.numel() == 1 && t.device() == params[0].device() &&
         (t.scalar_type() == at::kFloat || t.scalar_type() == at::kDouble);
}

// A fused step as launches of the engine's optim_list kernel, one pass over
// each parameter's tensors, when the tensors allow it: `lists` (parameters,
// gradients, the optimizer's states) on_engine and the scalars step_scalar.
// `head` gives the optimizer and its hyperparameters. Returns false, having
// run nothing, otherwise.
bool step_lists(engine::or_optim_head head, std::initializer_list<TensorList> lists, TensorList steps, const Lr& lr,
                const std::optional<Tensor>& grad_scale, const std::optional<Tensor>& found_inf) {
  const TensorList params = *lists.begin();
  const auto given = [](const std::optional<Tensor>& t) { return t.has_value() ? *t : Tensor(); };
  const Tensor scale = given(grad_scale), inf = given(found_inf);
  if (!foreach_ops::on_engine(lists) || (head.kind != engine::OR_OPTIM_SGD && steps.size() != params.size())) {
    return false;
  }
  for (const Tensor& t : {lr.tensor, scale, inf}) {
    if (t.defined() && !step_scalar(params, t)) {
      return false;
    }
  }
  for (const Tensor& step : steps) {  // one dtype: the kernel reads them all as steps[0]'s
    if (!step.defined() || !step_scalar(params, step) || step.scalar_type() != steps[0].scalar_type()) {
      return false;
    }
  }
  head.dtype = static_cast<uint32_t>(params[0].scalar_type());
  head.flags |= (lr.tensor.defined() ? OR_OPTIM_LR_TENSOR : 0u) | (scale.defined() ? OR_OPTIM_GRAD_SCALE : 0u) |
                (inf.defined() ? OR_OPTIM_FOUND_INF : 0u);
  head.lr = lr.value;
  engine::launch_optim_list(head, std::vector<TensorList>(lists), steps, lr.tensor, scale, inf);
  return true;
}

enum class AdamMode { Original, AdamW };

// exp_avg = lerp(exp_avg, g, 1 - beta1); exp_avg_sq = beta2 exp_avg_sq +
// (1 - beta2) g^2; param -= lr / (1 - beta1^step) * exp_avg / (sqrt(v) /
// sqrt(1 - beta2^step) + eps), v the running maximum of exp_avg_sq with
// amsgrad. Weight decay adds wd * param to g (Adam) or scales param by
// 1 - lr * wd first (AdamW). The per-parameter ops round as the kernel does
// in float32 (lerp, the fused multiply-adds of add with alpha and addcmul,
// the factors and bias corrections in float64), float16 and bfloat16 run in
// float32 (in_opmath).
template <AdamMode Mode>
void adam_step(TensorList params, TensorList grads, TensorList exp_avgs, TensorList exp_avg_sqs,
               TensorList max_exp_avg_sqs, TensorList state_steps, const Lr& lr, double beta1, double beta2,
               double weight_decay, double eps, bool amsgrad, bool maximize, const std::optional<Tensor>& grad_scale,
               const std::optional<Tensor>& found_inf) {
  const char* op = Mode == AdamMode::AdamW ? "_fused_adamw_" : "_fused_adam_";
  check_lengths(params, {grads, exp_avgs, exp_avg_sqs, state_steps}, op);
  TORCH_CHECK(!amsgrad || max_exp_avg_sqs.size() == params.size(), op, ": amsgrad needs max_exp_avg_sqs for every "
              "parameter");
  engine::or_optim_head head{};
  head.kind = Mode == AdamMode::AdamW ? engine::OR_OPTIM_ADAMW : engine::OR_OPTIM_ADAM;
  head.flags = (amsgrad ? OR_OPTIM_AMSGRAD : 0u) | (maximize ? OR_OPTIM_MAXIMIZE : 0u);
  head.beta1 = beta1;
  head.beta2 = beta2;
  head.weight_decay = weight_decay;
  head.eps = eps;
  if (amsgrad ? step_lists(head, {params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs}, state_steps, lr, grad_scale,
                           found_inf)
              : step_lists(head, {params, grads, exp_avgs, exp_avg_sqs}, state_steps, lr, grad_scale, found_inf)) {
    return;
  }
  if (skip_step(found_inf)) {
    return;
  }
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor g = step_grad(grads[i], grad_scale, maximize);
    const std::vector<Tensor> item = {params[i], exp_avgs[i], exp_avg_sqs[i],
                                      amsgrad ? max_exp_avg_sqs[i] : Tensor()};
    in_opmath(item, g, [&](const std::vector<Tensor>& t, Tensor g) {
      const Tensor &param = t[0], &exp_avg = t[1], &exp_avg_sq = t[2];
      if (weight_decay != 0.0) {
        if constexpr (Mode == AdamMode::AdamW) {
          if (lr.tensor.defined()) {
            param.mul_(1.0 - lr.tensor.to(at::kDouble) * weight_decay);
          } else {
            param.mul_(1.0 - lr.value * weight_decay);
          }
        } else {
          g = g.add(param, weight_decay);
        }
      }
      exp_avg.lerp_(g, 1.0 - beta1);
      exp_avg_sq.mul_(beta2).addcmul_(g, g, 1.0 - beta2);
      const Tensor step = state_steps[i].to(at::kDouble);
      const Tensor bias_correction1 = 1 - at::pow(beta1, step);
      const Tensor bias_correction2_sqrt = (1 - at::pow(beta2, step)).sqrt_();
      Tensor v = exp_avg_sq;
      if (amsgrad) {
        t[3].copy_(at::maximum(t[3], exp_avg_sq));
        v = t[3];
      }
      const Tensor denom = (v.sqrt() / bias_correction2_sqrt.to(v.scalar_type())).add_(eps);
      const Tensor step_size = lr.over(bias_correction1).to(exp_avg.scalar_type());
      param.sub_((exp_avg * step_size).div_(denom));
    });
  }
}

// One entry for both overloads: `LrArg` is double, or const Tensor& (tensor_lr).
template <AdamMode Mode, class Op, class LrArg>
void adam_entry(TensorList params, TensorList grads, TensorList exp_avgs, TensorList exp_avg_sqs,
                TensorList max_exp_avg_sqs, TensorList state_steps, LrArg lr, double beta1, double beta2,
                double weight_decay, double eps, bool amsgrad, bool maximize, const std::optional<Tensor>& grad_scale,
                const std::optional<Tensor>& found_inf) {
  if (!lists_on_engine({params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs})) {
    return structured::fallback<Op>(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, lr, beta1,
                                    beta2, weight_decay, eps, amsgrad, maximize, grad_scale, found_inf);
  }
  openreg::count_op(structured::counted_name<Op>(), true);
  adam_step<Mode>(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, lr_of(lr), beta1, beta2,
                  weight_decay, eps, amsgrad, maximize, grad_scale, found_inf);
}

// g += wd * param; with momentum, buf = g on the first step, else
// momentum * buf + (1 - dampening) * g, and g = g + momentum * buf
// (nesterov) or buf; param -= lr * g. As the engine's optim_list kernel runs
// it, or, for lists it does not take, as device ops per parameter that round
// alike (the additions of a product are add with alpha and addcmul, fused
// multiply-adds for float32): the same bits either way.
void sgd_step(TensorList params, TensorList grads, TensorList momentum_buffers, double weight_decay, double momentum,
              const Lr& lr, double dampening, bool nesterov, bool maximize, bool is_first_step,
              const std::optional<Tensor>& grad_scale, const std::optional<Tensor>& found_inf) {
  check_lengths(params, {grads}, "_fused_sgd_");
  TORCH_CHECK(momentum == 0.0 || momentum_buffers.size() == params.size(),
              "_fused_sgd_: momentum needs a momentum buffer for every parameter");
  engine::or_optim_head head{};
  head.kind = engine::OR_OPTIM_SGD;
  head.flags = (maximize ? OR_OPTIM_MAXIMIZE : 0u) | (nesterov ? OR_OPTIM_NESTEROV : 0u) |
               (is_first_step ? OR_OPTIM_FIRST_STEP : 0u);
  head.weight_decay = weight_decay;
  head.momentum = momentum;
  head.dampening = dampening;
  if (momentum != 0.0 ? step_lists(head, {params, grads, momentum_buffers}, {}, lr, grad_scale, found_inf)
                      : step_lists(head, {params, grads}, {}, lr, grad_scale, found_inf)) {
    return;
  }
  if (skip_step(found_inf)) {
    return;
  }
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor g = step_grad(grads[i], grad_scale, maximize);
    in_opmath({params[i], momentum != 0.0 ? momentum_buffers[i] : Tensor()}, g,
              [&](const std::vector<Tensor>& t, Tensor g) {
                const Tensor& param = t[0];
                if (weight_decay != 0.0) {
                  g = g.add(param, weight_decay);
                }
                if (momentum != 0.0) {
                  const Tensor& buf = t[1];
                  if (is_first_step) {
                    buf.copy_(g);
                  } else {
                    buf.mul_(momentum).add_(g, 1.0 - dampening);
                  }
                  g = nesterov ? g.add(buf, momentum) : buf;
                }
                if (lr.tensor.defined()) {
                  param.addcmul_(g, lr.tensor.neg());
                } else {
                  param.add_(g, -lr.value);
                }
              });
  }
}

template <class Op, class LrArg>
void sgd_entry(TensorList params, TensorList grads, TensorList momentum_buffers, double weight_decay, double momentum,
               LrArg lr, double dampening, bool nesterov, bool maximize, bool is_first_step,
               const std::optional<Tensor>& grad_scale, const std::optional<Tensor>& found_inf) {
  if (!lists_on_engine({params, grads, momentum_buffers})) {
    return structured::fallback<Op>(params, grads, momentum_buffers, weight_decay, momentum, lr, dampening, nesterov,
                                    maximize, is_first_step, grad_scale, found_inf);
  }
  openreg::count_op(structured::counted_name<Op>(), true);
  sgd_step(params, grads, momentum_buffers, weight_decay, momentum, lr_of(lr), dampening, nesterov, maximize,
           is_first_step, grad_scale, found_inf);
}

// g += wd * param; state_sum += g^2; param -= clr * g / (sqrt(state_sum) +
// eps), clr = lr / (1 + (step - 1) * lr_decay).
void adagrad_step(TensorList params, TensorList grads, TensorList state_sums, TensorList state_steps, const Lr& lr,
                  double lr_decay, double weight_decay, double eps, bool maximize,
                  const std::optional<Tensor>& grad_scale, const std::optional<Tensor>& found_inf) {
  check_lengths(params, {grads, state_sums, state_steps}, "_fused_adagrad_");
  engine::or_optim_head head{};
  head.kind = engine::OR_OPTIM_ADAGRAD;
  head.flags = maximize ? OR_OPTIM_MAXIMIZE : 0u;
  head.lr_decay = lr_decay;
  head.weight_decay = weight_decay;
  head.eps = eps;
  if (step_lists(head, {params, grads, state_sums}, state_steps, lr, grad_scale, found_inf) || skip_step(found_inf)) {
    return;
  }
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor g = step_grad(grads[i], grad_scale, maximize);
    in_opmath({params[i], state_sums[i]}, g, [&](const std::vector<Tensor>& t, Tensor g) {
      const Tensor &param = t[0], &state_sum = t[1];
      if (weight_decay != 0.0) {
        g = g.add(param, weight_decay);
      }
      state_sum.addcmul_(g, g, 1.0);
      const Tensor decay = (state_steps[i].to(at::kDouble) - 1) * lr_decay + 1;
      const Tensor clr = lr.over(decay);
      param.sub_((clr.to(g.scalar_type()) * g).div_(state_sum.sqrt().add_(eps)));
    });
  }
}

template <class Op, class LrArg>
void adagrad_entry(TensorList params, TensorList grads, TensorList state_sums, TensorList state_steps, LrArg lr,
                   double lr_decay, double weight_decay, double eps, bool maximize,
                   const std::optional<Tensor>& grad_scale, const std::optional<Tensor>& found_inf) {
  if (!lists_on_engine({params, grads, state_sums})) {
    return structured::fallback<Op>(params, grads, state_sums, state_steps, lr, lr_decay, weight_decay, eps, maximize,
                                    grad_scale, found_inf);
  }
  openreg::count_op(structured::counted_name<Op>(), true);
  adagrad_step(params, grads, state_sums, state_steps, lr_of(lr), lr_decay, weight_decay, eps, maximize, grad_scale,
               found_inf);
}

} // namespace
} // namespace openreg::optim

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  using namespace openreg::optim;
  namespace ops = at::_ops;
  m.impl("_fused_adam_", TORCH_FN((adam_entry<AdamMode::Original, ops::_fused_adam_, double>)));
  m.impl("_fused_adam_.tensor_lr",
         TORCH_FN((adam_entry<AdamMode::Original, ops::_fused_adam__tensor_lr, const at::Tensor&>)));
  m.impl("_fused_adamw_", TORCH_FN((adam_entry<AdamMode::AdamW, ops::_fused_adamw_, double>)));
  m.impl("_fused_adamw_.tensor_lr",
         TORCH_FN((adam_entry<AdamMode::AdamW, ops::_fused_adamw__tensor_lr, const at::Tensor&>)));
  m.impl("_fused_sgd_", TORCH_FN((sgd_entry<ops::_fused_sgd_, double>)));
  m.impl("_fused_sgd_.tensor_lr", TORCH_FN((sgd_entry<ops::_fused_sgd__tensor_lr, const at::Tensor&>)));
  m.impl("_fused_adagrad_", TORCH_FN((adagrad_entry<ops::_fused_adagrad_, double>)));
  m.impl("_fused_adagrad_.tensor_lr", TORCH_FN((adagrad_entry<ops::_fused_adagrad__tensor_lr, const at::Tensor&>)));
}
