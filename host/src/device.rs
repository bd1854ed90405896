//! One virtual device: its wasmtime stores and shared memory, its allocator,
//! its loaded kernel modules, its executor thread with the stream queues it
//! drains, and the helper threads that run parallel launches with it.
//!
//! Threads: any host thread may enqueue work, allocate, or wait; the executor
//! thread alone runs queued work, one task at a time. Locks, always taken in
//! this order when nested: `allocator` -> `sched` -> an event's state. `exec`
//! (the store, and the right to touch the memory) is taken by the executor
//! for every task that touches device memory and by the loader, with no other
//! lock held; a peer copy takes the `exec` of both its devices, lower device
//! index first, so two peer copies in opposite directions cannot deadlock.
//!
//! Workers: worker 0 is the executor; workers 1.. are helper threads, each
//! with its own store and its own instance of every loaded module over the
//! one shared memory. A parallel launch (one with a `worker-index` or
//! `worker-count` argument) is one call per worker index; the executor posts
//! it, while it holds `exec`, to the helpers, and every worker claims indices
//! until none is left; the executor returns when all calls have: so the
//! helpers touch the memory only inside a task the executor is running, and
//! the rule above (one task at a time per device) still holds. A helper's
//! `exec` is taken by that helper for its calls, and by the loader after the
//! device's `exec` (the helpers are idle then).
//!
//! A host thread blocked on the device lends a hand: for up to [`HOST_HELP`]
//! after it starts waiting (or last ran a part) it spins, ready, and claims
//! the parts of parallel launches with the instance of a helper that is not
//! running (`try_lock` of its `exec`), so the executor wakes only the helpers
//! the ready threads do not cover. Waking a sleeping helper costs its wake-up,
//! and on a host with few cores Linux often places it on the executor's own
//! core (the waking host thread still holds the other), where one of the two
//! then runs every part while the other core idles: so a helper that finds
//! itself on the executor's core (`current_cpu`) leaves the job alone and
//! sleeps again, and a waiting host thread there, or with every helper
//! awake, sleeps instead of spinning (and yields its core while the executor,
//! woken for its work, has not run yet). With no helpers (one worker), a
//! thread waiting for a stream or the device spins until a task finishes, for
//! at most [`SPIN`], before it sleeps, as the executor does for new work (an
//! event's wait does not).
//!
//! Waits: a host thread waiting for a stream polls the interrupt check
//! ([`set_interrupt_check`]) every [`INTERRUPT_POLL`], so Ctrl-C reaches a
//! program blocked on a long kernel. A blocking copy borrows its host buffer
//! only for the call, so on interrupt it is cancelled if it has not started
//! (replaced by a no-op in its queue) and waited for if it has.
//!
//! Scheduling: each stream is a FIFO queue. The executor picks, among streams
//! whose front task is ready (an event wait is ready once the event has
//! completed), the one with the highest priority (lowest number), and among
//! equal priorities the oldest task. Tickets count tasks per stream: a stream
//! has completed ticket `t` when its first `t` tasks have run.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, RwLock, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use wasmtime::{Engine, Instance, MemoryTypeBuilder, SharedMemory, Store, Val};

use crate::abi::{ActivityKind, KernelInfo, TrapKind};
use crate::activity;
use crate::allocator::{Allocator, StreamId};
use crate::config::Config;
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
/// thread waiting on a device without helpers) first spins: a short wait is
/// much cheaper than the two thread wake-ups a sleep costs (about 25 us each
/// on a small VM). With helpers, a waiting host thread spins for
/// [`HOST_HELP`] instead, ready to run parts.
const SPIN: Duration = Duration::from_micros(50);
/// How long a waiting host thread stays ready to run parts of parallel
/// launches after it starts waiting or last ran one (see the module docs).
const HOST_HELP: Duration = Duration::from_millis(1);
/// How often the watchdog's epoch advances.
pub(crate) const EPOCH_TICK: Duration = Duration::from_millis(10);
/// How often a waiting host thread runs the interrupt check.
pub const INTERRUPT_POLL: Duration = Duration::from_millis(10);

/// Spins until `done()` or [`SPIN`] has passed.
fn spin_until(done: impl Fn() -> bool) {
    let deadline = Instant::now() + SPIN;
    while !done() && Instant::now() < deadline {
        std::hint::spin_loop();
    }
}

static INTERRUPT_CHECK: OnceLock<fn() -> bool> = OnceLock::new();

/// Installs the check that host threads blocked in a wait (a synchronize, a
/// blocking copy, an event synchronize) run every [`INTERRUPT_POLL`]; when it
/// returns true the wait ends with [`Error::Interrupted`]. Bindings install
/// one that notices Ctrl-C. It can be set once per process; a second call
/// returns false and changes nothing.
pub fn set_interrupt_check(check: fn() -> bool) -> bool {
    INTERRUPT_CHECK.set(check).is_ok()
}

/// Whether the waiting thread should give up its wait.
pub(crate) fn interrupted() -> bool {
    INTERRUPT_CHECK.get().is_some_and(|check| check())
}

/// Work queued on a stream.
pub(crate) enum Task {
    /// `params`: the launch's parameter blocks, written to [`layout::PARAMS_START`] just before the
    /// call; `op`: the operator the kernel runs for, which its errors name; `worker_args`: the
    /// positions of `worker-index` (true) and `worker-count` (false) arguments, set per worker;
    /// a launch with any is a parallel launch, one call per worker index.
    Launch {
        module: Arc<LoadedModule>,
        kernel: usize,
        args: Vec<Val>,
        params: Option<Box<[u8]>>,
        op: Option<Box<str>>,
        worker_args: Vec<(usize, WorkerArg)>,
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
    /// A blocking copy whose waiter was interrupted before it started.
    Cancelled,
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
    /// Set while activity recording is on.
    tag: Option<activity::Tag>,
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

/// A launch argument the runtime sets per worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WorkerArg {
    /// The index of the worker making the call.
    Index,
    /// How many workers run the launch.
    Count,
}

/// One instance of a module for one worker, alone in its own store: wasmtime
/// looks a memory fault up among a store's instances and expects one owner,
/// but every instance that imports the shared memory claims its faults.
struct WorkerInstance {
    store: Store<()>,
    funcs: Vec<wasmtime::Func>,
    stack_pointer: Option<wasmtime::Global>,
}

impl WorkerInstance {
    /// Instantiates `module` over `memory` in a new store, with its stack pointer at the top of
    /// worker `worker`'s slice of the kernel stack; data segments are copied under the watchdog.
    fn new(
        device: &DeviceShared,
        module: &KernelModule,
        memory: &SharedMemory,
        worker: u32,
    ) -> std::result::Result<WorkerInstance, wasmtime::Error> {
        let mut store = Store::new(&device.engine, ());
        store.epoch_deadline_trap();
        store.set_epoch_deadline(device.deadline_ticks());
        let instance = Instance::new(&mut store, &module.module, &[memory.clone().into()])?;
        let funcs = module.kernels.iter().map(|k| instance.get_func(&mut store, &k.name).expect("checked export"));
        let funcs = funcs.collect();
        let stack_pointer = module
            .has_stack_pointer
            .then(|| instance.get_global(&mut store, STACK_POINTER_EXPORT).expect("rewritten export"));
        let mut inst = WorkerInstance { store, funcs, stack_pointer };
        inst.reset_stack(worker, device.workers, device.memory64);
        Ok(inst)
    }

    /// Points the instance's stack pointer at the top of its worker's stack slice: after
    /// instantiation, and after a trap left it wherever the kernel was.
    fn reset_stack(&mut self, worker: u32, workers: u32, memory64: bool) {
        if let Some(sp) = &self.stack_pointer {
            let top = layout::stack_top(worker, workers);
            let _ = sp.set(&mut self.store, if memory64 { Val::I64(top as i64) } else { Val::I32(top as i32) });
        }
    }
}

/// A kernel module instantiated on one device.
pub(crate) struct LoadedModule {
    pub(crate) id: u32,
    pub(crate) module: Arc<KernelModule>,
    /// The executor's (worker 0's) instance; the helpers keep theirs in their [`WorkerExec`].
    instance: Mutex<WorkerInstance>,
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

/// The device memory; holding it is the right to touch the memory.
struct Exec {
    memory: SharedMemory,
}

/// A helper's instances of the device's modules, by module id.
struct WorkerExec {
    instances: Vec<WorkerInstance>,
}

/// A parallel launch: `parts` calls of one kernel, call `i` with worker index
/// `i`. Whichever worker is free claims the next call (a part's result depends
/// on its index only, not on the thread that runs it), so a helper that is
/// slow to wake does not hold the launch up: the executor runs its part.
struct Job {
    module: Arc<LoadedModule>,
    kernel: usize,
    args: Vec<Val>,
    worker_args: Vec<(usize, WorkerArg)>,
    op: Option<Box<str>>,
    parts: u32,
    /// The next part to claim.
    next: AtomicU32,
    /// Parts not finished yet.
    unfinished: AtomicU32,
    /// Each part's outcome.
    results: Mutex<Vec<Result<()>>>,
}

impl Job {
    /// The arguments of part `part`'s call.
    fn args(&self, part: u32) -> Vec<Val> {
        let mut args = self.args.clone();
        for &(at, what) in &self.worker_args {
            args[at] = Val::I32(match what {
                WorkerArg::Index => part as i32,
                WorkerArg::Count => self.parts as i32,
            });
        }
        args
    }
}

/// What the executor and the helpers share to run parallel launches.
struct Board {
    job: Option<Arc<Job>>,
    /// Bumped for each posted job; a helper runs each generation once.
    generation: u64,
    executor_sleeping: bool,
    shutdown: bool,
}

/// The device's helper threads (workers 1..) and how work reaches them.
struct Team {
    /// One store per helper, indexed by worker - 1.
    execs: Vec<Mutex<WorkerExec>>,
    board: Mutex<Board>,
    /// A lock-free mirror of `board.generation` that idle helpers spin on.
    generation: AtomicU64,
    /// Host threads waiting on the device that are ready to run parts now.
    ready_hosts: AtomicU32,
    /// Helpers asleep waiting for a job: changed with `board` held (so the
    /// executor posting a job knows whom to wake), read by waiting host
    /// threads without it.
    sleeping: AtomicU32,
    /// The executor's core when it last woke or posted a job (-1: unknown).
    executor_cpu: AtomicI32,
    /// Parts of parallel launches that waiting host threads have run.
    host_parts: AtomicU64,
    start: Condvar,
    finished: Condvar,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

/// The shared state of one started device.
pub(crate) struct DeviceShared {
    pub(crate) index: u32,
    engine: Engine,
    pub(crate) capacity: u64,
    pub(crate) memory64: bool,
    /// Workers that run a parallel launch: the executor and `workers - 1` helpers.
    pub(crate) workers: u32,
    pub(crate) view: MemoryView,
    timeout: Duration,
    sched: Mutex<Sched>,
    /// Tasks ever queued and ever finished on this device: lock-free mirrors of
    /// `sched` that spinning threads watch for change.
    queued: AtomicU64,
    finished: AtomicU64,
    /// Whether the executor sleeps for want of work (or has been woken and
    /// not yet run). Written with `sched` held, so enqueuers that hold it
    /// know whether to notify `work`; waiting host threads read it without.
    executor_asleep: AtomicBool,
    /// How many streams exist (ids below it are valid; streams are never
    /// destroyed): checks that need no other stream state skip `sched`.
    streams: AtomicU32,
    /// Parallel launches, and launches run once.
    pub(crate) parallel_launches: AtomicU64,
    pub(crate) single_launches: AtomicU64,
    work: Condvar,
    done: Condvar,
    exec: Mutex<Exec>,
    team: Team,
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
    /// Creates the device's stores and memory and starts its executor and helpers.
    pub(crate) fn start(engine: &Engine, index: u32, config: &Config) -> Result<Arc<Self>> {
        let lost =
            |what: &str, e: wasmtime::Error| Error::DeviceLost { device: index, reason: format!("{what}: {e:#}") };
        let (capacity, memory64, workers) = (config.memory_bytes, config.memory64, config.workers.max(1));
        let pages = capacity / layout::WASM_PAGE;
        let ty = MemoryTypeBuilder::new()
            .memory64(memory64)
            .shared(true)
            .min(pages)
            .max(Some(pages))
            .build()
            .map_err(|e| lost("cannot describe device memory", e))?;
        let memory = SharedMemory::new(engine, ty).map_err(|e| lost("cannot create device memory", e))?;
        // SAFETY: a shared memory never moves, and this one is created at its
        // full size; the view lives in the DeviceShared that owns the memory.
        let view = unsafe { MemoryView::new(memory.data().as_ptr() as *mut u8, memory.data_size() as u64, index) };
        let team = Team {
            execs: (1..workers).map(|_| Mutex::new(WorkerExec { instances: Vec::new() })).collect(),
            board: Mutex::new(Board { job: None, generation: 0, executor_sleeping: false, shutdown: false }),
            generation: AtomicU64::new(0),
            ready_hosts: AtomicU32::new(0),
            sleeping: AtomicU32::new(0),
            executor_cpu: AtomicI32::new(-1),
            host_parts: AtomicU64::new(0),
            start: Condvar::new(),
            finished: Condvar::new(),
            threads: Mutex::new(Vec::new()),
        };
        let default_stream =
            StreamQueue { priority: PRIORITY_LEAST, queue: VecDeque::new(), enqueued: 0, completed: 0, error: None };
        let device = Arc::new(DeviceShared {
            index,
            engine: engine.clone(),
            capacity,
            memory64,
            workers,
            view,
            timeout: config.kernel_timeout,
            sched: Mutex::new(Sched { streams: vec![default_stream], next_seq: 0, host_waiters: 0, shutdown: false }),
            queued: AtomicU64::new(0),
            finished: AtomicU64::new(0),
            executor_asleep: AtomicBool::new(false),
            streams: AtomicU32::new(1),
            parallel_launches: AtomicU64::new(0),
            single_launches: AtomicU64::new(0),
            work: Condvar::new(),
            done: Condvar::new(),
            exec: Mutex::new(Exec { memory }),
            team,
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
        for worker in 1..workers {
            let helper = Arc::clone(&device);
            let handle = std::thread::Builder::new()
                .name(format!("openreg:{index}.{worker}"))
                .stack_size(8 << 20)
                .spawn(move || helper.help(worker))
                .map_err(|e| Error::DeviceLost { device: index, reason: format!("cannot start worker thread: {e}") });
            match handle {
                Ok(handle) => lock(&device.team.threads).push(handle),
                Err(e) => {
                    device.shutdown();
                    return Err(e);
                }
            }
        }
        Ok(device)
    }

    /// Stops the executor after the work it can still run, then the helpers, and joins them.
    pub(crate) fn shutdown(&self) {
        {
            let mut s = lock(&self.sched);
            s.shutdown = true;
            self.work.notify_all();
        }
        if let Some(handle) = lock(&self.thread).take() {
            let _ = handle.join();
        }
        {
            let mut b = lock(&self.team.board);
            b.shutdown = true;
            self.team.start.notify_all();
        }
        for handle in std::mem::take(&mut *lock(&self.team.threads)) {
            let _ = handle.join();
        }
    }

    // ---- streams -------------------------------------------------------

    pub(crate) fn create_stream(&self, priority: i32) -> StreamId {
        let mut s = lock(&self.sched);
        let priority = priority.clamp(PRIORITY_GREATEST, PRIORITY_LEAST);
        s.streams.push(StreamQueue { priority, queue: VecDeque::new(), enqueued: 0, completed: 0, error: None });
        self.streams.store(s.streams.len() as u32, Ordering::Release);
        (s.streams.len() - 1) as StreamId
    }

    pub(crate) fn stream_priority(&self, id: StreamId) -> Result<i32> {
        Ok(lock(&self.sched).stream(self.index, id)?.priority)
    }

    pub(crate) fn check_stream(&self, id: StreamId) -> Result<()> {
        if id < self.streams.load(Ordering::Acquire) {
            Ok(())
        } else {
            Err(Error::InvalidStream { device: self.index, id })
        }
    }

    /// Queues a task; returns its ticket on the stream.
    pub(crate) fn enqueue(&self, id: StreamId, task: Task) -> Result<u64> {
        self.enqueue_with(id, || task).map(|(ticket, _)| ticket)
    }

    /// Queues a copy whose host buffer is borrowed only for this call, and
    /// waits for it; returns the stream's error as [`DeviceShared::wait`]
    /// does. If the wait is interrupted before the copy has started, the copy
    /// is cancelled, so it never touches the buffer after this returns.
    pub(crate) fn copy_blocking(&self, id: StreamId, task: Task) -> Result<()> {
        let (ticket, seq) = self.enqueue_with(id, || task)?;
        self.wait_for(id, Some(ticket), Some(seq))
    }

    /// Records `event` on a stream: the generation is taken and its marker
    /// queued under one lock, so a concurrent wait cannot get between them.
    pub(crate) fn record(&self, id: StreamId, event: Arc<EventInner>) -> Result<()> {
        self.enqueue_with(id, || {
            let generation = event.begin_record(self.index);
            Task::Record { event, generation }
        })
        .map(drop)
    }

    /// Queues the task `make` builds under the scheduler lock; returns its
    /// ticket on the stream and its sequence number on the device.
    fn enqueue_with(&self, id: StreamId, make: impl FnOnce() -> Task) -> Result<(u64, u64)> {
        let mut s = lock(&self.sched);
        let seq = s.next_seq;
        let stream = s.stream(self.index, id)?;
        stream.queue.push_back(Queued { seq, task: make(), tag: activity::tag() });
        stream.enqueued += 1;
        let ticket = stream.enqueued;
        s.next_seq += 1;
        self.queued.fetch_add(1, Ordering::Release);
        if self.executor_asleep.load(Ordering::Relaxed) {
            self.work.notify_one();
        }
        Ok((ticket, seq))
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
        self.wait_for(id, ticket, None)
    }

    /// [`DeviceShared::wait`]; `cancel` is the sequence number of a queued
    /// blocking copy to cancel if the wait is interrupted before it starts.
    fn wait_for(&self, id: StreamId, ticket: Option<u64>, cancel: Option<u64>) -> Result<()> {
        let mut s = lock(&self.sched);
        let enqueued = s.stream(self.index, id)?.enqueued;
        let target = ticket.unwrap_or(enqueued);
        let mut interruptible = true;
        s = self.block_until(s, "a stream", |s, poll| {
            let done = s.streams[id as usize].completed >= target;
            if !done && poll && interruptible && interrupted() {
                match cancel {
                    // A blocking copy must not outlive its borrowed buffer:
                    // cancel it if still queued, else wait for it to end.
                    Some(seq) if !cancel_queued(&mut s.streams[id as usize], seq) => interruptible = false,
                    _ => return Err(()),
                }
            }
            Ok(done)
        })?;
        match s.stream(self.index, id)?.error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Waits for every stream, then returns the first error any of them raised.
    pub(crate) fn synchronize(&self) -> Result<()> {
        let mut s = self.drain_locked(true)?;
        let mut first = None;
        for st in &mut s.streams {
            if let Some(e) = st.error.take() {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// Waits until the work queued on every stream so far has run, leaving
    /// the streams' errors for their next synchronizing call.
    pub(crate) fn drain(&self) {
        drop(self.drain_locked(false));
    }

    fn drain_locked(&self, interruptible: bool) -> Result<MutexGuard<'_, Sched>> {
        let s = lock(&self.sched);
        let targets: Vec<u64> = s.streams.iter().map(|st| st.enqueued).collect();
        self.block_until(s, "the device", |s, poll| {
            let done = s.streams.iter().zip(&targets).all(|(st, &t)| st.completed >= t);
            if !done && poll && interruptible && interrupted() {
                return Err(());
            }
            Ok(done)
        })
    }

    /// Sleeps on `done` until `ready` says so (`Ok(true)`) or gives up
    /// (`Err`, an interrupt). `ready`'s flag says whether to run the interrupt
    /// check this time: at most once per [`INTERRUPT_POLL`], not on every
    /// wake-up (the executor wakes waiters after each task, and the check may
    /// take the GIL).
    fn block_until<'a>(
        &'a self,
        mut s: MutexGuard<'a, Sched>,
        what: &'static str,
        mut ready: impl FnMut(&mut Sched, bool) -> std::result::Result<bool, ()>,
    ) -> Result<MutexGuard<'a, Sched>> {
        s.host_waiters += 1;
        let mut next_poll = Instant::now() + INTERRUPT_POLL;
        let mut help_until = Instant::now() + HOST_HELP;
        // With no helpers, the first time round spins (as the executor does for
        // new work): a short kernel ends before a sleeping thread would wake.
        // With helpers, help_while_waiting spins while it helps.
        let mut spin = self.team.execs.is_empty();
        let outcome = loop {
            let now = Instant::now();
            let poll = now >= next_poll;
            if poll {
                next_poll = now + INTERRUPT_POLL;
            }
            match ready(&mut s, poll) {
                Ok(true) => break Ok(()),
                Ok(false) => {}
                Err(()) => break Err(Error::Interrupted { device: self.index, what }),
            }
            if !self.team.execs.is_empty() && now < help_until && now < next_poll {
                drop(s);
                let useful = self.help_while_waiting(&mut help_until, next_poll);
                s = lock(&self.sched);
                if useful {
                    continue;
                }
                // Every helper awake, or this thread on the executor's core:
                // sleep until a task finishes, then look again.
                if matches!(ready(&mut s, false), Ok(true)) {
                    continue;
                }
            }
            if std::mem::take(&mut spin) {
                s = self.spin(s, &self.finished);
                continue;
            }
            s = self.done.wait_timeout(s, INTERRUPT_POLL).unwrap_or_else(|e| e.into_inner()).0;
        };
        s.host_waiters -= 1;
        outcome.map(|()| s)
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
        let exec = lock(&self.exec);
        let instance = WorkerInstance::new(self, &module, &exec.memory, 0).map_err(invalid)?;
        // Every helper gets its instance now, while holding `exec` keeps them
        // idle: a module is on all workers or on none, and its id is the same
        // index everywhere. Instantiating again re-applies the data segments,
        // with the same bytes.
        let mut helpers: Vec<_> = self.team.execs.iter().map(lock).collect();
        let mut added = Vec::with_capacity(helpers.len());
        for worker in 1..self.workers {
            added.push(WorkerInstance::new(self, &module, &exec.memory, worker).map_err(invalid)?);
        }
        let mut modules = self.modules.write().unwrap_or_else(|e| e.into_inner());
        let id = modules.len() as u32;
        for (helper, inst) in helpers.iter_mut().zip(added) {
            debug_assert_eq!(helper.instances.len(), id as usize);
            helper.instances.push(inst);
        }
        modules.push(Arc::new(LoadedModule { id, module, instance: Mutex::new(instance) }));
        drop(helpers);
        drop(exec);
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
            let (id, task, tag) = {
                let mut s = lock(&self.sched);
                loop {
                    if let Some(i) = s.pick() {
                        let queued = s.streams[i].queue.pop_front().expect("picked a non-empty queue");
                        break (i, queued.task, queued.tag);
                    }
                    if s.shutdown {
                        return;
                    }
                    s = self.spin(s, &self.queued);
                    if s.pick().is_some() || s.shutdown {
                        continue;
                    }
                    self.executor_asleep.store(true, Ordering::Relaxed);
                    s = self.work.wait(s).unwrap_or_else(|e| e.into_inner());
                    self.executor_asleep.store(false, Ordering::Relaxed);
                    if !self.team.execs.is_empty() {
                        self.team.executor_cpu.store(current_cpu(), Ordering::Relaxed);
                    }
                }
            };
            let (result, record) = match task {
                Task::Record { event, generation } => (Ok(()), Some((event, generation))),
                task => {
                    let traced = tag.and_then(|tag| Some((tag, self.describe(&task, id as u32)?, activity::now_ns())));
                    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.execute(task)))
                        .unwrap_or_else(|_| {
                            Err(Error::DeviceLost { device: self.index, reason: "a runtime task panicked".into() })
                        });
                    if let Some((tag, work, start)) = traced {
                        activity::push(tag, self.index, work, start, activity::now_ns());
                    }
                    (result, None)
                }
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
        spin_until(|| counter.load(Ordering::Acquire) != seen);
        lock(&self.sched)
    }

    /// What a task is, for its activity record; `None` for work that is
    /// not a launch or a copy.
    fn describe(&self, task: &Task, stream_id: u32) -> Option<activity::Work> {
        let copy = |kind, name: &str, bytes| activity::Work {
            kind,
            name: name.to_string(),
            op: None,
            stream_id,
            bytes,
            workers: 0,
        };
        Some(match task {
            Task::Launch { module, kernel, op, worker_args, .. } => activity::Work {
                kind: ActivityKind::Kernel,
                name: module.kernel(*kernel).name.clone(),
                op: op.as_deref().map(String::from),
                stream_id,
                bytes: 0,
                workers: if worker_args.is_empty() { 1 } else { self.workers },
            },
            Task::CopyIn { len, .. } => copy(ActivityKind::CopyHostToDevice, "memcpy HtoD", *len),
            Task::CopyOut { len, .. } => copy(ActivityKind::CopyDeviceToHost, "memcpy DtoH", *len),
            Task::CopyWithin { len, .. } => copy(ActivityKind::CopyDeviceToDevice, "memcpy DtoD", *len),
            Task::CopyPeer { len, .. } => copy(ActivityKind::CopyPeer, "memcpy PtoP", *len),
            Task::Record { .. } | Task::Wait { .. } | Task::Cancelled => return None,
        })
    }

    fn execute(&self, task: Task) -> Result<()> {
        match task {
            Task::Launch { module, kernel, args, params, op, worker_args } => {
                let _exec = lock(&self.exec);
                if let Some(bytes) = params {
                    // SAFETY: `bytes` is a live host buffer outside device memory;
                    // we hold `exec`, so no kernel or copy touches the memory now.
                    unsafe { self.view.write(layout::PARAMS_START, bytes.as_ptr(), bytes.len() as u64)? };
                }
                if worker_args.is_empty() {
                    self.single_launches.fetch_add(1, Ordering::Relaxed);
                    self.call(&mut lock(&module.instance), &module, kernel, &args, op.as_deref(), 0)?;
                } else {
                    self.parallel_launches.fetch_add(1, Ordering::Relaxed);
                    let job = Job {
                        module: Arc::clone(&module),
                        kernel,
                        args,
                        worker_args,
                        op: op.clone(),
                        parts: self.workers,
                        next: AtomicU32::new(0),
                        unfinished: AtomicU32::new(self.workers),
                        results: Mutex::new((0..self.workers).map(|_| Ok(())).collect()),
                    };
                    self.launch_parallel(Arc::new(job))?;
                }
                self.check_null_guard(&module, kernel, op)
            }
            // SAFETY (all copies): the enqueuer either blocks until this task has
            // run (or was cancelled) or promised through an `unsafe` API that the
            // host pointer stays valid and unshared until then; we hold `exec`,
            // so no kernel or other copy touches the memory now.
            Task::CopyIn { dst, src, len } => {
                let _exec = lock(&self.exec);
                unsafe { self.view.write(dst, src.0, len) }
            }
            Task::CopyOut { src, dst, len } => {
                let _exec = lock(&self.exec);
                unsafe { self.view.read(src, dst.0, len) }
            }
            Task::CopyWithin { dst, src, len } => {
                let _exec = lock(&self.exec);
                unsafe { self.view.copy_within(dst, src, len) }
            }
            Task::CopyPeer { from, src, to, dst, len } => {
                // Both devices' memories are touched: hold both `exec` locks,
                // lower device index first (the module docs' lock order).
                let (first, second) = if from.index < to.index { (&from, &to) } else { (&to, &from) };
                let _first = lock(&first.exec);
                let _second = lock(&second.exec);
                // SAFETY: two distinct devices' memories, neither touched by
                // anything else while we hold both locks.
                unsafe { from.view.copy_to_peer(src, &to.view, dst, len) }
            }
            Task::Record { .. } | Task::Wait { .. } | Task::Cancelled => Ok(()),
        }
    }

    /// Wasm cannot unmap the first page of its memory, so a write through a
    /// null device pointer lands in the null guard instead of faulting. The
    /// guard is checked (and cleared) after every kernel, and such a write is
    /// reported like a trap; reads through null see zeros.
    fn check_null_guard(&self, module: &LoadedModule, kernel: usize, op: Option<Box<str>>) -> Result<()> {
        // SAFETY: we are the executor and hold `exec`: no kernel runs now.
        if unsafe { self.view.clear_if_dirty(0, layout::NULL_GUARD) }? {
            return Err(Error::KernelTrap {
                device: self.index,
                kernel: module.kernel(kernel).name.clone(),
                op: op.map(String::from),
                trap: TrapKind::NullPointerWrite,
                detail: format!("it wrote to [0, {:#x}), where null device pointers point", layout::NULL_GUARD),
            });
        }
        Ok(())
    }

    /// The watchdog limit in epoch ticks (one more than the limit, so that a
    /// kernel is never stopped early because a tick was about to happen).
    fn deadline_ticks(&self) -> u64 {
        (self.timeout.as_millis() / EPOCH_TICK.as_millis()).max(1) as u64 + 1
    }

    /// Runs one call of a kernel on one worker's instance; after a trap, resets that
    /// instance's stack pointer and describes the trap.
    fn call(
        &self,
        instance: &mut WorkerInstance,
        module: &LoadedModule,
        kernel: usize,
        args: &[Val],
        op: Option<&str>,
        worker: u32,
    ) -> Result<()> {
        instance.store.set_epoch_deadline(self.deadline_ticks());
        let Err(err) = instance.funcs[kernel].call(&mut instance.store, args, &mut []) else {
            return Ok(());
        };
        instance.reset_stack(worker, self.workers, self.memory64);
        Err(self.trap_error(&err, module, kernel, op.map(String::from)))
    }

    /// The error a kernel's trap (or watchdog stop) is reported as.
    fn trap_error(&self, err: &wasmtime::Error, module: &LoadedModule, kernel: usize, op: Option<String>) -> Error {
        let name = module.kernel(kernel).name.clone();
        let trap = err.downcast_ref::<wasmtime::Trap>().copied();
        if trap == Some(wasmtime::Trap::Interrupt) {
            return Error::KernelTimeout {
                device: self.index,
                kernel: name,
                op,
                limit_ms: self.timeout.as_millis() as u64,
            };
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
        // Engine kernels that stop at a bad index, as CUDA's device-side
        // asserts do (device-kernels/engine/index.c and loss.c).
        let cause = match name.as_str() {
            "index" => Some("an index is out of range for the indexed dimension"),
            "nll_loss" => Some("a target is out of range of the classes (Target out of bounds)"),
            _ => None,
        };
        if let Some(cause) = cause.filter(|_| module.id == crate::ENGINE_MODULE && kind == TrapKind::Unreachable) {
            detail = format!("{cause}; {detail}");
        }
        Error::KernelTrap { device: self.index, kernel: name, op, trap: kind, detail }
    }

    // ---- parallel launches -----------------------------------------------

    /// A waiting host thread's turn as a ready worker: spins until a task
    /// finishes (its caller then rechecks what it waits for), `until` has
    /// passed (pushed back each time it runs a part) or `poll` is due, running
    /// the parts of each parallel launch posted meanwhile, or running now.
    /// Returns false, early, when every helper is awake (they claim the parts
    /// then) or this thread runs on the executor's core: spinning there only
    /// takes a core from threads that run parts, so the caller sleeps until a
    /// task finishes instead.
    fn help_while_waiting(&self, until: &mut Instant, poll: Instant) -> bool {
        let team = &self.team;
        let finished = self.finished.load(Ordering::Acquire);
        // Zero is no generation: a launch already running gets a look too.
        let mut seen = 0;
        let mut useful = true;
        team.ready_hosts.fetch_add(1, Ordering::SeqCst);
        loop {
            let generation = team.generation.load(Ordering::SeqCst);
            if generation != seen {
                seen = generation;
                if self.help_with_job() {
                    *until = Instant::now() + HOST_HELP;
                }
                continue;
            }
            if self.finished.load(Ordering::Acquire) != finished {
                break;
            }
            let now = Instant::now();
            if now >= *until || now >= poll {
                break;
            }
            if self.executor_asleep.load(Ordering::Relaxed) {
                // Woken for the work this thread waits for, the executor may
                // have been placed on this core: let it run first.
                std::thread::yield_now();
                continue;
            }
            // Every helper awake, or this thread on the executor's core: it
            // would only take turns with threads that run parts.
            if team.sleeping.load(Ordering::Relaxed) == 0 || on_executor_core(team) {
                useful = false;
                break;
            }
            std::hint::spin_loop();
        }
        team.ready_hosts.fetch_sub(1, Ordering::SeqCst);
        // A launch posted while the executor counted this thread as ready
        // (and so woke one helper fewer) gets its parts claimed here.
        if team.generation.load(Ordering::SeqCst) != seen {
            self.help_with_job();
        }
        useful
    }

    /// What a thread about to wait for `done` (an event) does first on a
    /// device with helpers: helps for up to [`HOST_HELP`], as block_until does.
    pub(crate) fn help_until(&self, done: impl Fn() -> bool) {
        if self.team.execs.is_empty() {
            return;
        }
        let mut until = Instant::now() + HOST_HELP;
        let poll = Instant::now() + INTERRUPT_POLL;
        while !done() && Instant::now() < until && self.help_while_waiting(&mut until, poll) {}
    }

    /// Runs parts of the posted parallel launch, if it has parts left, with
    /// the instance of a helper that is not running; whether it ran any.
    /// Only the engine's kernels, which do not recurse: a host thread's native
    /// stack may be smaller than the workers' 8 MiB, and a user kernel may
    /// recurse as deep as wasmtime allows.
    fn help_with_job(&self) -> bool {
        let Some(job) = lock(&self.team.board).job.clone() else {
            return false;
        };
        if job.module.id != crate::ENGINE_MODULE {
            return false;
        }
        for (i, exec) in self.team.execs.iter().enumerate() {
            if job.next.load(Ordering::Acquire) >= job.parts {
                return false;
            }
            if let Ok(mut exec) = exec.try_lock() {
                let ran = self.run_parts(&job, &mut exec.instances[job.module.id as usize], i as u32 + 1);
                self.team.host_parts.fetch_add(u64::from(ran), Ordering::Relaxed);
                return ran > 0;
            }
        }
        false
    }

    /// Parts of parallel launches that host threads ran while waiting.
    pub(crate) fn host_parts(&self) -> u64 {
        self.team.host_parts.load(Ordering::Relaxed)
    }

    /// Runs a parallel launch: posts it to the helpers, claims and runs parts
    /// here too, and waits until every part has run. The lowest part's error
    /// wins, so the report does not depend on timing.
    fn launch_parallel(&self, job: Arc<Job>) -> Result<()> {
        let team = &self.team;
        if !team.execs.is_empty() {
            team.executor_cpu.store(current_cpu(), Ordering::Relaxed);
            let mut b = lock(&team.board);
            b.job = Some(Arc::clone(&job));
            b.generation += 1;
            team.generation.store(b.generation, Ordering::SeqCst);
            // Helpers awake (spinning) and waiting host threads (for the
            // engine's launches: help_with_job) claim parts without a wake-up;
            // wake sleepers only for the parts left over.
            let helpers = team.execs.len() as u32;
            let hosts = if job.module.id == crate::ENGINE_MODULE { team.ready_hosts.load(Ordering::SeqCst) } else { 0 };
            let sleeping = team.sleeping.load(Ordering::Relaxed);
            let ready = helpers - sleeping + hosts;
            for _ in 0..helpers.saturating_sub(ready).min(sleeping) {
                team.start.notify_one();
            }
        }
        self.run_parts(&job, &mut lock(&job.module.instance), 0);
        if job.unfinished.load(Ordering::Acquire) != 0 {
            spin_until(|| job.unfinished.load(Ordering::Acquire) == 0);
            let mut b = lock(&team.board);
            while job.unfinished.load(Ordering::Acquire) != 0 {
                b.executor_sleeping = true;
                b = team.finished.wait(b).unwrap_or_else(|e| e.into_inner());
            }
            b.executor_sleeping = false;
        }
        lock(&team.board).job = None;
        std::mem::take(&mut *lock(&job.results)).into_iter().collect()
    }

    /// Claims and runs parts of `job` on `instance` (worker `worker`'s, whose
    /// stack slice it resets after a trap) until none is left; how many it ran.
    fn run_parts(&self, job: &Job, instance: &mut WorkerInstance, worker: u32) -> u32 {
        let mut ran = 0;
        loop {
            let part = job.next.fetch_add(1, Ordering::AcqRel);
            if part >= job.parts {
                return ran;
            }
            ran += 1;
            let args = job.args(part);
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                self.call(instance, &job.module, job.kernel, &args, job.op.as_deref(), worker)
            }))
            .unwrap_or_else(|_| {
                Err(Error::DeviceLost { device: self.index, reason: "a worker thread panicked".into() })
            });
            lock(&job.results)[part as usize] = result;
            if job.unfinished.fetch_sub(1, Ordering::AcqRel) == 1 && worker != 0 {
                let b = lock(&self.team.board);
                if b.executor_sleeping {
                    self.team.finished.notify_one();
                }
            }
        }
    }

    /// A helper thread's loop: waits for each posted job (spinning for [`SPIN`]
    /// first, as launches come in bursts) and runs the parts it can claim.
    fn help(self: Arc<Self>, worker: u32) {
        let team = &self.team;
        let mut seen = 0;
        let mut spin = true;
        loop {
            if spin {
                spin_until(|| team.generation.load(Ordering::Acquire) != seen);
            }
            spin = true;
            let job = {
                let mut b = lock(&team.board);
                loop {
                    if b.shutdown {
                        return;
                    }
                    if b.generation != seen {
                        seen = b.generation;
                        break b.job.clone();
                    }
                    team.sleeping.fetch_add(1, Ordering::Relaxed);
                    b = team.start.wait(b).unwrap_or_else(|e| e.into_inner());
                    team.sleeping.fetch_sub(1, Ordering::Relaxed);
                }
            };
            if let Some(job) = job {
                // Woken onto the executor's core, this thread would only take
                // turns with it: leave the parts to the executor and to
                // waiting host threads (which may borrow this instance), and
                // go back to sleep without spinning there.
                if on_executor_core(team) {
                    spin = false;
                    continue;
                }
                let mut exec = lock(&team.execs[worker as usize - 1]);
                self.run_parts(&job, &mut exec.instances[job.module.id as usize], worker);
            }
        }
    }
}

/// Whether the calling thread shares the executor's core (as far as known).
fn on_executor_core(team: &Team) -> bool {
    let cpu = current_cpu();
    cpu >= 0 && cpu == team.executor_cpu.load(Ordering::Relaxed)
}

/// The core the calling thread runs on, where the platform says (Linux); -1 elsewhere.
fn current_cpu() -> i32 {
    #[cfg(target_os = "linux")]
    // SAFETY: sched_getcpu takes no arguments and only reads the calling thread's state.
    return unsafe { libc::sched_getcpu() };
    #[cfg(not(target_os = "linux"))]
    return -1;
}

/// Replaces the queued task with sequence number `seq` by a no-op; false if
/// it is no longer queued (it is running or has run).
fn cancel_queued(stream: &mut StreamQueue, seq: u64) -> bool {
    match stream.queue.iter_mut().find(|q| q.seq == seq) {
        Some(queued) => {
            queued.task = Task::Cancelled;
            true
        }
        None => false,
    }
}

/// What the allocator asks of a device: stream progress, a drain before it
/// returns segments, and giving their pages back to the operating system.
impl crate::allocator::Device for DeviceShared {
    fn completed(&self, stream: StreamId, ticket: u64) -> bool {
        DeviceShared::completed(self, stream, ticket)
    }

    fn drain(&self) {
        DeviceShared::drain(self);
    }

    fn discard(&self, start: u64, len: u64) {
        // The allocator's ranges lie in the heap, inside the memory.
        let _ = self.view.discard(start, len);
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
