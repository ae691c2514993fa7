//! `memlane.HnswIndex`: the Python face of `memlane_core::hnsw::Hnsw`.

use std::path::PathBuf;

use memlane_core::hnsw::{Hnsw, Metric, Params, Precision, MISSING};
use memlane_core::Error;
use numpy::ndarray::Array2;
use numpy::{Element, IntoPyArray, PyArray1, PyArray2};
use parking_lot::RwLock;
use pyo3::prelude::*;

use crate::convert::{self, Matrix};
use crate::errors::{detach, invalid};

/// An HNSW vector index over u64 ids. Thread-safe: searches run in parallel
/// from any number of threads while adds and removes take turns.
#[pyclass(module = "memlane._core", name = "HnswIndex", frozen)]
pub struct PyHnswIndex {
    inner: RwLock<Hnsw>,
}

/// A size argument: negative values are an argument error, not an overflow.
fn count(py: Python<'_>, value: i64, name: &str) -> PyResult<usize> {
    usize::try_from(value)
        .map_err(|_| invalid(py, format!("{name} must not be negative, got {value}")))
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
        dim: i64,
        metric: &str,
        m: i64,
        ef_construction: i64,
        ef: i64,
        seed: u64,
        precision: &str,
        py: Python<'_>,
    ) -> PyResult<Self> {
        let dim = count(py, dim, "dim")?;
        let (m, ef_construction) = (
            count(py, m, "m")?,
            count(py, ef_construction, "ef_construction")?,
        );
        let ef = count(py, ef, "ef")?;
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
            inner: RwLock::new(index),
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
        let dim = self.inner.read().dim();
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
        detach(py, || self.inner.write().add(&ids, data))
    }

    /// Removes `ids`; raises UnknownIdError (removing nothing) if one is absent.
    fn remove(&self, py: Python<'_>, ids: &Bound<'_, PyAny>) -> PyResult<()> {
        let ids = convert::ids(py, ids, "ids")?;
        detach(py, || self.inner.write().remove(&ids))
    }

    /// Hides `ids` from searches, keeping their vectors, links and slots
    /// (hnswlib's mark_deleted); `unhide` brings them back as they were.
    /// Raises UnknownIdError, hiding nothing, if one is not live.
    fn hide(&self, py: Python<'_>, ids: &Bound<'_, PyAny>) -> PyResult<()> {
        let ids = convert::ids(py, ids, "ids")?;
        detach(py, || self.inner.write().hide(&ids))
    }

    /// Shows hidden `ids` again; raises UnknownIdError if one is not hidden.
    fn unhide(&self, py: Python<'_>, ids: &Bound<'_, PyAny>) -> PyResult<()> {
        let ids = convert::ids(py, ids, "ids")?;
        detach(py, || self.inner.write().unhide(&ids))
    }

    /// Forgets hidden `ids`, freeing their slots for later adds; raises
    /// UnknownIdError if one is not hidden.
    fn release(&self, py: Python<'_>, ids: &Bound<'_, PyAny>) -> PyResult<()> {
        let ids = convert::ids(py, ids, "ids")?;
        detach(py, || self.inner.write().release(&ids))
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
        k: i64,
        ef: Option<i64>,
        allowed: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<(Bound<'py, PyArray2<u64>>, Bound<'py, PyArray2<f32>>)> {
        if k <= 0 {
            return Err(invalid(py, format!("k must be at least 1, got {k}")));
        }
        let ef = match ef {
            Some(e) if e <= 0 => {
                return Err(invalid(py, format!("ef must be at least 1, got {e}")))
            }
            Some(e) => Some(e as usize),
            None => None,
        };
        let k = k as usize;
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
        k: i64,
        ef: Option<i64>,
    ) -> PyResult<(Bound<'py, PyArray2<u64>>, Bound<'py, PyArray2<f32>>)> {
        if k <= 0 {
            return Err(invalid(py, format!("k must be at least 1, got {k}")));
        }
        if !predicate.is_callable() {
            return Err(invalid(py, "predicate must be callable"));
        }
        let ef = match ef {
            Some(e) if e <= 0 => {
                return Err(invalid(py, format!("ef must be at least 1, got {e}")))
            }
            Some(e) => Some(e as usize),
            None => None,
        };
        let k = k as usize;
        let q = Matrix::extract(py, queries, "queries")?;
        let (nq, cols) = (q.rows(), q.cols());
        let index = self.inner.read();
        if cols != index.dim() && nq > 0 {
            return Err(crate::errors::to_py(
                py,
                Error::DimensionMismatch {
                    expected: index.dim(),
                    got: cols,
                },
            ));
        }
        let mut labels = vec![MISSING; nq * k];
        let mut dists = vec![f32::INFINITY; nq * k];
        let failure: std::cell::RefCell<Option<PyErr>> = std::cell::RefCell::new(None);
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
        for (row, q) in q.as_slice().chunks_exact(cols.max(1)).enumerate() {
            let found = index
                .search_where(q, k, ef, accept)
                .map_err(|e| crate::errors::to_py(py, e))?;
            if let Some(e) = failure.borrow_mut().take() {
                return Err(e);
            }
            for (i, n) in found.into_iter().enumerate() {
                labels[row * k + i] = n.id;
                dists[row * k + i] = n.distance;
            }
        }
        drop(index);
        Ok((matrix(py, nq, k, labels)?, matrix(py, nq, k, dists)?))
    }

    fn save(&self, py: Python<'_>, path: PathBuf) -> PyResult<()> {
        detach(py, || self.inner.read().save(&path))
    }

    #[staticmethod]
    fn load(py: Python<'_>, path: PathBuf) -> PyResult<Self> {
        let index = detach(py, || Hnsw::load(&path))?;
        Ok(PyHnswIndex {
            inner: RwLock::new(index),
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
            // An int outside u64 (say -1) is simply not stored.
            Err(_) if id.extract::<i128>().is_ok() => {
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
    fn memory_bytes(&self) -> usize {
        self.inner.read().memory_bytes()
    }

    fn __contains__(&self, id: &Bound<'_, PyAny>) -> bool {
        id.extract::<u64>()
            .is_ok_and(|id| id != MISSING && self.inner.read().contains(id))
    }

    fn __len__(&self) -> usize {
        self.inner.read().len()
    }

    #[getter]
    fn dim(&self) -> usize {
        self.inner.read().dim()
    }

    #[getter]
    fn metric(&self) -> &'static str {
        self.inner.read().metric().name()
    }

    #[getter]
    fn m(&self) -> usize {
        self.inner.read().params().m
    }

    #[getter]
    fn ef_construction(&self) -> usize {
        self.inner.read().params().ef_construction
    }

    /// How vectors are stored: "f32" (exact), "f16", "int8" or "int8+f16".
    #[getter]
    fn precision(&self) -> &'static str {
        self.inner.read().params().precision.name()
    }

    #[getter]
    fn seed(&self) -> u64 {
        self.inner.read().params().seed
    }

    /// Candidate-list size used when `search` is given no `ef`.
    #[getter]
    fn get_ef(&self) -> usize {
        self.inner.read().params().ef
    }

    #[setter]
    fn set_ef(&self, py: Python<'_>, ef: i64) -> PyResult<()> {
        if ef <= 0 {
            return Err(invalid(py, format!("ef must be at least 1, got {ef}")));
        }
        self.inner
            .write()
            .set_ef(ef as usize)
            .map_err(|e| crate::errors::to_py(py, e))
    }

    fn __repr__(&self) -> String {
        let h = self.inner.read();
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
    }
}
