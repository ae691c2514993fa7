//! `memlane._core.Engine`: the Python face of `memlane_core::engine::Engine`,
//! the index behind `memlane.Memory`. Every call that does real work releases
//! the GIL; arrays come back as numpy without copies.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use memlane_core::bm25::{AnalyzerConfig, Bm25Params, Language, Stopwords};
use memlane_core::engine::{
    flatten_metadata, Batch, Column, Engine, EngineConfig, Hits, Mode, Prepared, SearchOptions,
    Signals, Sort,
};
use memlane_core::hnsw::{Params, Precision};
use memlane_core::pages::Settler;
use memlane_core::Error;
use numpy::PyArray1;
use parking_lot::Mutex;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::ahead::{Asked, PySearchAhead};
use crate::args;
use crate::blob::Stored;
use crate::conditions::PyAdmits;
use crate::convert::{self, Matrix};
use crate::errors::{detach, invalid, to_py};
use crate::lock::Shared;
use crate::rows;
use crate::search::{self, PySearchRequest};

/// One table and scope of `Engine.groups`: (table, the six scope values, count).
type GroupRow = (String, [Option<String>; 6], usize);

/// A checked, analysed batch of records from `Engine.prepare`.
#[pyclass(module = "memlane._core", name = "PreparedBatch", frozen)]
pub struct PyPrepared {
    inner: Mutex<Option<Prepared>>,
}

/// The memory engine: records' attributes, a BM25 index and (with `dim`) an
/// HNSW graph under one lock. Thread-safe: searches run in parallel.
#[pyclass(module = "memlane._core", name = "Engine", frozen)]
pub struct PyEngine {
    /// Taken as `lock` says: never waited for with the GIL held.
    inner: Arc<Shared<Engine>>,
    /// `Engine::pending`, readable without waiting for a writer's lock.
    parked: AtomicUsize,
    /// How far the engine's buffers are on huge pages (`settle_pages`).
    pages: Mutex<Settler>,
}

impl PyEngine {
    fn wrap(engine: Engine) -> Self {
        let parked = AtomicUsize::new(engine.pending());
        PyEngine {
            inner: Arc::new(Shared::new(engine)),
            parked,
            pages: Mutex::new(Settler::default()),
        }
    }

    /// Runs `f` under the write lock and refreshes the parked count.
    /// Reads the engine without the GIL: a read waits while the background
    /// pass links the graph under the write lock, and holding the GIL through
    /// that wait would stop every Python thread.
    fn peek<T: Send>(&self, py: Python<'_>, f: impl FnOnce(&Engine) -> T + Send) -> PyResult<T> {
        detach(py, || Ok(f(&self.inner.read())))
    }

    fn write<T>(
        &self,
        f: impl FnOnce(&mut Engine) -> memlane_core::Result<T>,
    ) -> memlane_core::Result<T> {
        let mut engine = self.inner.write()?;
        let out = f(&mut engine);
        self.parked.store(engine.pending(), Ordering::Release);
        out
    }
}

/// `Engine.nearest`'s ids and similarities.
type Nearest<'py> = (Bound<'py, PyArray1<u64>>, Bound<'py, PyArray1<f32>>);

/// `Engine.search`'s answer: ids, final scores, on request each hit's signals,
/// and the version of each hit as it was judged (`updated_at`, `expires_at`).
type Found<'py> = (
    Vec<u64>,
    Vec<f64>,
    Option<Vec<Bound<'py, PyDict>>>,
    Vec<(f64, f64)>,
);

/// `Engine.versioned_ids_where`'s answer: ids, and the `updated_at` and the
/// `expires_at` of each.
type Versioned<'py> = (
    Bound<'py, PyArray1<u64>>,
    Bound<'py, PyArray1<f64>>,
    Bound<'py, PyArray1<f64>>,
);

/// The order and column a listing is sorted by, as `ids_where` takes them.
fn sort_of(py: Python<'_>, order: &str, sort: &str) -> PyResult<Sort> {
    let descending = match order {
        "asc" => false,
        "desc" => true,
        other => {
            return Err(invalid(
                py,
                format!("order must be one of {{'asc', 'desc'}}, got {other:?}"),
            ))
        }
    };
    let column = Column::parse(sort).map_err(|e| to_py(py, e))?;
    Ok(Sort { column, descending })
}

/// A hit's signals as `SearchHit.explain` holds them: ranks as ints, None
/// where the hit was not retrieved that way.
fn explained<'py>(py: Python<'py>, s: &Signals) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("bm25", s.bm25.map(f64::from))?;
    d.set_item("bm25_rank", s.bm25_rank)?;
    d.set_item("bm25_context", s.bm25_context.map(f64::from))?;
    d.set_item("bm25_speaker", s.bm25_speaker)?;
    d.set_item("date", s.date)?;
    d.set_item("when", s.when)?;
    d.set_item("cosine", s.cosine.map(f64::from))?;
    d.set_item("cosine_context", s.cosine_context.map(f64::from))?;
    d.set_item("cosine_asked", s.cosine_asked.map(f64::from))?;
    d.set_item("vector_rank", s.vector_rank)?;
    d.set_item("question", s.question)?;
    d.set_item("relevance", s.relevance)?;
    d.set_item("importance", s.importance)?;
    d.set_item("recency", s.recency)?;
    d.set_item("age_hours", s.age_hours)?;
    d.set_item("boost", s.boost)?;
    d.set_item("score", s.score)?;
    Ok(d)
}

/// BM25's parameters, the engine's (`Bm25Params::MEMORIES`) where not given.
fn bm25_params(k1: Option<f64>, b: Option<f64>) -> memlane_core::Result<Bm25Params> {
    let ours = Bm25Params::MEMORIES;
    Bm25Params::new(k1.unwrap_or(ours.k1), b.unwrap_or(ours.b))
}

/// `save`'s `history` (see [`args`], which reads the other integers).
fn history_arg(obj: &Bound<'_, PyAny>) -> PyResult<u64> {
    args::unsigned(obj, "history")
}

#[pymethods]
impl PyEngine {
    #[new]
    #[pyo3(signature = (
        dim = None, *, m = 16, ef_construction = 100, ef = 64, seed = 0, precision = "f32",
        k1 = None, b = None, language = "english", stopwords = true, stemming = true,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        #[pyo3(from_py_with = args::opt_dim)] dim: Option<usize>,
        #[pyo3(from_py_with = args::m)] m: usize,
        #[pyo3(from_py_with = args::ef_construction)] ef_construction: usize,
        #[pyo3(from_py_with = args::ef)] ef: usize,
        #[pyo3(from_py_with = args::seed)] seed: u64,
        precision: &str,
        k1: Option<f64>,
        b: Option<f64>,
        language: &str,
        stopwords: bool,
        stemming: bool,
    ) -> PyResult<Self> {
        let build = || -> memlane_core::Result<Engine> {
            Engine::new(EngineConfig {
                dim,
                hnsw: Params {
                    m,
                    ef_construction,
                    ef,
                    seed,
                    precision: Precision::parse(precision)?,
                },
                bm25: bm25_params(k1, b)?,
                analyzer: AnalyzerConfig {
                    language: Language::parse(language)?,
                    stopwords: if stopwords {
                        Stopwords::Language
                    } else {
                        Stopwords::None
                    },
                    stemming,
                    fold_accents: false,
                },
            })
        };
        let engine = build().map_err(|e| to_py(py, e))?;
        Ok(PyEngine::wrap(engine))
    }

    /// Checks and analyses a batch of rows (`memlane.schema.Row`s) without
    /// changing the engine; `texts`: index their texts too; `vectors`: one
    /// row per record.
    #[pyo3(signature = (rows, texts, vectors = None))]
    fn prepare(
        &self,
        py: Python<'_>,
        rows: &Bound<'_, PyAny>,
        texts: bool,
        vectors: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyPrepared> {
        let vectors = vectors
            .map(|v| Matrix::extract(py, v, "vectors"))
            .transpose()?;
        let data = vectors.as_ref().map(Matrix::as_slice);
        let n = args::reserved(rows);
        let mut ids = Vec::with_capacity(n);
        let mut words = Vec::with_capacity(if texts { n } else { 0 });
        let mut attrs = Vec::with_capacity(n);
        let mut metadata = Vec::with_capacity(n);
        let mut reader = rows::Reader::default();
        for (i, row) in rows.try_iter()?.enumerate() {
            let (id, text, a, meta) = reader.attrs(py, i, &row?, texts)?;
            ids.push(id);
            words.extend(text);
            attrs.push(a);
            metadata.push(meta);
        }
        let prepared = detach(py, || {
            for (i, (a, meta)) in attrs.iter_mut().zip(&metadata).enumerate() {
                a.metadata = flatten_metadata(meta)
                    .map_err(|e| Error::invalid(format!("record {i}: {e}")))?;
            }
            self.inner.read().prepare(Batch {
                ids: &ids,
                texts: texts.then_some(words.as_slice()),
                vectors: data,
                attrs: &attrs,
            })
        })?;
        Ok(PyPrepared {
            inner: Mutex::new(Some(prepared)),
        })
    }

    /// Inserts a batch from `prepare` (once).
    fn apply(&self, py: Python<'_>, batch: &PyPrepared) -> PyResult<()> {
        let Some(prepared) = batch.inner.lock().take() else {
            return Err(invalid(py, "this prepared batch was already applied"));
        };
        detach(py, || self.write(|e| e.apply(prepared)))
    }

    /// Removes ids; unknown ids raise UnknownIdError (removing nothing)
    /// unless `missing_ok`. Returns how many were removed.
    #[pyo3(signature = (ids, missing_ok = false))]
    fn remove(&self, py: Python<'_>, ids: &Bound<'_, PyAny>, missing_ok: bool) -> PyResult<usize> {
        let ids = convert::ids(py, ids, "ids")?;
        detach(py, || self.write(|e| e.remove(&ids, missing_ok)))
    }

    /// Links up to `max` parked vectors into the graph, and with `budget`
    /// (seconds) more batches of `max` until that time has passed; returns
    /// how many remain.
    #[pyo3(signature = (max = 256, budget = 0.0))]
    fn index_pending(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::max)] max: usize,
        budget: f64,
    ) -> PyResult<usize> {
        let budget = Duration::try_from_secs_f64(budget)
            .map_err(|_| invalid(py, format!("budget must be >= 0 seconds, got {budget}")))?;
        detach(py, || {
            if self.parked.load(Ordering::Acquire) == 0 {
                return Ok(0);
            }
            // Searches run while the batches link; see `index_pending_shared`.
            Engine::index_pending_for(self.inner.raw(), max, budget, |left| {
                self.parked.store(left, Ordering::Release)
            })
        })
    }

    /// Asks the kernel to back at most `budget` more bytes of the buffers a
    /// search reads with huge pages (see `memlane_core::pages`); returns how
    /// many bytes are left to ask for. Searches run meanwhile; a writer
    /// waits for the step.
    fn settle_pages(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::budget)] budget: usize,
    ) -> PyResult<usize> {
        detach(py, || {
            let engine = self.inner.read();
            Ok(self.pages.lock().step(&engine.regions(), budget))
        })
    }

    /// Vectors waiting to be linked into the graph.
    fn pending(&self) -> usize {
        self.parked.load(Ordering::Acquire)
    }

    /// The text to embed for the query `text` searched with `request`: without
    /// the names of the speakers of the records it admits (less those expired
    /// at `now` with `expiring`, as `search` leaves them out), where the
    /// request's speaker pass weighs them; None: `text` as it is.
    #[pyo3(signature = (request, text, *, now, expiring = false))]
    fn vector_text(
        &self,
        py: Python<'_>,
        request: &PySearchRequest,
        text: String,
        now: f64,
        expiring: bool,
    ) -> PyResult<Option<String>> {
        if !request.options.weighs_speakers() {
            return Ok(None);
        }
        let admits = &request.options.admits;
        detach(py, || {
            let engine = self.inner.read();
            let admitted = || engine.build_conditions(admits, expiring.then_some(now));
            Ok(engine.vector_text(&text, admitted))
        })
    }

    /// Starts retrieving, on a pool thread, the BM25 list a hybrid search of
    /// `text` with `request` (and `now`, `expiring`, `defaults`, `dates`, as
    /// `search` takes them) will take once its vector is known; the caller
    /// embeds the text meanwhile. None for another mode.
    #[pyo3(signature = (
        request, text, *, now, expiring = false, defaults = None, dates = Vec::new(),
    ))]
    #[allow(clippy::too_many_arguments)]
    fn search_ahead(
        &self,
        py: Python<'_>,
        request: &PySearchRequest,
        text: &Bound<'_, PyAny>,
        now: f64,
        expiring: bool,
        defaults: Option<&PySearchRequest>,
        dates: Vec<(f64, f64)>,
    ) -> PyResult<Option<PySearchAhead>> {
        if request.options.mode != Mode::Hybrid {
            return Ok(None);
        }
        let asked = Asked {
            options: request.options.clone(),
            defaults: defaults.map_or_else(SearchOptions::default, |d| d.options.clone()),
            text: search::query(py, text)?.to_owned(),
            dates,
            now,
            expiring,
        };
        Ok(Some(PySearchAhead::start(Arc::clone(&self.inner), asked)))
    }

    /// One query with `request`'s options over the store's `defaults`, among
    /// the records it admits: (ids, final scores, explain), explain a dict per
    /// hit (see `SearchHit.explain`) when the request asks for it, else None.
    /// `now` is the time of the access recorded (unix seconds), and with
    /// `expiring` the time the records expired by are left out; `dates` the
    /// intervals `(start, end)` of the dates the query's text names; `ahead` its
    /// BM25 list, retrieved while its vector was made (`search_ahead`).
    #[pyo3(signature = (
        request, text = None, vector = None, *, now, expiring = false, defaults = None,
        dates = Vec::new(), touch = true, ahead = None,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn search<'py>(
        &self,
        py: Python<'py>,
        request: &PySearchRequest,
        text: Option<&Bound<'py, PyAny>>,
        vector: Option<&Bound<'py, PyAny>>,
        now: f64,
        expiring: bool,
        defaults: Option<&PySearchRequest>,
        dates: Vec<(f64, f64)>,
        touch: bool,
        ahead: Option<&PySearchAhead>,
    ) -> PyResult<Found<'py>> {
        let text = text.map(|t| search::query(py, t)).transpose()?;
        let q = vector
            .map(|v| Matrix::extract(py, v, "query vector"))
            .transpose()?;
        if q.as_ref().is_some_and(|q| q.rows() != 1) {
            return Err(invalid(py, "the query vector must be a single vector"));
        }
        let qv = q.as_ref().map(Matrix::as_slice);
        let store = SearchOptions::default();
        let defaults = defaults.map_or(&store, |d| &d.options);
        let options = &request.options;
        let (hits, versions): (Hits, Vec<(f64, f64)>) = detach(py, || {
            // Before the lock: the list is retrieved under a read lock of its own.
            let list = ahead.and_then(PySearchAhead::take);
            let engine = self.inner.read();
            let admitted = engine.build_conditions(&options.admits, expiring.then_some(now));
            let mut req = options.request(defaults, text, qv, &dates, &admitted, now)?;
            req.touch &= touch;
            let hits = engine.search_with(&req, list)?;
            let versions = engine.versions(&hits.ids);
            Ok((hits, versions))
        })?;
        let explained = if request.options.explain {
            Some(
                hits.signals
                    .iter()
                    .map(|s| explained(py, s))
                    .collect::<PyResult<Vec<_>>>()?,
            )
        } else {
            None
        };
        Ok((hits.ids, hits.scores, explained, versions))
    }

    /// Ids of the records `admits` admits (every version; none: all), less those
    /// expired at `expire_at`, by creation time or by the column `sort` names
    /// (then by creation time and id).
    #[pyo3(signature = (
        admits = None, *, order = "desc", offset = 0, limit = usize::MAX, sort = "created_at",
        expire_at = None,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn ids_where<'py>(
        &self,
        py: Python<'py>,
        admits: Option<&PyAdmits>,
        order: &str,
        #[pyo3(from_py_with = args::offset)] offset: usize,
        #[pyo3(from_py_with = args::limit)] limit: usize,
        sort: &str,
        expire_at: Option<f64>,
    ) -> PyResult<Bound<'py, PyArray1<u64>>> {
        let sort = sort_of(py, order, sort)?;
        let admits = PyAdmits::of(admits);
        let ids = detach(py, || {
            let engine = self.inner.read();
            let admitted = engine.build_conditions(&admits, expire_at);
            Ok(engine.ids_sorted(admitted.filter.as_ref(), sort, offset, limit))
        })?;
        Ok(PyArray1::from_vec(py, ids))
    }

    /// `ids_where`'s ids, and the `updated_at` and `expires_at` (infinite for
    /// none) of each as it was admitted (read under the same lock), so that rows
    /// read afterwards can be told from versions written since.
    #[pyo3(signature = (
        admits = None, *, order = "desc", offset = 0, limit = usize::MAX, sort = "created_at",
        expire_at = None,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn versioned_ids_where<'py>(
        &self,
        py: Python<'py>,
        admits: Option<&PyAdmits>,
        order: &str,
        #[pyo3(from_py_with = args::offset)] offset: usize,
        #[pyo3(from_py_with = args::limit)] limit: usize,
        sort: &str,
        expire_at: Option<f64>,
    ) -> PyResult<Versioned<'py>> {
        let sort = sort_of(py, order, sort)?;
        let admits = PyAdmits::of(admits);
        let (ids, versions) = detach(py, || {
            let engine = self.inner.read();
            let admitted = engine.build_conditions(&admits, expire_at);
            let ids = engine.ids_sorted(admitted.filter.as_ref(), sort, offset, limit);
            let versions = engine.versions(&ids);
            Ok((ids, versions))
        })?;
        let (updated, expires): (Vec<f64>, Vec<f64>) = versions.into_iter().unzip();
        Ok((
            PyArray1::from_vec(py, ids),
            PyArray1::from_vec(py, updated),
            PyArray1::from_vec(py, expires),
        ))
    }

    /// How many records `admits` admits (see `count`) per table and scope: a
    /// list of (table, the six scope values, count), by table, the largest
    /// count first.
    #[pyo3(signature = (admits = None, *, expire_at = None))]
    fn groups(
        &self,
        py: Python<'_>,
        admits: Option<&PyAdmits>,
        expire_at: Option<f64>,
    ) -> PyResult<Vec<GroupRow>> {
        let admits = PyAdmits::of(admits);
        let groups = detach(py, || {
            let engine = self.inner.read();
            let admitted = engine.build_conditions(&admits, expire_at);
            Ok(engine.groups(admitted.filter.as_ref()))
        })?;
        Ok(groups
            .into_iter()
            .map(|g| (g.table, g.scope, g.count))
            .collect())
    }

    /// Number of records `admits` admits, superseded ones too (none: all), less
    /// those expired at `expire_at`.
    #[pyo3(signature = (admits = None, *, expire_at = None))]
    fn count(
        &self,
        py: Python<'_>,
        admits: Option<&PyAdmits>,
        expire_at: Option<f64>,
    ) -> PyResult<usize> {
        let admits = PyAdmits::of(admits);
        detach(py, || {
            let engine = self.inner.read();
            let admitted = engine.build_conditions(&admits, expire_at);
            Ok(engine.count(admitted.filter.as_ref()))
        })
    }

    /// For each row of `vectors`, the nearest record that `filters[groups[row]]`
    /// admits with a cosine similarity of at least `min_similarity`: ids (2**64 - 1
    /// where none) and similarities (NaN where none). One call for a batch.
    fn nearest<'py>(
        &self,
        py: Python<'py>,
        vectors: &Bound<'py, PyAny>,
        #[pyo3(from_py_with = args::groups)] groups: Vec<u32>,
        filters: Vec<Bound<'py, PyAny>>,
        min_similarity: f32,
    ) -> PyResult<Nearest<'py>> {
        let q = Matrix::extract(py, vectors, "vectors")?;
        let filters = filters
            .iter()
            .map(|f| convert::filter(py, f))
            .collect::<PyResult<Vec<_>>>()?;
        let data = q.as_slice();
        let found = detach(py, || {
            let engine = self.inner.read();
            let compiled: Vec<_> = filters.iter().map(|f| engine.bind_filter(f)).collect();
            engine.nearest(data, &groups, &compiled, min_similarity)
        })?;
        let ids = found.iter().map(|h| h.map_or(u64::MAX, |h| h.0)).collect();
        let sims = found.iter().map(|h| h.map_or(f32::NAN, |h| h.1)).collect();
        Ok((PyArray1::from_vec(py, ids), PyArray1::from_vec(py, sims)))
    }

    /// (matching records, records examined) for `filter`: how selective the
    /// postings made its evaluation.
    fn filter_stats(&self, py: Python<'_>, filter: &Bound<'_, PyAny>) -> PyResult<(usize, usize)> {
        let filter = convert::filter(py, filter)?;
        detach(py, || {
            let engine = self.inner.read();
            let s = engine.select(&engine.bind_filter(&filter));
            Ok((s.slots.len(), s.examined))
        })
    }

    /// Records an access of `ids` at `now` (last_accessed_at, access_count).
    fn touch(&self, py: Python<'_>, ids: &Bound<'_, PyAny>, now: f64) -> PyResult<()> {
        // As `search` refuses it: a NaN or infinite access time would sort and age
        // the records it touched wrongly from then on.
        if !now.is_finite() {
            return Err(invalid(py, "now must be a finite time"));
        }
        let ids = convert::ids(py, ids, "ids")?;
        detach(py, || {
            self.inner.read().touch(&ids, now);
            Ok(())
        })
    }

    /// The unit vector of `id`, or None if it has none.
    fn vector<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = args::id)] id: u64,
    ) -> PyResult<Option<Bound<'py, PyArray1<f32>>>> {
        let v = self.peek(py, |e| e.vector(id))?;
        Ok(v.map(|v| PyArray1::from_vec(py, v)))
    }

    /// Gives back the vectors a loaded snapshot left out, as the database
    /// keeps them: `rows` holds `(id, blob)` pairs (see `unblobs`). Ids whose
    /// vector is not awaited, and rows the index would refuse (their ids stay
    /// awaiting), are ignored; a damaged blob raises `CorruptFileError`.
    fn fill(&self, py: Python<'_>, rows: &Bound<'_, PyAny>) -> PyResult<()> {
        let Some(dim) = self.peek(py, Engine::dim)? else {
            return Ok(());
        };
        let stored = Stored::rows(py, rows, dim)?;
        detach(py, || {
            let vectors = stored.decode(dim)?;
            self.write(|e| e.fill(&stored.ids, &vectors))
        })
    }

    /// Fills the vectors the snapshot left out from an embedded store's vector
    /// file, read up to byte `end` (what the database records).
    fn fill_log(
        &self,
        py: Python<'_>,
        path: PathBuf,
        #[pyo3(from_py_with = args::end)] end: u64,
    ) -> PyResult<()> {
        detach(py, || self.write(|e| e.fill_log(&path, end)))
    }

    /// Ids whose vector the snapshot left out and no `fill` gave back:
    /// vector searches raise while there are any.
    fn awaiting<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArray1<u64>>> {
        let ids = self.peek(py, Engine::awaiting)?;
        Ok(PyArray1::from_vec(py, ids))
    }

    /// Live ids in slot order.
    fn ids<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArray1<u64>>> {
        let ids = detach(py, || Ok(self.inner.read().ids()))?;
        Ok(PyArray1::from_vec(py, ids))
    }

    /// Writes a snapshot reflecting change `seq` of the caller's history
    /// `history` (0: none; `load` gives it back) into directory `root`; with
    /// `vectors`, its graph keeps the live vectors (see `load`).
    #[pyo3(signature = (root, seq, vectors = true, history = 0))]
    fn save(
        &self,
        py: Python<'_>,
        root: PathBuf,
        #[pyo3(from_py_with = args::seq)] seq: u64,
        vectors: bool,
        #[pyo3(from_py_with = history_arg)] history: u64,
    ) -> PyResult<()> {
        // An upgradable read: searches go on, but no batch is half linked.
        detach(py, || {
            self.inner
                .upgradable_read()
                .save(&root, seq, history, vectors)
        })
    }

    /// Loads the newest snapshot under `root`: (engine, seq, history). The
    /// live vectors of a graph saved without them await `fill` (see
    /// `awaiting`). BM25's `k1` and `b` are the caller's, as at `new`, not
    /// the snapshot's.
    #[staticmethod]
    #[pyo3(signature = (root, *, k1 = None, b = None))]
    fn load(
        py: Python<'_>,
        root: PathBuf,
        k1: Option<f64>,
        b: Option<f64>,
    ) -> PyResult<(Self, u64, u64)> {
        let params = bm25_params(k1, b).map_err(|e| to_py(py, e))?;
        let (mut engine, seq, history) = detach(py, || Engine::load(&root))?;
        engine.set_bm25_params(params);
        Ok((PyEngine::wrap(engine), seq, history))
    }

    /// BM25's `(k1, b)`.
    #[getter]
    fn bm25_params(&self, py: Python<'_>) -> PyResult<(f64, f64)> {
        self.peek(py, |e| {
            let p = e.bm25_params();
            (p.k1, p.b)
        })
    }

    #[getter]
    fn dim(&self, py: Python<'_>) -> PyResult<Option<usize>> {
        self.peek(py, Engine::dim)
    }

    #[getter]
    fn precision(&self, py: Python<'_>) -> PyResult<Option<&'static str>> {
        self.peek(py, |e| e.precision().map(Precision::name))
    }

    #[getter]
    fn ef(&self, py: Python<'_>) -> PyResult<Option<usize>> {
        self.peek(py, Engine::ef)
    }

    /// Sets the vector index's search beam width.
    fn set_ef(&self, py: Python<'_>, #[pyo3(from_py_with = args::ef)] ef: usize) -> PyResult<()> {
        detach(py, || self.write(|e| e.set_ef(ef)))
    }

    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        self.peek(py, Engine::len)
    }

    fn __contains__(&self, py: Python<'_>, id: &Bound<'_, PyAny>) -> PyResult<bool> {
        match id.extract::<u64>() {
            Ok(id) => self.peek(py, |e| e.contains(id)),
            Err(_) => Ok(false),
        }
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        self.peek(py, |e| {
            format!(
                "Engine(dim={:?}, len={}, pending={})",
                e.dim(),
                e.len(),
                e.pending()
            )
        })
    }
}
