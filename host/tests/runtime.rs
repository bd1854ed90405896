//! Integration tests of the device runtime through its public API (the WIT traits).

use std::sync::Arc;
use std::time::Duration;

use openreg_host::abi::*;
use openreg_host::{layout, Config, Error, Runtime};

const MIB: u64 = 1 << 20;

/// Two 64 MiB devices: small enough that a stray 32-bit address traps.
fn runtime() -> Runtime {
    Runtime::new(Config {
        device_count: 2,
        memory_bytes: 64 * MIB,
        memory64: false,
        kernel_timeout: Duration::from_secs(20),
        ..Config::default()
    })
    .unwrap()
}

fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

fn upload(rt: &Runtime, stream: StreamRef, values: &[f32]) -> DevicePtr {
    let ptr = rt.allocate(stream.device, values.len() as u64 * 4, stream).unwrap();
    rt.copy_to_device(stream, ptr, &f32_bytes(values)).unwrap();
    ptr
}

fn download(rt: &Runtime, stream: StreamRef, ptr: DevicePtr, n: usize) -> Vec<f32> {
    f32s(&rt.copy_to_host(stream, ptr, n as u64 * 4).unwrap())
}

fn launch(rt: &Runtime, stream: StreamRef, name: &str, args: &[KernelArg]) -> Result<(), Error> {
    let kernel = rt.find_kernel(stream.device, name)?;
    rt.launch(stream, kernel, args)
}

use KernelArg::{Ptr, F32, I32};

/// The engine's elementwise parameter block (`device-kernels/engine/openreg_engine.h`,
/// `or_elementwise`), built field by field at the header's offsets.
struct Elementwise(ParamBlock);

impl Elementwise {
    const SIZE: usize = 776;
    /// c10::ScalarType codes.
    const F32: u32 = 6;
    const F16: u32 = 5;
    const I64: u32 = 4;
    const BOOL: u32 = 11;

    /// `op` (the header's `or_op` order) over `sizes` (innermost first).
    fn new(op: u32, compute: u32, ntensors: u32, sizes: &[i64]) -> Elementwise {
        let mut b = Elementwise(ParamBlock { bytes: vec![0; Self::SIZE], pointers: Vec::new() });
        b.put(0, &op.to_le_bytes());
        b.put(4, &compute.to_le_bytes());
        b.put(8, &ntensors.to_le_bytes());
        b.put(12, &(sizes.len() as u32).to_le_bytes());
        for (d, size) in sizes.iter().enumerate() {
            b.put(40 + 8 * d, &size.to_le_bytes());
        }
        b
    }

    fn put(&mut self, at: usize, bytes: &[u8]) {
        self.0.bytes[at..at + bytes.len()].copy_from_slice(bytes);
    }

    /// Operand `k` at device address `ptr`, of `dtype`, with byte strides.
    fn operand(mut self, k: usize, ptr: DevicePtr, dtype: u32, strides: &[i64]) -> Elementwise {
        self.put(16 + 4 * k, &dtype.to_le_bytes());
        self.put(168 + 8 * k, &ptr.to_le_bytes());
        self.0.pointers.push(168 + 8 * k as u32);
        for (d, stride) in strides.iter().enumerate() {
            self.put(200 + 128 * k + 8 * d, &stride.to_le_bytes());
        }
        self
    }

    /// Operand `k` is the scalar `value` (compute type float).
    fn scalar(mut self, k: usize, value: f64) -> Elementwise {
        let mask = u32::from_le_bytes(self.0.bytes[32..36].try_into().unwrap()) | (1 << k);
        self.put(32, &mask.to_le_bytes());
        self.put(712 + 8 * k, &value.to_le_bytes());
        self
    }

    fn arg(mut self, k: usize, value: f64) -> Elementwise {
        self.put(744 + 8 * k, &value.to_le_bytes());
        self
    }
}

/// `or_op` and `or_compute` values used below: the ops' positions in
/// openreg_engine.h's OR_ELEMENTWISE_OPS (new ops go at its end).
const OP_COPY: u32 = 1;
const OP_ADD: u32 = 19;
const OP_GT: u32 = 29;
const COMPUTE_F32: u32 = 0;

/// A kernel that spins for `n` iterations: keeps an executor busy.
const SPIN_WAT: &str = r#"(module
  (import "env" "memory" (memory 1))
  (func (export "spin") (param $n i32) (local $i i32)
    (loop $l
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $l (i32.lt_u (local.get $i) (local.get $n))))))"#;

/// A gate and an order log. `hold` never returns: it keeps its device's
/// executor busy until the watchdog stops it. (Nothing else can open it: a
/// peer copy into a device waits for that device's running kernel, so no
/// host or device write can reach memory a kernel is using.) `append` logs
/// `value` to a list at `log` (a count followed by the values) to show the
/// order kernels ran in.
const GATE_WAT: &str = r#"(module
  (import "env" "memory" (memory 1))
  (func (export "hold") (loop $l (br $l)))
  (func (export "append") (param $log i32) (param $value i32) (local $n i32)
    (local.set $n (i32.load (local.get $log)))
    (i32.store (i32.add (local.get $log) (i32.shl (i32.add (local.get $n) (i32.const 1)) (i32.const 2)))
      (local.get $value))
    (i32.store (local.get $log) (i32.add (local.get $n) (i32.const 1)))))"#;

/// How long a gate holds its device: the watchdog limit of [`gated_runtime`].
/// The calls a test makes while the gate is closed take microseconds.
const GATE_HOLD: Duration = Duration::from_secs(1);

/// [`runtime`] with a watchdog short enough to open gates.
fn gated_runtime() -> Runtime {
    Runtime::new(Config { device_count: 2, memory_bytes: 64 * MIB, kernel_timeout: GATE_HOLD, ..Config::default() })
        .unwrap()
}

/// A closed gate on device 0: `block` a stream with it, then `open` it.
struct Gate {
    blocked: std::cell::Cell<Option<StreamRef>>,
}

impl Gate {
    fn new(rt: &Runtime) -> Gate {
        rt.load_module(0, "gate", GATE_WAT.as_bytes()).unwrap();
        Gate { blocked: std::cell::Cell::new(None) }
    }

    /// Occupies device 0's executor on `stream` until the gate opens.
    fn block(&self, rt: &Runtime, stream: StreamRef) {
        launch(rt, stream, "hold", &[]).unwrap();
        self.blocked.set(Some(stream));
    }

    /// Waits until the watchdog has stopped the gate's kernel, and takes the
    /// timeout error it left on its stream (with the rest of that stream's work).
    fn open(&self, rt: &Runtime) {
        let stream = self.blocked.take().expect("the gate blocks a stream");
        let err = rt.synchronize_stream(stream).unwrap_err();
        assert_eq!(err.code(), ErrorCode::KernelTimeout, "{err}");
    }
}

/// Kernels that fault in each way a kernel can.
const FAULTS_WAT: &str = r#"(module
  (import "env" "memory" (memory 1))
  (func (export "store_at") (param $addr i32) (param $v i32)
    (i32.store (local.get $addr) (local.get $v)))
  (func (export "oob") (i32.store (i32.const 0xfffffff0) (i32.const 1)))
  (func (export "abort") unreachable)
  (func $recurse (export "recurse") (param i32) (call $recurse (i32.add (local.get 0) (i32.const 1))))
  (func (export "divide") (param i32) (drop (i32.div_s (i32.const 1) (local.get 0))))
  (func (export "forever") (loop $l (br $l))))"#;

// ---- devices and addresses ---------------------------------------------------

#[test]
fn devices_report_count_and_properties() {
    let rt = runtime();
    assert_eq!(rt.device_count(), 2);
    let p = rt.properties(1).unwrap();
    assert_eq!((p.index, p.capacity_bytes, p.memory64, p.kernel_timeout_ms), (1, 64 * MIB, false, 20_000));
}

#[test]
fn a_bad_device_index_says_how_many_devices_there_are() {
    let rt = runtime();
    let err = rt.properties(2).unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidDevice);
    assert_eq!(err.to_string(), "invalid device index 2: there are 2 openreg devices (openreg:0 to openreg:1)");
    assert!(rt.default_stream(7).is_err());
}

#[test]
fn device_of_names_the_owning_device() {
    let rt = runtime();
    let a = rt.allocate(0, 100, rt.default_stream(0).unwrap()).unwrap();
    let b = rt.allocate(1, 100, rt.default_stream(1).unwrap()).unwrap();
    assert_eq!(rt.device_of(a), Some(0));
    assert_eq!(rt.device_of(b), Some(1));
    assert_eq!(rt.device_of(0), None);
    let host = Box::new(0u8);
    assert_eq!(rt.device_of(&*host as *const u8 as u64), None);
}

// ---- copies --------------------------------------------------------------------

#[test]
fn host_to_device_to_host_round_trips_bytes() {
    let rt = runtime();
    let s = rt.default_stream(0).unwrap();
    for len in [1u64, 7, 512, 4096, 3 * MIB + 5] {
        let data: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
        let p = rt.allocate(0, len, s).unwrap();
        rt.copy_to_device(s, p, &data).unwrap();
        assert_eq!(rt.copy_to_host(s, p, len).unwrap(), data);
        // A copy into the middle of a block, at an odd offset.
        if len > 8 {
            rt.copy_to_device(s, p + 3, &[9, 9, 9]).unwrap();
            assert_eq!(rt.copy_to_host(s, p + 2, 5).unwrap(), vec![data[2], 9, 9, 9, data[6]]);
        }
        rt.free(p).unwrap();
    }
}

#[test]
fn async_copies_from_and_to_host_memory_complete_at_synchronize() {
    let rt = runtime();
    let s = rt.create_stream(0, 0).unwrap();
    let src: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
    let mut dst = vec![0u8; src.len()];
    let p = rt.allocate(0, src.len() as u64, s).unwrap();
    // SAFETY: both buffers outlive the synchronize below and are untouched until then.
    unsafe {
        rt.copy_to_device_async(s, p, src.as_ptr() as u64, src.len() as u64).unwrap();
        rt.copy_to_host_async(s, dst.as_mut_ptr() as u64, p, src.len() as u64).unwrap();
    }
    rt.synchronize_stream(s).unwrap();
    assert_eq!(dst, src);
}

#[test]
fn device_to_device_copies_work_on_one_device_and_between_devices() {
    let rt = runtime();
    let (s0, s1) = (rt.default_stream(0).unwrap(), rt.default_stream(1).unwrap());
    let values: Vec<f32> = (0..1000).map(|i| i as f32 * 0.5).collect();
    let a = upload(&rt, s0, &values);
    let b = rt.allocate(0, 4000, s0).unwrap();
    rt.copy_device_to_device(s0, 0, b, 0, a, 4000).unwrap();
    assert_eq!(download(&rt, s0, b, 1000), values);
    // Overlapping copy within one device has memmove semantics.
    rt.copy_device_to_device(s0, 0, b + 4, 0, b, 400).unwrap();
    let moved = download(&rt, s0, b, 101);
    assert_eq!(moved[1..], values[..100]);
    // To another device, queued on either device's stream.
    let c = rt.allocate(1, 4000, s1).unwrap();
    rt.copy_device_to_device(s0, 1, c, 0, a, 4000).unwrap();
    rt.synchronize_stream(s0).unwrap();
    assert_eq!(download(&rt, s1, c, 1000), values);
    let d = rt.allocate(0, 4000, s0).unwrap();
    rt.copy_device_to_device(s1, 0, d, 1, c, 4000).unwrap();
    rt.synchronize_stream(s1).unwrap();
    assert_eq!(download(&rt, s0, d, 1000), values);
}

#[test]
fn activity_records_carry_device_timestamps_and_the_queueing_threads_correlation() {
    // Recording is process-wide and other tests run meanwhile: this test keeps
    // only the records of its own correlation ids.
    let rt = runtime();
    let s = rt.create_stream(1, 0).unwrap();
    let n = 1 << 16;
    let values = vec![1.5f32; n];
    let before = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
    rt.set_activity_recording(true);
    rt.set_correlation(0x0ace_0001);
    let a = upload(&rt, s, &values);
    rt.set_correlation(0x0ace_0002);
    let kernel = rt.find_kernel(1, "add_f32").unwrap();
    rt.launch_op(s, kernel, &[Ptr(a), Ptr(a), Ptr(a), I32(n as i32)], "aten::add").unwrap();
    rt.set_correlation(0x0ace_0003);
    assert_eq!(download(&rt, s, a, 1)[0], 3.0);
    rt.set_correlation(0);
    rt.synchronize_stream(s).unwrap();
    let after = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
    let mine: Vec<_> = rt.take_activity().into_iter().filter(|r| r.correlation >> 16 == 0x0ace).collect();
    rt.set_activity_recording(false);

    let kinds: Vec<_> = mine.iter().map(|r| (r.kind, r.correlation & 0xffff)).collect();
    assert_eq!(
        kinds,
        [(ActivityKind::CopyHostToDevice, 1), (ActivityKind::Kernel, 2), (ActivityKind::CopyDeviceToHost, 3)]
    );
    assert_eq!((mine[0].name.as_str(), mine[0].bytes, mine[0].workers), ("memcpy HtoD", n as u64 * 4, 0));
    assert_eq!((mine[1].name.as_str(), mine[1].op.as_deref(), mine[1].workers), ("add_f32", Some("aten::add"), 1));
    assert_eq!((mine[2].name.as_str(), mine[2].bytes), ("memcpy DtoH", 4));
    for (r, next) in mine.iter().zip(mine.iter().skip(1)) {
        assert!(r.end_ns <= next.start_ns, "work on one stream runs in order: {r:?} then {next:?}");
    }
    for r in &mine {
        assert_eq!((r.device, r.stream_id), (1, s.id));
        assert!(
            before <= r.start_ns && r.start_ns <= r.end_ns && r.end_ns <= after,
            "{r:?} outside [{before}, {after}]"
        );
    }

    // Off: work leaves no record.
    rt.set_correlation(0x0ace_0004);
    rt.launch(s, kernel, &[Ptr(a), Ptr(a), Ptr(a), I32(1)]).unwrap();
    rt.synchronize_stream(s).unwrap();
    rt.set_correlation(0);
    assert!(rt.take_activity().iter().all(|r| r.correlation != 0x0ace_0004));
}

#[test]
fn copies_outside_device_memory_or_on_the_wrong_device_are_rejected() {
    let rt = runtime();
    let s0 = rt.default_stream(0).unwrap();
    let p = rt.allocate(0, 1024, s0).unwrap();
    let err = rt.copy_to_host(s0, p, 64 * MIB).unwrap_err();
    assert_eq!(err.code(), ErrorCode::OutOfBounds);
    assert!(err.to_string().contains("of openreg:0 lie outside [0x1000000, 0x4000000)"), "{err}");
    let err = rt.copy_to_device(rt.default_stream(1).unwrap(), p, &[1, 2, 3]).unwrap_err();
    assert_eq!(err.code(), ErrorCode::WrongDevice);
    assert_eq!(rt.copy_to_host(s0, 0, 4).unwrap_err().code(), ErrorCode::InvalidPointer);
    assert_eq!(rt.copy_to_host(s0, 12345, 4).unwrap_err().code(), ErrorCode::InvalidPointer);
    // The device still works.
    rt.copy_to_device(s0, p, &[1, 2, 3]).unwrap();
    assert_eq!(rt.copy_to_host(s0, p, 3).unwrap(), [1, 2, 3]);
}

#[test]
fn every_device_address_is_checked_as_a_whole_range_against_the_named_device() {
    let rt = runtime();
    let (s0, s1) = (rt.default_stream(0).unwrap(), rt.default_stream(1).unwrap());
    let mine = upload(&rt, s0, &[1.0; 256]);
    let secret = upload(&rt, s1, &[7.0; 256]);
    // The first block of a fresh device starts its heap: device 0's memory
    // begins HEAP_START below it, and device 1's right after device 0's.
    let device0 = mine - layout::HEAP_START;
    assert_eq!(rt.device_of(device0 + 64 * MIB), Some(1));
    let code = |r: Result<(), Error>| r.unwrap_err().code();
    // A pointer that lies in device 1 but is presented as device 0's, on every path.
    assert_eq!(code(rt.copy_device_to_device(s0, 0, mine, 0, secret, 1024)), ErrorCode::WrongDevice);
    assert_eq!(code(rt.copy_device_to_device(s0, 0, secret, 0, mine, 1024)), ErrorCode::WrongDevice);
    assert_eq!(code(rt.copy_device_to_device(s0, 1, mine, 0, secret, 1024)), ErrorCode::WrongDevice);
    assert_eq!(code(rt.copy_to_host(s0, secret, 4).map(drop)), ErrorCode::WrongDevice);
    assert_eq!(code(rt.record_stream(secret, s0)), ErrorCode::WrongDevice);
    assert_eq!(code(launch(&rt, s0, "fill_f32", &[Ptr(secret), I32(1), F32(0.0)])), ErrorCode::WrongDevice);
    // A range that starts on device 0 but runs past its end (into device 1's range).
    let last = device0 + 64 * MIB - 512;
    assert_eq!(code(rt.copy_device_to_device(s1, 1, secret, 0, last, 1024)), ErrorCode::OutOfBounds);
    // Ranges outside the heap: the null guard, module data, parameters, the kernel stack.
    for offset in [8, layout::STATIC_START, layout::PARAMS_START, layout::STACK_TOP - 64] {
        let inside = device0 + offset;
        assert_eq!(code(rt.copy_to_device(s0, inside, &[0; 16])), ErrorCode::OutOfBounds, "offset {offset:#x}");
        assert_eq!(code(rt.copy_device_to_device(s0, 0, mine, 0, inside, 16)), ErrorCode::OutOfBounds);
        assert_eq!(code(launch(&rt, s0, "fill_f32", &[Ptr(inside), I32(1), F32(0.0)])), ErrorCode::OutOfBounds);
    }
    // Nothing moved: both devices hold what they held, and still compute.
    assert_eq!(download(&rt, s1, secret, 256), [7.0; 256]);
    assert_eq!(download(&rt, s0, mine, 256), [1.0; 256]);
    launch(&rt, s0, "fill_f32", &[Ptr(mine), I32(256), F32(2.0)]).unwrap();
    assert_eq!(download(&rt, s0, mine, 256), [2.0; 256]);
}

/// `watch(p, n)` spins up to `n` rounds watching the word at `p`, and stores
/// at `p + 4` whether it changed while the kernel ran.
const WATCH_WAT: &str = r#"(module
  (import "env" "memory" (memory 1))
  (func (export "watch") (param $p i32) (param $n i32) (local $v0 i32) (local $i i32)
    (local.set $v0 (i32.load (local.get $p)))
    (block $out (loop $l
      (br_if $out (i32.ne (i32.load (local.get $p)) (local.get $v0)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $l (i32.lt_u (local.get $i) (local.get $n)))))
    (i32.store offset=4 (local.get $p) (i32.ne (i32.load (local.get $p)) (local.get $v0)))))"#;

#[test]
fn a_peer_copy_never_writes_memory_a_kernel_on_the_other_device_is_using() {
    let rt = runtime();
    rt.load_module(1, "watch", WATCH_WAT.as_bytes()).unwrap();
    let (s0, s1) = (rt.default_stream(0).unwrap(), rt.default_stream(1).unwrap());
    let src = rt.allocate(0, 4, s0).unwrap();
    rt.copy_to_device(s0, src, &3u32.to_le_bytes()).unwrap();
    for _ in 0..3 {
        let word = rt.allocate(1, 8, s1).unwrap();
        rt.copy_to_device(s1, word, &[0; 8]).unwrap();
        launch(&rt, s1, "watch", &[Ptr(word), I32(100_000_000)]).unwrap();
        std::thread::sleep(Duration::from_millis(10));
        // Queued on device 0, whose executor is idle: it runs at once, but
        // must not write device 1's memory while `watch` runs there.
        rt.copy_device_to_device(s0, 1, word, 0, src, 4).unwrap();
        rt.synchronize_stream(s0).unwrap();
        let got = rt.copy_to_host(s1, word, 8).unwrap();
        assert_eq!(got[4..], [0, 0, 0, 0], "the kernel saw its memory change under it");
        assert_eq!(got[..4], 3u32.to_le_bytes(), "the copy landed");
    }
}

thread_local! {
    static INTERRUPTED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Makes waits on the calling thread see an interrupt (as Ctrl-C would).
fn interrupt_this_thread(on: bool) {
    fn check() -> bool {
        INTERRUPTED.with(|i| i.get())
    }
    openreg_host::set_interrupt_check(check);
    INTERRUPTED.with(|i| i.set(on));
}

#[test]
fn an_interrupt_ends_a_wait_and_cancels_a_blocking_copy_that_has_not_started() {
    let rt = gated_runtime();
    let gate = Gate::new(&rt);
    let s = rt.create_stream(0, 0).unwrap();
    let p = upload(&rt, s, &[5.0; 16]);
    gate.block(&rt, s);
    interrupt_this_thread(true);
    // Each wait ends with `Interrupted`, not with the gate's watchdog timeout.
    let err = rt.synchronize_stream(s).unwrap_err();
    assert_eq!(err.code(), ErrorCode::Interrupted, "{err}");
    let mut host = vec![0u8; 64];
    let err = rt.copy_to_host_slice(s, &mut host, p).unwrap_err();
    assert_eq!(err.code(), ErrorCode::Interrupted, "{err}");
    assert_eq!(rt.synchronize_device(0).unwrap_err().code(), ErrorCode::Interrupted);
    interrupt_this_thread(false);
    drop(host); // the cancelled copy must never write it
    gate.open(&rt);
    // The cancelled copy counted as done, and the device computes on.
    assert!(rt.query_stream(s).unwrap());
    assert_eq!(download(&rt, s, p, 16), [5.0; 16]);
}

#[cfg(target_os = "linux")]
fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    statm.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 4096
}

#[cfg(target_os = "linux")]
#[test]
fn empty_cache_gives_released_pages_back_to_the_operating_system() {
    let rt = Runtime::new(Config { device_count: 1, memory_bytes: 1 << 30, ..Config::default() }).unwrap();
    let s = rt.default_stream(0).unwrap();
    let before = resident_bytes();
    let size = 384 * MIB;
    let p = rt.allocate(0, size, s).unwrap();
    let chunk = vec![1u8; 16 << 20];
    for at in (0..size).step_by(chunk.len()) {
        rt.copy_to_device(s, p + at, &chunk).unwrap();
    }
    drop(chunk);
    let touched = resident_bytes();
    assert!(touched > before + 300 * MIB, "writing 384 MiB grew the process by {} MiB", (touched - before) >> 20);
    rt.free(p).unwrap();
    assert!(resident_bytes() > before + 300 * MIB, "a freed block stays cached (and resident) until empty_cache");
    rt.empty_cache(0).unwrap();
    let after = resident_bytes();
    assert!(after + 300 * MIB < touched, "empty_cache left {} MiB more resident", after.saturating_sub(before) >> 20);
    // The released range is usable again, and reads back what is written.
    let q = rt.allocate(0, size, s).unwrap();
    rt.copy_to_device(s, q + size - 4, &[9, 8, 7, 6]).unwrap();
    assert_eq!(rt.copy_to_host(s, q + size - 4, 4).unwrap(), [9, 8, 7, 6]);
}

#[test]
fn out_of_memory_waits_for_frees_pending_on_other_streams() {
    let rt = runtime();
    rt.load_module(0, "spin", SPIN_WAT.as_bytes()).unwrap();
    let s = rt.default_stream(0).unwrap();
    let other = rt.create_stream(0, 0).unwrap();
    let held = rt.allocate(0, 40 * MIB, s).unwrap();
    launch(&rt, other, "spin", &[I32(100_000_000)]).unwrap();
    rt.record_stream(held, other).unwrap();
    rt.free(held).unwrap(); // pending until `other` passes its spin
                            // Only fits once the pending free has completed and its segment is released.
    let p = rt.allocate(0, 40 * MIB, rt.create_stream(0, 0).unwrap()).unwrap();
    assert_ne!(p, 0);
    assert_eq!(rt.stats(0).unwrap().ooms, 0);
}

// ---- compile cache ------------------------------------------------------------

/// Set to a directory, [`compile_cache_child`] starts a device whose built-in
/// modules go through the compile cache there. Each run is a process of its
/// own: within one process, runtimes share their compiled modules.
const CACHE_CHILD: &str = "OPENREG_TEST_COMPILE_CACHE_CHILD";

#[test]
fn compile_cache_child() {
    let Some(dir) = std::env::var_os(CACHE_CHILD) else { return };
    let rt = Runtime::new(Config {
        device_count: 1,
        memory_bytes: 64 * MIB,
        compile_cache: Some(dir.into()),
        ..Config::default()
    })
    .unwrap();
    let s = rt.default_stream(0).unwrap();
    let (pa, pb) = (upload(&rt, s, &[1.5, -2.0, 3.0]), upload(&rt, s, &[0.25, 4.0, -3.0]));
    launch(&rt, s, "add_f32", &[Ptr(pa), Ptr(pa), Ptr(pb), I32(3)]).unwrap();
    assert_eq!(download(&rt, s, pa, 3), [1.75, 2.0, 0.0]);
}

/// Runs [`compile_cache_child`] in a new process over the cache in `dir`.
fn add_with_cache(dir: &std::path::Path) {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "compile_cache_child", "--test-threads=1"])
        .env(CACHE_CHILD, dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
}

/// A cache file's name up to its bytes' length and hash: the module, its
/// address width and the engine settings.
fn module_stem(file: &str) -> &str {
    let cut = file[..file.rfind('-').unwrap()].rfind('-').unwrap();
    &file[..=cut]
}

/// The cache's files, by name, with their contents.
fn cached_files(dir: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (e.file_name().into_string().unwrap(), std::fs::read(e.path()).unwrap())
        })
        .collect();
    files.sort();
    files
}

#[test]
fn built_in_modules_compile_once_into_the_cache_and_a_bad_file_is_recompiled() {
    let dir = std::env::temp_dir().join(format!("openreg-compile-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);

    add_with_cache(&dir);
    let first = cached_files(&dir);
    let names: Vec<&str> = first.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(names[0].starts_with("openreg.builtin-wasm32-"), "{names:?}");
    assert!(names[1].starts_with("openreg.engine-wasm32-"), "{names:?}");
    assert!(names.iter().all(|n| n.ends_with(".cwasm")), "{names:?}");

    // A second process loads them: the same files with the same bytes. Files
    // of an older build of each module (same name and engine settings, other
    // bytes) are left alone while nothing is compiled.
    let stale: Vec<String> =
        first.iter().map(|(n, _)| format!("{}12-0123456789abcdef.cwasm", module_stem(n))).collect();
    for file in &stale {
        std::fs::write(dir.join(file), b"an older build").unwrap();
    }
    add_with_cache(&dir);
    let mut expected = first.clone();
    expected.extend(stale.iter().map(|file| (file.clone(), b"an older build".to_vec())));
    expected.sort();
    assert_eq!(cached_files(&dir), expected);

    // A damaged file is not run: one byte changed in the middle of the code,
    // or a file cut short, is compiled again and the file replaced (with the
    // same bytes: compiling is deterministic). Compiling also removes the
    // older build's file of the same module (the built-in kernels' stays).
    let mut damaged = first[1].1.clone();
    let middle = damaged.len() / 2;
    damaged[middle] ^= 0x10;
    for bad in [damaged, first[1].1[..first[1].1.len() / 2].to_vec()] {
        std::fs::write(dir.join(&first[1].0), bad).unwrap();
        add_with_cache(&dir);
        let mut expected = first.clone();
        expected.push((stale[0].clone(), b"an older build".to_vec()));
        expected.sort();
        assert!(cached_files(&dir) == expected, "the damaged file was not replaced");
    }

    // A cache that cannot be written (its directory is a file) is skipped.
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::write(&dir, b"not a directory").unwrap();
    add_with_cache(&dir);
    std::fs::remove_file(&dir).unwrap();
}

// ---- built-in kernels -----------------------------------------------------------

#[test]
fn builtin_kernels_match_a_native_loop() {
    let rt = runtime();
    let s = rt.default_stream(0).unwrap();
    let n = 1003; // not a multiple of the SIMD width
    let a: Vec<f32> = (0..n).map(|i| i as f32 * 0.25 - 7.0).collect();
    let b: Vec<f32> = (0..n).map(|i| (i as f32).sin()).collect();
    let (pa, pb) = (upload(&rt, s, &a), upload(&rt, s, &b));
    let out = rt.allocate(0, n as u64 * 4, s).unwrap();
    launch(&rt, s, "add_f32", &[Ptr(out), Ptr(pa), Ptr(pb), I32(n as i32)]).unwrap();
    let expected: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
    assert_eq!(download(&rt, s, out, n), expected);

    // In place and at an unaligned address.
    launch(&rt, s, "add_f32", &[Ptr(pa + 4), Ptr(pa + 4), Ptr(pb), I32(n as i32 - 1)]).unwrap();
    let got = download(&rt, s, pa, n);
    assert_eq!(got[0], a[0]);
    for i in 1..n {
        assert_eq!(got[i], a[i] + b[i - 1]);
    }

    launch(&rt, s, "fill_f32", &[Ptr(out), I32(n as i32), F32(2.5)]).unwrap();
    assert!(download(&rt, s, out, n).iter().all(|&v| v == 2.5));
    launch(&rt, s, "fill_u8", &[Ptr(out), I32(4 * n as i32), I32(0)]).unwrap();
    assert!(download(&rt, s, out, n).iter().all(|&v| v == 0.0));
    launch(&rt, s, "copy_bytes", &[Ptr(out), Ptr(pb), I32(4 * n as i32)]).unwrap();
    assert_eq!(download(&rt, s, out, n), b);
    launch(&rt, s, "noop", &[]).unwrap();
    rt.synchronize_device(0).unwrap();
}

#[test]
fn launch_arguments_are_checked_against_the_kernel_signature() {
    let rt = runtime();
    let s = rt.default_stream(0).unwrap();
    let p = rt.allocate(0, 64, s).unwrap();
    let err = launch(&rt, s, "fill_f32", &[Ptr(p), I32(16)]).unwrap_err();
    assert_eq!(err.to_string(), "invalid argument: kernel `fill_f32` takes 3 arguments, 2 given");
    let err = launch(&rt, s, "fill_f32", &[Ptr(p), I32(16), I32(1)]).unwrap_err();
    assert!(err.to_string().contains("parameter 2 is f32"), "{err}");
    let err = launch(&rt, s, "no_such_kernel", &[]).unwrap_err();
    assert_eq!(err.to_string(), "no kernel named `no_such_kernel` is loaded on openreg:0");
    let kernels = rt.module_kernels(0, 1).unwrap();
    let fill = kernels.iter().find(|k| k.name == "fill_f32").unwrap();
    assert_eq!(fill.params, [ValueType::I32, ValueType::I32, ValueType::F32]);
}

// ---- isolation and faults ------------------------------------------------------

#[test]
fn a_kernel_on_one_device_cannot_reach_another_devices_memory() {
    let rt = runtime();
    let (s0, s1) = (rt.default_stream(0).unwrap(), rt.default_stream(1).unwrap());
    rt.load_module(0, "faults", FAULTS_WAT.as_bytes()).unwrap();
    // The first block of each fresh device sits at the same offset in its memory.
    let ours = rt.allocate(0, 16, s0).unwrap();
    let theirs = rt.allocate(1, 16, s1).unwrap();
    assert_eq!(theirs - ours, 64 * MIB, "same offset, one device span apart");
    rt.copy_to_device(s0, ours, &f32_bytes(&[0.0; 4])).unwrap();
    rt.copy_to_device(s1, theirs, &f32_bytes(&[1.0; 4])).unwrap();
    // A device-1 pointer is refused for a device-0 launch...
    let err = launch(&rt, s0, "store_at", &[Ptr(theirs), I32(7)]).unwrap_err();
    assert_eq!(err.code(), ErrorCode::WrongDevice);
    assert!(err.to_string().contains("is on openreg:1, but the operation runs on openreg:0"), "{err}");
    // ...and that offset, reached by a device-0 kernel, is device 0's own memory.
    launch(&rt, s0, "store_at", &[Ptr(ours), I32(7)]).unwrap();
    rt.synchronize_device(0).unwrap();
    assert_eq!(rt.copy_to_host(s0, ours, 4).unwrap(), 7u32.to_le_bytes());
    assert_eq!(download(&rt, s1, theirs, 4), [1.0; 4], "device 1 is untouched");
}

#[test]
fn a_trapping_kernel_reports_kernel_device_and_trap_and_the_device_stays_usable() {
    let rt = runtime();
    let s = rt.default_stream(0).unwrap();
    rt.load_module(0, "faults", FAULTS_WAT.as_bytes()).unwrap();
    let cases = [
        ("oob", vec![], TrapKind::OutOfBounds),
        ("abort", vec![], TrapKind::Unreachable),
        ("recurse", vec![I32(0)], TrapKind::StackOverflow),
        ("divide", vec![I32(0)], TrapKind::IntegerDivideByZero),
        ("store_at", vec![I32(8), I32(1)], TrapKind::NullPointerWrite),
    ];
    for (name, args, kind) in cases {
        launch(&rt, s, name, &args).unwrap(); // the launch itself is queued fine
        let err = rt.synchronize_stream(s).unwrap_err();
        match &err {
            Error::KernelTrap { device: 0, kernel, trap, .. } => {
                assert_eq!((kernel.as_str(), *trap), (name, kind));
            }
            other => panic!("{name}: expected a trap, got {other}"),
        }
        assert!(err.to_string().starts_with(&format!("kernel `{name}` trapped on openreg:0: {}", kind.wit_name())));
        // The error was reported once; the device keeps working (and the
        // null guard is clean again: the same launch with 0 passes).
        rt.synchronize_stream(s).unwrap();
        launch(&rt, s, "store_at", &[I32(8), I32(0)]).unwrap();
        rt.synchronize_stream(s).unwrap();
        let p = upload(&rt, s, &[1.0, 2.0]);
        launch(&rt, s, "add_f32", &[Ptr(p), Ptr(p), Ptr(p), I32(2)]).unwrap();
        assert_eq!(download(&rt, s, p, 2), [2.0, 4.0]);
    }
}

#[test]
fn an_error_on_a_stream_surfaces_at_the_next_synchronizing_call() {
    let rt = runtime();
    rt.load_module(0, "faults", FAULTS_WAT.as_bytes()).unwrap();
    let s = rt.create_stream(0, 0).unwrap();
    let p = upload(&rt, s, &[3.0]);
    launch(&rt, s, "abort", &[]).unwrap();
    launch(&rt, s, "fill_f32", &[Ptr(p), I32(1), F32(5.0)]).unwrap();
    // A blocking copy is a synchronizing call: it reports the earlier trap.
    let err = rt.copy_to_host(s, p, 4).unwrap_err();
    assert_eq!(err.code(), ErrorCode::KernelTrap);
    // Work queued after the trap still ran.
    assert_eq!(download(&rt, s, p, 1), [5.0]);
    // Device-wide synchronize reports errors of any stream.
    launch(&rt, s, "abort", &[]).unwrap();
    assert_eq!(rt.synchronize_device(0).unwrap_err().code(), ErrorCode::KernelTrap);
    rt.synchronize_device(0).unwrap();
}

#[test]
fn the_watchdog_stops_a_runaway_kernel() {
    let rt = Runtime::new(Config {
        kernel_timeout: Duration::from_millis(200),
        memory_bytes: 64 * MIB,
        ..Config::default()
    })
    .unwrap();
    rt.load_module(0, "faults", FAULTS_WAT.as_bytes()).unwrap();
    let s = rt.default_stream(0).unwrap();
    launch(&rt, s, "forever", &[]).unwrap();
    let err = rt.synchronize_stream(s).unwrap_err();
    assert_eq!(err, Error::KernelTimeout { device: 0, kernel: "forever".into(), op: None, limit_ms: 200 }, "{err}");
    let p = upload(&rt, s, &[1.5]);
    launch(&rt, s, "add_f32", &[Ptr(p), Ptr(p), Ptr(p), I32(1)]).unwrap();
    assert_eq!(download(&rt, s, p, 1), [3.0]);
}

// ---- modules --------------------------------------------------------------------

fn data_module(base: u32, value: u8) -> String {
    format!(
        r#"(module
  (import "env" "memory" (memory 1))
  (data (i32.const {base}) "{escaped}{escaped}{escaped}{escaped}")
  (func (export "read_static_{value}") (param $out i32)
    (i32.store8 (local.get $out) (i32.load8_u (i32.const {base})))))"#,
        escaped = format!("\\{value:02x}")
    )
}

#[test]
fn modules_with_overlapping_static_data_are_rejected_and_disjoint_ones_coexist() {
    let rt = runtime();
    let s = rt.default_stream(0).unwrap();
    rt.load_module(0, "first", data_module(0x20000, 0xaa).as_bytes()).unwrap();
    let err = rt.load_module(0, "second", data_module(0x20002, 0xbb).as_bytes()).unwrap_err();
    assert_eq!(err.code(), ErrorCode::ModuleConflict);
    let text = err.to_string();
    assert!(text.contains("`second` conflicts with `first` on openreg:0"), "{text}");
    assert!(text.contains("--global-base="), "{text}");
    // A module placed elsewhere loads, and both work on the same tensor.
    rt.load_module(0, "third", data_module(0x30000, 0xcc).as_bytes()).unwrap();
    let p = rt.allocate(0, 2, s).unwrap();
    launch(&rt, s, "read_static_170", &[Ptr(p)]).unwrap();
    launch(&rt, s, "read_static_204", &[Ptr(p + 1)]).unwrap();
    assert_eq!(rt.copy_to_host(s, p, 2).unwrap(), [0xaa, 0xcc]);
    // The same module on the other device has its own static area.
    rt.load_module(1, "second", data_module(0x20002, 0xbb).as_bytes()).unwrap();
}

#[test]
fn modules_that_break_the_kernel_contract_are_rejected_with_the_reason() {
    let rt = runtime();
    let cases: [(&str, &str); 8] = [
        (
            "(module (import \"env\" \"log\" (func)) (import \"env\" \"memory\" (memory 1)) (func (export \"k\")))",
            "imports `env.log`",
        ),
        ("(module (memory 1) (func (export \"k\")))", "defines its own memory"),
        (
            "(module (import \"env\" \"memory\" (memory 1)) (func $s) (start $s) (func (export \"k\")))",
            "start function",
        ),
        (
            "(module (import \"env\" \"memory\" (memory 1)) (func (export \"k\") (result i32) i32.const 0))",
            "returns values",
        ),
        ("(module (import \"env\" \"memory\" (memory 1)) (func (export \"k\") (param v128)))", "parameter 0 is v128"),
        (
            "(module (import \"env\" \"memory\" (memory 1)) (data (i32.const 0x4000000) \"x\") (func (export \"k\")))",
            "outside the device's static area",
        ),
        ("(module (import \"env\" \"memory\" (memory i64 1)) (func (export \"k\")))", "64-bit memory"),
        ("not wasm at all", "not a wasm module"),
    ];
    for (wat, reason) in cases {
        let err = rt.load_module(0, "bad", wat.as_bytes()).unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidModule, "{err}");
        assert!(err.to_string().contains(reason), "expected `{reason}` in: {err}");
    }
    // Nothing was loaded: only the built-in engine and library are there.
    assert!(rt.module_kernels(0, 2).is_err());
}

fn nested(kind: &str, depth: usize) -> String {
    format!(
        r#"(module (import "env" "memory" (memory 1)) (func (export "deep") {} {}))"#,
        format!("({kind} ").repeat(depth),
        ")".repeat(depth)
    )
}

#[test]
fn the_loader_bounds_nesting_and_size_with_a_clear_error() {
    let rt = runtime();
    for (kind, max) in [("block", openreg_host::MAX_NESTING), ("loop", openreg_host::MAX_LOOP_NESTING)] {
        let max = max as usize;
        let id = rt.load_module(0, &format!("{kind}_ok"), nested(kind, max).as_bytes()).unwrap();
        let kernel = rt.module_kernel(0, id, "deep").unwrap();
        rt.launch(rt.default_stream(0).unwrap(), kernel, &[]).unwrap();
        let err = rt.load_module(0, "too_deep", nested(kind, max + 1).as_bytes()).unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidModule);
        assert!(err.to_string().contains(&format!("nests {kind}s more than {max} deep")), "{err}");
    }
    let huge = vec![0u8; openreg_host::MAX_MODULE_BYTES + 1];
    let err = rt.load_module(0, "huge", &huge).unwrap_err();
    assert!(err.to_string().contains("kernel modules may be at most 16.0 MiB"), "{err}");
    rt.synchronize_device(0).unwrap();
}

#[test]
fn a_c_kernel_module_runs_beside_the_builtin_library() {
    let rt = runtime();
    let s = rt.default_stream(0).unwrap();
    let id = rt
        .load_module(0, openreg_device_kernels::EXAMPLE_C_MODULE_NAME, openreg_device_kernels::EXAMPLE_C_WASM)
        .unwrap();
    assert_eq!(id, 2);
    let n = 1001;
    let x: Vec<f32> = (0..n).map(|i| i as f32 - 500.0).collect();
    let px = upload(&rt, s, &x);
    let out = rt.allocate(0, n as u64 * 4, s).unwrap();
    launch(&rt, s, "scale_f32", &[Ptr(out), Ptr(px), I32(n as i32), F32(-1.5)]).unwrap();
    // The built-in library works on the same tensor after it.
    launch(&rt, s, "add_f32", &[Ptr(out), Ptr(out), Ptr(px), I32(n as i32)]).unwrap();
    let expected: Vec<f32> = x.iter().map(|v| v * -1.5 + v).collect();
    assert_eq!(download(&rt, s, out, n), expected);
    // A kernel that reads the module's static data (a lookup table).
    let bytes: Vec<u8> = (0..=255).collect();
    let pin = rt.allocate(0, 256, s).unwrap();
    rt.copy_to_device(s, pin, &bytes).unwrap();
    let pout = rt.allocate(0, 256, s).unwrap();
    launch(&rt, s, "lut_u8", &[Ptr(pout), Ptr(pin), I32(256)]).unwrap();
    let mapped = rt.copy_to_host(s, pout, 256).unwrap();
    assert_ne!(mapped, bytes, "the table changes the bytes");
    // The same module on both devices: compiled once, instantiated per device.
    rt.load_module(1, openreg_device_kernels::EXAMPLE_C_MODULE_NAME, openreg_device_kernels::EXAMPLE_C_WASM).unwrap();
}

#[test]
fn a_memory64_device_addresses_beyond_4_gib() {
    let rt =
        Runtime::new(Config { device_count: 1, memory_bytes: 5 << 30, memory64: true, ..Config::default() }).unwrap();
    let s = rt.default_stream(0).unwrap();
    let wat = r#"(module (import "env" "memory" (memory i64 1))
      (func (export "store64") (param $p i64) (param $v i32) (i32.store (local.get $p) (local.get $v))))"#;
    rt.load_module(0, "m64", wat.as_bytes()).unwrap();
    let big = rt.allocate(0, (4 << 30) + 64, s).unwrap();
    let past_4g = big + (4 << 30);
    launch(&rt, s, "store64", &[Ptr(past_4g), I32(0x1234_5678)]).unwrap();
    assert_eq!(rt.copy_to_host(s, past_4g, 4).unwrap(), 0x1234_5678u32.to_le_bytes());
    // The wasm32 built-in library does not fit a memory64 device: it says so.
    let err = rt.load_module(0, "builtin", openreg_device_kernels::BUILTIN_WASM).unwrap_err();
    assert!(err.to_string().contains("imports a 32-bit memory but the device memory is 64-bit"), "{err}");
}

// ---- memory --------------------------------------------------------------------

#[test]
fn memory_statistics_return_to_baseline_after_frees_and_empty_cache() {
    let rt = runtime();
    let s = rt.default_stream(1).unwrap();
    let base = rt.stats(1).unwrap();
    let ptrs: Vec<_> = (1..50u64).map(|i| rt.allocate(1, i * 10_000, s).unwrap()).collect();
    let during = rt.stats(1).unwrap();
    assert_eq!(during.active_blocks, 49);
    assert!(during.allocated_bytes >= (1..50u64).map(|i| i * 10_000).sum::<u64>());
    assert!(rt.mem_get_info(1).unwrap().free_bytes < rt.mem_get_info(1).unwrap().total_bytes);
    for p in ptrs {
        rt.free(p).unwrap();
    }
    assert_eq!(rt.stats(1).unwrap().allocated_bytes, base.allocated_bytes);
    rt.empty_cache(1).unwrap();
    let after = rt.stats(1).unwrap();
    assert_eq!((after.reserved_bytes, after.segments), (base.reserved_bytes, base.segments));
    let info = rt.mem_get_info(1).unwrap();
    assert_eq!(info.total_bytes, rt.properties(1).unwrap().capacity_bytes);
    assert_eq!(info.free_bytes, info.total_bytes - layout::HEAP_START, "all but the system area is free");
    assert!(after.peak_allocated_bytes >= during.allocated_bytes);
    rt.reset_peak_stats(1).unwrap();
    assert_eq!(rt.stats(1).unwrap().peak_allocated_bytes, 0);
    assert_eq!(rt.free(0), Ok(()));
}

#[test]
fn out_of_memory_states_device_request_and_usage_and_the_device_recovers() {
    let rt = runtime();
    let s = rt.default_stream(0).unwrap();
    let held = rt.allocate(0, 40 * MIB, s).unwrap();
    let err = rt.allocate(0, 20 * MIB, s).unwrap_err();
    assert_eq!(err.code(), ErrorCode::OutOfMemory);
    assert_eq!(
        err.to_string(),
        "out of memory on openreg:0: tried to allocate 20.0 MiB; 40.0 MiB of 48.0 MiB reserved (40.0 MiB allocated, 8.0 MiB free)"
    );
    rt.free(held).unwrap();
    rt.allocate(0, 20 * MIB, s).unwrap();
    assert_eq!(rt.stats(0).unwrap().ooms, 1);
}

#[test]
fn memory_freed_while_another_stream_uses_it_is_not_reused_early() {
    let rt = gated_runtime();
    let gate = Gate::new(&rt);
    let (s, other) = (rt.default_stream(0).unwrap(), rt.create_stream(0, 0).unwrap());
    let p = rt.allocate(0, 4096, s).unwrap();
    gate.block(&rt, other);
    rt.record_stream(p, other).unwrap();
    rt.free(p).unwrap();
    let q = rt.allocate(0, 4096, s).unwrap();
    assert_ne!(p, q, "handed out while `other` may still use it");
    gate.open(&rt);
    let r = rt.allocate(0, 4096, s).unwrap();
    assert_eq!(r, p, "reused once `other` has passed the free");
}

// ---- streams and events -----------------------------------------------------

#[test]
fn enqueue_returns_before_the_work_runs() {
    let rt = gated_runtime();
    let gate = Gate::new(&rt);
    let s = rt.create_stream(0, 0).unwrap();
    let e = rt.create_event(false);
    gate.block(&rt, s);
    launch(&rt, s, "noop", &[]).unwrap();
    rt.record_event(e, s).unwrap();
    // Every call above returned while the device is still blocked.
    assert!(!rt.query_stream(s).unwrap());
    assert!(!rt.query_event(e).unwrap());
    gate.open(&rt);
    rt.synchronize_event(e).unwrap();
    assert!(rt.query_event(e).unwrap());
    assert!(rt.query_stream(s).unwrap());
}

#[test]
fn work_on_one_stream_runs_in_order() {
    let rt = runtime();
    let s = rt.create_stream(0, 0).unwrap();
    let one = upload(&rt, s, &[1.0; 64]);
    let acc = rt.allocate(0, 256, s).unwrap();
    launch(&rt, s, "fill_f32", &[Ptr(acc), I32(64), F32(0.0)]).unwrap();
    for i in 0..500 {
        launch(&rt, s, "add_f32", &[Ptr(acc), Ptr(acc), Ptr(one), I32(64)]).unwrap();
        if i == 250 {
            launch(&rt, s, "copy_bytes", &[Ptr(acc + 4), Ptr(acc), I32(4)]).unwrap();
        }
    }
    let got = download(&rt, s, acc, 64);
    assert_eq!(got[0], 500.0);
    assert_eq!(got[1], 500.0);
}

#[test]
fn a_stream_waits_for_an_event_recorded_on_another_stream_or_device() {
    let rt = runtime();
    rt.load_module(0, "spin", SPIN_WAT.as_bytes()).unwrap();
    let producer = rt.create_stream(0, 0).unwrap();
    let consumer = rt.create_stream(0, 0).unwrap();
    let remote = rt.create_stream(1, 0).unwrap();
    let p = rt.allocate(0, 400, producer).unwrap();
    let q = rt.allocate(1, 400, remote).unwrap();
    let ready = rt.create_event(false);
    launch(&rt, producer, "spin", &[I32(100_000_000)]).unwrap();
    launch(&rt, producer, "fill_f32", &[Ptr(p), I32(100), F32(9.0)]).unwrap();
    rt.record_event(ready, producer).unwrap();
    rt.wait_event(consumer, ready).unwrap();
    rt.wait_event(remote, ready).unwrap();
    // Both consumers copy only after the producer's fill.
    let local = rt.allocate(0, 400, consumer).unwrap();
    rt.copy_device_to_device(consumer, 0, local, 0, p, 400).unwrap();
    rt.copy_device_to_device(remote, 1, q, 0, p, 400).unwrap();
    assert_eq!(download(&rt, consumer, local, 100), [9.0; 100]);
    assert_eq!(download(&rt, remote, q, 100), [9.0; 100]);
}

#[test]
fn a_higher_priority_stream_runs_first_when_the_device_is_busy() {
    let rt = gated_runtime();
    let gate = Gate::new(&rt);
    let range = rt.stream_priority_range();
    assert_eq!((range.least, range.greatest), (0, -2));
    let busy = rt.create_stream(0, 0).unwrap();
    let low = rt.create_stream(0, 0).unwrap();
    let high = rt.create_stream(0, -100).unwrap(); // clamped, as in CUDA
    assert_eq!(rt.stream_priority(high).unwrap(), -2);
    let log = rt.allocate(0, 64, busy).unwrap();
    rt.copy_to_device(busy, log, &[0; 64]).unwrap();
    gate.block(&rt, busy);
    for round in 0..3 {
        launch(&rt, low, "append", &[Ptr(log), I32(100 + round)]).unwrap();
        launch(&rt, high, "append", &[Ptr(log), I32(200 + round)]).unwrap();
    }
    gate.open(&rt);
    rt.synchronize_device(0).unwrap();
    let words: Vec<u32> =
        rt.copy_to_host(busy, log, 28).unwrap().chunks(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect();
    assert_eq!(words, [6, 200, 201, 202, 100, 101, 102], "high-priority work first, each stream in order");
}

#[test]
fn event_elapsed_time_is_positive_and_misuse_is_an_error() {
    let rt = runtime();
    rt.load_module(0, "spin", SPIN_WAT.as_bytes()).unwrap();
    let s = rt.default_stream(0).unwrap();
    let (start, end) = (rt.create_event(true), rt.create_event(true));
    assert!(rt.query_event(start).unwrap(), "a never-recorded event counts as complete");
    let err = rt.elapsed_time(start, end).unwrap_err();
    assert_eq!(err.to_string(), format!("event {start}: has not been recorded"));
    rt.record_event(start, s).unwrap();
    launch(&rt, s, "spin", &[I32(50_000_000)]).unwrap();
    rt.record_event(end, s).unwrap();
    rt.synchronize_event(end).unwrap();
    let ms = rt.elapsed_time(start, end).unwrap();
    assert!(ms > 0.0, "{ms}");
    let elsewhere = rt.create_event(true);
    rt.record_event(elsewhere, rt.default_stream(1).unwrap()).unwrap();
    rt.synchronize_event(elsewhere).unwrap();
    let err = rt.elapsed_time(start, elsewhere).unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument);
    assert!(err.to_string().contains("different devices (openreg:0 and openreg:1)"), "{err}");
    let untimed = rt.create_event(false);
    rt.record_event(untimed, s).unwrap();
    rt.synchronize_event(untimed).unwrap();
    assert_eq!(rt.elapsed_time(untimed, end).unwrap_err().code(), ErrorCode::InvalidEvent);
    rt.destroy_event(untimed).unwrap();
    assert_eq!(rt.destroy_event(untimed).unwrap_err().code(), ErrorCode::InvalidEvent);
    assert_eq!(rt.record_event(untimed, s).unwrap_err().code(), ErrorCode::InvalidEvent);
    let err = rt.query_stream(StreamRef { device: 0, id: 99 }).unwrap_err();
    assert_eq!(err.to_string(), "openreg:0 has no stream 99");
}

#[test]
fn many_host_threads_share_two_devices() {
    let rt = Arc::new(runtime());
    let threads: Vec<_> = (0..8u32)
        .map(|t| {
            let rt = Arc::clone(&rt);
            std::thread::spawn(move || {
                let device = t % 2;
                let s = if t < 4 { rt.default_stream(device).unwrap() } else { rt.create_stream(device, 0).unwrap() };
                for round in 0..40 {
                    let n = 100 + (t * 37 + round) as usize % 300;
                    let a: Vec<f32> = (0..n).map(|i| (i as u32 * (t + 1)) as f32).collect();
                    let pa = upload(&rt, s, &a);
                    let out = rt.allocate(device, n as u64 * 4, s).unwrap();
                    launch(&rt, s, "add_f32", &[Ptr(out), Ptr(pa), Ptr(pa), I32(n as i32)]).unwrap();
                    let expected: Vec<f32> = a.iter().map(|v| v * 2.0).collect();
                    assert_eq!(download(&rt, s, out, n), expected);
                    rt.free(pa).unwrap();
                    rt.free(out).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    for d in 0..2 {
        rt.synchronize_device(d).unwrap();
        assert_eq!(rt.stats(d).unwrap().allocated_bytes, 0);
    }
}

#[test]
fn events_hand_work_between_threads_and_devices() {
    let rt = Arc::new(runtime());
    let (tx, rx) = std::sync::mpsc::channel::<(u64, DevicePtr, f32)>();
    let producer = {
        let rt = Arc::clone(&rt);
        std::thread::spawn(move || {
            let s = rt.create_stream(0, 0).unwrap();
            for i in 0..60 {
                let p = rt.allocate(0, 256, s).unwrap();
                launch(&rt, s, "fill_f32", &[Ptr(p), I32(64), F32(i as f32)]).unwrap();
                let e = rt.create_event(false);
                rt.record_event(e, s).unwrap();
                tx.send((e, p, i as f32)).unwrap();
            }
        })
    };
    let consumer = {
        let rt = Arc::clone(&rt);
        std::thread::spawn(move || {
            let s = rt.create_stream(1, 0).unwrap();
            let q = rt.allocate(1, 256, s).unwrap();
            for (e, p, value) in rx {
                rt.wait_event(s, e).unwrap();
                rt.copy_device_to_device(s, 1, q, 0, p, 256).unwrap();
                assert_eq!(download(&rt, s, q, 64), [value; 64]);
                rt.destroy_event(e).unwrap();
            }
        })
    };
    producer.join().unwrap();
    consumer.join().unwrap();
}

#[cfg(target_os = "linux")]
#[test]
fn devices_start_lazily_and_cost_address_space_not_ram() {
    fn resident_bytes() -> u64 {
        let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
        statm.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 4096
    }
    let before = resident_bytes();
    let rt = Runtime::new(Config { device_count: 16, ..Config::default() }).unwrap();
    // Only the device that is named starts; a 4 GiB device with a 1 GiB block
    // that has one byte written commits a few pages, not gigabytes.
    let s = rt.default_stream(15).unwrap();
    let p = rt.allocate(15, 1 << 30, s).unwrap();
    rt.copy_to_device(s, p + (1 << 29), &[1]).unwrap();
    assert_eq!(rt.copy_to_host(s, p + (1 << 29), 1).unwrap(), [1]);
    let grown = resident_bytes().saturating_sub(before);
    assert!(grown < 256 * MIB, "16 devices of 4 GiB made the process {grown} bytes larger");
}

#[test]
fn dropping_a_runtime_stops_its_devices_even_right_after_work() {
    // Shutdown can land while an executor spins before sleeping; it must still
    // see it (this hung before the executor rechecked shutdown after spinning).
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for _ in 0..50 {
            let rt = runtime();
            let s = rt.default_stream(1).unwrap();
            launch(&rt, s, "noop", &[]).unwrap();
            rt.synchronize_stream(s).unwrap();
            drop(rt);
        }
        done.send(()).unwrap();
    });
    finished.recv_timeout(Duration::from_secs(60)).expect("dropping a runtime hung");
}

// ---- the built-in engine and parameter blocks -------------------------------------

fn engine(rt: &Runtime, device: DeviceIndex) -> KernelRef {
    rt.module_kernel(device, 0, "elementwise").unwrap()
}

fn f16_bits(bytes: &[u8]) -> Vec<u16> {
    bytes.chunks_exact(2).map(|c| u16::from_le_bytes(c.try_into().unwrap())).collect()
}

#[test]
fn the_engine_broadcasts_with_byte_strides_and_alpha() {
    let rt = runtime();
    let s = rt.default_stream(0).unwrap();
    // out[i][j] = a[i][j] + 2 * b[j], 3 x 4, b broadcast over rows (stride 0).
    let a: Vec<f32> = (0..12).map(|i| i as f32).collect();
    let b = [1.0f32, -1.0, 0.5, 10.0];
    let (pa, pb) = (upload(&rt, s, &a), upload(&rt, s, &b));
    let out = rt.allocate(0, 48, s).unwrap();
    let block = Elementwise::new(OP_ADD, COMPUTE_F32, 3, &[4, 3])
        .operand(0, out, Elementwise::F32, &[4, 16])
        .operand(1, pa, Elementwise::F32, &[4, 16])
        .operand(2, pb, Elementwise::F32, &[4, 0])
        .arg(0, 2.0);
    rt.launch(s, engine(&rt, 0), &[KernelArg::Params(block.0), I32(0), I32(1)]).unwrap();
    let expected: Vec<f32> = (0..12).map(|i| a[i] + 2.0 * b[i % 4]).collect();
    assert_eq!(download(&rt, s, out, 12), expected);
}

#[test]
fn the_engine_converts_dtypes_and_reads_host_scalars() {
    let rt = runtime();
    let s = rt.default_stream(0).unwrap();
    let x = [0.25f32, 0.5, 0.75, f32::NAN, -3.0];
    let px = upload(&rt, s, &x);
    // x > 0.5 into a bool tensor; the 0.5 is a host scalar in the block.
    let mask = rt.allocate(0, 5, s).unwrap();
    let block = Elementwise::new(OP_GT, COMPUTE_F32, 3, &[5])
        .operand(0, mask, Elementwise::BOOL, &[1])
        .operand(1, px, Elementwise::F32, &[4])
        .scalar(2, 0.5);
    rt.launch(s, engine(&rt, 0), &[KernelArg::Params(block.0), I32(0), I32(1)]).unwrap();
    assert_eq!(rt.copy_to_host(s, mask, 5).unwrap(), [0, 0, 1, 0, 0]);
    // float32 to float16, rounded to nearest even, NaN kept; then to int64.
    let h = rt.allocate(0, 10, s).unwrap();
    let block = Elementwise::new(OP_COPY, COMPUTE_F32, 2, &[5]).operand(0, h, Elementwise::F16, &[2]).operand(
        1,
        px,
        Elementwise::F32,
        &[4],
    );
    rt.launch(s, engine(&rt, 0), &[KernelArg::Params(block.0), I32(0), I32(1)]).unwrap();
    let bits = f16_bits(&rt.copy_to_host(s, h, 10).unwrap());
    assert_eq!([bits[0], bits[1], bits[2], bits[4]], [0x3400, 0x3800, 0x3a00, 0xc200]);
    assert_eq!(bits[3] & 0x7c00, 0x7c00, "NaN keeps an all-ones exponent");
    assert_ne!(bits[3] & 0x03ff, 0, "and a nonzero mantissa");
    let i = rt.allocate(0, 40, s).unwrap();
    let block = Elementwise::new(OP_COPY, 2, 2, &[5]).operand(0, i, Elementwise::I64, &[8]).operand(
        1,
        h,
        Elementwise::F16,
        &[2],
    );
    rt.launch(s, engine(&rt, 0), &[KernelArg::Params(block.0), I32(0), I32(1)]).unwrap();
    let ints: Vec<i64> =
        rt.copy_to_host(s, i, 40).unwrap().chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap())).collect();
    assert_eq!([ints[0], ints[1], ints[2], ints[4]], [0, 0, 0, -3]);
}

#[test]
fn parameter_blocks_are_checked_before_anything_runs() {
    let rt = runtime();
    let s = rt.default_stream(0).unwrap();
    let kernel = engine(&rt, 0);
    let mine = rt.allocate(0, 64, s).unwrap();
    let theirs = rt.allocate(1, 64, rt.default_stream(1).unwrap()).unwrap();
    // An address of another device, anywhere in the block, is refused.
    let block = Elementwise::new(OP_COPY, COMPUTE_F32, 2, &[16]).operand(0, mine, Elementwise::F32, &[4]).operand(
        1,
        theirs,
        Elementwise::F32,
        &[4],
    );
    let err = rt.launch(s, kernel, &[KernelArg::Params(block.0), I32(0), I32(1)]).unwrap_err();
    assert_eq!(err.code(), ErrorCode::WrongDevice, "{err}");
    // So is a block larger than the parameter area, or a pointer slot outside it.
    let max = rt.params_max_bytes() as usize;
    let err = rt
        .launch(
            s,
            kernel,
            &[KernelArg::Params(ParamBlock { bytes: vec![0; max + 1], pointers: vec![] }), I32(0), I32(1)],
        )
        .unwrap_err();
    assert!(err.to_string().contains("more than the 65536 bytes of the parameter area"), "{err}");
    let err = rt
        .launch(s, kernel, &[KernelArg::Params(ParamBlock { bytes: vec![0; 16], pointers: vec![12] }), I32(0), I32(1)])
        .unwrap_err();
    assert!(err.to_string().contains("outside the 16-byte parameter block"), "{err}");
    // A block the kernel rejects traps, and the device stays usable.
    let bad = ParamBlock { bytes: vec![0xff; 64], pointers: vec![] };
    rt.launch(s, kernel, &[KernelArg::Params(bad), I32(0), I32(1)]).unwrap();
    assert_eq!(rt.synchronize_stream(s).unwrap_err().code(), ErrorCode::KernelTrap);
    launch(&rt, s, "fill_f32", &[Ptr(mine), I32(16), F32(1.0)]).unwrap();
    assert_eq!(download(&rt, s, mine, 16), [1.0; 16]);
}

/// Sums two parameter blocks' first words into `out`, and records where each
/// block landed: `out[1]`, `out[2]` = the blocks' offsets.
const TWO_BLOCKS_WAT: &str = r#"(module
  (import "env" "memory" (memory 1))
  (func (export "two_blocks") (param $a i32) (param $out i32) (param $b i32)
    (i32.store (local.get $out) (i32.add (i32.load (local.get $a)) (i32.load (local.get $b))))
    (i32.store offset=4 (local.get $out) (local.get $a))
    (i32.store offset=8 (local.get $out) (local.get $b))))"#;

#[test]
fn a_launch_carries_several_parameter_blocks_each_aligned() {
    let rt = runtime();
    let s = rt.default_stream(0).unwrap();
    rt.load_module(0, "two_blocks", TWO_BLOCKS_WAT.as_bytes()).unwrap();
    let out = rt.allocate(0, 12, s).unwrap();
    let block = |v: u32, len: usize| {
        let mut bytes = v.to_le_bytes().to_vec();
        bytes.resize(len, 0);
        KernelArg::Params(ParamBlock { bytes, pointers: vec![] })
    };
    launch(&rt, s, "two_blocks", &[block(40, 20), Ptr(out), block(2, 4)]).unwrap();
    let words: Vec<u32> =
        rt.copy_to_host(s, out, 12).unwrap().chunks(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect();
    assert_eq!(words[0], 42);
    assert_eq!(words[2] - words[1], 32, "the second block starts at the next 16-byte boundary after 20 bytes");
    assert_eq!(words[1] % 16, 0);
    // Together the blocks must fit the parameter area.
    let half = rt.params_max_bytes() as usize / 2;
    let err = launch(&rt, s, "two_blocks", &[block(0, half), Ptr(out), block(0, half + 1)]).unwrap_err();
    assert!(err.to_string().contains("more than the 65536 bytes"), "{err}");
}

#[test]
fn a_launch_for_an_operator_names_it_in_a_trap_and_a_timeout() {
    let rt = gated_runtime();
    let s = rt.default_stream(0).unwrap();
    rt.load_module(0, "faults", FAULTS_WAT.as_bytes()).unwrap();
    let abort = rt.find_kernel(0, "abort").unwrap();
    rt.launch_op(s, abort, &[], "mylib::explode").unwrap();
    let err = rt.synchronize_stream(s).unwrap_err();
    assert!(matches!(&err, Error::KernelTrap { op: Some(op), .. } if op == "mylib::explode"), "{err:?}");
    assert!(
        err.to_string().starts_with("operator `mylib::explode` (kernel `abort`) trapped on openreg:0: unreachable"),
        "{err}"
    );
    rt.load_module(0, "gate", GATE_WAT.as_bytes()).unwrap();
    let hold = rt.find_kernel(0, "hold").unwrap();
    rt.launch_op(s, hold, &[], "mylib::spin").unwrap();
    let err = rt.synchronize_stream(s).unwrap_err();
    assert!(err.to_string().starts_with("operator `mylib::spin` (kernel `hold`) on openreg:0 ran longer"), "{err}");
}

#[test]
fn kernels_resolve_per_module_to_a_handle() {
    let rt = runtime();
    assert_eq!(rt.module_kernels(0, 0).unwrap()[0].name, "elementwise");
    let fill = rt.module_kernel(0, 1, "fill_f32").unwrap();
    assert_eq!(fill, rt.find_kernel(0, "fill_f32").unwrap());
    let err = rt.module_kernel(0, 0, "fill_f32").unwrap_err();
    assert_eq!(err.code(), ErrorCode::KernelNotFound);
    let err = rt.launch(rt.default_stream(0).unwrap(), KernelRef { module: 0, index: 99 }, &[]).unwrap_err();
    assert!(err.to_string().contains("has no kernel 99"), "{err}");
}

#[test]
fn a_memory64_device_runs_the_engine_beyond_4_gib() {
    let rt =
        Runtime::new(Config { device_count: 1, memory_bytes: 5 << 30, memory64: true, ..Config::default() }).unwrap();
    let s = rt.default_stream(0).unwrap();
    let big = rt.allocate(0, (4 << 30) + 64, s).unwrap();
    let (src, dst) = (big + 16, big + (4 << 30));
    rt.copy_to_device(s, src, &f32_bytes(&[1.0, 2.0, 3.0, 4.0])).unwrap();
    let block = Elementwise::new(OP_ADD, COMPUTE_F32, 3, &[4])
        .operand(0, dst, Elementwise::F32, &[4])
        .operand(1, src, Elementwise::F32, &[4])
        .scalar(2, 0.5)
        .arg(0, 1.0);
    rt.launch(s, engine(&rt, 0), &[KernelArg::Params(block.0), I32(0), I32(1)]).unwrap();
    assert_eq!(download(&rt, s, dst, 4), [1.5, 2.5, 3.5, 4.5]);
}

/// Each call writes `[worker, workers, its stack pointer]` as i32 at
/// `out + 12 * worker`, after pushing a 16-byte frame; `trap_at` (>= 0) makes
/// that worker trap instead (an unreachable) after moving its stack pointer.
const WORKERS_WAT: &str = r#"(module
  (import "env" "memory" (memory 1))
  (global $__stack_pointer (mut i32) (i32.const 65536))
  (func (export "whoami") (param $out i32) (param $trap_at i32) (param $w i32) (param $n i32)
    (local $at i32)
    (global.set $__stack_pointer (i32.sub (global.get $__stack_pointer) (i32.const 16)))
    (if (i32.eq (local.get $w) (local.get $trap_at)) (then unreachable))
    (local.set $at (i32.add (local.get $out) (i32.mul (local.get $w) (i32.const 12))))
    (i32.store (local.get $at) (local.get $w))
    (i32.store offset=4 (local.get $at) (local.get $n))
    (i32.store offset=8 (local.get $at) (global.get $__stack_pointer))
    (global.set $__stack_pointer (i32.add (global.get $__stack_pointer) (i32.const 16)))))"#;

fn workers_runtime(workers: u32) -> Runtime {
    Runtime::new(Config { device_count: 1, memory_bytes: 64 * MIB, workers, ..Config::default() }).unwrap()
}

fn i32s(bytes: &[u8]) -> Vec<i32> {
    bytes.chunks_exact(4).map(|c| i32::from_le_bytes(c.try_into().unwrap())).collect()
}

#[test]
fn a_parallel_launch_runs_once_on_every_worker_each_with_its_own_stack() {
    for workers in [1, 3] {
        let rt = workers_runtime(workers);
        assert_eq!(rt.properties(0).unwrap().workers, workers);
        let s = rt.default_stream(0).unwrap();
        rt.load_module(0, "workers", WORKERS_WAT.as_bytes()).unwrap();
        let out = rt.allocate(0, 12 * 4, s).unwrap();
        rt.copy_to_device(s, out, &[0xff; 48]).unwrap();
        let args = [Ptr(out), I32(-1), KernelArg::WorkerIndex, KernelArg::WorkerCount];
        launch(&rt, s, "whoami", &args).unwrap();
        let words = i32s(&rt.copy_to_host(s, out, 48).unwrap());
        // Each part ran once, on some worker's stack (a free worker claims the
        // next part, so the executor may run them all).
        let tops: Vec<i32> = (0..workers).map(|w| layout::stack_top(w, workers) as i32 - 16).collect();
        for w in 0..workers as usize {
            assert_eq!(words[3 * w..3 * w + 2], [w as i32, workers as i32], "part {w} of {workers}");
            assert!(
                tops.contains(&words[3 * w + 2]),
                "part {w}'s stack pointer {:#x} is no worker's",
                words[3 * w + 2]
            );
        }
        assert!(words[3 * workers as usize..].iter().all(|&v| v == -1), "only {workers} calls ran: {words:?}");
        // Without worker arguments a launch runs once, as worker 0.
        rt.copy_to_device(s, out, &[0xff; 48]).unwrap();
        launch(&rt, s, "whoami", &[Ptr(out), I32(-1), I32(0), I32(7)]).unwrap();
        let words = i32s(&rt.copy_to_host(s, out, 48).unwrap());
        assert_eq!(words[..3], [0, 7, layout::STACK_TOP as i32 - 16]);
        assert!(words[3..].iter().all(|&v| v == -1));
    }
}

#[test]
fn a_trap_on_one_worker_fails_the_launch_and_every_worker_stays_usable() {
    let rt = workers_runtime(3);
    let s = rt.default_stream(0).unwrap();
    rt.load_module(0, "workers", WORKERS_WAT.as_bytes()).unwrap();
    let out = rt.allocate(0, 36, s).unwrap();
    for trap_at in [2, 0] {
        let args = [Ptr(out), I32(trap_at), KernelArg::WorkerIndex, KernelArg::WorkerCount];
        launch(&rt, s, "whoami", &args).unwrap();
        let err = rt.synchronize_stream(s).unwrap_err();
        assert_eq!(err.code(), ErrorCode::KernelTrap, "{err}");
        assert!(err.to_string().contains("whoami"), "{err}");
    }
    // The trapped instances' stack pointers are back at their tops.
    let tops: Vec<i32> = (0..3).map(|w| layout::stack_top(w, 3) as i32 - 16).collect();
    for _ in 0..20 {
        launch(&rt, s, "whoami", &[Ptr(out), I32(-1), KernelArg::WorkerIndex, KernelArg::WorkerCount]).unwrap();
        let words = i32s(&rt.copy_to_host(s, out, 36).unwrap());
        for w in 0..3 {
            assert!(tops.contains(&words[3 * w + 2]), "part {w}: stack pointer {:#x}", words[3 * w + 2]);
        }
    }
    // Worker arguments are i32 parameters only.
    let err = launch(&rt, s, "fill_f32", &[Ptr(out), I32(1), KernelArg::WorkerCount]).unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument, "{err}");
}

/// `busy(n)` counts down from n: a launch that keeps the executor busy for a while.
const BUSY_WAT: &str = r#"(module
  (import "env" "memory" (memory 1))
  (func (export "busy") (param $n i32)
    (loop $l (local.set $n (i32.sub (local.get $n) (i32.const 1))) (br_if $l (i32.gt_s (local.get $n) (i32.const 0))))))"#;

#[test]
fn a_host_thread_waiting_on_the_device_runs_parts_of_engine_launches() {
    let rt = workers_runtime(2);
    let s = rt.default_stream(0).unwrap();
    rt.load_module(0, "busy", BUSY_WAT.as_bytes()).unwrap();
    const N: usize = 4 << 20;
    let x: Vec<f32> = (0..N).map(|i| (i % 1000) as f32 * 0.5).collect();
    let src = upload(&rt, s, &x);
    let dst = rt.allocate(0, N as u64 * 4, s).unwrap();
    let block = Elementwise::new(OP_ADD, COMPUTE_F32, 3, &[N as i64])
        .operand(0, dst, Elementwise::F32, &[4])
        .operand(1, src, Elementwise::F32, &[4])
        .scalar(2, 1.5)
        .arg(0, 1.0);
    let done = rt.create_event(false);
    // While `busy` runs, this thread is already waiting (and ready) when the
    // add is posted, and claims the part the executor has not: unless it is
    // off its core until the executor is done with its own part and takes
    // that one too. Which thread wins is up to the scheduler, so rounds go
    // on until this thread has run a part (the first, nearly always; with the
    // other tests' threads on both cores of a small host, once ran past 200
    // rounds). Each wait helps: a stream's, then an event's.
    for by_event in [false, true] {
        let before = rt.host_parts(0).unwrap();
        let mut rounds = 0;
        while rt.host_parts(0).unwrap() == before {
            rounds += 1;
            assert!(rounds <= 2000, "the waiting thread ran no part in 2000 launches (event: {by_event})");
            rt.copy_to_device(s, dst, &[0; 16]).unwrap();
            launch(&rt, s, "busy", &[I32(2_000)]).unwrap();
            let args = [KernelArg::Params(block.0.clone()), KernelArg::WorkerIndex, KernelArg::WorkerCount];
            rt.launch(s, engine(&rt, 0), &args).unwrap();
            if by_event {
                rt.record_event(done, s).unwrap();
                rt.synchronize_event(done).unwrap();
            } else {
                rt.synchronize_stream(s).unwrap();
            }
            let y = download(&rt, s, dst, N);
            assert!(y.iter().zip(&x).all(|(y, x)| *y == x + 1.5), "round {rounds}");
        }
    }
}
