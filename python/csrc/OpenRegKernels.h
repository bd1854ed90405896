// Operator implementations for openreg tensors (their registration is in
// OpenRegOps.cpp). Three kinds:
//
// - Native kernels: what a backend must implement itself. Tensor creation on
//   the device allocator; views, `set_` and `resize_`, which must alias the
//   device storage (a CPU fallback would return copies); and copies, which
//   move bytes with the runtime's copy calls.
// - Device kernels are not here: each op family runs on the device engine
//   from its own file (OpenRegElementwise.cpp, over OpenRegEngine.h).
// - The CPU fallback, for every other op: device to host, the CPU kernel,
//   host to device (at::native::cpu_fallback, which handles in-place ops,
//   out=, several outputs), with random ops drawing from the device's
//   generator.
//
// Names end in `_kernel` so that no unqualified call can find an at::
// function of the same name through argument-dependent lookup.
#pragma once

#include <functional>
#include <optional>
#include <tuple>

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/Scalar.h>
#include <c10/core/Storage.h>
#include <c10/core/Stream.h>

namespace openreg {

// Keeps OpenRegOps.cpp (all operator registrations) linked.
void register_ops();

namespace kernels {

using at::Tensor;

// ---- the CPU fallback (boxed; for every op without a kernel here) ----
// Counts the op as a fallback run, hands random ops the device generator's
// CPU engine, and runs at::native::cpu_fallback. View ops (immutable alias
// returns) without a native kernel raise instead of silently returning copies.
void cpu_fallback_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// ---- native kernels: creation ----
Tensor empty_memory_format_kernel(c10::SymIntArrayRef size, std::optional<at::ScalarType> dtype,
                                  std::optional<at::Layout> layout, std::optional<at::Device> device,
                                  std::optional<bool> pin_memory, std::optional<at::MemoryFormat> memory_format);
Tensor empty_strided_kernel(c10::SymIntArrayRef size, c10::SymIntArrayRef stride, std::optional<at::ScalarType> dtype,
                            std::optional<at::Layout> layout, std::optional<at::Device> device,
                            std::optional<bool> pin_memory);

// ---- native kernels: views (metadata only; they share the storage) ----
Tensor as_strided_kernel(const Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride,
                         std::optional<c10::SymInt> storage_offset);
Tensor view_kernel(const Tensor& self, c10::SymIntArrayRef size);
Tensor reshape_alias_kernel(const Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride);
Tensor unfold_kernel(const Tensor& self, int64_t dimension, int64_t size, int64_t step);
Tensor view_as_real_kernel(const Tensor& self);
Tensor view_as_complex_kernel(const Tensor& self);
bool is_set_to_kernel(const Tensor& self, const Tensor& tensor);
// Whether `from`'s TensorImpl can be shallow-copied into `self`'s (what
// `param.data = t` needs, so nn.Module.to keeps its Parameter objects).
bool has_compatible_shallow_copy_type_kernel(const Tensor& self, const Tensor& from);

// ---- native kernels: storage ----
// Grows the storage (new block, old bytes copied on the device) when needed.
const Tensor& resize_kernel(const Tensor& self, c10::SymIntArrayRef size,
                            std::optional<at::MemoryFormat> memory_format);
Tensor& set_storage_kernel(Tensor& self, c10::Storage source);
Tensor& set_storage_offset_kernel(Tensor& self, c10::Storage source, c10::SymInt storage_offset,
                                  c10::SymIntArrayRef size, c10::SymIntArrayRef stride);
Tensor& set_tensor_kernel(Tensor& self, const Tensor& source);
Tensor& set_empty_kernel(Tensor& self);
void record_stream_kernel(Tensor& self, c10::Stream stream);

// ---- native kernels: copies ----
// `self` is the source. Any strides, dtypes, broadcasting and conj/neg bits;
// host to device, device to host, device to device (same or another device).
// Same-layout copies are one runtime copy; the rest stage through host memory.
// On the current stream of the device(s) involved; non_blocking is honoured
// for pinned host memory and device-to-device copies, other copies block.
Tensor copy_from_kernel(const Tensor& self, const Tensor& dst, bool non_blocking);
Tensor copy_from_and_resize_kernel(const Tensor& self, const Tensor& dst);
// Blocking: reports errors raised by earlier work on the stream.
at::Scalar local_scalar_dense_kernel(const Tensor& self);

// ---- decompositions (OpenRegDecompositions.cpp): kernels written with
// other aten ops, for ops whose CPU kernel does not exist or does not fit ----
// CPU's native_dropout draws from the CPU's default generator rather than
// from an argument: decomposed into bernoulli_ (which the fallback feeds from
// the device generator) and multiplications, as CPU's dropout computes it.
std::tuple<Tensor, Tensor> native_dropout_kernel(const Tensor& input, double p, std::optional<bool> train);
// The fused LSTM and GRU cells that nn.LSTM / nn.GRU use on accelerators
// have CUDA kernels only in torch 2.15: the same math, elementwise.
std::tuple<Tensor, Tensor, Tensor> fused_lstm_cell_kernel(const Tensor& input_gates, const Tensor& hidden_gates,
                                                          const Tensor& cx, const std::optional<Tensor>& input_bias,
                                                          const std::optional<Tensor>& hidden_bias);
std::tuple<Tensor, Tensor, Tensor> fused_lstm_cell_backward_kernel(const std::optional<Tensor>& grad_hy,
                                                                   const std::optional<Tensor>& grad_cy,
                                                                   const Tensor& cx, const Tensor& cy,
                                                                   const Tensor& workspace, bool has_bias);
std::tuple<Tensor, Tensor> fused_gru_cell_kernel(const Tensor& input_gates, const Tensor& hidden_gates,
                                                 const Tensor& hx, const std::optional<Tensor>& input_bias,
                                                 const std::optional<Tensor>& hidden_bias);
std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> fused_gru_cell_backward_kernel(const Tensor& grad_hy,
                                                                                  const Tensor& workspace,
                                                                                  bool has_bias);

} // namespace kernels
} // namespace openreg
