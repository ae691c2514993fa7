//! The private native module `memlane._core`: type conversion, GIL release and
//! error mapping around `memlane-core`. No engine logic lives here.

mod bm25;
mod convert;
mod engine;
mod errors;
mod hnsw;

use pyo3::prelude::*;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<bm25::PyBm25Index>()?;
    m.add_function(wrap_pyfunction!(bm25::analyze, m)?)?;
    m.add_class::<hnsw::PyHnswIndex>()?;
    m.add_class::<engine::PyEngine>()?;
    m.add_class::<engine::PyPrepared>()?;
    Ok(())
}
