// The profiler's view of openreg devices: torch::profiler::impl::ProfilerStubs
// for PrivateUse1 (registerPrivateUse1Methods), CUDA's cudaStubs counterpart.
//
// When a profile asks for device activity (torch.profiler with
// ProfilerActivity.PrivateUse1, or torch.autograd.profiler.profile(use_device=
// "openreg")), the profiler brackets each operator with two device events
// recorded on the current stream; an event's time is the device's own
// timestamp when the executor reached it (the runtime's timing events), so an
// op's device time is what the device spent on the work the op queued.
// Without these stubs torch has none for PrivateUse1, and such a profile
// fails every callback and reports garbage (negative) device times.

#include <c10/util/ApproximateClock.h>
#include <torch/csrc/profiler/stubs/base.h>

#include "OpenRegBridge.h"
#include "OpenRegGuard.h"
#include "torch-openreg/src/bridge.rs.h"

namespace openreg {
namespace {

using torch::profiler::impl::ProfilerVoidEventStub;

// A timing event, destroyed with its last reference.
ProfilerVoidEventStub make_event(c10::DeviceIndex device) {
  const uint64_t id = openreg::create_event(/*timing=*/true);
  TORCH_CHECK(id != 0, "openreg profiler: cannot create an event: the runtime is unavailable");
  OPENREG_CHECK(openreg::record_event(id, device, current_stream(device).id()));
  return ProfilerVoidEventStub(new uint64_t(id), [](void* p) {
    auto* id = static_cast<uint64_t*>(p);
    try {
      openreg::destroy_event(*id);
    } catch (...) {
      // A profile that outlives its devices (process exit) has nothing to free.
    }
    delete id;
  });
}

uint64_t event_of(const ProfilerVoidEventStub* event) {
  return *static_cast<const uint64_t*>(event->get());
}

struct OpenRegProfilerStubs final : torch::profiler::impl::ProfilerStubs {
  void record(c10::DeviceIndex* device, ProfilerVoidEventStub* event, int64_t* cpu_ns) const override {
    const auto index = current_device_index();
    if (device != nullptr) {
      *device = index;
    }
    if (cpu_ns != nullptr) {
      *cpu_ns = c10::getTime();
    }
    *event = make_event(index);
  }

  // Microseconds between two events, as the CUDA stubs report it; waits for
  // the later one.
  float elapsed(const ProfilerVoidEventStub* start, const ProfilerVoidEventStub* end) const override {
    OPENREG_CHECK(openreg::synchronize_event(event_of(end)));
    return static_cast<float>(OPENREG_CHECK(openreg::elapsed_time(event_of(start), event_of(end))) * 1000.0);
  }

  // Ranges and marks are for external tools (NVTX on CUDA); there is none here.
  void mark(const char*) const override {}
  void rangePush(const char*) const override {}
  void rangePop() const override {}

  bool enabled() const override {
    return true;
  }

  void onEachDevice(std::function<void(int)> op) const override {
    const auto previous = current_device_index();
    const auto count = OPENREG_CHECK(openreg::device_count());
    for (int device = 0; device < count; ++device) {
      set_current_device_index(static_cast<c10::DeviceIndex>(device));
      op(device);
    }
    set_current_device_index(previous);
  }

  void synchronize() const override {
    const auto count = OPENREG_CHECK(openreg::device_count());
    for (int device = 0; device < count; ++device) {
      if (openreg::device_started(device)) {
        OPENREG_CHECK(openreg::synchronize_device(device));
      }
    }
  }
};

struct RegisterProfilerStubs {
  RegisterProfilerStubs() {
    static OpenRegProfilerStubs stubs;
    torch::profiler::impl::registerPrivateUse1Methods(&stubs);
  }
};
const RegisterProfilerStubs register_profiler_stubs;

} // namespace
} // namespace openreg
