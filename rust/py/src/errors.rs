//! Maps core errors to the exception classes of `memlane.errors`. The classes
//! live in Python so that each can subclass both `MemlaneError` and the
//! matching builtin (`ValueError`, `KeyError`, ...), which PyO3 cannot declare.

use memlane_core::Error;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

/// An instance of the `memlane.errors` class named `class`.
pub fn raise(py: Python<'_>, class: &str, msg: String) -> PyErr {
    match py.import("memlane.errors").and_then(|m| m.getattr(class)) {
        Ok(cls) => match cls.call1((msg,)) {
            Ok(exc) => PyErr::from_value(exc),
            Err(e) => e,
        },
        Err(e) => e,
    }
}

pub fn to_py(py: Python<'_>, err: Error) -> PyErr {
    let msg = err.to_string();
    let class = match err {
        Error::DimensionMismatch { .. } => "DimensionMismatchError",
        Error::InvalidArgument(_) => "InvalidArgumentError",
        Error::UnknownId(_) => "UnknownIdError",
        Error::Corrupt { .. } | Error::DamagedVector(_) => "CorruptFileError",
        Error::NotFound(_) => "NotFoundError",
        Error::Io { .. } => "StorageError",
    };
    raise(py, class, msg)
}

pub fn invalid(py: Python<'_>, msg: impl Into<String>) -> PyErr {
    raise(py, "InvalidArgumentError", msg.into())
}

/// Runs `f` without the GIL and turns both its errors and any panic into
/// Python exceptions: memlane lives inside other people's processes, and a bug
/// must surface as an exception rather than a crash.
pub fn detach<T, F>(py: Python<'_>, f: F) -> PyResult<T>
where
    T: Send,
    F: FnOnce() -> memlane_core::Result<T> + Send,
{
    let out = py.detach(|| std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)));
    match out {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(to_py(py, e)),
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            let err = raise(
                py,
                "InternalError",
                format!("internal error in memlane: {what}"),
            );
            if err.is_instance_of::<PyRuntimeError>(py) {
                Err(err)
            } else {
                Err(PyRuntimeError::new_err(what))
            }
        }
    }
}
