// The pinned host allocator (see OpenRegHostAllocator.h).

#include "OpenRegHostAllocator.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include <c10/util/Exception.h>

#include "OpenRegBridge.h"
#include "torch-openreg/src/bridge.rs.h"

namespace openreg {
namespace {

// Events recorded after queued copies that use a pinned block, per block, and
// blocks whose owner let go while such events were still pending. Both are
// small: a block appears here only between a non-blocking copy and the next
// time its events are seen complete.
struct PendingUses {
  std::mutex mutex;
  std::unordered_map<void*, std::vector<uint64_t>> events; // block -> events
  std::vector<std::pair<void*, std::vector<uint64_t>>> deferred_frees;
};

PendingUses& pending() {
  static auto* p = new PendingUses(); // leaked: deleters may run at exit
  return *p;
}

// True when every event has completed; an event that errors counts as
// complete (its stream reports the error; the block is no longer read).
bool all_complete(const std::vector<uint64_t>& events) {
  for (const uint64_t e : events) {
    try {
      if (!openreg::query_event(e)) {
        return false;
      }
    } catch (const std::exception&) {
    }
  }
  return true;
}

void destroy_all(const std::vector<uint64_t>& events) {
  for (const uint64_t e : events) {
    try {
      openreg::destroy_event(e);
    } catch (const std::exception&) {
    }
  }
}

// Releases deferred blocks whose events have completed. Caller holds the mutex.
void release_completed(PendingUses& p) {
  auto& frees = p.deferred_frees;
  for (auto it = frees.begin(); it != frees.end();) {
    if (all_complete(it->second)) {
      destroy_all(it->second);
      openreg::pinned_free(reinterpret_cast<size_t>(it->first));
      it = frees.erase(it);
    } else {
      ++it;
    }
  }
}

// The deleter of pinned DataPtrs: never throws, never takes the GIL.
void free_pinned_or_throw(void* ptr) {
  PendingUses& p = pending();
  std::lock_guard<std::mutex> lock(p.mutex);
  auto it = p.events.find(ptr);
  if (it == p.events.end() || all_complete(it->second)) {
    if (it != p.events.end()) {
      destroy_all(it->second);
      p.events.erase(it);
    }
    openreg::pinned_free(reinterpret_cast<size_t>(ptr));
  } else {
    p.deferred_frees.emplace_back(ptr, std::move(it->second));
    p.events.erase(it);
  }
  release_completed(p);
}

// The deleter of pinned DataPtrs: runs from destructors, so it must not throw.
// If bookkeeping fails (out of host memory), the block is leaked, never freed
// under a copy that may still use it.
void free_pinned(void* ptr) noexcept {
  if (ptr == nullptr) {
    return;
  }
  try {
    free_pinned_or_throw(ptr);
  } catch (const std::exception& e) {
    TORCH_WARN("openreg: leaking a pinned host block: ", e.what());
  } catch (...) {
    TORCH_WARN("openreg: leaking a pinned host block");
  }
}

} // namespace

c10::DataPtr OpenRegHostAllocator::allocate(size_t n) {
  {
    PendingUses& p = pending();
    std::lock_guard<std::mutex> lock(p.mutex);
    release_completed(p);
  }
  void* ptr = n == 0 ? nullptr : reinterpret_cast<void*>(OPENREG_CHECK(openreg::pinned_alloc(n)));
  return {ptr, ptr, &free_pinned, c10::Device(c10::DeviceType::CPU)};
}

c10::DeleterFnPtr OpenRegHostAllocator::raw_deleter() const {
  return &free_pinned;
}

void OpenRegHostAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  default_copy_data(dest, src, count);
}

OpenRegHostAllocator* host_allocator() {
  static auto* allocator = new OpenRegHostAllocator(); // leaked, like every c10 allocator
  return allocator;
}

bool is_pinned_storage(const c10::Storage& storage) {
  return storage.data_ptr().get_deleter() == &free_pinned;
}

void record_host_use(const c10::Storage& storage, const c10::Stream& stream) {
  if (!is_pinned_storage(storage)) {
    return;
  }
  void* block = storage.data_ptr().get_context();
  const uint64_t event = openreg::create_event(false);
  TORCH_CHECK(event != 0, "openreg: cannot create an event: the runtime is unavailable");
  try {
    openreg::record_event(event, stream.device_index(), stream.id());
  } catch (const ::rust::Error& e) {
    destroy_all({event});
    raise_runtime_error(e);
  }
  PendingUses& p = pending();
  std::lock_guard<std::mutex> lock(p.mutex);
  auto& events = p.events[block];
  // Drop the block's completed events, so a buffer reused for many copies
  // does not collect them.
  std::erase_if(events, [](uint64_t e) {
    if (!all_complete({e})) {
      return false;
    }
    destroy_all({e});
    return true;
  });
  events.push_back(event);
}

void register_host_allocator() {}

} // namespace openreg
