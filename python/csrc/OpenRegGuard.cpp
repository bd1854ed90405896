// The device guard: current device, streams and events (see OpenRegGuard.h).
// Glue only: every stream and event operation is one runtime call.

#include "OpenRegGuard.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include <c10/core/Allocator.h>
#include <c10/util/Exception.h>

#include "OpenRegBridge.h"
#include "torch-openreg/src/bridge.rs.h"

namespace openreg {
namespace {

// The calling thread's current device and, per device, its current stream id
// (sized on first use; 0 is each device's default stream).
thread_local c10::DeviceIndex tls_device = 0;
thread_local std::vector<c10::StreamId> tls_streams;

c10::StreamId& tls_stream_slot(c10::DeviceIndex device) {
  if (tls_streams.empty()) {
    tls_streams.assign(std::max<c10::DeviceIndex>(device_count_or_zero(), device + 1), 0);
  } else if (static_cast<size_t>(device) >= tls_streams.size()) {
    tls_streams.resize(device + 1, 0);
  }
  return tls_streams[device];
}

c10::DeviceIndex resolve(c10::DeviceIndex device) {
  return device == -1 ? current_device_index() : device;
}

c10::Stream make_stream(c10::DeviceIndex device, c10::StreamId id) {
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(c10::DeviceType::PrivateUse1, device), id);
}

// ---- the stream pool ----
// The runtime's priorities run from 0 (least, the default streams') to -2
// (greatest), see wit/streams.wit `stream-priority-range`; a priority outside
// is clamped, as the runtime itself does. Each device has a pool of
// kPoolSize streams per priority, created on first use and handed out
// round-robin, so `torch.Stream()` in a loop does not create streams without
// bound (the runtime cannot destroy streams).
constexpr int kPriorityClasses = 3;
constexpr size_t kPoolSize = 8;

struct DevicePool {
  std::array<std::once_flag, kPriorityClasses> created;
  std::array<std::array<c10::StreamId, kPoolSize>, kPriorityClasses> ids{};
  std::array<std::atomic<uint32_t>, kPriorityClasses> next{};
};

DevicePool& pool_of(c10::DeviceIndex device) {
  // Leaked on purpose: streams may be asked for during static destruction.
  static auto* pools = [] {
    auto* v = new std::vector<std::unique_ptr<DevicePool>>();
    for (c10::DeviceIndex d = 0; d < device_count_or_zero(); ++d) {
      v->push_back(std::make_unique<DevicePool>());
    }
    return v;
  }();
  return *(*pools)[device];
}

c10::Stream pooled_stream(c10::DeviceIndex device, int priority) {
  device = resolve(device);
  check_device_index(device);
  const int cls = std::clamp(-priority, 0, kPriorityClasses - 1);
  DevicePool& pool = pool_of(device);
  std::call_once(pool.created[cls], [&] {
    for (auto& id : pool.ids[cls]) {
      id = OPENREG_CHECK(openreg::create_stream(device, -cls));
    }
  });
  const uint32_t i = pool.next[cls].fetch_add(1, std::memory_order_relaxed) % kPoolSize;
  return make_stream(device, pool.ids[cls][i]);
}

uint64_t event_id(void* event) {
  return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(event));
}

} // namespace

// ---- helpers ----

c10::DeviceIndex device_count_or_zero() noexcept {
  try {
    return static_cast<c10::DeviceIndex>(openreg::device_count());
  } catch (const std::exception& e) {
    try {
      TORCH_WARN("openreg devices are unavailable: ", e.what());
    } catch (...) {
    }
    return 0;
  }
}

void check_device_index(c10::DeviceIndex device) {
  // Raises the runtime's own error (e.g. a malformed OPENREG_* variable) if
  // there are no devices because the runtime cannot start.
  const auto count = OPENREG_CHECK(openreg::device_count());
  if (device < 0 || device >= count) {
    raise_invalid_device("invalid openreg device index " + std::to_string(static_cast<int>(device)) + ": there are " +
                         std::to_string(static_cast<int>(count)) + " openreg devices");
  }
}

c10::DeviceIndex current_device_index() noexcept {
  return tls_device;
}

void set_current_device_index(c10::DeviceIndex device) {
  check_device_index(device);
  tls_device = device;
}

c10::Stream current_stream(c10::DeviceIndex device) {
  device = resolve(device);
  check_device_index(device);
  return make_stream(device, tls_stream_slot(device));
}

// ---- the guard ----

c10::DeviceType OpenRegGuardImpl::type() const {
  return static_type;
}

c10::Device OpenRegGuardImpl::exchangeDevice(c10::Device device) const {
  TORCH_CHECK(device.type() == static_type, "expected an openreg device, got ", device);
  const auto previous = current_device_index();
  if (device.index() != previous) {
    set_current_device_index(device.index());
  }
  return c10::Device(static_type, previous);
}

c10::Device OpenRegGuardImpl::getDevice() const {
  return c10::Device(static_type, current_device_index());
}

void OpenRegGuardImpl::setDevice(c10::Device device) const {
  TORCH_CHECK(device.type() == static_type, "expected an openreg device, got ", device);
  set_current_device_index(device.index());
}

void OpenRegGuardImpl::uncheckedSetDevice(c10::Device device) const noexcept {
  tls_device = device.index();
}

c10::Stream OpenRegGuardImpl::getStream(c10::Device device) const {
  return current_stream(device.index());
}

c10::Stream OpenRegGuardImpl::getDefaultStream(c10::Device device) const {
  const auto index = resolve(device.index());
  check_device_index(index);
  return make_stream(index, 0);
}

c10::Stream OpenRegGuardImpl::getStreamFromGlobalPool(c10::Device device, bool isHighPriority) const {
  return pooled_stream(device.index(), isHighPriority ? -(kPriorityClasses - 1) : 0);
}

c10::Stream OpenRegGuardImpl::getNewStream(c10::Device device, int priority) const {
  return pooled_stream(device.index(), priority);
}

c10::Stream OpenRegGuardImpl::exchangeStream(c10::Stream stream) const {
  const auto device = resolve(stream.device_index());
  check_device_index(device);
  auto& slot = tls_stream_slot(device);
  const auto previous = make_stream(device, slot);
  slot = stream.id();
  return previous;
}

c10::DeviceIndex OpenRegGuardImpl::deviceCount() const noexcept {
  return device_count_or_zero();
}

c10::DeviceCapability OpenRegGuardImpl::getDeviceCapability(c10::Device) const {
  c10::DeviceCapability cap; // every dtype ...
  auto& types = cap.capability_data.supported_scalar_types;
  types.has_QInt8 = types.has_QUInt8 = types.has_QInt32 = types.has_QUInt4x2 = types.has_QUInt2x4 = 0;
  return cap; // ... but the quantized ones
}

void OpenRegGuardImpl::record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
                              const c10::EventFlag flag) const {
  TORCH_CHECK(device_index == -1 || device_index == stream.device_index(), "event device index ",
              static_cast<int>(device_index), " does not match the recording stream's device index ",
              static_cast<int>(stream.device_index()));
  uint64_t id = event_id(*event);
  if (id == 0) {
    id = openreg::create_event(flag == c10::EventFlag::BACKEND_DEFAULT);
    TORCH_CHECK(id != 0, "openreg: cannot create an event: the runtime is unavailable");
    *event = reinterpret_cast<void*>(static_cast<uintptr_t>(id));
  }
  OPENREG_CHECK(openreg::record_event(id, stream.device_index(), stream.id()));
}

void OpenRegGuardImpl::block(void* event, const c10::Stream& stream) const {
  if (const uint64_t id = event_id(event)) {
    OPENREG_CHECK(openreg::wait_event(id, stream.device_index(), stream.id()));
  }
}

bool OpenRegGuardImpl::queryEvent(void* event) const {
  const uint64_t id = event_id(event);
  return id == 0 || OPENREG_CHECK(openreg::query_event(id));
}

void OpenRegGuardImpl::destroyEvent(void* event, const c10::DeviceIndex) const noexcept {
  const uint64_t id = event_id(event);
  if (id == 0) {
    return;
  }
  try {
    openreg::destroy_event(id);
  } catch (const std::exception& e) {
    try {
      TORCH_WARN("openreg: destroying event ", id, " failed: ", e.what());
    } catch (...) {
    }
  }
}

void OpenRegGuardImpl::synchronizeEvent(void* event) const {
  if (const uint64_t id = event_id(event)) {
    OPENREG_CHECK(openreg::synchronize_event(id));
  }
}

double OpenRegGuardImpl::elapsedTime(void* start, void* end, const c10::DeviceIndex) const {
  TORCH_CHECK(start && end, "both events must be recorded before calculating elapsed time");
  return OPENREG_CHECK(openreg::elapsed_time(event_id(start), event_id(end)));
}

bool OpenRegGuardImpl::queryStream(const c10::Stream& stream) const {
  return OPENREG_CHECK(openreg::query_stream(stream.device_index(), stream.id()));
}

void OpenRegGuardImpl::synchronizeStream(const c10::Stream& stream) const {
  OPENREG_CHECK(openreg::synchronize_stream(stream.device_index(), stream.id()));
}

void OpenRegGuardImpl::synchronizeDevice(const c10::DeviceIndex device_index) const {
  const auto device = resolve(device_index);
  check_device_index(device);
  OPENREG_CHECK(openreg::synchronize_device(device));
}

void OpenRegGuardImpl::recordDataPtrOnStream(const c10::DataPtr& data_ptr, const c10::Stream& stream) const {
  if (data_ptr.get() != nullptr) {
    OPENREG_CHECK(openreg::record_stream(reinterpret_cast<uint64_t>(data_ptr.get()), stream.device_index(),
                                         stream.id()));
  }
}

// The guard is a leaked static: c10's registry keeps a raw pointer to it for
// the life of the process (see DeviceGuardImplInterface.h).
C10_REGISTER_GUARD_IMPL(PrivateUse1, OpenRegGuardImpl);

void register_guard() {}

} // namespace openreg
