//! The one mapping from runtime errors to Python exceptions.
//!
//! | runtime error | Python |
//! |---|---|
//! | out of memory | `torch.OutOfMemoryError` (with the numbers) |
//! | bad device index | `torch.AcceleratorError` (a `RuntimeError`, as CUDA's "invalid device ordinal") |
//! | bad argument, bad event/stream, a kernel module that breaks the contract or overlaps another | `ValueError` |
//! | a wait interrupted by Ctrl-C | `KeyboardInterrupt` (the pending signal's own exception) |
//! | anything else (kernel trap, watchdog, fork child, ...) | `RuntimeError` |
//!
//! Errors raised inside the C++ shim reach Python through torch's own
//! translation of c10 errors (see `csrc/OpenRegBridge.h`, `OPENREG_CHECK`).

use openreg_host::abi::ErrorCode;
use openreg_host::Error;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

/// A runtime or shim error on its way to Python.
pub enum OpenRegError {
    Runtime(Error),
    Shim(cxx::Exception),
    Python(PyErr),
}

impl From<PyErr> for OpenRegError {
    fn from(e: PyErr) -> Self {
        OpenRegError::Python(e)
    }
}

impl From<Error> for OpenRegError {
    fn from(e: Error) -> Self {
        OpenRegError::Runtime(e)
    }
}

impl From<cxx::Exception> for OpenRegError {
    fn from(e: cxx::Exception) -> Self {
        OpenRegError::Shim(e)
    }
}

/// An exception of one of torch's own types (`torch.<name>`, a RuntimeError
/// subclass); a plain RuntimeError if torch does not have it.
fn torch_error(name: &str, message: String) -> PyErr {
    Python::attach(|py| match py.import("torch").and_then(|t| t.getattr(name)) {
        Ok(ty) => match ty.cast_into() {
            Ok(ty) => PyErr::from_type(ty, message),
            Err(_) => PyRuntimeError::new_err(message),
        },
        Err(_) => PyRuntimeError::new_err(message),
    })
}

impl From<OpenRegError> for PyErr {
    fn from(e: OpenRegError) -> PyErr {
        match e {
            OpenRegError::Runtime(e) => {
                let message = e.to_string();
                match e.code() {
                    ErrorCode::OutOfMemory => torch_error("OutOfMemoryError", message),
                    ErrorCode::InvalidDevice => torch_error("AcceleratorError", message),
                    ErrorCode::InvalidArgument
                    | ErrorCode::InvalidEvent
                    | ErrorCode::InvalidStream
                    | ErrorCode::InvalidModule
                    | ErrorCode::ModuleConflict
                    | ErrorCode::Config => PyValueError::new_err(message),
                    // The interrupt check took a SIGINT: raise it again and run
                    // its handler now, so the caller gets KeyboardInterrupt (or
                    // whatever the program's SIGINT handler raises).
                    ErrorCode::Interrupted => Python::attach(|py| {
                        // SAFETY: attached; this only sets CPython's SIGINT flag.
                        unsafe { pyo3::ffi::PyErr_SetInterrupt() };
                        match py.check_signals() {
                            Err(signal) => signal,
                            Ok(()) => PyRuntimeError::new_err(message),
                        }
                    }),
                    _ => PyRuntimeError::new_err(message),
                }
            }
            OpenRegError::Shim(e) => PyRuntimeError::new_err(e.what().to_string()),
            OpenRegError::Python(e) => e,
        }
    }
}

/// The result type of the Python-facing functions.
pub type PyResultOr<T> = Result<T, OpenRegError>;
