// Kineto's view of openreg devices: a libkineto::IActivityProfiler plugin
// (PyTorch's PrivateUse1ProfilerRegistry), the counterpart of CUPTI's activity
// API for CUDA.
//
// With ProfilerActivity.PrivateUse1 in a torch.profiler profile, every kernel
// launch and copy the devices run while the profile records becomes a device
// activity: its name, device, stream and duration, from the timestamps the
// device's executor took when it started and finished the work (the runtime's
// `activity` interface, wit/activity.wit). Each activity is linked to the
// host operator that queued it: kineto tells the session the correlation id
// of every operator as it begins (pushCorrelationId, on the operator's
// thread), the session hands it to the runtime for that thread, and the
// runtime tags the work the thread queues with it. torch then counts an
// activity's time as its operator's device time (key_averages'
// self_device_time_total), and the Chrome trace draws it on the device's row.
//
// Kineto guards its plugin interface with USE_KINETO, which the pip wheel's
// headers expect the extension to define; this file is the only one that
// includes them, so the rest of the shim sees the same torch headers as before.

#define USE_KINETO 1

#include <atomic>
#include <set>
#include <string>
#include <vector>

#include <libkineto.h>
#include <output_base.h>
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>

#include "OpenRegBridge.h"
#include "torch-openreg/src/bridge.rs.h"

namespace openreg {

namespace {

std::atomic<bool> g_recording{false};

// The correlation ids of the operators the calling thread is inside,
// innermost last: the runtime gets the innermost.
thread_local std::vector<uint64_t> t_correlations;

using libkineto::ActivityType;

class ActivitySession final : public libkineto::IActivityProfilerSession {
 public:
  void start() override {
    set_activity_recording(true);
    g_recording.store(true, std::memory_order_relaxed);
    status_ = libkineto::TraceStatus::RECORDING;
  }

  // Work still queued when recording stops is not recorded: torch's profiler
  // synchronizes the devices (torch.openreg.synchronize) before it stops.
  void stop() override {
    g_recording.store(false, std::memory_order_relaxed);
    records_ = take_activity();
    set_activity_recording(false);
    status_ = libkineto::TraceStatus::PROCESSING;
  }

  std::vector<std::string> errors() override {
    return {};
  }

  void processTrace(libkineto::ActivityLogger& logger) override {
    processTrace(logger, nullptr, 0, INT64_MAX);
  }

  void processTrace(libkineto::ActivityLogger& logger, libkineto::getLinkedActivityCallback linked,
                    int64_t start_ns, int64_t end_ns) override {
    buffer_ = std::make_unique<libkineto::CpuTraceBuffer>();
    buffer_->span = libkineto::TraceSpan(start_ns, end_ns, "openreg");
    buffer_->gpuOpCount = 0;
    for (const auto& r : records_) {
      const auto begin = static_cast<int64_t>(r.start_ns);
      const auto end = static_cast<int64_t>(r.end_ns);
      if (end < start_ns || begin > end_ns) {
        continue; // outside the profile's window (kineto does not filter plugin activities)
      }
      const bool kernel = r.kind == 0;
      std::string name(r.name); // the kernel's export name, or the copy's direction
      if (kernel && !r.op.empty()) {
        name += " (" + std::string(r.op) + ")";
      }
      buffer_->emplace_activity(buffer_->span, kernel ? ActivityType::CONCURRENT_KERNEL : ActivityType::GPU_MEMCPY,
                                name);
      auto& activity = libkineto::CpuTraceBuffer::toRef(buffer_->activities.back());
      activity.startTime = begin;
      activity.endTime = end;
      activity.device = r.device;
      activity.resource = r.stream;
      activity.id = static_cast<int32_t>(r.correlation);
      activity.linked = linked && r.correlation != 0 ? linked(static_cast<int32_t>(r.correlation)) : nullptr;
      activity.addTypedMetadata("device", static_cast<int64_t>(r.device));
      activity.addTypedMetadata("stream", static_cast<int64_t>(r.stream));
      activity.addTypedMetadata("correlation", static_cast<uint64_t>(r.correlation));
      if (kernel) {
        activity.addTypedMetadata("workers", static_cast<int64_t>(r.workers));
      } else {
        activity.addTypedMetadata("bytes", static_cast<uint64_t>(r.bytes));
        if (end > begin) {
          activity.addTypedMetadata("memory bandwidth (GB/s)", static_cast<double>(r.bytes) / (end - begin));
        }
      }
      streams_.insert({r.device, r.stream});
      ++buffer_->gpuOpCount;
      logger.handleGenericActivity(activity);
    }
    records_.clear();
  }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    return std::make_unique<libkineto::DeviceInfo>(libkineto::DeviceInfo{0, 0, "openreg", "openreg:0"});
  }

  std::vector<libkineto::ResourceInfo> getResourceInfos() override {
    std::vector<libkineto::ResourceInfo> infos;
    for (const auto& [device, stream] : streams_) {
      infos.push_back({stream, stream, device,
                       "openreg:" + std::to_string(device) + " stream " + std::to_string(stream)});
    }
    return infos;
  }

  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override {
    return std::move(buffer_);
  }

  void pushCorrelationId(uint64_t id) override {
    t_correlations.push_back(id);
    set_correlation(id);
  }

  void popCorrelationId() override {
    if (!t_correlations.empty()) {
      t_correlations.pop_back();
    }
    set_correlation(t_correlations.empty() ? 0 : t_correlations.back());
  }

  ~ActivitySession() override {
    if (status_ == libkineto::TraceStatus::RECORDING) {
      g_recording.store(false, std::memory_order_relaxed);
      set_activity_recording(false);
    }
  }

 private:
  rust::Vec<ActivityFfi> records_;
  std::unique_ptr<libkineto::CpuTraceBuffer> buffer_;
  std::set<std::pair<int64_t, int64_t>> streams_;
};

class ActivityProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override {
    return name_;
  }

  const std::set<ActivityType>& availableActivities() const override {
    return activities_;
  }

  // Kineto configures every plugin for every trace; a trace that does not
  // ask for device activity (a CPU-only profile) gets no session.
  std::unique_ptr<libkineto::IActivityProfilerSession> configure(const std::set<ActivityType>& types,
                                                                 const libkineto::Config&) override {
    if (!types.count(ActivityType::CONCURRENT_KERNEL) && !types.count(ActivityType::GPU_MEMCPY)) {
      return nullptr;
    }
    return std::make_unique<ActivitySession>();
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(int64_t, int64_t,
                                                                 const std::set<ActivityType>& types,
                                                                 const libkineto::Config& config) override {
    return configure(types, config);
  }

 private:
  std::string name_{"openreg"};
  std::set<ActivityType> activities_{ActivityType::CONCURRENT_KERNEL, ActivityType::GPU_MEMCPY};
};

// torch hands the factory to kineto when a profile first asks for PrivateUse1.
REGISTER_PRIVATEUSE1_PROFILER(ActivityProfiler);

} // namespace

bool recording_activity() {
  return g_recording.load(std::memory_order_relaxed);
}

} // namespace openreg
