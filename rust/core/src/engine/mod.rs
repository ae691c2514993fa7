//! The memory engine: one BM25 index, one HNSW graph (when the store has
//! vectors) and the records' attributes, all keyed by the same u64 ids, so a
//! query is one call: filter, retrieve from both indexes, fuse, score.
//!
//! - [`records`]: attributes in slot-indexed columns with inverted postings.
//! - [`filter_syntax`]: the filter language, parsed and checked from any
//!   [`filter_syntax::Source`] without the records.
//! - [`filter`]: a parsed filter bound to the records, and its evaluation to a
//!   slot set.
//! - [`pending`]: vectors parked until a background caller links them.
//! - `nearest`: batch near-duplicate checks.
//! - [`order`]: pages sorted by a column, counts by table and scope.
//! - [`options`]: a search's options, checked once; `mode`: which retrievers
//!   it runs.
//! - `search`: the query path; [`crate::fusion`] and [`crate::scoring`] hold
//!   the formulas; `admission`: which records its retrievers may return.
//! - `retrievals`: what recent queries retrieved, reused until the engine
//!   changes; `search::ahead`: a hybrid search's BM25 list, retrieved while
//!   its query is embedded.
//! - `snapshot`: saving and loading the whole engine as one directory.
//!
//! Concurrency: methods that change the engine take `&mut self`; searches
//! take `&self` and may run in parallel under a readers-writer lock. Recording
//! an access is the one write a search makes, through an atomic column.

mod admission;
pub mod conditions;
pub mod filter;
pub mod filter_syntax;
mod mode;
mod nearest;
pub mod options;
pub mod order;
pub mod pending;
pub mod records;
mod retrievals;
mod search;
pub(crate) mod snapshot;
mod speakers;
pub mod when;
use speakers::SpeakerQuery;

pub use conditions::{Admitted, Conditions, Versions, UNIQUE_KEY};
pub use filter::{Filter, Selection};
pub use filter_syntax::Parsed as ParsedFilter;
pub use mode::Mode;
pub use options::{Given, SearchOptions};
pub use order::{Column, Group, Sort};
pub use records::{flatten_metadata, Attrs, RawValue, SCOPE_FIELDS};
pub use search::{Hits, SearchRequest, Signals, TextAhead};

use std::path::Path;
use std::time::{Duration, Instant};

use crate::blob;
use crate::bm25::{AnalyzerConfig, Bm25Index, Bm25Params, DocTerms};
use crate::error::{Error, Result};
use crate::hnsw::{row_scale, Grown, Hnsw, Metric, Params, Precision, Staged, PARALLEL_MIN_BATCH};
use crate::idmap::first_duplicate;
use crate::pages::Region;
use crate::vector_log;
use half::slice::HalfFloatSliceExt;
use parking_lot::{RwLock, RwLockUpgradableReadGuard, RwLockWriteGuard};
use pending::{normalised, Pending};
use records::{PostingKey, Records};
use retrievals::Retrievals;
use search::Retrieved;

/// Vectors `fill_log` stores per wave (the slots it hands out at once).
const FILL_LOG_WAVE: usize = 32_768;

#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Vector dimension; `None` for a text-only store.
    pub dim: Option<usize>,
    pub hnsw: Params,
    pub bm25: Bm25Params,
    pub analyzer: AnalyzerConfig,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            dim: None,
            hnsw: Params::default(),
            bm25: Bm25Params::MEMORIES,
            analyzer: AnalyzerConfig::default(),
        }
    }
}

pub struct Engine {
    records: Records,
    bm25: Bm25Index,
    hnsw: Option<Hnsw>,
    pending: Pending,
    /// Emptied by every `&mut self` method.
    retrievals: Retrievals<Retrieved>,
    /// The time words as the analyser makes them ([`when`]).
    time_words: when::TimeWords,
}

/// A batch of records to insert or replace.
pub struct Batch<'a> {
    pub ids: &'a [u64],
    /// Texts to index; `None` keeps the indexed text of existing records.
    pub texts: Option<&'a [String]>,
    /// Row-major vectors; `None` keeps the vectors of existing records (new
    /// records then have none and are found by text only).
    pub vectors: Option<&'a [f32]>,
    pub attrs: &'a [Attrs],
}

/// A batch checked and analysed, ready for [`Engine::apply`]. Preparing takes
/// only `&self`, so the costly part runs before a write lock is taken.
pub struct Prepared {
    ids: Vec<u64>,
    docs: Option<Vec<DocTerms>>,
    /// Per record, how much of its text asks (with the texts).
    questions: Option<Vec<u8>>,
    /// Unit vectors in the form they are parked in (rounded to half floats
    /// for the f16 precisions), with their sign sketches: made in `prepare`,
    /// which runs without the engine's lock, so `apply` only copies them.
    vectors: Option<(Vec<f32>, Vec<u64>)>,
    attrs: Vec<Attrs>,
}

/// A batch of parked vectors being linked (see [`Engine::index_pending_shared`]).
struct LinkJob {
    staged: Staged,
    /// How many parked vectors, the oldest, the batch holds.
    n: usize,
}

/// How [`Engine::ids_where`] orders its result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    CreatedAsc,
    CreatedDesc,
}

impl Engine {
    pub fn new(config: EngineConfig) -> Result<Self> {
        let hnsw = match config.dim {
            Some(dim) => Some(Hnsw::new(dim, Metric::Cosine, config.hnsw)?),
            None => None,
        };
        let bm25 = Bm25Index::new(config.bm25, config.analyzer);
        Ok(Engine {
            records: Records::default(),
            time_words: when::TimeWords::new(bm25.analyzer()),
            bm25,
            pending: Pending::new(config.dim.unwrap_or(0)),
            hnsw,
            retrievals: Retrievals::default(),
        })
    }

    pub fn dim(&self) -> Option<usize> {
        self.hnsw.as_ref().map(Hnsw::dim)
    }

    /// How the vector index stores vectors (None without a vector space).
    pub fn precision(&self) -> Option<Precision> {
        self.hnsw.as_ref().map(|h| h.params().precision)
    }

    /// The vector index's search beam width (None without a vector space).
    pub fn ef(&self) -> Option<usize> {
        self.hnsw.as_ref().map(|h| h.params().ef)
    }

    /// Sets the search beam width: a search-time setting, so it may differ
    /// from the one a snapshot was saved with.
    pub fn set_ef(&mut self, ef: usize) -> Result<()> {
        self.retrievals.clear();
        match self.hnsw.as_mut() {
            Some(h) => h.set_ef(ef),
            None => Ok(()),
        }
    }

    pub fn bm25_params(&self) -> Bm25Params {
        self.bm25.params()
    }

    /// Sets BM25's `k1` and `b`: they weigh the statistics at query time, so,
    /// like the beam, they may differ from those a snapshot was saved with.
    pub fn set_bm25_params(&mut self, params: Bm25Params) {
        self.retrievals.clear();
        self.bm25.set_params(params);
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    pub fn contains(&self, id: u64) -> bool {
        self.records.contains(id)
    }

    /// The buffers a search reads, in the same order every time, for
    /// [`crate::pages::Settler::step`].
    pub fn regions(&self) -> Vec<Region> {
        let mut out = Vec::new();
        self.records.regions(&mut out);
        if let Some(hnsw) = &self.hnsw {
            hnsw.regions(&mut out);
        }
        out
    }

    /// Vectors waiting to be linked into the graph.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Whether `id` has a vector (linked or parked).
    pub fn has_vector(&self, id: u64) -> bool {
        self.pending.contains(id) || self.hnsw.as_ref().is_some_and(|h| h.contains(id))
    }

    /// The unit vector of `id`, if it has one.
    pub fn vector(&self, id: u64) -> Option<Vec<f32>> {
        if let Some(v) = self.pending.get(id) {
            return Some(v.to_vec());
        }
        self.hnsw.as_ref().and_then(|h| h.vector(id).ok())
    }

    /// Gives back the vectors the snapshot left out (its graph holds only
    /// those of removed slots; the database holds the rest): row `i` of
    /// `vectors` is the vector of `ids[i]`. Ids whose vector is not awaited
    /// are ignored (see [`Hnsw::fill`]), and so are rows the index would
    /// refuse: their ids stay awaiting.
    pub fn fill(&mut self, ids: &[u64], vectors: &[f32]) -> Result<()> {
        self.retrievals.clear();
        let Some(h) = self.hnsw.as_ref() else {
            return Ok(());
        };
        let dim = h.dim();
        if vectors.len() != ids.len() * dim {
            return Err(Error::DimensionMismatch {
                expected: dim,
                got: vectors
                    .len()
                    .checked_div(ids.len())
                    .unwrap_or(vectors.len()),
            });
        }
        let halve = self.halves();
        let (awaited, data) = fill_values(ids, vectors, h.awaited_rows(ids), dim, halve);
        match self.hnsw.as_mut() {
            Some(h) => h.fill_rows(&awaited, data),
            None => Ok(()),
        }
    }

    /// Gives back the vectors the snapshot left out from an embedded store's
    /// vector file at `path`, read up to `end` ([`crate::vector_log`]): the
    /// newest entry of each awaited id, every entry's checksum checked. On
    /// an error (a damaged entry) the engine may hold some of them already:
    /// the open that calls this fails and gives it up.
    pub fn fill_log(&mut self, path: &Path, end: u64) -> Result<()> {
        let Some(h) = self.hnsw.as_ref() else {
            return Ok(());
        };
        let wanted = h.awaiting();
        if wanted.is_empty() {
            return Ok(());
        }
        let map = vector_log::map(path)?;
        let end = usize::try_from(end).unwrap_or(usize::MAX);
        let found = vector_log::newest(path, &map, end, &wanted)?;
        self.retrievals.clear();
        let halve = self.halves();
        let Some(h) = self.hnsw.as_mut() else {
            return Ok(());
        };
        // Each vector decoded, checked, scaled, rounded and normalised where
        // it is stored, on every core, as `fill_values` and a staged batch
        // would make it: no copy of the store's vectors in f32, whose pages
        // cost more than the arithmetic. In waves, so the slots handed out
        // at once stay few. The newest entries' rowids do not repeat.
        for wave in found.chunks(FILL_LOG_WAVE) {
            h.fill_with(
                wave.len(),
                |i| wave[i].0,
                |i, v| {
                    blob::decode_row(wave[i].1, v)?;
                    Ok(parked_value(v, halve))
                },
            )?;
        }
        // The file's table of entries, freed, would otherwise stay resident.
        crate::heap::give_back();
        Ok(())
    }

    /// Ids whose vector the snapshot left out and no [`Engine::fill`] gave
    /// back, in slot order: vector searches fail while there are any.
    pub fn awaiting(&self) -> Vec<u64> {
        self.hnsw.as_ref().map_or_else(Vec::new, Hnsw::awaiting)
    }

    /// The store's ids, in slot order.
    pub fn ids(&self) -> Vec<u64> {
        self.records
            .live_slots()
            .map(|s| self.records.id(s))
            .collect()
    }

    pub fn parse_filter(&self, json: &str) -> Result<Filter> {
        Filter::parse(json, &self.records)
    }

    /// `parsed` bound to the records, ready to evaluate.
    pub fn bind_filter(&self, parsed: &ParsedFilter) -> Filter {
        Filter::bind(parsed, &self.records)
    }

    /// What `conditions` admit, the records expired at `expire_at` left out.
    pub fn build_conditions(&self, conditions: &Conditions, expire_at: Option<f64>) -> Admitted {
        conditions.build(&self.records, expire_at)
    }

    pub fn select(&self, filter: &Filter) -> Selection {
        filter.select(&self.records)
    }

    /// The text to embed for a query that names speakers of the records a
    /// search admits (`admitted`: their names written with a capital, as in
    /// "What did Caroline paint?"): the query without those names, which the
    /// speaker pass weighs instead (measured on LoCoMo: `benches/README.md`).
    /// None when it names none. A speaker of other scopes only is no name
    /// here: what one scope asks never depends on another's turns.
    ///
    /// `admitted` is built at the first name found (most questions name none).
    pub fn vector_text(&self, text: &str, admitted: impl Fn() -> Admitted) -> Option<String> {
        let r = &self.records;
        let built = std::cell::OnceCell::new();
        let spoken = |id: u32| {
            let admitted = built.get_or_init(&admitted);
            let turns = r.postings(&PostingKey::Speaker(id));
            let current = |s: u32| !(admitted.current_only && r.is_closed(s));
            match admitted.filter.as_ref().filter(|f| !f.is_all()) {
                Some(f) => f.matches_any(r, turns, current),
                None => turns.iter().any(|&s| current(s)),
            }
        };
        // Only names the speaker pass matches: a name the analyzer drops (a
        // speaker called "Will" or "A") would count nowhere.
        let mut pass: Option<SpeakerQuery<'_>> = None;
        r.names.without_names(text, |id| {
            pass.get_or_insert_with(|| SpeakerQuery::new(self.bm25.analyzer(), text))
                .names(id, r.strings.resolve(id))
                && spoken(id)
        })
    }

    /// The version of each of `ids` as the engine holds it: its `updated_at`,
    /// which every rewrite changes, and its `expires_at` (infinite for none),
    /// which a renewal changes alone; NaN for an id it does not hold. Read
    /// under the same lock as a search or listing, it tells which version of
    /// each record was judged, so that a caller who reads the rows afterwards
    /// can tell one rewritten in between from the one judged.
    pub fn versions(&self, ids: &[u64]) -> Vec<(f64, f64)> {
        let r = &self.records;
        ids.iter()
            .map(|&id| {
                r.slot(id).map_or((f64::NAN, f64::NAN), |s| {
                    (r.updated_at[s as usize], r.expires_at[s as usize])
                })
            })
            .collect()
    }

    /// Ids of the records `filter` admits, by creation time (ties by id),
    /// skipping `offset` and returning at most `limit`
    /// ([`ids_sorted`](Self::ids_sorted) by another column).
    pub fn ids_where(
        &self,
        filter: Option<&Filter>,
        order: Order,
        offset: usize,
        limit: usize,
    ) -> Vec<u64> {
        self.ids_sorted(filter, Sort::from(order), offset, limit)
    }

    /// Checks a batch and does the costly work (text analysis, vector
    /// normalisation) without changing anything.
    pub fn prepare(&self, batch: Batch<'_>) -> Result<Prepared> {
        let n = batch.ids.len();
        if batch.attrs.len() != n {
            return Err(Error::invalid(format!(
                "got {n} ids but {} attribute rows",
                batch.attrs.len()
            )));
        }
        if let Some(id) = first_duplicate(batch.ids) {
            return Err(Error::invalid(format!(
                "id {id} appears twice in one batch"
            )));
        }
        for (row, a) in batch.attrs.iter().enumerate() {
            a.validate(row)?;
        }
        match batch.texts {
            Some(t) if t.len() != n => {
                return Err(Error::invalid(format!("got {n} ids but {} texts", t.len())))
            }
            Some(_) => {}
            None => {
                if let Some(&id) = batch.ids.iter().find(|&&id| !self.contains(id)) {
                    return Err(Error::UnknownId(id));
                }
            }
        }
        let vectors = match (batch.vectors, self.dim()) {
            (None, _) => None,
            (Some(_), None) => {
                return Err(Error::invalid(
                    "this store has no vector space (it was created without an embedder)",
                ))
            }
            (Some(v), Some(dim)) => {
                if v.len() != n * dim {
                    return Err(Error::DimensionMismatch {
                        expected: dim,
                        got: v.len().checked_div(n).unwrap_or(v.len()),
                    });
                }
                let unit = self.parked(v, dim)?;
                let sketches = Pending::sketches(&unit, dim);
                Some((unit, sketches))
            }
        };
        Ok(Prepared {
            ids: batch.ids.to_vec(),
            docs: batch.texts.map(|t| self.bm25.analyze_batch(t)),
            questions: batch
                .texts
                .map(|t| t.iter().map(|t| records::question_share(t)).collect()),
            vectors,
            attrs: batch.attrs.to_vec(),
        })
    }

    /// `v` (rows of `dim`) as a batch parks them: at unit length, and
    /// through f16 where the index ranks f16 records, so a parked record is
    /// scored as the index will score it once linked and its score does not
    /// move when the background pass links it.
    fn parked(&self, v: &[f32], dim: usize) -> Result<Vec<f32>> {
        let mut unit = normalised(v, dim, "vector")?;
        if self.halves() {
            round_to_f16(&mut unit);
        }
        Ok(unit)
    }

    /// Whether the index ranks f16 records (see [`Engine::parked`]).
    fn halves(&self) -> bool {
        self.hnsw
            .as_ref()
            .is_some_and(|h| matches!(h.params().precision, Precision::F16 | Precision::Int8F16))
    }

    /// Applies a prepared batch. Vectors are parked for
    /// [`index_pending`](Self::index_pending).
    pub fn apply(&mut self, p: Prepared) -> Result<()> {
        self.retrievals.clear();
        if p.docs.is_none() {
            if let Some(&id) = p.ids.iter().find(|&&id| !self.contains(id)) {
                return Err(Error::UnknownId(id));
            }
        }
        if let Some(docs) = p.docs {
            self.bm25.insert_analyzed(&p.ids, docs)?;
        }
        for (i, (id, a)) in p.ids.iter().zip(&p.attrs).enumerate() {
            let slot = self.records.insert(*id, a);
            if let Some(questions) = &p.questions {
                self.records.questions[slot as usize] = questions[i];
            }
        }
        if let (Some((vectors, sketches)), Some(hnsw)) = (p.vectors, self.hnsw.as_mut()) {
            let dim = hnsw.dim();
            let linked: Vec<u64> = p
                .ids
                .iter()
                .copied()
                .filter(|&id| hnsw.contains(id))
                .collect();
            if !linked.is_empty() {
                hnsw.remove(&linked)?;
            }
            let words = dim.div_ceil(64);
            for ((id, v), sketch) in p
                .ids
                .iter()
                .zip(vectors.chunks_exact(dim))
                .zip(sketches.chunks_exact(words))
            {
                self.pending.put_sketched(*id, v, sketch);
            }
        }
        Ok(())
    }

    pub fn upsert(&mut self, batch: Batch<'_>) -> Result<()> {
        let prepared = self.prepare(batch)?;
        self.apply(prepared)
    }

    /// Removes `ids`. Unknown ids are an error (and nothing is removed)
    /// unless `missing_ok`, when they are skipped.
    pub fn remove(&mut self, ids: &[u64], missing_ok: bool) -> Result<usize> {
        self.retrievals.clear();
        if let Some(id) = first_duplicate(ids) {
            return Err(Error::invalid(format!(
                "id {id} appears twice in one remove"
            )));
        }
        if !missing_ok {
            if let Some(&id) = ids.iter().find(|&&id| !self.contains(id)) {
                return Err(Error::UnknownId(id));
            }
        }
        let present: Vec<u64> = ids
            .iter()
            .copied()
            .filter(|&id| self.contains(id))
            .collect();
        self.bm25.remove(&present)?;
        if let Some(hnsw) = self.hnsw.as_mut() {
            let linked: Vec<u64> = present
                .iter()
                .copied()
                .filter(|&id| hnsw.contains(id))
                .collect();
            hnsw.remove(&linked)?;
        }
        for &id in &present {
            self.pending.remove(id);
            self.records.remove(id);
        }
        Ok(present.len())
    }

    /// Links up to `max` parked vectors into the graph; returns how many
    /// are still parked. [`Engine::index_pending_shared`] does the same with
    /// searches running meanwhile.
    pub fn index_pending(&mut self, max: usize) -> Result<usize> {
        if let Some(job) = self.link_start(max, None)? {
            self.link_run(&job);
            self.link_finish(job);
        }
        Ok(self.pending.len())
    }

    /// [`Engine::index_pending`] on an engine behind a readers-writer lock,
    /// holding it for writing only to store the batch and to publish it:
    /// linking, the long part, runs under an upgradable read, so searches
    /// proceed in parallel (they keep finding the batch among the parked
    /// vectors until it is published). Writers wait for the whole call, and
    /// so does another call or anything else that takes an upgradable read
    /// (a snapshot, which must not see a batch half linked). `left` is called
    /// with the count still parked before the lock is released, so a counter
    /// kept beside the lock cannot miss a write that follows.
    pub fn index_pending_shared(
        lock: &RwLock<Engine>,
        max: usize,
        left: impl FnOnce(usize),
    ) -> Result<usize> {
        let engine = lock.upgradable_read();
        if engine.pending.is_empty() || engine.hnsw.is_none() {
            left(engine.pending.len());
            return Ok(engine.pending.len());
        }
        // Room for every parked vector, copied while searches go on; the
        // write lock only swaps it in.
        let grown = engine.hnsw.as_ref().map(|h| h.grown(engine.pending.len()));
        let mut engine = RwLockUpgradableReadGuard::upgrade(engine);
        let Some(job) = engine.link_start(max, grown)? else {
            left(engine.pending.len());
            return Ok(engine.pending.len());
        };
        let engine = RwLockWriteGuard::downgrade_to_upgradable(engine);
        // A batch too small to link in parallel (a single add's, linked while
        // its writer waits) runs here: handing it to the background pool costs
        // the wake-up of a thread running below the writer's priority, beside
        // the embedder's spinning threads (benches/README.md, "Figures behind
        // the code").
        if job.n < PARALLEL_MIN_BATCH {
            engine.link_run(&job);
        } else {
            crate::background::run(|| engine.link_run(&job));
        }
        let mut engine = RwLockUpgradableReadGuard::upgrade(engine);
        engine.link_finish(job);
        let parked = engine.pending.len();
        left(parked);
        // Handed straight to a writer waiting meanwhile: a caller linking
        // batch after batch would otherwise take the lock again first.
        RwLockWriteGuard::unlock_fair(engine);
        Ok(parked)
    }

    /// [`Engine::index_pending_shared`] batch after batch, until nothing is
    /// parked or `budget` has passed (a batch is never cut short): a caller
    /// that must take the GIL between two calls waits for it up to the
    /// interpreter's switch interval (5 ms) while a writer runs Python code,
    /// with a core idle meanwhile.
    pub fn index_pending_for(
        lock: &RwLock<Engine>,
        max: usize,
        budget: Duration,
        mut left: impl FnMut(usize),
    ) -> Result<usize> {
        let started = Instant::now();
        loop {
            let parked = Self::index_pending_shared(lock, max, &mut left)?;
            if parked == 0 || started.elapsed() >= budget {
                return Ok(parked);
            }
        }
    }

    /// Stores the `max` oldest parked vectors in the graph, unlinked and
    /// hidden from its searches (see [`Hnsw::stage`]).
    fn link_start(&mut self, max: usize, grown: Option<Grown>) -> Result<Option<LinkJob>> {
        self.retrievals.clear();
        let Some(hnsw) = self.hnsw.as_mut() else {
            return Ok(None);
        };
        let (ids, data) = self.pending.head(max);
        if ids.is_empty() {
            return Ok(None);
        }
        // The buffers grow once for the whole parked set, not batch by batch,
        // from copies made before the write lock was taken (growing them here
        // would copy the graph under it).
        if let Some(grown) = grown {
            hnsw.adopt(grown);
        }
        hnsw.reserve(self.pending.len());
        let drains = ids.len() == self.pending.len();
        let mut staged = hnsw.stage(ids, data)?;
        hnsw.plan_check(&mut staged, !drains);
        Ok(Some(LinkJob {
            staged,
            n: ids.len(),
        }))
    }

    fn link_run(&self, job: &LinkJob) {
        if let Some(hnsw) = self.hnsw.as_ref() {
            hnsw.link_staged(&job.staged);
        }
    }

    /// Publishes the linked batch and unparks it.
    fn link_finish(&mut self, job: LinkJob) {
        self.retrievals.clear();
        if let Some(hnsw) = self.hnsw.as_mut() {
            hnsw.publish(job.staged);
            self.pending.drop_head(job.n);
        }
    }

    /// Records an access of `ids` at `now`: sets their `last_accessed_at` and
    /// counts one more access (unknown ids are skipped).
    pub fn touch(&self, ids: &[u64], now: f64) {
        for &id in ids {
            if let Some(slot) = self.records.slot(id) {
                self.records.record_access(slot, now);
            }
        }
    }
}

/// The values [`Engine::fill`] stores of `vectors` (row `i` the vector of
/// `ids[i]`), of the given `rows`, with their ids: each as a batch parks it
/// (scaled; rounded to half floats where the index holds them), a row the index
/// would refuse (its vector changed under the snapshot) left out, so its id
/// stays awaiting and the caller rebuilds.
fn fill_values(
    ids: &[u64],
    vectors: &[f32],
    rows: impl IntoIterator<Item = usize>,
    dim: usize,
    halve: bool,
) -> (Vec<u64>, Vec<f32>) {
    let (mut awaited, mut data) = (
        Vec::with_capacity(ids.len()),
        Vec::with_capacity(vectors.len()),
    );
    for r in rows {
        let start = data.len();
        data.extend_from_slice(&vectors[r * dim..][..dim]);
        if parked_value(&mut data[start..], halve) {
            awaited.push(ids[r]);
        } else {
            data.truncate(start);
        }
    }
    (awaited, data)
}

/// Makes `v` the vector a batch parks (see [`Engine::parked`]): at unit
/// length, through f16 when `halve`; false, `v` unchanged, if it is one the
/// index refuses.
fn parked_value(v: &mut [f32], halve: bool) -> bool {
    let Ok(scale) = row_scale(v, 0, true, "vector") else {
        return false;
    };
    v.iter_mut().for_each(|x| *x *= scale);
    if halve {
        round_to_f16(v);
    }
    true
}

/// Rounds `v` to f16 precision in place, a block at a time.
fn round_to_f16(v: &mut [f32]) {
    let mut buf = [half::f16::ZERO; 64];
    for block in v.chunks_mut(buf.len()) {
        let halves = &mut buf[..block.len()];
        halves.convert_from_f32_slice(block);
        halves.convert_to_f32_slice(block);
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod shared_linking {
    use super::*;
    use crate::scoring::Weights;

    fn attrs(i: u64) -> Attrs {
        Attrs {
            scope: [
                Some(format!("agent{}", i % 3)),
                None,
                None,
                None,
                None,
                None,
            ],
            ..Attrs::blank("memories", "semantic")
        }
    }

    /// An engine holding `data` (rows of `dim`) as records 1..=n, every vector
    /// parked.
    fn parked(data: &[f32], dim: usize, precision: Precision) -> Engine {
        let n = data.len() / dim;
        let ids: Vec<u64> = (1..=n as u64).collect();
        let a: Vec<Attrs> = ids.iter().map(|&i| attrs(i)).collect();
        let mut e = Engine::new(EngineConfig {
            dim: Some(dim),
            hnsw: Params {
                precision,
                ..Params::default()
            },
            ..EngineConfig::default()
        })
        .unwrap();
        let texts: Vec<String> = ids.iter().map(|i| format!("memory {i}")).collect();
        e.upsert(Batch {
            ids: &ids,
            texts: Some(&texts),
            vectors: Some(data),
            attrs: &a,
        })
        .unwrap();
        assert_eq!(e.pending(), n);
        e
    }

    #[test]
    fn searches_run_while_parked_vectors_link_and_always_find_them() {
        let (n, dim) = (3000, 24);
        let mut s = 0x9E37_79B9_7F4A_7C15u64;
        let data: Vec<f32> = (0..n * dim)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5
            })
            .collect();
        let e = parked(&data, dim, Precision::Int8F16);
        let lock = RwLock::new(e);
        let query = |e: &Engine, row: usize| {
            let q = &data[row * dim..(row + 1) * dim];
            let req = SearchRequest {
                candidates: 20,
                turn_candidates: 20,
                weights: Weights::resolve(Some(1.0), None, None).unwrap(),
                explain: true,
                ..SearchRequest::new(None, Some(q), Mode::Vector, 3)
            };
            e.search(&req).unwrap()
        };
        let mut counted = Vec::new();
        std::thread::scope(|scope| {
            let linker = scope.spawn(|| {
                let mut calls = 0;
                while Engine::index_pending_shared(&lock, 200, |left| counted.push(left)).unwrap()
                    > 0
                {
                    calls += 1;
                }
                calls
            });
            // Each stored vector, searched for while batches link, is its own
            // best hit, once (never twice: found parked and linked). Not
            // always: the graph search is approximate, and more so while a
            // batch links (pruning can cut a node off until the batch's
            // reconnecting pass), so rarely.
            let (mut row, mut searches, mut missed) = (0, 0, 0);
            while !linker.is_finished() || row < 200 {
                let hits = query(&lock.read(), row % n);
                searches += 1;
                missed += usize::from(hits.ids[0] != row as u64 % n as u64 + 1);
                let mut seen = hits.ids.clone();
                seen.sort_unstable();
                seen.dedup();
                assert_eq!(seen.len(), hits.ids.len());
                row += 7;
            }
            assert!(linker.join().unwrap() >= 10);
            assert!(missed * 100 <= searches, "{missed} of {searches} missed");
        });
        assert_eq!(counted.last(), Some(&0));
        assert!(counted.windows(2).all(|w| w[0] > w[1]));
        let e = lock.into_inner();
        assert_eq!(e.pending(), 0);
        assert_eq!(e.hnsw.as_ref().unwrap().len(), n);
        for row in (0..n).step_by(97) {
            assert_eq!(query(&e, row).ids[0], row as u64 + 1);
        }
    }

    #[test]
    fn a_budget_links_batch_after_batch_and_none_links_one() {
        let (n, dim) = (1000, 16);
        let data = clustered(n, dim, 3);
        let lock = RwLock::new(parked(&data, dim, Precision::Int8F16));
        let mut counted = Vec::new();
        let left =
            Engine::index_pending_for(&lock, 100, Duration::ZERO, |l| counted.push(l)).unwrap();
        assert_eq!((left, counted.as_slice()), (n - 100, [n - 100].as_slice()));
        let left =
            Engine::index_pending_for(&lock, 100, Duration::from_secs(3600), |l| counted.push(l))
                .unwrap();
        assert_eq!(left, 0);
        let expected: Vec<usize> = (0..n / 100).rev().map(|b| b * 100).collect();
        assert_eq!(counted, expected);
        assert_eq!(lock.read().hnsw.as_ref().unwrap().len(), n);
    }

    /// Unit vectors around 50 fixed centres (embeddings cluster; uniform data
    /// flatters a graph); `seed` draws the points, so queries are like the data.
    fn clustered(n: usize, dim: usize, seed: u64) -> Vec<f32> {
        let out = crate::testdata::clustered(n, dim, 50, seed);
        normalised(&out, dim, "vector").unwrap()
    }

    /// The ids of the `k` stored vectors nearest `q`, exactly.
    fn brute_force(data: &[f32], dim: usize, q: &[f32], k: usize) -> Vec<u64> {
        let mut all: Vec<(f32, u64)> = data
            .chunks_exact(dim)
            .enumerate()
            .map(|(i, v)| (crate::dot::dot(q, v), i as u64 + 1))
            .collect();
        all.sort_unstable_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        all.into_iter().take(k).map(|(_, id)| id).collect()
    }

    #[test]
    fn batches_linked_on_all_cores_keep_recall_against_brute_force() {
        // Many batches of the size the background thread links (1024), each
        // linked in parallel with searches running; recall@10 against brute
        // force meanwhile and of the finished graph, at full and reduced
        // precision (measured: 0.999 and 1.0 for both).
        let (n, dim, k) = (20_000, 64, 10);
        let data = clustered(n, dim, 1);
        let queries = clustered(100, dim, 2);
        for (precision, floor) in [(Precision::F32, 0.98), (Precision::Int8F16, 0.97)] {
            let e = parked(&data, dim, precision);
            // The reference: the vectors as the engine keeps them (int8+f16
            // ranks on half floats, and parks them rounded the same way).
            let stored: Vec<f32> = if precision == Precision::Int8F16 {
                data.iter()
                    .map(|&x| half::f16::from_f32(x).to_f32())
                    .collect()
            } else {
                data.clone()
            };
            let want: Vec<Vec<u64>> = queries
                .chunks_exact(dim)
                .map(|q| brute_force(&stored, dim, q, k))
                .collect();
            let recall = |e: &Engine| {
                let mut total = 0.0;
                for (q, want) in queries.chunks_exact(dim).zip(&want) {
                    let got = e.nearest_vectors(q, k, None, None).unwrap();
                    total += got.iter().filter(|h| want.contains(&h.0)).count() as f64;
                }
                total / (want.len() * k) as f64
            };
            let lock = RwLock::new(e);
            let (mut during, mut searches) = (0.0, 0);
            std::thread::scope(|scope| {
                let linker = scope.spawn(|| {
                    let mut batches = 0;
                    while Engine::index_pending_shared(&lock, 1024, |_| {}).unwrap() > 0 {
                        batches += 1;
                    }
                    batches + 1
                });
                while !linker.is_finished() {
                    during += recall(&lock.read());
                    searches += 1;
                }
                assert_eq!(linker.join().unwrap(), n.div_ceil(1024));
            });
            let e = lock.into_inner();
            assert_eq!((e.pending(), e.hnsw.as_ref().unwrap().len()), (0, n));
            let after = recall(&e);
            assert!(after >= floor, "{precision:?}: recall {after}");
            // Twenty batches take seconds: searches did run between them.
            assert!(searches > 0);
            let during = during / searches as f64;
            assert!(
                during >= floor,
                "{precision:?}: recall {during} while linking"
            );
        }
    }
}
