//! `memlane._core.Engine`: the Python face of `memlane_core::engine::Engine`,
//! the index behind `memlane.Memory`. Every call that does real work releases
//! the GIL; arrays come back as numpy without copies.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use memlane_core::bm25::{AnalyzerConfig, Bm25Params, Language, Stopwords};
use memlane_core::engine::{
    flatten_metadata, Attrs, Batch, Engine, EngineConfig, Filter, Hits, JsonValue, Mode, Order,
    Prepared, SearchRequest,
};
use memlane_core::fusion::{self, Fusion};
use memlane_core::hnsw::{Params, Precision};
use memlane_core::scoring::{self, Weights};
use memlane_core::Error;
use numpy::{PyArray1, PyArray2};
use parking_lot::{Mutex, RwLock};
use pyo3::prelude::*;

use crate::convert::{self, Matrix};
use crate::errors::{detach, invalid, to_py};
use crate::hnsw::matrix;

/// Number of explain columns: bm25, bm25_rank, cosine, vector_rank,
/// relevance, decay, importance, recency, score.
const EXPLAIN_COLS: usize = 10;

/// A checked, analysed batch of records from `Engine.prepare`.
#[pyclass(module = "memlane._core", name = "PreparedBatch", frozen)]
pub struct PyPrepared {
    inner: Mutex<Option<Prepared>>,
}

/// The memory engine: records' attributes, a BM25 index and (with `dim`) an
/// HNSW graph under one lock. Thread-safe: searches run in parallel.
#[pyclass(module = "memlane._core", name = "Engine", frozen)]
pub struct PyEngine {
    inner: RwLock<Engine>,
    /// `Engine::pending`, readable without waiting for a writer's lock.
    parked: AtomicUsize,
}

impl PyEngine {
    fn wrap(engine: Engine) -> Self {
        let parked = AtomicUsize::new(engine.pending());
        PyEngine {
            inner: RwLock::new(engine),
            parked,
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
        let mut engine = self.inner.write();
        let out = f(&mut engine);
        self.parked.store(engine.pending(), Ordering::Release);
        out
    }
}

/// A filter dict as the JSON value the engine compiles (checked there, once).
fn filter_arg(py: Python<'_>, filter: Option<&Bound<'_, PyAny>>) -> PyResult<Option<JsonValue>> {
    filter
        .filter(|f| !f.is_none())
        .map(|f| convert::filter(py, f))
        .transpose()
}

fn compile(engine: &Engine, filter: Option<&JsonValue>) -> memlane_core::Result<Option<Filter>> {
    filter.map(|f| engine.compile_filter(f)).transpose()
}

fn check_len(what: &str, got: usize, n: usize) -> memlane_core::Result<()> {
    if got != n {
        return Err(Error::invalid(format!(
            "{what} has {got} entries, expected {n} (one per id)"
        )));
    }
    Ok(())
}

/// The record columns `Engine.prepare` takes, in this order (the names are
/// those of `memlane.schema.Row`, which checks them at import).
pub const COLUMNS: [&str; 19] = [
    "tbl",
    "type",
    "agent_id",
    "user_id",
    "room_id",
    "world_id",
    "session_id",
    "namespace",
    "importance",
    "evergreen",
    "created_at",
    "updated_at",
    "last_accessed_at",
    "metadata",
    "id",
    "access_count",
    "valid_to",
    "expires_at",
    "recorded_at",
];

/// `Engine.nearest`'s ids and similarities.
type Nearest<'py> = (Bound<'py, PyArray1<u64>>, Bound<'py, PyArray1<f32>>);

/// One batch of records' attributes, column by column.
struct Columns {
    tbl: Vec<String>,
    kind: Vec<String>,
    scopes: Vec<Vec<Option<String>>>,
    importance: Vec<f32>,
    evergreen: Vec<i64>,
    created_at: Vec<f64>,
    updated_at: Vec<f64>,
    last_accessed_at: Vec<f64>,
    metadata: Vec<String>,
    id: Vec<String>,
    access_count: Vec<u64>,
    valid_to: Vec<Option<f64>>,
    expires_at: Vec<Option<f64>>,
    recorded_at: Vec<f64>,
}

impl Columns {
    fn extract(py: Python<'_>, columns: &[Bound<'_, PyAny>], n: usize) -> PyResult<Self> {
        if columns.len() != COLUMNS.len() {
            return Err(invalid(
                py,
                format!(
                    "columns must be {} sequences ({}), got {}",
                    COLUMNS.len(),
                    COLUMNS.join(", "),
                    columns.len()
                ),
            ));
        }
        macro_rules! col {
            ($name:expr, $t:ty) => {{
                let name: &str = $name;
                let at = COLUMNS.iter().position(|c| *c == name).unwrap_or(0);
                let values = columns[at].extract::<Vec<$t>>().map_err(|e| {
                    invalid(
                        py,
                        format!("column {name:?} has a value of the wrong type: {e}"),
                    )
                })?;
                check_len(&format!("column {name:?}"), values.len(), n)
                    .map_err(|e| to_py(py, e))?;
                values
            }};
        }
        Ok(Columns {
            tbl: col!("tbl", String),
            kind: col!("type", String),
            scopes: vec![
                col!("agent_id", Option<String>),
                col!("user_id", Option<String>),
                col!("room_id", Option<String>),
                col!("world_id", Option<String>),
                col!("session_id", Option<String>),
                col!("namespace", Option<String>),
            ],
            importance: col!("importance", f32),
            evergreen: col!("evergreen", i64),
            created_at: col!("created_at", f64),
            updated_at: col!("updated_at", f64),
            last_accessed_at: col!("last_accessed_at", f64),
            metadata: col!("metadata", String),
            id: col!("id", String),
            access_count: col!("access_count", u64),
            valid_to: col!("valid_to", Option<f64>),
            expires_at: col!("expires_at", Option<f64>),
            recorded_at: col!("recorded_at", f64),
        })
    }
}

#[pymethods]
impl PyEngine {
    #[new]
    #[pyo3(signature = (
        dim = None, *, m = 16, ef_construction = 100, ef = 64, seed = 0, precision = "f32",
        k1 = 1.2, b = 0.75, language = "english", stopwords = true, stemming = true,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        dim: Option<usize>,
        m: usize,
        ef_construction: usize,
        ef: usize,
        seed: u64,
        precision: &str,
        k1: f64,
        b: f64,
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
                bm25: Bm25Params::new(k1, b)?,
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

    /// Checks and analyses a batch without changing the engine: `columns` holds
    /// one sequence per name of [`COLUMNS`], in that order, one entry per id.
    fn prepare(
        &self,
        py: Python<'_>,
        ids: &Bound<'_, PyAny>,
        texts: Option<Vec<String>>,
        vectors: Option<&Bound<'_, PyAny>>,
        columns: Vec<Bound<'_, PyAny>>,
    ) -> PyResult<PyPrepared> {
        let ids = convert::ids(py, ids, "ids")?;
        let vectors = vectors
            .map(|v| Matrix::extract(py, v, "vectors"))
            .transpose()?;
        let data = vectors.as_ref().map(Matrix::as_slice);
        let n = ids.len();
        let cols = Columns::extract(py, &columns, n)?;
        let prepared = detach(py, || {
            let mut attrs = Vec::with_capacity(n);
            for i in 0..n {
                let meta = flatten_metadata(&cols.metadata[i])
                    .map_err(|e| Error::invalid(format!("record {i}: {e}")))?;
                attrs.push(Attrs {
                    key: Some(cols.id[i].clone()),
                    table: cols.tbl[i].clone(),
                    kind: cols.kind[i].clone(),
                    scope: std::array::from_fn(|f| cols.scopes[f][i].clone()),
                    importance: cols.importance[i],
                    evergreen: cols.evergreen[i] != 0,
                    created_at: cols.created_at[i],
                    updated_at: cols.updated_at[i],
                    last_accessed_at: cols.last_accessed_at[i],
                    access_count: cols.access_count[i],
                    valid_to: cols.valid_to[i],
                    expires_at: cols.expires_at[i],
                    recorded_at: cols.recorded_at[i],
                    metadata: meta,
                });
            }
            self.inner.read().prepare(Batch {
                ids: &ids,
                texts: texts.as_deref(),
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
    fn index_pending(&self, py: Python<'_>, max: usize, budget: f64) -> PyResult<usize> {
        let budget = Duration::try_from_secs_f64(budget)
            .map_err(|_| invalid(py, format!("budget must be >= 0 seconds, got {budget}")))?;
        detach(py, || {
            if self.parked.load(Ordering::Acquire) == 0 {
                return Ok(0);
            }
            // Searches run while the batches link; see `index_pending_shared`.
            Engine::index_pending_for(&self.inner, max, budget, |left| {
                self.parked.store(left, Ordering::Release)
            })
        })
    }

    /// Vectors waiting to be linked into the graph.
    fn pending(&self) -> usize {
        self.parked.load(Ordering::Acquire)
    }

    /// One query: (ids, final scores, explain) with explain an (n, 10) float
    /// array (bm25, bm25_rank, cosine, vector_rank, relevance, importance,
    /// recency, age_hours, boost, score; NaN where a signal is absent) or None.
    #[pyo3(signature = (
        text = None, vector = None, *, mode = "hybrid", filter = None, k = 10,
        candidates = 50, fusion = "weighted", rrf_k = fusion::DEFAULT_RRF_K,
        alpha = fusion::DEFAULT_ALPHA, w_relevance = None, w_importance = None,
        w_recency = None, decay = None,
        recency_half_life = scoring::DEFAULT_RECENCY_HALF_LIFE_HOURS, now = 0.0,
        threshold = None, min_similarity = None, explain = false, touch = false,
        current_only = false,
    ))]
    #[allow(clippy::too_many_arguments, clippy::type_complexity)]
    fn search<'py>(
        &self,
        py: Python<'py>,
        text: Option<String>,
        vector: Option<&Bound<'py, PyAny>>,
        mode: &str,
        filter: Option<&Bound<'py, PyAny>>,
        k: i64,
        candidates: i64,
        fusion: &str,
        rrf_k: f64,
        alpha: f64,
        w_relevance: Option<f64>,
        w_importance: Option<f64>,
        w_recency: Option<f64>,
        decay: Option<f64>,
        recency_half_life: f64,
        now: f64,
        threshold: Option<f64>,
        min_similarity: Option<f64>,
        explain: bool,
        touch: bool,
        current_only: bool,
    ) -> PyResult<(
        Bound<'py, PyArray1<u64>>,
        Bound<'py, PyArray1<f64>>,
        Option<Bound<'py, PyArray2<f64>>>,
    )> {
        if k <= 0 {
            return Err(invalid(py, format!("k must be at least 1, got {k}")));
        }
        if candidates <= 0 {
            return Err(invalid(
                py,
                format!("candidates must be at least 1, got {candidates}"),
            ));
        }
        let q = vector
            .map(|v| Matrix::extract(py, v, "query vector"))
            .transpose()?;
        if q.as_ref().is_some_and(|q| q.rows() != 1) {
            return Err(invalid(py, "the query vector must be a single vector"));
        }
        let qv = q.as_ref().map(Matrix::as_slice);
        let filter = filter_arg(py, filter)?;
        let hits: Hits = detach(py, || {
            let mode = Mode::parse(mode)?;
            let fusion = match fusion {
                "rrf" => Fusion::rrf(rrf_k)?,
                "weighted" => Fusion::weighted(alpha)?,
                other => {
                    return Err(Error::invalid(format!(
                        "fusion must be one of {{'rrf', 'weighted'}}, got {other:?}"
                    )))
                }
            };
            let weights = Weights::resolve(w_relevance, w_importance, w_recency)?;
            let rate = scoring::rate(decay, recency_half_life)?;
            let engine = self.inner.read();
            let filter = compile(&engine, filter.as_ref())?;
            engine.search(&SearchRequest {
                text: text.as_deref(),
                vector: qv,
                mode,
                filter: filter.as_ref(),
                k: k as usize,
                candidates: candidates as usize,
                fusion,
                weights,
                rate,
                age_from: scoring::AgeFrom::for_decay(decay),
                now,
                threshold,
                min_similarity,
                explain,
                touch,
                current_only,
            })
        })?;
        let explained = if explain {
            let opt32 = |v: Option<f32>| v.map_or(f64::NAN, f64::from);
            let rank = |v: Option<u32>| v.map_or(f64::NAN, f64::from);
            let mut data = Vec::with_capacity(hits.signals.len() * EXPLAIN_COLS);
            for s in &hits.signals {
                data.extend_from_slice(&[
                    opt32(s.bm25),
                    rank(s.bm25_rank),
                    opt32(s.cosine),
                    rank(s.vector_rank),
                    s.relevance,
                    s.importance,
                    s.recency,
                    s.age_hours,
                    s.boost,
                    s.score,
                ]);
            }
            Some(matrix(py, hits.signals.len(), EXPLAIN_COLS, data)?)
        } else {
            None
        };
        Ok((
            PyArray1::from_vec(py, hits.ids),
            PyArray1::from_vec(py, hits.scores),
            explained,
        ))
    }

    /// Ids of the records `filter` (a dict) admits, by creation time.
    #[pyo3(signature = (filter = None, *, order = "desc", offset = 0, limit = usize::MAX))]
    fn ids_where<'py>(
        &self,
        py: Python<'py>,
        filter: Option<&Bound<'py, PyAny>>,
        order: &str,
        offset: usize,
        limit: usize,
    ) -> PyResult<Bound<'py, PyArray1<u64>>> {
        let order = match order {
            "asc" => Order::CreatedAsc,
            "desc" => Order::CreatedDesc,
            other => {
                return Err(invalid(
                    py,
                    format!("order must be one of {{'asc', 'desc'}}, got {other:?}"),
                ))
            }
        };
        let filter = filter_arg(py, filter)?;
        let ids = detach(py, || {
            let engine = self.inner.read();
            let filter = compile(&engine, filter.as_ref())?;
            Ok(engine.ids_where(filter.as_ref(), order, offset, limit))
        })?;
        Ok(PyArray1::from_vec(py, ids))
    }

    /// Number of records `filter` (a dict) admits.
    #[pyo3(signature = (filter = None))]
    fn count(&self, py: Python<'_>, filter: Option<&Bound<'_, PyAny>>) -> PyResult<usize> {
        let filter = filter_arg(py, filter)?;
        detach(py, || {
            let engine = self.inner.read();
            let filter = compile(&engine, filter.as_ref())?;
            Ok(engine.count(filter.as_ref()))
        })
    }

    /// For each row of `vectors`, the nearest record that `filters[groups[row]]`
    /// admits with a cosine similarity of at least `min_similarity`: ids (2**64 - 1
    /// where none) and similarities (NaN where none). One call for a batch.
    fn nearest<'py>(
        &self,
        py: Python<'py>,
        vectors: &Bound<'py, PyAny>,
        groups: Vec<u32>,
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
            let compiled = filters
                .iter()
                .map(|f| engine.compile_filter(f))
                .collect::<memlane_core::Result<Vec<_>>>()?;
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
            let s = engine.select(&engine.compile_filter(&filter)?);
            Ok((s.slots.len(), s.examined))
        })
    }

    /// Records an access of `ids` at `now` (last_accessed_at, access_count).
    fn touch(&self, py: Python<'_>, ids: &Bound<'_, PyAny>, now: f64) -> PyResult<()> {
        let ids = convert::ids(py, ids, "ids")?;
        detach(py, || {
            self.inner.read().touch(&ids, now);
            Ok(())
        })
    }

    /// The unit vector of `id`, or None if it has none.
    fn vector<'py>(&self, py: Python<'py>, id: u64) -> PyResult<Option<Bound<'py, PyArray1<f32>>>> {
        let v = self.peek(py, |e| e.vector(id))?;
        Ok(v.map(|v| PyArray1::from_vec(py, v)))
    }

    /// Live ids in slot order.
    fn ids<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArray1<u64>>> {
        let ids = detach(py, || Ok(self.inner.read().ids()))?;
        Ok(PyArray1::from_vec(py, ids))
    }

    /// Writes a snapshot reflecting change `seq` into directory `root`.
    fn save(&self, py: Python<'_>, root: PathBuf, seq: u64) -> PyResult<()> {
        // An upgradable read: searches go on, but no batch is half linked.
        detach(py, || self.inner.upgradable_read().save(&root, seq))
    }

    /// Loads the newest snapshot under `root`: (engine, seq).
    #[staticmethod]
    fn load(py: Python<'_>, root: PathBuf) -> PyResult<(Self, u64)> {
        let (engine, seq) = detach(py, || Engine::load(&root))?;
        Ok((PyEngine::wrap(engine), seq))
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
    fn set_ef(&self, py: Python<'_>, ef: usize) -> PyResult<()> {
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
