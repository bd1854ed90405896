//! saxpy_f32.rs: an example kernel module in Rust, built with the Rust kernel
//! SDK (`sdk/openreg_kernel.rs`). `device-kernels/build.rs` compiles it to
//! `example_rust.wasm` (module name `openreg.example_rust`) with the same
//! `rustc` flags as the built-in library:
//!
//! ```text
//! rustc --edition=2021 --target=wasm32-unknown-unknown --crate-type=cdylib \
//!   -Copt-level=3 -Cpanic=abort -Ctarget-feature=+simd128,+bulk-memory \
//!   -Clink-arg=--import-memory -Clink-arg=-zstack-size=65536 \
//!   -Clink-arg=--export=__data_end -Clink-arg=--export=__heap_base \
//!   -o example_rust.wasm examples/saxpy_f32.rs
//! ```
//!
//! Unlike the built-in kernels it borrows device memory as Rust slices, so it
//! shows the SDK's checked conversions: its pointers must be aligned for
//! `f32`, and its input must not overlap its output, or the kernel traps /
//! the result is undefined (see `sdk::slice`).

#![no_std]

#[path = "../sdk/openreg_kernel.rs"]
mod sdk;

use sdk::DevicePtr;

/// `y[i] = a * x[i] + y[i]` for `n` `f32`s (BLAS `saxpy`, `cublasSaxpy`).
///
/// Traps when `x` or `y` is not 4-byte aligned, or is null with `n > 0`.
/// `x` and `y` must not overlap.
#[no_mangle]
pub unsafe extern "C" fn saxpy_f32(y: DevicePtr, x: DevicePtr, n: u32, a: f32) {
    let x = sdk::slice::<f32>(x, n);
    let y = sdk::slice_mut::<f32>(y, n);
    // Plain iterator code: rustc auto-vectorizes it to f32x4 operations.
    for (yi, xi) in y.iter_mut().zip(x) {
        *yi += a * xi;
    }
}

/// `*out = x[0] * y[0] + ... + x[n - 1] * y[n - 1]` (`cublasSdot`), summed
/// sequentially in `f32`. `out` need not be aligned; `x` and `y` must be
/// 4-byte aligned and may overlap each other.
#[no_mangle]
pub unsafe extern "C" fn dot_f32(out: DevicePtr, x: DevicePtr, y: DevicePtr, n: u32) {
    let x = sdk::slice::<f32>(x, n);
    let y = sdk::slice::<f32>(y, n);
    let mut sum = 0.0f32;
    for (xi, yi) in x.iter().zip(y) {
        sum += xi * yi;
    }
    sdk::check_range::<f32>(out, 1);
    sdk::store(out, sum);
}
