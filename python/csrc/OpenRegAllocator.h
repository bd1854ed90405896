// c10::DeviceAllocator for openreg (PrivateUse1): device memory from the
// runtime's stream-aware caching allocator (wit/memory.wit). CUDA's
// counterpart is c10::cuda::CUDACachingAllocator.
//
// A DataPtr's pointer is a *device address* (see the runtime's module docs,
// host/src/lib.rs, "Device addresses"): the host never dereferences it; only
// runtime copies and kernel launches reach the bytes behind it.
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/Storage.h>

namespace openreg {

struct OpenRegDeviceAllocator final : public c10::DeviceAllocator {
  // Allocates `n` bytes on the calling thread's current device, for use on
  // that device's current stream. Never takes the GIL. Out of memory raises
  // c10::OutOfMemoryError (torch.OutOfMemoryError) with the runtime's numbers.
  c10::DataPtr allocate(size_t n) override;
  // The deleter every DataPtr of this allocator carries (frees the block).
  c10::DeleterFnPtr raw_deleter() const override;
  // Device-to-device copy of `count` bytes, queued on the current stream of
  // the destination's device.
  void copy_data(void* dest, const void* src, std::size_t count) const override;

  // True once the runtime is up (a broken configuration makes it false).
  bool initialized() override;
  // Returns every cached, wholly free segment of every started device.
  // Private pools (CUDA graphs) do not exist here.
  void emptyCache(c10::MempoolId_t mempool_id = {0, 0}) override;
  // Marks `ptr`'s block as used by `stream` too.
  void recordStream(const c10::DataPtr& ptr, c10::Stream stream) override;
  // The runtime's statistics, in the shape torch.accelerator.memory_* read
  // (the AGGREGATE entry of each StatArray; this allocator has no pools).
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override;
  // Not supported: the runtime's cumulative counters cannot be reset. Raises.
  void resetAccumulatedStats(c10::DeviceIndex device) override;
  // Sets the peak statistics of a device to their current values.
  void resetPeakStats(c10::DeviceIndex device) override;
  // (free, total) bytes of a device.
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override;
};

// The process-wide allocator (a leaked static, registered for PrivateUse1).
OpenRegDeviceAllocator* device_allocator();

// Resizes a device storage to `new_bytes`: allocates a new block on the
// storage's device, copies the bytes both have device-to-device on the
// current stream, and swaps the new block in (the old one is freed once that
// stream has run the copy). Used by `resize_` and by the hooks'
// `resizePrivateUse1Bytes` (`untyped_storage().resize_()`).
void resize_storage_bytes(const c10::Storage& storage, size_t new_bytes);

// Keeps this object file (and its static registration) linked.
void register_allocator();

} // namespace openreg
