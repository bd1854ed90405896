//! The OpenReg kernel SDK for Rust.
//!
//! A kernel module in Rust is a single `#![no_std]` source file compiled by
//! `rustc` (1.63 or newer) to a `wasm32-unknown-unknown` `cdylib`. Bring this
//! file in as a module; it supplies the panic handler and the helpers that turn
//! device pointers into Rust pointers and slices:
//!
//! ```ignore
//! #![no_std]
//! #[path = "path/to/sdk/openreg_kernel.rs"]
//! mod sdk;
//!
//! /// Doubles `n` `f32`s at `x` in place.
//! #[no_mangle]
//! pub unsafe extern "C" fn double_f32(x: u32, n: u32) {
//!     for v in sdk::slice_mut::<f32>(x, n) {
//!         *v *= 2.0;
//!     }
//! }
//! ```
//!
//! and build it with (see `device-kernels/README.md`):
//!
//! ```text
//! rustc --edition=2021 --target wasm32-unknown-unknown --crate-type cdylib \
//!   -C opt-level=3 -C panic=abort -C target-feature=+simd128,+bulk-memory \
//!   -C link-arg=--import-memory -C link-arg=-zstack-size=65536 \
//!   -C link-arg=--export=__data_end -C link-arg=--export=__heap_base \
//!   -o my_kernels.wasm my_kernels.rs
//! ```
//!
//! # The kernel ABI in Rust terms
//!
//! - A kernel is `#[no_mangle] pub unsafe extern "C" fn name(...)` whose
//!   parameters are `u32`/`i32`, `u64`/`i64`, `f32` or `f64` and which returns
//!   nothing.
//! - A device pointer arrives as a `u32`: a byte offset into the device memory
//!   (the module's only memory, imported as `env.memory`). Offset 0 is the null
//!   device pointer; the runtime never hands it out for an allocation.
//! - Element counts arrive as `u32`.
//! - A contract violation (a null pointer with a nonzero length, a range that
//!   runs past the 32-bit address space, a misaligned slice) traps with the
//!   wasm `unreachable` instruction, which the runtime reports as a kernel
//!   trap. So does any `panic!`: kernels never unwind. An access outside the
//!   device memory traps on its own (out of bounds).
//!
//! This file must keep compiling with Rust 1.63 (Debian 12's rustc): no
//! let-else, no generic associated types, no newer `core` APIs.

// A kernel module uses only some of these helpers.
#![allow(dead_code)]

use core::arch::wasm32;
use core::mem;
use core::ptr::NonNull;

/// A device pointer as a kernel receives it: a byte offset into device memory.
pub type DevicePtr = u32;

/// The panic handler: any panic in a kernel executes `unreachable`, which the
/// runtime reports as a kernel trap. Kernels are built with `-C panic=abort`,
/// so nothing unwinds.
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    wasm32::unreachable()
}

/// Stops the kernel with a trap (the wasm `unreachable` instruction).
///
/// Use it for contract violations; the runtime reports the launch as failed
/// with a kernel trap and the device stays usable.
#[inline(always)]
pub fn trap() -> ! {
    wasm32::unreachable()
}

/// Traps unless `condition` holds: the kernel-side `assert!`, without the
/// panic machinery (no message, no static data).
#[inline(always)]
pub fn require(condition: bool) {
    if !condition {
        trap()
    }
}

/// Checks the device range of `n` elements of `T` starting at `addr` and
/// returns its length in bytes.
///
/// Traps when the range is not empty and `addr` is null, or when the range
/// runs past the end of the 32-bit address space (it would wrap around).
/// Whether the range lies inside the device memory is checked by the memory
/// accesses themselves, which trap when it does not.
#[inline(always)]
pub fn check_range<T>(addr: DevicePtr, n: u32) -> usize {
    let bytes = n as u64 * mem::size_of::<T>() as u64;
    if bytes != 0 {
        require(addr != 0);
        require(addr as u64 + bytes <= 1u64 << 32);
    }
    // Cannot truncate: `bytes` is at most 2^32 - `addr` and `addr` is nonzero
    // whenever `bytes` is.
    bytes as usize
}

/// The raw pointer for device address `addr`. Never traps; dereferencing it is
/// up to the caller (wasm allows unaligned accesses, so
/// `core::ptr::read_unaligned` / `write_unaligned` and
/// `core::arch::wasm32::v128_load` / `v128_store` work at any address).
#[inline(always)]
pub fn ptr<T>(addr: DevicePtr) -> *const T {
    addr as usize as *const T
}

/// The mutable raw pointer for device address `addr`. See [`ptr`].
#[inline(always)]
pub fn ptr_mut<T>(addr: DevicePtr) -> *mut T {
    addr as usize as *mut T
}

/// Traps unless `addr` is aligned for `T` (a `&T` or `&[T]` must be).
#[inline(always)]
pub fn check_aligned<T>(addr: DevicePtr) {
    require(addr as usize % mem::align_of::<T>() == 0);
}

/// Borrows `n` elements of `T` at device address `addr` as a shared slice.
///
/// Traps when the range fails [`check_range`] or `addr` is not aligned for
/// `T` (an empty range is never checked and yields an empty slice).
///
/// # Safety
/// Every bit pattern in the range must be a valid `T` (true for the integer
/// and float types kernels use), and nothing may write the range while the
/// slice lives: in particular no `slice_mut` over an overlapping range. For
/// inputs that may alias outputs, use [`ptr`] / [`ptr_mut`] instead.
#[inline(always)]
pub unsafe fn slice<'a, T>(addr: DevicePtr, n: u32) -> &'a [T] {
    if n == 0 {
        // Not `&[]`: rustc may give that an (empty) data segment.
        return core::slice::from_raw_parts(NonNull::dangling().as_ptr(), 0);
    }
    check_range::<T>(addr, n);
    check_aligned::<T>(addr);
    core::slice::from_raw_parts(ptr::<T>(addr), n as usize)
}

/// Borrows `n` elements of `T` at device address `addr` as a mutable slice.
///
/// Traps like [`slice`].
///
/// # Safety
/// As for [`slice`], and nothing else may read or write the range while the
/// slice lives.
#[inline(always)]
pub unsafe fn slice_mut<'a, T>(addr: DevicePtr, n: u32) -> &'a mut [T] {
    if n == 0 {
        return core::slice::from_raw_parts_mut(NonNull::dangling().as_ptr(), 0);
    }
    check_range::<T>(addr, n);
    check_aligned::<T>(addr);
    core::slice::from_raw_parts_mut(ptr_mut::<T>(addr), n as usize)
}

/// Reads a `T` at device address `addr`, aligned or not.
///
/// # Safety
/// `addr` must be nonzero and the bytes there must be a valid `T`.
#[inline(always)]
pub unsafe fn load<T: Copy>(addr: DevicePtr) -> T {
    core::ptr::read_unaligned(ptr::<T>(addr))
}

/// Writes a `T` at device address `addr`, aligned or not.
///
/// # Safety
/// `addr` must be nonzero, and no live reference may cover the bytes written.
#[inline(always)]
pub unsafe fn store<T: Copy>(addr: DevicePtr, value: T) {
    core::ptr::write_unaligned(ptr_mut::<T>(addr), value)
}
