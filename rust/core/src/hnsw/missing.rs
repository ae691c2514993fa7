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

use super::{row_scale, row_scales, Hnsw, Metric};
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
    /// and normalised in place.
    pub(crate) fn fill_rows(&mut self, ids: &[u64], mut data: Vec<f32>) -> Result<()> {
        if let Some(id) = first_duplicate(ids) {
            return Err(Error::invalid(format!("id {id} appears twice in one fill")));
        }
        let dim = self.dim();
        debug_assert_eq!(data.len(), ids.len() * dim);
        // The check (and scaling) of a staged batch (see `Hnsw::check_batch`),
        // so the values stored are those a replay stores.
        let normalise = self.metric == Metric::Cosine;
        let scales = row_scales(&data, dim, normalise, "vector")?;
        if normalise {
            for (v, &inv) in data.chunks_exact_mut(dim).zip(&scales) {
                v.iter_mut().for_each(|x| *x *= inv);
            }
        }
        let picked = self.picked(ids.len(), |row| ids[row]);
        if picked.is_empty() {
            return Ok(());
        }
        // Stored vectors change: a buffer copied by `grown` before this no
        // longer holds them (see `edits`; even, as no batch is staged).
        self.edits += 2;
        self.vectors.set_many(&picked, &data);
        self.stored(&picked, None);
        Ok(())
    }

    /// Gives back the vectors of the awaited ones of `count` ids (`id(i)`, no
    /// id twice), each made where it is stored, on all cores:
    /// `values(i, v)` writes the vector of the `i`th into `v` and says
    /// whether it is one the index takes; declined ones stay awaited. Each
    /// is then checked and normalised under cosine as a staged batch's are,
    /// and stored. Nothing is copied whole: a fill at open takes every
    /// vector of the store. On an error some of the slots may hold their
    /// vector already, unmarked: the caller is to give the index up.
    pub(crate) fn fill_with(
        &mut self,
        count: usize,
        id: impl Fn(usize) -> u64,
        values: impl Fn(usize, &mut [f32]) -> Result<bool> + Sync,
    ) -> Result<()> {
        let picked = self.picked(count, id);
        if picked.is_empty() {
            return Ok(());
        }
        let normalise = self.metric == Metric::Cosine;
        // As in `fill_rows`.
        self.edits += 2;
        let stored = self.vectors.set_many_with(&picked, |row, v| {
            if !values(row, v)? {
                return Ok(false);
            }
            let inv = row_scale(v, row, normalise, "vector")?;
            if normalise {
                v.iter_mut().for_each(|x| *x *= inv);
            }
            Ok(true)
        })?;
        self.stored(&picked, Some(&stored));
        Ok(())
    }

    /// The `(slot, i)` of each of `count` ids (`id(i)`) whose vector is
    /// awaited, in slot order.
    fn picked(&self, count: usize, id: impl Fn(usize) -> u64) -> Vec<(u32, usize)> {
        if self.missing_live == 0 {
            return Vec::new();
        }
        let mut picked: Vec<(u32, usize)> = (0..count)
            .filter_map(|i| {
                let slot = *self.slots.get(&id(i))?;
                self.is_missing(slot).then_some((slot, i))
            })
            .collect();
        picked.sort_unstable();
        picked
    }

    /// Marks the slots of `picked` as holding their vector (those `stored`
    /// says were, when given).
    fn stored(&mut self, picked: &[(u32, usize)], stored: Option<&[bool]>) {
        for (i, &(slot, _)) in picked.iter().enumerate() {
            if stored.is_none_or(|s| s[i]) {
                self.vector_stored(slot);
            }
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
