//! The runtime's error type: one enum with the numbers a user needs.
//!
//! Every public call returns [`Result`]; nothing in the runtime panics across
//! its API. [`Error::code`] gives the ABI's machine-readable category
//! ([`crate::abi::ErrorCode`], from `wit/types.wit`), which the bindings map
//! to their own error types in exactly one place each.

use std::fmt;

use crate::abi::{ErrorCode, TrapKind};

/// A runtime error.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
#[allow(missing_docs)] // fields are named for what they hold; each variant says what it means
pub enum Error {
    /// A device index at or above the device count.
    #[error("invalid device index {index}: there are {count} openreg devices (openreg:0 to openreg:{})", count.saturating_sub(1))]
    InvalidDevice { index: i64, count: u32 },

    /// The device allocator cannot satisfy a request.
    #[error(
        "out of memory on openreg:{device}: tried to allocate {}; {} of {} reserved ({} allocated, {} free)",
        Bytes(*requested), Bytes(*reserved), Bytes(*total), Bytes(*allocated), Bytes(total - reserved)
    )]
    OutOfMemory { device: u32, requested: u64, allocated: u64, reserved: u64, total: u64 },

    /// Pinned (page-locked) host memory cannot be allocated.
    #[error("out of memory: tried to allocate {} of pinned host memory", Bytes(*requested))]
    HostOutOfMemory { requested: u64 },

    /// A pointer that is null, not a device address, or not an allocation.
    #[error("invalid device pointer {ptr:#x}: {reason}")]
    InvalidPointer { ptr: u64, reason: &'static str },

    /// A byte range outside the part of a device's memory an operation may touch.
    #[error(
        "{len} bytes at offset {offset:#x} of openreg:{device} lie outside [{start:#x}, {end:#x}), \
         the part of its memory that holds data"
    )]
    OutOfBounds { device: u32, offset: u64, len: u64, start: u64, end: u64 },

    /// An object of one device used on another.
    #[error("{what} is on openreg:{actual}, but the operation runs on openreg:{expected}")]
    WrongDevice { what: String, expected: u32, actual: u32 },

    /// A wasm module that breaks the kernel-module contract (`wit/kernels.wit`).
    #[error("invalid kernel module `{module}`: {reason}")]
    InvalidModule { module: String, reason: String },

    /// Two modules whose static data would overlap on one device.
    #[error(
        "kernel module `{module}` conflicts with `{other}` on openreg:{device}: its static data \
         [{:#x}, {:#x}) overlaps [{:#x}, {:#x}); link it at a free address, e.g. \
         `-Wl,--global-base={free:#x}` (clang) or `-C link-arg=--global-base={free:#x}` (rustc)",
        range.0, range.1, other_range.0, other_range.1
    )]
    ModuleConflict { device: u32, module: String, range: (u64, u64), other: String, other_range: (u64, u64), free: u64 },

    /// No loaded module exports a kernel of that name.
    #[error("no kernel named `{name}` is loaded on openreg:{device}")]
    KernelNotFound { device: u32, name: String },

    /// A malformed argument; the message says which and why.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// A kernel trapped. The device stays usable. `op`: the operator it ran
    /// for, if it was launched for one (`launch-op`).
    #[error("{} trapped on openreg:{device}: {} ({detail})", launch_name(kernel, op), trap.wit_name())]
    KernelTrap { device: u32, kernel: String, op: Option<String>, trap: TrapKind, detail: String },

    /// A kernel ran past the watchdog limit and was stopped.
    #[error(
        "{} on openreg:{device} ran longer than the watchdog limit of {limit_ms} ms and was stopped",
        launch_name(kernel, op)
    )]
    KernelTimeout { device: u32, kernel: String, op: Option<String>, limit_ms: u64 },

    /// A stream id that does not exist on the device.
    #[error("openreg:{device} has no stream {id}")]
    InvalidStream { device: u32, id: u32 },

    /// An event id that does not exist, or an event in the wrong state.
    #[error("event {event}: {reason}")]
    InvalidEvent { event: u64, reason: &'static str },

    /// A capability that is not implemented.
    #[error("not supported: {what}")]
    Unsupported { what: String },

    /// A malformed configuration value.
    #[error("{var}={value:?}: {reason}")]
    Config { var: &'static str, value: String, reason: String },

    /// The device cannot run work (it failed to start, or its executor died).
    #[error("openreg:{device} is unusable: {reason}")]
    DeviceLost { device: u32, reason: String },

    /// A `fork()` child of a process that had started devices: their executor
    /// threads did not survive the fork. The message has CUDA's form.
    #[error(
        "Cannot re-initialize openreg in forked subprocess. To use openreg with multiprocessing, \
         you must use the 'spawn' start method"
    )]
    Forked,

    /// A blocking wait gave up because the waiting thread was interrupted
    /// (Ctrl-C). The work it waited for is still queued, or was cancelled if it
    /// was a blocking copy that had not started.
    #[error("interrupted (Ctrl-C) while waiting for {what} on openreg:{device}; queued work goes on")]
    Interrupted { device: u32, what: &'static str },
}

/// How an error names a launch: the kernel, and the operator it ran for.
fn launch_name(kernel: &str, op: &Option<String>) -> String {
    match op {
        Some(op) => format!("operator `{op}` (kernel `{kernel}`)"),
        None => format!("kernel `{kernel}`"),
    }
}

impl Error {
    /// The ABI category of this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            Error::InvalidDevice { .. } => ErrorCode::InvalidDevice,
            Error::OutOfMemory { .. } | Error::HostOutOfMemory { .. } => ErrorCode::OutOfMemory,
            Error::InvalidPointer { .. } => ErrorCode::InvalidPointer,
            Error::OutOfBounds { .. } => ErrorCode::OutOfBounds,
            Error::WrongDevice { .. } => ErrorCode::WrongDevice,
            Error::InvalidModule { .. } => ErrorCode::InvalidModule,
            Error::ModuleConflict { .. } => ErrorCode::ModuleConflict,
            Error::KernelNotFound { .. } => ErrorCode::KernelNotFound,
            Error::InvalidArgument(_) => ErrorCode::InvalidArgument,
            Error::KernelTrap { .. } => ErrorCode::KernelTrap,
            Error::KernelTimeout { .. } => ErrorCode::KernelTimeout,
            Error::InvalidStream { .. } => ErrorCode::InvalidStream,
            Error::InvalidEvent { .. } => ErrorCode::InvalidEvent,
            Error::Unsupported { .. } => ErrorCode::Unsupported,
            Error::Config { .. } => ErrorCode::Config,
            Error::DeviceLost { .. } => ErrorCode::DeviceLost,
            Error::Forked => ErrorCode::Forked,
            Error::Interrupted { .. } => ErrorCode::Interrupted,
        }
    }
}

/// The runtime's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A byte count shown the way people read it: `64.0 MiB`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bytes(pub u64);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
        if self.0 < 1024 {
            return write!(f, "{} bytes", self.0);
        }
        let mut value = self.0 as f64 / 1024.0;
        let mut unit = 0;
        while value >= 1024.0 && unit + 1 < UNITS.len() {
            value /= 1024.0;
            unit += 1;
        }
        write!(f, "{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_display_uses_binary_units() {
        assert_eq!(Bytes(512).to_string(), "512 bytes");
        assert_eq!(Bytes(64 << 20).to_string(), "64.0 MiB");
        assert_eq!(Bytes((39 << 30) / 10).to_string(), "3.9 GiB");
    }

    #[test]
    fn out_of_memory_message_carries_the_numbers() {
        let e = Error::OutOfMemory {
            device: 1,
            requested: 64 << 20,
            allocated: 3 << 30,
            reserved: (39 << 30) / 10,
            total: 4 << 30,
        };
        assert_eq!(
            e.to_string(),
            "out of memory on openreg:1: tried to allocate 64.0 MiB; 3.9 GiB of 4.0 GiB reserved (3.0 GiB allocated, 102.4 MiB free)"
        );
        assert_eq!(e.code(), ErrorCode::OutOfMemory);
    }
}
