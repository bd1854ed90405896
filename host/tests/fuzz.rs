//! Fuzzing the runtime through its public API.
//!
//! - The module loader is fed generated modules (`wasm-smith`, some with a byte
//!   flipped); every one loads or is refused with `invalid-module` /
//!   `module-conflict`, and the kernels of those that load are launched with
//!   random arguments, ending or trapping or being stopped by the watchdog.
//!   Whatever they do, the other device's bytes are untouched and both devices
//!   keep working.
//! - Random sequences of allocate, free, copies of every kind, launches, and
//!   event record/wait across two devices and their streams are checked against
//!   a reference model of the bytes.
//!
//! `make test` runs each for a few seconds; `OPENREG_FUZZ_SECONDS` sets the
//! loader's budget and `OPENREG_FUZZ_CASES` the number of programs (`make fuzz`
//! runs them for minutes); `OPENREG_FUZZ_SEED` replays a loader run. Nothing
//! here asserts a time.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use arbitrary::Unstructured;
use openreg_host::abi::*;
use openreg_host::{Config, Runtime};
use proptest::prelude::*;

const MIB: u64 = 1 << 20;

/// A small, fast, seeded generator (xorshift64*): the fuzz input is reproducible from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// How many random programs the model test runs (`OPENREG_FUZZ_CASES`, default 48).
fn fuzz_cases() -> u32 {
    std::env::var("OPENREG_FUZZ_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(48)
}

fn budget() -> Duration {
    let seconds = std::env::var("OPENREG_FUZZ_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(6.0);
    Duration::from_secs_f64(seconds)
}

/// Valid kernel modules whose mutations the loader is fed too.
const SEED_KERNELS: [&str; 3] = [
    r#"(module (import "env" "memory" (memory 1))
        (func (export "fill") (param $p i32) (param $n i32) (param $v f32) (local $i i32)
          (block $done (loop $l
            (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
            (f32.store (i32.add (local.get $p) (i32.shl (local.get $i) (i32.const 2))) (local.get $v))
            (local.set $i (i32.add (local.get $i) (i32.const 1)))
            (br $l)))))"#,
    r#"(module (import "env" "memory" (memory 1))
        (global $sp (mut i32) (i32.const 65536))
        (data (i32.const 2048) "openreg fuzz seed data")
        (func (export "sum") (param $p i32) (param $n i32) (param $out i32) (local $i i32) (local $acc f64)
          (loop $l
            (local.set $acc (f64.add (local.get $acc) (f64.promote_f32 (f32.load (local.get $p)))))
            (local.set $p (i32.add (local.get $p) (i32.const 4)))
            (br_if $l (i32.lt_u (local.tee $i (i32.add (local.get $i) (i32.const 1))) (local.get $n))))
          (f64.store (local.get $out) (local.get $acc))))"#,
    r#"(module (import "env" "memory" (memory 1))
        (func (export "axpy") (param $x i32) (param $y i32) (param $n i32) (param $a f32)
          (loop $l
            (v128.store (local.get $y) (f32x4.add (v128.load (local.get $y))
              (f32x4.mul (f32x4.splat (local.get $a)) (v128.load (local.get $x)))))
            (local.set $x (i32.add (local.get $x) (i32.const 16)))
            (local.set $y (i32.add (local.get $y) (i32.const 16)))
            (br_if $l (i32.gt_s (local.tee $n (i32.sub (local.get $n) (i32.const 4))) (i32.const 0)))))
        (func (export "spin") (param $n i64)
          (loop $l (br_if $l (i64.ne (local.tee $n (i64.sub (local.get $n) (i64.const 1))) (i64.const 0))))))"#,
];

/// wasm-smith settings for kernel-like modules: the device memory offered as
/// the only import, the features the devices enable, functions that may loop.
fn smith_config(rng: &mut Rng) -> wasm_smith::Config {
    let memory_import = wat::parse_str(r#"(module (import "env" "memory" (memory 1)))"#).unwrap();
    wasm_smith::Config {
        available_imports: Some(memory_import),
        max_memories: 1,
        min_funcs: 1,
        max_tables: 1,
        max_funcs: 8,
        max_instructions: 200,
        max_data_segments: 2,
        max_nesting_depth: 12,
        max_memory32_bytes: 64 * MIB,
        memory64_enabled: false,
        gc_enabled: false,
        exceptions_enabled: false,
        threads_enabled: false,
        tail_call_enabled: false,
        wide_arithmetic_enabled: false,
        export_everything: rng.below(4) != 0,
        allow_start_export: rng.below(8) == 0,
        ..wasm_smith::Config::default()
    }
}

/// A random argument for a kernel parameter: usually a number, sometimes a
/// device address (of device 0, or device 1, which must be refused).
fn argument(rng: &mut Rng, ty: ValueType, mine: DevicePtr, other: DevicePtr) -> KernelArg {
    match ty {
        ValueType::I32 => match rng.below(4) {
            0 => KernelArg::Ptr(mine),
            1 => KernelArg::Ptr(other),
            _ => KernelArg::I32(rng.next() as i32 >> rng.below(31)),
        },
        ValueType::I64 => KernelArg::I64(rng.next() as i64),
        ValueType::F32 => KernelArg::F32(f32::from_bits(rng.next() as u32)),
        ValueType::F64 => KernelArg::F64(f64::from_bits(rng.next())),
    }
}

#[test]
fn the_loader_and_launches_survive_generated_modules() {
    let rt = Runtime::new(Config {
        device_count: 2,
        memory_bytes: 64 * MIB,
        memory64: false,
        kernel_timeout: Duration::from_millis(100),
        ..Config::default()
    })
    .unwrap();
    let (s0, s1) = (rt.default_stream(0).unwrap(), rt.default_stream(1).unwrap());
    let sentinel: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
    let guarded = rt.allocate(1, sentinel.len() as u64, s1).unwrap();
    rt.copy_to_device(s1, guarded, &sentinel).unwrap();
    let scratch = rt.allocate(0, 4096, s0).unwrap();

    let seed = seed();
    let mut rng = Rng(seed);
    let deadline = Instant::now() + budget();
    let mut counts: BTreeMap<&str, u64> = BTreeMap::new();
    let mut reasons: BTreeMap<String, u64> = BTreeMap::new();
    let kernels: Vec<Vec<u8>> = SEED_KERNELS.iter().map(|w| wat::parse_str(w).unwrap()).collect();
    while Instant::now() < deadline {
        // Half generated from scratch, half a valid kernel module with bits flipped.
        let mut wasm = if rng.below(2) == 0 {
            let seed = rng.bytes(2048);
            let config = smith_config(&mut rng);
            let Ok(module) = wasm_smith::Module::new(config, &mut Unstructured::new(&seed)) else { continue };
            module.to_bytes()
        } else {
            kernels[rng.below(kernels.len() as u64) as usize].clone()
        };
        for _ in 0..rng.below(4) {
            let at = rng.below(wasm.len() as u64) as usize;
            wasm[at] ^= 1 << rng.below(8);
        }
        *counts.entry("modules").or_default() += 1;
        let id = match rt.load_module(0, "fuzzed", &wasm) {
            Ok(id) => id,
            Err(e) => {
                assert!(
                    matches!(e.code(), ErrorCode::InvalidModule | ErrorCode::ModuleConflict),
                    "a generated module was refused with {:?}: {e}",
                    e.code()
                );
                *counts.entry("refused").or_default() += 1;
                let text = e.to_string();
                let reason = text.split_once("`: ").map_or(text.as_str(), |r| r.1);
                *reasons.entry(reason.chars().take(48).collect()).or_default() += 1;
                continue;
            }
        };
        *counts.entry("loaded").or_default() += 1;
        for (index, kernel) in rt.module_kernels(0, id).unwrap().into_iter().enumerate() {
            let args: Vec<KernelArg> =
                kernel.params.iter().map(|&ty| argument(&mut rng, ty, scratch, guarded)).collect();
            match rt.launch(s0, KernelRef { module: id, index: index as u32 }, &args) {
                Ok(()) => *counts.entry("launched").or_default() += 1,
                Err(e) => {
                    assert_eq!(e.code(), ErrorCode::WrongDevice, "{e}");
                    *counts.entry("refused launches").or_default() += 1;
                    continue;
                }
            }
            match rt.synchronize_stream(s0) {
                Ok(()) => *counts.entry("kernels ended").or_default() += 1,
                Err(e) => {
                    assert!(matches!(e.code(), ErrorCode::KernelTrap | ErrorCode::KernelTimeout), "{e}");
                    *counts.entry("kernels trapped or stopped").or_default() += 1;
                }
            }
        }
    }
    eprintln!("fuzzed the loader for {:?} (OPENREG_FUZZ_SEED={seed}): {counts:?}", budget());
    let mut common: Vec<_> = reasons.into_iter().collect();
    common.sort_by_key(|r| std::cmp::Reverse(r.1));
    eprintln!("most common reasons for refusal: {:?}", &common[..common.len().min(8)]);
    assert!(counts.get("loaded").copied().unwrap_or(0) > 0, "no generated module loaded: {counts:?}");
    // Device 1's bytes are as they were; both devices still copy and compute.
    assert_eq!(rt.copy_to_host(s1, guarded, sentinel.len() as u64).unwrap(), sentinel);
    rt.copy_to_device(s0, scratch, &[42; 64]).unwrap();
    assert_eq!(rt.copy_to_host(s0, scratch, 64).unwrap(), [42; 64]);
    let fill = rt.find_kernel(1, "fill_f32").unwrap();
    rt.launch(s1, fill, &[KernelArg::Ptr(guarded), KernelArg::I32(4), KernelArg::F32(1.5)]).unwrap();
    assert_eq!(rt.copy_to_host(s1, guarded, 4).unwrap(), 1.5f32.to_le_bytes());
}

/// The seed: `OPENREG_FUZZ_SEED` replays a run; otherwise a new one each run.
fn seed() -> u64 {
    std::env::var("OPENREG_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        (now.as_nanos() as u64) | 1
    })
}

// ---- the runtime API against a reference model -----------------------------------

/// One step of a random program. Indices pick among live blocks (modulo
/// their count), streams among the three of each device.
#[derive(Clone, Debug)]
enum Step {
    Allocate { device: u32, stream: u32, words: u64 },
    Free { block: usize },
    Write { block: usize, seed: u8 },
    Read { block: usize },
    Copy { from: usize, to: usize, stream_of_source: bool },
    Fill { block: usize, value: i8 },
    Synchronize { device: u32 },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (0..2u32, 0..3u32, 1..2048u64).prop_map(|(device, stream, words)| Step::Allocate { device, stream, words }),
        any::<usize>().prop_map(|block| Step::Free { block }),
        (any::<usize>(), any::<u8>()).prop_map(|(block, seed)| Step::Write { block, seed }),
        any::<usize>().prop_map(|block| Step::Read { block }),
        (any::<usize>(), any::<usize>(), any::<bool>()).prop_map(|(from, to, stream_of_source)| Step::Copy {
            from,
            to,
            stream_of_source
        }),
        (any::<usize>(), any::<i8>()).prop_map(|(block, value)| Step::Fill { block, value }),
        (0..2u32).prop_map(|device| Step::Synchronize { device }),
    ]
}

/// A live block: where it is, the stream it was allocated on, the stream
/// that last used it (perhaps another device's), and the bytes the model
/// says it holds.
struct Block {
    ptr: DevicePtr,
    device: u32,
    home: StreamRef,
    last: StreamRef,
    bytes: Vec<u8>,
}

/// Orders `block`'s last use before work about to be queued on `stream`, as
/// the PyTorch shim does (event record on one, wait on the other); returns
/// `stream`.
fn order(rt: &Runtime, block: &mut Block, stream: StreamRef) -> StreamRef {
    if block.last != stream {
        let event = rt.create_event(false);
        rt.record_event(event, block.last).unwrap();
        rt.wait_event(stream, event).unwrap();
        rt.destroy_event(event).unwrap();
        block.last = stream;
    }
    stream
}

fn run_program(rt: &Runtime, streams: &[[StreamRef; 3]; 2], steps: &[Step]) {
    let mut blocks: Vec<Block> = Vec::new();
    let fill = [rt.find_kernel(0, "fill_f32").unwrap(), rt.find_kernel(1, "fill_f32").unwrap()];
    for step in steps {
        let pick = |i: usize, n: usize| if n == 0 { None } else { Some(i % n) };
        match *step {
            Step::Allocate { device, stream, words } => {
                let stream = streams[device as usize][stream as usize];
                let ptr = rt.allocate(device, words * 4, stream).unwrap();
                // Fresh memory holds whatever it held: define it first.
                let bytes = vec![0u8; (words * 4) as usize];
                rt.copy_to_device(stream, ptr, &bytes).unwrap();
                blocks.push(Block { ptr, device, home: stream, last: stream, bytes });
            }
            Step::Free { block } => {
                if let Some(i) = pick(block, blocks.len()) {
                    let mut b = blocks.swap_remove(i);
                    // Freed in stream order on its own stream, after its last use.
                    let home = b.home;
                    order(rt, &mut b, home);
                    rt.free(b.ptr).unwrap();
                }
            }
            Step::Write { block, seed } => {
                if let Some(i) = pick(block, blocks.len()) {
                    let b = &mut blocks[i];
                    let data: Vec<u8> = (0..b.bytes.len()).map(|k| seed.wrapping_add(k as u8)).collect();
                    let stream = order(rt, b, b.home);
                    rt.copy_to_device(stream, b.ptr, &data).unwrap();
                    b.bytes = data;
                }
            }
            Step::Read { block } => {
                if let Some(i) = pick(block, blocks.len()) {
                    let b = &mut blocks[i];
                    let stream = order(rt, b, b.home);
                    assert_eq!(rt.copy_to_host(stream, b.ptr, b.bytes.len() as u64).unwrap(), b.bytes);
                }
            }
            Step::Copy { from, to, stream_of_source } => {
                let (Some(i), Some(j)) = (pick(from, blocks.len()), pick(to, blocks.len())) else { continue };
                if i == j {
                    continue;
                }
                let stream = if stream_of_source { blocks[i].home } else { blocks[j].home };
                order(rt, &mut blocks[i], stream);
                order(rt, &mut blocks[j], stream);
                let len = blocks[i].bytes.len().min(blocks[j].bytes.len());
                let (src, dst) = (&blocks[i], &blocks[j]);
                rt.copy_device_to_device(stream, dst.device, dst.ptr, src.device, src.ptr, len as u64).unwrap();
                let moved = blocks[i].bytes[..len].to_vec();
                blocks[j].bytes[..len].copy_from_slice(&moved);
            }
            Step::Fill { block, value } => {
                if let Some(i) = pick(block, blocks.len()) {
                    let b = &mut blocks[i];
                    let words = b.bytes.len() / 4;
                    let args = [KernelArg::Ptr(b.ptr), KernelArg::I32(words as i32), KernelArg::F32(value as f32)];
                    let stream = order(rt, b, b.home);
                    rt.launch(stream, fill[b.device as usize], &args).unwrap();
                    b.bytes = (0..words).flat_map(|_| (value as f32).to_le_bytes()).collect();
                }
            }
            Step::Synchronize { device } => rt.synchronize_device(device).unwrap(),
        }
    }
    for b in &mut blocks {
        let stream = order(rt, b, b.home);
        assert_eq!(rt.copy_to_host(stream, b.ptr, b.bytes.len() as u64).unwrap(), b.bytes);
        rt.free(b.ptr).unwrap();
    }
    for device in 0..2 {
        rt.synchronize_device(device).unwrap();
        rt.empty_cache(device).unwrap();
        assert_eq!(rt.stats(device).unwrap().allocated_bytes, 0, "a block outlived the program");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: fuzz_cases(), ..ProptestConfig::default() })]

    #[test]
    fn random_programs_on_two_devices_match_a_reference_model(steps in prop::collection::vec(step(), 1..80)) {
        let rt = Runtime::new(Config { device_count: 2, memory_bytes: 64 * MIB, ..Config::default() }).unwrap();
        let streams = [0u32, 1].map(|d| {
            [rt.default_stream(d).unwrap(), rt.create_stream(d, 0).unwrap(), rt.create_stream(d, -1).unwrap()]
        });
        run_program(&rt, &streams, &steps);
    }
}
