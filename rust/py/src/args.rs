//! The int arguments of the bindings, read with `#[pyo3(from_py_with = ...)]`:
//! an int out of a parameter's range is memlane's `InvalidArgumentError`
//! naming the parameter, never PyO3's raw `OverflowError` ("Python int too
//! large to convert to C long", "can't convert negative int to unsigned"). A
//! value that is no int at all stays the `TypeError` PyO3 raises for it.

use pyo3::exceptions::PyOverflowError;
use pyo3::prelude::*;

use crate::errors::invalid;

/// The largest dimension an index takes (`memlane_core::hnsw::Hnsw::new` refuses more).
const MAX_DIM: i128 = 65_536;

/// `obj` as an int from `low` to `high`, or an `InvalidArgumentError` naming
/// `name`. Ints of any size are compared, not converted first.
pub(crate) fn ranged(obj: &Bound<'_, PyAny>, name: &str, low: i128, high: i128) -> PyResult<i128> {
    let py = obj.py();
    let value = match obj.extract::<i128>() {
        Ok(v) => Some(v),
        Err(e) if e.is_instance_of::<PyOverflowError>(py) => None,
        Err(e) => return Err(e),
    };
    let below = match value {
        Some(v) if (low..=high).contains(&v) => return Ok(v),
        Some(v) => v < low,
        // Beyond 128 bits: only its sign matters.
        None => obj.lt(0)?,
    };
    let shown = obj
        .repr()
        .map_or_else(|_| "?".to_owned(), |r| r.to_string());
    Err(invalid(
        py,
        match (below, low) {
            (true, 0) => format!("{name} must not be negative, got {shown}"),
            (true, _) => format!("{name} must be at least {low}, got {shown}"),
            (false, _) => format!("{name} must be at most {high}, got {shown}"),
        },
    ))
}

/// The most items a list read from Python reserves room for before reading them.
const RESERVE: usize = 4096;

/// Room to reserve for the items of `obj` before reading them: its `__len__` is a hint,
/// never trusted for the allocation (a `range(-1, 2**40)` whose first item is refused
/// must allocate nothing large, and a `__len__` of `2**62` is no capacity overflow).
pub(crate) fn reserved(obj: &Bound<'_, PyAny>) -> usize {
    obj.len().unwrap_or(0).min(RESERVE)
}

/// `obj` (any iterable of ints) as `T`s, each from 0 to `T`'s largest, or an
/// `InvalidArgumentError` naming `name` and the position of the first that is not
/// (room reserved as [`reserved`] says).
pub(crate) fn unsigned_ints<T: Unsigned>(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<Vec<T>> {
    let mut out = Vec::with_capacity(reserved(obj));
    for (i, item) in obj.try_iter()?.enumerate() {
        let item = item?;
        // The name with its position is written out only for an int out of range.
        let value = match T::read(&item) {
            Some(v) => v,
            None => T::narrow(ranged(&item, &format!("{name}[{i}]"), 0, T::HIGH)?),
        };
        out.push(value);
    }
    Ok(out)
}

/// An unsigned int type [`unsigned_ints`] reads.
pub(crate) trait Unsigned: Sized {
    const HIGH: i128;
    /// `obj` as `Self`, if it is an int in range.
    fn read(obj: &Bound<'_, PyAny>) -> Option<Self>;
    /// `v`, known to be from 0 to `HIGH`.
    fn narrow(v: i128) -> Self;
}

impl Unsigned for u32 {
    const HIGH: i128 = u32::MAX as i128;
    fn read(obj: &Bound<'_, PyAny>) -> Option<Self> {
        obj.extract().ok()
    }
    fn narrow(v: i128) -> Self {
        v as u32
    }
}

impl Unsigned for u64 {
    const HIGH: i128 = u64::MAX as i128;
    fn read(obj: &Bound<'_, PyAny>) -> Option<Self> {
        obj.extract().ok()
    }
    fn narrow(v: i128) -> Self {
        v as u64
    }
}

/// `obj` as a `usize` of at least `low` (see [`ranged`]).
pub(crate) fn size(obj: &Bound<'_, PyAny>, name: &str, low: usize) -> PyResult<usize> {
    // usize and u64 are the same width on every platform memlane builds for.
    ranged(obj, name, low as i128, usize::MAX as i128).map(|v| v as usize)
}

/// `obj` as a `u64` (see [`ranged`]).
pub(crate) fn unsigned(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<u64> {
    ranged(obj, name, 0, u64::MAX.into()).map(|v| v as u64)
}

/// Declares, for each parameter, the function `from_py_with` names: the
/// parameter's value checked, with its name in the message.
macro_rules! int_args {
    ($($f:ident: $t:ty = $read:expr;)*) => {$(
        pub(crate) fn $f(obj: &Bound<'_, PyAny>) -> PyResult<$t> {
            #[allow(clippy::redundant_closure_call)]
            ($read)(obj)
        }
    )*};
}

/// `None`, or the value `read` checks.
fn optional<T>(
    obj: &Bound<'_, PyAny>,
    read: impl FnOnce(&Bound<'_, PyAny>) -> PyResult<T>,
) -> PyResult<Option<T>> {
    if obj.is_none() {
        Ok(None)
    } else {
        read(obj).map(Some)
    }
}

int_args! {
    // Sizes the core checks further (dim and m: their ranges; the others at least 1).
    dim: usize = |o| size(o, "dim", 0);
    // The dimension of stored vectors: none is above the largest an index takes.
    blob_dim: usize = |o| ranged(o, "dim", 0, MAX_DIM).map(|v| v as usize);
    opt_dim: Option<usize> = |o| optional(o, |o| size(o, "dim", 0));
    m: usize = |o| size(o, "m", 0);
    ef_construction: usize = |o| size(o, "ef_construction", 0);
    ef: usize = |o| size(o, "ef", 1);
    opt_ef: Option<usize> = |o| optional(o, |o| size(o, "ef", 1));
    seed: u64 = |o| unsigned(o, "seed");
    k: usize = |o| size(o, "k", 1);
    opt_max_length: Option<usize> = |o| optional(o, |o| size(o, "max_length", 0));
    max: usize = |o| size(o, "max", 0);
    budget: usize = |o| size(o, "budget", 0);
    offset: usize = |o| size(o, "offset", 0);
    limit: usize = |o| size(o, "limit", 0);
    id: u64 = |o| unsigned(o, "id");
    seq: u64 = |o| unsigned(o, "seq");
    end: u64 = |o| unsigned(o, "end");
    at: u64 = |o| unsigned(o, "at");
    groups: Vec<u32> = |o| unsigned_ints(o, "groups");
    rowids: Vec<u64> = |o| unsigned_ints(o, "rowids");
}
