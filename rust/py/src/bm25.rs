//! `memlane.BM25Index` and `memlane.analyze`: the Python face of
//! `memlane_core::bm25`.

use std::path::PathBuf;

use memlane_core::bm25::{
    AnalyzerConfig, Bm25Index, Bm25Params, Hit, Language, Stopwords, MISSING,
};
use numpy::{PyArray1, PyArray2, PyArrayMethods};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyString};
use pyo3::Borrowed;

use crate::args;
use crate::convert::{self, type_name};
use crate::errors::{detach, invalid, to_py};
use crate::lock::Shared;

/// Score that pads rows of `search_batch` with fewer than `k` hits (their id is `MISSING`).
const PAD_SCORE: f32 = f32::NEG_INFINITY;

/// A batch of `search_batch` output is at most this many cells.
const MAX_BATCH_CELLS: usize = 1 << 28;

/// A BM25 keyword index over u64 ids, updated one document at a time.
/// Thread-safe: searches run in parallel from any number of threads while
/// adds and removes take turns.
#[pyclass(module = "memlane._core", name = "BM25Index", frozen)]
pub struct PyBm25Index {
    /// Taken as `lock` says: never waited for with the GIL held.
    inner: Shared<Bm25Index>,
}

/// `texts` as owned strings: a sequence of `str` (a lone `str` is refused,
/// since iterating it would index its characters).
pub(crate) fn texts(py: Python<'_>, obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<String>> {
    if obj.is_instance_of::<PyString>() {
        return Err(invalid(
            py,
            format!("{what} must be a list of str, not a single str"),
        ));
    }
    let iter = obj.try_iter().map_err(|_| {
        invalid(
            py,
            format!("{what} must be a list of str, got {}", type_name(obj)),
        )
    })?;
    let mut out = Vec::with_capacity(crate::args::reserved(obj));
    for (i, item) in iter.enumerate() {
        out.push(string(py, &item?, what, Some(i))?);
    }
    Ok(out)
}

/// One `str` argument (or item `index` of one) as an owned string.
pub(crate) fn string(
    py: Python<'_>,
    obj: &Bound<'_, PyAny>,
    what: &str,
    index: Option<usize>,
) -> PyResult<String> {
    let name = || match index {
        Some(i) => format!("{what}[{i}]"),
        None => what.to_owned(),
    };
    let s = obj.cast::<PyString>().map_err(|_| {
        invalid(
            py,
            format!("{} must be a str, got {}", name(), type_name(obj)),
        )
    })?;
    s.to_str()
        .map(str::to_owned)
        .map_err(|e| invalid(py, format!("{} is not valid Unicode: {e}", name())))
}

/// The `stopwords` argument: True (the language's list), False or None (no
/// list), or a list of words.
pub struct StopArg(Stopwords);

impl<'a, 'py> FromPyObject<'a, 'py> for StopArg {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        stopwords(obj.py(), &obj.to_owned()).map(StopArg)
    }
}

fn stopwords(py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<Stopwords> {
    if let Ok(b) = obj.cast::<PyBool>() {
        return Ok(if b.is_true() {
            Stopwords::Language
        } else {
            Stopwords::None
        });
    }
    if obj.is_none() {
        return Ok(Stopwords::None);
    }
    texts(py, obj, "stopwords")
        .map(Stopwords::Custom)
        .map_err(|_| {
            invalid(
                py,
                format!(
                    "stopwords must be True, False or a list of str, got {}",
                    type_name(obj)
                ),
            )
        })
}

fn config(
    py: Python<'_>,
    language: &str,
    stopwords: StopArg,
    stemming: bool,
    fold_accents: bool,
) -> PyResult<AnalyzerConfig> {
    Ok(AnalyzerConfig {
        language: Language::parse(language).map_err(|e| to_py(py, e))?,
        stopwords: stopwords.0,
        stemming,
        fold_accents,
    })
}

/// Splits hits into (ids, scores).
fn columns(hits: Vec<Hit>) -> (Vec<u64>, Vec<f32>) {
    hits.into_iter().map(|h| (h.id, h.score)).unzip()
}

#[pymethods]
impl PyBm25Index {
    #[new]
    #[pyo3(
        signature = (k1 = 1.2, b = 0.75, language = "english", stopwords = StopArg(Stopwords::Language), stemming = true, fold_accents = false),
        text_signature = "(k1=1.2, b=0.75, language='english', stopwords=True, stemming=True, fold_accents=False)"
    )]
    fn new(
        py: Python<'_>,
        k1: f64,
        b: f64,
        language: &str,
        stopwords: StopArg,
        stemming: bool,
        fold_accents: bool,
    ) -> PyResult<Self> {
        let params = Bm25Params::new(k1, b).map_err(|e| to_py(py, e))?;
        let config = config(py, language, stopwords, stemming, fold_accents)?;
        Ok(PyBm25Index {
            inner: Shared::new(Bm25Index::new(params, config)),
        })
    }

    /// Adds `texts` under `ids` (same length, no id twice); an id already
    /// present gets the new text. Checks everything before changing anything.
    fn add(
        &self,
        py: Python<'_>,
        ids: &Bound<'_, PyAny>,
        texts: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let ids = convert::ids(py, ids, "ids")?;
        let texts = self::texts(py, texts, "texts")?;
        detach(py, || {
            Bm25Index::check_batch(&ids, texts.len())?;
            // Analysis needs only the analyzer, so searches go on meanwhile.
            let docs = self.inner.read().analyze_batch(&texts);
            self.inner.write()?.insert_analyzed(&ids, docs)
        })
    }

    /// Removes `ids`; raises UnknownIdError (removing nothing) if one is absent.
    fn remove(&self, py: Python<'_>, ids: &Bound<'_, PyAny>) -> PyResult<()> {
        let ids = convert::ids(py, ids, "ids")?;
        detach(py, || self.inner.write()?.remove(&ids))
    }

    /// The best `k` documents for `query`, best first (score descending,
    /// ties by id ascending), as (m,) uint64 ids and float32 scores with
    /// m <= k: only real hits. `allowed` restricts results to those ids.
    #[pyo3(signature = (query, k = 10, allowed = None))]
    #[allow(clippy::type_complexity)]
    fn search<'py>(
        &self,
        py: Python<'py>,
        query: &Bound<'py, PyAny>,
        #[pyo3(from_py_with = args::k)] k: usize,
        allowed: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<(Bound<'py, PyArray1<u64>>, Bound<'py, PyArray1<f32>>)> {
        let query = string(py, query, "query", None)?;
        let allowed = allowed
            .map(|a| convert::ids(py, a, "allowed"))
            .transpose()?;
        let hits = detach(py, || {
            let index = self.inner.read();
            let filter = allowed.as_deref().map(|ids| index.filter(ids));
            Ok(index.search(&query, k, filter.as_ref()))
        })?;
        let (ids, scores) = columns(hits);
        Ok((PyArray1::from_vec(py, ids), PyArray1::from_vec(py, scores)))
    }

    /// `search` for each query, in parallel, as (nq, k) uint64 ids and
    /// float32 scores; rows with fewer than k hits are padded with id
    /// 2**64 - 1 and score -inf.
    #[pyo3(signature = (queries, k = 10, allowed = None))]
    #[allow(clippy::type_complexity)]
    fn search_batch<'py>(
        &self,
        py: Python<'py>,
        queries: &Bound<'py, PyAny>,
        #[pyo3(from_py_with = args::k)] k: usize,
        allowed: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<(Bound<'py, PyArray2<u64>>, Bound<'py, PyArray2<f32>>)> {
        let queries = texts(py, queries, "queries")?;
        let nq = queries.len();
        if nq
            .checked_mul(k)
            .is_none_or(|cells| cells > MAX_BATCH_CELLS)
        {
            return Err(invalid(
                py,
                format!("{nq} queries × k={k} is too large a result; lower k"),
            ));
        }
        let allowed = allowed
            .map(|a| convert::ids(py, a, "allowed"))
            .transpose()?;
        let (ids, scores) = detach(py, || {
            let index = self.inner.read();
            let filter = allowed.as_deref().map(|ids| index.filter(ids));
            let rows = index.search_batch(&queries, k, filter.as_ref());
            let mut ids = vec![MISSING; nq * k];
            let mut scores = vec![PAD_SCORE; nq * k];
            for (r, hits) in rows.into_iter().enumerate() {
                for (c, h) in hits.into_iter().enumerate() {
                    ids[r * k + c] = h.id;
                    scores[r * k + c] = h.score;
                }
            }
            Ok((ids, scores))
        })?;
        let ids = PyArray1::from_vec(py, ids).reshape([nq, k])?;
        let scores = PyArray1::from_vec(py, scores).reshape([nq, k])?;
        Ok((ids, scores))
    }

    /// The terms this index makes of `text` (its analyzer, for inspection).
    fn analyze(&self, py: Python<'_>, text: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
        let text = string(py, text, "text", None)?;
        detach(py, || Ok(self.inner.read().analyzer().analyze(&text)))
    }

    /// Writes the index to `path`, atomically replacing any file there.
    fn save(&self, py: Python<'_>, path: PathBuf) -> PyResult<()> {
        detach(py, || self.inner.read().save(&path))
    }

    #[staticmethod]
    fn load(py: Python<'_>, path: PathBuf) -> PyResult<Self> {
        let index = detach(py, || Bm25Index::load(&path))?;
        Ok(PyBm25Index {
            inner: Shared::new(index),
        })
    }

    /// Live ids in insertion order.
    fn ids<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArray1<u64>>> {
        let ids = detach(py, || Ok(self.inner.read().ids()))?;
        Ok(PyArray1::from_vec(py, ids))
    }

    fn __contains__(&self, py: Python<'_>, id: &Bound<'_, PyAny>) -> bool {
        id.extract::<u64>()
            .is_ok_and(|id| self.inner.peek(py, |b| b.contains(id)))
    }

    fn __len__(&self, py: Python<'_>) -> usize {
        self.inner.peek(py, Bm25Index::len)
    }

    /// Number of distinct terms in the stored documents.
    #[getter]
    fn vocabulary_size(&self, py: Python<'_>) -> usize {
        self.inner.peek(py, |b| b.vocabulary_size())
    }

    #[getter]
    fn k1(&self, py: Python<'_>) -> f64 {
        self.inner.peek(py, |b| b.params().k1)
    }

    #[getter]
    fn b(&self, py: Python<'_>) -> f64 {
        self.inner.peek(py, |b| b.params().b)
    }

    #[getter]
    fn language(&self, py: Python<'_>) -> &'static str {
        self.inner
            .peek(py, |b| b.analyzer().config().language.name())
    }

    /// True (the language's list), False, or the caller's list of words.
    #[getter]
    fn stopwords<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let stopwords = self
            .inner
            .peek(py, |b| b.analyzer().config().stopwords.clone());
        Ok(match &stopwords {
            Stopwords::None => PyBool::new(py, false).to_owned().into_any(),
            Stopwords::Language => PyBool::new(py, true).to_owned().into_any(),
            Stopwords::Custom(words) => words.clone().into_pyobject(py)?.into_any(),
        })
    }

    #[getter]
    fn stemming(&self, py: Python<'_>) -> bool {
        self.inner.peek(py, |b| b.analyzer().config().stemming)
    }

    #[getter]
    fn fold_accents(&self, py: Python<'_>) -> bool {
        self.inner.peek(py, |b| b.analyzer().config().fold_accents)
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        self.inner.peek(py, |index| {
            let p = index.params();
            let c = index.analyzer().config();
            format!(
                "BM25Index(k1={}, b={}, language={:?}, stemming={}, len={})",
                p.k1,
                p.b,
                c.language.name(),
                if c.stemming { "True" } else { "False" },
                index.len()
            )
        })
    }
}

/// The terms memlane's BM25 analyzer makes of `text`, in order.
#[pyfunction]
#[pyo3(
    signature = (text, language = "english", stopwords = StopArg(Stopwords::Language), stemming = true, fold_accents = false),
    text_signature = "(text, language='english', stopwords=True, stemming=True, fold_accents=False)"
)]
pub fn analyze(
    py: Python<'_>,
    text: &Bound<'_, PyAny>,
    language: &str,
    stopwords: StopArg,
    stemming: bool,
    fold_accents: bool,
) -> PyResult<Vec<String>> {
    let config = config(py, language, stopwords, stemming, fold_accents)?;
    let text = string(py, text, "text", None)?;
    detach(py, || {
        Ok(memlane_core::bm25::Analyzer::new(config).analyze(&text))
    })
}
