// The C++ side of the cxx bridge (see OpenRegBridge.h and python/src/bridge.rs):
// the one mapping from runtime errors to c10 errors, registration, the
// current device, and the device generators' seeds and states.

#include "OpenRegBridge.h"

#include <cstring>
#include <mutex>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include "OpenRegAllocator.h"
#include "OpenRegGenerator.h"
#include "OpenRegGuard.h"
#include "OpenRegHooks.h"
#include "OpenRegHostAllocator.h"
#include "OpenRegKernels.h"
#include "torch-openreg/src/bridge.rs.h"

namespace openreg {

[[noreturn]] void raise_runtime_error(const rust::Error& error) {
  const char* msg = error.what();
  switch (openreg::last_error_kind()) {
    case ErrorKind::OutOfMemory:
      TORCH_CHECK_WITH(OutOfMemoryError, false, msg);
      break;
    case ErrorKind::InvalidDevice:
      raise_invalid_device(msg);
    case ErrorKind::InvalidArgument:
      TORCH_CHECK_VALUE(false, msg);
      break;
    default:
      TORCH_CHECK(false, msg);
  }
  // Every branch above throws; this keeps [[noreturn]] honest for the compiler.
  TORCH_CHECK(false, msg);
}

void raise_invalid_device(const std::string& message) {
  throw c10::AcceleratorError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, kInvalidDeviceCode, message);
}

void register_all() {
  // Static registrations (guard, allocator, operators, fallback) ran when the
  // library was loaded; calling into each of their files here is what keeps
  // the linker from dropping those object files from the static archive.
  register_guard();
  register_allocator();
  register_host_allocator();
  register_generator();
  register_ops();
  register_hooks();
}

int32_t current_device() {
  return current_device_index();
}

void set_device(int32_t device) {
  set_current_device_index(static_cast<c10::DeviceIndex>(device));
}

int64_t current_stream_id(int32_t device) {
  return current_stream(static_cast<c10::DeviceIndex>(device)).id();
}

// ---- the device generators ----
// Each call takes the generator's mutex, as torch.cuda's Python functions do
// through the generator's own methods.

namespace {

at::Generator generator_of(int32_t device) {
  return default_generator(static_cast<c10::DeviceIndex>(device));
}

} // namespace

void manual_seed(int32_t device, uint64_t seed) {
  auto gen = generator_of(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_current_seed(seed);
}

uint64_t seed(int32_t device) {
  auto gen = generator_of(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.seed();
}

uint64_t initial_seed(int32_t device) {
  auto gen = generator_of(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.current_seed();
}

rust::Vec<uint8_t> get_rng_state(int32_t device) {
  auto gen = generator_of(device);
  at::Tensor state;
  {
    std::lock_guard<std::mutex> lock(gen.mutex());
    state = gen.get_state();
  }
  const auto* bytes = state.const_data_ptr<uint8_t>();
  rust::Vec<uint8_t> out;
  out.reserve(state.numel());
  for (int64_t i = 0; i < state.numel(); ++i) {
    out.push_back(bytes[i]);
  }
  return out;
}

void set_rng_state(int32_t device, rust::Slice<const uint8_t> state) {
  auto gen = generator_of(device);
  auto tensor = at::empty({static_cast<int64_t>(state.size())}, at::TensorOptions().dtype(at::kByte));
  if (state.size() > 0) {
    std::memcpy(tensor.mutable_data_ptr<uint8_t>(), state.data(), state.size());
  }
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(tensor);
}

} // namespace openreg
