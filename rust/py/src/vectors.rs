//! A vector's check on the path of every search, in one call: numpy's
//! dispatch and its floating-point error state cost a search more, after the
//! model's run had emptied the caches, than the sum itself.

use numpy::PyReadonlyArray1;
use pyo3::prelude::*;

/// The float32 sum of squares of a 1-d float32 array, as `numpy.dot(v, v)`
/// gives it: infinite past float32's range, NaN where a component is. An
/// array that is not contiguous and aligned gives NaN, which sends the
/// caller to its whole check: numpy's strides need not be whole elements.
#[pyfunction]
pub fn squared_norm(vector: PyReadonlyArray1<'_, f32>) -> f32 {
    vector
        .as_slice()
        .map_or(f32::NAN, |v| memlane_core::dot::dot(v, v))
}
