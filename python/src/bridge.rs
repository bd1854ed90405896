//! The cxx bridge between the C++ shim (`csrc/`) and the runtime.
//!
//! Three parts, as in the cxx demo: shared types; Rust functions the shim
//! calls (thin wrappers over the process-wide `openreg_host::Runtime`, in
//! `runtime_ffi.rs`); C++ functions the pyo3 module calls (state that lives
//! with c10: the registrations, current device, generators).
//!
//! No panic crosses this bridge: every Rust function the shim calls returns
//! `Result` or cannot fail, and a Rust `Err` becomes a C++ `rust::Error`,
//! which the shim turns into the right c10 error in one place
//! (`OPENREG_CHECK` in `csrc/OpenRegBridge.h`, using `last_error_kind`).

#[cxx::bridge(namespace = "openreg")]
pub mod ffi {
    // ---- shared types ------------------------------------------------------

    /// The category of the last error a bridge call returned on this thread,
    /// so the shim can raise the matching c10 error type.
    #[derive(Debug)]
    enum ErrorKind {
        /// `c10::OutOfMemoryError` -> `torch.OutOfMemoryError`.
        OutOfMemory,
        /// `c10::AcceleratorError` -> `torch.AcceleratorError` (bad device index).
        InvalidDevice,
        /// `c10::ValueError` -> `ValueError`.
        InvalidArgument,
        /// `c10::Error` -> `RuntimeError`.
        Other,
    }

    /// Allocator statistics of one device (`openreg_host::abi::MemoryStats`).
    #[derive(Debug)]
    struct MemoryStatsFfi {
        allocated_bytes: u64,
        allocated_bytes_total: u64,
        freed_bytes_total: u64,
        peak_allocated_bytes: u64,
        reserved_bytes: u64,
        peak_reserved_bytes: u64,
        active_blocks: u64,
        peak_active_blocks: u64,
        segments: u64,
        peak_segments: u64,
        allocations: u64,
        frees: u64,
        ooms: u64,
        cache_flushes: u64,
    }

    /// Free and total memory of a device.
    #[derive(Debug)]
    struct MemInfoFfi {
        free_bytes: u64,
        total_bytes: u64,
    }

    /// One launch or copy a device ran while activity recording was on
    /// (`openreg_host::abi::ActivityRecord`).
    #[derive(Debug)]
    struct ActivityFfi {
        /// 0 kernel, 1 host to device, 2 device to host, 3 within a device,
        /// 4 device to device (peer).
        kind: u8,
        name: String,
        /// The operator, or empty.
        op: String,
        device: i32,
        stream: i64,
        /// Nanoseconds since the Unix epoch, from the device's executor.
        start_ns: u64,
        end_ns: u64,
        correlation: u64,
        bytes: u64,
        workers: u32,
    }

    // ---- Rust exposed to C++ --------------------------------------------------

    extern "Rust" {
        /// Category of the last error returned on this thread.
        fn last_error_kind() -> ErrorKind;

        /// Number of devices; an error means the configuration is broken.
        fn device_count() -> Result<i32>;
        /// Whether a device has started (CUDA's "primary context").
        fn device_started(device: i32) -> bool;
        /// Device owning a device address, or -1.
        fn device_of(ptr: u64) -> i32;

        fn allocate(device: i32, size: u64, stream: i64) -> Result<u64>;
        fn free(ptr: u64) -> Result<()>;
        fn record_stream(ptr: u64, device: i32, stream: i64) -> Result<()>;
        fn memory_stats(device: i32) -> Result<MemoryStatsFfi>;
        fn reset_peak_stats(device: i32) -> Result<()>;
        fn reset_accumulated_stats(device: i32) -> Result<()>;
        fn empty_cache(device: i32) -> Result<()>;
        fn mem_get_info(device: i32) -> Result<MemInfoFfi>;

        /// Host memory to device. Blocking unless `non_blocking`.
        ///
        /// # Safety
        /// `src` must address `len` readable host bytes; with `non_blocking`
        /// they must stay valid and unchanged until the stream has run the copy.
        unsafe fn copy_h2d(device: i32, stream: i64, dst: u64, src: usize, len: u64, non_blocking: bool) -> Result<()>;
        /// Device to host memory. Blocking unless `non_blocking`.
        ///
        /// # Safety
        /// `dst` must address `len` writable host bytes; with `non_blocking`
        /// they must stay valid and untouched until the stream has run the copy.
        unsafe fn copy_d2h(device: i32, stream: i64, dst: usize, src: u64, len: u64, non_blocking: bool) -> Result<()>;
        /// Device to device (same or another device), queued on `stream` of
        /// `device` (one of the two). Each address is checked against the
        /// device named for it.
        fn copy_d2d(
            device: i32,
            stream: i64,
            dst_device: i32,
            dst: u64,
            src_device: i32,
            src: u64,
            len: u64,
        ) -> Result<()>;

        fn create_stream(device: i32, priority: i32) -> Result<i64>;
        fn stream_priority(device: i32, stream: i64) -> Result<i32>;
        fn query_stream(device: i32, stream: i64) -> Result<bool>;
        fn synchronize_stream(device: i32, stream: i64) -> Result<()>;
        fn synchronize_device(device: i32) -> Result<()>;

        fn create_event(timing: bool) -> u64;
        fn destroy_event(event: u64) -> Result<()>;
        fn record_event(event: u64, device: i32, stream: i64) -> Result<()>;
        fn wait_event(event: u64, device: i32, stream: i64) -> Result<()>;
        fn query_event(event: u64) -> Result<bool>;
        fn synchronize_event(event: u64) -> Result<()>;
        fn elapsed_time(start: u64, end: u64) -> Result<f64>;

        /// Device activity recording for the profiler (the `activity` ABI
        /// interface): on/off, the calling thread's correlation id, and the
        /// records so far. Inert when the runtime cannot start.
        fn set_activity_recording(enabled: bool);
        fn set_correlation(id: u64);
        fn take_activity() -> Vec<ActivityFfi>;

        /// The index of a kernel of the built-in engine (`openreg.engine`,
        /// module 0 on every device); the same on every device.
        fn engine_kernel(device: i32, name: &str) -> Result<u32>;
        /// Launches engine kernel `kernel` with a parameter block; `pointers`
        /// are the byte positions of device addresses in `params`, which the
        /// runtime checks against the device and turns into offsets.
        /// With `parallel`, every worker of the device runs it, each on its
        /// part (the kernel's `worker-index` and `worker-count`). `label`, when
        /// not empty, names what the launch computes (for activity records).
        fn launch_engine(
            device: i32,
            stream: i64,
            kernel: u32,
            params: &[u8],
            pointers: &[u32],
            parallel: bool,
            label: &str,
        ) -> Result<()>;
        /// How many workers run each device's parallel launches.
        fn device_workers() -> Result<u32>;

        /// Page-aligned host memory for pinned tensors; `is_pinned` knows it.
        fn pinned_alloc(size: usize) -> Result<usize>;
        fn pinned_free(ptr: usize);
        fn is_pinned(ptr: usize) -> bool;

        /// What the CPU fallback does for one run of `op` under the fallback
        /// policy: 0 run it, 1 warn and run it (first run under `warn`), 2 refuse.
        fn fallback_decision(op: &str) -> Result<u8>;
        /// Counts one run of `op`, as a device kernel or through the CPU fallback.
        fn count_op(op: &str, on_device: bool);
    }

    // ---- C++ exposed to Rust --------------------------------------------------

    unsafe extern "C++" {
        include!("torch-openreg/csrc/OpenRegBridge.h");

        /// Registers hooks and everything else that is not a static
        /// registration, and keeps every registration object file linked.
        fn register_all() -> Result<()>;

        fn current_device() -> Result<i32>;
        fn set_device(device: i32) -> Result<()>;
        /// The id of the calling thread's current stream on `device`.
        fn current_stream_id(device: i32) -> Result<i64>;
        /// Whether an op ("aten::name" or "aten::name.overload") runs through
        /// the CPU fallback on openreg tensors.
        fn runs_through_fallback(op: &str) -> Result<bool>;

        fn manual_seed(device: i32, seed: u64) -> Result<()>;
        fn seed(device: i32) -> Result<u64>;
        fn initial_seed(device: i32) -> Result<u64>;
        fn get_rng_state(device: i32) -> Result<Vec<u8>>;
        fn set_rng_state(device: i32, state: &[u8]) -> Result<()>;
    }
}

pub use crate::runtime_ffi::*;
