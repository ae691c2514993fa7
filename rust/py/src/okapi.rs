//! `memlane._core.BM25Okapi`: the Python face of `memlane_core::bm25::okapi`,
//! behind `memlane.compat.rank_bm25`.

use memlane_core::bm25::okapi::{Okapi, OkapiBuilder};
use numpy::{IntoPyArray, PyArray1};
use pyo3::exceptions::{PyOverflowError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};

use crate::errors::{detach, invalid, to_py};

/// rank_bm25's Okapi BM25 over pre-tokenized documents (lists of str).
#[pyclass(module = "memlane._core", name = "BM25Okapi", frozen)]
pub struct PyOkapi {
    inner: Okapi,
}

/// Query tokens as str; other objects cannot match a corpus of str and are
/// skipped, as rank_bm25 scores an unknown token 0.
fn query_tokens(query: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    if query.is_instance_of::<PyString>() {
        return Err(PyTypeError::new_err(
            "query must be a list of tokens (str), not a str",
        ));
    }
    let mut out = Vec::new();
    for item in query.try_iter()? {
        let item = item?;
        if let Ok(s) = item.cast::<PyString>() {
            out.push(s.to_str()?.to_owned());
        }
    }
    Ok(out)
}

#[pymethods]
impl PyOkapi {
    #[new]
    #[pyo3(signature = (corpus, k1 = 1.5, b = 0.75, epsilon = 0.25))]
    fn new(
        py: Python<'_>,
        corpus: &Bound<'_, PyAny>,
        k1: f64,
        b: f64,
        epsilon: f64,
    ) -> PyResult<Self> {
        let mut builder = OkapiBuilder::new();
        for (i, doc) in corpus.try_iter()?.enumerate() {
            let doc = doc?;
            let push = |builder: &mut OkapiBuilder, token: &Bound<'_, PyAny>| -> PyResult<()> {
                let s = token.cast::<PyString>().map_err(|_| {
                    PyTypeError::new_err(format!(
                        "document {i}: tokens must be str, got {}",
                        token
                            .get_type()
                            .name()
                            .map_or("?".into(), |n| n.to_string())
                    ))
                })?;
                builder.push(s.to_str()?).map_err(|e| to_py(py, e))
            };
            if let Ok(list) = doc.cast::<PyList>() {
                for token in list.iter() {
                    push(&mut builder, &token)?;
                }
            } else {
                for token in doc.try_iter()? {
                    push(&mut builder, &token?)?;
                }
            }
            builder.end_document().map_err(|e| to_py(py, e))?;
        }
        let inner = detach(py, || builder.finish(k1, b, epsilon))?;
        Ok(PyOkapi { inner })
    }

    /// The score of every document for the tokens of `query`, as float64.
    fn get_scores<'py>(
        &self,
        py: Python<'py>,
        query: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyArray1<f64>>> {
        let query = query_tokens(query)?;
        let scores = detach(py, || Ok(self.inner.scores(&query)))?;
        Ok(scores.into_pyarray(py))
    }

    /// The scores of the documents `doc_ids` (indices into the corpus), in that order.
    fn get_batch_scores<'py>(
        &self,
        py: Python<'py>,
        query: &Bound<'py, PyAny>,
        doc_ids: Vec<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyArray1<f64>>> {
        let query = query_tokens(query)?;
        let n = self.inner.len();
        let docs = doc_ids
            .iter()
            .map(|d| {
                // An int of any size: one out of range is refused, not overflowed.
                let fits = match d.extract::<i128>() {
                    Ok(v) => usize::try_from(v).ok().filter(|&v| v < n),
                    Err(e) if e.is_instance_of::<PyOverflowError>(py) => None,
                    Err(e) => return Err(e),
                };
                fits.ok_or_else(|| {
                    invalid(
                        py,
                        format!("document {d} is out of range for a corpus of {n}"),
                    )
                })
            })
            .collect::<PyResult<Vec<usize>>>()?;
        let scores = detach(py, || self.inner.scores_of(&query, &docs))?;
        Ok(scores.into_pyarray(py))
    }

    /// Distinct tokens, in order of first appearance.
    fn terms(&self) -> Vec<String> {
        self.inner.terms().to_vec()
    }

    /// The idf of each of `terms()`, negative ones floored at `epsilon * average_idf`.
    fn idf<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<f64>> {
        PyArray1::from_slice(py, self.inner.idf())
    }

    /// Tokens per document.
    fn doc_len<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<u32>> {
        PyArray1::from_slice(py, self.inner.doc_len())
    }

    /// Per document, a dict of token to count, in order of first appearance.
    fn doc_freqs<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let terms: Vec<Bound<'py, PyString>> = self
            .inner
            .terms()
            .iter()
            .map(|t| PyString::new(py, t))
            .collect();
        let out = PyList::empty(py);
        for d in 0..self.inner.len() {
            let dict = PyDict::new(py);
            for &(t, tf) in self.inner.document(d) {
                dict.set_item(&terms[t as usize], tf)?;
            }
            out.append(dict)?;
        }
        Ok(out)
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    #[getter]
    fn k1(&self) -> f64 {
        self.inner.k1()
    }

    #[getter]
    fn b(&self) -> f64 {
        self.inner.b()
    }

    #[getter]
    fn epsilon(&self) -> f64 {
        self.inner.epsilon()
    }

    #[getter]
    fn avgdl(&self) -> f64 {
        self.inner.avgdl()
    }

    #[getter]
    fn average_idf(&self) -> f64 {
        self.inner.average_idf()
    }
}
