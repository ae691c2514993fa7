//! The private native module `memlane._core`: type conversion, GIL release and
//! error mapping around `memlane-core`. No engine logic lives here.

mod ahead;
mod args;
mod blob;
mod bm25;
mod conditions;
mod convert;
mod engine;
mod errors;
mod hnsw;
mod lock;
mod okapi;
mod rows;
mod search;
mod vector_log;
mod vectors;
mod wordpiece;

use memlane_core::{fusion, scoring};
use pyo3::prelude::*;

/// Loads NumPy's C API now. rust-numpy loads it at its first use and panics if
/// that fails (a Ctrl-C while numpy's own Python code runs for it), so a failure
/// fails the import instead of a later call.
fn load_numpy_api(py: Python<'_>) -> PyResult<()> {
    // Imported first: an import that fails raises here, as itself.
    py.import("numpy")?;
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        numpy::PyArray1::<f32>::zeros(py, 0, false);
    }))
    .map_err(|_| {
        pyo3::exceptions::PyImportError::new_err("memlane: NumPy's C API could not be loaded")
    })
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    load_numpy_api(m.py())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    // The search defaults live in the core; Python reads them from here.
    m.add("DEFAULT_ALPHA", fusion::DEFAULT_ALPHA)?;
    m.add("ADAPTIVE_LOW", fusion::ADAPTIVE_LOW)?;
    m.add("ADAPTIVE_HIGH", fusion::ADAPTIVE_HIGH)?;
    m.add("SPREAD_RANK", fusion::SPREAD_RANK)?;
    m.add("DEFAULT_RRF_K", fusion::DEFAULT_RRF_K)?;
    m.add("DEFAULT_CONTEXT_WEIGHT", fusion::DEFAULT_CONTEXT_WEIGHT)?;
    m.add("DEFAULT_ANSWER_WEIGHT", fusion::DEFAULT_ANSWER_WEIGHT)?;
    m.add("DEFAULT_QUESTION_WEIGHT", fusion::DEFAULT_QUESTION_WEIGHT)?;
    m.add("DEFAULT_SPEAKER_WEIGHT", fusion::DEFAULT_SPEAKER_WEIGHT)?;
    m.add("DEFAULT_DATE_WEIGHT", fusion::DEFAULT_DATE_WEIGHT)?;
    m.add("DEFAULT_WHEN_WEIGHT", fusion::DEFAULT_WHEN_WEIGHT)?;
    m.add(
        "DEFAULT_RELEVANCE_WEIGHT",
        scoring::DEFAULT_RELEVANCE_WEIGHT,
    )?;
    m.add(
        "DEFAULT_IMPORTANCE_WEIGHT",
        scoring::DEFAULT_IMPORTANCE_WEIGHT,
    )?;
    m.add("DEFAULT_RECENCY_WEIGHT", scoring::DEFAULT_RECENCY_WEIGHT)?;
    m.add(
        "DEFAULT_RECENCY_HALF_LIFE_HOURS",
        scoring::DEFAULT_RECENCY_HALF_LIFE_HOURS,
    )?;
    // The metadata key of the unique flag, which the engine's conditions read.
    m.add("UNIQUE_KEY", memlane_core::engine::UNIQUE_KEY)?;
    m.add_class::<bm25::PyBm25Index>()?;
    m.add_function(wrap_pyfunction!(bm25::analyze, m)?)?;
    m.add_function(wrap_pyfunction!(blob::blobs, m)?)?;
    m.add_function(wrap_pyfunction!(blob::unblobs, m)?)?;
    m.add_function(wrap_pyfunction!(vectors::squared_norm, m)?)?;
    m.add("LOG_HEADER", memlane_core::vector_log::HEADER)?;
    m.add("LOG_ENTRY", memlane_core::vector_log::ENTRY)?;
    m.add("MARKER_TAG", memlane_core::vector_log::MARKER_TAG)?;
    m.add("MARKER_BYTES", memlane_core::vector_log::MARKER_BYTES)?;
    m.add_function(wrap_pyfunction!(vector_log::log_header, m)?)?;
    m.add_function(wrap_pyfunction!(vector_log::log_header_store, m)?)?;
    m.add_function(wrap_pyfunction!(vector_log::log_entry_head, m)?)?;
    m.add_function(wrap_pyfunction!(vector_log::log_entries, m)?)?;
    m.add_function(wrap_pyfunction!(vector_log::log_blobs, m)?)?;
    m.add_class::<hnsw::PyHnswIndex>()?;
    m.add_class::<okapi::PyOkapi>()?;
    m.add_class::<engine::PyEngine>()?;
    m.add_class::<ahead::PySearchAhead>()?;
    m.add_class::<conditions::PyAdmits>()?;
    m.add_class::<engine::PyPrepared>()?;
    m.add_class::<search::PySearchRequest>()?;
    m.add_class::<wordpiece::PyWordPiece>()?;
    m.add_class::<wordpiece::PyEncoding>()?;
    Ok(())
}
