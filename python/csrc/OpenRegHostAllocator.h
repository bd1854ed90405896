// The pinned host allocator of openreg: page-aligned host memory that the
// runtime knows (`openreg::is_pinned`), returned by the hooks'
// getPinnedMemoryAllocator for `pin_memory()` / `torch.empty(...,
// pin_memory=True)`. CUDA's counterpart is at::cuda::CachingHostAllocator.
//
// Non-blocking copies read or write pinned blocks after the copy call has
// returned; such a copy records an event here (`record_host_use`), and a block
// freed before its events complete is only released once they have.
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/Storage.h>
#include <c10/core/Stream.h>

namespace openreg {

struct OpenRegHostAllocator final : public c10::Allocator {
  // Page-aligned host memory from the runtime's pinned pool. Never takes the GIL.
  c10::DataPtr allocate(size_t n) override;
  c10::DeleterFnPtr raw_deleter() const override;
  // Plain host memcpy: pinned memory is host memory.
  void copy_data(void* dest, const void* src, std::size_t count) const override;
};

// The process-wide pinned allocator (a leaked static).
OpenRegHostAllocator* host_allocator();

// Records that queued work on `stream` uses `storage`'s pinned block, so the
// block is not released before that work has run. A storage that is not from
// this allocator is left alone (the caller made a blocking copy of it).
void record_host_use(const c10::Storage& storage, const c10::Stream& stream);

// Whether `storage` was allocated by the pinned allocator.
bool is_pinned_storage(const c10::Storage& storage);

// Keeps this object file linked.
void register_host_allocator();

} // namespace openreg
