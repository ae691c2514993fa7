//! A Hierarchical Navigable Small World index (Malkov & Yashunin, 2018) over
//! u64 ids, with deletions that free slots for reuse, filtered search, and
//! crash-safe snapshots.
//!
//! Concurrency: every method that changes the index takes `&mut self`, so a
//! wrapper's readers-writer lock gives searches `&self` in parallel; inside
//! `add`, the batch is linked by all cores at once with per-node locks.

mod distance;
mod filter;
mod graph;
mod insert;
mod pool;
mod search;
pub(crate) mod snapshot;
mod storage;

use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;
use rayon::prelude::*;

pub use distance::Metric;
pub use filter::Allowed;
pub use storage::Precision;

use crate::error::{Error, Result};
use crate::idmap::{first_duplicate, IdMap};
use distance::{Distance, Query};
use graph::Graph;
use search::{with_scratch, Cand};
use storage::Vectors;

/// Label reported for the empty places of a padded batch result.
pub const MISSING: u64 = u64::MAX;

/// Largest k a search accepts, and largest padded result of one call.
pub const MAX_K: usize = 1 << 24;
pub const MAX_RESULTS: usize = 1 << 28;

/// Batches smaller than this link on the calling thread: a message-sized add
/// must not pay for waking the thread pool.
pub(crate) const PARALLEL_MIN_BATCH: usize = 64;
/// A reachability pass may be put off until the nodes linked since the last
/// one reach this fraction (1 / n) of the graph.
const DEFERRED_CHECK_SHARE: usize = 8;
/// Up to this many nodes, every add ends with the reachability pass: it
/// walks the whole graph, which is then cheaper than linking one node.
const ALWAYS_CHECKED: usize = 1024;

/// How many of the nodes a search pushed out of its `ef` results are
/// re-ranked too, when it walks approximate distances: enough to re-rank
/// `2 k` in all (none once ef reaches that).
fn spill_for(k: usize, ef: usize) -> usize {
    (2 * k).saturating_sub(ef)
}

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

/// A batch stored by [`Hnsw::stage`], to be linked and published.
pub(crate) struct Staged {
    /// (slot, reused, row of `data`)
    plan: Vec<(u32, bool, usize)>,
    /// The batch's vectors, checked (and normalised under the cosine metric);
    /// empty when the store keeps them as they are (`F32`), in which case
    /// linking reads them back from there instead of holding a second copy.
    data: Vec<f32>,
    /// Slots that held another vector before (their links are stale).
    reused: Allowed,
    /// Every slot of the batch: live for the purposes of linking.
    staged: Allowed,
    /// Whether linking ends with the pass over the whole graph that makes
    /// every node reachable ([`Hnsw::reconnect`]).
    check: bool,
}

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
    slots: IdMap<u32>,
    /// Removed slots, reused by later adds.
    free: Vec<u32>,
    /// Hidden ids (see [`Hnsw::hide`]) and their slots: removed from searches
    /// but neither freed nor unlinked, so they can be shown again as they were.
    held: IdMap<u32>,
    /// Packed `Entry` (slot << 8 | level), or NO_ENTRY.
    entry: AtomicU64,
    top_lock: Mutex<()>,
    /// Nodes linked since the last reachability pass (see [`Hnsw::plan_check`]).
    unchecked: AtomicUsize,
    /// Whether a batch put its pass off for the batches that follow it: the
    /// last of them runs it, however small (see [`Hnsw::plan_check`]).
    put_off: AtomicBool,
    /// Bumped by [`Hnsw::stage`] and [`Hnsw::publish`], which change the
    /// stored vectors and open or close the time a batch's links change
    /// through `&self`: [`Hnsw::adopt`] takes buffers copied by
    /// [`Hnsw::grown`] only if it has not moved since, and `grown` copies
    /// nothing while a batch is staged (the count is odd).
    edits: u64,
}

/// Buffers of an [`Hnsw`] with room for more nodes, copied through `&self`
/// ([`Hnsw::grown`]) so that the copy runs while searches do.
pub(crate) struct Grown {
    edits: u64,
    vectors: storage::GrownVectors,
    level0: Option<Vec<std::sync::atomic::AtomicU32>>,
}

/// The largest norm a vector may have when it is stored as given (the `ip`
/// and `l2` metrics): 2^62, so that a squared distance between two such
/// vectors, at most (2 * 2^62)^2 = 2^126, stays finite in f32.
pub const MAX_RAW_NORM: f64 = 4_611_686_018_427_387_904.0;

/// Checks row-major vectors of `dim` floats: a whole number of rows, every
/// value finite and a norm the metric can use. When `normalise` is set the
/// norm must be a positive normal f32 (not zero, not so small that its
/// reciprocal overflows, not so large that it does) and the row is returned
/// scaled to unit length; otherwise the norm must be at most [`MAX_RAW_NORM`].
/// Returns a copy.
pub fn check_rows(data: &[f32], dim: usize, normalise: bool, what: &str) -> Result<Vec<f32>> {
    let scales = row_scales(data, dim, normalise, what)?;
    let mut out = data.to_vec();
    if normalise {
        for (v, &inv) in out.chunks_exact_mut(dim).zip(&scales) {
            v.iter_mut().for_each(|x| *x *= inv);
        }
    }
    Ok(out)
}

/// `|v|` in f64, over eight partial sums so the loop runs as SIMD (rows of
/// every write and every replayed batch pass through here).
fn norm_f64(v: &[f32]) -> f64 {
    let mut acc = [0.0f64; 8];
    let mut chunks = v.chunks_exact(8);
    for c in &mut chunks {
        for (a, &x) in acc.iter_mut().zip(c) {
            *a += f64::from(x) * f64::from(x);
        }
    }
    let tail: f64 = chunks
        .remainder()
        .iter()
        .map(|&x| f64::from(x) * f64::from(x))
        .sum();
    (acc.iter().sum::<f64>() + tail).sqrt()
}

/// The checks of [`check_rows`], without the copy: the factor each row is
/// to be multiplied by (the reciprocal of its norm when `normalise` is set,
/// else 1), so a caller can scale the rows where it stores them.
pub fn row_scales(data: &[f32], dim: usize, normalise: bool, what: &str) -> Result<Vec<f32>> {
    if dim == 0 || !data.len().is_multiple_of(dim) {
        return Err(Error::DimensionMismatch {
            expected: dim,
            got: data.len(),
        });
    }
    let mut scales = Vec::with_capacity(data.len() / dim);
    for (row, v) in data.chunks_exact(dim).enumerate() {
        let norm = norm_f64(v);
        if normalise && norm.is_finite() {
            // The common case, in one pass: a finite norm means finite values,
            // and a value scaled by a normal 1/norm is at most about 1.
            let norm32 = norm as f32;
            if norm32.is_normal() && (1.0 / norm32).is_normal() {
                scales.push((1.0 / norm) as f32);
                continue;
            }
        }
        if let Some(col) = v.iter().position(|x| !x.is_finite()) {
            return Err(Error::invalid(format!(
                "{what} {row} has a non-finite value ({}) at position {col}",
                v[col]
            )));
        }
        if !normalise {
            if norm > MAX_RAW_NORM {
                return Err(Error::invalid(format!(
                    "{what} {row} has norm {norm:e}, above {MAX_RAW_NORM:e}: its distances would overflow"
                )));
            }
            scales.push(1.0);
            continue;
        }
        if norm == 0.0 {
            return Err(Error::invalid(format!(
                "{what} {row} is all zeros, which has no direction under the cosine metric"
            )));
        }
        // The norm as the f32 kernels see it: zero or subnormal when the values
        // are tiny (1e-45 everywhere), infinite when they are huge (1e38).
        let norm32 = norm as f32;
        let inv = 1.0 / norm32;
        if !norm32.is_normal() || !inv.is_normal() {
            return Err(Error::invalid(format!(
                "{what} {row} has norm {norm:e}, outside the range of positive normal f32 \
                 ({:e} to {:e}), so it cannot be scaled to unit length",
                f32::MIN_POSITIVE,
                f32::MAX
            )));
        }
        let inv = (1.0 / norm) as f32;
        if let Some(col) = v.iter().position(|x| !(x * inv).is_finite()) {
            return Err(Error::invalid(format!(
                "{what} {row} has a non-finite value at position {col} once scaled to unit length"
            )));
        }
        scales.push(inv);
    }
    Ok(scales)
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
            slots: IdMap::default(),
            free: Vec::new(),
            held: IdMap::default(),
            entry: AtomicU64::new(NO_ENTRY),
            top_lock: Mutex::new(()),
            unchecked: AtomicUsize::new(0),
            put_off: AtomicBool::new(false),
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
        let mut v = Vec::new();
        self.vectors.decode(slot, &mut v);
        v.truncate(self.dim());
        Ok(v)
    }

    /// Bytes held by vectors, links and id maps.
    pub fn memory_bytes(&self) -> usize {
        self.vectors.memory_bytes()
            + self.graph.memory_bytes()
            + self.labels.capacity() * 8
            + self.removed.capacity()
            + self.slots.capacity() * 16
            + self.free.capacity() * 4
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

    fn next_random(&mut self) -> u64 {
        // splitmix64: tiny, fast, and good enough to draw levels.
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Draws a level with P(level >= l) = m^-l, as the paper prescribes.
    fn random_level(&mut self) -> u8 {
        let u = ((self.next_random() >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
        let level = (-u.ln() / (self.m as f64).ln()).floor();
        level.min(16.0) as u8
    }

    /// Checks vectors for shape and values; returns them ready to store
    /// (normalised under the cosine metric).
    fn prepare(&self, vectors: &[f32], what: &str) -> Result<Vec<f32>> {
        check_rows(vectors, self.dim(), self.metric == Metric::Cosine, what)
    }

    /// Adds vectors (row-major, `ids.len() * dim` floats) under `ids`. An id
    /// already present gets the new vector. Everything is validated before
    /// anything changes.
    pub fn add(&mut self, ids: &[u64], vectors: &[f32]) -> Result<()> {
        let staged = self.stage(ids, vectors)?;
        self.link_staged(&staged);
        self.publish(staged);
        Ok(())
    }

    /// Room for `additional` more slots, so that a long run of adds grows the
    /// buffers once.
    pub(crate) fn reserve(&mut self, additional: usize) {
        let fresh = additional.saturating_sub(self.free.len());
        self.vectors.reserve(fresh);
        self.graph.reserve(fresh);
    }

    /// Copies of the large buffers (the vectors and the level-0 lists) with
    /// the room [`Hnsw::reserve`] would make for `additional` more slots.
    /// Growing them in place copies them too, under the caller's exclusive
    /// lock: a 100k bulk load held searches for up to 56 ms that way. Nothing
    /// is copied while a batch is staged (its links change meanwhile). Links
    /// also change through `&self` in [`Hnsw::settle`], which `edits` does not
    /// see: the caller keeps it from running until [`Hnsw::adopt`] (the engine
    /// holds its upgradable read across both, as a save does).
    pub(crate) fn grown(&self, additional: usize) -> Grown {
        let fresh = additional.saturating_sub(self.free.len());
        let idle = self.edits.is_multiple_of(2);
        Grown {
            edits: self.edits,
            vectors: self.vectors.grown(if idle { fresh } else { 0 }),
            level0: if idle {
                self.graph.grown_level0(fresh)
            } else {
                None
            },
        }
    }

    /// Takes the buffers of [`Hnsw::grown`] in place of its own, unless the
    /// index was staged or published since (then they are stale: dropped).
    pub(crate) fn adopt(&mut self, grown: Grown) {
        if grown.edits == self.edits {
            self.vectors.adopt(grown.vectors);
            self.graph.adopt_level0(grown.level0);
        }
    }

    /// The first step of [`Hnsw::add`], the only one that needs `&mut self`:
    /// validates, assigns slots and stores the vectors. The batch's ids leave
    /// the index (searches neither return nor count them, though their slots
    /// may route a search) until [`Hnsw::publish`]; [`Hnsw::link_staged`],
    /// which takes `&self`, links them in between, so searches can run while
    /// a batch links.
    pub(crate) fn stage(&mut self, ids: &[u64], vectors: &[f32]) -> Result<Staged> {
        let dim = self.dim();
        if vectors.len() != ids.len() * dim {
            return Err(Error::invalid(format!(
                "got {} ids but {} values, expected {} ({} vectors of dim {dim})",
                ids.len(),
                vectors.len(),
                ids.len() * dim,
                ids.len()
            )));
        }
        if ids.contains(&MISSING) {
            return Err(Error::invalid(format!(
                "id {MISSING} is reserved as the 'no result' label"
            )));
        }
        if let Some(id) = first_duplicate(ids) {
            return Err(Error::invalid(format!("id {id} appears twice in one add")));
        }
        // An f32 store holds the rows exactly as checked: they are scaled
        // where they are stored, without a copy of the batch.
        let in_place = self.vectors.precision() == Precision::F32;
        let normalise = self.metric == Metric::Cosine;
        let (data, scales) = if in_place {
            (Vec::new(), row_scales(vectors, dim, normalise, "vector")?)
        } else {
            (self.prepare(vectors, "vector")?, Vec::new())
        };
        if self.graph.slots() + ids.len() > u32::MAX as usize / 2 {
            return Err(Error::invalid("the index cannot hold that many vectors"));
        }

        // Odd until `publish`: see `edits`.
        self.edits += 1;
        // A hidden id added again is shown again, then updated like any present id.
        for id in ids {
            if let Some(slot) = self.held.remove(id) {
                self.removed[slot as usize] = false;
                self.slots.insert(*id, slot);
            }
        }

        // Assign slots and store vectors; linking comes after, in parallel.
        let linked_slots = self.graph.slots() as u32;
        // (slot, reused, row of `data`)
        let mut plan: Vec<(u32, bool, usize)> = Vec::with_capacity(ids.len());
        let fresh = ids.iter().filter(|id| !self.slots.contains_key(id)).count();
        self.reserve(fresh);
        let mut scaled = Vec::with_capacity(if in_place { dim } else { 0 });
        for (row, &id) in ids.iter().enumerate() {
            let (slot, reused) = if let Some(slot) = self.slots.remove(&id) {
                (slot, true)
            } else {
                match self.free.pop() {
                    Some(slot) => (slot, true),
                    None => {
                        let level = self.random_level();
                        let slot = self.graph.push(level);
                        self.vectors.push_zeroed();
                        self.labels.push(id);
                        self.removed.push(true);
                        (slot, false)
                    }
                }
            };
            let v = if in_place {
                let inv = scales[row];
                scaled.clear();
                scaled.extend(vectors[row * dim..(row + 1) * dim].iter().map(|x| x * inv));
                &scaled[..]
            } else {
                &data[row * dim..(row + 1) * dim]
            };
            self.vectors.set(slot, v);
            self.labels[slot as usize] = id;
            self.removed[slot as usize] = true;
            plan.push((slot, reused, row));
        }

        let slots = self.graph.slots();
        let reused = Allowed::new(slots, plan.iter().filter(|p| p.1).map(|p| p.0));
        if !reused.is_empty() {
            self.move_entry_off(&reused, linked_slots);
        }
        Ok(Staged {
            staged: Allowed::new(slots, plan.iter().map(|p| p.0)),
            check: self.check_due(plan.len()) || !reused.is_empty(),
            plan,
            data,
            reused,
        })
    }

    /// Runs the reachability pass that batches put off, if any (before a
    /// save, so that a stored graph has every node reachable).
    pub(crate) fn settle(&self) {
        self.put_off.store(false, Ordering::Release);
        if self.unchecked.swap(0, Ordering::AcqRel) > 0 {
            self.reconnect(&Allowed::new(self.graph.slots(), std::iter::empty()));
        }
    }

    /// Whether a batch of `n` nodes ends with the reachability pass by its
    /// size: a large batch pays for it many times over; in a small graph it
    /// costs less than linking; and once the nodes linked since the last pass
    /// reach an eighth of the graph, it comes with whatever batch is next, so
    /// its cost per node stays constant. A small add can prune a node's last
    /// link in, under `ip` especially, and the node stays unreachable until
    /// the next pass (a save runs one too).
    fn check_due(&self, n: usize) -> bool {
        n >= PARALLEL_MIN_BATCH || self.graph.slots() <= ALWAYS_CHECKED || self.share_new(n)
    }

    /// Whether `n` more nodes make those linked since the last pass an
    /// eighth of the graph.
    fn share_new(&self, n: usize) -> bool {
        self.unchecked.load(Ordering::Relaxed) + n >= self.graph.slots() / DEFERRED_CHECK_SHARE
    }

    /// Decides whether a staged batch of a backlog ends with the reachability
    /// pass. One that more batches follow skips it when the nodes linked
    /// since the last pass are under an eighth of the graph: the pass walks
    /// every node, so after each batch of a long load it made linking
    /// quadratic (a 1M store linked 3.7k/s). The batch that empties the
    /// backlog runs the pass put off, whatever its size; without it, the
    /// nodes the skipped passes would have reconnected stayed unreachable
    /// until the next save whenever the last batch was a small one (a
    /// cluster of a 200k store missed by every search, measured when other
    /// work slowed linking). A batch that reuses slots keeps its pass:
    /// unlinking needs it.
    pub(crate) fn plan_check(&self, staged: &mut Staged, more_follow: bool) {
        if !more_follow {
            if self.put_off.load(Ordering::Acquire) {
                staged.check = true;
            }
        } else if staged.reused.is_empty() && !self.share_new(staged.plan.len()) {
            staged.check = false;
            self.put_off.store(true, Ordering::Release);
        }
    }

    /// The second step of [`Hnsw::add`]: links a staged batch on all cores.
    /// Searches may run meanwhile (lists are rewritten under per-node locks,
    /// and read whole or as a harmless mix); another link or any `&mut`
    /// method may not, which the `&mut` of [`Hnsw::stage`] and
    /// [`Hnsw::publish`] around it ensures when the caller holds one lock.
    pub(crate) fn link_staged(&self, staged: &Staged) {
        let Staged {
            plan,
            data,
            reused,
            staged,
            check,
        } = staged;
        if !reused.is_empty() {
            self.unlink(reused);
        }
        let dim = self.dim();
        let padded = self.vectors.padded_dim();
        let link = |&(slot, _, row): &(u32, bool, usize)| {
            let q = if data.is_empty() {
                let mut v = Vec::with_capacity(padded);
                self.vectors.decode(slot, &mut v);
                Query::new(v)
            } else {
                Query::padded(&data[row * dim..(row + 1) * dim], padded)
            };
            with_scratch(|sc| self.link(slot, &q, sc));
        };
        let mut rest = &plan[..];
        if self.entry().is_none() {
            if let Some((first, tail)) = plan.split_first() {
                link(first);
                rest = tail;
            }
        }
        if rest.len() >= PARALLEL_MIN_BATCH {
            rest.par_iter().for_each(link);
        } else {
            rest.iter().for_each(link);
        }
        // A full pass over the graph: only after batches large enough to pay
        // for it many times over (see `plan_check`), or after unlinking,
        // which made one anyway and is what strands nodes (their links in
        // came from reused slots).
        if *check {
            self.reconnect(staged);
        }
    }

    /// The last step of [`Hnsw::add`]: the staged ids join the index.
    pub(crate) fn publish(&mut self, staged: Staged) {
        self.edits += 1;
        if staged.check {
            *self.put_off.get_mut() = false;
        }
        let unchecked = self.unchecked.get_mut();
        *unchecked = if staged.check {
            0
        } else {
            *unchecked + staged.plan.len()
        };
        for (slot, _, _) in staged.plan {
            self.removed[slot as usize] = false;
            self.slots.insert(self.labels[slot as usize], slot);
        }
    }

    /// Searches start at the entry point, so it must not be one of the slots
    /// about to be unlinked: hand the role to the highest node that stays
    /// linked (one of the first `linked_slots`, not reused). When there is
    /// none, the graph is rebuilt from nothing.
    fn move_entry_off(&mut self, reused: &Allowed, linked_slots: u32) {
        let Some(entry) = self.entry() else {
            return;
        };
        if !reused.contains(entry.slot) {
            return;
        }
        let heir = (0..linked_slots)
            .filter(|&s| !reused.contains(s))
            .max_by_key(|&s| (self.graph.level(s), std::cmp::Reverse(s)));
        match heir {
            Some(slot) => self.set_entry(Entry {
                slot,
                level: self.graph.level(slot),
            }),
            None => self.entry.store(NO_ENTRY, Ordering::Release),
        }
    }

    /// Removes ids; they are never returned again and their slots are reused
    /// by later adds. Fails, changing nothing, if any id is unknown.
    pub fn remove(&mut self, ids: &[u64]) -> Result<()> {
        if let Some(&id) = ids.iter().find(|id| !self.slots.contains_key(id)) {
            return Err(Error::UnknownId(id));
        }
        if let Some(id) = first_duplicate(ids) {
            return Err(Error::invalid(format!(
                "id {id} appears twice in one remove"
            )));
        }
        for id in ids {
            if let Some(slot) = self.slots.remove(id) {
                self.removed[slot as usize] = true;
                self.free.push(slot);
            }
        }
        Ok(())
    }

    /// Hides ids from searches (hnswlib's `mark_deleted`): unlike
    /// [`Hnsw::remove`], their slots keep their vectors and links, still route
    /// searches, and are not reused by adds, so [`Hnsw::unhide`] brings them
    /// back exactly. A hidden id is not [`Hnsw::contains`]ed nor counted; adding
    /// it again shows it with the new vector. Fails, changing nothing, if an id
    /// is not live.
    pub fn hide(&mut self, ids: &[u64]) -> Result<()> {
        if let Some(&id) = ids.iter().find(|id| !self.slots.contains_key(id)) {
            return Err(Error::UnknownId(id));
        }
        if let Some(id) = first_duplicate(ids) {
            return Err(Error::invalid(format!("id {id} appears twice in one hide")));
        }
        for id in ids {
            if let Some(slot) = self.slots.remove(id) {
                self.removed[slot as usize] = true;
                self.held.insert(*id, slot);
            }
        }
        Ok(())
    }

    /// Shows hidden ids again, with the vectors and links they had. Fails,
    /// changing nothing, if an id is not hidden.
    pub fn unhide(&mut self, ids: &[u64]) -> Result<()> {
        self.check_hidden(ids, "unhide")?;
        for id in ids {
            if let Some(slot) = self.held.remove(id) {
                self.removed[slot as usize] = false;
                self.slots.insert(*id, slot);
            }
        }
        Ok(())
    }

    /// Forgets hidden ids for good: their slots join the free list, reused by
    /// later adds (hnswlib's `replace_deleted`). Fails, changing nothing, if an
    /// id is not hidden.
    pub fn release(&mut self, ids: &[u64]) -> Result<()> {
        self.check_hidden(ids, "release")?;
        for id in ids {
            if let Some(slot) = self.held.remove(id) {
                self.free.push(slot);
            }
        }
        Ok(())
    }

    fn check_hidden(&self, ids: &[u64], what: &str) -> Result<()> {
        if let Some(&id) = ids.iter().find(|id| !self.held.contains_key(id)) {
            return Err(Error::UnknownId(id));
        }
        if let Some(id) = first_duplicate(ids) {
            return Err(Error::invalid(format!(
                "id {id} appears twice in one {what}"
            )));
        }
        Ok(())
    }

    /// Hidden ids, in slot order.
    pub fn hidden(&self) -> Vec<u64> {
        let mut held: Vec<(u32, u64)> = self.held.iter().map(|(&id, &s)| (s, id)).collect();
        held.sort_unstable();
        held.into_iter().map(|(_, id)| id).collect()
    }

    /// Translates ids into the slot set a filtered search accepts; unknown ids
    /// are ignored (they cannot be returned anyway).
    pub fn allowed(&self, ids: &[u64]) -> Allowed {
        Allowed::new(
            self.graph.slots(),
            ids.iter().filter_map(|id| self.slots.get(id).copied()),
        )
    }

    fn check_query(&self, q: &[f32]) -> Result<Vec<f32>> {
        if q.len() != self.dim() {
            return Err(Error::DimensionMismatch {
                expected: self.dim(),
                got: q.len(),
            });
        }
        self.prepare(q, "query")
    }

    fn check_k(k: usize, queries: usize) -> Result<()> {
        if k == 0 {
            return Err(Error::invalid("k must be at least 1"));
        }
        // The padded result holds queries * k labels and distances.
        if k > MAX_K || queries.saturating_mul(k) > MAX_RESULTS {
            return Err(Error::invalid(format!(
                "k = {k} is too large: at most {MAX_K}, and at most {MAX_RESULTS} results per call"
            )));
        }
        Ok(())
    }

    /// Whether scanning the allowed set beats a filtered graph search, whose
    /// cost grows as the allowed fraction shrinks.
    fn prefer_scan(&self, allowed: &Allowed, ef: usize) -> bool {
        let live = self.len().max(1);
        let fraction = (allowed.len() as f64 / live as f64).max(1e-9);
        let graph_cost = (ef as f64 * self.graph.max_degree(0) as f64 / fraction).min(live as f64);
        (allowed.len() as f64) <= graph_cost
    }

    /// A graph search for the `k` nearest that `accept` admits: the `ef`
    /// candidates it ends with, and under a ranking copy (see `rank`) a few
    /// more (see `search::Scratch::spill`), all at their ranking distances.
    fn search_ranked(
        &self,
        q: &Query,
        k: usize,
        ef: usize,
        sc: &mut search::Scratch,
        accept: impl Fn(u32) -> bool,
    ) -> Vec<Cand> {
        if self.rank.is_none() {
            self.search_graph(q, ef, sc, accept);
            return sc.results.drain().collect();
        }
        sc.spill_cap = spill_for(k, ef);
        self.search_graph(q, ef, sc, accept);
        sc.spill_cap = 0;
        let mut found: Vec<Cand> = sc.results.drain().collect();
        found.append(&mut sc.spill);
        self.rerank(q, &mut found, &mut sc.links);
        found
    }

    fn search_one(
        &self,
        q: &[f32],
        k: usize,
        ef: usize,
        allowed: Option<&Allowed>,
    ) -> Vec<Neighbor> {
        let q = Query::padded(q, self.vectors.padded_dim());
        let mut best: Vec<Cand> = match allowed {
            Some(a) if self.prefer_scan(a, ef) => {
                let mut heap = BinaryHeap::with_capacity(k.min(a.len()) + 1);
                let slots = a.slots();
                self.each_rank_dist(&q, slots, |i, d| {
                    // The allowed slots are scattered over the store: once a
                    // group of four is measured, start loading the one after
                    // the next, so each group has arrived by its turn.
                    if i % 4 == 0 {
                        for &s in slots.iter().skip(i + 8).take(4) {
                            self.prefetch_rank(s);
                        }
                    }
                    let slot = slots[i];
                    if heap.len() < k {
                        heap.push(Cand { d, slot });
                    } else if heap.peek().is_some_and(|w: &Cand| d < w.d) {
                        heap.pop();
                        heap.push(Cand { d, slot });
                    }
                });
                heap.into_vec()
            }
            _ => with_scratch(|sc| {
                let removed = &self.removed;
                match allowed {
                    Some(a) => self.search_ranked(&q, k, ef, sc, |s| a.contains(s)),
                    None => self.search_ranked(&q, k, ef, sc, |s| !removed[s as usize]),
                }
            }),
        };
        best.sort_unstable();
        best.truncate(k);
        best.into_iter()
            .map(|c| Neighbor {
                id: self.labels[c.slot as usize],
                distance: c.d,
            })
            .collect()
    }

    /// The `k` nearest live vectors to `query`, nearest first; fewer when the
    /// index (or the allowed set) holds fewer.
    pub fn search(
        &self,
        query: &[f32],
        k: usize,
        ef: Option<usize>,
        allowed: Option<&Allowed>,
    ) -> Result<Vec<Neighbor>> {
        Self::check_k(k, 1)?;
        let q = self.check_query(query)?;
        let ef = ef.unwrap_or(self.ef).max(k);
        Ok(self.search_one(&q, k, ef, allowed))
    }

    /// The distances of `query` to the vectors of `ids`, as [`Hnsw::search`]
    /// reports them (the same kernel, so the same floats); `None` for an id
    /// the index does not hold.
    pub fn distances(&self, query: &[f32], ids: &[u64]) -> Result<Vec<Option<f32>>> {
        let q = self.check_query(query)?;
        let q = Query::padded(&q, self.vectors.padded_dim());
        let slots: Vec<u32> = ids
            .iter()
            .filter_map(|id| self.slots.get(id).copied())
            .collect();
        // The candidates are scattered: all are requested first, so the misses overlap.
        for &s in &slots {
            self.prefetch_rank(s);
        }
        let mut dist = vec![0f32; slots.len()];
        self.each_rank_dist(&q, &slots, |i, d| dist[i] = d);
        let mut found = dist.into_iter();
        Ok(ids
            .iter()
            .map(|id| {
                self.slots
                    .contains_key(id)
                    .then(|| found.next().unwrap_or(f32::NAN))
            })
            .collect())
    }

    /// The `k` nearest live vectors whose id `accept` admits, nearest first,
    /// found by a graph search that calls `accept` on the ids it reaches (as
    /// hnswlib's filter functor is called), never on the whole index. The
    /// predicate may be slow or have side effects; it runs on this thread.
    pub fn search_where(
        &self,
        query: &[f32],
        k: usize,
        ef: Option<usize>,
        accept: impl Fn(u64) -> bool,
    ) -> Result<Vec<Neighbor>> {
        Self::check_k(k, 1)?;
        let q = self.check_query(query)?;
        let ef = ef.unwrap_or(self.ef).max(k);
        let q = Query::padded(&q, self.vectors.padded_dim());
        let removed = &self.removed;
        let labels = &self.labels;
        // A predicate that searches this index again would find this thread's
        // scratch space in use: it then gets a fresh one.
        let mut best = search::with_scratch_or_fresh(|sc| {
            self.search_ranked(&q, k, ef, sc, |s| {
                !removed[s as usize] && accept(labels[s as usize])
            })
        });
        best.sort_unstable();
        best.truncate(k);
        Ok(best
            .into_iter()
            .map(|c| Neighbor {
                id: self.labels[c.slot as usize],
                distance: c.d,
            })
            .collect())
    }

    /// Searches every row of `queries` on all cores. Returns row-major
    /// `(nq, k)` labels and distances; rows with fewer than `k` results are
    /// padded with [`MISSING`] and `f32::INFINITY`.
    pub fn search_batch(
        &self,
        queries: &[f32],
        k: usize,
        ef: Option<usize>,
        allowed: Option<&Allowed>,
    ) -> Result<(Vec<u64>, Vec<f32>)> {
        let dim = self.dim();
        Self::check_k(k, queries.len() / dim)?;
        if !queries.len().is_multiple_of(dim) {
            return Err(Error::DimensionMismatch {
                expected: dim,
                got: queries.len(),
            });
        }
        let qs = self.prepare(queries, "query")?;
        let nq = qs.len() / dim;
        let ef = ef.unwrap_or(self.ef).max(k);
        let mut labels = vec![MISSING; nq * k];
        let mut dists = vec![f32::INFINITY; nq * k];
        let run = |((q, l), d): ((&[f32], &mut [u64]), &mut [f32])| {
            for (i, n) in self.search_one(q, k, ef, allowed).into_iter().enumerate() {
                l[i] = n.id;
                d[i] = n.distance;
            }
        };
        let rows = qs
            .chunks_exact(dim)
            .zip(labels.chunks_exact_mut(k))
            .zip(dists.chunks_exact_mut(k));
        if nq > 1 {
            rows.collect::<Vec<_>>().into_par_iter().for_each(run);
        } else {
            rows.for_each(run);
        }
        Ok((labels, dists))
    }
}

#[cfg(test)]
mod tests;
