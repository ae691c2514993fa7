//! Adding a batch ([`Hnsw::add`]) in three steps: [`Hnsw::stage`] checks it,
//! assigns slots and stores the vectors (`&mut self`); [`Hnsw::link_staged`]
//! links it on all cores (`&self`, so searches run meanwhile);
//! [`Hnsw::publish`] lets its ids be found. Also the room made for a batch
//! before it comes ([`Hnsw::reserve`], [`Hnsw::grown`]).

use std::sync::atomic::Ordering;

use rayon::prelude::*;

use super::distance::{Metric, Query};
use super::filter::Allowed;
use super::rows::row_scales;
use super::search::with_scratch;
use super::storage::{self, Precision};
use super::{Entry, Hnsw, MISSING, NO_ENTRY};
use crate::error::{Error, Result};
use crate::idmap::first_duplicate;

/// Batches smaller than this link on the calling thread: a message-sized add
/// must not pay for waking the thread pool.
pub(crate) const PARALLEL_MIN_BATCH: usize = 64;

/// (slot, row of the batch)
type Plan = (u32, usize);

/// A batch stored by [`Hnsw::stage`], to be linked and published.
pub(crate) struct Staged {
    pub(super) plan: Vec<Plan>,
    /// The batch's vectors, checked (and normalised under the cosine metric);
    /// empty when the store keeps them as they are (`F32`), in which case
    /// linking reads them back from there instead of holding a second copy.
    pub(super) data: Vec<f32>,
    /// The slots this batch clears (see [`Hnsw::clear_due`]): the freed ones,
    /// whose links are to be taken out, and the vacant ones, which have none;
    /// the batch takes its slots among them first.
    pub(super) cleared: Allowed,
    /// Every slot of the batch: live for the purposes of linking.
    staged: Allowed,
    /// Whether linking ends with the pass over the whole graph that makes
    /// every node reachable ([`Hnsw::reconnect`]).
    pub(super) check: bool,
}

/// A batch's rows once checked ([`Hnsw::check_batch`]).
struct Checked {
    /// Whether the rows are stored as given, scaled by `scales` (an `F32`
    /// store); else `data` holds them checked.
    in_place: bool,
    data: Vec<f32>,
    scales: Vec<f32>,
}

/// Buffers of an [`Hnsw`] with room for more nodes, copied through `&self`
/// ([`Hnsw::grown`]) so that the copy runs while searches do.
pub(crate) struct Grown {
    edits: u64,
    pub(super) vectors: storage::GrownVectors,
    pub(super) level0: Option<Vec<std::sync::atomic::AtomicU32>>,
}

impl Hnsw {
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
        let fresh = additional.saturating_sub(self.reusable());
        self.vectors.reserve(fresh);
        self.graph.reserve(fresh);
    }

    /// Copies of the large buffers (the vectors and the level-0 lists) with the
    /// room [`Hnsw::reserve`] would make for `additional` more slots. Growing
    /// them in place copies them too, under the caller's exclusive lock, which
    /// holds searches meanwhile (figures in `benches/README.md`, "Figures
    /// behind the code"). Nothing is copied while a batch is staged (its links
    /// change meanwhile). Links also change through `&self` in
    /// [`Hnsw::settle`], which `edits` does not see: the caller keeps it from
    /// running until [`Hnsw::adopt`] (the engine holds its upgradable read
    /// across both, as a save does).
    pub(crate) fn grown(&self, additional: usize) -> Grown {
        let fresh = additional.saturating_sub(self.reusable());
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
        let checked = self.check_batch(ids, vectors)?;
        // Odd until `publish`: see `edits`.
        self.edits += 1;
        self.free_present(ids);
        let cleared = self.clear();
        if !cleared.is_empty() {
            self.move_entry_off(&cleared);
        }
        // Assign slots and store vectors; linking comes after, in parallel.
        let plan = self.store_batch(ids, vectors, &checked);
        Ok(Staged {
            staged: Allowed::new(self.graph.slots(), plan.iter().map(|p| p.0)),
            check: self.check_due(plan.len()) || !cleared.is_empty(),
            plan,
            data: checked.data,
            cleared,
        })
    }

    /// `vectors` holds one row of `dim` values per id.
    pub(super) fn check_shape(&self, ids: &[u64], vectors: &[f32]) -> Result<()> {
        let dim = self.dim();
        if vectors.len() == ids.len() * dim {
            return Ok(());
        }
        Err(Error::invalid(format!(
            "got {} ids but {} values, expected {} ({} vectors of dim {dim})",
            ids.len(),
            vectors.len(),
            ids.len() * dim,
            ids.len()
        )))
    }

    /// Validates a batch before anything changes: its shape, its ids and
    /// every row's values.
    fn check_batch(&self, ids: &[u64], vectors: &[f32]) -> Result<Checked> {
        let dim = self.dim();
        self.check_shape(ids, vectors)?;
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
        let checked = if in_place {
            Checked {
                in_place,
                data: Vec::new(),
                scales: row_scales(vectors, dim, normalise, "vector")?,
            }
        } else {
            Checked {
                in_place,
                data: self.prepare(vectors, "vector")?,
                scales: Vec::new(),
            }
        };
        if self.graph.slots() + ids.len() > u32::MAX as usize / 2 {
            return Err(Error::invalid("the index cannot hold that many vectors"));
        }
        Ok(checked)
    }

    /// Frees the slots of the batch's ids the index holds, live or hidden, as
    /// a remove does: their links were chosen for the old vector, and
    /// relinking the slot in place would leave the links into it, which
    /// only a pass over every list finds. The new vector takes another slot.
    fn free_present(&mut self, ids: &[u64]) {
        for id in ids {
            if let Some(slot) = self.slots.remove(id) {
                self.set_removed(slot, true);
                self.free.push(slot);
            } else if let Some(slot) = self.held.remove(id) {
                self.free.push(slot);
            }
        }
    }

    /// Stores each row of the batch in a slot (see [`Hnsw::take_slot`]),
    /// under its id and kept out of searches; returns the plan of
    /// [`Staged`].
    fn store_batch(&mut self, ids: &[u64], vectors: &[f32], checked: &Checked) -> Vec<Plan> {
        let dim = self.dim();
        let mut plan: Vec<Plan> = Vec::with_capacity(ids.len());
        self.reserve(ids.len());
        let mut scaled = Vec::with_capacity(if checked.in_place { dim } else { 0 });
        for (row, &id) in ids.iter().enumerate() {
            let slot = self.take_slot(id);
            let v = if checked.in_place {
                let inv = checked.scales[row];
                scaled.clear();
                scaled.extend(vectors[row * dim..(row + 1) * dim].iter().map(|x| x * inv));
                &scaled[..]
            } else {
                &checked.data[row * dim..(row + 1) * dim]
            };
            self.vectors.set(slot, v);
            self.vector_stored(slot);
            self.labels[slot as usize] = id;
            plan.push((slot, row));
        }
        plan
    }

    /// A slot for `id`, removed until [`Hnsw::publish`]: a vacant one, else
    /// a new node of a random level.
    fn take_slot(&mut self, id: u64) -> u32 {
        if let Some(slot) = self.vacant.pop() {
            return slot;
        }
        let level = self.random_level();
        let slot = self.graph.push(level);
        self.vectors.push_zeroed();
        self.labels.push(id);
        self.removed.push(true);
        slot
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
            cleared,
            staged,
            check,
        } = staged;
        if !cleared.is_empty() {
            self.unlink(cleared);
        }
        let dim = self.dim();
        let padded = self.vectors.padded_dim();
        let link = |&(slot, row): &Plan| {
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
            crate::pool::install(|| rest.par_iter().for_each(link));
        } else {
            rest.iter().for_each(link);
        }
        // A full pass over the graph: only after batches large enough to pay
        // for it many times over (see `plan_check`), or after a clear, which
        // made one anyway and is what strands nodes (their links in came
        // from cleared slots).
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
        for (slot, _) in staged.plan {
            self.removed[slot as usize] = false;
            self.slots.insert(self.labels[slot as usize], slot);
        }
    }

    /// Searches start at the entry point, so it must not be one of the slots
    /// about to be cleared: hand the role to the highest node that stays
    /// linked. When there is none, the graph is rebuilt from nothing.
    fn move_entry_off(&mut self, cleared: &Allowed) {
        let Some(entry) = self.entry() else {
            return;
        };
        if !cleared.contains(entry.slot) {
            return;
        }
        let heir = (0..self.graph.slots() as u32)
            .filter(|&s| !cleared.contains(s))
            .max_by_key(|&s| (self.graph.level(s), std::cmp::Reverse(s)));
        match heir {
            Some(slot) => self.set_entry(Entry {
                slot,
                level: self.graph.level(slot),
            }),
            None => self.entry.store(NO_ENTRY, Ordering::Release),
        }
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
}
