//! Compiles the kernel modules from source to WebAssembly.
//!
//! - `kernels/builtin.rs` (Rust, `#![no_std]`, using `sdk/openreg_kernel.rs`)
//!   becomes `$OUT_DIR/builtin.wasm`, compiled by a `rustc` that has the
//!   `wasm32-unknown-unknown` standard library (`libcore`).
//! - `examples/saxpy_f32.rs` (the Rust SDK example) becomes
//!   `$OUT_DIR/example_rust.wasm`, with the same compiler and flags.
//! - `examples/scale_f32.c` (C, using `sdk/openreg_kernel.h`) becomes
//!   `$OUT_DIR/example_c.wasm`, compiled by a clang that targets wasm32 and
//!   can link with lld's `wasm-ld`.
//! - `engine/*.c` (C, the built-in engine) becomes `$OUT_DIR/engine32.wasm`
//!   and `$OUT_DIR/engine64.wasm` (wasm64, for memory64 devices), with the
//!   same clang.
//!
//! Finding the compilers (first match wins):
//! - Rust: `$OPENREG_WASM_RUSTC`, else the `rustc` on `PATH`, else
//!   `/usr/bin/rustc` (Debian's, with `libstd-rust-dev-wasm32`); a candidate
//!   counts only if its `--print target-libdir --target wasm32-unknown-unknown`
//!   holds a `libcore-*.rlib`.
//! - C: `$OPENREG_WASM_CC`, else `clang-19`, else `clang`; a candidate counts
//!   only if it compiles and links a probe kernel for wasm32.
//!
//! A compiler named by the variable is tested like the others, and the build
//! stops (with what to install) if it fails, rather than falling back.
//!
//! The compilers run with the build's cargo and rustc variables
//! (`RUSTFLAGS`, `CARGO_ENCODED_RUSTFLAGS`, `RUSTC_WRAPPER`, the jobserver,
//! ...) removed: those describe the host build, not the wasm one.

use std::env;
use std::ffi::{OsStr, OsString};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The environment variable that names the Rust compiler for kernels.
const RUSTC_VAR: &str = "OPENREG_WASM_RUSTC";
/// The environment variable that names the C compiler for kernels.
const CC_VAR: &str = "OPENREG_WASM_CC";
// RUSTC_FLAGS and CC_FLAGS: shared with the crate (and through it with
// torch_openreg.kernels.build), so user kernels build as the built-ins do.
include!("flags.rs");

/// The static-data base of the built-in engine (`engine/`): high in the
/// device's static area (`host/src/layout.rs`, below 15 MiB), out of the way of
/// user modules linked at the usual low addresses.
const ENGINE_GLOBAL_BASE: &str = "-Wl,--global-base=14680064";

/// What to install when no Rust compiler for wasm32 is found.
const RUSTC_HELP: &str = "\
no Rust compiler with the wasm32-unknown-unknown standard library was found.
The built-in kernels (device-kernels/kernels/builtin.rs) need one. Install one of:
  - Debian/Ubuntu: `apt-get install rustc libstd-rust-dev-wasm32` (provides /usr/bin/rustc)
  - rustup: `rustup target add wasm32-unknown-unknown` (for the `rustc` on PATH)
or point OPENREG_WASM_RUSTC at a rustc that has the target.";

/// What to install when no C compiler for wasm32 is found.
const CC_HELP: &str = "\
no C compiler that compiles and links wasm32-unknown-unknown was found.
The C example kernels (device-kernels/examples/scale_f32.c) need clang with lld's wasm-ld. Install one of:
  - Debian/Ubuntu: `apt-get install clang-19 lld-19`
  - elsewhere: LLVM clang with lld (e.g. Homebrew `llvm` + `lld`, or the LLVM release; Apple's clang has no wasm target)
or point OPENREG_WASM_CC at such a clang.";

fn main() {
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));

    // A build from another clone recompiles this crate (Makefile, CARGO_TARGET_DIR).
    println!("cargo:rerun-if-env-changed=OPENREG_SOURCE_DIR");
    println!("cargo:rerun-if-env-changed={RUSTC_VAR}");
    println!("cargo:rerun-if-env-changed={CC_VAR}");
    let builtin_src = manifest_dir.join("kernels/builtin.rs");
    let rust_sdk = manifest_dir.join("sdk/openreg_kernel.rs");
    let c_sdk_dir = manifest_dir.join("sdk");
    let c_sdk = c_sdk_dir.join("openreg_kernel.h");
    let example_rust_src = manifest_dir.join("examples/saxpy_f32.rs");
    let example_c_src = manifest_dir.join("examples/scale_f32.c");
    let engine_dir = manifest_dir.join("engine");
    for source in [&builtin_src, &rust_sdk, &example_rust_src, &c_sdk, &example_c_src, &engine_dir] {
        println!("cargo:rerun-if-changed={}", source.display());
    }
    let mut engine_sources: Vec<PathBuf> = fs::read_dir(&engine_dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", engine_dir.display()))
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "c" || ext == "h"))
        .collect();
    engine_sources.sort();
    for source in &engine_sources {
        println!("cargo:rerun-if-changed={}", source.display());
    }
    engine_sources.retain(|path| path.extension().is_some_and(|ext| ext == "c"));

    let rustc = find_wasm_rustc().unwrap_or_else(|tried| fail(RUSTC_HELP, &tried));
    for (src, out) in [(&builtin_src, "builtin.wasm"), (&example_rust_src, "example_rust.wasm")] {
        let mut cmd = compiler_command(&rustc);
        cmd.args(RUSTC_FLAGS)
            .arg("--remap-path-prefix")
            .arg(remap(&manifest_dir))
            .arg("-o")
            .arg(out_dir.join(out))
            .arg(src);
        run(cmd, &format!("compile {}", src.display()));
    }

    let cc = find_wasm_cc(&out_dir).unwrap_or_else(|tried| fail(CC_HELP, &tried));
    let mut cmd = c_command(&cc);
    cmd.arg("-I")
        .arg(&c_sdk_dir)
        .arg(prefix_map(&manifest_dir))
        .arg("-o")
        .arg(out_dir.join("example_c.wasm"))
        .arg(&example_c_src);
    run(cmd, &format!("compile {}", example_c_src.display()));

    // The built-in engine, from one C source for both device kinds.
    for (target, out) in [("wasm32", "engine32.wasm"), ("wasm64", "engine64.wasm")] {
        let mut cmd = compiler_command(&cc);
        cmd.arg(format!("--target={target}-unknown-unknown"))
            .args(&CC_FLAGS[1..])
            .args(["-mnontrapping-fptoint", "-Werror", ENGINE_GLOBAL_BASE])
            .arg("-I")
            .arg(&engine_dir)
            .arg(prefix_map(&manifest_dir))
            .arg("-o")
            .arg(out_dir.join(out))
            .args(&engine_sources);
        run(cmd, &format!("compile the engine for {target}"));
    }
}

/// A command for a wasm compiler, with the host build's variables removed.
fn compiler_command(program: &OsStr) -> Command {
    let mut cmd = Command::new(program);
    for (key, _) in env::vars_os() {
        let Some(key) = key.to_str() else { continue };
        // `CARGO_HOME` stays: rustup's `rustc` proxy uses it to find toolchains.
        let cargo_var = key.starts_with("CARGO") && key != "CARGO_HOME";
        let rustc_var = matches!(
            key,
            "RUSTFLAGS"
                | "RUSTDOCFLAGS"
                | "RUSTC"
                | "RUSTDOC"
                | "RUSTC_WRAPPER"
                | "RUSTC_WORKSPACE_WRAPPER"
                | "RUSTC_LINKER"
                | "RUSTC_BOOTSTRAP"
                | "MAKEFLAGS"
                | "MFLAGS"
        );
        if cargo_var || rustc_var {
            cmd.env_remove(key);
        }
    }
    cmd
}

/// The clang command with the flags every C kernel module is built with; the
/// caller adds include paths, `-o` and the sources.
fn c_command(cc: &OsStr) -> Command {
    let mut cmd = compiler_command(cc);
    cmd.args(CC_FLAGS);
    cmd
}

/// Finds a Rust compiler with the wasm32 `libcore`, or returns what was tried.
fn find_wasm_rustc() -> Result<OsString, Vec<String>> {
    let explicit = env::var_os(RUSTC_VAR);
    let candidates: Vec<OsString> = match &explicit {
        Some(rustc) => vec![rustc.clone()],
        None => vec!["rustc".into(), "/usr/bin/rustc".into()],
    };
    let mut tried = Vec::new();
    if explicit.is_none() {
        tried.push(format!("{RUSTC_VAR}: not set"));
    }
    for rustc in candidates {
        match rustc_wasm_libdir(&rustc) {
            Ok(_) => return Ok(rustc),
            Err(why) => tried.push(format!("{}: {why}", rustc.to_string_lossy())),
        }
    }
    Err(tried)
}

/// The wasm32 library directory of `rustc` if it holds `libcore`.
fn rustc_wasm_libdir(rustc: &OsStr) -> Result<PathBuf, String> {
    let mut cmd = compiler_command(rustc);
    cmd.args(["--print", "target-libdir", "--target", "wasm32-unknown-unknown"]);
    let output = cmd.output().map_err(|e| format!("cannot run: {e}"))?;
    if !output.status.success() {
        return Err(format!("`--print target-libdir` failed: {}", first_line(&output.stderr)));
    }
    let dir = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
    let has_core = fs::read_dir(&dir).into_iter().flatten().flatten().any(|entry| {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        name.starts_with("libcore-") && name.ends_with(".rlib")
    });
    if has_core {
        Ok(dir)
    } else {
        Err(format!("no libcore-*.rlib in {}", dir.display()))
    }
}

/// Finds a clang that compiles and links a probe kernel for wasm32, or
/// returns what was tried.
fn find_wasm_cc(out_dir: &Path) -> Result<OsString, Vec<String>> {
    let probe_src = out_dir.join("probe.c");
    fs::write(
        &probe_src,
        "__attribute__((export_name(\"probe\"))) void probe(unsigned char *p, unsigned n) {\n  \
         for (unsigned i = 0; i < n; i++) p[i] = 0;\n}\n",
    )
    .unwrap_or_else(|e| panic!("cannot write {}: {e}", probe_src.display()));
    let probe_out = out_dir.join("probe.wasm");

    let explicit = env::var_os(CC_VAR);
    let candidates: Vec<OsString> = match &explicit {
        Some(cc) => vec![cc.clone()],
        None => vec!["clang-19".into(), "clang".into()],
    };
    let mut tried = Vec::new();
    if explicit.is_none() {
        tried.push(format!("{CC_VAR}: not set"));
    }
    let mut found = None;
    for cc in candidates {
        let result = c_command(&cc).arg("-o").arg(&probe_out).arg(&probe_src).output();
        let _ = fs::remove_file(&probe_out);
        match result {
            Ok(output) if output.status.success() => {
                found = Some(cc);
                break;
            }
            Ok(output) => tried.push(format!(
                "{}: cannot compile and link for wasm32: {}",
                cc.to_string_lossy(),
                first_line(&output.stderr)
            )),
            Err(e) => tried.push(format!("{}: cannot run: {e}", cc.to_string_lossy())),
        }
    }
    let _ = fs::remove_file(&probe_src);
    found.ok_or(tried)
}

/// Runs a compiler; panics with its command line and output if it fails, and
/// passes its diagnostics on as cargo warnings if it succeeds with any.
fn run(mut cmd: Command, what: &str) {
    let shown = command_line(&cmd);
    let output: Output = cmd.output().unwrap_or_else(|e| panic!("cannot {what}: cannot run {shown}: {e}"));
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        panic!(
            "cannot {what}: {shown} failed with {}\n{}{stderr}",
            output.status,
            String::from_utf8_lossy(&output.stdout)
        );
    }
    for line in stderr.lines().filter(|line| !line.trim().is_empty()) {
        println!("cargo:warning={line}");
    }
}

/// The program and arguments of `cmd`, for messages.
fn command_line(cmd: &Command) -> String {
    let mut line = cmd.get_program().to_string_lossy().into_owned();
    for arg in cmd.get_args() {
        line.push(' ');
        line.push_str(&arg.to_string_lossy());
    }
    line
}

/// Stops the build with the install instructions and what was tried.
fn fail(help: &str, tried: &[String]) -> ! {
    panic!("{help}\nTried:\n  - {}", tried.join("\n  - "));
}

/// The first line of a compiler's diagnostics.
fn first_line(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    text.lines().find(|line| !line.trim().is_empty()).unwrap_or("(no output)").trim().to_owned()
}

/// `rustc --remap-path-prefix` value that keeps the build machine's paths out
/// of the module: paths become relative to the workspace root, which also
/// keeps the compiler's diagnostics readable from there.
fn remap(manifest_dir: &Path) -> OsString {
    let mut arg = manifest_dir.as_os_str().to_owned();
    arg.push("=device-kernels");
    arg
}

/// The clang flag that keeps the build machine's paths out of the module (as
/// [`remap`] does for rustc).
fn prefix_map(manifest_dir: &Path) -> OsString {
    let mut arg = OsString::from("-ffile-prefix-map=");
    arg.push(manifest_dir.as_os_str());
    arg.push("=device-kernels");
    arg
}
