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
//! # Tensor views
//!
//! A kernel that implements a PyTorch operator receives each tensor argument
//! as a `&Tensor`: the device address (an `i32` in the wasm signature) of a
//! 160-byte descriptor with the tensor's data address, numel, dtype, sizes and
//! strides (in elements, as torch's `stride()`), which the runtime writes into
//! the launch's parameter area just before the call. It is read-only and
//! valid until the kernel returns. Tensors arrive in the order the operator
//! binds them (by default its inputs, then its outputs); scalar arguments
//! arrive as the `f32`/`f64`/`i32`/`i64` values the kernel's own signature
//! declares. The `kernel!` macro removes the export boilerplate:
//!
//! ```ignore
//! #![no_std]
//! #[path = "path/to/sdk/openreg_kernel.rs"]
//! mod sdk;
//!
//! use sdk::{Dtype, Tensor};
//!
//! sdk::kernel! {
//!     /// out = relu(x), for float32 tensors of one shape and any strides.
//!     fn relu(x: &Tensor, out: &Tensor) {
//!         x.require_dtype(Dtype::Float32);
//!         out.require_dtype(Dtype::Float32);
//!         let (xp, op) = (x.data_ptr::<f32>(), out.data_ptr::<f32>());
//!         // One innermost row at a time; contiguous tensors are one row.
//!         for row in sdk::rows([x, out]) {
//!             let [xo, oo] = row.offsets;
//!             let [xs, os] = row.strides;
//!             for i in 0..row.len as isize {
//!                 let v = *xp.wrapping_offset(xo + i * xs);
//!                 *op.wrapping_offset(oo + i * os) = if v < 0.0 { 0.0 } else { v };
//!             }
//!         }
//!     }
//! }
//! ```
//!
//! [`Tensor`] has the checked accessors ([`Tensor::data_ptr`],
//! [`Tensor::as_slice`] for contiguous tensors, [`Tensor::offset`]), and
//! [`rows`] walks up to [`MAX_OPERANDS`] tensors of one shape together, one
//! innermost row at a time, with no division per element.
//!
//! This file must keep compiling with Rust 1.63 (Debian 12's rustc): no
//! let-else, no generic associated types, no newer `core` APIs. Nothing in it
//! may panic with a message or own a `static`: a module that does not use a
//! helper must not get static data from it (the built-in library has none).

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

/// Declares exported kernels without the boilerplate: each
/// `fn name(params) { body }` (doc comments and other attributes allowed, no
/// return type) becomes `#[no_mangle] pub unsafe extern "C" fn name(params)`,
/// so the body may call the SDK's `unsafe` helpers directly.
///
/// ```ignore
/// use openreg_kernel::{kernel, Tensor};   // the SDK as a crate (what `torch_openreg.kernels.build` links)
///
/// kernel! {
///     /// Doc comment of the kernel.
///     fn scale(x: &Tensor, factor: f32, out: &Tensor) { ... }
///     fn other(ptr: u32, n: u32) { ... }
/// }
/// ```
///
/// (With the SDK included as a module, `#[path = ".../openreg_kernel.rs"] mod
/// sdk;`, the macro is `crate::kernel!`: `#[macro_export]` puts it at the
/// crate root.)
///
/// A `&Tensor` parameter is an `i32` in the wasm signature, the device address
/// of a tensor descriptor; other parameters must be `u32`/`i32`, `u64`/`i64`,
/// `f32` or `f64`.
#[macro_export]
macro_rules! kernel {
    ($($(#[$attr:meta])* fn $name:ident ($($params:tt)*) $body:block)*) => {
        $(
            $(#[$attr])*
            #[no_mangle]
            pub unsafe extern "C" fn $name($($params)*) $body
        )*
    };
}

/// The most dimensions a [`Tensor`] describes.
pub const MAX_DIMS: usize = 8;

/// `Tensor::flags` bit: the tensor is contiguous (row-major, torch's
/// `is_contiguous()`).
pub const CONTIGUOUS: u32 = 1;

/// Element types, with c10's `ScalarType` numbering (the values of
/// [`Tensor::dtype`]).
#[repr(i32)]
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Dtype {
    Uint8 = 0,
    Int8 = 1,
    Int16 = 2,
    Int32 = 3,
    Int64 = 4,
    Float16 = 5,
    Float32 = 6,
    Float64 = 7,
    Bool = 11,
    Bfloat16 = 15,
}

/// Bits `2 * code ..= 2 * code + 1`: log2 of the itemsize of dtype `code`.
const LOG2_ITEMSIZES: u32 = (1 << (2 * 2)) // int16
    | (2 << (2 * 3)) // int32
    | (3 << (2 * 4)) // int64
    | (1 << (2 * 5)) // float16
    | (2 << (2 * 6)) // float32
    | (3 << (2 * 7)) // float64
    | (1 << (2 * 15)); // bfloat16 (uint8, int8 and bool: 0)

impl Dtype {
    /// The dtype with code `code`, if this SDK names it.
    pub fn from_code(code: i32) -> Option<Dtype> {
        // Not a `match` over the codes: rustc turns that into a lookup table,
        // which would be static data.
        if (0..=7).contains(&code) || code == 11 || code == 15 {
            // SAFETY: `Dtype` is `repr(i32)` and `code` is one of its
            // discriminants.
            Some(unsafe { mem::transmute::<i32, Dtype>(code) })
        } else {
            None
        }
    }

    /// Bytes per element.
    pub fn itemsize(self) -> usize {
        // log2 of each code's itemsize, two bits per code: a constant in the
        // code, where a `match` could become a table in static data.
        1 << ((LOG2_ITEMSIZES >> (2 * self as u32)) & 3)
    }
}

/// A tensor argument: the descriptor the runtime writes for each tensor a
/// kernel receives (`openreg_tensor` in `openreg_kernel.h`). 160 bytes,
/// 8-byte aligned, little-endian, the same layout on wasm32 and wasm64.
///
/// A kernel gets `&Tensor` (an `i32` device address in its wasm signature)
/// and must not write the descriptor. The fields are public for reading; the
/// methods check them and trap on a descriptor that does not hold together
/// (see [`Tensor::check`]).
#[repr(C)]
pub struct Tensor {
    /// Device address of the first element (storage offset applied); may be
    /// 0 when `numel` is 0.
    pub data: u64,
    /// Number of elements: the product of `sizes[..ndim]` (1 when `ndim` is 0).
    pub numel: i64,
    /// A [`Dtype`] code.
    pub dtype: i32,
    /// Number of dimensions, `0..=MAX_DIMS`.
    pub ndim: i32,
    /// Bytes per element.
    pub itemsize: i32,
    /// [`CONTIGUOUS`], or 0.
    pub flags: u32,
    /// Size of each dimension; entries from `ndim` on are 0.
    pub sizes: [i64; MAX_DIMS],
    /// Stride of each dimension in elements (0 for an expanded dimension);
    /// entries from `ndim` on are 0.
    pub strides: [i64; MAX_DIMS],
}

// The layout pinned at compile time (Rust 1.63 has no `offset_of!`): the size,
// the alignment, and each field's offset, found by writing a distinct marker
// into each field of a constant and looking for its low byte at the offset
// the C header asserts (wasm is little-endian, and the struct has no padding
// for `transmute` to trip on).
const _: () = assert!(mem::size_of::<Tensor>() == 160);
const _: () = assert!(mem::align_of::<Tensor>() == 8);
const _: () = {
    let mut sizes = [0i64; MAX_DIMS];
    let mut strides = [0i64; MAX_DIMS];
    sizes[0] = 7;
    sizes[MAX_DIMS - 1] = 8;
    strides[0] = 9;
    strides[MAX_DIMS - 1] = 10;
    let marked = Tensor { data: 1, numel: 2, dtype: 3, ndim: 4, itemsize: 5, flags: 6, sizes, strides };
    // SAFETY: `Tensor` is 160 bytes of integers with no padding.
    let bytes: [u8; 160] = unsafe { mem::transmute(marked) };
    assert!(bytes[0] == 1); // data
    assert!(bytes[8] == 2); // numel
    assert!(bytes[16] == 3); // dtype
    assert!(bytes[20] == 4); // ndim
    assert!(bytes[24] == 5); // itemsize
    assert!(bytes[28] == 6); // flags
    assert!(bytes[32] == 7 && bytes[32 + 8 * (MAX_DIMS - 1)] == 8); // sizes
    assert!(bytes[96] == 9 && bytes[96 + 8 * (MAX_DIMS - 1)] == 10); // strides
};

/// Below this every size, stride, numel and byte address of a valid view lies.
const LIMIT: u64 = 1 << 32;

impl Tensor {
    /// Traps unless the descriptor describes a view inside the 32-bit address
    /// space: `ndim` in `0..=MAX_DIMS`, `itemsize` in `1..=16`, `numel` the
    /// product of the sizes, sizes, strides and `numel` in `0..2^32`, and,
    /// when `numel` is not 0, `data` nonzero with every element's bytes below
    /// 4 GiB (so offset arithmetic cannot wrap around). [`Tensor::data_ptr`],
    /// [`Tensor::as_slice`] and [`rows`] call it.
    pub fn check(&self) {
        require(self.ndim >= 0 && self.ndim as usize <= MAX_DIMS);
        require(self.itemsize > 0 && self.itemsize <= 16);
        require(self.numel >= 0 && (self.numel as u64) < LIMIT);
        let ndim = self.ndim as usize;
        let mut product = 1u64; // of the nonzero sizes, saturated at 2^32
        let mut empty = false;
        for d in 0..MAX_DIMS {
            if d == ndim {
                break;
            }
            let (size, stride) = (self.sizes[d], self.strides[d]);
            require(size >= 0 && (size as u64) < LIMIT && stride >= 0 && (stride as u64) < LIMIT);
            if size == 0 {
                empty = true;
            } else {
                // Both factors are at most 2^32: no overflow.
                product = core::cmp::min(product * size as u64, LIMIT);
            }
        }
        require(if empty { self.numel == 0 } else { product == self.numel as u64 });
        if self.numel != 0 {
            let mut last = 0u64; // element offset of the farthest element
            for d in 0..MAX_DIMS {
                if d == ndim {
                    break;
                }
                // (2^32 - 1)^2 + 2^32 < 2^64: neither product nor sum overflows.
                last += (self.sizes[d] - 1) as u64 * self.strides[d] as u64;
                require(last < LIMIT);
            }
            require(self.data != 0 && self.data < LIMIT);
            require(self.data + (last + 1) * self.itemsize as u64 <= LIMIT);
        }
    }

    /// The element type, if this SDK names its code.
    #[inline]
    pub fn dtype(&self) -> Option<Dtype> {
        Dtype::from_code(self.dtype)
    }

    /// Traps unless the element type is `dtype` (with that type's itemsize).
    #[inline]
    pub fn require_dtype(&self, dtype: Dtype) {
        require(self.dtype == dtype as i32 && self.itemsize as usize == dtype.itemsize());
    }

    /// The number of dimensions; traps unless it is in `0..=MAX_DIMS`.
    #[inline]
    pub fn ndim(&self) -> usize {
        require(self.ndim >= 0 && self.ndim as usize <= MAX_DIMS);
        self.ndim as usize
    }

    /// Traps unless the tensor has `ndim` dimensions.
    #[inline]
    pub fn require_ndim(&self, ndim: usize) {
        require(self.ndim() == ndim);
    }

    /// The number of elements; traps unless it is in `0..2^32`.
    #[inline]
    pub fn numel(&self) -> usize {
        require(self.numel >= 0 && (self.numel as u64) < LIMIT);
        self.numel as usize
    }

    /// The sizes of the `ndim` dimensions.
    #[inline]
    pub fn sizes(&self) -> &[i64] {
        let ndim = self.ndim();
        // SAFETY: `ndim() <= MAX_DIMS`, the array's length.
        unsafe { self.sizes.get_unchecked(..ndim) }
    }

    /// The strides of the `ndim` dimensions, in elements.
    #[inline]
    pub fn strides(&self) -> &[i64] {
        let ndim = self.ndim();
        // SAFETY: `ndim() <= MAX_DIMS`, the array's length.
        unsafe { self.strides.get_unchecked(..ndim) }
    }

    /// Whether the tensor is contiguous (row-major): element `i` is at
    /// `data + i * itemsize`.
    #[inline]
    pub fn is_contiguous(&self) -> bool {
        self.flags & CONTIGUOUS != 0
    }

    /// Traps unless `self` and `other` have the same sizes (strides may
    /// differ).
    #[inline]
    pub fn require_same_shape(&self, other: &Tensor) {
        let ndim = self.ndim();
        require(other.ndim == self.ndim);
        for d in 0..MAX_DIMS {
            require(d >= ndim || self.sizes[d] == other.sizes[d]);
        }
    }

    /// The pointer to the first element, after [`Tensor::check`] (so it traps
    /// on an invalid descriptor). Dangling (possibly null) when `numel` is 0.
    ///
    /// Element `i` along a row is at `data_ptr().wrapping_offset(offset)`
    /// with an offset from [`Tensor::offset`] or [`rows`]. `T` should be the
    /// element type; read and write with `read_unaligned` /
    /// `write_unaligned` unless `data` is known to be aligned for `T`.
    #[inline]
    pub fn data_ptr<T>(&self) -> *mut T {
        self.check();
        self.data as usize as *mut T
    }

    /// The elements of a contiguous tensor as a slice.
    ///
    /// Traps unless [`Tensor::check`] passes, the tensor is contiguous,
    /// `itemsize == size_of::<T>()` and `data` is aligned for `T` (an empty
    /// tensor yields an empty slice).
    ///
    /// # Safety
    /// Every bit pattern of the elements must be a valid `T` (true for the
    /// integer and float types), and nothing may write the elements while the
    /// slice lives (an output that is the same tensor, say).
    #[inline]
    pub unsafe fn as_slice<T>(&self) -> &[T] {
        let n = self.contiguous_len::<T>();
        slice::<T>(self.data as u32, n)
    }

    /// The elements of a contiguous tensor as a mutable slice. Traps like
    /// [`Tensor::as_slice`].
    ///
    /// # Safety
    /// As for [`Tensor::as_slice`], and nothing else may read or write the
    /// elements while the slice lives: no other slice or pointer over the
    /// same tensor, nor over an input that shares its storage.
    #[inline]
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn as_mut_slice<T>(&self) -> &mut [T] {
        let n = self.contiguous_len::<T>();
        slice_mut::<T>(self.data as u32, n)
    }

    /// `numel` as a `u32`, after the checks of [`Tensor::as_slice`] other
    /// than alignment (which [`slice`] does).
    #[inline]
    fn contiguous_len<T>(&self) -> u32 {
        self.check();
        require(self.is_contiguous() && self.itemsize as usize == mem::size_of::<T>());
        // `check` bounds `numel` and `data` below 2^32.
        self.numel as u32
    }

    /// The element offset (from `data`, in elements) of the element with
    /// row-major index `linear`, for any strides. Traps unless
    /// `linear < numel`. It divides once per dimension: for random access,
    /// not for inner loops (use [`rows`] there).
    #[inline]
    pub fn offset(&self, linear: usize) -> isize {
        require((linear as u64) < self.numel() as u64);
        let ndim = self.ndim();
        let mut rest = linear as u64;
        let mut offset = 0i64;
        for d in (0..ndim).rev() {
            let d = d % MAX_DIMS; // a no-op that spares a bounds check
            let size = self.sizes[d] as u64;
            if size == 0 {
                trap() // unreachable after the bound on `linear`; spares a panic path
            }
            offset = offset.wrapping_add(((rest % size) as i64).wrapping_mul(self.strides[d]));
            rest /= size;
        }
        offset as isize
    }

    /// The element offset of the element at `index` (one entry per
    /// dimension; traps unless `index.len() == ndim`). Indices are not
    /// bounds-checked.
    #[inline]
    pub fn offset_at(&self, index: &[usize]) -> isize {
        let strides = self.strides();
        require(index.len() == strides.len());
        let mut offset = 0i64;
        for (i, s) in index.iter().zip(strides) {
            offset = offset.wrapping_add((*i as i64).wrapping_mul(*s));
        }
        offset as isize
    }

    /// The rows of this tensor alone: `rows([self])`.
    #[inline]
    pub fn rows(&self) -> Rows<1> {
        rows([self])
    }
}

/// The most tensors one [`rows`] walk takes (as `OPENREG_ITER_MAX_OPERANDS`
/// in C).
pub const MAX_OPERANDS: usize = 4;

/// One innermost row of a [`rows`] walk over `N` tensors.
#[derive(Clone, Copy)]
pub struct Row<const N: usize> {
    /// Element offset of the row's first element in each tensor.
    pub offsets: [isize; N],
    /// Element stride along the row in each tensor.
    pub strides: [isize; N],
    /// Elements in the row (the same for every row of a walk; at least 1).
    pub len: usize,
}

/// Walks `N` tensors of one shape together, one innermost row at a time: the
/// iterator [`rows`] returns. Each row is a [`Row`].
pub struct Rows<const N: usize> {
    left: usize,
    started: bool,
    len: usize,
    inner: [isize; N],
    offsets: [isize; N],
    /// Number of outer (odometer) dimensions, innermost first below.
    outer: usize,
    index: [usize; MAX_DIMS],
    sizes: [usize; MAX_DIMS],
    strides: [[isize; MAX_DIMS]; N],
}

/// Walks the tensors `tensors` (1 to [`MAX_OPERANDS`], all of one shape) one
/// innermost row at a time, in row-major order, the way the C SDK's
/// `openreg_iter` does.
///
/// Traps unless each tensor passes [`Tensor::check`] and all have the same
/// sizes. Size-1 dimensions are dropped and neighbouring dimensions that are
/// contiguous with each other in every tensor are merged, so contiguous
/// tensors come out as one row of `numel` elements with stride 1. A tensor
/// with `numel` 0 has no rows; a 0-d tensor one row of one element.
///
/// ```ignore
/// for row in sdk::rows([x, out]) {
///     let [xo, oo] = row.offsets;
///     let [xs, os] = row.strides;
///     for i in 0..row.len as isize { /* x at xo + i * xs, out at oo + i * os */ }
/// }
/// ```
pub fn rows<const N: usize>(tensors: [&Tensor; N]) -> Rows<N> {
    require(N >= 1 && N <= MAX_OPERANDS);
    let first = tensors[0];
    for t in tensors {
        t.check();
        first.require_same_shape(t);
    }
    // An empty walk skips the shape (whose products `check` does not bound).
    let ndim = if first.numel == 0 { 0 } else { first.ndim as usize };
    // Kept dimensions, innermost first: sizes[j] and strides[k][j].
    let mut sizes = [0i64; MAX_DIMS];
    let mut strides = [[0i64; MAX_DIMS]; N];
    let mut count = 0usize;
    for d in (0..ndim).rev() {
        let d = d % MAX_DIMS; // a no-op that spares a bounds check
        if first.sizes[d] == 1 {
            continue;
        }
        let size = first.sizes[d];
        if count > 0 {
            let j = (count - 1) % MAX_DIMS; // `% MAX_DIMS`: no bounds check
            let mut merge = true;
            for k in 0..N {
                // Exact for a nonempty tensor: `check` bounds
                // (size - 1) * stride below 2^32 for merged dimensions too.
                merge &= tensors[k].strides[d] == strides[k][j].wrapping_mul(sizes[j]);
            }
            if merge {
                sizes[j] *= size;
                continue;
            }
        }
        let j = count % MAX_DIMS;
        sizes[j] = size;
        for k in 0..N {
            strides[k][j] = tensors[k].strides[d];
        }
        count += 1;
    }
    if count == 0 {
        // 0-d, or every size is 1: one element (strides stay 0).
        sizes[0] = 1;
        count = 1;
    }
    let mut left = if first.numel == 0 { 0 } else { 1 };
    let mut outer_sizes = [0usize; MAX_DIMS];
    let mut outer_strides = [[0isize; MAX_DIMS]; N];
    for j in 1..MAX_DIMS {
        if j >= count {
            break;
        }
        left *= sizes[j] as usize;
        outer_sizes[j - 1] = sizes[j] as usize;
        for k in 0..N {
            outer_strides[k][j - 1] = strides[k][j] as isize;
        }
    }
    let mut inner = [0isize; N];
    for k in 0..N {
        inner[k] = strides[k][0] as isize;
    }
    Rows {
        left,
        started: false,
        len: sizes[0] as usize,
        inner,
        offsets: [0; N],
        outer: count - 1,
        index: [0; MAX_DIMS],
        sizes: outer_sizes,
        strides: outer_strides,
    }
}

impl<const N: usize> Iterator for Rows<N> {
    type Item = Row<N>;

    /// The next row: amortized O(1), no division, a few additions per row.
    #[inline]
    fn next(&mut self) -> Option<Row<N>> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        if self.started {
            for j in 0..MAX_DIMS {
                if j >= self.outer {
                    break;
                }
                self.index[j] += 1;
                if self.index[j] < self.sizes[j] {
                    for k in 0..N {
                        self.offsets[k] = self.offsets[k].wrapping_add(self.strides[k][j]);
                    }
                    break;
                }
                self.index[j] = 0;
                for k in 0..N {
                    let back = self.strides[k][j].wrapping_mul((self.sizes[j] - 1) as isize);
                    self.offsets[k] = self.offsets[k].wrapping_sub(back);
                }
            }
        }
        self.started = true;
        Some(Row { offsets: self.offsets, strides: self.inner, len: self.len })
    }
}
