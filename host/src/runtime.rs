//! The runtime: the wasmtime engine, the device-address space, the devices
//! (started lazily), the compiled-module cache, the events and the watchdog.
//!
//! Engines are process-wide, one per configuration that affects code
//! generation, and so is the compiled-module cache: every runtime of a process
//! compiles the built-in engine module once (it is large, and compiling it
//! per runtime would make each new runtime's first device slow to start).
//! Each engine has one watchdog clock, started with the first device.
//!
//! Every device address that enters the runtime goes through
//! [`RuntimeInner::region`]: the one place that checks it names the device the
//! operation says, and that its whole byte range lies in that device's heap.
//!
//! Fork: a device's executor thread does not survive `fork()`. A child of a
//! process that had started a device is poisoned: every call that would
//! start, use or wait for a device fails at once with [`Error::Forked`]
//! (CUDA's rule and message), instead of waiting for a thread that is gone.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Once, OnceLock};

use crate::abi::{DeviceIndex, DevicePtr, StreamRef};
use crate::address_space::AddressSpace;
use crate::config::Config;
use crate::device::{lock, DeviceShared, EPOCH_TICK};
use crate::error::{Error, Result};
use crate::event::EventInner;
use crate::layout;
use crate::module::{self, KernelModule};

/// Whether a device of any runtime has started in this process (or in a
/// parent it was forked from).
static DEVICES_STARTED: AtomicBool = AtomicBool::new(false);
/// Set in the child by `fork()` when a device had started in the parent.
static FORKED_CHILD: AtomicBool = AtomicBool::new(false);

/// Whether this process is a fork child whose parent had started devices.
pub fn in_bad_fork() -> bool {
    FORKED_CHILD.load(Ordering::Relaxed)
}

/// Registers the fork handler once per process.
fn watch_forks() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        #[cfg(unix)]
        {
            extern "C" fn child() {
                // Only atomics here: the child of a threaded process may call
                // nothing that is not async-signal-safe.
                if DEVICES_STARTED.load(Ordering::Relaxed) {
                    FORKED_CHILD.store(true, Ordering::Relaxed);
                }
            }
            // SAFETY: `child` is async-signal-safe (two atomic operations) and
            // lives for the whole process; no prepare or parent handler.
            unsafe { libc::pthread_atfork(None, None, Some(child)) };
        }
    });
}

type CompiledEntry = (Vec<u8>, bool, Arc<KernelModule>);
/// The process's engines, by memory reservation and perf map setting.
type Engines = Mutex<HashMap<(u64, bool), Arc<SharedEngine>>>;

/// A wasmtime engine shared by the runtimes of a process with the same
/// memory reservation (and perf map setting), with its compiled modules and
/// its watchdog clock.
struct SharedEngine {
    engine: wasmtime::Engine,
    /// Compiled modules by content hash, with the bytes and the device kind
    /// (memory64 or not) to rule out collisions.
    compiled: Mutex<HashMap<u64, Vec<CompiledEntry>>>,
    /// Starts the watchdog clock with the first device (not with the engine,
    /// so that a fork child of a process that never started a device still
    /// gets a clock when it starts one).
    clock: Once,
}

impl SharedEngine {
    /// The engine for devices of `memory_bytes`, created on first use;
    /// `perf_map` lists its compiled functions for Linux `perf`.
    fn get(memory_bytes: u64, perf_map: bool) -> Result<Arc<SharedEngine>> {
        static ENGINES: OnceLock<Engines> = OnceLock::new();
        let reservation = memory_bytes.max(1 << 32);
        let mut engines = lock(ENGINES.get_or_init(Default::default));
        if let Some(shared) = engines.get(&(reservation, perf_map)) {
            return Ok(Arc::clone(shared));
        }
        let mut wasm = wasmtime::Config::new();
        wasm.wasm_simd(true)
            .wasm_relaxed_simd(true)
            // Relaxed SIMD as one semantics on every host (a fused multiply-add is
            // fused even where the CPU has no FMA), so results do not depend on it.
            .relaxed_simd_deterministic(true)
            .wasm_bulk_memory(true)
            .wasm_multi_value(true)
            .wasm_memory64(true)
            // Device memory is a shared memory, run on by the device's workers at once.
            .wasm_threads(true)
            .shared_memory(true)
            .epoch_interruption(true)
            .cranelift_opt_level(wasmtime::OptLevel::Speed)
            // Device memory never moves: the reservation covers its full size.
            .memory_reservation(reservation)
            .memory_may_move(false);
        if perf_map {
            wasm.profiler(wasmtime::ProfilingStrategy::PerfMap);
        }
        let engine = wasmtime::Engine::new(&wasm)
            .map_err(|e| Error::DeviceLost { device: 0, reason: format!("cannot create the wasm engine: {e:#}") })?;
        let shared = Arc::new(SharedEngine { engine, compiled: Mutex::new(HashMap::new()), clock: Once::new() });
        engines.insert((reservation, perf_map), Arc::clone(&shared));
        Ok(shared)
    }
}

/// A handle to the device runtime. Cloning it is cheap; all clones share the
/// same devices. Its API is the device ABI of `wit/`: the traits in
/// [`crate::abi`], which `Runtime` implements (see `api.rs`).
#[derive(Clone)]
pub struct Runtime {
    pub(crate) inner: Arc<RuntimeInner>,
}

pub(crate) struct RuntimeInner {
    pub(crate) config: Config,
    shared: Arc<SharedEngine>,
    pub(crate) space: AddressSpace,
    devices: Vec<OnceLock<Arc<DeviceShared>>>,
    starting: Mutex<()>,
    pub(crate) events: Mutex<HashMap<u64, Arc<EventInner>>>,
    pub(crate) next_event: AtomicU64,
}

impl Runtime {
    /// A runtime with the given configuration. Devices start on first use.
    pub fn new(config: Config) -> Result<Runtime> {
        config.validate()?;
        watch_forks();
        let shared = SharedEngine::get(config.memory_bytes, config.perf_map)?;
        let space = AddressSpace::reserve(config.device_count, config.memory_bytes)?;
        Ok(Runtime {
            inner: Arc::new(RuntimeInner {
                devices: (0..config.device_count).map(|_| OnceLock::new()).collect(),
                config,
                shared,
                space,
                starting: Mutex::new(()),
                events: Mutex::new(HashMap::new()),
                next_event: AtomicU64::new(1),
            }),
        })
    }

    /// A runtime configured from the `OPENREG_*` environment variables.
    pub fn from_env() -> Result<Runtime> {
        Runtime::new(Config::from_env()?)
    }

    /// The process-wide runtime, configured from the environment on first use.
    pub fn global() -> Result<&'static Runtime> {
        static GLOBAL: OnceLock<Result<Runtime>> = OnceLock::new();
        GLOBAL.get_or_init(Runtime::from_env).as_ref().map_err(Clone::clone)
    }

    /// Whether a device has started (without starting it).
    pub fn is_started(&self, device: DeviceIndex) -> bool {
        self.inner.devices.get(device as usize).is_some_and(|d| d.get().is_some())
    }

    /// The runtime's configuration.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// How many launches a device has run on all of its workers (parallel
    /// launches), and how many on one: `(parallel, single)`.
    pub fn launch_counts(&self, device: DeviceIndex) -> Result<(u64, u64)> {
        let dev = self.inner.device(device)?;
        Ok((dev.parallel_launches.load(Ordering::Relaxed), dev.single_launches.load(Ordering::Relaxed)))
    }

    /// How many parts of a device's parallel launches host threads ran while
    /// they waited on it (see `device.rs`: a waiting thread lends a hand).
    pub fn host_parts(&self, device: DeviceIndex) -> Result<u64> {
        Ok(self.inner.device(device)?.host_parts())
    }

    /// Loads the text or binary wasm `wasm` onto a device; returns its module id.
    /// Compiles once per runtime for the same bytes.
    pub(crate) fn load(&self, device: DeviceIndex, name: &str, wasm: &[u8]) -> Result<u32> {
        let dev = self.inner.device(device)?;
        let module = self.inner.compile(name, wasm, false)?;
        dev.load(module)
    }

    /// Copies device bytes into a host slice; waits as `copy-to-host` does.
    pub fn copy_to_host_slice(&self, stream: StreamRef, dst: &mut [u8], src: DevicePtr) -> Result<()> {
        if dst.is_empty() {
            return self.inner.device(stream.device)?.check_stream(stream.id);
        }
        let len = dst.len() as u64;
        let (dev, offset) = self.inner.region(src, len, stream.device, "source")?;
        // Blocking until the copy has run (or was cancelled) keeps `dst`
        // borrowed for as long as the executor may write it.
        dev.copy_blocking(
            stream.id,
            crate::device::Task::CopyOut { src: offset, dst: crate::memory_view::HostPtr(dst.as_mut_ptr()), len },
        )
    }
}

impl RuntimeInner {
    /// A started device; starts it on first use.
    pub(crate) fn device(&self, index: DeviceIndex) -> Result<&Arc<DeviceShared>> {
        let slot = self
            .devices
            .get(index as usize)
            .ok_or(Error::InvalidDevice { index: index.into(), count: self.config.device_count })?;
        if in_bad_fork() {
            return Err(Error::Forked);
        }
        if let Some(dev) = slot.get() {
            return Ok(dev);
        }
        let _guard = lock(&self.starting);
        if let Some(dev) = slot.get() {
            return Ok(dev);
        }
        DEVICES_STARTED.store(true, Ordering::Relaxed);
        let engine = self.shared.engine.clone();
        self.shared.clock.call_once(|| start_watchdog_clock(engine));
        let dev = DeviceShared::start(&self.shared.engine, index, &self.config)?;
        let engine = if self.config.memory64 {
            openreg_device_kernels::ENGINE64_WASM
        } else {
            openreg_device_kernels::ENGINE32_WASM
        };
        let mut builtins = vec![(openreg_device_kernels::ENGINE_MODULE_NAME, engine)];
        if !self.config.memory64 {
            builtins.push((openreg_device_kernels::BUILTIN_MODULE_NAME, openreg_device_kernels::BUILTIN_WASM));
        }
        for (name, wasm) in builtins {
            if let Err(e) = self.compile(name, wasm, true).and_then(|module| dev.load(module)) {
                dev.shutdown();
                return Err(e);
            }
        }
        Ok(slot.get_or_init(|| dev))
    }

    /// Compiles a module once per runtime and content; `builtin` modules
    /// (this library's own) through the configured compile cache.
    pub(crate) fn compile(&self, name: &str, wasm: &[u8], builtin: bool) -> Result<Arc<KernelModule>> {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        wasm.hash(&mut hasher);
        name.hash(&mut hasher);
        let key = hasher.finish();
        if let Some(found) = lock(&self.shared.compiled).get(&key).and_then(|v| {
            v.iter().find(|(b, memory64, m)| b == wasm && *memory64 == self.config.memory64 && m.name == name)
        }) {
            return Ok(Arc::clone(&found.2));
        }
        let cache = self.config.compile_cache.as_deref().filter(|_| builtin);
        let module = Arc::new(module::prepare(&self.shared.engine, name, wasm, self.config.memory64, cache)?);
        lock(&self.shared.compiled).entry(key).or_default().push((
            wasm.to_vec(),
            self.config.memory64,
            Arc::clone(&module),
        ));
        Ok(module)
    }

    /// The one check of a device address entering the runtime: `ptr` must be
    /// an address on `device` (the device the operation names), and the whole
    /// range `[ptr, ptr + len)` must lie in that device's heap, the only part
    /// of device memory that holds data. `len` 0 checks the address alone (a
    /// kernel argument, whose extent only the kernel knows). Returns the
    /// device and the offset of `ptr` in its memory.
    pub(crate) fn region(
        &self,
        ptr: DevicePtr,
        len: u64,
        device: DeviceIndex,
        what: &str,
    ) -> Result<(&Arc<DeviceShared>, u64)> {
        let (actual, offset) = self.decode(ptr)?;
        if actual != device {
            return Err(Error::WrongDevice { what: format!("the {what} pointer {ptr:#x}"), expected: device, actual });
        }
        let dev = self.device(device)?;
        let inside = offset >= layout::HEAP_START && offset.checked_add(len).is_some_and(|end| end <= dev.capacity);
        if !inside {
            return Err(Error::OutOfBounds { device, offset, len, start: layout::HEAP_START, end: dev.capacity });
        }
        Ok((dev, offset))
    }

    /// The device and offset of any device address.
    pub(crate) fn decode(&self, ptr: DevicePtr) -> Result<(DeviceIndex, u64)> {
        if ptr == 0 {
            return Err(Error::InvalidPointer { ptr, reason: "null pointer" });
        }
        let (device, offset) = self
            .space
            .decode(ptr)
            .ok_or(Error::InvalidPointer { ptr, reason: "not a device address of this runtime" })?;
        Ok((device, offset))
    }

    /// Started devices, without starting any.
    pub(crate) fn started(&self) -> impl Iterator<Item = &Arc<DeviceShared>> {
        self.devices.iter().filter_map(OnceLock::get)
    }

    pub(crate) fn event(&self, id: u64) -> Result<Arc<EventInner>> {
        if in_bad_fork() {
            return Err(Error::Forked);
        }
        lock(&self.events).get(&id).cloned().ok_or(Error::InvalidEvent { event: id, reason: "no such event" })
    }
}

impl Drop for RuntimeInner {
    fn drop(&mut self) {
        for dev in self.started() {
            dev.shutdown();
        }
    }
}

/// The watchdog's clock: advances the engine's epoch every [`EPOCH_TICK`];
/// a kernel whose deadline (in ticks) passes traps with `Interrupt`. It runs
/// for the life of the process, as its engine does (a detached thread that
/// never keeps the process from exiting).
fn start_watchdog_clock(engine: wasmtime::Engine) {
    let _ = std::thread::Builder::new().name("openreg-watchdog".into()).spawn(move || loop {
        std::thread::sleep(EPOCH_TICK);
        engine.increment_epoch();
    });
}
