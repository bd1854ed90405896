// at::PrivateUse1HooksInterface for openreg: what generic torch code asks of
// the accelerator (availability, devices, pointers, pinned memory,
// generators, storage resize). CUDA's counterpart is at::cuda::detail::CUDAHooks.
//
// In torch 2.15 every hook that is not overridden throws, so each one torch
// calls is overridden here.
#pragma once

#include <ATen/detail/PrivateUse1HooksInterface.h>

namespace openreg {

struct OpenRegHooks final : public at::PrivateUse1HooksInterface {
  // Whether the backend was built in: always, once this module is loaded.
  bool isBuilt() const override;
  // Whether devices can be used. Must not throw and must not start a device.
  bool isAvailable() const override;
  // Whether the device has started (CUDA: has a primary context).
  bool hasPrimaryContext(c10::DeviceIndex device_index) const override;
  // Lazy initialization: checks that the runtime can start (a broken
  // configuration raises here, with the runtime's message).
  void init() const override;

  c10::DeviceIndex deviceCount() const override;
  void setCurrentDevice(c10::DeviceIndex device) const override;
  c10::DeviceIndex getCurrentDevice() const override;
  // Sets the device and returns the previous one.
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override;
  // Same: there is no per-device context that switching could create.
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override;

  // The device that owns a device address; raises for any other pointer.
  at::Device getDeviceFromPtr(void* data) const override;
  // Whether a host pointer lies in a block of the pinned allocator.
  bool isPinnedPtr(const void* data) const override;
  c10::Allocator* getPinnedMemoryAllocator() const override;

  const at::Generator& getDefaultGenerator(c10::DeviceIndex device_index) const override;
  at::Generator getNewGenerator(c10::DeviceIndex device_index = -1) const override;

  // `untyped_storage().resize_(n)`: a new block, the common bytes copied
  // device-to-device, then swapped in.
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override;
};

// Registers the hooks with ATen (once; the hooks object is leaked, as ATen
// keeps a raw pointer to it).
void register_hooks();

} // namespace openreg
