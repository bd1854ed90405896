//! One virtual device: its wasmtime store and memory, its allocator, its loaded
//! kernel modules, and its executor thread with the stream queues it drains.
//!
//! Threads: any host thread may enqueue work, allocate, or wait; the executor
//! thread alone runs queued work, one task at a time. Locks, always taken in
//! this order when nested: `allocator` -> `sched` -> an event's state. `exec`
//! (the store) is taken alone, by the executor for each task and by the loader.
//!
//! Scheduling: each stream is a FIFO queue. The executor picks, among streams
//! whose front task is ready (an event wait is ready once the event has
//! completed), the one with the highest priority (lowest number), and among
//! equal priorities the oldest task. Tickets count tasks per stream: a stream
//! has completed ticket `t` when its first `t` tasks have run.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use wasmtime::{Engine, Instance, Memory, MemoryType, Store, Val};

use crate::abi::{KernelInfo, TrapKind};
use crate::allocator::{Allocator, StreamId};
use crate::error::{Error, Result};
use crate::event::EventInner;
use crate::layout;
use crate::memory_view::{HostPtr, MemoryView};
use crate::module::{KernelModule, STACK_POINTER_EXPORT};

/// The lowest stream priority (default streams).
pub(crate) const PRIORITY_LEAST: i32 = 0;
/// The highest stream priority.
pub(crate) const PRIORITY_GREATEST: i32 = -2;
/// How long a thread about to sleep (the executor waiting for work, a host
/// thread waiting for a stream) first spins: a short wait is much cheaper than
/// the two thread wake-ups a sleep costs (about 25 us each on a small VM).
const SPIN: Duration = Duration::from_micros(50);
/// How often the watchdog's epoch advances.
pub(crate) const EPOCH_TICK: Duration = Duration::from_millis(10);

/// Work queued on a stream.
pub(crate) enum Task {
    /// `params`: the launch's parameter block, written to [`layout::PARAMS_START`] just before the call.
    Launch {
        module: Arc<LoadedModule>,
        kernel: usize,
        args: Vec<Val>,
        params: Option<Box<[u8]>>,
    },
    CopyIn {
        dst: u64,
        src: HostPtr,
        len: u64,
    },
    CopyOut {
        src: u64,
        dst: HostPtr,
        len: u64,
    },
    CopyWithin {
        dst: u64,
        src: u64,
        len: u64,
    },
    CopyPeer {
        from: Arc<DeviceShared>,
        src: u64,
        to: Arc<DeviceShared>,
        dst: u64,
        len: u64,
    },
    Record {
        event: Arc<EventInner>,
        generation: u64,
    },
    Wait {
        event: Arc<EventInner>,
        generation: u64,
    },
}

impl Task {
    fn ready(&self) -> bool {
        match self {
            Task::Wait { event, generation } => event.is_complete(*generation),
            _ => true,
        }
    }
}

struct Queued {
    seq: u64,
    task: Task,
}

struct StreamQueue {
    priority: i32,
    queue: VecDeque<Queued>,
    enqueued: u64,
    completed: u64,
    error: Option<Error>,
}

struct Sched {
    streams: Vec<StreamQueue>,
    next_seq: u64,
    executor_waiting: bool,
    host_waiters: u32,
    shutdown: bool,
}

impl Sched {
    fn stream(&mut self, device: u32, id: StreamId) -> Result<&mut StreamQueue> {
        self.streams.get_mut(id as usize).ok_or(Error::InvalidStream { device, id })
    }

    fn pick(&self) -> Option<usize> {
        let mut best: Option<(i32, u64, usize)> = None;
        for (i, s) in self.streams.iter().enumerate() {
            if let Some(front) = s.queue.front() {
                let key = (s.priority, front.seq, i);
                if front.task.ready() && best.is_none_or(|b| key < b) {
                    best = Some(key);
                }
            }
        }
        best.map(|b| b.2)
    }
}

/// A kernel module instantiated on one device.
pub(crate) struct LoadedModule {
    pub(crate) id: u32,
    pub(crate) module: Arc<KernelModule>,
    funcs: Vec<wasmtime::Func>,
    stack_pointer: Option<wasmtime::Global>,
}

impl LoadedModule {
    pub(crate) fn kernel_index(&self, name: &str) -> Option<usize> {
        self.module.kernels.iter().position(|k| k.name == name)
    }

    pub(crate) fn kernel(&self, index: usize) -> &KernelInfo {
        &self.module.kernels[index]
    }

    pub(crate) fn kernels(&self) -> &[KernelInfo] {
        &self.module.kernels
    }
}

struct Exec {
    store: Store<()>,
    memory: Memory,
}

/// The shared state of one started device.
pub(crate) struct DeviceShared {
    pub(crate) index: u32,
    pub(crate) capacity: u64,
    pub(crate) memory64: bool,
    pub(crate) view: MemoryView,
    timeout: Duration,
    sched: Mutex<Sched>,
    /// Tasks ever queued and ever finished on this device: lock-free mirrors of
    /// `sched` that spinning threads watch for change.
    queued: AtomicU64,
    finished: AtomicU64,
    work: Condvar,
    done: Condvar,
    exec: Mutex<Exec>,
    pub(crate) modules: RwLock<Vec<Arc<LoadedModule>>>,
    /// Serialises loads, so that a conflict check and its push are one step
    /// without blocking launches behind a running kernel.
    loading: Mutex<()>,
    pub(crate) allocator: Mutex<Allocator>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

/// Locks a mutex, recovering it if a thread panicked while holding it: the
/// runtime's state stays consistent across panics because no lock is held
/// while user code (a kernel) runs except `exec`, whose store survives traps.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl DeviceShared {
    /// Creates the device's store and memory and starts its executor.
    pub(crate) fn start(
        engine: &Engine,
        index: u32,
        capacity: u64,
        memory64: bool,
        timeout: Duration,
    ) -> Result<Arc<Self>> {
        let lost =
            |what: &str, e: wasmtime::Error| Error::DeviceLost { device: index, reason: format!("{what}: {e:#}") };
        let mut store = Store::new(engine, ());
        store.epoch_deadline_trap();
        let pages = capacity / layout::WASM_PAGE;
        let ty = if memory64 {
            MemoryType::new64(pages, Some(pages))
        } else {
            MemoryType::new(pages as u32, Some(pages as u32))
        };
        let memory = Memory::new(&mut store, ty).map_err(|e| lost("cannot create device memory", e))?;
        // SAFETY: the engine is configured with `memory_may_move(false)` and a
        // reservation covering the full size, so this memory keeps its base for
        // its life; the view lives in the DeviceShared that owns the store.
        let view = unsafe { MemoryView::new(memory.data_ptr(&store), memory.data_size(&store) as u64, index) };
        let default_stream =
            StreamQueue { priority: PRIORITY_LEAST, queue: VecDeque::new(), enqueued: 0, completed: 0, error: None };
        let device = Arc::new(DeviceShared {
            index,
            capacity,
            memory64,
            view,
            timeout,
            sched: Mutex::new(Sched {
                streams: vec![default_stream],
                next_seq: 0,
                executor_waiting: false,
                host_waiters: 0,
                shutdown: false,
            }),
            queued: AtomicU64::new(0),
            finished: AtomicU64::new(0),
            work: Condvar::new(),
            done: Condvar::new(),
            exec: Mutex::new(Exec { store, memory }),
            modules: RwLock::new(Vec::new()),
            loading: Mutex::new(()),
            allocator: Mutex::new(Allocator::new(index, layout::HEAP_START, capacity)),
            thread: Mutex::new(None),
        });
        let worker = Arc::clone(&device);
        let handle = std::thread::Builder::new()
            .name(format!("openreg:{index}"))
            .stack_size(8 << 20)
            .spawn(move || worker.run())
            .map_err(|e| Error::DeviceLost { device: index, reason: format!("cannot start executor thread: {e}") })?;
        *lock(&device.thread) = Some(handle);
        Ok(device)
    }

    /// Stops the executor after the work it can still run, and joins it.
    pub(crate) fn shutdown(&self) {
        {
            let mut s = lock(&self.sched);
            s.shutdown = true;
            self.work.notify_all();
        }
        if let Some(handle) = lock(&self.thread).take() {
            let _ = handle.join();
        }
    }

    // ---- streams -------------------------------------------------------

    pub(crate) fn create_stream(&self, priority: i32) -> StreamId {
        let mut s = lock(&self.sched);
        let priority = priority.clamp(PRIORITY_GREATEST, PRIORITY_LEAST);
        s.streams.push(StreamQueue { priority, queue: VecDeque::new(), enqueued: 0, completed: 0, error: None });
        (s.streams.len() - 1) as StreamId
    }

    pub(crate) fn stream_priority(&self, id: StreamId) -> Result<i32> {
        Ok(lock(&self.sched).stream(self.index, id)?.priority)
    }

    pub(crate) fn check_stream(&self, id: StreamId) -> Result<()> {
        lock(&self.sched).stream(self.index, id).map(|_| ())
    }

    /// Queues a task; returns its ticket on the stream.
    pub(crate) fn enqueue(&self, id: StreamId, task: Task) -> Result<u64> {
        self.enqueue_with(id, || task)
    }

    /// Records `event` on a stream: the generation is taken and its marker
    /// queued under one lock, so a concurrent wait cannot get between them.
    pub(crate) fn record(&self, id: StreamId, event: Arc<EventInner>) -> Result<()> {
        self.enqueue_with(id, || {
            let generation = event.begin_record();
            Task::Record { event, generation }
        })
        .map(drop)
    }

    /// Queues the task `make` builds under the scheduler lock.
    fn enqueue_with(&self, id: StreamId, make: impl FnOnce() -> Task) -> Result<u64> {
        let mut s = lock(&self.sched);
        let seq = s.next_seq;
        let stream = s.stream(self.index, id)?;
        stream.queue.push_back(Queued { seq, task: make() });
        stream.enqueued += 1;
        let ticket = stream.enqueued;
        s.next_seq += 1;
        self.queued.fetch_add(1, Ordering::Release);
        if s.executor_waiting {
            self.work.notify_one();
        }
        Ok(ticket)
    }

    /// Wakes the executor, e.g. because an event it may be waiting for completed.
    pub(crate) fn wake(&self) {
        let _s = lock(&self.sched);
        self.work.notify_one();
    }

    /// The ticket of the last task queued on a stream.
    pub(crate) fn ticket(&self, id: StreamId) -> u64 {
        let mut s = lock(&self.sched);
        s.stream(self.index, id).map_or(0, |st| st.enqueued)
    }

    /// Whether a stream has run its first `ticket` tasks.
    pub(crate) fn completed(&self, id: StreamId, ticket: u64) -> bool {
        let mut s = lock(&self.sched);
        s.stream(self.index, id).map_or(true, |st| st.completed >= ticket)
    }

    pub(crate) fn query(&self, id: StreamId) -> Result<bool> {
        let mut s = lock(&self.sched);
        let st = s.stream(self.index, id)?;
        Ok(st.completed == st.enqueued)
    }

    /// Waits until the stream has run `ticket` tasks, then returns (and clears)
    /// the first error its work raised since the last synchronizing call.
    pub(crate) fn wait(&self, id: StreamId, ticket: Option<u64>) -> Result<()> {
        let mut s = lock(&self.sched);
        let target = match ticket {
            Some(t) => t,
            None => s.stream(self.index, id)?.enqueued,
        };
        if s.stream(self.index, id)?.completed < target {
            s = self.spin(s, &self.finished);
        }
        s.host_waiters += 1;
        while s.stream(self.index, id)?.completed < target {
            s = self.done.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        s.host_waiters -= 1;
        match s.stream(self.index, id)?.error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Waits for every stream, then returns the first error any of them raised.
    pub(crate) fn synchronize(&self) -> Result<()> {
        let mut s = lock(&self.sched);
        let targets: Vec<u64> = s.streams.iter().map(|st| st.enqueued).collect();
        s.host_waiters += 1;
        while s.streams.iter().zip(&targets).any(|(st, &t)| st.completed < t) {
            s = self.done.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        s.host_waiters -= 1;
        let mut first = None;
        for st in &mut s.streams {
            if let Some(e) = st.error.take() {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    // ---- modules -------------------------------------------------------

    /// Instantiates a module on this device, after checking that its static
    /// data does not overlap another module's.
    pub(crate) fn load(&self, module: Arc<KernelModule>) -> Result<u32> {
        let _loading = lock(&self.loading);
        let modules = self.modules.read().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some(range) = module.static_range {
            let taken: Vec<(u64, u64)> = modules.iter().filter_map(|m| m.module.static_range).collect();
            if let Some(other) =
                modules.iter().find(|m| m.module.static_range.is_some_and(|r| r.0 < range.1 && range.0 < r.1))
            {
                return Err(Error::ModuleConflict {
                    device: self.index,
                    module: module.name.clone(),
                    range,
                    other: other.module.name.clone(),
                    other_range: other.module.static_range.unwrap_or_default(),
                    free: first_free(&taken, range.1 - range.0),
                });
            }
        }
        let invalid =
            |e: wasmtime::Error| Error::InvalidModule { module: module.name.clone(), reason: format!("{e:#}") };
        let mut exec = lock(&self.exec);
        let Exec { store, memory } = &mut *exec;
        // Instantiation copies data segments under the watchdog too.
        store.set_epoch_deadline(self.deadline_ticks());
        let instance = Instance::new(&mut *store, &module.module, &[(*memory).into()]).map_err(invalid)?;
        let mut funcs = Vec::with_capacity(module.kernels.len());
        for k in &module.kernels {
            funcs.push(instance.get_func(&mut *store, &k.name).expect("checked export"));
        }
        let stack_pointer = module
            .has_stack_pointer
            .then(|| instance.get_global(&mut *store, STACK_POINTER_EXPORT).expect("rewritten export"));
        drop(exec);
        let mut modules = self.modules.write().unwrap_or_else(|e| e.into_inner());
        let id = modules.len() as u32;
        modules.push(Arc::new(LoadedModule { id, module, funcs, stack_pointer }));
        Ok(id)
    }

    pub(crate) fn module(&self, id: u32) -> Result<Arc<LoadedModule>> {
        let modules = self.modules.read().unwrap_or_else(|e| e.into_inner());
        modules
            .get(id as usize)
            .cloned()
            .ok_or_else(|| Error::InvalidArgument(format!("openreg:{} has no module {id}", self.index)))
    }

    // ---- the executor --------------------------------------------------

    fn run(self: Arc<Self>) {
        loop {
            let (id, task) = {
                let mut s = lock(&self.sched);
                loop {
                    if let Some(i) = s.pick() {
                        let task = s.streams[i].queue.pop_front().expect("picked a non-empty queue").task;
                        break (i, task);
                    }
                    if s.shutdown {
                        return;
                    }
                    s = self.spin(s, &self.queued);
                    if s.pick().is_some() || s.shutdown {
                        continue;
                    }
                    s.executor_waiting = true;
                    s = self.work.wait(s).unwrap_or_else(|e| e.into_inner());
                    s.executor_waiting = false;
                }
            };
            let (result, record) = match task {
                Task::Record { event, generation } => (Ok(()), Some((event, generation))),
                task => (
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.execute(task))).unwrap_or_else(
                        |_| Err(Error::DeviceLost { device: self.index, reason: "a runtime task panicked".into() }),
                    ),
                    None,
                ),
            };
            let to_wake = {
                let mut s = lock(&self.sched);
                let stream = &mut s.streams[id];
                stream.completed += 1;
                self.finished.fetch_add(1, Ordering::Release);
                if let Err(e) = result {
                    stream.error.get_or_insert(e);
                }
                // Completed under the scheduler lock: whoever sees the stream
                // caught up also sees the event complete, and the other way round.
                let to_wake = record.map(|(event, generation)| event.complete(generation));
                if s.host_waiters > 0 {
                    self.done.notify_all();
                }
                to_wake
            };
            if let Some(devices) = to_wake {
                wake_all(&devices);
            }
        }
    }

    /// Releases the scheduler lock and spins until `counter` changes or
    /// [`SPIN`] has passed, then takes the lock again for the caller to recheck.
    fn spin<'a>(&'a self, s: MutexGuard<'a, Sched>, counter: &AtomicU64) -> MutexGuard<'a, Sched> {
        let seen = counter.load(Ordering::Acquire);
        drop(s);
        let deadline = Instant::now() + SPIN;
        while counter.load(Ordering::Acquire) == seen && Instant::now() < deadline {
            std::hint::spin_loop();
        }
        lock(&self.sched)
    }

    fn execute(&self, task: Task) -> Result<()> {
        match task {
            Task::Launch { module, kernel, args, params } => {
                if let Some(bytes) = params {
                    // SAFETY: `bytes` is a live host buffer outside device memory;
                    // we are the executor, so no kernel runs now.
                    unsafe { self.view.write(layout::PARAMS_START, bytes.as_ptr(), bytes.len() as u64)? };
                }
                self.launch(&module, kernel, &args)
            }
            // SAFETY (all copies): the enqueuer either blocked until this task ran
            // or promised through an `unsafe` API that the host pointer stays valid
            // and unshared until then; we are the executor, so no kernel runs now.
            Task::CopyIn { dst, src, len } => unsafe { self.view.write(dst, src.0, len) },
            Task::CopyOut { src, dst, len } => unsafe { self.view.read(src, dst.0, len) },
            Task::CopyWithin { dst, src, len } => unsafe { self.view.copy_within(dst, src, len) },
            Task::CopyPeer { from, src, to, dst, len } => unsafe { from.view.copy_to_peer(src, &to.view, dst, len) },
            Task::Record { .. } | Task::Wait { .. } => Ok(()),
        }
    }

    /// The watchdog limit in epoch ticks (one more than the limit, so that a
    /// kernel is never stopped early because a tick was about to happen).
    fn deadline_ticks(&self) -> u64 {
        (self.timeout.as_millis() / EPOCH_TICK.as_millis()).max(1) as u64 + 1
    }

    fn launch(&self, module: &LoadedModule, kernel: usize, args: &[Val]) -> Result<()> {
        let mut exec = lock(&self.exec);
        let store = &mut exec.store;
        store.set_epoch_deadline(self.deadline_ticks());
        let Err(err) = module.funcs[kernel].call(&mut *store, args, &mut []) else {
            return Ok(());
        };
        // A trap leaves the module's shadow stack pointer wherever the kernel
        // was; put it back so the next launch starts with an empty stack.
        if let Some(sp) = &module.stack_pointer {
            let top =
                if self.memory64 { Val::I64(layout::STACK_TOP as i64) } else { Val::I32(layout::STACK_TOP as i32) };
            let _ = sp.set(&mut *store, top);
        }
        let name = module.kernel(kernel).name.clone();
        let trap = err.downcast_ref::<wasmtime::Trap>().copied();
        if trap == Some(wasmtime::Trap::Interrupt) {
            return Err(Error::KernelTimeout {
                device: self.index,
                kernel: name,
                limit_ms: self.timeout.as_millis() as u64,
            });
        }
        let kind = match trap {
            Some(wasmtime::Trap::MemoryOutOfBounds) => TrapKind::OutOfBounds,
            Some(wasmtime::Trap::UnreachableCodeReached) => TrapKind::Unreachable,
            Some(wasmtime::Trap::StackOverflow) => TrapKind::StackOverflow,
            Some(wasmtime::Trap::IntegerDivisionByZero) => TrapKind::IntegerDivideByZero,
            Some(wasmtime::Trap::IntegerOverflow) => TrapKind::IntegerOverflow,
            Some(wasmtime::Trap::BadConversionToInteger) => TrapKind::BadConversion,
            Some(
                wasmtime::Trap::IndirectCallToNull | wasmtime::Trap::BadSignature | wasmtime::Trap::TableOutOfBounds,
            ) => TrapKind::BadIndirectCall,
            _ => TrapKind::Other,
        };
        let mut detail = format!("{err}");
        if module.id == crate::ENGINE_MODULE && name == "index" && kind == TrapKind::Unreachable {
            // The engine's indexing kernel stops at an index out of range, as
            // CUDA's device-side assert does (device-kernels/engine/index.c).
            detail = format!("an index is out of range for the indexed dimension; {detail}");
        }
        Err(Error::KernelTrap { device: self.index, kernel: name, trap: kind, detail })
    }
}

/// The lowest static-area address where `len` bytes fit between `taken` ranges.
fn first_free(taken: &[(u64, u64)], len: u64) -> u64 {
    let mut sorted = taken.to_vec();
    sorted.sort();
    let mut at = layout::STATIC_START;
    for (start, end) in sorted {
        if at + len <= start {
            break;
        }
        at = at.max(end.next_multiple_of(1024));
    }
    at
}

/// Wakes the executors of the devices that are still alive.
pub(crate) fn wake_all(devices: &[Weak<DeviceShared>]) {
    for d in devices.iter().filter_map(Weak::upgrade) {
        d.wake();
    }
}
