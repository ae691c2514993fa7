//! Conversions from Python arguments to owned or borrowed Rust data. Arrays
//! of the right dtype and layout are borrowed without a copy; anything else
//! numpy can convert safely is converted once, and the rest is rejected with
//! a message that names the argument.

use numpy::{
    PyArray1, PyArray2, PyArrayMethods, PyReadonlyArray1, PyReadonlyArray2, PyUntypedArrayMethods,
};
use pyo3::prelude::*;

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
