// c10::impl::DeviceGuardImplInterface for openreg (PrivateUse1): the current
// device, streams and events, which are the runtime's (see wit/streams.wit and
// wit/events.wit). CUDA's counterpart is c10::cuda::impl::CUDAGuardImpl.
//
// Like CUDA, the current device and the current stream of each device are
// per host thread. A c10::Stream's id is the runtime's stream id on its device
// (0 is the device's default stream); an event handle (`void*`) holds the
// runtime's event id, created on first record.
#pragma once

#include <c10/core/Stream.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

namespace openreg {

// ---- helpers the rest of the shim uses (all act on the calling thread) ----

// Number of devices; 0 (with a warning) if the runtime cannot start. Never throws.
c10::DeviceIndex device_count_or_zero() noexcept;
// Throws c10::AcceleratorError unless 0 <= device < device count (or the runtime's
// error if it cannot start).
void check_device_index(c10::DeviceIndex device);
// The calling thread's current device (0 until set).
c10::DeviceIndex current_device_index() noexcept;
// Sets the calling thread's current device, after checking the index.
void set_current_device_index(c10::DeviceIndex device);
// The calling thread's current stream on `device` (-1 = the current device).
c10::Stream current_stream(c10::DeviceIndex device = -1);

// Keeps this object file (and its static registration) linked.
void register_guard();

struct OpenRegGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  static constexpr c10::DeviceType static_type = c10::DeviceType::PrivateUse1;

  OpenRegGuardImpl() = default;

  c10::DeviceType type() const override;

  // Sets the current device and returns the previous one. Checks the index.
  c10::Device exchangeDevice(c10::Device device) const override;
  c10::Device getDevice() const override;
  void setDevice(c10::Device device) const override;
  // Runs from guard destructors: must not throw, so it does not check the
  // index (a guard only restores a device that was valid when it was saved).
  void uncheckedSetDevice(c10::Device device) const noexcept override;

  // The calling thread's current stream for a device.
  c10::Stream getStream(c10::Device device) const override;
  // Stream 0 of the device.
  c10::Stream getDefaultStream(c10::Device device) const override;
  // A stream from a small per-device, per-priority pool, created lazily and
  // handed out round-robin (the runtime has no stream destruction, so streams
  // are reused, as CUDA's pool does).
  c10::Stream getStreamFromGlobalPool(c10::Device device, bool isHighPriority = false) const override;
  // `torch.Stream(...)`: a pooled stream of the priority asked for.
  c10::Stream getNewStream(c10::Device device, int priority = 0) const override;
  // Makes `stream` current for its device on this thread; returns the
  // previous one. Does not change the current device.
  c10::Stream exchangeStream(c10::Stream stream) const override;

  // Must not throw: on a broken configuration, warn and report 0 devices.
  c10::DeviceIndex deviceCount() const noexcept override;
  // Every dtype the CPU fallback handles; no quantized types.
  c10::DeviceCapability getDeviceCapability(c10::Device device) const override;

  // Events. `*event` is 0 until the first record creates the runtime event;
  // timing is on when the flag is EventFlag::BACKEND_DEFAULT (which is what
  // torch.Event(enable_timing=True) passes).
  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag flag) const override;
  // Makes `stream` wait for the event's last record; no-op if never recorded.
  void block(void* event, const c10::Stream& stream) const override;
  // True if never recorded or its last record has completed.
  bool queryEvent(void* event) const override;
  // Must not throw (runs from destructors): errors become warnings.
  void destroyEvent(void* event, const c10::DeviceIndex device_index) const noexcept override;
  // Waits for the event's last record; no-op if never recorded.
  void synchronizeEvent(void* event) const override;
  // Milliseconds between two recorded, completed, timing-enabled events.
  double elapsedTime(void* start, void* end, const c10::DeviceIndex device_index) const override;

  // Whether all work queued on the stream has completed.
  bool queryStream(const c10::Stream& stream) const override;
  // Waits for the stream's work; reports the first error it raised.
  void synchronizeStream(const c10::Stream& stream) const override;
  // Waits for all work on the device (-1 = current device).
  void synchronizeDevice(const c10::DeviceIndex device_index) const override;
  // Tells the allocator that `data_ptr` is also used by `stream`, so its
  // block is not reused before the work queued there has run.
  void recordDataPtrOnStream(const c10::DataPtr& data_ptr, const c10::Stream& stream) const override;
};

} // namespace openreg
