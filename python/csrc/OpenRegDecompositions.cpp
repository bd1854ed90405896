// Decompositions (see OpenRegKernels.h): kernels written with other aten
// ops, each of which dispatches (and is counted) on its own. Elementwise math
// only; no device addresses are touched here.

#include "OpenRegKernels.h"

#include <ATen/ATen.h>

namespace openreg::kernels {
namespace {

// `gates` is (N, k * H): its k chunks of H columns.
std::vector<Tensor> gate_chunks(const Tensor& gates, int64_t k) {
  return gates.chunk(k, 1);
}

bool defined(const std::optional<Tensor>& t) {
  return t.has_value() && t->defined();
}

} // namespace

std::tuple<Tensor, Tensor> native_dropout_kernel(const Tensor& input, double p, std::optional<bool> train) {
  if (input.numel() == 0) {
    return {input, at::empty_like(input)};
  }
  if (train.has_value() && !*train) {
    return {input.clone(), at::ones_like(input, input.options().dtype(at::kBool))};
  }
  const double keep = 1.0 - p;
  const double scale = keep == 0.0 ? 0.0 : 1.0 / keep;
  Tensor mask = at::empty_like(input, at::MemoryFormat::Contiguous).bernoulli_(keep);
  Tensor output = input.mul(mask).mul_(scale);
  return {output, mask.to(at::kBool)};
}

// gates = input_gates + hidden_gates (+ both biases), chunks (i, f, g, o):
// i, f, o = sigmoid; g = tanh; cy = f * cx + i * g; hy = o * tanh(cy);
// workspace = the activated gates, (N, 4H), for the backward.
std::tuple<Tensor, Tensor, Tensor> fused_lstm_cell_kernel(const Tensor& input_gates, const Tensor& hidden_gates,
                                                          const Tensor& cx, const std::optional<Tensor>& input_bias,
                                                          const std::optional<Tensor>& hidden_bias) {
  Tensor gates = input_gates + hidden_gates;
  if (defined(input_bias)) {
    gates = gates + *input_bias + *hidden_bias;
  }
  const auto chunks = gate_chunks(gates, 4);
  const Tensor i = chunks[0].sigmoid();
  const Tensor f = chunks[1].sigmoid();
  const Tensor g = chunks[2].tanh();
  const Tensor o = chunks[3].sigmoid();
  Tensor cy = f * cx + i * g;
  Tensor hy = o * cy.tanh();
  return {hy, cy, at::cat({i, f, g, o}, 1)};
}

// The LSTM cell's gradient with respect to the gates, cx and the bias.
std::tuple<Tensor, Tensor, Tensor> fused_lstm_cell_backward_kernel(const std::optional<Tensor>& grad_hy,
                                                                   const std::optional<Tensor>& grad_cy,
                                                                   const Tensor& cx, const Tensor& cy,
                                                                   const Tensor& workspace, bool has_bias) {
  const auto chunks = gate_chunks(workspace, 4);
  const Tensor& i = chunks[0];
  const Tensor& f = chunks[1];
  const Tensor& g = chunks[2];
  const Tensor& o = chunks[3];
  const Tensor go = defined(grad_hy) ? *grad_hy : at::zeros_like(cx);
  const Tensor gc = defined(grad_cy) ? *grad_cy : at::zeros_like(cx);
  const Tensor tanh_cy = cy.tanh();
  const Tensor grad_c = go * o * (1 - tanh_cy * tanh_cy) + gc;
  const Tensor grad_i = grad_c * g * (1 - i) * i;
  const Tensor grad_f = grad_c * cx * (1 - f) * f;
  const Tensor grad_g = grad_c * i * (1 - g * g);
  const Tensor grad_o = go * tanh_cy * (1 - o) * o;
  Tensor grad_gates = at::cat({grad_i, grad_f, grad_g, grad_o}, 1);
  Tensor grad_bias = has_bias ? grad_gates.sum(0) : Tensor();
  return {grad_gates, grad_c * f, grad_bias};
}

// Chunks (r, z, n): r, z = sigmoid(input + hidden + biases);
// n = tanh(input_n + b_in + r * (hidden_n + b_hn)); hy = n + z * (hx - n);
// workspace = (r, z, n, hx, hidden_n + b_hn), (N, 5H), for the backward.
std::tuple<Tensor, Tensor> fused_gru_cell_kernel(const Tensor& input_gates, const Tensor& hidden_gates,
                                                 const Tensor& hx, const std::optional<Tensor>& input_bias,
                                                 const std::optional<Tensor>& hidden_bias) {
  Tensor in_gates = input_gates;
  Tensor hid_gates = hidden_gates;
  if (defined(input_bias)) {
    in_gates = in_gates + *input_bias;
    hid_gates = hid_gates + *hidden_bias;
  }
  const auto in = gate_chunks(in_gates, 3);
  const auto hid = gate_chunks(hid_gates, 3);
  const Tensor r = (in[0] + hid[0]).sigmoid();
  const Tensor z = (in[1] + hid[1]).sigmoid();
  const Tensor n = (in[2] + r * hid[2]).tanh();
  Tensor hy = n + z * (hx - n);
  return {hy, at::cat({r, z, n, hx, hid[2]}, 1)};
}

// The GRU cell's gradient with respect to both gate inputs, hx and the biases.
std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> fused_gru_cell_backward_kernel(const Tensor& grad_hy,
                                                                                  const Tensor& workspace,
                                                                                  bool has_bias) {
  const auto chunks = gate_chunks(workspace, 5);
  const Tensor& r = chunks[0];
  const Tensor& z = chunks[1];
  const Tensor& n = chunks[2];
  const Tensor& hx = chunks[3];
  const Tensor& hn = chunks[4];
  const Tensor grad_z = grad_hy * (hx - n) * (1 - z) * z;
  const Tensor grad_hx = grad_hy * z;
  const Tensor grad_n = grad_hy * (1 - z) * (1 - n * n);
  const Tensor grad_hn = grad_n * r;
  const Tensor grad_r = grad_n * hn * (1 - r) * r;
  Tensor grad_input_gates = at::cat({grad_r, grad_z, grad_n}, 1);
  Tensor grad_hidden_gates = at::cat({grad_r, grad_z, grad_hn}, 1);
  Tensor grad_input_bias = has_bias ? grad_input_gates.sum(0) : Tensor();
  Tensor grad_hidden_bias = has_bias ? grad_hidden_gates.sum(0) : Tensor();
  return {grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias, grad_hidden_bias};
}

} // namespace openreg::kernels
