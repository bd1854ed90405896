//! Builds the C++ shim (`csrc/`) against the installed torch and links it.
//!
//! torch's include paths, library directory and C++ ABI come from the Python
//! that has torch: `OPENREG_PYTHON`, else `PYO3_PYTHON`, else the active
//! virtualenv's, else `../.venv`. The script runs that Python from a temporary
//! directory, outside any `torch/` folder (`torch/types.py` would shadow the
//! standard library's `types`). The shim is compiled with `-std=c++20`, the
//! wheel's `_GLIBCXX_USE_CXX11_ABI` and hidden visibility, and linked with
//! `c10`, `torch_cpu` and `torch` (never `torch_python`), with an rpath to
//! torch's `lib/`. An ABI mismatch still builds and only fails at import,
//! which is why the tests import the module. With `OPENREG_CHECK_ONLY` set
//! (clippy, `cargo check`) nothing is compiled: a build that links then fails.

use std::path::{Path, PathBuf};
use std::process::Command;

const PROBE: &str = r#"
import torch, torch.utils.cpp_extension as ext
print(int(torch._C._GLIBCXX_USE_CXX11_ABI))
print(ext.library_paths()[0])
for p in ext.include_paths():
    print(p)
"#;

fn python() -> PathBuf {
    for var in ["OPENREG_PYTHON", "PYO3_PYTHON"] {
        println!("cargo:rerun-if-env-changed={var}");
        if let Some(p) = std::env::var_os(var) {
            return p.into();
        }
    }
    println!("cargo:rerun-if-env-changed=VIRTUAL_ENV");
    if let Some(venv) = std::env::var_os("VIRTUAL_ENV") {
        return Path::new(&venv).join("bin/python");
    }
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap());
    manifest.join("../.venv/bin/python")
}

fn main() {
    // `make lint` checks the Rust code only (clippy links nothing), so it
    // skips the shim's C++: minutes of compiling on a clean machine.
    println!("cargo:rerun-if-env-changed=OPENREG_CHECK_ONLY");
    // A build from another clone recompiles this crate (Makefile, CARGO_TARGET_DIR).
    println!("cargo:rerun-if-env-changed=OPENREG_SOURCE_DIR");
    if std::env::var_os("OPENREG_CHECK_ONLY").is_some() {
        return;
    }
    let python = python();
    let out =
        Command::new(&python).arg("-c").arg(PROBE).current_dir(std::env::temp_dir()).output().unwrap_or_else(|e| {
            panic!("cannot run {} to find torch: {e}; run `make` to create .venv", python.display())
        });
    if !out.status.success() {
        panic!(
            "{} cannot import torch (pinned to 2.15.0): {}\nrun `make` to create .venv with torch",
            python.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = String::from_utf8(out.stdout).expect("utf-8 paths");
    let mut lines = text.lines();
    let abi = lines.next().expect("abi line");
    let lib_dir = lines.next().expect("library path").to_string();
    let includes: Vec<&str> = lines.collect();

    let sources: Vec<PathBuf> = std::fs::read_dir("csrc")
        .expect("csrc/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "cpp"))
        .collect();
    let mut build = cxx_build::bridge("src/bridge.rs");
    build
        .files(&sources)
        .std("c++20")
        .define("_GLIBCXX_USE_CXX11_ABI", abi)
        .flag("-fvisibility=hidden")
        .flag_if_supported("-Wno-unused-parameter")
        .flag_if_supported("-Wno-deprecated-declarations")
        .warnings(false);
    for inc in &includes {
        build.include(inc);
    }
    // Kineto's plugin interface (OpenRegActivityProfiler.cpp), shipped with torch.
    for inc in &includes {
        let kineto = PathBuf::from(inc).join("kineto");
        if kineto.join("libkineto.h").exists() {
            build.include(kineto);
        }
    }
    // The engine's parameter blocks, shared with the wasm kernels.
    build.include("../device-kernels/engine");
    // Every object file is kept: the registration files are referenced by
    // nothing but their static registrars, which the linker would drop.
    build.link_lib_modifier("+whole-archive");
    precompile_torch_headers(&mut build);
    build.compile("openreg_shim");

    println!("cargo:rustc-link-search=native={lib_dir}");
    for lib in ["c10", "torch_cpu", "torch"] {
        println!("cargo:rustc-link-lib=dylib={lib}");
    }
    println!("cargo:rustc-link-arg=-Wl,-rpath,{lib_dir}");
    println!("cargo:rerun-if-changed=src/bridge.rs");
    println!("cargo:rerun-if-changed=csrc");
    println!("cargo:rerun-if-changed=../device-kernels/engine/openreg_engine.h");
    for s in &sources {
        println!("cargo:rerun-if-changed={}", s.display());
    }
    for h in std::fs::read_dir("csrc").expect("csrc/").filter_map(|e| e.ok().map(|e| e.path())) {
        println!("cargo:rerun-if-changed={}", h.display());
    }
}

/// Parsing torch's headers is most of a translation unit's compile time
/// (about 19 of 22 seconds for a small one), so with GCC they are parsed once
/// into a precompiled header that every unit includes first. The header is
/// compiled by the same compiler with the same flags as the units (GCC reads
/// the header's text instead of a `.gch` whose flags differ), and any failure
/// only means the units parse the headers themselves. Clang's precompiled
/// headers work differently; its units parse the headers.
fn precompile_torch_headers(build: &mut cc::Build) {
    let compiler = build.get_compiler();
    if !compiler.is_like_gnu() {
        return;
    }
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    let header = out.join("openreg_torch_pch.h");
    std::fs::write(&header, "#include <ATen/ATen.h>\n#include <torch/library.h>\n").expect("write the pch header");
    let gch = out.join("openreg_torch_pch.h.gch");
    let status = compiler.to_command().arg("-x").arg("c++-header").arg(&header).arg("-o").arg(&gch).status();
    if status.is_ok_and(|s| s.success()) {
        build.flag("-include").flag(header.to_str().expect("utf-8 OUT_DIR"));
    } else {
        println!("cargo:warning=torch's headers were not precompiled; every unit parses them");
    }
}
