// The device allocator (see OpenRegAllocator.h). Glue only: the allocator
// itself (blocks, segments, caching, stream-aware reuse, statistics) is the
// runtime's (host/src/allocator.rs).

#include "OpenRegAllocator.h"

#include <algorithm>

#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>

#include "OpenRegBridge.h"
#include "OpenRegGuard.h"
#include "torch-openreg/src/bridge.rs.h"

namespace openreg {
namespace {

using c10::CachingAllocator::Stat;
using c10::CachingAllocator::StatArray;
using c10::CachingAllocator::StatType;

// The deleter of every device DataPtr. It runs from tensor destructors, on
// any thread, possibly with the GIL held by the caller: it never takes the
// GIL and never throws (a failure becomes a warning). The runtime frees the
// block in stream order, so work already queued on it still sees valid memory.
void free_block(void* ptr) {
  if (ptr == nullptr) {
    return;
  }
  try {
    openreg::free(reinterpret_cast<uint64_t>(ptr));
  } catch (const std::exception& e) {
    try {
      TORCH_WARN("openreg: freeing device address ", ptr, " failed: ", e.what());
    } catch (...) {
    }
  }
}

Stat& aggregate(StatArray& array) {
  return array[static_cast<size_t>(StatType::AGGREGATE)];
}

int64_t as_i64(uint64_t v) {
  return static_cast<int64_t>(v);
}

} // namespace

c10::DataPtr OpenRegDeviceAllocator::allocate(size_t n) {
  const auto stream = current_stream(); // checks the current device
  const auto device = stream.device_index();
  const uint64_t address = OPENREG_CHECK(openreg::allocate(device, n, stream.id()));
  void* ptr = reinterpret_cast<void*>(address);
  return {ptr, ptr, &free_block, c10::Device(c10::DeviceType::PrivateUse1, device)};
}

c10::DeleterFnPtr OpenRegDeviceAllocator::raw_deleter() const {
  return &free_block;
}

void OpenRegDeviceAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  if (count == 0) {
    return;
  }
  const auto dst_address = reinterpret_cast<uint64_t>(dest);
  const int32_t device = openreg::device_of(dst_address);
  TORCH_CHECK(device >= 0, "openreg: copy_data destination ", dest, " is not a device address");
  // Both ends on the destination's device: a source elsewhere is refused by the runtime.
  OPENREG_CHECK(openreg::copy_d2d(device, current_stream(device).id(), device, dst_address, device,
                                  reinterpret_cast<uint64_t>(src), count));
}

bool OpenRegDeviceAllocator::initialized() {
  try {
    return openreg::device_count() > 0;
  } catch (const std::exception&) {
    return false;
  }
}

void OpenRegDeviceAllocator::emptyCache(c10::MempoolId_t mempool_id) {
  TORCH_CHECK(mempool_id == c10::MempoolId_t(0, 0), "openreg has no private memory pools (got pool id (",
              mempool_id.first, ", ", mempool_id.second, "))");
  const auto count = device_count_or_zero();
  for (c10::DeviceIndex d = 0; d < count; ++d) {
    // A device that never started holds no memory; do not start it here.
    if (openreg::device_started(d)) {
      OPENREG_CHECK(openreg::empty_cache(d));
    }
  }
}

void OpenRegDeviceAllocator::recordStream(const c10::DataPtr& ptr, c10::Stream stream) {
  if (ptr.get() != nullptr) {
    OPENREG_CHECK(
        openreg::record_stream(reinterpret_cast<uint64_t>(ptr.get()), stream.device_index(), stream.id()));
  }
}

c10::CachingDeviceAllocator::DeviceStats OpenRegDeviceAllocator::getDeviceStats(c10::DeviceIndex device) {
  check_device_index(device);
  const auto s = OPENREG_CHECK(openreg::memory_stats(device));
  c10::CachingDeviceAllocator::DeviceStats stats;

  // Bytes: current, peak, and running totals allocated and freed.
  Stat& allocated_bytes = aggregate(stats.allocated_bytes);
  allocated_bytes.current = as_i64(s.allocated_bytes);
  allocated_bytes.peak = as_i64(s.peak_allocated_bytes);
  allocated_bytes.allocated = as_i64(s.allocated_bytes_total);
  allocated_bytes.freed = as_i64(s.freed_bytes_total);
  Stat& reserved_bytes = aggregate(stats.reserved_bytes);
  reserved_bytes.current = as_i64(s.reserved_bytes);
  reserved_bytes.peak = as_i64(s.peak_reserved_bytes);

  // Counts: current and peak blocks and segments, and running totals of
  // allocations and frees.
  Stat& allocation = aggregate(stats.allocation);
  allocation.current = as_i64(s.active_blocks);
  allocation.peak = as_i64(s.peak_active_blocks);
  allocation.allocated = as_i64(s.allocations);
  allocation.freed = as_i64(s.frees);
  Stat& active = aggregate(stats.active);
  active.current = as_i64(s.active_blocks);
  active.peak = as_i64(s.peak_active_blocks);
  Stat& segment = aggregate(stats.segment);
  segment.current = as_i64(s.segments);
  segment.peak = as_i64(s.peak_segments);

  stats.num_ooms = as_i64(s.ooms);
  // A cache flush is what CUDA counts as an allocation retry: a request that
  // only succeeded after cached segments were released.
  stats.num_alloc_retries = as_i64(s.cache_flushes);
  return stats;
}

void OpenRegDeviceAllocator::resetAccumulatedStats(c10::DeviceIndex device) {
  check_device_index(device);
  OPENREG_CHECK(openreg::reset_accumulated_stats(device));
}

void OpenRegDeviceAllocator::resetPeakStats(c10::DeviceIndex device) {
  check_device_index(device);
  OPENREG_CHECK(openreg::reset_peak_stats(device));
}

std::pair<size_t, size_t> OpenRegDeviceAllocator::getMemoryInfo(c10::DeviceIndex device) {
  check_device_index(device);
  const auto info = OPENREG_CHECK(openreg::mem_get_info(device));
  return {static_cast<size_t>(info.free_bytes), static_cast<size_t>(info.total_bytes)};
}

OpenRegDeviceAllocator* device_allocator() {
  // Leaked: c10 keeps a raw pointer, and storages freed during interpreter
  // shutdown still call its deleter.
  static auto* allocator = new OpenRegDeviceAllocator();
  return allocator;
}

void resize_storage_bytes(const c10::Storage& storage, size_t new_bytes) {
  TORCH_CHECK(storage.resizable(), "Trying to resize storage that is not resizable");
  const c10::Device device = storage.device();
  TORCH_CHECK(device.type() == c10::DeviceType::PrivateUse1, "openreg: cannot resize a storage on ", device);
  c10::DeviceGuard guard(device);
  c10::Allocator* allocator = storage.allocator() ? storage.allocator() : device_allocator();
  c10::DataPtr new_data = new_bytes > 0 ? allocator->allocate(new_bytes) : c10::DataPtr(nullptr, device);
  const size_t keep = std::min(new_bytes, storage.nbytes());
  if (keep > 0 && storage.data() != nullptr) {
    const auto stream = current_stream(device.index()).id();
    const auto old_address = reinterpret_cast<uint64_t>(storage.data());
    OPENREG_CHECK(openreg::copy_d2d(device.index(), stream, device.index(),
                                    reinterpret_cast<uint64_t>(new_data.get()), device.index(), old_address, keep));
    // The old block may belong to another stream: keep it until the copy has read it.
    OPENREG_CHECK(openreg::record_stream(old_address, device.index(), stream));
  }
  // The old block is freed when its DataPtr goes, in stream order after the copy.
  storage.unsafeGetStorageImpl()->set_data_ptr_noswap(std::move(new_data));
  storage.unsafeGetStorageImpl()->set_nbytes(new_bytes);
}

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, device_allocator());

void register_allocator() {}

} // namespace openreg
