//! The Rust side of the bridge: what the C++ shim calls. Each function is a
//! thin wrapper over the process-wide runtime (`Runtime::global()`); on error
//! it records the error's kind for `last_error_kind` and returns it.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::Mutex;

use openreg_host::abi::*;
use openreg_host::{Error, Runtime, ENGINE_MODULE};

use crate::bridge::ffi::{ActivityFfi, ErrorKind, MemInfoFfi, MemoryStatsFfi};

thread_local! {
    static LAST_ERROR: Cell<ErrorKind> = const { Cell::new(ErrorKind::Other) };
}

/// The bridge's result: the runtime's error, whose Display is the message C++ sees.
type Result<T> = std::result::Result<T, Error>;

/// Records the kind of `e` for the shim and passes it on.
fn track<T>(r: Result<T>) -> Result<T> {
    if let Err(e) = &r {
        let kind = match e.code() {
            ErrorCode::OutOfMemory => ErrorKind::OutOfMemory,
            ErrorCode::InvalidDevice => ErrorKind::InvalidDevice,
            ErrorCode::InvalidArgument => ErrorKind::InvalidArgument,
            _ => ErrorKind::Other,
        };
        LAST_ERROR.with(|k| k.set(kind));
    }
    r
}

pub(crate) fn runtime() -> Result<&'static Runtime> {
    Runtime::global()
}

fn index(device: i32) -> Result<u32> {
    u32::try_from(device).map_err(|_| Error::InvalidDevice {
        index: device.into(),
        count: runtime().map(|rt| rt.device_count()).unwrap_or(0),
    })
}

fn stream_ref(device: i32, stream: i64) -> Result<StreamRef> {
    let id =
        u32::try_from(stream).map_err(|_| Error::InvalidStream { device: device.max(0) as u32, id: stream as u32 })?;
    Ok(StreamRef { device: index(device)?, id })
}

pub fn last_error_kind() -> ErrorKind {
    LAST_ERROR.with(|k| k.get())
}

pub fn device_count() -> Result<i32> {
    track(runtime().map(|rt| rt.device_count() as i32))
}

pub fn device_started(device: i32) -> bool {
    runtime().is_ok_and(|rt| u32::try_from(device).is_ok_and(|d| rt.is_started(d)))
}

pub fn device_of(ptr: u64) -> i32 {
    runtime().ok().and_then(|rt| rt.device_of(ptr)).map_or(-1, |d| d as i32)
}

pub fn allocate(device: i32, size: u64, stream: i64) -> Result<u64> {
    track((|| runtime()?.allocate(index(device)?, size, stream_ref(device, stream)?))())
}

pub fn free(ptr: u64) -> Result<()> {
    track((|| runtime()?.free(ptr))())
}

pub fn record_stream(ptr: u64, device: i32, stream: i64) -> Result<()> {
    track((|| runtime()?.record_stream(ptr, stream_ref(device, stream)?))())
}

pub fn memory_stats(device: i32) -> Result<MemoryStatsFfi> {
    track((|| {
        let s = runtime()?.stats(index(device)?)?;
        Ok(MemoryStatsFfi {
            allocated_bytes: s.allocated_bytes,
            peak_allocated_bytes: s.peak_allocated_bytes,
            allocated_bytes_total: s.allocated_bytes_total,
            freed_bytes_total: s.freed_bytes_total,
            reserved_bytes: s.reserved_bytes,
            peak_reserved_bytes: s.peak_reserved_bytes,
            active_blocks: s.active_blocks,
            peak_active_blocks: s.peak_active_blocks,
            segments: s.segments,
            peak_segments: s.peak_segments,
            allocations: s.allocations,
            frees: s.frees,
            ooms: s.ooms,
            cache_flushes: s.cache_flushes,
        })
    })())
}

pub fn reset_peak_stats(device: i32) -> Result<()> {
    track((|| runtime()?.reset_peak_stats(index(device)?))())
}

pub fn reset_accumulated_stats(device: i32) -> Result<()> {
    track((|| runtime()?.reset_accumulated_stats(index(device)?))())
}

pub fn empty_cache(device: i32) -> Result<()> {
    track((|| runtime()?.empty_cache(index(device)?))())
}

pub fn mem_get_info(device: i32) -> Result<MemInfoFfi> {
    track((|| {
        let info = runtime()?.mem_get_info(index(device)?)?;
        Ok(MemInfoFfi { free_bytes: info.free_bytes, total_bytes: info.total_bytes })
    })())
}

/// # Safety
/// See the bridge declaration: `src` addresses `len` readable bytes, valid
/// until the copy has run when `non_blocking`.
pub unsafe fn copy_h2d(device: i32, stream: i64, dst: u64, src: usize, len: u64, non_blocking: bool) -> Result<()> {
    track((|| {
        let rt = runtime()?;
        let s = stream_ref(device, stream)?;
        if non_blocking {
            // SAFETY: the caller keeps `src` valid until the stream runs the copy.
            unsafe { rt.copy_to_device_async(s, dst, src as u64, len) }
        } else {
            // SAFETY: `src` addresses `len` readable bytes for this call, which
            // blocks until the copy has run.
            let bytes = unsafe { std::slice::from_raw_parts(src as *const u8, len as usize) };
            rt.copy_to_device(s, dst, bytes)
        }
    })())
}

/// # Safety
/// See the bridge declaration: `dst` addresses `len` writable bytes, valid and
/// untouched until the copy has run when `non_blocking`.
pub unsafe fn copy_d2h(device: i32, stream: i64, dst: usize, src: u64, len: u64, non_blocking: bool) -> Result<()> {
    track((|| {
        let rt = runtime()?;
        let s = stream_ref(device, stream)?;
        if non_blocking {
            // SAFETY: the caller keeps `dst` valid and unshared until the copy has run.
            unsafe { rt.copy_to_host_async(s, dst as u64, src, len) }
        } else {
            // SAFETY: `dst` addresses `len` writable bytes that nothing else uses
            // during this call, which blocks until the copy has run.
            let out = unsafe { std::slice::from_raw_parts_mut(dst as *mut u8, len as usize) };
            rt.copy_to_host_slice(s, out, src)
        }
    })())
}

pub fn copy_d2d(
    device: i32,
    stream: i64,
    dst_device: i32,
    dst: u64,
    src_device: i32,
    src: u64,
    len: u64,
) -> Result<()> {
    track((|| {
        runtime()?.copy_device_to_device(
            stream_ref(device, stream)?,
            index(dst_device)?,
            dst,
            index(src_device)?,
            src,
            len,
        )
    })())
}

pub fn create_stream(device: i32, priority: i32) -> Result<i64> {
    track((|| Ok(i64::from(runtime()?.create_stream(index(device)?, priority)?.id)))())
}

pub fn stream_priority(device: i32, stream: i64) -> Result<i32> {
    track((|| runtime()?.stream_priority(stream_ref(device, stream)?))())
}

pub fn query_stream(device: i32, stream: i64) -> Result<bool> {
    track((|| runtime()?.query_stream(stream_ref(device, stream)?))())
}

pub fn synchronize_stream(device: i32, stream: i64) -> Result<()> {
    track((|| runtime()?.synchronize_stream(stream_ref(device, stream)?))())
}

pub fn synchronize_device(device: i32) -> Result<()> {
    track((|| runtime()?.synchronize_device(index(device)?))())
}

pub fn create_event(timing: bool) -> u64 {
    runtime().map_or(0, |rt| rt.create_event(timing))
}

pub fn destroy_event(event: u64) -> Result<()> {
    track((|| runtime()?.destroy_event(event))())
}

pub fn record_event(event: u64, device: i32, stream: i64) -> Result<()> {
    track((|| runtime()?.record_event(event, stream_ref(device, stream)?))())
}

pub fn wait_event(event: u64, device: i32, stream: i64) -> Result<()> {
    track((|| runtime()?.wait_event(stream_ref(device, stream)?, event))())
}

pub fn query_event(event: u64) -> Result<bool> {
    track((|| runtime()?.query_event(event))())
}

pub fn synchronize_event(event: u64) -> Result<()> {
    track((|| runtime()?.synchronize_event(event))())
}

pub fn elapsed_time(start: u64, end: u64) -> Result<f64> {
    track((|| runtime()?.elapsed_time(start, end).map(f64::from))())
}

pub fn set_activity_recording(enabled: bool) {
    if let Ok(rt) = runtime() {
        rt.set_activity_recording(enabled);
    }
}

pub fn set_correlation(id: u64) {
    if let Ok(rt) = runtime() {
        rt.set_correlation(id);
    }
}

pub fn take_activity() -> Vec<ActivityFfi> {
    let Ok(rt) = runtime() else { return Vec::new() };
    rt.take_activity()
        .into_iter()
        .map(|r| ActivityFfi {
            kind: match r.kind {
                ActivityKind::Kernel => 0,
                ActivityKind::CopyHostToDevice => 1,
                ActivityKind::CopyDeviceToHost => 2,
                ActivityKind::CopyDeviceToDevice => 3,
                ActivityKind::CopyPeer => 4,
            },
            name: r.name,
            op: r.op.unwrap_or_default(),
            device: r.device as i32,
            stream: i64::from(r.stream_id),
            start_ns: r.start_ns,
            end_ns: r.end_ns,
            correlation: r.correlation,
            bytes: r.bytes,
            workers: r.workers,
        })
        .collect()
}

/// The index of a kernel of the built-in engine (module 0 on every device).
pub fn engine_kernel(device: i32, name: &str) -> Result<u32> {
    track((|| Ok(runtime()?.module_kernel(index(device)?, ENGINE_MODULE, name)?.index))())
}

pub fn launch_engine(
    device: i32,
    stream: i64,
    kernel: u32,
    params: &[u8],
    pointers: &[u32],
    parallel: bool,
    label: &str,
) -> Result<()> {
    track((|| {
        let block = ParamBlock { bytes: params.to_vec(), pointers: pointers.to_vec() };
        let kernel = KernelRef { module: ENGINE_MODULE, index: kernel };
        let (worker, workers) = if parallel {
            (KernelArg::WorkerIndex, KernelArg::WorkerCount)
        } else {
            (KernelArg::I32(0), KernelArg::I32(1))
        };
        let (rt, stream) = (runtime()?, stream_ref(device, stream)?);
        let args = [KernelArg::Params(block), worker, workers];
        if label.is_empty() {
            rt.launch(stream, kernel, &args)
        } else {
            rt.launch_op(stream, kernel, &args, label)
        }
    })())
}

/// How many workers run a device's parallel launches (the runtime's configuration).
pub fn device_workers() -> Result<u32> {
    track((|| Ok(runtime()?.config().workers))())
}

// ---- pinned host memory -----------------------------------------------------

/// Pinned (page-locked, on CUDA) host blocks: here page-aligned host memory
/// whose addresses are remembered, so `is_pinned` can answer and non-blocking
/// copies from it may run asynchronously.
static PINNED: Mutex<BTreeMap<usize, usize>> = Mutex::new(BTreeMap::new());
const PAGE: usize = 4096;

pub fn pinned_alloc(size: usize) -> Result<usize> {
    let layout = track(
        std::alloc::Layout::from_size_align(size.max(1), PAGE)
            .map_err(|e| Error::InvalidArgument(format!("pinned allocation of {size} bytes: {e}"))),
    )?;
    // SAFETY: the layout has a non-zero size.
    let ptr = unsafe { std::alloc::alloc(layout) } as usize;
    if ptr == 0 {
        return track(Err(Error::HostOutOfMemory { requested: size as u64 }));
    }
    PINNED.lock().unwrap_or_else(|e| e.into_inner()).insert(ptr, size.max(1));
    Ok(ptr)
}

pub fn pinned_free(ptr: usize) {
    let size = PINNED.lock().unwrap_or_else(|e| e.into_inner()).remove(&ptr);
    if let Some(size) = size {
        let layout = std::alloc::Layout::from_size_align(size, PAGE).expect("layout was valid at allocation");
        // SAFETY: `ptr` came from `pinned_alloc` with this layout and is freed once (removed above).
        unsafe { std::alloc::dealloc(ptr as *mut u8, layout) };
    }
}

pub fn is_pinned(ptr: usize) -> bool {
    let pinned = PINNED.lock().unwrap_or_else(|e| e.into_inner());
    pinned.range(..=ptr).next_back().is_some_and(|(&start, &len)| ptr < start + len)
}

// ---- op accounting ---------------------------------------------------------------

// ---- the CPU fallback's policy ---------------------------------------------

/// What the CPU fallback may do (`OPENREG_FALLBACK`, `torch.openreg.set_fallback_policy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FallbackPolicy {
    /// Run ops without a device kernel on the CPU (data goes to the host and back).
    Allow,
    /// The same, with one warning per op name.
    Warn,
    /// Refuse: raise a RuntimeError naming the op before any data moves.
    Error,
}

impl FallbackPolicy {
    pub const NAMES: [&'static str; 3] = ["allow", "warn", "error"];

    pub fn parse(name: &str) -> std::result::Result<FallbackPolicy, String> {
        match name.trim().to_ascii_lowercase().as_str() {
            "allow" => Ok(FallbackPolicy::Allow),
            "warn" => Ok(FallbackPolicy::Warn),
            "error" => Ok(FallbackPolicy::Error),
            other => Err(format!("fallback policy `{other}` is not one of allow, warn, error")),
        }
    }

    pub fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }
}

struct FallbackState {
    policy: FallbackPolicy,
    /// Ops already warned about under `Warn`.
    warned: std::collections::BTreeSet<String>,
}

/// The policy, read from `OPENREG_FALLBACK` on first use.
static FALLBACK: Mutex<Option<FallbackState>> = Mutex::new(None);

fn with_fallback<T>(f: impl FnOnce(&mut FallbackState) -> T) -> Result<T> {
    let mut guard = FALLBACK.lock().unwrap_or_else(|e| e.into_inner());
    if guard.is_none() {
        let policy = match std::env::var("OPENREG_FALLBACK") {
            Ok(value) => FallbackPolicy::parse(&value).map_err(|reason| Error::Config {
                var: "OPENREG_FALLBACK",
                value: value.clone(),
                reason,
            })?,
            Err(_) => FallbackPolicy::Allow,
        };
        *guard = Some(FallbackState { policy, warned: Default::default() });
    }
    Ok(f(guard.as_mut().expect("initialized above")))
}

pub fn fallback_policy() -> Result<FallbackPolicy> {
    with_fallback(|state| state.policy)
}

pub fn set_fallback_policy(policy: FallbackPolicy) -> Result<()> {
    with_fallback(|state| {
        state.policy = policy;
        state.warned.clear();
    })
}

/// What the fallback does for one run of `op`: 0 run it, 1 warn (first run
/// under `warn`) and run it, 2 refuse.
pub fn fallback_decision(op: &str) -> Result<u8> {
    track(with_fallback(|state| match state.policy {
        FallbackPolicy::Allow => 0,
        FallbackPolicy::Warn => u8::from(state.warned.insert(op.to_string())),
        FallbackPolicy::Error => 2,
    }))
}

/// Per-op counts: (ran as a device kernel, ran through the CPU fallback).
pub(crate) static OP_COUNTS: Mutex<BTreeMap<String, (u64, u64)>> = Mutex::new(BTreeMap::new());

pub fn count_op(op: &str, on_device: bool) {
    let mut counts = OP_COUNTS.lock().unwrap_or_else(|e| e.into_inner());
    let entry = match counts.get_mut(op) {
        Some(entry) => entry,
        None => counts.entry(op.to_string()).or_default(),
    };
    if on_device {
        entry.0 += 1;
    } else {
        entry.1 += 1;
    }
}
