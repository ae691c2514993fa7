//! Conversions from Python arguments to owned or borrowed Rust data. Arrays
//! of the right dtype and layout are borrowed without a copy; anything else
//! numpy can convert safely is converted once, and the rest is rejected with
//! a message that names the argument.

use memlane_core::engine::filter_syntax::{Read, Shape, Source, Unread};
use memlane_core::engine::ParsedFilter;
use numpy::{
    PyArray1, PyArray2, PyArrayMethods, PyReadonlyArray1, PyReadonlyArray2, PyUntypedArrayMethods,
};
use pyo3::exceptions::{PyOverflowError, PyTypeError};
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedStr;
use pyo3::types::iter::BoundListIterator;
use pyo3::types::{
    PyBool, PyDict, PyFloat, PyFrozenSet, PyInt, PyIterator, PyList, PyMapping, PySet, PyString,
    PyTuple,
};

use crate::errors::{invalid, to_py};

fn numpy(py: Python<'_>) -> PyResult<Bound<'_, PyModule>> {
    py.import("numpy")
}

fn dtype_kind(arr: &Bound<'_, PyAny>) -> PyResult<String> {
    arr.getattr("dtype")?.getattr("kind")?.extract()
}

/// Ids as a vector of u64: any integer array-like, or a single int.
pub fn ids(py: Python<'_>, obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<u64>> {
    // Read in place only where contiguous and aligned: numpy's strides need
    // not be whole elements. Any other layout is copied by `astype` below.
    if let Ok(a) = obj.extract::<PyReadonlyArray1<'_, u64>>() {
        if let Ok(ids) = a.as_slice() {
            return Ok(ids.to_vec());
        }
    }
    // A list of ids (a search's hits) is read without numpy; anything else it
    // holds, or a subclass's own iteration, is left to numpy below, which words
    // the error.
    if let Ok(list) = obj.cast_exact::<PyList>() {
        let ints: Option<Vec<u64>> = list
            .iter()
            .map(|v| {
                v.is_exact_instance_of::<PyInt>()
                    .then(|| v.extract::<u64>().ok())
                    .flatten()
            })
            .collect();
        if let Some(ids) = ints {
            return Ok(ids);
        }
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
        // Borrowed only where its memory is a slice: C order, and aligned.
        if let Ok(a) = obj.cast::<PyArray2<f32>>() {
            let a = a.readonly();
            if a.is_c_contiguous() && a.as_slice().is_ok() {
                return Ok(Matrix::Rows(a));
            }
        } else if let Ok(a) = obj.cast::<PyArray1<f32>>() {
            let a = a.readonly();
            if a.as_slice().is_ok() {
                return Ok(Matrix::Row(a));
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
        // C order and aligned, copied only where it is not.
        let arr = np.call_method1("require", (arr, "float32", ("C", "A")))?;
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

fn refused<T>(msg: String) -> Read<T, Unreadable> {
    Err(Unread::Refused(msg))
}

fn raised(e: PyErr) -> Unread<Unreadable> {
    Unread::Failed(Unreadable::Raised(e))
}

pub(crate) fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map_or_else(|_| "?".into(), |n| n.to_string())
}

/// A filter (a dict of str keys holding dicts, lists, tuples, sets, str, int,
/// float, bool and None), parsed and checked by the core as it reads the
/// objects.
pub fn filter(py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<ParsedFilter> {
    ParsedFilter::read(FilterValue(obj.clone())).map_err(|e| match e {
        Unreadable::Invalid(e) => to_py(py, e),
        Unreadable::Raised(e) => e,
    })
}

/// Why a filter could not be read: the core refused it, or Python raised.
enum Unreadable {
    Invalid(memlane_core::Error),
    Raised(PyErr),
}

impl From<memlane_core::Error> for Unreadable {
    fn from(e: memlane_core::Error) -> Self {
        Unreadable::Invalid(e)
    }
}

/// A value of a filter, as the core's parse reads it. Only Python's types
/// are told apart here: booleans stay booleans (never numbers), an int a
/// float cannot hold, a str with no UTF-8 form and any other type are
/// refused; the core checks the rest.
struct FilterValue<'py>(Bound<'py, PyAny>);

impl<'py> Source for FilterValue<'py> {
    type Error = Unreadable;
    type Text = PyBackedStr;
    type Items = Items<'py>;
    type Entries = Entries<'py>;

    fn shape(self) -> Read<Shape<Self>, Unreadable> {
        let obj = self.0;
        if obj.is_none() {
            return Ok(Shape::Null);
        }
        if let Ok(s) = obj.cast::<PyString>() {
            return text(s).map(Shape::Str);
        }
        // Before int, which bool subclasses.
        if let Ok(b) = obj.cast::<PyBool>() {
            return Ok(Shape::Bool(b.is_true()));
        }
        if let Ok(f) = obj.cast::<PyFloat>() {
            return Ok(Shape::Num(f.value()));
        }
        if obj.cast::<PyInt>().is_ok() {
            return int_value(&obj).map(Shape::Num);
        }
        if obj.cast::<PyList>().is_ok()
            || obj.cast::<PyTuple>().is_ok()
            || obj.cast::<PySet>().is_ok()
            || obj.cast::<PyFrozenSet>().is_ok()
        {
            return Ok(Shape::List(Items(obj.try_iter().map_err(raised)?)));
        }
        // Read through a copy of the items, never the dict in place: a value's own code
        // (a list subclass's __iter__) may change the dict while it is read.
        if let Ok(d) = obj.cast_exact::<PyDict>() {
            return Ok(Shape::Object(Entries(d.items().into_iter())));
        }
        if let Ok(m) = obj.cast::<PyMapping>() {
            // A TypeError here is the mapping's shape (items() gave no iterable),
            // told as such; anything else its own code raised passes through.
            let items = m.items().map_err(|e| {
                if e.is_instance_of::<PyTypeError>(obj.py()) {
                    Unread::Refused(format!("{} cannot be read: {e}", type_name(&obj)))
                } else {
                    raised(e)
                }
            })?;
            return Ok(Shape::Object(Entries(items.into_iter())));
        }
        refused(format!(
            "a filter holds str, int, float, bool, None, lists and dicts, got {}",
            type_name(&obj)
        ))
    }
}

/// The items of a list, tuple or set of a filter.
struct Items<'py>(Bound<'py, PyIterator>);

impl<'py> Iterator for Items<'py> {
    type Item = Read<FilterValue<'py>, Unreadable>;

    fn next(&mut self) -> Option<Self::Item> {
        self.0
            .next()
            .map(|item| item.map(FilterValue).map_err(raised))
    }
}

/// The (key, value) pairs of a dict or another mapping of a filter.
struct Entries<'py>(BoundListIterator<'py>);

impl<'py> Iterator for Entries<'py> {
    type Item = Read<(PyBackedStr, FilterValue<'py>), Unreadable>;

    fn next(&mut self) -> Option<Self::Item> {
        let item = self.0.next()?;
        let Ok((key, value)) = item.extract::<(Bound<'py, PyAny>, Bound<'py, PyAny>)>() else {
            return Some(refused(format!(
                "a mapping's items() must give (key, value) pairs, got {}",
                type_name(&item)
            )));
        };
        let key = match key.cast::<PyString>() {
            Ok(k) => text(k),
            Err(_) => match key.repr() {
                Ok(r) => refused(format!("keys must be str, got {} {r}", type_name(&key))),
                Err(e) => Err(raised(e)),
            },
        };
        Some(key.map(|k| (k, FilterValue(value))))
    }
}

/// An int's value as a float, read as an int (a subclass's own `__float__`
/// is not asked); one beyond a float's range is refused.
fn int_value(obj: &Bound<'_, PyAny>) -> Read<f64, Unreadable> {
    if let Ok(i) = obj.extract::<i64>() {
        return Ok(i as f64);
    }
    // int's own conversion, rounded to nearest as Python's float(n) is.
    let py = obj.py();
    match py.get_type::<PyInt>().call_method1("__float__", (obj,)) {
        Ok(x) => x.extract::<f64>().map_err(raised),
        Err(e) if e.is_instance_of::<PyOverflowError>(py) => {
            refused("an integer too large for a float".into())
        }
        Err(e) => Err(raised(e)),
    }
}

/// A str of a filter as UTF-8: a lone surrogate has no UTF-8 form, so it is
/// refused as bad input rather than raised as Python's `UnicodeEncodeError`.
fn text(s: &Bound<'_, PyString>) -> Read<PyBackedStr, Unreadable> {
    PyBackedStr::try_from(s.clone()).or_else(|_| {
        refused(format!(
            "{} holds a lone surrogate, which is not valid Unicode",
            s.repr().map_or_else(|_| "a str".into(), |r| r.to_string())
        ))
    })
}
