"""Compiling kernel sources (Rust, C, WAT) to kernel modules.

The flags are the ones ``device-kernels/build.rs`` builds the built-in
modules with; ``docs/kernel-authoring.md`` says what each is for. Compilers
are found as that build script finds them:

- C: ``$OPENREG_WASM_CC``, else ``clang-19``, else ``clang``; a candidate
  counts if it compiles and links a probe kernel for wasm32.
- Rust: ``$OPENREG_WASM_RUSTC``, else the ``rustc`` on ``PATH``, else
  ``/usr/bin/rustc``; a candidate counts if it has the wasm32 ``libcore``.
- WAT: no compiler; the package's own parser.

A compiler named by a variable is tested like the others and never silently
replaced. The SDK (``openreg_kernel.h``, and ``openreg_kernel.rs`` built as
the crate ``openreg_kernel``) is written to a cache directory
(``$OPENREG_CACHE_DIR``, else ``$XDG_CACHE_HOME/torch_openreg``, else
``~/.cache/torch_openreg``) from the copy compiled into the package.
"""

from __future__ import annotations

import functools
import hashlib
import os
import pathlib
import shutil
import subprocess
import tempfile

from .. import _C

RUSTC_VAR = "OPENREG_WASM_RUSTC"
CC_VAR = "OPENREG_WASM_CC"


def _flags() -> tuple[list[str], list[str], list[str]]:
    """The built-in modules' flags (``device-kernels/flags.rs``): rustc's compile
    flags, rustc's link flags, clang's flags."""
    flags = _C.kernel_build_flags()
    rustc = [f for f in flags["rustc"] if not f.startswith("--crate-type")]
    compile_flags = [f for f in rustc if not f.startswith("-Clink-arg")]
    link_flags = [f for f in rustc if f.startswith("-Clink-arg")]
    return compile_flags, link_flags, list(flags["cc"])


#: rustc flags for a kernel module or the SDK crate (crate type and output follow).
#: Link flags of a Rust kernel module. clang flags for a C kernel module.
RUSTC_FLAGS, RUSTC_LINK_FLAGS, CC_FLAGS = _flags()

_INSTALL_C = (
    "install clang and lld with wasm support: Debian/Ubuntu `apt-get install clang-19 lld-19`, "
    "macOS `brew install llvm lld` (Apple's clang has no wasm target), Windows the LLVM release; "
    f"or name a compiler with {CC_VAR}=/path/to/clang"
)
_INSTALL_RUST = (
    "install Rust's wasm32 standard library: with rustup `rustup target add wasm32-unknown-unknown`, "
    "on Debian/Ubuntu `apt-get install rustc libstd-rust-dev-wasm32`; "
    f"or name a compiler with {RUSTC_VAR}=/path/to/rustc"
)


class KernelBuildError(RuntimeError):
    """A kernel source did not compile, or no compiler for it was found (the message says what to install)."""


def _cache_dir() -> pathlib.Path:
    root = os.environ.get("OPENREG_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(pathlib.Path.home(), ".cache"), "torch_openreg"
    )
    return pathlib.Path(root)


def _write_if_changed(path: pathlib.Path, text: str) -> None:
    if not path.exists() or path.read_text() != text:
        tmp = path.with_suffix(path.suffix + f".tmp{os.getpid()}")
        tmp.write_text(text)
        os.replace(tmp, path)


def sdk_dir() -> pathlib.Path:
    """A directory with the kernel SDK's sources (``openreg_kernel.h``, ``openreg_kernel.rs``).

    Pass it to clang as ``-I``, or include ``openreg_kernel.rs`` in a Rust
    module; :func:`build` does both for you.
    """
    files = _C.sdk_files()
    digest = hashlib.sha256("".join(files[k] for k in sorted(files)).encode()).hexdigest()[:16]
    path = _cache_dir() / f"sdk-{digest}"
    path.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        _write_if_changed(path / name, text)
    return path


def _run(cmd: list[str]) -> subprocess.CompletedProcess:
    # The host build's Rust variables describe that build, not a wasm one.
    env = {k: v for k, v in os.environ.items() if k not in ("RUSTFLAGS", "CARGO_ENCODED_RUSTFLAGS", "RUSTC_WRAPPER")}
    return subprocess.run(cmd, capture_output=True, text=True, env=env)


def _candidates(var: str, names: list[str]) -> list[tuple[str, str]]:
    """``(compiler, how it was chosen)`` in order; only the variable's when it is set."""
    named = os.environ.get(var)
    if named:
        return [(named, f"${var}")]
    return [(name, "PATH") for name in names]


@functools.lru_cache(maxsize=None)
def find_cc() -> str:
    """The C compiler kernels are built with; raises :class:`KernelBuildError` saying what to install."""
    tried = []
    with tempfile.TemporaryDirectory() as tmp:
        probe = pathlib.Path(tmp, "probe.c")
        probe.write_text('__attribute__((export_name("k"))) void k(float *p) { *p = 1.0f; }\n')
        for cc, how in _candidates(CC_VAR, ["clang-19", "clang"]):
            exe = shutil.which(cc)
            if exe is None:
                tried.append(f"{cc} ({how}): not found")
                continue
            out = _run([exe, *CC_FLAGS, "-o", str(pathlib.Path(tmp, "probe.wasm")), str(probe)])
            if out.returncode == 0:
                return exe
            tried.append(f"{cc} ({how}): cannot build for wasm32: {out.stderr.strip().splitlines()[-1:]}")
    raise KernelBuildError(f"no C compiler for wasm32 kernels: tried {'; '.join(tried)}. To fix: {_INSTALL_C}")


@functools.lru_cache(maxsize=None)
def find_rustc() -> str:
    """The Rust compiler kernels are built with; raises :class:`KernelBuildError` saying what to install."""
    tried = []
    for rustc, how in _candidates(RUSTC_VAR, ["rustc", "/usr/bin/rustc"]):
        exe = shutil.which(rustc)
        if exe is None:
            tried.append(f"{rustc} ({how}): not found")
            continue
        out = _run([exe, "--print", "target-libdir", "--target", "wasm32-unknown-unknown"])
        libdir = pathlib.Path(out.stdout.strip()) if out.returncode == 0 else None
        if libdir is not None and any(libdir.glob("libcore-*.rlib")):
            return exe
        tried.append(f"{rustc} ({how}): no wasm32-unknown-unknown standard library")
    raise KernelBuildError(f"no Rust compiler for wasm32 kernels: tried {'; '.join(tried)}. To fix: {_INSTALL_RUST}")


def _sdk_crate(rustc: str) -> pathlib.Path:
    """The SDK compiled as the crate ``openreg_kernel`` (an rlib), cached per SDK and compiler."""
    sdk = sdk_dir()
    version = _run([rustc, "--version"]).stdout.strip()
    key = hashlib.sha256(f"{sdk}\n{version}\n{rustc}\n{RUSTC_FLAGS}".encode()).hexdigest()[:16]
    out = _cache_dir() / f"crate-{key}" / "libopenreg_kernel.rlib"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    root = out.parent / "lib.rs"
    sdk_file = str(sdk / "openreg_kernel.rs").replace("\\", "/")
    _write_if_changed(root, f'#![no_std]\n#[path = "{sdk_file}"]\nmod sdk;\npub use sdk::*;\n')
    tmp = out.with_suffix(f".tmp{os.getpid()}")
    result = _run([rustc, *RUSTC_FLAGS, "--crate-type=rlib", "--crate-name=openreg_kernel", "-o", str(tmp), str(root)])
    if result.returncode != 0:
        raise KernelBuildError(f"the Rust kernel SDK did not compile with {rustc} ({version}):\n{result.stderr}")
    os.replace(tmp, out)
    return out


def build(
    source: str | os.PathLike,
    output: str | os.PathLike | None = None,
    *,
    global_base: int | None = None,
    flags: list[str] | tuple[str, ...] = (),
) -> pathlib.Path:
    """Compiles a kernel source to a kernel module and returns the ``.wasm`` path.

    ``source`` is a ``.rs`` file (Rust, ``#![no_std]``; the SDK is the crate
    ``openreg_kernel``: ``use openreg_kernel::{kernel, Tensor};``), a ``.c``
    file (``#include <openreg_kernel.h>``) or a ``.wat`` file. ``output``
    defaults to the source with the suffix ``.wasm``. ``global_base`` places
    the module's static data (default: the linker's, 1024 for C, 64 KiB for
    Rust); give modules that have static data distinct bases inside
    ``[1 KiB, 15 MiB)``, as the loader's error suggests when two overlap.
    ``flags`` are passed on to the compiler. Raises
    :class:`KernelBuildError` with the compiler's message, or with what to
    install when no compiler is found.
    """
    src = pathlib.Path(source)
    if not src.is_file():
        raise FileNotFoundError(f"no kernel source at {str(src)!r}")
    out = pathlib.Path(output) if output is not None else src.with_suffix(".wasm")
    if out.resolve() == src.resolve():
        raise ValueError(f"the output {str(out)!r} would overwrite the source")
    out.parent.mkdir(parents=True, exist_ok=True)
    if src.suffix == ".wat":
        try:
            out.write_bytes(_C.wat_to_wasm(src.read_bytes()))
        except ValueError as e:
            raise KernelBuildError(f"{src}: {e}") from None
        return out
    if src.suffix == ".c":
        base = [f"-Wl,--global-base={global_base}"] if global_base is not None else []
        cmd = [find_cc(), *CC_FLAGS, *base, f"-I{sdk_dir()}", *flags, "-o", str(out), str(src)]
    elif src.suffix == ".rs":
        rustc = find_rustc()
        crate = _sdk_crate(rustc)
        base = [f"-Clink-arg=--global-base={global_base}"] if global_base is not None else []
        cmd = [
            rustc,
            *RUSTC_FLAGS,
            *RUSTC_LINK_FLAGS,
            *base,
            "--crate-type=cdylib",
            f"--extern=openreg_kernel={crate}",
            *flags,
            "-o",
            str(out),
            str(src),
        ]
    else:
        raise ValueError(f"cannot build {str(src)!r}: kernel sources are .rs (Rust), .c (C) or .wat (WAT)")
    result = _run(cmd)
    if result.returncode != 0:
        raise KernelBuildError(f"{src} did not compile:\n$ {' '.join(cmd)}\n{result.stderr.strip()}")
    return out
