//! Runs the compiled kernels in wasmtime and checks them against plain Rust
//! on the CPU (the oracle), including their contract: unaligned pointers,
//! aliasing, overlap, and traps on bad ranges.
//!
//! This drives the modules directly (one `Store`, one imported `Memory`, no
//! runtime): it tests the kernels, not the loader. Buffers live at
//! [`SCRATCH`] and above, clear of both modules' static data and linked stacks.

use openreg_device_kernels::{BUILTIN_WASM, EXAMPLE_C_WASM, EXAMPLE_RUST_WASM};
use wasmtime::{Engine, Instance, Linker, Memory, MemoryType, Module, Store, Trap, TypedFunc, WasmParams};

/// Device memory size in wasm pages (64 KiB each).
const PAGES: u32 = 8;
/// First address the tests put buffers at.
const SCRATCH: u32 = 128 << 10;
/// Byte written around every output buffer to catch writes outside it.
const GUARD: u8 = 0xA5;
/// Bytes of guard checked on each side of an output buffer.
const GUARD_LEN: usize = 64;

/// The hand-written WAT example (`examples/negate_f32.wat`).
const EXAMPLE_WAT: &str = include_str!("../examples/negate_f32.wat");

/// One "device": a store with a memory and the four kernel modules (built-in,
/// Rust, C and WAT examples) instantiated over it.
struct Device {
    store: Store<()>,
    memory: Memory,
    builtin: Instance,
    example_rust: Instance,
    example_c: Instance,
    example_wat: Instance,
}

impl Device {
    fn new() -> Device {
        let engine = Engine::default();
        let mut store = Store::new(&engine, ());
        let memory = Memory::new(&mut store, MemoryType::new(PAGES, Some(PAGES))).expect("memory");
        let mut linker = Linker::new(&engine);
        linker.define(&store, "env", "memory", memory).expect("define env.memory");
        let builtin_module = Module::new(&engine, BUILTIN_WASM).expect("the built-in module compiles");
        let example_module = Module::new(&engine, EXAMPLE_C_WASM).expect("the C example module compiles");
        let builtin = linker.instantiate(&mut store, &builtin_module).expect("instantiate the built-in module");
        let example_c = linker.instantiate(&mut store, &example_module).expect("instantiate the C example");
        let rust_module = Module::new(&engine, EXAMPLE_RUST_WASM).expect("the Rust example compiles");
        let example_rust = linker.instantiate(&mut store, &rust_module).expect("instantiate the Rust example");
        let wat_module = Module::new(&engine, EXAMPLE_WAT).expect("the WAT example compiles");
        let example_wat = linker.instantiate(&mut store, &wat_module).expect("instantiate the WAT example");
        Device { store, memory, builtin, example_rust, example_c, example_wat }
    }

    fn kernel<P: WasmParams>(&mut self, instance: Instance, name: &str) -> TypedFunc<P, ()> {
        instance.get_typed_func::<P, ()>(&mut self.store, name).unwrap_or_else(|e| panic!("kernel {name}: {e}"))
    }

    /// Launches a built-in kernel.
    fn builtin<P: WasmParams>(&mut self, name: &str, args: P) -> wasmtime::Result<()> {
        let f = self.kernel::<P>(self.builtin, name);
        f.call(&mut self.store, args)
    }

    /// Launches a kernel of the Rust example.
    fn example_rust<P: WasmParams>(&mut self, name: &str, args: P) -> wasmtime::Result<()> {
        let f = self.kernel::<P>(self.example_rust, name);
        f.call(&mut self.store, args)
    }

    /// Launches a kernel of the C example.
    fn example<P: WasmParams>(&mut self, name: &str, args: P) -> wasmtime::Result<()> {
        let f = self.kernel::<P>(self.example_c, name);
        f.call(&mut self.store, args)
    }

    /// Launches the kernel of the WAT example.
    fn example_wat<P: WasmParams>(&mut self, name: &str, args: P) -> wasmtime::Result<()> {
        let f = self.kernel::<P>(self.example_wat, name);
        f.call(&mut self.store, args)
    }

    fn write(&mut self, addr: u32, bytes: &[u8]) {
        let start = addr as usize;
        self.memory.data_mut(&mut self.store)[start..start + bytes.len()].copy_from_slice(bytes);
    }

    fn read(&self, addr: u32, len: usize) -> Vec<u8> {
        let start = addr as usize;
        self.memory.data(&self.store)[start..start + len].to_vec()
    }

    fn write_f32(&mut self, addr: u32, values: &[f32]) {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.write(addr, &bytes);
    }

    fn read_f32(&self, addr: u32, n: usize) -> Vec<f32> {
        self.read(addr, 4 * n).chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
    }

    /// Fills `len` bytes at `addr` and [`GUARD_LEN`] bytes on each side with
    /// [`GUARD`].
    fn guard(&mut self, addr: u32, len: usize) {
        let start = addr - GUARD_LEN as u32;
        self.write(start, &vec![GUARD; len + 2 * GUARD_LEN]);
    }

    /// Asserts the guard bytes around `len` bytes at `addr` are untouched.
    fn assert_guard_intact(&self, addr: u32, len: usize) {
        let before = self.read(addr - GUARD_LEN as u32, GUARD_LEN);
        let after = self.read(addr + len as u32, GUARD_LEN);
        assert!(before.iter().all(|&b| b == GUARD), "bytes before {addr:#x} were written");
        assert!(after.iter().all(|&b| b == GUARD), "bytes after {addr:#x}+{len} were written");
    }
}

/// Deterministic test data: `n` floats from a linear congruential generator.
fn floats(n: usize, seed: u32) -> Vec<f32> {
    let mut state = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..n)
        .map(|_| {
            state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (state >> 8) as f32 / (1 << 24) as f32 * 200.0 - 100.0
        })
        .collect()
}

/// Deterministic test bytes.
fn bytes(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

/// The trap a failed launch raised.
fn trap_of(result: wasmtime::Result<()>) -> Trap {
    let err = result.expect_err("the kernel traps");
    *err.downcast_ref::<Trap>().unwrap_or_else(|| panic!("not a trap: {err:?}"))
}

/// Lengths that exercise the unrolled SIMD loop, the single-vector loop and
/// the scalar tail.
const LENGTHS: &[usize] = &[0, 1, 2, 3, 4, 5, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 1000];
/// Byte misalignments of the buffers.
const SKEWS: &[u32] = &[0, 1, 2, 3];

#[test]
fn noop_runs() {
    let mut dev = Device::new();
    dev.builtin("noop", ()).expect("noop");
}

#[test]
fn fill_f32_sets_exactly_n_values_at_any_alignment() {
    let mut dev = Device::new();
    for &n in LENGTHS {
        for &skew in SKEWS {
            let dst = SCRATCH + skew;
            dev.guard(dst, 4 * n);
            dev.builtin("fill_f32", (dst, n as u32, -1.5f32)).expect("fill_f32");
            assert_eq!(dev.read_f32(dst, n), vec![-1.5; n], "n={n} skew={skew}");
            dev.assert_guard_intact(dst, 4 * n);
        }
    }
}

#[test]
fn fill_u8_sets_bytes_to_the_low_byte_of_value() {
    let mut dev = Device::new();
    for &n in LENGTHS {
        for &skew in SKEWS {
            let dst = SCRATCH + skew;
            dev.guard(dst, n);
            dev.builtin("fill_u8", (dst, n as u32, 0x1234_56ABi32)).expect("fill_u8");
            assert_eq!(dev.read(dst, n), vec![0xAB; n], "n={n} skew={skew}");
            dev.assert_guard_intact(dst, n);
        }
    }
}

#[test]
fn copy_bytes_copies_disjoint_ranges() {
    let mut dev = Device::new();
    let src = SCRATCH + 3;
    let dst = SCRATCH + 4096 + 1;
    for &n in LENGTHS {
        let data = bytes(n, n as u8);
        dev.write(src, &data);
        dev.guard(dst, n);
        dev.builtin("copy_bytes", (dst, src, n as u32)).expect("copy_bytes");
        assert_eq!(dev.read(dst, n), data, "n={n}");
        dev.assert_guard_intact(dst, n);
    }
}

#[test]
fn copy_bytes_has_memmove_semantics_for_overlapping_ranges() {
    let mut dev = Device::new();
    let region = 256;
    for shift in [-17i32, -16, -1, 0, 1, 3, 16, 17] {
        let n = 200usize;
        let base = SCRATCH + 64;
        let initial = bytes(region, 7);
        dev.write(base, &initial);
        let src = base + 24;
        let dst = (src as i32 + shift) as u32;
        dev.builtin("copy_bytes", (dst, src, n as u32)).expect("copy_bytes");
        let mut expected = initial.clone();
        expected.copy_within(24..24 + n, (24 + shift) as usize);
        assert_eq!(dev.read(base, region), expected, "shift={shift}");
    }
}

#[test]
fn add_f32_matches_cpu_at_any_alignment() {
    let mut dev = Device::new();
    for &n in LENGTHS {
        for &skew in SKEWS {
            let (a, b, out) = (SCRATCH + 1, SCRATCH + 8192 + 2, SCRATCH + 16384 + skew);
            let xs = floats(n, 1);
            let ys = floats(n, 2);
            dev.write_f32(a, &xs);
            dev.write_f32(b, &ys);
            dev.guard(out, 4 * n);
            dev.builtin("add_f32", (out, a, b, n as u32)).expect("add_f32");
            let expected: Vec<f32> = xs.iter().zip(&ys).map(|(x, y)| x + y).collect();
            assert_eq!(dev.read_f32(out, n), expected, "n={n} skew={skew}");
            dev.assert_guard_intact(out, 4 * n);
        }
    }
}

#[test]
fn add_f32_works_in_place() {
    let mut dev = Device::new();
    let (a, b) = (SCRATCH + 2, SCRATCH + 8192);
    for &n in LENGTHS {
        let xs = floats(n, 3);
        let ys = floats(n, 4);
        let sum: Vec<f32> = xs.iter().zip(&ys).map(|(x, y)| x + y).collect();

        dev.write_f32(a, &xs);
        dev.write_f32(b, &ys);
        dev.builtin("add_f32", (a, a, b, n as u32)).expect("out == a");
        assert_eq!(dev.read_f32(a, n), sum, "out == a, n={n}");

        dev.write_f32(a, &xs);
        dev.builtin("add_f32", (b, a, b, n as u32)).expect("out == b");
        assert_eq!(dev.read_f32(b, n), sum, "out == b, n={n}");

        dev.write_f32(a, &xs);
        dev.builtin("add_f32", (a, a, a, n as u32)).expect("out == a == b");
        let doubled: Vec<f32> = xs.iter().map(|x| x + x).collect();
        assert_eq!(dev.read_f32(a, n), doubled, "out == a == b, n={n}");
    }
}

#[test]
fn empty_ranges_accept_any_pointer() {
    let mut dev = Device::new();
    dev.builtin("fill_f32", (0u32, 0u32, 1.0f32)).expect("fill_f32 of 0 at null");
    dev.builtin("fill_u8", (u32::MAX, 0u32, 1i32)).expect("fill_u8 of 0 at the top");
    dev.builtin("copy_bytes", (0u32, u32::MAX, 0u32)).expect("copy_bytes of 0");
    dev.builtin("add_f32", (0u32, 0u32, 0u32, 0u32)).expect("add_f32 of 0 at null");
    dev.example("sum_f32", (SCRATCH, 0u32, 0u32)).expect("sum_f32 of 0 from null");
    assert_eq!(dev.read_f32(SCRATCH, 1), vec![0.0]);
}

#[test]
fn null_pointer_with_nonzero_length_traps_as_unreachable() {
    let mut dev = Device::new();
    dev.write(0, &[GUARD; 16]);
    assert_eq!(trap_of(dev.builtin("fill_f32", (0u32, 1u32, 1.0f32))), Trap::UnreachableCodeReached);
    assert_eq!(trap_of(dev.builtin("fill_u8", (0u32, 1u32, 0i32))), Trap::UnreachableCodeReached);
    assert_eq!(trap_of(dev.builtin("copy_bytes", (SCRATCH, 0u32, 1u32))), Trap::UnreachableCodeReached);
    assert_eq!(trap_of(dev.builtin("add_f32", (SCRATCH, SCRATCH, 0u32, 1u32))), Trap::UnreachableCodeReached);
    assert_eq!(trap_of(dev.example("scale_f32", (0u32, SCRATCH, 1u32, 2.0f32))), Trap::UnreachableCodeReached);
    assert_eq!(trap_of(dev.example("lut_u8", (SCRATCH, 0u32, 1u32))), Trap::UnreachableCodeReached);
    assert_eq!(trap_of(dev.example("sum_f32", (0u32, SCRATCH, 1u32))), Trap::UnreachableCodeReached);
    assert_eq!(dev.read(0, 16), vec![GUARD; 16], "nothing was written at address 0");
}

#[test]
fn range_that_wraps_the_address_space_traps_before_writing() {
    let mut dev = Device::new();
    dev.guard(SCRATCH, 0);
    let wrapping = u32::MAX / 4; // SCRATCH + 4 * wrapping > 2^32
    assert_eq!(trap_of(dev.builtin("fill_f32", (SCRATCH, wrapping, 1.0f32))), Trap::UnreachableCodeReached);
    assert_eq!(trap_of(dev.builtin("fill_u8", (SCRATCH, u32::MAX, 1i32))), Trap::UnreachableCodeReached);
    assert_eq!(trap_of(dev.builtin("copy_bytes", (SCRATCH, SCRATCH, u32::MAX))), Trap::UnreachableCodeReached);
    assert_eq!(trap_of(dev.builtin("add_f32", (SCRATCH, SCRATCH, SCRATCH, wrapping))), Trap::UnreachableCodeReached);
    assert_eq!(trap_of(dev.example("scale_f32", (SCRATCH, SCRATCH, wrapping, 1.0f32))), Trap::UnreachableCodeReached);
    dev.assert_guard_intact(SCRATCH, 0);
}

#[test]
fn range_past_device_memory_traps_out_of_bounds_and_device_stays_usable() {
    let mut dev = Device::new();
    let end = PAGES * 65536;
    assert_eq!(trap_of(dev.builtin("fill_u8", (end - 8, 16u32, 0i32))), Trap::MemoryOutOfBounds);
    assert_eq!(trap_of(dev.builtin("copy_bytes", (SCRATCH, end - 8, 16u32))), Trap::MemoryOutOfBounds);
    assert_eq!(trap_of(dev.builtin("fill_f32", (end - 4, 100u32, 0.0f32))), Trap::MemoryOutOfBounds);
    assert_eq!(trap_of(dev.builtin("add_f32", (SCRATCH, end - 4, SCRATCH, 100u32))), Trap::MemoryOutOfBounds);
    dev.builtin("fill_f32", (SCRATCH, 4u32, 2.0f32)).expect("the device still runs kernels");
    assert_eq!(dev.read_f32(SCRATCH, 4), vec![2.0; 4]);
}

#[test]
fn scale_f32_matches_cpu_at_any_alignment() {
    let mut dev = Device::new();
    for &n in LENGTHS {
        for &skew in SKEWS {
            let (input, out) = (SCRATCH + 3, SCRATCH + 8192 + skew);
            let xs = floats(n, 5);
            dev.write_f32(input, &xs);
            dev.guard(out, 4 * n);
            dev.example("scale_f32", (out, input, n as u32, 0.75f32)).expect("scale_f32");
            let expected: Vec<f32> = xs.iter().map(|x| x * 0.75).collect();
            assert_eq!(dev.read_f32(out, n), expected, "n={n} skew={skew}");
            dev.assert_guard_intact(out, 4 * n);
        }
    }
}

#[test]
fn sum_f32_matches_cpu_within_rounding() {
    let mut dev = Device::new();
    for &n in LENGTHS {
        let (input, out) = (SCRATCH + 1, SCRATCH + 8192 + 2);
        let xs = floats(n, 6);
        dev.write_f32(input, &xs);
        dev.example("sum_f32", (out, input, n as u32)).expect("sum_f32");
        let expected: f64 = xs.iter().map(|&x| f64::from(x)).sum();
        let got = f64::from(dev.read_f32(out, 1)[0]);
        let tolerance = 1e-5 * xs.iter().map(|x| f64::from(x.abs())).sum::<f64>().max(1.0);
        assert!((got - expected).abs() <= tolerance, "n={n}: {got} vs {expected}");
    }
}

#[test]
fn lut_u8_reverses_the_bits_of_every_byte() {
    let mut dev = Device::new();
    let all: Vec<u8> = (0..=255).collect();
    let (input, out) = (SCRATCH + 1, SCRATCH + 4096);
    dev.write(input, &all);
    dev.guard(out, all.len());
    dev.example("lut_u8", (out, input, all.len() as u32)).expect("lut_u8");
    let expected: Vec<u8> = all.iter().map(|b| b.reverse_bits()).collect();
    assert_eq!(dev.read(out, all.len()), expected);
    dev.assert_guard_intact(out, all.len());

    dev.example("lut_u8", (input, input, all.len() as u32)).expect("lut_u8 in place");
    assert_eq!(dev.read(input, all.len()), expected);
}

#[test]
fn wat_example_imports_only_memory_and_exports_its_kernel() {
    let module = Module::new(&Engine::default(), EXAMPLE_WAT).expect("the WAT example compiles");
    let imports: Vec<(&str, &str)> = module.imports().map(|i| (i.module(), i.name())).collect();
    assert_eq!(imports, [("env", "memory")]);
    let mut exports: Vec<&str> = module.exports().map(|e| e.name()).collect();
    exports.sort_unstable();
    assert_eq!(exports, ["__data_end", "__heap_base", "negate_f32"]);
    let negate = module.get_export("negate_f32").and_then(|e| e.func().cloned()).expect("a function");
    assert_eq!(negate.params().len(), 3);
    assert_eq!(negate.results().len(), 0);
}

#[test]
fn wat_example_negate_f32_matches_cpu_at_any_alignment() {
    let mut dev = Device::new();
    for &n in LENGTHS {
        for &skew in SKEWS {
            let (input, out) = (SCRATCH + 2, SCRATCH + 8192 + skew);
            let xs = floats(n, 7);
            dev.write_f32(input, &xs);
            dev.guard(out, 4 * n);
            dev.example_wat("negate_f32", (out, input, n as u32)).expect("negate_f32");
            let expected: Vec<f32> = xs.iter().map(|x| -x).collect();
            assert_eq!(dev.read_f32(out, n), expected, "n={n} skew={skew}");
            dev.assert_guard_intact(out, 4 * n);
        }
    }
    assert_eq!(trap_of(dev.example_wat("negate_f32", (0u32, SCRATCH, 1u32))), Trap::UnreachableCodeReached);
}

#[test]
fn rust_example_saxpy_f32_matches_cpu() {
    let mut dev = Device::new();
    for &n in LENGTHS {
        let (x, y) = (SCRATCH, SCRATCH + 8192);
        let xs = floats(n, 8);
        let ys = floats(n, 9);
        dev.write_f32(x, &xs);
        dev.write_f32(y, &ys);
        dev.example_rust("saxpy_f32", (y, x, n as u32, 2.5f32)).expect("saxpy_f32");
        let expected: Vec<f32> = xs.iter().zip(&ys).map(|(x, y)| y + 2.5 * x).collect();
        // wasm has no fused multiply-add outside relaxed SIMD, so the
        // kernel rounds exactly as this expression does.
        assert_eq!(dev.read_f32(y, n), expected, "n={n}");
    }
}

#[test]
fn rust_example_dot_f32_matches_cpu_sequential_sum() {
    let mut dev = Device::new();
    for &n in LENGTHS {
        let (x, y, out) = (SCRATCH, SCRATCH + 8192, SCRATCH + 16384 + 1);
        let xs = floats(n, 10);
        let ys = floats(n, 11);
        dev.write_f32(x, &xs);
        dev.write_f32(y, &ys);
        dev.example_rust("dot_f32", (out, x, y, n as u32)).expect("dot_f32");
        let expected = xs.iter().zip(&ys).fold(0.0f32, |acc, (x, y)| acc + x * y);
        assert_eq!(dev.read_f32(out, 1), vec![expected], "n={n}");
    }
}

#[test]
fn rust_sdk_slices_trap_on_misaligned_pointers() {
    let mut dev = Device::new();
    let (x, y) = (SCRATCH, SCRATCH + 8192);
    dev.write_f32(y, &[1.0; 4]);
    assert_eq!(trap_of(dev.example_rust("saxpy_f32", (y + 2, x, 4u32, 1.0f32))), Trap::UnreachableCodeReached);
    assert_eq!(trap_of(dev.example_rust("saxpy_f32", (y, x + 1, 4u32, 1.0f32))), Trap::UnreachableCodeReached);
    assert_eq!(dev.read_f32(y, 4), vec![1.0; 4], "nothing was written");
    dev.example_rust("saxpy_f32", (y + 2, x + 1, 0u32, 1.0f32)).expect("an empty range is never checked");
}
