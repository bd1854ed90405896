//! The layout of a device's linear memory.
//!
//! ```text
//! 0 ........ 1 KiB ................. 15 MiB ...... +64 KiB ......... 16 MiB .............. capacity
//! | null     | static area: kernel    | launch     | kernel stack    | heap: the device        |
//! | guard    | modules' data segments | parameters | (grows down)    | allocator's segments    |
//! ```
//!
//! - Offset 0 is never handed out, so a device address of offset 0 is never valid data. The
//!   first [`NULL_GUARD`] bytes stay zero: a kernel that writes there is reported (`device.rs`).
//! - Kernel modules keep their static data in the static area, each in its own range
//!   (the loader checks that ranges do not overlap, see `module.rs`).
//! - The kernel stack area is split evenly among the device's workers ([`stack_top`]): worker 0
//!   (the executor) has the top slice, worker 1 the one below, and so on. All modules share a
//!   worker's slice: a worker runs one kernel at a time, and its stack is empty between
//!   launches. The loader points each instance's `__stack_pointer` at its worker's top. A wasm
//!   shadow stack has no guard page: a kernel that overflows its slice writes into the next
//!   worker's slice or the parameter and static areas below, never into the heap.
//! - The parameter area holds the parameter block of the kernel that is running (the WIT
//!   `kernel-arg::params`): the executor writes it just before the call, and one kernel runs at
//!   a time, so one area serves every launch.
//! - The allocator owns `[HEAP_START, capacity)`.

/// Size of a WebAssembly page.
pub const WASM_PAGE: u64 = 64 << 10;
/// First offset a module's static data may use (clang's default `--global-base` is 1024).
pub const STATIC_START: u64 = 1024;
/// The null guard, `[0, NULL_GUARD)`: no data lives there, and kernels may not write it.
pub const NULL_GUARD: u64 = STATIC_START;
/// End of the static area.
pub const STATIC_END: u64 = 15 << 20;
/// Start of the launch parameter area, `[PARAMS_START, PARAMS_START + PARAMS_MAX)`.
pub const PARAMS_START: u64 = STATIC_END;
/// The size of the parameter area: the largest parameter block of a launch.
pub const PARAMS_MAX: u64 = 64 << 10;
/// Top of the kernel stack area; it occupies `[STACK_BOTTOM, STACK_TOP)`.
pub const STACK_TOP: u64 = 16 << 20;
/// Bottom of the kernel stack area (960 KiB).
pub const STACK_BOTTOM: u64 = PARAMS_START + PARAMS_MAX;
/// First offset of the allocator's heap.
pub const HEAP_START: u64 = STACK_TOP;
/// The smallest device memory that leaves room for a heap.
pub const MIN_CAPACITY: u64 = 32 << 20;

/// The top of worker `worker`'s slice of the kernel stack when a device has `workers` workers:
/// the area split evenly, in 16-byte units (60 KiB each with 16 workers).
pub fn stack_top(worker: u32, workers: u32) -> u64 {
    let slice = (STACK_TOP - STACK_BOTTOM) / u64::from(workers.max(1)) / 16 * 16;
    STACK_TOP - u64::from(worker) * slice
}
