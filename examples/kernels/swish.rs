//! swish.rs: the Swish activation (SiLU with a slope), forward and backward,
//! as a user kernel module in Rust over tensor views. `swish.py` binds it to
//! the operators `examples::swish` (with a backward formula) and trains a
//! small model with it.
//!
//! ```text
//! swish_forward(x, beta, out):               out = x * s
//! swish_backward(grad, x, beta, grad_input): grad_input = grad * (s + beta * x * s * (1 - s))
//!   where s = sigmoid(beta * x) = 1 / (1 + exp(-beta * x))
//! ```
//!
//! Kernel ABI (wasm signatures): `swish_forward(i32, f32, i32)`,
//! `swish_backward(i32, i32, f32, i32)`. Each `i32` is the device address of
//! a tensor descriptor (`openreg_kernel::Tensor`, `openreg_tensor` in C) that
//! the runtime writes for the launch: the operator's arguments in order, then
//! its output, which is how `torch_openreg.kernels.custom_op` passes them by
//! default. All tensors must be float32 and of one shape, or the kernel
//! traps; any strides work (transposed, sliced, expanded inputs; an output of
//! any layout). Contiguous tensors take a SIMD path over one flat row. An
//! output may be the very tensor of an input (in place), not a partial
//! overlap of one.
//!
//! Numerics: float32 throughout, with the `exp` below (within 1 ulp) and a
//! sigmoid that cannot overflow (`e / (1 + e)` with `e = exp(beta * x)` for
//! negative arguments), so results stay accurate down to subnormals where
//! torch's `1 / (1 + exp(-z))` already flushes to 0; compare with torch using a
//! tolerance. A NaN input gives NaN. Every element goes through the same
//! four-lane code, so a result does not depend on the tensor's layout or on
//! where the element sits in its row.
//!
//! Build: `python -m torch_openreg.kernels build swish.rs` (it links the SDK
//! as the crate `openreg_kernel`), or `torch_openreg.kernels.load("swish.rs")`.

#![no_std]

use core::arch::wasm32::*;
use core::ptr::{read_unaligned, write_unaligned};
use openreg_kernel::{kernel, rows, Dtype, Tensor};

kernel! {
    /// `out = x * sigmoid(beta * x)`, elementwise.
    fn swish_forward(x: &Tensor, beta: f32, out: &Tensor) {
        let b = f32x4_splat(beta);
        map([x, out], |v| {
            let x = v[0];
            f32x4_mul(x, sigmoid4(f32x4_mul(b, x)))
        });
    }

    /// `grad_input = grad * (s + beta * x * s * (1 - s))` with
    /// `s = sigmoid(beta * x)`: the gradient of `swish_forward` with respect
    /// to `x`, times the incoming gradient.
    fn swish_backward(grad: &Tensor, x: &Tensor, beta: f32, grad_input: &Tensor) {
        let b = f32x4_splat(beta);
        let one = f32x4_splat(1.0);
        map([grad, x, grad_input], |v| {
            let (g, x) = (v[0], v[1]);
            let s = sigmoid4(f32x4_mul(b, x));
            let ds = f32x4_mul(f32x4_mul(f32x4_mul(b, x), s), f32x4_sub(one, s));
            f32x4_mul(g, f32x4_add(s, ds))
        });
    }
}

/// Applies `f` to every element position of the float32 tensors `ts`, all of
/// one shape: the last is the output, the others the inputs, which `f`
/// receives four elements at a time (lane `i` of each `v128` is one element).
/// Traps unless every tensor is float32 of one shape.
unsafe fn map<const N: usize>(ts: [&Tensor; N], f: impl Fn(&[v128]) -> v128) {
    let mut base = [core::ptr::null_mut::<f32>(); N];
    for k in 0..N {
        ts[k].require_dtype(Dtype::Float32);
        base[k] = ts[k].data_ptr::<f32>();
    }
    let ins = N - 1;
    let mut v = [f32x4_splat(0.0); N];
    for row in rows(ts) {
        let mut p = [core::ptr::null_mut::<f32>(); N];
        let mut unit = true;
        for k in 0..N {
            p[k] = base[k].wrapping_offset(row.offsets[k]);
            unit &= row.strides[k] == 1;
        }
        let mut i = 0;
        if unit {
            // The contiguous fast path: whole vectors at any alignment.
            while row.len - i >= 4 {
                for k in 0..ins {
                    v[k] = v128_load(p[k].add(i) as *const v128);
                }
                v128_store(p[ins].add(i) as *mut v128, f(&v[..ins]));
                i += 4;
            }
        } else {
            while row.len - i >= 4 {
                for k in 0..ins {
                    v[k] = gather(p[k], row.strides[k], i, 4);
                }
                scatter(p[ins], row.strides[ins], i, 4, f(&v[..ins]));
                i += 4;
            }
        }
        if i < row.len {
            // The last 1-3 elements, through the same vector code.
            let n = row.len - i;
            for k in 0..ins {
                v[k] = gather(p[k], row.strides[k], i, n);
            }
            scatter(p[ins], row.strides[ins], i, n, f(&v[..ins]));
        }
    }
}

/// Elements `i .. i + n` (n <= 4) at element stride `stride` from `p` in
/// lanes `0 .. n`, zeros in the others.
#[inline(always)]
unsafe fn gather(p: *const f32, stride: isize, i: usize, n: usize) -> v128 {
    let mut lanes = [0.0f32; 4];
    let mut at = (i as isize).wrapping_mul(stride);
    for lane in lanes.iter_mut().take(n) {
        *lane = read_unaligned(p.wrapping_offset(at));
        at = at.wrapping_add(stride);
    }
    f32x4(lanes[0], lanes[1], lanes[2], lanes[3])
}

/// Stores lanes `0 .. n` (n <= 4) of `v` as elements `i .. i + n` at element
/// stride `stride` from `p`.
#[inline(always)]
unsafe fn scatter(p: *mut f32, stride: isize, i: usize, n: usize, v: v128) {
    let lanes = [
        f32x4_extract_lane::<0>(v),
        f32x4_extract_lane::<1>(v),
        f32x4_extract_lane::<2>(v),
        f32x4_extract_lane::<3>(v),
    ];
    let mut at = (i as isize).wrapping_mul(stride);
    for lane in lanes.iter().take(n) {
        write_unaligned(p.wrapping_offset(at), *lane);
        at = at.wrapping_add(stride);
    }
}

/// `sigmoid(x) = 1 / (1 + exp(-x))` in each lane, in the form that never
/// overflows: with `e = exp(-|x|)` (in (0, 1]), `1 / (1 + e)` for x >= 0 and
/// `e / (1 + e)` for x < 0. So it is accurate for large negative x too (down
/// to subnormal results, 0 below about -103.9), exactly 1 above about 16.6,
/// and NaN for NaN.
#[inline(always)]
fn sigmoid4(x: v128) -> v128 {
    let one = f32x4_splat(1.0);
    let e = exp4(f32x4_neg(f32x4_abs(x)));
    let r = f32x4_div(one, f32x4_add(one, e));
    v128_bitselect(f32x4_mul(e, r), r, f32x4_lt(x, f32x4_splat(0.0)))
}

/// `exp(x)` in each lane, within about 1 ulp (relative error below 2e-7) for
/// normal results: Cody-Waite reduction `x = k ln2 + r` with |r| <= ln2 / 2,
/// Cephes' `expf` polynomial for `exp(r)`, then scaling by 2^k in two exact
/// steps so that subnormal results and overflow to infinity come out right.
/// exp(-inf) = 0, exp(+inf) = +inf, exp(NaN) = NaN.
#[inline(always)]
fn exp4(x: v128) -> v128 {
    const LOG2E: f32 = core::f32::consts::LOG2_E;
    // ln 2 in two parts: LN2_HI has 9 significant bits, so k * LN2_HI is exact.
    const LN2_HI: f32 = 0.693_359_375;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // Outside [-104, 89] the result is 0 or infinity anyway; clamping keeps k
    // small. pmax / pmin return their first operand when it is NaN.
    let x = f32x4_pmin(f32x4_pmax(x, f32x4_splat(-104.0)), f32x4_splat(89.0));
    let k = f32x4_nearest(f32x4_mul(x, f32x4_splat(LOG2E)));
    let r = f32x4_sub(f32x4_sub(x, f32x4_mul(k, f32x4_splat(LN2_HI))), f32x4_mul(k, f32x4_splat(LN2_LO)));
    // exp(r) = 1 + r + r^2 * P(r) (Cephes expf).
    let mut p = f32x4_splat(1.987_569_15e-4);
    p = f32x4_add(f32x4_mul(p, r), f32x4_splat(1.398_199_950_7e-3));
    p = f32x4_add(f32x4_mul(p, r), f32x4_splat(8.333_451_907_3e-3));
    p = f32x4_add(f32x4_mul(p, r), f32x4_splat(4.166_579_589_4e-2));
    p = f32x4_add(f32x4_mul(p, r), f32x4_splat(1.666_666_545_9e-1));
    p = f32x4_add(f32x4_mul(p, r), f32x4_splat(5.000_000_120_1e-1));
    let e = f32x4_add(f32x4_add(f32x4_mul(p, f32x4_mul(r, r)), r), f32x4_splat(1.0));
    // 2^k = 2^k1 * 2^k2 with k1 = k >> 1: k is in [-150, 129], so both
    // factors are normal floats; e * 2^k1 is exact, the second product rounds
    // once (to a subnormal, or to infinity, where the result is one).
    let k = i32x4_trunc_sat_f32x4(k); // NaN gives 0; the NaN stays in e
    let k1 = i32x4_shr(k, 1);
    let k2 = i32x4_sub(k, k1);
    let bias = i32x4_splat(127);
    let s1 = i32x4_shl(i32x4_add(k1, bias), 23);
    let s2 = i32x4_shl(i32x4_add(k2, bias), 23);
    f32x4_mul(f32x4_mul(e, s1), s2)
}
