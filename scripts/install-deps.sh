#!/usr/bin/env bash
# Installs what the build needs and a fresh Debian/Ubuntu machine lacks:
# a wasm32-capable Rust compiler for device-kernels/ (Debian's rustc with
# libstd-rust-dev-wasm32, unless rustup already has the wasm32 target) and
# clang/lld 19 for C kernels. Idempotent: installs nothing that is present.
set -euo pipefail

have_wasm_rustc() {
    [ -n "${OPENREG_WASM_RUSTC:-}" ] && return 0
    local libdir
    libdir=$(rustc --print target-libdir --target wasm32-unknown-unknown 2>/dev/null) &&
        compgen -G "$libdir/libcore-*.rlib" >/dev/null && return 0
    compgen -G "/usr/lib/rustlib/wasm32-unknown-unknown/lib/libcore-*.rlib" >/dev/null
}

have_wasm_cc() {
    [ -n "${OPENREG_WASM_CC:-}" ] || command -v clang-19 >/dev/null
}

missing=()
have_wasm_rustc || missing+=(rustc libstd-rust-dev-wasm32)
have_wasm_cc || missing+=(clang-19 lld-19)
command -v cargo >/dev/null || { echo "cargo not found: install Rust with rustup (https://rustup.rs)" >&2; exit 1; }

if [ ${#missing[@]} -gt 0 ]; then
    if ! command -v apt-get >/dev/null; then
        echo "missing: ${missing[*]}. Install a wasm32 Rust target (rustup target add wasm32-unknown-unknown)" \
             "and LLVM clang with lld, or set OPENREG_WASM_RUSTC / OPENREG_WASM_CC." >&2
        exit 1
    fi
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    echo "installing Debian packages: ${missing[*]}"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
