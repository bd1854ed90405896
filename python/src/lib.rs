//! `torch_openreg._C`: the compiled half of the `torch_openreg` package.
//!
//! Loading it runs the C++ shim's static registrations with c10/ATen
//! (allocator, device guard, operators, fallback); `_init` registers the rest
//! (hooks). The functions below back `torch.openreg` (see
//! `torch_openreg/openreg/__init__.py`); they are glue over the runtime
//! (`openreg_host`) and the shim, with no logic of their own.

mod bridge;
mod errors;
mod runtime_ffi;

use std::collections::BTreeMap;

use openreg_host::abi::*;
use openreg_host::Error;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::bridge::ffi;
use crate::errors::{OpenRegError, PyResultOr};
use crate::runtime_ffi::runtime;

fn device_index(device: i64) -> Result<u32, Error> {
    let count = runtime()?.device_count();
    u32::try_from(device).ok().filter(|&d| d < count).ok_or(Error::InvalidDevice { index: device, count })
}

/// The thread that imported the module: CPython runs signal handlers there only.
static MAIN_THREAD: std::sync::OnceLock<std::thread::ThreadId> = std::sync::OnceLock::new();

/// The runtime's interrupt check: whether Ctrl-C (SIGINT) arrived while the
/// main thread waits for a device. It takes the pending SIGINT: a wait that
/// returns to Python through `torch.openreg` raises it again there, as
/// KeyboardInterrupt (`errors.rs`); one that returns through torch's C++
/// dispatcher (`x.cpu()`, `x.item()`) becomes a RuntimeError saying so.
/// (Leaving it pending instead would make Python raise KeyboardInterrupt in
/// the middle of printing that RuntimeError's traceback.)
fn ctrl_c_pending() -> bool {
    if MAIN_THREAD.get() != Some(&std::thread::current().id()) {
        return false;
    }
    Python::try_attach(|_py| {
        // SAFETY: attached to the interpreter on its main thread, where
        // CPython keeps the SIGINT flag this reads and clears.
        unsafe { pyo3::ffi::PyOS_InterruptOccurred() != 0 }
    })
    .unwrap_or(false)
}

/// Registers the hooks with torch. Called once by `import torch_openreg`.
#[pyfunction]
fn _init(py: Python<'_>) -> PyResultOr<()> {
    ffi::register_all()?;
    let threading = py.import("threading")?;
    if threading.call_method0("current_thread")?.is(&threading.call_method0("main_thread")?) {
        let _ = MAIN_THREAD.set(std::thread::current().id());
    }
    openreg_host::set_interrupt_check(ctrl_c_pending);
    Ok(())
}

/// Whether this process is a fork() child of a process that had started
/// openreg devices (which then cannot be used here).
#[pyfunction]
fn _in_bad_fork() -> bool {
    openreg_host::in_bad_fork()
}

/// The number of openreg devices; 0 (with a warning) if the configuration is broken.
#[pyfunction]
fn device_count(py: Python<'_>) -> PyResult<u32> {
    match runtime() {
        Ok(rt) => Ok(rt.device_count()),
        Err(e) => {
            let warnings = py.import("warnings")?;
            warnings.call_method1("warn", (format!("openreg devices are unavailable: {e}"),))?;
            Ok(0)
        }
    }
}

/// The calling thread's current device.
#[pyfunction]
fn current_device() -> PyResultOr<i32> {
    Ok(ffi::current_device()?)
}

/// Sets the calling thread's current device.
#[pyfunction]
fn set_device(device: i64) -> PyResultOr<()> {
    let device = device_index(device)?;
    Ok(ffi::set_device(device as i32)?)
}

/// Waits for all work on a device and reports the first error it raised.
#[pyfunction]
fn synchronize(py: Python<'_>, device: i64) -> PyResultOr<()> {
    let device = device_index(device)?;
    py.detach(|| runtime()?.synchronize_device(device))?;
    Ok(())
}

/// Allocator statistics of a device, as a dict of integers.
#[pyfunction]
fn memory_stats(py: Python<'_>, device: i64) -> PyResultOr<Bound<'_, PyDict>> {
    let s = runtime()?.stats(device_index(device)?)?;
    let d = PyDict::new(py);
    let fields = [
        ("allocated_bytes", s.allocated_bytes),
        ("peak_allocated_bytes", s.peak_allocated_bytes),
        ("allocated_bytes_total", s.allocated_bytes_total),
        ("freed_bytes_total", s.freed_bytes_total),
        ("reserved_bytes", s.reserved_bytes),
        ("peak_reserved_bytes", s.peak_reserved_bytes),
        ("active_blocks", s.active_blocks),
        ("peak_active_blocks", s.peak_active_blocks),
        ("segments", s.segments),
        ("peak_segments", s.peak_segments),
        ("allocations", s.allocations),
        ("frees", s.frees),
        ("ooms", s.ooms),
        ("cache_flushes", s.cache_flushes),
    ];
    for (k, v) in fields {
        d.set_item(k, v)?;
    }
    Ok(d)
}

/// Runs `f` on a device if it has started: a device that has not started
/// holds no memory and no statistics, and is not started for this.
fn if_started(device: i64, f: impl FnOnce(&openreg_host::Runtime, u32) -> Result<(), Error>) -> PyResultOr<()> {
    let (rt, device) = (runtime()?, device_index(device)?);
    if rt.is_started(device) {
        f(rt, device)?;
    }
    Ok(())
}

/// Sets a device's peak statistics to their current values.
#[pyfunction]
fn reset_peak_memory_stats(device: i64) -> PyResultOr<()> {
    if_started(device, |rt, d| rt.reset_peak_stats(d))
}

/// Sets a device's running totals (bytes and counts allocated and freed,
/// out-of-memory errors, cache flushes) to zero.
#[pyfunction]
fn reset_accumulated_memory_stats(device: i64) -> PyResultOr<()> {
    if_started(device, |rt, d| rt.reset_accumulated_stats(d))
}

/// Returns a device's cached, wholly free segments to it.
#[pyfunction]
fn empty_cache(device: i64) -> PyResultOr<()> {
    if_started(device, |rt, d| rt.empty_cache(d))
}

/// `(parallel, single)`: how many launches a device ran on all of its workers,
/// and how many on one.
#[pyfunction]
fn launch_counts(device: i64) -> PyResultOr<(u64, u64)> {
    Ok(runtime()?.launch_counts(device_index(device)?)?)
}

/// `(free, total)` bytes of a device.
#[pyfunction]
fn mem_get_info(device: i64) -> PyResultOr<(u64, u64)> {
    let info = runtime()?.mem_get_info(device_index(device)?)?;
    Ok((info.free_bytes, info.total_bytes))
}

/// Static facts about a device, as a dict.
#[pyfunction]
fn device_properties(py: Python<'_>, device: i64) -> PyResultOr<Bound<'_, PyDict>> {
    let p = runtime()?.properties(device_index(device)?)?;
    let d = PyDict::new(py);
    d.set_item("name", format!("openreg:{} (WebAssembly, wasmtime)", p.index))?;
    d.set_item("total_memory", p.capacity_bytes)?;
    d.set_item("memory64", p.memory64)?;
    d.set_item("kernel_timeout_ms", p.kernel_timeout_ms)?;
    d.set_item("workers", p.workers)?;
    Ok(d)
}

/// Seeds a device's default generator.
#[pyfunction]
fn manual_seed(device: i64, seed: u64) -> PyResultOr<()> {
    Ok(ffi::manual_seed(device_index(device)? as i32, seed)?)
}

/// Seeds a device's default generator with a random seed and returns it.
#[pyfunction]
fn seed(device: i64) -> PyResultOr<u64> {
    Ok(ffi::seed(device_index(device)? as i32)?)
}

/// The seed a device's default generator started from.
#[pyfunction]
fn initial_seed(device: i64) -> PyResultOr<u64> {
    Ok(ffi::initial_seed(device_index(device)? as i32)?)
}

/// A device generator's state, as bytes.
#[pyfunction]
fn get_rng_state(py: Python<'_>, device: i64) -> PyResultOr<Bound<'_, PyBytes>> {
    let state = ffi::get_rng_state(device_index(device)? as i32)?;
    Ok(PyBytes::new(py, &state))
}

/// Restores a device generator's state from bytes.
#[pyfunction]
fn set_rng_state(device: i64, state: &[u8]) -> PyResultOr<()> {
    Ok(ffi::set_rng_state(device_index(device)? as i32, state)?)
}

/// The priority of a stream (lower runs first).
#[pyfunction]
fn stream_priority(device: i64, stream_id: i64) -> PyResultOr<i32> {
    let device = device_index(device)?;
    let id = u32::try_from(stream_id).map_err(|_| Error::InvalidStream { device, id: stream_id as u32 })?;
    Ok(runtime()?.stream_priority(StreamRef { device, id })?)
}

/// Loads a kernel module (wasm binary or WAT text) onto a device; returns its module id.
#[pyfunction]
fn load_module(py: Python<'_>, device: i64, name: &str, wasm: &[u8]) -> PyResultOr<u32> {
    let device = device_index(device)?;
    Ok(py.detach(|| runtime()?.load_module(device, name, wasm))?)
}

/// The kernels a loaded module exports: `[(name, [param types])]`.
#[pyfunction]
fn module_kernels(device: i64, module: u32) -> PyResultOr<Vec<(String, Vec<&'static str>)>> {
    let kernels = runtime()?.module_kernels(device_index(device)?, module)?;
    Ok(kernels.into_iter().map(|k| (k.name, k.params.iter().map(|p| p.wit_name()).collect())).collect())
}

/// A kernel named by its export name, or by its index in its module's
/// kernel list (`module_kernels`), which needs the module id.
#[derive(FromPyObject)]
enum KernelSelector {
    Index(u32),
    Name(String),
}

/// The bytes of a tensor descriptor (`openreg_tensor` of the kernel SDK,
/// `device-kernels/sdk/openreg_kernel.h`): 160 bytes, the device address of
/// the data first (relocated to an offset by the runtime).
const TENSOR_DESCRIPTOR_BYTES: usize = 160;
/// The most dimensions a tensor descriptor holds.
const TENSOR_DESCRIPTOR_DIMS: usize = 8;

/// A tensor as a launch argument: `(data_ptr, numel, dtype, itemsize, flags,
/// sizes, strides)`, laid out as the SDK's `openreg_tensor`.
fn tensor_descriptor(view: &Bound<'_, pyo3::types::PyTuple>) -> Result<KernelArg, OpenRegError> {
    let (data, numel, dtype, itemsize, flags, sizes, strides): (u64, i64, i32, i32, u32, Vec<i64>, Vec<i64>) =
        view.extract()?;
    if sizes.len() > TENSOR_DESCRIPTOR_DIMS || sizes.len() != strides.len() {
        return Err(Error::InvalidArgument(format!(
            "a tensor argument has {} sizes and {} strides; a kernel's tensor view holds at most \
             {TENSOR_DESCRIPTOR_DIMS} dimensions (reshape it, or pass its data pointer)",
            sizes.len(),
            strides.len()
        ))
        .into());
    }
    let mut bytes = Vec::with_capacity(TENSOR_DESCRIPTOR_BYTES);
    bytes.extend_from_slice(&data.to_le_bytes());
    bytes.extend_from_slice(&numel.to_le_bytes());
    for word in [dtype, sizes.len() as i32, itemsize] {
        bytes.extend_from_slice(&word.to_le_bytes());
    }
    bytes.extend_from_slice(&flags.to_le_bytes());
    for list in [&sizes, &strides] {
        for i in 0..TENSOR_DESCRIPTOR_DIMS {
            bytes.extend_from_slice(&list.get(i).copied().unwrap_or(0).to_le_bytes());
        }
    }
    debug_assert_eq!(bytes.len(), TENSOR_DESCRIPTOR_BYTES);
    Ok(KernelArg::Params(ParamBlock { bytes, pointers: vec![0] }))
}

/// Queues a kernel launch on a stream (`stream_id` None: the current stream
/// of `device`). `kernel` is an export name, or an index into the module's
/// kernels (then `module` is required); `module` (the id `load_module`
/// returned) names the module the kernel is in; without it the name must be
/// exported by exactly one loaded module. `args`: device pointers (ints that
/// `device_of` recognises: `tensor.data_ptr()`), other ints (i32 or i64 as the
/// kernel's signature says), floats (f32 or f64), and tensor views, as tuples
/// `(data_ptr, numel, dtype, itemsize, flags, sizes, strides)` that reach the
/// kernel as the device offset of an SDK `openreg_tensor`, and the strings
/// `"worker-index"` / `"worker-count"` (a parallel launch, WIT `kernel-arg`).
/// `op` names the operator the launch is for: a trap then names it.
#[pyfunction]
#[pyo3(signature = (device, stream_id, kernel, args, module = None, op = None))]
fn launch(
    device: i64,
    stream_id: Option<i64>,
    kernel: KernelSelector,
    args: Vec<Bound<'_, PyAny>>,
    module: Option<u32>,
    op: Option<&str>,
) -> PyResultOr<()> {
    let device = device_index(device)?;
    let stream_id = match stream_id {
        Some(id) => id,
        None => ffi::current_stream_id(device as i32)?,
    };
    let id = u32::try_from(stream_id)
        .map_err(|_| Error::InvalidArgument(format!("stream id {stream_id} is not a stream of openreg:{device}")))?;
    let rt = runtime()?;
    let kernel = match (module, kernel) {
        (Some(module), KernelSelector::Index(index)) => KernelRef { module, index },
        (Some(module), KernelSelector::Name(name)) => rt.module_kernel(device, module, &name)?,
        (None, KernelSelector::Name(name)) => rt.find_kernel(device, &name)?,
        (None, KernelSelector::Index(index)) => {
            return Err(Error::InvalidArgument(format!("kernel index {index} needs the module id it indexes")).into())
        }
    };
    let info = rt.module_kernels(device, kernel.module)?.into_iter().nth(kernel.index as usize).ok_or_else(|| {
        Error::KernelNotFound { device, name: format!("#{} (in module {})", kernel.index, kernel.module) }
    })?;
    // Arguments beyond the signature are converted as i64; the runtime's own
    // signature check then reports the count mismatch.
    let mut converted = Vec::with_capacity(args.len());
    for (i, arg) in args.iter().enumerate() {
        let param = info.params.get(i).unwrap_or(&ValueType::I64);
        if let Ok(view) = arg.cast::<pyo3::types::PyTuple>() {
            converted.push(tensor_descriptor(view)?);
            continue;
        }
        if let Ok(name) = arg.cast::<pyo3::types::PyString>() {
            converted.push(match name.to_str()? {
                "worker-index" => KernelArg::WorkerIndex,
                "worker-count" => KernelArg::WorkerCount,
                other => {
                    return Err(Error::InvalidArgument(format!(
                        "kernel `{}` argument {i} is the string {other:?}; the only strings a launch takes are \
                         \"worker-index\" and \"worker-count\"",
                        info.name
                    ))
                    .into())
                }
            });
            continue;
        }
        let value = match param {
            ValueType::I32 | ValueType::I64 => {
                if arg.is_instance_of::<pyo3::types::PyFloat>() {
                    return Err(Error::InvalidArgument(format!(
                        "kernel `{}` parameter {i} is {} but the argument is the float {arg}",
                        info.name,
                        param.wit_name()
                    ))
                    .into());
                }
                let v: i64 = arg.extract()?;
                if v > 0 && rt.device_of(v as u64).is_some() {
                    KernelArg::Ptr(v as u64)
                } else if *param == ValueType::I32 {
                    KernelArg::I32(
                        i32::try_from(v).map_err(|_| Error::InvalidArgument(format!("{v} does not fit i32")))?,
                    )
                } else {
                    KernelArg::I64(v)
                }
            }
            ValueType::F32 => KernelArg::F32(arg.extract::<f64>()? as f32),
            ValueType::F64 => KernelArg::F64(arg.extract()?),
        };
        converted.push(value);
    }
    let stream = StreamRef { device, id };
    match op {
        Some(op) => rt.launch_op(stream, kernel, &converted, op)?,
        None => rt.launch(stream, kernel, &converted)?,
    }
    Ok(())
}

/// The kernel SDK's source files, `{file name: text}`, as this build of the
/// package was compiled with (`device-kernels/sdk/`): the kernel build helper
/// (`torch_openreg.kernels.build`) writes them out for the compilers.
#[pyfunction]
fn sdk_files() -> BTreeMap<&'static str, &'static str> {
    BTreeMap::from([
        ("openreg_kernel.h", include_str!("../../device-kernels/sdk/openreg_kernel.h")),
        ("openreg_kernel.rs", include_str!("../../device-kernels/sdk/openreg_kernel.rs")),
    ])
}

/// The compiler flags the built-in kernel modules are built with, which
/// `torch_openreg.kernels.build` uses for user kernels: `{"rustc": [...],
/// "cc": [...]}` (`device-kernels/flags.rs`).
#[pyfunction]
fn kernel_build_flags() -> BTreeMap<&'static str, &'static [&'static str]> {
    BTreeMap::from([("rustc", openreg_device_kernels::RUSTC_FLAGS), ("cc", openreg_device_kernels::CC_FLAGS)])
}

/// A module in the WebAssembly text format (WAT) as a wasm binary; a binary
/// is returned unchanged. Raises ValueError with the parser's message.
#[pyfunction]
fn wat_to_wasm<'py>(py: Python<'py>, text: &[u8]) -> PyResultOr<Bound<'py, PyBytes>> {
    let wasm = wat::parse_bytes(text).map_err(|e| Error::InvalidArgument(format!("not a wasm module: {e}")))?;
    Ok(PyBytes::new(py, &wasm))
}

/// Per-op counts since start (or the last reset): `{op: (device_kernel, fallback)}`.
#[pyfunction]
fn op_counts() -> BTreeMap<String, (u64, u64)> {
    runtime_ffi::OP_COUNTS.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Clears the per-op counts.
#[pyfunction]
fn reset_op_counts() {
    runtime_ffi::OP_COUNTS.lock().unwrap_or_else(|e| e.into_inner()).clear();
}

/// Whether an ATen op ("aten::mse_loss", "aten::add.Tensor") runs through
/// the CPU fallback on openreg tensors: it has no device kernel and no
/// composite implementation over other ops.
#[pyfunction]
fn runs_through_fallback(op: &str) -> PyResultOr<bool> {
    Ok(ffi::runs_through_fallback(op)?)
}

/// The CPU fallback's policy: "allow", "warn" or "error".
#[pyfunction]
fn fallback_policy() -> PyResultOr<&'static str> {
    Ok(runtime_ffi::fallback_policy()?.name())
}

/// Sets the CPU fallback's policy ("allow", "warn" or "error"); raises
/// ValueError for anything else.
#[pyfunction]
fn set_fallback_policy(policy: &str) -> PyResultOr<()> {
    let policy = runtime_ffi::FallbackPolicy::parse(policy).map_err(Error::InvalidArgument)?;
    Ok(runtime_ffi::set_fallback_policy(policy)?)
}

#[pymodule]
#[pyo3(name = "_C")]
fn torch_openreg_c(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(_init, m)?)?;
    m.add_function(wrap_pyfunction!(device_count, m)?)?;
    m.add_function(wrap_pyfunction!(current_device, m)?)?;
    m.add_function(wrap_pyfunction!(set_device, m)?)?;
    m.add_function(wrap_pyfunction!(synchronize, m)?)?;
    m.add_function(wrap_pyfunction!(memory_stats, m)?)?;
    m.add_function(wrap_pyfunction!(reset_peak_memory_stats, m)?)?;
    m.add_function(wrap_pyfunction!(reset_accumulated_memory_stats, m)?)?;
    m.add_function(wrap_pyfunction!(_in_bad_fork, m)?)?;
    m.add_function(wrap_pyfunction!(empty_cache, m)?)?;
    m.add_function(wrap_pyfunction!(mem_get_info, m)?)?;
    m.add_function(wrap_pyfunction!(launch_counts, m)?)?;
    m.add_function(wrap_pyfunction!(device_properties, m)?)?;
    m.add_function(wrap_pyfunction!(manual_seed, m)?)?;
    m.add_function(wrap_pyfunction!(seed, m)?)?;
    m.add_function(wrap_pyfunction!(initial_seed, m)?)?;
    m.add_function(wrap_pyfunction!(get_rng_state, m)?)?;
    m.add_function(wrap_pyfunction!(set_rng_state, m)?)?;
    m.add_function(wrap_pyfunction!(stream_priority, m)?)?;
    m.add_function(wrap_pyfunction!(load_module, m)?)?;
    m.add_function(wrap_pyfunction!(module_kernels, m)?)?;
    m.add_function(wrap_pyfunction!(launch, m)?)?;
    m.add_function(wrap_pyfunction!(sdk_files, m)?)?;
    m.add_function(wrap_pyfunction!(kernel_build_flags, m)?)?;
    m.add_function(wrap_pyfunction!(wat_to_wasm, m)?)?;
    m.add_function(wrap_pyfunction!(op_counts, m)?)?;
    m.add_function(wrap_pyfunction!(reset_op_counts, m)?)?;
    m.add_function(wrap_pyfunction!(fallback_policy, m)?)?;
    m.add_function(wrap_pyfunction!(runs_through_fallback, m)?)?;
    m.add_function(wrap_pyfunction!(set_fallback_policy, m)?)?;
    Ok(())
}
