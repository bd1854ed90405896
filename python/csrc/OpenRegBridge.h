// The C++ side of the cxx bridge (python/src/bridge.rs): the functions the
// pyo3 module calls, and OPENREG_CHECK, the single place where a runtime
// error (a rust::Error thrown by a bridge call) becomes a c10 error.
#pragma once

#include <cstdint>
#include <string>

#include "rust/cxx.h"

namespace openreg {

// ---- C++ exposed to Rust (implemented in OpenRegBridge.cpp) ----
void register_all();
int32_t current_device();
void set_device(int32_t device);
int64_t current_stream_id(int32_t device);
// Whether op `op` ("aten::name" or "aten::name.overload") runs through the
// CPU fallback on openreg tensors (no device kernel, no composite).
bool runs_through_fallback(rust::Str op);
void manual_seed(int32_t device, uint64_t seed);
uint64_t seed(int32_t device);
uint64_t initial_seed(int32_t device);
rust::Vec<uint8_t> get_rng_state(int32_t device);
void set_rng_state(int32_t device, rust::Slice<const uint8_t> state);

// Whether a profile is recording device activity (OpenRegActivityProfiler.cpp),
// so launches name what they compute.
bool recording_activity();

// CUDA's code for an invalid device ordinal (cudaErrorInvalidDevice), which
// torch.AcceleratorError.error_code carries for a bad openreg device index.
constexpr int32_t kInvalidDeviceCode = 101;

// Raises c10::AcceleratorError (torch.AcceleratorError, a RuntimeError) for a
// device index that names no openreg device, as CUDA does for an invalid
// device ordinal. Never returns.
[[noreturn]] void raise_invalid_device(const std::string& message);

// Raises the c10 error that matches the last runtime error on this thread:
// c10::OutOfMemoryError (torch.OutOfMemoryError), c10::AcceleratorError,
// c10::ValueError, or c10::Error (RuntimeError). Never returns.
[[noreturn]] void raise_runtime_error(const rust::Error& error);

} // namespace openreg

// Evaluates a bridge call; turns a runtime error into the matching c10 error.
#define OPENREG_CHECK(...)                                   \
  ([&]() -> decltype(auto) {                                 \
    try {                                                    \
      return (__VA_ARGS__);                                  \
    } catch (const ::rust::Error& openreg_error_) {          \
      ::openreg::raise_runtime_error(openreg_error_);        \
    }                                                        \
  }())
