//! `openreg.builtin`: the built-in kernel library of an OpenReg device.
//!
//! Compiled by `device-kernels/build.rs` to a wasm32 kernel module with
//! `rustc` 1.63 or newer (`#![no_std]`, `-C panic=abort`, SIMD128 and
//! bulk-memory enabled). Every kernel follows the kernel-module ABI described
//! in `device-kernels/README.md` and `wit/kernels.wit`: device pointers are
//! `u32` byte offsets into the device memory (`env.memory`), counts are `u32`,
//! nothing is returned, and a contract violation traps.
//!
//! Shared rules for every kernel here:
//! - A range of length 0 is never touched, so its pointer may be anything,
//!   null included.
//! - A nonempty range must start at a nonzero address and must not run past
//!   the 32-bit address space; otherwise the kernel traps before writing
//!   anything. A range that runs past the end of the device memory traps on
//!   the first access outside it (earlier elements may have been written).
//! - No alignment is required: the kernels use unaligned loads and stores.
//!
//! The `f32` kernels walk their ranges in bytes: four `v128`s per iteration,
//! then one `v128`, then one `f32` at a time. Loop conditions are written
//! `bytes - i >= k`, never `i + k <= bytes`, so they cannot wrap even for a
//! range that ends at 4 GiB.

#![no_std]

#[path = "../sdk/openreg_kernel.rs"]
mod sdk;

use core::arch::wasm32::{f32x4_add, f32x4_splat, v128, v128_load, v128_store};
use core::ptr;
use sdk::DevicePtr;

/// Bytes in one `v128`.
const VEC: usize = 16;
/// Bytes handled by one iteration of an unrolled SIMD loop (four `v128`s).
/// Cranelift does little loop optimisation, so unrolling by hand pays.
const BLOCK: usize = 4 * VEC;

/// Does nothing. The runtime launches it to measure launch overhead
/// (an empty `<<<1, 1>>>` CUDA kernel).
#[no_mangle]
pub unsafe extern "C" fn noop() {}

/// Sets `n` `f32`s at `dst` to `value` (`thrust::fill`, or `torch.fill_` on a
/// contiguous `float32` tensor).
#[no_mangle]
pub unsafe extern "C" fn fill_f32(dst: DevicePtr, n: u32, value: f32) {
    let bytes = sdk::check_range::<f32>(dst, n);
    let d = sdk::ptr_mut::<u8>(dst);
    let splat = f32x4_splat(value);
    let mut i = 0;
    while bytes - i >= BLOCK {
        v128_store(d.add(i) as *mut v128, splat);
        v128_store(d.add(i + VEC) as *mut v128, splat);
        v128_store(d.add(i + 2 * VEC) as *mut v128, splat);
        v128_store(d.add(i + 3 * VEC) as *mut v128, splat);
        i += BLOCK;
    }
    while bytes - i >= VEC {
        v128_store(d.add(i) as *mut v128, splat);
        i += VEC;
    }
    while i < bytes {
        ptr::write_unaligned(d.add(i) as *mut f32, value);
        i += 4;
    }
}

/// Sets `n` bytes at `dst` to the low 8 bits of `value` (`cudaMemset`).
/// Lowers to one `memory.fill`.
#[no_mangle]
pub unsafe extern "C" fn fill_u8(dst: DevicePtr, n: u32, value: i32) {
    let bytes = sdk::check_range::<u8>(dst, n);
    if bytes != 0 {
        ptr::write_bytes(sdk::ptr_mut::<u8>(dst), value as u8, bytes);
    }
}

/// Copies `nbytes` bytes from `src` to `dst` (`cudaMemcpy` device to device).
/// The ranges may overlap (`memmove` semantics). Lowers to one `memory.copy`.
#[no_mangle]
pub unsafe extern "C" fn copy_bytes(dst: DevicePtr, src: DevicePtr, nbytes: u32) {
    let bytes = sdk::check_range::<u8>(dst, nbytes);
    sdk::check_range::<u8>(src, nbytes);
    if bytes != 0 {
        ptr::copy(sdk::ptr::<u8>(src), sdk::ptr_mut::<u8>(dst), bytes);
    }
}

/// Computes `out[i] = a[i] + b[i]` for `n` `f32`s (`torch.add(a, b, out=out)`
/// on contiguous `float32` tensors).
///
/// `out` may be the same address as `a` and/or `b` (in-place add). It must
/// not overlap them partially: the result is then unspecified, though memory
/// outside `out` is never written.
#[no_mangle]
pub unsafe extern "C" fn add_f32(out: DevicePtr, a: DevicePtr, b: DevicePtr, n: u32) {
    let bytes = sdk::check_range::<f32>(out, n);
    sdk::check_range::<f32>(a, n);
    sdk::check_range::<f32>(b, n);
    let o = sdk::ptr_mut::<u8>(out);
    let pa = sdk::ptr::<u8>(a);
    let pb = sdk::ptr::<u8>(b);
    let mut i = 0;
    // Each vector is loaded, added and stored before the next one is loaded,
    // so `out == a` or `out == b` reads every element before overwriting it.
    while bytes - i >= BLOCK {
        add_vec(o, pa, pb, i);
        add_vec(o, pa, pb, i + VEC);
        add_vec(o, pa, pb, i + 2 * VEC);
        add_vec(o, pa, pb, i + 3 * VEC);
        i += BLOCK;
    }
    while bytes - i >= VEC {
        add_vec(o, pa, pb, i);
        i += VEC;
    }
    while i < bytes {
        let x = ptr::read_unaligned(pa.add(i) as *const f32);
        let y = ptr::read_unaligned(pb.add(i) as *const f32);
        ptr::write_unaligned(o.add(i) as *mut f32, x + y);
        i += 4;
    }
}

/// `out[i..i + 16] = a[i..i + 16] + b[i..i + 16]` as four `f32` lanes;
/// the pointers need no alignment.
#[inline(always)]
unsafe fn add_vec(out: *mut u8, a: *const u8, b: *const u8, i: usize) {
    let x = v128_load(a.add(i) as *const v128);
    let y = v128_load(b.add(i) as *const v128);
    v128_store(out.add(i) as *mut v128, f32x4_add(x, y));
}
