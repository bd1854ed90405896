// Automatic mixed precision for openreg: autocast (the AutocastPrivateUse1
// dispatch key) with CUDA's operator lists and casting policies, and the two
// device ops torch.amp.GradScaler calls.
//
// - Autocast: ATen's autocast_mode.h lists which ops run in the lower
//   precision (matmuls, convolutions, ...), which in float32 (losses,
//   norms, softmax, exp/log, ...), which take float32 through a dtype
//   argument (sum, cumsum, softmax.int, ...) and which promote to their
//   widest input (addcmul, atan2, cat-like ops, ...). CUDA registers those
//   lists on its Autocast key; the same lists go on AutocastPrivateUse1 here,
//   and every other op falls through. The autocast cache (a float32 leaf
//   weight cast once per autocast region) is ATen's and works for any device.
// - GradScaler: `_amp_foreach_non_finite_check_and_unscale_` and
//   `_amp_update_scale_`, with CUDA's semantics, composed of device ops
//   (isfinite, any, maximum, mul, where), so the check and the scale update
//   stay on the device and never synchronize with the host.

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <torch/library.h>

namespace openreg::amp {
namespace {

// Autocast bans binary_cross_entropy in float16, as on CUDA: it is unsafe to
// autocast, and the fused binary_cross_entropy_with_logits is the way.
at::Tensor binary_cross_entropy_banned(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                                       int64_t) {
  TORCH_CHECK(false,
              "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast.\n"
              "Many models use a sigmoid layer right before the binary cross entropy layer.\n"
              "In this case, combine the two layers using torch.nn.functional.binary_cross_entropy_with_logits\n"
              "or torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and BCEWithLogits are\n"
              "safe to autocast.");
}

void check_one_element_float(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.numel() == 1, name, " must be a 1-element tensor.");
  TORCH_CHECK(t.scalar_type() == at::kFloat, name, " must be a float tensor.");
}

// For each tensor: found_inf = 1 if it holds an inf or NaN; then the tensor is
// multiplied by inv_scale in place (CUDA's order: the check sees the unscaled
// values).
void non_finite_check_and_unscale(at::TensorList self, at::Tensor& found_inf, const at::Tensor& inv_scale) {
  check_one_element_float(found_inf, "found_inf");
  check_one_element_float(inv_scale, "inv_scale");
  TORCH_CHECK(inv_scale.device() == found_inf.device(), "found_inf and inv_scale must be on the same device.");
  const auto scale = inv_scale.reshape({});
  for (const auto& t : self) {
    TORCH_CHECK(t.device() == found_inf.device(), "scaled_grads must be on the same device as found_inf, got ",
                t.device(), " and ", found_inf.device());
    TORCH_CHECK(t.is_floating_point(), "scaled_grads must be floating point tensors, got ", t.scalar_type());
    if (t.numel() == 0) {
      continue;
    }
    const auto bad = at::isfinite(t).logical_not().any().to(at::kFloat);
    found_inf.copy_(at::maximum(found_inf, bad));
    t.mul_(scale);
  }
}

// After a step: on overflow (found_inf > 0) the scale backs off and the
// growth tracker resets; otherwise the tracker counts clean steps, and at
// growth_interval of them the scale grows (if the grown scale is finite) and
// the tracker resets.
at::Tensor& update_scale(at::Tensor& current_scale, at::Tensor& growth_tracker, const at::Tensor& found_inf,
                         double growth_factor, double backoff_factor, int64_t growth_interval) {
  check_one_element_float(current_scale, "current_scale");
  check_one_element_float(found_inf, "found_inf");
  TORCH_CHECK(growth_tracker.numel() == 1, "growth_tracker must be a 1-element tensor.");
  TORCH_CHECK(growth_tracker.scalar_type() == at::kInt, "growth_tracker must be an int tensor.");
  TORCH_CHECK(current_scale.device() == growth_tracker.device() && current_scale.device() == found_inf.device(),
              "current_scale, growth_tracker and found_inf must be on the same device.");
  const auto found = found_inf.gt(0);
  const auto successful = growth_tracker + 1;
  const auto grow = found.logical_not().logical_and(successful.eq(growth_interval));
  const auto grown = current_scale * growth_factor;
  const auto new_scale =
      at::where(found, current_scale * backoff_factor,
                at::where(grow.logical_and(at::isfinite(grown)), grown, current_scale));
  const auto new_tracker = at::where(found.logical_or(grow), at::zeros_like(successful), successful);
  current_scale.copy_(new_scale);
  growth_tracker.copy_(new_tracker);
  return current_scale;
}

} // namespace

#define OPENREG_AUTOCAST_LOWER_PRECISION_FP(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define OPENREG_AUTOCAST_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define OPENREG_AUTOCAST_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define OPENREG_AUTOCAST_DIFFERENT_REDISPATCH_SIGNATURE(...) \
  KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE(__VA_ARGS__)
#define OPENREG_AUTOCAST_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)

// ATen's list macros spell the signatures as `Tensor(const Tensor&, ...)`.
using at::IntArrayRef;
using at::Scalar;
using at::ScalarType;
using at::Tensor;

// Ops on no list run in whatever dtype their inputs have.
TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
  AT_FORALL_LOWER_PRECISION_FP(OPENREG_AUTOCAST_LOWER_PRECISION_FP)
  AT_FORALL_FP32(OPENREG_AUTOCAST_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(OPENREG_AUTOCAST_FP32_SET_OPT_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(OPENREG_AUTOCAST_DIFFERENT_REDISPATCH_SIGNATURE)
  AT_FORALL_PROMOTE(OPENREG_AUTOCAST_PROMOTE)
  m.impl(TORCH_SELECTIVE_NAME("aten::binary_cross_entropy"), TORCH_FN(binary_cross_entropy_banned));
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_amp_foreach_non_finite_check_and_unscale_", TORCH_FN(non_finite_check_and_unscale));
  m.impl("_amp_update_scale_", TORCH_FN(update_scale));
}

} // namespace openreg::amp
