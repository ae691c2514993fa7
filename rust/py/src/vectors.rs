//! A vector's check on the path of every search, in one call: numpy's
//! dispatch and its floating-point error state cost a search more, after the
//! model's run had emptied the caches, than the sum itself.

use numpy::PyReadonlyArray1;
use pyo3::prelude::*;

/// The float32 sum of squares of a 1-d float32 array, as `numpy.dot(v, v)`
/// gives it: infinite past float32's range, NaN where a component is.
#[pyfunction]
pub fn squared_norm(vector: PyReadonlyArray1<'_, f32>) -> f32 {
    match vector.as_slice() {
        Ok(v) => memlane_core::dot::dot(v, v),
        Err(_) => vector.as_array().iter().map(|x| x * x).sum(),
    }
}
