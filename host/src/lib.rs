//! The torch_openreg device runtime: virtual accelerator devices that are
//! WebAssembly sandboxes. This crate is the `libcudart` of those devices; it
//! knows nothing of torch or C++.
//!
//! A [`Runtime`] has `N` devices (`openreg:0` ... `openreg:N-1`, started on
//! first use). Each device is one wasmtime store with one linear memory, and
//! that memory *is* the device memory. Its API is the device ABI in `wit/`:
//! the traits of [`abi`], implemented by [`Runtime`].
//!
//! ```no_run
//! use openreg_host::abi::*;
//! use openreg_host::Runtime;
//!
//! let rt = Runtime::from_env()?;
//! let stream = rt.default_stream(0)?;
//! let n = 1024u64;
//! let (a, out) = (rt.allocate(0, n * 4, stream)?, rt.allocate(0, n * 4, stream)?);
//! let ones: Vec<u8> = (0..n).flat_map(|_| 1f32.to_le_bytes()).collect();
//! rt.copy_to_device(stream, a, &ones)?;
//! let add = rt.find_kernel(0, "add_f32")?;
//! rt.launch(stream, add, &[KernelArg::Ptr(out), KernelArg::Ptr(a), KernelArg::Ptr(a), KernelArg::I32(n as i32)])?;
//! let bytes = rt.copy_to_host(stream, out, n * 4)?; // waits for the kernel
//! assert_eq!(f32::from_le_bytes(bytes[..4].try_into().unwrap()), 2.0);
//! # Ok::<(), openreg_host::Error>(())
//! ```
//!
//! # Device addresses
//!
//! This is the invariant the whole backend rests on; other docs link here.
//!
//! - **What a pointer is.** The pointer the runtime hands out for device data
//!   (and PyTorch stores in a tensor's `DataPtr`) is a *device address*:
//!   `base + device * span + offset`, where `offset` is the byte offset in that
//!   device's linear memory. `base` is the start of a host address range the
//!   runtime reserves at start with no access rights and no backing memory
//!   (`address_space.rs`). [`abi::DevicesApi::device_of`] maps an address back
//!   to its device. 0 is the null pointer.
//! - **Why the host never dereferences it.** Nothing is ever mapped in that
//!   range, so host code that reads or writes through a device address faults at
//!   once, as it would on a real accelerator. The runtime itself reaches device
//!   bytes only through its copy and launch paths, which translate an address to
//!   an offset, check it against the device memory's bounds and the device it
//!   belongs to, and then touch memory through `memory_view.rs` (host side) or
//!   hand the offset to a kernel (wasm side).
//! - **Why the memory never moves.** Each device memory is created at its full
//!   size inside a wasmtime reservation that covers it (`memory_reservation` at
//!   least the capacity, `memory_may_move(false)`); pages are committed lazily
//!   by the OS, so a device costs address space, not RAM. Offsets are therefore
//!   stable for the life of the device, and so is the host view of the memory.
//! - **Isolation.** A kernel's instance imports only its own device's memory,
//!   and pointer arguments must belong to the launching device, so a kernel on
//!   one device cannot reach another device's memory or the host's; an access
//!   past the end of its memory traps (see `layout.rs` for the memory layout).
//!
//! # Execution
//!
//! Every device has an executor thread that drains its streams (`device.rs`).
//! Calls that enqueue (launches, async copies, event records and waits) return
//! at once; blocking copies and synchronize calls wait. An error raised by
//! queued work (a kernel trap, a watchdog timeout) is kept on its stream and
//! returned by the next synchronizing call on that stream or device, as CUDA
//! reports asynchronous errors; the device stays usable.

#![warn(missing_docs)]

pub mod abi;
mod activity;
mod address_space;
mod allocator;
mod api;
pub mod config;
mod device;
mod error;
mod event;
pub mod layout;
mod memory_view;
mod module;
mod runtime;

/// The module id of the built-in engine (`openreg.engine`) on every device:
/// the first module a device loads.
pub const ENGINE_MODULE: abi::ModuleId = 0;

pub use config::Config;
pub use device::{set_interrupt_check, INTERRUPT_POLL};
pub use error::{Bytes, Error, Result};
pub use module::{MAX_LOOP_NESTING, MAX_MODULE_BYTES, MAX_NESTING};
pub use runtime::{in_bad_fork, Runtime};
