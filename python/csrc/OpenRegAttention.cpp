// Scaled dot-product attention through the PrivateUse1 fused-attention path.
//
// torch.nn.functional.scaled_dot_product_attention asks the device's
// `_fused_sdp_choice_stub` which implementation to use. openreg answers
// "overrideable" (SDPBackend.OVERRIDEABLE) for what its kernel below handles
// (4-d inputs with as many key/value heads as query heads, no dropout) and
// "math" otherwise (ATen's composite of matmuls and softmax). The
// overrideable forward returns the log-sum-exp of each row (the op's
// contract) and stores no attention weights: its backward recomputes them
// from the scores, as the flash and memory-efficient kernels do on CUDA.
// Both are written over ATen ops that run on openreg; low-precision inputs
// compute in float32, as the math path does, and results match it within
// its tolerances. The forward's weights and log-sum-exp come from one launch
// of the engine's softmax kernel.

#include <cmath>
#include <limits>
#include <tuple>

#include <ATen/ATen.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/SDPBackend.h>
#include <torch/library.h>

#include "OpenRegEngine.h"

namespace openreg::attention {
namespace {

using at::SDPBackend;

int64_t choose(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
               const std::optional<at::Tensor>& attn_mask, double dropout_p, bool, std::optional<double>,
               bool enable_gqa) {
  const bool handled = query.dim() == 4 && key.dim() == 4 && value.dim() == 4 && dropout_p == 0.0 &&
                       query.size(1) == key.size(1) && key.size(1) == value.size(1) && !enable_gqa &&
                       query.is_floating_point() && !(attn_mask.has_value() && attn_mask->defined() &&
                                                      attn_mask->dim() > 4);
  return static_cast<int64_t>(handled ? SDPBackend::overrideable : SDPBackend::math);
}

// The masked scores (q scale) k^T in float32 or float64, (B, H, L, S), from
// the query already scaled: q has L x E values to scale where the scores
// have L x S (fewer while heads are narrower than there are keys), and the
// backward reuses the scaled query for k's gradient. (ATen's math path
// scales q and k by the square root of the scale each.)
at::Tensor scores(const at::Tensor& q_scaled, const at::Tensor& k, const at::Tensor& bias, bool is_causal) {
  auto attn = at::matmul(q_scaled, k.transpose(-2, -1));
  const auto minus_inf = -std::numeric_limits<double>::infinity();
  if (is_causal) {
    const auto L = q_scaled.size(-2), S = k.size(-2);
    const auto above = at::ones({L, S}, q_scaled.options().dtype(at::kBool)).triu_(1);
    attn.masked_fill_(above, minus_inf);
  }
  if (bias.defined()) {
    if (bias.scalar_type() == at::kBool) {
      attn.masked_fill_(bias.logical_not(), minus_inf);
    } else {
      attn.add_(bias.to(attn.scalar_type()));
    }
  }
  return attn;
}

at::ScalarType opmath(at::ScalarType t) {
  return t == at::kDouble ? at::kDouble : at::kFloat;
}

double scale_of(const at::Tensor& q, std::optional<double> scale) {
  return scale.has_value() ? *scale : 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt, c10::SymInt, at::Tensor, at::Tensor, at::Tensor>
forward(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
        const std::optional<at::Tensor>& attn_bias, double dropout_p, bool is_causal, bool return_debug_mask,
        std::optional<double> scale) {
  TORCH_CHECK(dropout_p == 0.0, "openreg's fused attention has no dropout; scaled_dot_product_attention sends "
                                "dropout to the math path");
  TORCH_CHECK(!return_debug_mask, "openreg's fused attention returns no debug mask");
  const auto compute = opmath(query.scalar_type());
  const auto q = query.to(compute), k = key.to(compute), v = value.to(compute);
  const auto bias = attn_bias.has_value() ? *attn_bias : at::Tensor();
  const auto attn = scores(q * scale_of(query, scale), k, bias, is_causal);
  // The weights and the log-sum-exp the op returns, from one pass of the
  // softmax kernel (the same maximum and sum; logsumexp alone is a second).
  const auto weights = at::empty_like(attn, at::MemoryFormat::Contiguous);
  auto lse_sizes = attn.sizes().vec();
  lse_sizes.back() = 1;
  const auto logsumexp = at::empty(lse_sizes, attn.options());
  engine::launch_softmax(engine::OR_SOFTMAX_SOFTMAX_LOGSUMEXP, weights, attn, logsumexp.expand(attn.sizes()), -1);
  if (attn.size(-1) == 0) {
    logsumexp.fill_(-std::numeric_limits<double>::infinity()); // of no keys, as logsumexp's
  }
  if (bias.defined()) {
    // A row the mask leaves no key: weights 0 rather than NaN, so its output
    // is 0, as the math path's safe softmax gives (its log-sum-exp is -inf).
    weights.masked_fill_(logsumexp == -std::numeric_limits<double>::infinity(), 0.0);
  }
  const auto out = at::matmul(weights, v).to(query.scalar_type());
  const auto none = at::empty({0}, query.options().dtype(at::kLong));
  return {out,  logsumexp.squeeze(-1), none, none, c10::SymInt(query.size(-2)), c10::SymInt(key.size(-2)),
          none, none, at::empty({0}, query.options())};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>
backward(const at::Tensor& grad_out, const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
         const at::Tensor& attn_bias, std::array<bool, 4> grad_input_mask, const at::Tensor& /*out*/,
         const at::Tensor& logsumexp, const at::Tensor&, const at::Tensor&, c10::SymInt, c10::SymInt, double,
         bool is_causal, const at::Tensor&, const at::Tensor&, std::optional<double> scale) {
  const auto compute = opmath(query.scalar_type());
  const auto q = query.to(compute), k = key.to(compute), v = value.to(compute);
  const auto dout = grad_out.to(compute);
  const double s = scale_of(query, scale);
  const auto q_scaled = q * s;
  // The weights again, from the scores (the softmax kernel in one launch; the
  // saved log-sum-exp would take two, a subtraction and an exp).
  const auto weights = at::_softmax(scores(q_scaled, k, attn_bias, is_causal), -1, false);
  if (attn_bias.defined()) { // rows without keys: weights 0, as in the forward
    TORCH_CHECK(logsumexp.sizes() == weights.sizes().slice(0, 3),
                "_scaled_dot_product_fused_attention_overrideable_backward: logsumexp must be the forward's, of "
                "shape ", weights.sizes().slice(0, 3), ", got ", logsumexp.sizes());
    weights.masked_fill_(logsumexp.unsqueeze(-1) == -std::numeric_limits<double>::infinity(), 0.0);
  }
  const auto grad_v = at::matmul(weights.transpose(-2, -1), dout);
  // The scores' gradient is softmax's backward, w (g - sum(g w)) over each
  // row, in one launch (as the math path's autograd computes it); 0 for a
  // row without keys, whose weights are 0.
  const auto grad_scores =
      at::_softmax_backward_data(at::matmul(dout, v.transpose(-2, -1)), weights, -1, compute);
  at::Tensor grad_q, grad_k, grad_bias;
  if (grad_input_mask[0]) {
    grad_q = at::matmul(grad_scores, k).mul_(s).to(query.scalar_type());
  }
  if (grad_input_mask[1]) {
    grad_k = at::matmul(grad_scores.transpose(-2, -1), q_scaled).to(key.scalar_type());
  }
  if (grad_input_mask[3] && attn_bias.defined() && attn_bias.is_floating_point()) {
    grad_bias = at::sum_to(grad_scores, attn_bias.sizes()).to(attn_bias.scalar_type());
  }
  return {grad_q, grad_k, grad_input_mask[2] ? grad_v.to(value.scalar_type()) : at::Tensor(), grad_bias};
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_fused_sdp_choice", TORCH_FN(choose)); // the stub's own answer, for the op called directly
  m.impl("_scaled_dot_product_fused_attention_overrideable", TORCH_FN(forward));
  m.impl("_scaled_dot_product_fused_attention_overrideable_backward", TORCH_FN(backward));
}

} // namespace openreg::attention

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &openreg::attention::choose)
} // namespace at::native
