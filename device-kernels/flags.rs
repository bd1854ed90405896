// The compiler flags of kernel modules, in one place: `build.rs` builds the
// built-in modules with them, the crate exports them (`RUSTC_FLAGS`,
// `CC_FLAGS`), and `torch_openreg.kernels.build` builds user kernels with
// them (`torch_openreg._C.kernel_build_flags()`).

/// The flags `rustc` compiles a Rust kernel module with (`-o` and the source
/// follow). The stack size is small because the runtime points each module's
/// `__stack_pointer` at a stack of its own; it is also the gap below a Rust
/// module's static data, which `rustc` links after the stack (`--stack-first`).
pub const RUSTC_FLAGS: &[&str] = &[
    "--edition=2021",
    "--target=wasm32-unknown-unknown",
    "--crate-type=cdylib",
    "-Copt-level=3",
    "-Ccodegen-units=1",
    "-Cdebuginfo=0",
    "-Cpanic=abort",
    "-Ctarget-feature=+simd128,+bulk-memory",
    "-Clink-arg=--import-memory",
    "-Clink-arg=-zstack-size=65536",
    "-Clink-arg=--export=__data_end",
    "-Clink-arg=--export=__heap_base",
];

/// The flags clang compiles and links a C kernel module with (include paths,
/// `-o` and the sources follow). See `sdk/openreg_kernel.h` for what each is for.
pub const CC_FLAGS: &[&str] = &[
    "--target=wasm32-unknown-unknown",
    "-nostdlib",
    "-O3",
    "-msimd128",
    "-mbulk-memory",
    "-std=c11",
    "-Wall",
    "-Wextra",
    "-Wl,--no-entry",
    "-Wl,--import-memory",
    "-Wl,-z,stack-size=65536",
    "-Wl,--export=__data_end",
    "-Wl,--export=__heap_base",
];
