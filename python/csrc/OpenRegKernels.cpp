// Operator implementations for openreg tensors (see OpenRegKernels.h).
//
// Every device address here comes from a tensor's storage and is only handed
// to runtime copies and launches; it is never dereferenced on the host (see
// host/src/lib.rs, "Device addresses").

#include "OpenRegKernels.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <typeinfo>
#include <initializer_list>
#include <limits>

#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/is_set_to_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>

#include "OpenRegAllocator.h"
#include "OpenRegBridge.h"
#include "OpenRegEngine.h"
#include "OpenRegGenerator.h"
#include "OpenRegGuard.h"
#include "OpenRegHostAllocator.h"
#include "torch-openreg/src/bridge.rs.h"

namespace openreg::kernels {
namespace {

constexpr c10::DispatchKeySet kOpenRegKeys(c10::DispatchKey::PrivateUse1);

bool is_openreg(const Tensor& t) {
  return t.device().type() == c10::DeviceType::PrivateUse1;
}

c10::DeviceIndex device_index_of(const Tensor& t) {
  return t.device().index();
}

int64_t stream_of(c10::DeviceIndex device) {
  return current_stream(device).id();
}

// The device address of a tensor's first element (its lowest address: strides
// are never negative).
uint64_t address_of(const Tensor& t) {
  return reinterpret_cast<uint64_t>(t.storage().data()) + static_cast<uint64_t>(t.storage_offset()) * t.itemsize();
}

// The same, for a tensor about to be written (materializes a copy-on-write storage).
uint64_t mutable_address_of(const Tensor& t) {
  return reinterpret_cast<uint64_t>(t.storage().mutable_data()) +
      static_cast<uint64_t>(t.storage_offset()) * t.itemsize();
}

// Elements from a tensor's first to its last element, inclusive: the part of
// its storage its elements lie in.
int64_t span_elements(const Tensor& t) {
  if (t.numel() == 0) {
    return 0;
  }
  int64_t span = 1;
  for (int64_t d = 0; d < t.dim(); ++d) {
    span += (t.size(d) - 1) * t.stride(d);
  }
  return span;
}

bool same_layout(const Tensor& a, const Tensor& b) {
  return a.scalar_type() == b.scalar_type() && a.sizes().equals(b.sizes()) && a.strides().equals(b.strides()) &&
      a.is_conj() == b.is_conj() && a.is_neg() == b.is_neg() && a.is_non_overlapping_and_dense();
}

// ---- conversions on the device ----

// Whether the engine can convert between the two tensors' dtypes (and no
// conjugate or negative bit needs resolving).
bool device_convertible(const Tensor& src, const Tensor& dst) {
  return engine::supports_dtype(src.scalar_type()) && engine::supports_dtype(dst.scalar_type()) && !src.is_neg() &&
      !dst.is_neg() && !src.is_conj() && !dst.is_conj();
}

// dst = src on dst's device, src on the same device: any dtypes, any strides,
// src broadcast to dst's shape. One engine launch on the current stream.
void convert_on_device(const Tensor& src, const Tensor& dst) {
  auto iter = at::TensorIteratorConfig()
                  .add_output(dst)
                  .add_const_input(src)
                  .resize_outputs(false)
                  .check_all_same_dtype(false)
                  .build();
  // Float to integer converts in the float type (as CPU: through int32 for
  // narrow types); everything else in the destination's type.
  const bool float_to_int = at::isFloatingType(src.scalar_type()) && !at::isFloatingType(dst.scalar_type());
  engine::launch_elementwise(iter, engine::OR_OP_COPY, {},
                             engine::compute_of(float_to_int ? src.scalar_type() : dst.scalar_type()));
}

// A dense tensor on `device` with dst's sizes and dtype, and dst's strides
// when dst is dense (so that one memcpy moves it into dst).
Tensor dense_like(const Tensor& dst, c10::Device device) {
  const auto options = dst.options().device(device);
  if (dst.is_non_overlapping_and_dense()) {
    return at::empty_strided(dst.sizes(), dst.strides(), options);
  }
  return at::empty(dst.sizes(), options);
}

// ---- staging through host memory ----

// A host copy of the storage span under a device tensor, viewed with the
// tensor's sizes, strides and conj/neg bits. Blocks until the bytes are here
// (after the work queued before on the device's current stream).
Tensor read_to_host(const Tensor& src) {
  const int64_t span = span_elements(src);
  Tensor buffer = at::empty({span}, src.options().device(at::kCPU));
  if (span > 0) {
    const auto device = device_index_of(src);
    OPENREG_CHECK(openreg::copy_d2h(device, stream_of(device), reinterpret_cast<size_t>(buffer.mutable_data_ptr()),
                                    address_of(src), static_cast<uint64_t>(span) * src.itemsize(), false));
  }
  Tensor view = buffer.as_strided(src.sizes(), src.strides(), 0);
  view._set_conj(src.is_conj());
  view._set_neg(src.is_neg());
  return view;
}

// Tracks a pinned host buffer used by a queued async copy, so that freeing it
// waits for the copy. If tracking fails, waits for the copy here before the
// error propagates: otherwise the buffer could be freed while the executor
// still reads or writes it.
void record_host_use_or_wait(const c10::Storage& storage, const c10::Stream& stream) {
  try {
    record_host_use(storage, stream);
  } catch (...) {
    try {
      openreg::synchronize_stream(stream.device_index(), stream.id());
    } catch (const ::rust::Error&) {
      // The stream's own error is reported by its next synchronizing call.
    }
    throw;
  }
}

// Writes host tensor `src` (any dtype and strides, broadcastable) into device
// tensor `dst`. A same-layout source is copied directly, asynchronously when
// non_blocking and the source is pinned; otherwise the values are converted
// on the host first and the copy blocks (the staging buffer is temporary).
void write_from_host(const Tensor& src, const Tensor& dst, bool non_blocking) {
  if (dst.numel() == 0) {
    return;
  }
  const auto device = device_index_of(dst);
  const auto stream = current_stream(device);
  if (same_layout(src, dst) && dst.is_non_overlapping_and_dense()) {
    // The elements fill their span exactly: one copy of numel * itemsize bytes.
    const uint64_t nbytes = static_cast<uint64_t>(dst.numel()) * dst.itemsize();
    const bool async = non_blocking && is_pinned_storage(src.storage());
    OPENREG_CHECK(openreg::copy_h2d(device, stream.id(), mutable_address_of(dst),
                                    reinterpret_cast<size_t>(src.const_data_ptr()), nbytes, async));
    if (async) {
      record_host_use_or_wait(src.storage(), stream);
    }
    return;
  }
  if (device_convertible(src, dst)) {
    // The host's bytes as they are (packed), then dtype, strides and
    // broadcasting on the device.
    const Tensor packed = src.contiguous();
    Tensor landing = at::empty(packed.sizes(), packed.options().device(dst.device()));
    write_from_host(packed, landing, false);
    convert_on_device(landing, dst);
    return;
  }
  if (dst.is_non_overlapping_and_dense()) {
    Tensor staged = at::empty_strided(dst.sizes(), dst.strides(), dst.options().device(at::kCPU));
    // With dst's bits, copy_ stores the bytes dst's storage must hold.
    staged._set_conj(dst.is_conj());
    staged._set_neg(dst.is_neg());
    staged.copy_(src);
    const uint64_t nbytes = static_cast<uint64_t>(dst.numel()) * dst.itemsize();
    OPENREG_CHECK(openreg::copy_h2d(device, stream.id(), mutable_address_of(dst),
                                    reinterpret_cast<size_t>(staged.const_data_ptr()), nbytes, false));
    return;
  }
  // Complex or conj/neg tensors with gaps between elements: read the span,
  // write the elements into it on the host, write the span back.
  Tensor view = read_to_host(dst);
  view.copy_(src);
  const uint64_t span_bytes = static_cast<uint64_t>(span_elements(dst)) * dst.itemsize();
  OPENREG_CHECK(openreg::copy_h2d(device, stream.id(), mutable_address_of(dst),
                                  reinterpret_cast<size_t>(view.storage().data()), span_bytes, false));
}

// Reads device tensor `src` into host tensor `dst` (any dtype and strides;
// src broadcastable). A same-layout destination is copied into directly,
// asynchronously when non_blocking and the destination is pinned; otherwise
// the copy blocks and the host converts.
void read_from_device(const Tensor& src, const Tensor& dst, bool non_blocking) {
  if (dst.numel() == 0) {
    return;
  }
  if (same_layout(src, dst)) {
    const auto device = device_index_of(src);
    const auto stream = current_stream(device);
    const bool async = non_blocking && is_pinned_storage(dst.storage());
    OPENREG_CHECK(openreg::copy_d2h(device, stream.id(), reinterpret_cast<size_t>(dst.mutable_data_ptr()),
                                    address_of(src), static_cast<uint64_t>(dst.numel()) * dst.itemsize(), async));
    if (async) {
      record_host_use_or_wait(dst.storage(), stream);
    }
    return;
  }
  if (device_convertible(src, dst)) {
    // Dtype, strides and broadcasting on the device, then one packed copy.
    Tensor staged = dense_like(dst, src.device());
    convert_on_device(src, staged);
    if (same_layout(staged, dst)) {
      read_from_device(staged, dst, false);
    } else {
      Tensor host = at::empty_strided(staged.sizes(), staged.strides(), staged.options().device(at::kCPU));
      read_from_device(staged, host, false);
      dst.copy_(host);
    }
    return;
  }
  dst.copy_(read_to_host(src));
}

// Device to device. Same layout: one runtime copy, queued on dst's device's
// current stream and ordered against src's device's current stream with
// events in both directions (the copy starts after the work that produced
// src, and src's stream does not reuse src before the copy has read it), as
// CUDA orders peer copies. Never blocks the host. Other layouts stage
// through host memory and block.
void copy_between_devices(const Tensor& src, const Tensor& dst) {
  if (dst.numel() == 0) {
    return;
  }
  if (!same_layout(src, dst)) {
    if (!device_convertible(src, dst)) {
      write_from_host(read_to_host(src), dst, false);
    } else if (src.device() == dst.device()) {
      convert_on_device(src, dst);
    } else {
      // Convert on the source device into dst's layout, move the bytes, and
      // scatter on dst's device if dst has gaps: no host in between.
      Tensor staged = dense_like(dst, src.device());
      convert_on_device(src, staged);
      if (same_layout(staged, dst)) {
        copy_between_devices(staged, dst);
      } else {
        Tensor landing = at::empty_strided(staged.sizes(), staged.strides(), staged.options().device(dst.device()));
        copy_between_devices(staged, landing);
        convert_on_device(landing, dst);
      }
    }
    return;
  }
  const auto src_device = device_index_of(src);
  const auto dst_device = device_index_of(dst);
  const auto dst_stream = stream_of(dst_device);
  const auto order = [](c10::DeviceIndex from_device, int64_t from_stream, c10::DeviceIndex to_device,
                        int64_t to_stream) {
    const uint64_t event = openreg::create_event(false);
    TORCH_CHECK(event != 0, "openreg: cannot create an event: the runtime is unavailable");
    try {
      openreg::record_event(event, from_device, from_stream);
      openreg::wait_event(event, to_device, to_stream);
      openreg::destroy_event(event); // a stream already waiting still waits
    } catch (const ::rust::Error& e) {
      try {
        openreg::destroy_event(event);
      } catch (const ::rust::Error&) {
      }
      raise_runtime_error(e);
    }
  };
  const bool peer = src_device != dst_device;
  const auto src_stream = peer ? stream_of(src_device) : dst_stream;
  if (peer) {
    order(src_device, src_stream, dst_device, dst_stream);
  }
  // Each address is checked against the device its tensor names, so a tensor
  // whose pointer lies in another device's memory is refused, not followed.
  OPENREG_CHECK(openreg::copy_d2d(dst_device, dst_stream, dst_device, mutable_address_of(dst), src_device,
                                  address_of(src), static_cast<uint64_t>(dst.numel()) * dst.itemsize()));
  if (peer) {
    order(dst_device, dst_stream, src_device, src_stream);
  }
}

// ---- storage size ----

// Grows the storage of `self` to hold its elements, if it is too small.
void ensure_storage_bytes(c10::TensorImpl* self) {
  if (self->numel() == 0) {
    return; // a tensor with no elements needs no bytes (as CPU's resize_)
  }
  const size_t needed = at::detail::computeStorageNbytes(self->sizes(), self->strides(), self->dtype().itemsize(),
                                                         self->storage_offset());
  const c10::Storage& storage = self->unsafe_storage();
  TORCH_CHECK(storage, "openreg: tensor has no storage to resize");
  if (needed > storage.nbytes()) {
    resize_storage_bytes(storage, needed);
  }
}

Tensor& set_storage_impl(Tensor& self, c10::Storage source, int64_t storage_offset, at::IntArrayRef size,
                         at::OptionalIntArrayRef stride) {
  const at::IntArrayRef stride_or_empty = stride.has_value() ? *stride : at::IntArrayRef();
  at::native::checkSetStorage(self, std::move(source), storage_offset, size, stride_or_empty);
  self.unsafeGetTensorImpl()->set_storage_offset(storage_offset);
  at::native::resize_impl_cpu_(self.unsafeGetTensorImpl(), size, stride, /*resize_storage=*/false);
  ensure_storage_bytes(self.unsafeGetTensorImpl());
  return self;
}

// ---- the fallback's generators ----

bool is_generator_argument(const c10::Argument& argument) {
  c10::TypePtr type = argument.type();
  if (const auto* optional = type->castRaw<c10::OptionalType>()) {
    type = optional->getElementType();
  }
  return type->kind() == c10::TypeKind::GeneratorType;
}

// The device of the first openreg tensor among the op's arguments.
std::optional<c10::DeviceIndex> openreg_device_among(const torch::jit::Stack& stack, size_t begin) {
  for (size_t i = begin; i < stack.size(); ++i) {
    const auto& value = stack[i];
    if (value.isTensor() && value.toTensor().defined() && is_openreg(value.toTensor())) {
      return device_index_of(value.toTensor());
    }
    if (value.isTensorList()) {
      for (const Tensor& t : value.toTensorVector()) {
        if (t.defined() && is_openreg(t)) {
          return device_index_of(t);
        }
      }
    }
  }
  return std::nullopt;
}

// Puts the CPU engine of the right openreg generator in place of every
// Generator? argument, so the CPU kernel draws from the device generator.
void use_device_generators(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& arguments = op.schema().arguments();
  const size_t begin = stack->size() - arguments.size();
  for (size_t i = 0; i < arguments.size(); ++i) {
    if (!is_generator_argument(arguments[i])) {
      continue;
    }
    c10::IValue& value = (*stack)[begin + i];
    std::optional<at::Generator> generator;
    if (value.isGenerator()) {
      generator = value.toGenerator();
    }
    const auto device = openreg_device_among(*stack, begin).value_or(current_device_index());
    value = c10::IValue(host_generator_for(generator, device));
  }
}

// Where at::native::cpu_fallback puts the op's new outputs when no Device
// argument is given: on the device of the first tensor argument, else of the
// first tensor in a list (nothing: there are no tensors).
std::optional<c10::Device> first_tensor_device(const torch::jit::Stack& stack, size_t begin) {
  for (size_t i = begin; i < stack.size(); ++i) {
    if (stack[i].isTensor() && stack[i].toTensor().defined()) {
      return stack[i].toTensor().device();
    }
  }
  for (size_t i = begin; i < stack.size(); ++i) {
    if (stack[i].isTensorList()) {
      for (const Tensor& t : stack[i].toTensorVector()) {
        return t.device();
      }
    }
  }
  return std::nullopt;
}

// cpu_fallback leaves new outputs on the CPU when the first tensor argument is
// a CPU tensor (`torch.tensor(2.) * x`); on CUDA they follow the device
// tensor, so move them there.
void move_new_outputs(const c10::OperatorHandle& op, torch::jit::Stack* stack, c10::Device device) {
  const auto& returns = op.schema().returns();
  const size_t begin = stack->size() - returns.size();
  for (size_t i = 0; i < returns.size(); ++i) {
    if (returns[i].alias_info() != nullptr) {
      continue; // an input (in-place or out=), already where it belongs
    }
    c10::IValue& value = (*stack)[begin + i];
    if (value.isTensor() && value.toTensor().defined() && value.toTensor().is_cpu()) {
      value = c10::IValue(value.toTensor().to(device));
    } else if (value.isTensorList()) {
      auto tensors = value.toTensorVector();
      for (Tensor& t : tensors) {
        if (t.defined() && t.is_cpu()) {
          t = t.to(device);
        }
      }
      value = c10::IValue(c10::List<Tensor>(tensors));
    }
  }
}

// As on CUDA: an op's tensors must all be on one device ("Expected all
// tensors to be on the same device"). Like CUDA, this allows CPU tensors with
// no dimensions (scalars) and the CPU index lists of indexing ops (Tensor?[]
// arguments: x[cpu_indices]). The _foreach_ and _fused_ ops take lists that
// may span devices (CUDA runs those tensor by tensor), so they are not checked.
void check_one_device(const c10::OperatorHandle& op, const torch::jit::Stack& stack, size_t begin) {
  const auto& name = op.schema().name();
  if (name.rfind("aten::_foreach_", 0) == 0 || name.rfind("aten::_fused_", 0) == 0) {
    return;
  }
  std::optional<c10::Device> common;
  const auto visit = [&](const Tensor& t) {
    if (!t.defined() || (t.is_cpu() && t.dim() == 0)) {
      return;
    }
    if (!common) {
      common = t.device();
      return;
    }
    TORCH_CHECK(t.device() == *common, "Expected all tensors to be on the same device, but found at least two devices, ",
                *common, " and ", t.device(), "! (when checking the arguments of ", op.schema().operator_name(), ")");
  };
  for (size_t i = begin; i < stack.size(); ++i) {
    if (stack[i].isTensor()) {
      visit(stack[i].toTensor());
    } else if (stack[i].isTensorList()) {
      for (const Tensor& t : stack[i].toTensorVector()) {
        visit(t);
      }
    }
  }
}

} // namespace

// ---- the CPU fallback ----

void cpu_fallback_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const std::string name = c10::toString(op.schema().operator_name());
  // The fallback policy (OPENREG_FALLBACK, torch.openreg.set_fallback_policy),
  // decided before any data moves.
  switch (OPENREG_CHECK(openreg::fallback_decision(name))) {
    case 0:
      break;
    case 1:
      TORCH_WARN("openreg: ", name, " has no device kernel and runs through the CPU fallback (its tensors are copied ",
                 "to the host, computed there and copied back); warned once per op under the 'warn' fallback policy");
      break;
    default:
      TORCH_CHECK(false, "openreg: ", name, " has no device kernel, and the fallback policy is 'error' ",
                  "(OPENREG_FALLBACK / torch.openreg.set_fallback_policy): running it on the CPU would move its ",
                  "tensors off the device");
  }
  openreg::count_op(name, false);
  const size_t begin = stack->size() - op.schema().arguments().size();
  check_one_device(op, *stack, begin);
  use_device_generators(op, stack);
  const auto openreg_device = openreg_device_among(*stack, begin);
  const auto output_device = first_tensor_device(*stack, begin);
  const bool device_given =
      std::any_of(stack->begin() + begin, stack->end(), [](const c10::IValue& v) { return v.isDevice(); });
  at::native::cpu_fallback(op, stack, /*error_on_views=*/true);
  if (openreg_device && output_device && output_device->is_cpu() && !device_given) {
    move_new_outputs(op, stack, c10::Device(c10::DeviceType::PrivateUse1, *openreg_device));
  }
}

// ---- creation ----

Tensor empty_memory_format_kernel(c10::SymIntArrayRef size, std::optional<at::ScalarType> dtype,
                                  std::optional<at::Layout> layout, std::optional<at::Device> device,
                                  std::optional<bool> pin_memory, std::optional<at::MemoryFormat> memory_format) {
  const auto target = c10::device_or_default(device);
  TORCH_CHECK(target.type() == c10::DeviceType::PrivateUse1, "openreg: empty on ", target);
  TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided, "openreg supports strided tensors only, not ",
              c10::layout_or_default(layout));
  TORCH_CHECK(!c10::pinned_memory_or_default(pin_memory), "only CPU tensors can be pinned");
  const c10::DeviceGuard guard(target); // the allocator allocates on the current device
  return at::detail::empty_generic(C10_AS_INTARRAYREF_SLOW(size), device_allocator(), kOpenRegKeys,
                                   c10::dtype_or_default(dtype), memory_format);
}

Tensor empty_strided_kernel(c10::SymIntArrayRef size, c10::SymIntArrayRef stride, std::optional<at::ScalarType> dtype,
                            std::optional<at::Layout> layout, std::optional<at::Device> device,
                            std::optional<bool> pin_memory) {
  const auto target = c10::device_or_default(device);
  TORCH_CHECK(target.type() == c10::DeviceType::PrivateUse1, "openreg: empty_strided on ", target);
  TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided, "openreg supports strided tensors only, not ",
              c10::layout_or_default(layout));
  TORCH_CHECK(!c10::pinned_memory_or_default(pin_memory), "only CPU tensors can be pinned");
  const c10::DeviceGuard guard(target);
  return at::detail::empty_strided_generic(C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride),
                                           device_allocator(), kOpenRegKeys, c10::dtype_or_default(dtype));
}

// ---- views: ATen's own metadata-only implementations, which never touch
// the data, so they are correct for device storages ----

Tensor as_strided_kernel(const Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride,
                         std::optional<c10::SymInt> storage_offset) {
  std::optional<int64_t> offset;
  if (storage_offset.has_value()) {
    offset = storage_offset->guard_int(__FILE__, __LINE__);
  }
  return at::native::as_strided_tensorimpl(self, C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride),
                                           offset);
}

Tensor view_kernel(const Tensor& self, c10::SymIntArrayRef size) {
  return at::native::view(self, C10_AS_INTARRAYREF_SLOW(size));
}

Tensor reshape_alias_kernel(const Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride) {
  return at::native::_reshape_alias(self, C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride));
}

Tensor unfold_kernel(const Tensor& self, int64_t dimension, int64_t size, int64_t step) {
  return at::native::unfold(self, dimension, size, step);
}

Tensor view_as_real_kernel(const Tensor& self) {
  return at::native::view_as_real(self);
}

Tensor view_as_complex_kernel(const Tensor& self) {
  return at::native::view_as_complex(self);
}

bool is_set_to_kernel(const Tensor& self, const Tensor& tensor) {
  return at::native::is_set_to(self, tensor);
}

// c10's default answers only for its own dense backends (CPU, CUDA, ...), so
// `module.to("openreg")` would make new Parameter objects and an optimizer
// built before the move would train the old ones. Dense CPU and openreg
// tensors are plain TensorImpls: either can take the other's data, as CPU
// and CUDA tensors can.
bool has_compatible_shallow_copy_type_kernel(const Tensor& self, const Tensor& from) {
  const auto plain_dense = [](const Tensor& t) {
    const c10::DeviceType type = t.device().type();
    return t.layout() == at::kStrided && !t.is_quantized() &&
           (type == c10::DeviceType::CPU || type == c10::DeviceType::PrivateUse1) &&
           typeid(*t.unsafeGetTensorImpl()) == typeid(c10::TensorImpl);
  };
  return plain_dense(self) && plain_dense(from);
}

// ---- storage ----

const Tensor& resize_kernel(const Tensor& self, c10::SymIntArrayRef size,
                            std::optional<at::MemoryFormat> memory_format) {
  c10::TensorImpl* impl = self.unsafeGetTensorImpl();
  at::native::resize_impl_cpu_(impl, C10_AS_INTARRAYREF_SLOW(size), /*stride=*/std::nullopt,
                               /*resize_storage=*/false);
  ensure_storage_bytes(impl);
  if (memory_format.has_value()) {
    TORCH_CHECK(*memory_format != at::MemoryFormat::Preserve, "Unsupported memory format ", *memory_format);
    impl->empty_tensor_restride(*memory_format);
  }
  // Unlike CPU, new bytes are not filled under
  // torch.utils.deterministic.fill_uninitialized_memory.
  return self;
}

Tensor& set_storage_kernel(Tensor& self, c10::Storage source) {
  const int64_t size = static_cast<int64_t>(source.nbytes() / self.dtype().itemsize());
  return set_storage_impl(self, std::move(source), 0, {size}, std::nullopt);
}

Tensor& set_storage_offset_kernel(Tensor& self, c10::Storage source, c10::SymInt storage_offset,
                                  c10::SymIntArrayRef size, c10::SymIntArrayRef stride) {
  // An empty stride list means "contiguous", as for CPU's set_.
  const at::IntArrayRef strides = C10_AS_INTARRAYREF_SLOW(stride);
  const at::OptionalIntArrayRef stride_opt = strides.data() != nullptr ? at::OptionalIntArrayRef(strides)
                                                                       : at::OptionalIntArrayRef(std::nullopt);
  return set_storage_impl(self, std::move(source), storage_offset.guard_int(__FILE__, __LINE__),
                          C10_AS_INTARRAYREF_SLOW(size), stride_opt);
}

Tensor& set_tensor_kernel(Tensor& self, const Tensor& source) {
  if (self.unsafeGetTensorImpl() != source.unsafeGetTensorImpl()) {
    set_storage_impl(self, source.storage(), source.storage_offset(), source.sizes(), source.strides());
  }
  return self;
}

Tensor& set_empty_kernel(Tensor& self) {
  const c10::DeviceGuard guard(self.device());
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, device_allocator(), /*resizable=*/true);
  return set_storage_impl(self, std::move(storage), 0, {0}, std::nullopt);
}

void record_stream_kernel(Tensor& self, c10::Stream stream) {
  TORCH_CHECK(stream.device_type() == c10::DeviceType::PrivateUse1, "openreg: record_stream needs an openreg stream, ",
              "got one of ", stream.device());
  device_allocator()->recordStream(self.storage().data_ptr(), stream);
}

// ---- copies ----

Tensor copy_from_kernel(const Tensor& self, const Tensor& dst, bool non_blocking) {
  TORCH_CHECK(self.defined(), "openreg: _copy_from: the source is undefined");
  TORCH_CHECK(dst.defined(), "openreg: _copy_from: the destination is undefined");
  const Tensor& src = self;
  for (const Tensor* t : {&src, &dst}) {
    TORCH_CHECK(is_openreg(*t) || t->device().is_cpu(), "openreg copies to and from CPU and openreg tensors only, not ",
                t->device());
  }
  // Converting on the host (complex dtypes, conjugate and negative bits) is
  // a fallback run; everything else the device does.
  const bool host_converts = !device_convertible(src, dst) && !same_layout(src, dst);
  openreg::count_op("aten::_copy_from", !host_converts);
  if (dst.numel() == 0 || src.is_same(dst)) {
    return dst;
  }
  at::assert_no_internal_overlap(dst);
  if (is_openreg(src) && is_openreg(dst)) {
    if (dst.is_alias_of(src) && dst.storage_offset() == src.storage_offset() && same_layout(src, dst)) {
      return dst; // the same elements
    }
    copy_between_devices(src, dst);
  } else if (is_openreg(dst)) {
    write_from_host(src, dst, non_blocking);
  } else {
    read_from_device(src, dst, non_blocking);
  }
  return dst;
}

Tensor copy_from_and_resize_kernel(const Tensor& self, const Tensor& dst) {
  openreg::count_op("aten::_copy_from_and_resize", true);
  if (!dst.sizes().equals(self.sizes())) {
    if (is_openreg(dst)) {
      resize_kernel(dst, self.sym_sizes(), std::nullopt);
    } else {
      dst.resize_(self.sizes());
    }
  }
  return copy_from_kernel(self, dst, false);
}

at::Scalar local_scalar_dense_kernel(const Tensor& self) {
  return read_to_host(self).item();
}

} // namespace openreg::kernels
