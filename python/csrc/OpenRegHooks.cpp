// The PrivateUse1 hooks (see OpenRegHooks.h).

#include "OpenRegHooks.h"

#include <mutex>

#include <c10/util/Exception.h>

#include "OpenRegAllocator.h"
#include "OpenRegBridge.h"
#include "OpenRegGenerator.h"
#include "OpenRegGuard.h"
#include "OpenRegHostAllocator.h"
#include "torch-openreg/src/bridge.rs.h"

namespace openreg {

bool OpenRegHooks::isBuilt() const {
  return true;
}

bool OpenRegHooks::isAvailable() const {
  return device_count_or_zero() > 0;
}

bool OpenRegHooks::hasPrimaryContext(c10::DeviceIndex device_index) const {
  return openreg::device_started(device_index);
}

void OpenRegHooks::init() const {
  OPENREG_CHECK(openreg::device_count());
}

c10::DeviceIndex OpenRegHooks::deviceCount() const {
  return device_count_or_zero();
}

void OpenRegHooks::setCurrentDevice(c10::DeviceIndex device) const {
  set_current_device_index(device);
}

c10::DeviceIndex OpenRegHooks::getCurrentDevice() const {
  return current_device_index();
}

c10::DeviceIndex OpenRegHooks::exchangeDevice(c10::DeviceIndex device) const {
  const auto previous = current_device_index();
  if (device != previous) {
    set_current_device_index(device);
  }
  return previous;
}

c10::DeviceIndex OpenRegHooks::maybeExchangeDevice(c10::DeviceIndex device) const {
  return exchangeDevice(device);
}

at::Device OpenRegHooks::getDeviceFromPtr(void* data) const {
  const int32_t device = openreg::device_of(reinterpret_cast<uint64_t>(data));
  TORCH_CHECK(device >= 0, "openreg: ", data, " is not an openreg device address");
  return at::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device));
}

bool OpenRegHooks::isPinnedPtr(const void* data) const {
  return openreg::is_pinned(reinterpret_cast<size_t>(data));
}

c10::Allocator* OpenRegHooks::getPinnedMemoryAllocator() const {
  return host_allocator();
}

const at::Generator& OpenRegHooks::getDefaultGenerator(c10::DeviceIndex device_index) const {
  return default_generator(device_index);
}

at::Generator OpenRegHooks::getNewGenerator(c10::DeviceIndex device_index) const {
  return new_generator(device_index);
}

void OpenRegHooks::resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const {
  resize_storage_bytes(storage, newsize);
}

void register_hooks() {
  static std::once_flag once;
  std::call_once(once, [] { at::RegisterPrivateUse1HooksInterface(new OpenRegHooks()); });
}

} // namespace openreg
