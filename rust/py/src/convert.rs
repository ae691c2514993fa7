//! Conversions from Python arguments to owned or borrowed Rust data. Arrays
//! of the right dtype and layout are borrowed without a copy; anything else
//! numpy can convert safely is converted once, and the rest is rejected with
//! a message that names the argument.

use memlane_core::engine::{JsonMap, JsonNumber, JsonValue as Json, MAX_FILTER_DEPTH};
use numpy::{
    PyArray1, PyArray2, PyArrayMethods, PyReadonlyArray1, PyReadonlyArray2, PyUntypedArrayMethods,
};
use pyo3::prelude::*;
use pyo3::types::{
    PyBool, PyDict, PyFloat, PyFrozenSet, PyInt, PyList, PyMapping, PySet, PyString, PyTuple,
};

use crate::errors::invalid;

fn numpy(py: Python<'_>) -> PyResult<Bound<'_, PyModule>> {
    py.import("numpy")
}

fn dtype_kind(arr: &Bound<'_, PyAny>) -> PyResult<String> {
    arr.getattr("dtype")?.getattr("kind")?.extract()
}

/// Ids as a vector of u64: any integer array-like, or a single int.
pub fn ids(py: Python<'_>, obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<u64>> {
    if let Ok(a) = obj.extract::<PyReadonlyArray1<'_, u64>>() {
        return Ok(a.as_array().to_vec());
    }
    let arr = numpy(py)?
        .call_method1("asarray", (obj,))
        .map_err(|e| invalid(py, format!("{what} must be an array of integers: {e}")))?;
    // numpy gives an empty list the float dtype; it is still a valid (empty) id list.
    if arr.getattr("size")?.extract::<usize>()? == 0 {
        return Ok(Vec::new());
    }
    let kind = dtype_kind(&arr)?;
    if kind != "i" && kind != "u" {
        return Err(invalid(
            py,
            format!("{what} must be integers, got an array of dtype kind {kind:?}"),
        ));
    }
    let arr = arr.call_method1("reshape", (-1,))?;
    if kind == "i"
        && arr
            .call_method0("min")
            .ok()
            .is_some_and(|m| m.lt(0).unwrap_or(false))
    {
        return Err(invalid(py, format!("{what} must be non-negative")));
    }
    let arr = arr.call_method1("astype", ("uint64",))?;
    let a = arr.extract::<PyReadonlyArray1<'_, u64>>()?;
    Ok(a.as_array().to_vec())
}

/// A float32 matrix, borrowed when it already is one and C-contiguous,
/// converted otherwise. A 1-d input is one row.
pub enum Matrix<'py> {
    Rows(PyReadonlyArray2<'py, f32>),
    /// A single vector, kept 1-d: reshaping it would cost a query more than
    /// the search of a small index.
    Row(PyReadonlyArray1<'py, f32>),
}

impl<'py> Matrix<'py> {
    pub fn extract(py: Python<'py>, obj: &Bound<'py, PyAny>, what: &str) -> PyResult<Self> {
        // Cast (not extract) so that a miss costs no exception object: this
        // runs once per query.
        if let Ok(a) = obj.cast::<PyArray2<f32>>() {
            if a.is_c_contiguous() {
                return Ok(Matrix::Rows(a.readonly()));
            }
        } else if let Ok(a) = obj.cast::<PyArray1<f32>>() {
            if a.is_c_contiguous() {
                return Ok(Matrix::Row(a.readonly()));
            }
        }
        let np = numpy(py)?;
        let arr = np
            .call_method1("asarray", (obj,))
            .map_err(|e| invalid(py, format!("{what} must be an array of numbers: {e}")))?;
        let kind = dtype_kind(&arr)?;
        if !matches!(kind.as_str(), "f" | "i" | "u") {
            return Err(invalid(
                py,
                format!("{what} must be real numbers, got an array of dtype kind {kind:?}"),
            ));
        }
        let ndim: usize = arr.getattr("ndim")?.extract()?;
        let arr = match ndim {
            1 => arr.call_method1("reshape", (1, -1))?,
            2 => arr,
            n => {
                return Err(invalid(
                    py,
                    format!("{what} must be 1- or 2-dimensional, got {n} dimensions"),
                ))
            }
        };
        let arr = np.call_method1("ascontiguousarray", (arr, "float32"))?;
        Ok(Matrix::Rows(arr.extract::<PyReadonlyArray2<'py, f32>>()?))
    }

    pub fn rows(&self) -> usize {
        match self {
            Matrix::Rows(a) => a.shape()[0],
            Matrix::Row(_) => 1,
        }
    }

    pub fn cols(&self) -> usize {
        match self {
            Matrix::Rows(a) => a.shape()[1],
            Matrix::Row(a) => a.shape()[0],
        }
    }

    pub fn as_slice(&self) -> &[f32] {
        // Contiguous by construction.
        match self {
            Matrix::Rows(a) => a.as_slice().unwrap_or(&[]),
            Matrix::Row(a) => a.as_slice().unwrap_or(&[]),
        }
    }
}

/// Containers (dicts and lists) nested deeper than this in a filter are
/// refused while converting, before the engine's own depth check on filter
/// objects: a guard against a self-referencing or hostile structure.
const MAX_FILTER_NESTING: usize = 4 * MAX_FILTER_DEPTH;

fn bad_filter(py: Python<'_>, at: &str, msg: impl std::fmt::Display) -> PyErr {
    if at.is_empty() {
        invalid(py, format!("invalid filter: {msg}"))
    } else {
        invalid(py, format!("invalid filter: at {at}: {msg}"))
    }
}

pub(crate) fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map_or_else(|_| "?".into(), |n| n.to_string())
}

/// A filter (a dict of str keys holding dicts, lists, tuples, sets, str,
/// int, float, bool and None) as the JSON value the engine validates. Only
/// the Python-side types are checked here: booleans stay booleans (never
/// numbers), NaN and infinities are refused, and nesting is bounded.
pub fn filter(py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<Json> {
    filter_value(py, obj, "", 0)
}

fn filter_value(py: Python<'_>, obj: &Bound<'_, PyAny>, at: &str, depth: usize) -> PyResult<Json> {
    if obj.is_none() {
        return Ok(Json::Null);
    }
    if let Ok(b) = obj.cast::<PyBool>() {
        return Ok(Json::Bool(b.is_true()));
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(Json::String(filter_str(py, s, at)?));
    }
    if obj.cast::<PyInt>().is_ok() {
        if let Ok(i) = obj.extract::<i64>() {
            return Ok(Json::Number(i.into()));
        }
        if let Ok(u) = obj.extract::<u64>() {
            return Ok(Json::Number(u.into()));
        }
        let x: f64 = obj
            .extract()
            .map_err(|_| bad_filter(py, at, "an integer too large for a float"))?;
        return number(py, x, at);
    }
    if obj.cast::<PyFloat>().is_ok() {
        return number(py, obj.extract::<f64>()?, at);
    }
    if depth >= MAX_FILTER_NESTING {
        return Err(bad_filter(
            py,
            at,
            format!("nested more than {MAX_FILTER_NESTING} dicts and lists deep"),
        ));
    }
    let items = |iter: Bound<'_, pyo3::types::PyIterator>| -> PyResult<Json> {
        let mut out = Vec::new();
        for item in iter {
            out.push(filter_value(py, &item?, at, depth + 1)?);
        }
        Ok(Json::Array(out))
    };
    if obj.cast::<PyList>().is_ok()
        || obj.cast::<PyTuple>().is_ok()
        || obj.cast::<PySet>().is_ok()
        || obj.cast::<PyFrozenSet>().is_ok()
    {
        return items(obj.try_iter()?);
    }
    if obj.cast::<PyDict>().is_ok() || obj.cast::<PyMapping>().is_ok() {
        let mapping = obj.cast::<PyMapping>()?;
        let mut out = JsonMap::new();
        for pair in mapping.items()?.iter() {
            let (k, v): (Bound<'_, PyAny>, Bound<'_, PyAny>) = pair.extract()?;
            let Ok(key) = k.cast::<PyString>() else {
                return Err(bad_filter(
                    py,
                    at,
                    format!("keys must be str, got {} {}", type_name(&k), k.repr()?),
                ));
            };
            let key = filter_str(py, key, at)?;
            let here = if at.is_empty() {
                format!("{key:?}")
            } else {
                format!("{at} {key}")
            };
            let value = filter_value(py, &v, &here, depth + 1)?;
            out.insert(key, value);
        }
        return Ok(Json::Object(out));
    }
    Err(bad_filter(
        py,
        at,
        format!(
            "a filter holds str, int, float, bool, None, lists and dicts, got {}",
            type_name(obj)
        ),
    ))
}

/// A str of a filter as UTF-8: a lone surrogate has no UTF-8 form, so it is
/// refused as bad input rather than raised as Python's `UnicodeEncodeError`.
fn filter_str(py: Python<'_>, s: &Bound<'_, PyString>, at: &str) -> PyResult<String> {
    s.to_str().map(str::to_owned).map_err(|_| {
        bad_filter(
            py,
            at,
            format!(
                "{} holds a lone surrogate, which is not valid Unicode",
                s.repr().map_or_else(|_| "a str".into(), |r| r.to_string())
            ),
        )
    })
}

fn number(py: Python<'_>, x: f64, at: &str) -> PyResult<Json> {
    JsonNumber::from_f64(x)
        .map(Json::Number)
        .ok_or_else(|| bad_filter(py, at, format!("{x} is not a finite number")))
}
