//! Kernel modules: checking a wasm module against the kernel-module contract
//! of `wit/kernels.wit`, preparing it for a device, and compiling it.
//!
//! A module is checked once, device-independently:
//! - its only import is `env.memory`, of the device's index type (32 or 64 bit);
//! - every exported function is a kernel: parameters of the WIT `value-type`s,
//!   no results; there is at least one;
//! - it has no start function;
//! - its static data (active data segments, up to an exported `__data_end`)
//!   lies in the static area of `layout.rs`;
//! - it is at most [`MAX_MODULE_BYTES`] long, and no function nests blocks
//!   deeper than [`MAX_NESTING`] or loops deeper than [`MAX_LOOP_NESTING`].
//!   Cranelift's time per instruction grows with the depth of the loops around
//!   it, so without a bound a small hostile module takes minutes to load (4000
//!   nested loops: 2.2 s); with it, loading is linear in the module's size.
//!   Compilers emit far shallower code: the engine nests 34 blocks and 5 loops
//!   at most (a `switch` becomes one block per case, hence the looser block bound).
//!
//! Then it is rewritten in one place:
//! - its memory import becomes `shared` with the largest maximum of its index
//!   type: device memory is a wasm shared memory, which the device's workers
//!   use at once, and a shared memory only satisfies a shared import;
//! - its `__stack_pointer` global starts at the device's kernel stack
//!   ([`layout::STACK_TOP`]) instead of wherever its linker put it, and is
//!   exported as [`STACK_POINTER_EXPORT`], so the runtime can point each
//!   worker's instance at its own slice of the stack and reset it after a trap
//!   leaves it unbalanced.
//!
//! Every other byte is kept. The result is compiled once per runtime and instantiated per device, where
//! the device checks its static range against the modules already there.

use std::borrow::Cow;
use std::hash::{Hash, Hasher};
use std::path::Path;

use wasm_encoder::reencode::{Reencode, RoundtripReencoder};
use wasmparser::{DataKind, ExternalKind, KnownCustom, Name, Operator, Parser, Payload, TypeRef, ValType};

use crate::abi::{KernelInfo, ValueType};
use crate::error::{Error, Result};
use crate::layout;

/// The largest kernel module the loader accepts, in bytes (binary or text).
pub const MAX_MODULE_BYTES: usize = 16 << 20;
/// The deepest block nesting (`block`, `loop`, `if`, `try_table`) a kernel may have.
pub const MAX_NESTING: u32 = 1024;
/// The deepest loop nesting a kernel may have.
pub const MAX_LOOP_NESTING: u32 = 32;

/// The export name under which a prepared module exposes its stack pointer.
pub(crate) const STACK_POINTER_EXPORT: &str = "__openreg_stack_pointer";

/// A checked, compiled kernel module, ready to be instantiated on devices.
#[derive(Debug)]
pub(crate) struct KernelModule {
    pub(crate) name: String,
    pub(crate) module: wasmtime::Module,
    pub(crate) kernels: Vec<KernelInfo>,
    /// `[start, end)` of the module's static data in device memory, if any.
    pub(crate) static_range: Option<(u64, u64)>,
    pub(crate) has_stack_pointer: bool,
}

#[derive(Clone, Copy)]
struct GlobalInfo {
    mutable: bool,
    ty: ValType,
    init: Option<u64>,
}

/// Checks, rewrites and compiles a module (binary or text format). With
/// `cache`, the machine code is looked up there first and kept there after
/// compiling (see [`compile_cached`]); only modules that ship inside this
/// library are given one.
pub(crate) fn prepare(
    engine: &wasmtime::Engine,
    name: &str,
    wasm: &[u8],
    memory64: bool,
    cache: Option<&Path>,
) -> Result<KernelModule> {
    let invalid = |reason: String| Error::InvalidModule { module: name.to_string(), reason };
    if wasm.len() > MAX_MODULE_BYTES {
        return Err(invalid(format!(
            "it is {} long; kernel modules may be at most {} (split it into several modules)",
            crate::Bytes(wasm.len() as u64),
            crate::Bytes(MAX_MODULE_BYTES as u64)
        )));
    }
    let bytes: Cow<[u8]> = wat::parse_bytes(wasm).map_err(|e| invalid(format!("not a wasm module: {e}")))?;
    let parsed = scan(&bytes, memory64).map_err(invalid)?;

    let rewritten = rewrite(&bytes, parsed.stack_pointer, memory64).map_err(invalid)?;
    let module = match cache {
        Some(dir) => compile_cached(engine, &format!("{name}-wasm{}", if memory64 { 64 } else { 32 }), &rewritten, dir),
        None => wasmtime::Module::new(engine, &rewritten),
    }
    .map_err(|e| invalid(format!("{e:#}")))?;
    Ok(KernelModule {
        name: name.to_string(),
        module,
        kernels: parsed.kernels,
        static_range: parsed.static_range,
        has_stack_pointer: parsed.stack_pointer.is_some(),
    })
}

/// Compiles `wasm`, or loads the machine code an earlier process kept in `dir`
/// for the same bytes and the same engine settings (wasmtime's version, its
/// configuration and the CPU features it compiles for, all in
/// `precompile_compatibility_hash`). A file is the serialized module followed
/// by a checksum of it. One that is missing, unreadable, damaged (the
/// checksum differs) or rejected by wasmtime only means compiling; a cache
/// that cannot be written is skipped. Files are written whole and renamed
/// into place, so a reader never sees half of one. A module (`name`, its
/// address width) keeps one file per engine setting, for the latest bytes:
/// a rebuilt engine replaces the old one's file, while processes with
/// different settings keep theirs.
fn compile_cached(
    engine: &wasmtime::Engine,
    name: &str,
    wasm: &[u8],
    dir: &Path,
) -> wasmtime::Result<wasmtime::Module> {
    let mut settings = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut settings);
    let stem = format!("{name}-{:016x}-", settings.finish());
    let mut bytes = std::collections::hash_map::DefaultHasher::new();
    wasm.hash(&mut bytes);
    let path = dir.join(format!("{stem}{}-{:016x}.cwasm", wasm.len(), bytes.finish()));
    if let Some(code) = std::fs::read(&path).ok().as_deref().and_then(checked) {
        // SAFETY: wasmtime runs this machine code as it is. Only this function
        // writes these files, from `Module::serialize` of the same bytes under
        // the same engine settings (the name says both), and only whole (the
        // rename below); the checksum rules out a damaged file, and wasmtime
        // checks its version and settings again. The directory is the user's
        // own cache, as trusted as their Python environment: whoever can write
        // there can rewrite the library too (docs/security.md).
        if let Ok(module) = unsafe { wasmtime::Module::deserialize(engine, code) } {
            return Ok(module);
        }
    }
    let module = wasmtime::Module::new(engine, wasm)?;
    if let Ok(code) = module.serialize() {
        let _ = keep(dir, &stem, &path, code);
    }
    Ok(module)
}

fn checksum(code: &[u8]) -> [u8; 8] {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    hasher.write(code);
    hasher.finish().to_le_bytes()
}

/// A cache file's code, if its checksum is right.
fn checked(file: &[u8]) -> Option<&[u8]> {
    let (code, sum) = file.split_at_checked(file.len().checked_sub(8)?)?;
    (checksum(code) == sum).then_some(code)
}

/// Writes `code` and its checksum to `path` through a temporary file of this
/// writer's own, then removes the older files of the same module and engine
/// settings (same `stem`), and temporary files a killed process left.
fn keep(dir: &Path, stem: &str, path: &Path, mut code: Vec<u8>) -> std::io::Result<()> {
    static WRITERS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    create_private_dir(dir)?;
    let sum = checksum(&code);
    code.extend_from_slice(&sum);
    let writer = WRITERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = path.with_extension(format!("tmp{}-{writer}", std::process::id()));
    let written = std::fs::write(&tmp, code).and_then(|()| std::fs::rename(&tmp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
        return written;
    }
    let abandoned = |entry: &std::fs::DirEntry| {
        let age = entry.metadata().and_then(|m| m.modified()).ok().and_then(|t| t.elapsed().ok());
        age.is_some_and(|age| age > std::time::Duration::from_secs(600))
    };
    for entry in std::fs::read_dir(dir)?.flatten() {
        let Some(file) = entry.file_name().to_str().filter(|f| f.starts_with(stem)).map(str::to_owned) else {
            continue;
        };
        let stale = file.ends_with(".cwasm") && entry.path() != path;
        if stale || (file.contains(".tmp") && abandoned(&entry)) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    Ok(())
}

/// Creates the cache directory readable and writable by its owner only (on
/// Unix): what is in it runs as native code.
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

struct Scan {
    kernels: Vec<KernelInfo>,
    static_range: Option<(u64, u64)>,
    stack_pointer: Option<u32>,
}

fn scan(bytes: &[u8], memory64: bool) -> std::result::Result<Scan, String> {
    let mut types = Vec::new();
    let mut func_types = Vec::new();
    let mut globals: Vec<GlobalInfo> = Vec::new();
    let mut global_names: Option<Vec<(u32, String)>> = None;
    let mut exports = Vec::new();
    let mut data = Vec::new();
    let mut memory_imported = false;
    let err = |e: wasmparser::BinaryReaderError| format!("not a valid wasm module: {e}");

    for payload in Parser::new(0).parse_all(bytes) {
        match payload.map_err(err)? {
            Payload::TypeSection(reader) => {
                for ty in reader.into_iter_err_on_gc_types() {
                    types.push(ty.map_err(err)?);
                }
            }
            Payload::ImportSection(reader) => {
                for import in reader.into_imports() {
                    let import = import.map_err(err)?;
                    match import.ty {
                        TypeRef::Memory(mem)
                            if import.module == "env" && import.name == "memory" && !memory_imported =>
                        {
                            if mem.memory64 != memory64 {
                                return Err(format!(
                                    "it imports a {}-bit memory but the device memory is {}-bit{}",
                                    if mem.memory64 { 64 } else { 32 },
                                    if memory64 { 64 } else { 32 },
                                    if memory64 { " (build it for wasm64)" } else { " (build it for wasm32)" }
                                ));
                            }
                            memory_imported = true;
                        }
                        _ => {
                            return Err(format!(
                                "it imports `{}.{}`; a kernel module may import only its memory, as `env.memory` \
                                 (link with --import-memory)",
                                import.module, import.name
                            ))
                        }
                    }
                }
            }
            Payload::FunctionSection(reader) => {
                for ty in reader {
                    func_types.push(ty.map_err(err)?);
                }
            }
            Payload::MemorySection(_) => {
                return Err("it defines its own memory; a kernel module imports the device memory as `env.memory` \
                            (link with --import-memory)"
                    .into())
            }
            Payload::GlobalSection(reader) => {
                for global in reader {
                    let global = global.map_err(err)?;
                    globals.push(GlobalInfo {
                        mutable: global.ty.mutable,
                        ty: global.ty.content_type,
                        init: const_value(&global.init_expr),
                    });
                }
            }
            Payload::ExportSection(reader) => {
                for export in reader {
                    let export = export.map_err(err)?;
                    exports.push((export.name.to_string(), export.kind, export.index));
                }
            }
            Payload::StartSection { .. } => {
                return Err("it has a start function; kernel modules must not run code when loaded".into())
            }
            Payload::DataSection(reader) => {
                for segment in reader {
                    let segment = segment.map_err(err)?;
                    if let DataKind::Active { offset_expr, .. } = segment.kind {
                        let start = const_value(&offset_expr)
                            .ok_or("a data segment's offset is not a constant (PIC modules are not supported)")?;
                        let end = start
                            .checked_add(segment.data.len() as u64)
                            .ok_or("a data segment runs past the end of the address space")?;
                        data.push((start, end));
                    }
                }
            }
            Payload::CodeSectionEntry(body) => check_nesting(&body)?,
            Payload::CustomSection(reader) => {
                if let KnownCustom::Name(names) = reader.as_known() {
                    for name in names {
                        if let Ok(Name::Global(map)) = name {
                            let mut list = Vec::new();
                            for naming in map.into_iter().flatten() {
                                list.push((naming.index, naming.name.to_string()));
                            }
                            global_names = Some(list);
                        }
                    }
                }
            }
            _ => {}
        }
    }
    if !memory_imported {
        return Err("it does not import `env.memory`; build it with --import-memory".into());
    }

    let mut kernels = Vec::new();
    let mut data_end = None;
    for (name, kind, index) in &exports {
        match kind {
            ExternalKind::Func => {
                let ty = func_types
                    .get(*index as usize)
                    .and_then(|&t| types.get(t as usize))
                    .ok_or_else(|| format!("export `{name}` names a function that does not exist"))?;
                if !ty.results().is_empty() {
                    return Err(format!("export `{name}` returns values; kernels return nothing"));
                }
                let params = ty
                    .params()
                    .iter()
                    .enumerate()
                    .map(|(i, t)| {
                        value_type(*t).ok_or_else(|| {
                            format!(
                                "kernel `{name}` parameter {i} is {t}; kernel parameters are i32, i64, f32 or f64 \
                                 (wit/kernels.wit, value-type)"
                            )
                        })
                    })
                    .collect::<std::result::Result<Vec<_>, _>>()?;
                kernels.push(KernelInfo { name: name.clone(), params });
            }
            ExternalKind::Global if name == "__data_end" => {
                data_end = globals.get(*index as usize).and_then(|g| g.init);
            }
            _ => {}
        }
    }
    if kernels.is_empty() {
        return Err("it exports no functions, so it has no kernels".into());
    }

    let static_range = match (data.iter().map(|d| d.0).min(), data.iter().map(|d| d.1).max()) {
        (Some(start), Some(end)) => {
            let end = end.max(data_end.unwrap_or(0));
            if start < layout::STATIC_START || end > layout::STATIC_END {
                return Err(format!(
                    "its static data [{start:#x}, {end:#x}) lies outside the device's static area [{:#x}, {:#x}); \
                     link it with a --global-base inside that area",
                    layout::STATIC_START,
                    layout::STATIC_END
                ));
            }
            Some((start, end))
        }
        _ => None,
    };

    let pointer_type = if memory64 { ValType::I64 } else { ValType::I32 };
    let stack_pointer = match &global_names {
        Some(names) => names.iter().find(|(_, n)| n == "__stack_pointer").map(|&(i, _)| i),
        // Without a name section, follow wasm-ld: the stack pointer is global 0.
        None => globals
            .first()
            .filter(|g| g.mutable && g.ty == pointer_type && g.init.is_some_and(|v| v % 16 == 0 && v >= 1024))
            .map(|_| 0),
    };
    if let Some(index) = stack_pointer {
        let g = globals.get(index as usize).ok_or("`__stack_pointer` is not a global of the module")?;
        if !g.mutable || g.ty != pointer_type {
            return Err(format!("`__stack_pointer` is not a mutable {pointer_type} global"));
        }
    }
    Ok(Scan { kernels, static_range, stack_pointer })
}

/// Checks, in one pass over a function's instructions, that it nests blocks
/// at most [`MAX_NESTING`] and loops at most [`MAX_LOOP_NESTING`] deep.
fn check_nesting(body: &wasmparser::FunctionBody<'_>) -> std::result::Result<(), String> {
    // Open blocks, innermost last: whether each is a loop.
    let mut open: Vec<bool> = Vec::new();
    let mut loops = 0u32;
    let mut ops = body.get_operators_reader().map_err(|e| e.to_string())?;
    while !ops.eof() {
        let is_loop = match ops.read().map_err(|e| e.to_string())? {
            Operator::Loop { .. } => true,
            Operator::Block { .. } | Operator::If { .. } | Operator::TryTable { .. } => false,
            Operator::End => {
                if open.pop() == Some(true) {
                    loops -= 1;
                }
                continue;
            }
            _ => continue,
        };
        open.push(is_loop);
        loops += u32::from(is_loop);
        let (what, depth, max) =
            if is_loop { ("loops", loops, MAX_LOOP_NESTING) } else { ("blocks", open.len() as u32, MAX_NESTING) };
        if depth > max {
            return Err(format!(
                "a function nests {what} more than {max} deep; kernels may nest at most {MAX_NESTING} blocks and \
                 {MAX_LOOP_NESTING} loops (deeper nesting makes compiling slow; compilers do not emit it)"
            ));
        }
    }
    Ok(())
}

/// The value of a constant expression that is a single integer constant.
fn const_value(expr: &wasmparser::ConstExpr) -> Option<u64> {
    let mut ops = expr.get_operators_reader();
    let value = match ops.read().ok()? {
        Operator::I32Const { value } => u64::from(value as u32),
        Operator::I64Const { value } => value as u64,
        _ => return None,
    };
    matches!(ops.read().ok()?, Operator::End).then_some(value)
}

fn value_type(t: ValType) -> Option<ValueType> {
    match t {
        ValType::I32 => Some(ValueType::I32),
        ValType::I64 => Some(ValueType::I64),
        ValType::F32 => Some(ValueType::F32),
        ValType::F64 => Some(ValueType::F64),
        _ => None,
    }
}

/// The largest maximum size of a memory, in pages: 4 GiB for 32-bit memories,
/// 2^64 bytes for memory64 ones.
fn max_pages(memory64: bool) -> u64 {
    if memory64 {
        1 << 48
    } else {
        1 << 16
    }
}

/// Re-encodes the import section (the memory shared), the global section
/// (stack pointer starting at the kernel stack) and the export section (plus
/// the stack-pointer export); copies the rest.
fn rewrite(bytes: &[u8], stack_pointer: Option<u32>, memory64: bool) -> std::result::Result<Vec<u8>, String> {
    let mut out = wasm_encoder::Module::new();
    let err = |e: wasmparser::BinaryReaderError| e.to_string();
    let mut reencoder = RoundtripReencoder;
    for payload in Parser::new(0).parse_all(bytes) {
        let payload = payload.map_err(err)?;
        match (&payload, stack_pointer) {
            (Payload::ImportSection(reader), _) => {
                // `scan` has checked that the memory is the only import.
                let mut section = wasm_encoder::ImportSection::new();
                for import in reader.clone().into_imports() {
                    let import = import.map_err(err)?;
                    let TypeRef::Memory(mem) = import.ty else {
                        return Err(format!("unexpected import `{}.{}`", import.module, import.name));
                    };
                    let ty = wasm_encoder::MemoryType {
                        minimum: mem.initial,
                        maximum: Some(max_pages(memory64)),
                        memory64,
                        shared: true,
                        page_size_log2: mem.page_size_log2,
                    };
                    section.import(import.module, import.name, ty);
                }
                out.section(&section);
            }
            (Payload::GlobalSection(reader), Some(stack_pointer)) => {
                let mut section = wasm_encoder::GlobalSection::new();
                for (index, global) in reader.clone().into_iter().enumerate() {
                    let global = global.map_err(err)?;
                    let ty = reencoder.global_type(global.ty).map_err(|e| e.to_string())?;
                    let init = if index as u32 == stack_pointer {
                        if memory64 {
                            wasm_encoder::ConstExpr::i64_const(layout::STACK_TOP as i64)
                        } else {
                            wasm_encoder::ConstExpr::i32_const(layout::STACK_TOP as i32)
                        }
                    } else {
                        reencoder.const_expr(global.init_expr).map_err(|e| e.to_string())?
                    };
                    section.global(ty, &init);
                }
                out.section(&section);
            }
            (Payload::ExportSection(reader), Some(stack_pointer)) => {
                let mut section = wasm_encoder::ExportSection::new();
                for export in reader.clone() {
                    let export = export.map_err(err)?;
                    let kind = reencoder.export_kind(export.kind).map_err(|e| e.to_string())?;
                    section.export(export.name, kind, export.index);
                }
                section.export(STACK_POINTER_EXPORT, wasm_encoder::ExportKind::Global, stack_pointer);
                out.section(&section);
            }
            (other, _) => {
                if let Some((id, range)) = other.as_section() {
                    out.section(&wasm_encoder::RawSection { id, data: &bytes[range] });
                }
            }
        }
    }
    Ok(out.finish())
}
