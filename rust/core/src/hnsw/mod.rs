//! A Hierarchical Navigable Small World index (Malkov & Yashunin, 2018) over
//! u64 ids, with deletions that free slots for reuse, filtered search, and
//! crash-safe snapshots.
//!
//! Concurrency: every method that changes the index takes `&mut self`, so a
//! wrapper's readers-writer lock gives searches `&self` in parallel; inside
//! `add`, the batch is linked by all cores at once with per-node locks.

mod add;
mod cand;
mod distance;
mod filter;
mod graph;
mod insert;
mod missing;
mod pool;
mod query;
mod reachability;
mod remove;
mod rows;
mod search;
pub(crate) mod snapshot;
mod storage;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;

pub(crate) use add::{Grown, Staged, PARALLEL_MIN_BATCH};
pub use distance::Metric;
pub use filter::Allowed;
pub use query::{MAX_K, MAX_RESULTS};
pub use rows::{check_rows, row_scale, row_scales, MAX_RAW_NORM};
pub use storage::Precision;

use crate::error::{Error, Result};
use crate::idmap::{IdMap, SlotMap};
use crate::pages::Region;
use distance::Distance;
use graph::Graph;
use storage::Vectors;

/// Label reported for the empty places of a padded batch result.
pub const MISSING: u64 = u64::MAX;

#[derive(Clone, Copy, Debug)]
pub struct Params {
    /// Links per node on the upper levels; level 0 keeps up to `2 * m`.
    pub m: usize,
    /// Size of the candidate list while linking a new node.
    pub ef_construction: usize,
    /// Default size of the candidate list while searching.
    pub ef: usize,
    /// Seeds the level draw, so a single-threaded build is reproducible.
    pub seed: u64,
    /// How vectors are stored; see `storage`.
    pub precision: Precision,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            m: 16,
            ef_construction: 200,
            ef: 64,
            seed: 0,
            precision: Precision::F32,
        }
    }
}

/// The node searches start from: the one on the highest level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    slot: u32,
    level: usize,
}

const NO_ENTRY: u64 = u64::MAX;

pub struct Hnsw {
    metric: Metric,
    dist: Distance,
    /// Ranks a search's final candidates on the second copy of the vectors
    /// (the f16 part of `Int8F16` records, the floats of an `F32` index that
    /// walks int8 copies).
    rank: Option<Distance>,
    m: usize,
    ef_construction: usize,
    ef: usize,
    seed: u64,
    rng: u64,
    vectors: Vectors,
    graph: Graph,
    /// Slot to id; a removed slot keeps its stale id until reused.
    labels: Vec<u64>,
    removed: Vec<bool>,
    slots: SlotMap,
    /// Removed slots that keep their links and route searches, until a batch
    /// clears them all at once (see [`Hnsw::clear_due`]): a link into a slot
    /// can only be found by a pass over every list.
    free: Vec<u32>,
    /// Cleared slots: no link leads into or out of them, so an add takes one
    /// as it would a new node, without a pass over the graph.
    vacant: Vec<u32>,
    /// Hidden ids (see [`Hnsw::hide`]) and their slots: removed from searches
    /// but neither freed nor unlinked, so they can be shown again as they were.
    held: IdMap<u32>,
    /// Slots whose vector a snapshot left out, until [`Hnsw::fill`] (empty
    /// when none is: see `missing.rs`).
    missing: Vec<bool>,
    /// Missing slots of live ids: searches refuse to run while there are any.
    missing_live: usize,
    /// Packed `Entry` (slot << 8 | level), or NO_ENTRY.
    entry: AtomicU64,
    top_lock: Mutex<()>,
    /// Nodes linked since the last reachability pass (see [`Hnsw::plan_check`]).
    unchecked: AtomicUsize,
    /// Whether a batch put its pass off for the batches that follow it: the
    /// last of them runs it, however small (see [`Hnsw::plan_check`]).
    put_off: AtomicBool,
    /// Nodes gone over by passes over the whole graph (unlinking, the
    /// reachability pass), so tests can bound the work of an add.
    #[cfg(test)]
    walked: AtomicUsize,
    /// Bumped by [`Hnsw::stage`] and [`Hnsw::publish`], which change the
    /// stored vectors and open or close the time a batch's links change
    /// through `&self`: [`Hnsw::adopt`] takes buffers copied by
    /// [`Hnsw::grown`] only if it has not moved since, and `grown` copies
    /// nothing while a batch is staged (the count is odd).
    edits: u64,
}

/// One search result.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Neighbor {
    pub id: u64,
    pub distance: f32,
}
impl Hnsw {
    pub fn new(dim: usize, metric: Metric, params: Params) -> Result<Self> {
        // f32 indexes walk the graph on int8 copies of the vectors, a
        // quarter of the memory traffic, and rank the final candidates on the
        // floats, so reported distances stay exact. Not under L2: its int8
        // formula (|q|² + |x|² − 2 q·x) loses the distance to cancellation
        // when vectors lie far from the origin.
        Hnsw::with_walk(dim, metric, params, metric != Metric::L2)
    }

    /// [`Hnsw::new`], choosing whether an `F32` index walks int8 copies.
    fn with_walk(dim: usize, metric: Metric, params: Params, int8_walk: bool) -> Result<Self> {
        if dim == 0 {
            return Err(Error::invalid("dim must be at least 1"));
        }
        if dim > 65_536 {
            return Err(Error::invalid(format!(
                "dim must be at most 65536, got {dim}"
            )));
        }
        if !(2..=200).contains(&params.m) {
            return Err(Error::invalid(format!(
                "m must be between 2 and 200, got {}",
                params.m
            )));
        }
        if params.ef_construction == 0 {
            return Err(Error::invalid("ef_construction must be at least 1"));
        }
        if params.ef == 0 {
            return Err(Error::invalid("ef must be at least 1"));
        }
        let vectors = Vectors::with_walk(dim, params.precision, int8_walk);
        Ok(Hnsw {
            metric,
            dist: Distance::new(metric, vectors.walk_precision()),
            rank: vectors.rank_precision().map(|p| Distance::new(metric, p)),
            m: params.m,
            ef_construction: params.ef_construction,
            ef: params.ef,
            seed: params.seed,
            rng: params.seed ^ 0x5DEE_CE66_D1CE_4E5B,
            vectors,
            graph: Graph::new(params.m),
            labels: Vec::new(),
            removed: Vec::new(),
            slots: SlotMap::default(),
            free: Vec::new(),
            vacant: Vec::new(),
            held: IdMap::default(),
            missing: Vec::new(),
            missing_live: 0,
            entry: AtomicU64::new(NO_ENTRY),
            top_lock: Mutex::new(()),
            unchecked: AtomicUsize::new(0),
            put_off: AtomicBool::new(false),
            #[cfg(test)]
            walked: AtomicUsize::new(0),
            edits: 0,
        })
    }

    pub fn dim(&self) -> usize {
        self.vectors.dim()
    }

    pub fn metric(&self) -> Metric {
        self.metric
    }

    pub fn params(&self) -> Params {
        Params {
            m: self.m,
            ef_construction: self.ef_construction,
            ef: self.ef,
            seed: self.seed,
            precision: self.vectors.precision(),
        }
    }

    pub fn set_ef(&mut self, ef: usize) -> Result<()> {
        if ef == 0 {
            return Err(Error::invalid("ef must be at least 1"));
        }
        self.ef = ef;
        Ok(())
    }

    /// Number of live vectors.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    pub fn contains(&self, id: u64) -> bool {
        self.slots.contains_key(&id)
    }

    /// Live ids, in slot order.
    pub fn ids(&self) -> Vec<u64> {
        (0..self.labels.len())
            .filter(|&s| !self.removed[s])
            .map(|s| self.labels[s])
            .collect()
    }

    /// The stored vector of `id` (normalised under the cosine metric; as
    /// precise as the index's precision).
    pub fn vector(&self, id: u64) -> Result<Vec<f32>> {
        let slot = *self.slots.get(&id).ok_or(Error::UnknownId(id))?;
        self.check_filled()?;
        let mut v = Vec::new();
        self.vectors.decode(slot, &mut v);
        v.truncate(self.dim());
        Ok(v)
    }

    /// The buffers a search reads (see [`crate::pages`]).
    pub fn regions(&self, out: &mut Vec<Region>) {
        self.vectors.regions(out);
        self.graph.regions(out);
        out.extend([Region::of(&self.labels), Region::of(&self.removed)]);
    }

    /// Bytes held by vectors, links and id maps.
    pub fn memory_bytes(&self) -> usize {
        self.vectors.memory_bytes()
            + self.graph.memory_bytes()
            + self.labels.capacity() * 8
            + self.removed.capacity()
            + self.slots.memory_bytes()
            + (self.free.capacity() + self.vacant.capacity()) * 4
            + self.held.capacity() * 16
    }

    fn entry(&self) -> Option<Entry> {
        let packed = self.entry.load(Ordering::Acquire);
        (packed != NO_ENTRY).then_some(Entry {
            slot: (packed >> 8) as u32,
            level: (packed & 0xFF) as usize,
        })
    }

    fn set_entry(&self, e: Entry) {
        self.entry
            .store(u64::from(e.slot) << 8 | e.level as u64, Ordering::Release);
    }

    /// Checks vectors for shape and values; returns them ready to store
    /// (normalised under the cosine metric).
    fn prepare(&self, vectors: &[f32], what: &str) -> Result<Vec<f32>> {
        check_rows(vectors, self.dim(), self.metric == Metric::Cosine, what)
    }
}

#[cfg(test)]
mod tests;
