//! The kernel modules that ship with OpenReg, as WebAssembly bytes.
//!
//! `build.rs` compiles them from source at build time (see this crate's
//! `README.md` for the compilers it needs and how it finds them):
//!
//! | constant | module name | source |
//! |---|---|---|
//! | [`BUILTIN_WASM`] | [`BUILTIN_MODULE_NAME`] | `kernels/builtin.rs` (Rust, `#![no_std]`, SIMD128) |
//! | [`EXAMPLE_RUST_WASM`] | [`EXAMPLE_RUST_MODULE_NAME`] | `examples/saxpy_f32.rs` (Rust, the SDK's slices) |
//! | [`EXAMPLE_C_WASM`] | [`EXAMPLE_C_MODULE_NAME`] | `examples/scale_f32.c` (C, SIMD128) |
//!
//! Each is a core wasm module that follows the kernel-module ABI of
//! `wit/kernels.wit`: it imports only its memory (`env.memory`, the device
//! memory), exports kernels that take `i32`/`i64`/`f32`/`f64` and return
//! nothing, exports `__data_end` and `__heap_base`, and has no start function.
//! [`BUILTIN_KERNELS`], [`EXAMPLE_RUST_KERNELS`] and [`EXAMPLE_C_KERNELS`] list
//! each module's kernels and their signatures; this crate's tests check the
//! modules against them and run every kernel against a CPU oracle.
//!
//! The example modules are user-style modules for tests and documentation;
//! `examples/negate_f32.wat` is a third, hand-written in WAT (the runtime's
//! wasmtime accepts WAT text as a module).
//!
//! This crate has no `unsafe` code and no runtime dependencies: the runtime
//! (`openreg-host`) loads and launches the modules.

#![forbid(unsafe_code)]

include!("../flags.rs");

/// The built-in engine (`engine/*.c`) for 32-bit devices: the `elementwise`
/// kernel, which runs any op of `engine/openreg_engine.h` over a parameter block.
pub const ENGINE32_WASM: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/engine32.wasm"));

/// The built-in engine for memory64 devices: the same source, built for wasm64.
pub const ENGINE64_WASM: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/engine64.wasm"));

/// The name under which the runtime loads the engine on every device (module 0).
pub const ENGINE_MODULE_NAME: &str = "openreg.engine";

/// The built-in kernel library (`kernels/builtin.rs`) as a wasm module.
pub const BUILTIN_WASM: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/builtin.wasm"));

/// The name under which the runtime loads [`BUILTIN_WASM`] on every device.
pub const BUILTIN_MODULE_NAME: &str = "openreg.builtin";

/// The example Rust kernel module (`examples/saxpy_f32.rs`) as a wasm module.
///
/// It borrows device memory through the Rust SDK's checked slices, so it
/// requires aligned pointers (and traps on misaligned ones), unlike the
/// built-in kernels.
pub const EXAMPLE_RUST_WASM: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/example_rust.wasm"));

/// The name under which tests and examples load [`EXAMPLE_RUST_WASM`].
pub const EXAMPLE_RUST_MODULE_NAME: &str = "openreg.example_rust";

/// The example C kernel module (`examples/scale_f32.c`) as a wasm module.
///
/// It shows a user-authored module built with the C SDK, including static
/// data (an active data segment), so tests can load a second module next to
/// the built-in one.
pub const EXAMPLE_C_WASM: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/example_c.wasm"));

/// The name under which tests and examples load [`EXAMPLE_C_WASM`].
pub const EXAMPLE_C_MODULE_NAME: &str = "openreg.example_c";

/// A core wasm value type allowed as a kernel parameter (the WIT
/// `kernels.value-type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ParamType {
    /// 32-bit integer; also a device pointer (byte offset) on 32-bit devices,
    /// and an element count.
    I32,
    /// 64-bit integer.
    I64,
    /// 32-bit float.
    F32,
    /// 64-bit float.
    F64,
}

/// The signature of one exported kernel: its export name and its core wasm
/// parameter types. Kernels return nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KernelSignature {
    /// The export name, which is also the name a launch uses.
    pub name: &'static str,
    /// The parameter types, in order.
    pub params: &'static [ParamType],
}

impl KernelSignature {
    /// Finds the signature of the kernel named `name` in `table`.
    pub fn find(table: &[KernelSignature], name: &str) -> Option<KernelSignature> {
        table.iter().copied().find(|kernel| kernel.name == name)
    }
}

use ParamType::{F32, I32};

/// The kernels of [`BUILTIN_WASM`]. Pointers and counts are `i32`.
///
/// | kernel | parameters | what it does | CUDA analogue |
/// |---|---|---|---|
/// | `noop` | | nothing | an empty kernel (launch overhead) |
/// | `fill_f32` | `dst, n, value: f32` | `dst[0..n] = value` | `thrust::fill` |
/// | `fill_u8` | `dst, n, value: i32` | `n` bytes at `dst` = `value & 0xff` | `cudaMemset` |
/// | `copy_bytes` | `dst, src, nbytes` | `memmove` (overlap allowed) | `cudaMemcpy` device to device |
/// | `add_f32` | `out, a, b, n` | `out[i] = a[i] + b[i]` (`out` may equal `a`/`b`) | an elementwise add kernel |
pub const BUILTIN_KERNELS: &[KernelSignature] = &[
    KernelSignature { name: "noop", params: &[] },
    KernelSignature { name: "fill_f32", params: &[I32, I32, F32] },
    KernelSignature { name: "fill_u8", params: &[I32, I32, I32] },
    KernelSignature { name: "copy_bytes", params: &[I32, I32, I32] },
    KernelSignature { name: "add_f32", params: &[I32, I32, I32, I32] },
];

/// The kernels of [`EXAMPLE_RUST_WASM`]. Pointers and counts are `i32`;
/// `x` and `y` must be 4-byte aligned.
///
/// | kernel | parameters | what it does | CUDA analogue |
/// |---|---|---|---|
/// | `saxpy_f32` | `y, x, n, a: f32` | `y[i] += a * x[i]` | `cublasSaxpy` |
/// | `dot_f32` | `out, x, y, n` | `*out = x[0] * y[0] + ... + x[n - 1] * y[n - 1]` | `cublasSdot` |
pub const EXAMPLE_RUST_KERNELS: &[KernelSignature] = &[
    KernelSignature { name: "saxpy_f32", params: &[I32, I32, I32, F32] },
    KernelSignature { name: "dot_f32", params: &[I32, I32, I32, I32] },
];

/// The kernels of [`EXAMPLE_C_WASM`]. Pointers and counts are `i32`.
///
/// | kernel | parameters | what it does |
/// |---|---|---|
/// | `scale_f32` | `out, in, n, factor: f32` | `out[i] = in[i] * factor` |
/// | `sum_f32` | `out, in, n` | `*out = in[0] + ... + in[n - 1]` |
/// | `lut_u8` | `out, in, n` | `out[i]` = the bits of `in[i]` reversed, through a 256-byte table in static data |
pub const EXAMPLE_C_KERNELS: &[KernelSignature] = &[
    KernelSignature { name: "scale_f32", params: &[I32, I32, I32, F32] },
    KernelSignature { name: "sum_f32", params: &[I32, I32, I32] },
    KernelSignature { name: "lut_u8", params: &[I32, I32, I32] },
];

#[cfg(test)]
mod tests {
    //! Checks the compiled modules against the kernel-module ABI and against
    //! the signature tables, by parsing them with `wasmparser`.

    use super::*;
    use std::collections::BTreeMap;
    use std::ops::Range;
    use wasmparser::{
        DataKind, ExternalKind, FuncType, KnownCustom, Name, Operator, Parser, Payload, TypeRef, ValType, Validator,
        WasmFeatures,
    };

    /// What the ABI checks need to know about a module.
    #[derive(Debug, Default)]
    struct ModuleFacts {
        /// `(module, name, type)` of every import.
        imports: Vec<(String, String, TypeRef)>,
        /// Exported functions by name, with their types.
        funcs: BTreeMap<String, FuncType>,
        /// Exported globals by name, with their constant `i32` initial values.
        globals: BTreeMap<String, u32>,
        /// Whether the module has a start function.
        has_start: bool,
        /// The address ranges of the active data segments.
        active_data: Vec<Range<u32>>,
        /// How many passive data segments the module has.
        passive_data: usize,
        /// The initial value of the global the name section calls
        /// `__stack_pointer`, if any.
        stack_pointer: Option<u32>,
    }

    /// The constant `i32` value of a constant expression.
    fn const_i32(expr: &wasmparser::ConstExpr<'_>) -> u32 {
        match expr.get_operators_reader().read().expect("readable constant expression") {
            Operator::I32Const { value } => value as u32,
            other => panic!("expected an i32.const expression, found {other:?}"),
        }
    }

    /// Parses `bytes` (and validates it with the default wasm features,
    /// SIMD included) into [`ModuleFacts`].
    fn facts(bytes: &[u8]) -> ModuleFacts {
        Validator::new_with_features(WasmFeatures::default()).validate_all(bytes).expect("a valid wasm module");
        let mut facts = ModuleFacts::default();
        let mut types = Vec::new();
        let mut func_types = Vec::new();
        let mut global_inits = Vec::new();
        let mut exports = Vec::new();
        let mut global_names = BTreeMap::new();
        for payload in Parser::new(0).parse_all(bytes) {
            match payload.expect("parsable module") {
                Payload::TypeSection(section) => {
                    for ty in section.into_iter_err_on_gc_types() {
                        types.push(ty.expect("a function type"));
                    }
                }
                Payload::ImportSection(section) => {
                    for import in section.into_imports() {
                        let import = import.expect("an import");
                        if let TypeRef::Func(ty) = import.ty {
                            func_types.push(ty);
                        }
                        facts.imports.push((import.module.to_owned(), import.name.to_owned(), import.ty));
                    }
                }
                Payload::FunctionSection(section) => {
                    for ty in section {
                        func_types.push(ty.expect("a function"));
                    }
                }
                Payload::GlobalSection(section) => {
                    for global in section {
                        global_inits.push(const_i32(&global.expect("a global").init_expr));
                    }
                }
                Payload::ExportSection(section) => {
                    for export in section {
                        let export = export.expect("an export");
                        exports.push((export.name.to_owned(), export.kind, export.index));
                    }
                }
                Payload::StartSection { .. } => facts.has_start = true,
                Payload::DataSection(section) => {
                    for data in section {
                        let data = data.expect("a data segment");
                        match data.kind {
                            DataKind::Active { memory_index, offset_expr } => {
                                assert_eq!(memory_index, 0, "data for a memory other than env.memory");
                                let start = const_i32(&offset_expr);
                                let len = u32::try_from(data.data.len()).expect("segment under 4 GiB");
                                facts.active_data.push(start..start + len);
                            }
                            DataKind::Passive => facts.passive_data += 1,
                        }
                    }
                }
                Payload::CustomSection(section) => {
                    if let KnownCustom::Name(names) = section.as_known() {
                        for name in names {
                            if let Name::Global(map) = name.expect("a name subsection") {
                                for naming in map {
                                    let naming = naming.expect("a global name");
                                    global_names.insert(naming.name.to_owned(), naming.index);
                                }
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        // No global is imported (checked through `imports`), so global
        // indices index `global_inits` directly.
        for (name, kind, index) in exports {
            match kind {
                ExternalKind::Func => {
                    let ty = func_types[index as usize];
                    facts.funcs.insert(name, types[ty as usize].clone());
                }
                ExternalKind::Global => {
                    facts.globals.insert(name, global_inits[index as usize]);
                }
                other => panic!("export {name} is a {other:?}, not a kernel function or a global"),
            }
        }
        facts.stack_pointer = global_names.get("__stack_pointer").map(|&index| global_inits[index as usize]);
        facts
    }

    /// The wasm value type of a kernel parameter type.
    fn val_type(param: ParamType) -> ValType {
        match param {
            ParamType::I32 => ValType::I32,
            ParamType::I64 => ValType::I64,
            ParamType::F32 => ValType::F32,
            ParamType::F64 => ValType::F64,
        }
    }

    /// Asserts everything the kernel-module ABI requires of `bytes`, and that
    /// its exported functions are exactly `kernels`. Returns the facts for
    /// module-specific checks.
    fn assert_kernel_module(bytes: &[u8], kernels: &[KernelSignature]) -> ModuleFacts {
        let facts = facts(bytes);

        assert_eq!(facts.imports.len(), 1, "imports: {:?}", facts.imports);
        let (module, name, ty) = &facts.imports[0];
        assert_eq!((module.as_str(), name.as_str()), ("env", "memory"));
        match ty {
            TypeRef::Memory(memory) => {
                assert!(!memory.memory64, "a 32-bit memory");
                assert!(!memory.shared, "an unshared memory");
            }
            other => panic!("env.memory is a {other:?}"),
        }

        assert!(!facts.has_start, "a kernel module has no start function");

        let exported: Vec<&str> = facts.funcs.keys().map(String::as_str).collect();
        let mut listed: Vec<&str> = kernels.iter().map(|kernel| kernel.name).collect();
        listed.sort_unstable();
        assert_eq!(exported, listed, "exported functions must be exactly the listed kernels");
        for kernel in kernels {
            let ty = &facts.funcs[kernel.name];
            let params: Vec<ValType> = kernel.params.iter().copied().map(val_type).collect();
            assert_eq!(ty.params(), params.as_slice(), "parameters of {}", kernel.name);
            assert!(ty.results().is_empty(), "{} returns {:?}", kernel.name, ty.results());
        }

        let data_end = *facts.globals.get("__data_end").expect("__data_end is exported");
        let heap_base = *facts.globals.get("__heap_base").expect("__heap_base is exported");
        assert!(data_end <= heap_base, "__data_end {data_end} is above __heap_base {heap_base}");
        assert_eq!(facts.passive_data, 0, "static data must be active data segments");
        for segment in &facts.active_data {
            assert!(segment.end <= data_end, "data segment {segment:?} ends above __data_end {data_end}");
        }
        let static_bytes: u32 = facts.active_data.iter().map(|segment| segment.end - segment.start).sum();
        assert!(static_bytes <= 4096, "{static_bytes} bytes of static data; keep it small");
        assert!(facts.stack_pointer.is_some(), "the name section names __stack_pointer, for the loader to retarget");
        facts
    }

    #[test]
    fn builtin_module_follows_the_kernel_abi() {
        assert_kernel_module(BUILTIN_WASM, BUILTIN_KERNELS);
    }

    #[test]
    fn builtin_module_has_no_static_data() {
        // The built-in kernels avoid panicking paths (whose messages and
        // locations would be static data) and have no tables.
        assert!(assert_kernel_module(BUILTIN_WASM, BUILTIN_KERNELS).active_data.is_empty());
    }

    #[test]
    fn example_rust_module_follows_the_kernel_abi() {
        assert_kernel_module(EXAMPLE_RUST_WASM, EXAMPLE_RUST_KERNELS);
    }

    #[test]
    fn example_c_module_follows_the_kernel_abi() {
        assert_kernel_module(EXAMPLE_C_WASM, EXAMPLE_C_KERNELS);
    }

    #[test]
    fn example_c_module_has_its_lookup_table_as_active_data() {
        let facts = assert_kernel_module(EXAMPLE_C_WASM, EXAMPLE_C_KERNELS);
        let table_bytes: u32 = facts.active_data.iter().map(|segment| segment.end - segment.start).sum();
        assert!(table_bytes >= 256, "active data {:?} cannot hold the 256-byte table", facts.active_data);
    }

    #[test]
    fn module_names_are_distinct() {
        let mut names = [BUILTIN_MODULE_NAME, EXAMPLE_RUST_MODULE_NAME, EXAMPLE_C_MODULE_NAME];
        names.sort_unstable();
        assert!(names.windows(2).all(|pair| pair[0] != pair[1]), "{names:?}");
    }

    #[test]
    fn find_looks_kernels_up_by_name() {
        let add = KernelSignature::find(BUILTIN_KERNELS, "add_f32").expect("add_f32 is listed");
        assert_eq!(add.params, &[ParamType::I32; 4]);
        assert_eq!(KernelSignature::find(BUILTIN_KERNELS, "scale_f32"), None);
    }
}
