//! `memlane.HnswIndex`: the Python face of `memlane_core::hnsw::Hnsw`.

use std::cell::RefCell;
use std::path::PathBuf;

use memlane_core::hnsw::{Hnsw, Metric, Params, Precision, MISSING};
use memlane_core::Error;
use numpy::ndarray::Array2;
use numpy::{Element, IntoPyArray, PyArray1, PyArray2};
use pyo3::prelude::*;

use crate::args;
use crate::convert::{self, Matrix};
use crate::errors::{detach, invalid};
use crate::lock::Shared;

/// An HNSW vector index over u64 ids. Thread-safe: searches run in parallel
/// from any number of threads while adds and removes take turns.
#[pyclass(module = "memlane._core", name = "HnswIndex", frozen)]
pub struct PyHnswIndex {
    /// Taken as `lock` says: never waited for with the GIL held.
    inner: Shared<Hnsw>,
}

/// Moves a row-major buffer into a 2-d numpy array without copying it.
pub(crate) fn matrix<T: Element>(
    py: Python<'_>,
    rows: usize,
    cols: usize,
    data: Vec<T>,
) -> PyResult<Bound<'_, PyArray2<T>>> {
    let array = Array2::from_shape_vec((rows, cols), data)
        .map_err(|e| pyo3::exceptions::PyRuntimeError::new_err(e.to_string()))?;
    Ok(array.into_pyarray(py))
}

#[pymethods]
impl PyHnswIndex {
    #[new]
    #[pyo3(signature = (dim, metric = "cosine", m = 16, ef_construction = 200, ef = 64, seed = 0, precision = "f32"))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        #[pyo3(from_py_with = args::dim)] dim: usize,
        metric: &str,
        #[pyo3(from_py_with = args::m)] m: usize,
        #[pyo3(from_py_with = args::ef_construction)] ef_construction: usize,
        #[pyo3(from_py_with = args::ef)] ef: usize,
        #[pyo3(from_py_with = args::seed)] seed: u64,
        precision: &str,
        py: Python<'_>,
    ) -> PyResult<Self> {
        let metric = Metric::parse(metric).map_err(|e| crate::errors::to_py(py, e))?;
        let precision = Precision::parse(precision).map_err(|e| crate::errors::to_py(py, e))?;
        let params = Params {
            m,
            ef_construction,
            ef,
            seed,
            precision,
        };
        let index = Hnsw::new(dim, metric, params).map_err(|e| crate::errors::to_py(py, e))?;
        Ok(PyHnswIndex {
            inner: Shared::new(index),
        })
    }

    /// Adds `vectors` (n, dim) under `ids` (n,); an id already present gets
    /// the new vector. Validates everything before changing anything.
    fn add(
        &self,
        py: Python<'_>,
        ids: &Bound<'_, PyAny>,
        vectors: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let ids = convert::ids(py, ids, "ids")?;
        let m = Matrix::extract(py, vectors, "vectors")?;
        let dim = self.inner.peek(py, Hnsw::dim);
        if m.cols() != dim && m.rows() > 0 {
            return Err(crate::errors::to_py(
                py,
                Error::DimensionMismatch {
                    expected: dim,
                    got: m.cols(),
                },
            ));
        }
        if m.rows() != ids.len() {
            return Err(invalid(
                py,
                format!("got {} ids but {} vectors", ids.len(), m.rows()),
            ));
        }
        let data = m.as_slice();
        detach(py, || self.inner.write()?.add(&ids, data))
    }

    /// Removes `ids`; raises UnknownIdError (removing nothing) if one is absent.
    fn remove(&self, py: Python<'_>, ids: &Bound<'_, PyAny>) -> PyResult<()> {
        let ids = convert::ids(py, ids, "ids")?;
        detach(py, || self.inner.write()?.remove(&ids))
    }

    /// Hides `ids` from searches, keeping their vectors, links and slots
    /// (hnswlib's mark_deleted); `unhide` brings them back as they were.
    /// Raises UnknownIdError, hiding nothing, if one is not live.
    fn hide(&self, py: Python<'_>, ids: &Bound<'_, PyAny>) -> PyResult<()> {
        let ids = convert::ids(py, ids, "ids")?;
        detach(py, || self.inner.write()?.hide(&ids))
    }

    /// Shows hidden `ids` again; raises UnknownIdError if one is not hidden.
    fn unhide(&self, py: Python<'_>, ids: &Bound<'_, PyAny>) -> PyResult<()> {
        let ids = convert::ids(py, ids, "ids")?;
        detach(py, || self.inner.write()?.unhide(&ids))
    }

    /// Forgets hidden `ids`, freeing their slots for later adds; raises
    /// UnknownIdError if one is not hidden.
    fn release(&self, py: Python<'_>, ids: &Bound<'_, PyAny>) -> PyResult<()> {
        let ids = convert::ids(py, ids, "ids")?;
        detach(py, || self.inner.write()?.release(&ids))
    }

    /// Hidden ids, in slot order.
    fn hidden<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArray1<u64>>> {
        let ids = detach(py, || Ok(self.inner.read().hidden()))?;
        Ok(PyArray1::from_vec(py, ids))
    }

    /// Nearest neighbours of each query row, nearest first, as (nq, k) labels
    /// and distances. Rows with fewer than k results are padded with label
    /// 2**64 - 1 and distance inf. `allowed` restricts results to those ids.
    #[pyo3(signature = (queries, k = 10, ef = None, allowed = None))]
    #[allow(clippy::type_complexity)]
    fn search<'py>(
        &self,
        py: Python<'py>,
        queries: &Bound<'py, PyAny>,
        #[pyo3(from_py_with = args::k)] k: usize,
        #[pyo3(from_py_with = args::opt_ef)] ef: Option<usize>,
        allowed: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<(Bound<'py, PyArray2<u64>>, Bound<'py, PyArray2<f32>>)> {
        let q = Matrix::extract(py, queries, "queries")?;
        let allowed = allowed
            .map(|a| convert::ids(py, a, "allowed"))
            .transpose()?;
        let (nq, cols) = (q.rows(), q.cols());
        let data = q.as_slice();
        let (labels, dists) = detach(py, || {
            let index = self.inner.read();
            if cols != index.dim() {
                return Err(Error::DimensionMismatch {
                    expected: index.dim(),
                    got: cols,
                });
            }
            let filter = allowed.as_deref().map(|ids| index.allowed(ids));
            index.search_batch(data, k, ef, filter.as_ref())
        })?;
        Ok((matrix(py, nq, k, labels)?, matrix(py, nq, k, dists)?))
    }

    /// `search` keeping only ids for which `predicate(id)` is true. The
    /// predicate is called (with the GIL held, queries one after another) on
    /// the ids the graph search reaches, as hnswlib calls its filter; an
    /// exception it raises stops the search and propagates.
    #[pyo3(signature = (queries, predicate, k = 10, ef = None))]
    #[allow(clippy::type_complexity)]
    fn search_where<'py>(
        &self,
        py: Python<'py>,
        queries: &Bound<'py, PyAny>,
        predicate: &Bound<'py, PyAny>,
        #[pyo3(from_py_with = args::k)] k: usize,
        #[pyo3(from_py_with = args::opt_ef)] ef: Option<usize>,
    ) -> PyResult<(Bound<'py, PyArray2<u64>>, Bound<'py, PyArray2<f32>>)> {
        if !predicate.is_callable() {
            return Err(invalid(py, "predicate must be callable"));
        }
        let q = Matrix::extract(py, queries, "queries")?;
        let (nq, cols) = (q.rows(), q.cols());
        let data = q.as_slice();
        let predicate = predicate.clone().unbind();
        // The read lock is taken without the GIL, and the GIL taken back under
        // it for each query's search, whose predicate needs it (see `lock`).
        let (labels, dists, failure) = detach(py, || {
            self.inner.read_calling_back(|index| {
                if cols != index.dim() && nq > 0 {
                    return Err(Error::DimensionMismatch {
                        expected: index.dim(),
                        got: cols,
                    });
                }
                // The padded result, checked as `search` checks it, before
                // anything is allocated for it.
                Hnsw::check_k(k, nq)?;
                let mut labels = vec![MISSING; nq * k];
                let mut dists = vec![f32::INFINITY; nq * k];
                for (row, q) in data.chunks_exact(cols.max(1)).enumerate() {
                    let (found, failure) = Python::attach(|py| {
                        let predicate = predicate.bind(py);
                        let failure: RefCell<Option<PyErr>> = RefCell::new(None);
                        let accept = |id: u64| -> bool {
                            if failure.borrow().is_some() {
                                return false;
                            }
                            match predicate.call1((id,)).and_then(|r| r.is_truthy()) {
                                Ok(keep) => keep,
                                Err(e) => {
                                    *failure.borrow_mut() = Some(e);
                                    false
                                }
                            }
                        };
                        let found = index.search_where(q, k, ef, accept);
                        (found, failure.into_inner())
                    });
                    let found = found?;
                    if failure.is_some() {
                        return Ok((labels, dists, failure));
                    }
                    for (i, n) in found.into_iter().enumerate() {
                        labels[row * k + i] = n.id;
                        dists[row * k + i] = n.distance;
                    }
                }
                Ok((labels, dists, None))
            })
        })?;
        if let Some(e) = failure {
            return Err(e);
        }
        Ok((matrix(py, nq, k, labels)?, matrix(py, nq, k, dists)?))
    }

    fn save(&self, py: Python<'_>, path: PathBuf) -> PyResult<()> {
        detach(py, || self.inner.read().save(&path))
    }

    #[staticmethod]
    fn load(py: Python<'_>, path: PathBuf) -> PyResult<Self> {
        let index = detach(py, || Hnsw::load(&path))?;
        Ok(PyHnswIndex {
            inner: Shared::new(index),
        })
    }

    /// The stored vector of `id` (unit length under the cosine metric).
    fn get_vector<'py>(
        &self,
        py: Python<'py>,
        id: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyArray1<f32>>> {
        let id = match id.extract::<u64>() {
            Ok(id) => id,
            // An int outside u64 (say -1, or 2**200) is simply not stored.
            Err(_) if id.is_instance_of::<pyo3::types::PyInt>() => {
                return Err(crate::errors::raise(
                    py,
                    "UnknownIdError",
                    format!("unknown id {id}"),
                ))
            }
            Err(_) => {
                return Err(invalid(
                    py,
                    format!("id must be an int, got {}", id.get_type().name()?),
                ))
            }
        };
        let v = detach(py, || self.inner.read().vector(id))?;
        Ok(PyArray1::from_vec(py, v))
    }

    /// Live ids in storage order.
    fn ids<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArray1<u64>>> {
        let ids = detach(py, || Ok(self.inner.read().ids()))?;
        Ok(PyArray1::from_vec(py, ids))
    }

    /// Bytes held by vectors, links and id maps.
    fn memory_bytes(&self, py: Python<'_>) -> usize {
        self.inner.peek(py, Hnsw::memory_bytes)
    }

    fn __contains__(&self, py: Python<'_>, id: &Bound<'_, PyAny>) -> bool {
        id.extract::<u64>()
            .is_ok_and(|id| id != MISSING && self.inner.peek(py, |h| h.contains(id)))
    }

    fn __len__(&self, py: Python<'_>) -> usize {
        self.inner.peek(py, Hnsw::len)
    }

    #[getter]
    fn dim(&self, py: Python<'_>) -> usize {
        self.inner.peek(py, |h| h.dim())
    }

    #[getter]
    fn metric(&self, py: Python<'_>) -> &'static str {
        self.inner.peek(py, |h| h.metric().name())
    }

    #[getter]
    fn m(&self, py: Python<'_>) -> usize {
        self.inner.peek(py, |h| h.params().m)
    }

    #[getter]
    fn ef_construction(&self, py: Python<'_>) -> usize {
        self.inner.peek(py, |h| h.params().ef_construction)
    }

    /// How vectors are stored: "f32" (exact), "f16", "int8" or "int8+f16".
    #[getter]
    fn precision(&self, py: Python<'_>) -> &'static str {
        self.inner.peek(py, |h| h.params().precision.name())
    }

    #[getter]
    fn seed(&self, py: Python<'_>) -> u64 {
        self.inner.peek(py, |h| h.params().seed)
    }

    /// Candidate-list size used when `search` is given no `ef`.
    #[getter]
    fn get_ef(&self, py: Python<'_>) -> usize {
        self.inner.peek(py, |h| h.params().ef)
    }

    #[setter]
    fn set_ef(&self, py: Python<'_>, ef: &Bound<'_, PyAny>) -> PyResult<()> {
        let ef = args::ef(ef)?;
        detach(py, || self.inner.write()?.set_ef(ef))
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        self.inner.peek(py, |h| {
            let p = h.params();
            format!(
            "HnswIndex(dim={}, metric={:?}, precision={:?}, m={}, ef_construction={}, ef={}, len={})",
            h.dim(),
            h.metric().name(),
            p.precision.name(),
            p.m,
            p.ef_construction,
            p.ef,
            h.len()
        )
        })
    }
}
