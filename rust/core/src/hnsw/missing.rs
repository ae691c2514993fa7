//! Slots whose vector a snapshot left out: an engine's snapshot holds only
//! the vectors of removed slots, as its database holds the live ones (see
//! `snapshot.rs`), and [`Hnsw::fill`] gives those back after the load.
//!
//! A missing vector reads as zeros (the slot was pushed zeroed, its int8
//! codes and their grid too), which under the cosine and `ip` metrics is a
//! vector orthogonal to every query, at distance 1: a slot whose id was
//! removed before its vector came back (its row deleted after the snapshot
//! was written) still routes searches, never as NaN, is never returned (it
//! is removed), and an add that reuses it stores a vector over it. A live
//! id without its vector would be returned at that wrong distance, so
//! searches and [`Hnsw::vector`] refuse to run while one is left
//! ([`Hnsw::check_filled`]): the caller fills every live id or rebuilds.

use rayon::prelude::*;

use super::{row_scales, Hnsw, Metric};
use crate::error::{Error, Result};
use crate::idmap::first_duplicate;

impl Hnsw {
    /// Whether `slot`'s vector is missing.
    pub(super) fn is_missing(&self, slot: u32) -> bool {
        self.missing.get(slot as usize).copied().unwrap_or(false)
    }

    /// Marks the slots of a loaded snapshot whose vector it left out.
    pub(super) fn set_missing(&mut self, missing: Vec<bool>) {
        self.missing_live = missing
            .iter()
            .zip(&self.removed)
            .filter(|&(&m, &r)| m && !r)
            .count();
        self.missing = if missing.contains(&true) {
            missing
        } else {
            Vec::new()
        };
    }

    /// Notes that `slot` got a vector: called before its `removed` flag changes.
    pub(super) fn vector_stored(&mut self, slot: u32) {
        if let Some(m) = self.missing.get_mut(slot as usize) {
            if std::mem::take(m) && !self.removed[slot as usize] {
                self.missing_live -= 1;
            }
        }
    }

    /// Sets the `removed` flag of `slot`, keeping count of the live ids
    /// whose vector is missing.
    pub(super) fn set_removed(&mut self, slot: u32, removed: bool) {
        let was = std::mem::replace(&mut self.removed[slot as usize], removed);
        if was != removed && self.is_missing(slot) {
            if removed {
                self.missing_live -= 1;
            } else {
                self.missing_live += 1;
            }
        }
    }

    /// Gives back the vectors a snapshot left out: row `i` of `vectors`
    /// (`ids.len()` rows of `dim`) is the vector of `ids[i]`. Ids that are
    /// not live or whose slot holds its vector are ignored (rows added since
    /// the snapshot may come this way too); the others' rows are checked
    /// (and normalised under cosine) as an add's are, before anything
    /// changes. The vectors are stored without relinking: the links are
    /// those the snapshot kept for them.
    pub fn fill(&mut self, ids: &[u64], vectors: &[f32]) -> Result<()> {
        let dim = self.dim();
        self.check_shape(ids, vectors)?;
        if let Some(id) = first_duplicate(ids) {
            return Err(Error::invalid(format!("id {id} appears twice in one fill")));
        }
        let rows = self.awaited_rows(ids);
        let mut data = Vec::with_capacity(rows.len() * dim);
        for &row in &rows {
            data.extend_from_slice(&vectors[row * dim..][..dim]);
        }
        let awaited: Vec<u64> = rows.iter().map(|&row| ids[row]).collect();
        self.fill_rows(&awaited, data)
    }

    /// [`Hnsw::fill`] with the rows given as a buffer of their own, checked
    /// and normalised in place (a fill at open takes every vector of the
    /// store, and each copy of them costs as much as the rest).
    pub(crate) fn fill_rows(&mut self, ids: &[u64], mut data: Vec<f32>) -> Result<()> {
        if let Some(id) = first_duplicate(ids) {
            return Err(Error::invalid(format!("id {id} appears twice in one fill")));
        }
        let picked = self.prepare_fill(ids, &mut data)?;
        self.fill_prepared(&picked, &data);
        Ok(())
    }

    /// The first half of [`Hnsw::fill_rows`], which reads the index only (a
    /// fill at open runs it on every core): checks and normalises `data` in
    /// place, and returns the `(slot, row)` of each awaited id, in slot order.
    /// `ids` must not repeat.
    pub(crate) fn prepare_fill(&self, ids: &[u64], data: &mut [f32]) -> Result<Vec<(u32, usize)>> {
        let dim = self.dim();
        debug_assert_eq!(data.len(), ids.len() * dim);
        // The check (and scaling) of a staged batch (see `Hnsw::check_batch`),
        // so the values stored are those a replay stores.
        let normalise = self.metric == Metric::Cosine;
        let scales = row_scales(data, dim, normalise, "vector")?;
        if normalise {
            for (v, &inv) in data.chunks_exact_mut(dim).zip(&scales) {
                v.iter_mut().for_each(|x| *x *= inv);
            }
        }
        let mut picked: Vec<(u32, usize)> = self
            .awaited_rows(ids)
            .into_iter()
            .map(|row| (self.slots[&ids[row]], row))
            .collect();
        picked.sort_unstable();
        Ok(picked)
    }

    /// The second half of [`Hnsw::fill_rows`]: stores the rows of `data` that
    /// [`Hnsw::prepare_fill`] picked.
    pub(crate) fn fill_prepared(&mut self, picked: &[(u32, usize)], data: &[f32]) {
        if picked.is_empty() {
            return;
        }
        // Stored vectors change: a buffer copied by `grown` before this no
        // longer holds them (see `edits`; even, as no batch is staged).
        self.edits += 2;
        self.vectors.set_many(picked, data);
        for &(slot, _) in picked {
            self.vector_stored(slot);
        }
        if self.missing_live == 0 {
            self.missing = Vec::new();
        }
    }

    /// The positions in `ids` of the live ids whose vector is missing.
    pub fn awaited_rows(&self, ids: &[u64]) -> Vec<usize> {
        if self.missing_live == 0 {
            return Vec::new();
        }
        ids.iter()
            .enumerate()
            .filter(|&(_, id)| self.slots.get(id).is_some_and(|&s| self.is_missing(s)))
            .map(|(row, _)| row)
            .collect()
    }

    /// Live ids whose vector is missing, in slot order.
    pub fn awaiting(&self) -> Vec<u64> {
        if self.missing_live == 0 {
            return Vec::new();
        }
        crate::pool::install(|| {
            self.missing
                .par_iter()
                .enumerate()
                .filter(|&(s, &m)| m && !self.removed[s])
                .map(|(s, _)| self.labels[s])
                .collect()
        })
    }

    /// Refuses a search while a live id's vector is missing (see the module
    /// docs).
    pub(super) fn check_filled(&self) -> Result<()> {
        if self.missing_live == 0 {
            return Ok(());
        }
        Err(Error::invalid(format!(
            "{} vector(s) of this index were left out of its snapshot and not filled yet",
            self.missing_live
        )))
    }
}
