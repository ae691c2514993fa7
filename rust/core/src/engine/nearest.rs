//! Near-duplicate checks for a whole batch: for each query vector, the most
//! similar stored record its group's filter admits, if it reaches a cosine
//! similarity threshold. One call for a batch, so `add_many(unique=True)`
//! costs one filter selection per distinct scope, not one search per item.
//! Superseded records are never duplicates.

use rayon::prelude::*;

use super::pending::normalised;
use super::{Engine, Filter};
use crate::error::{Error, Result};

/// Graph candidates examined per query (the nearest admitted one is wanted).
const POOL: usize = 50;

impl Engine {
    /// For each row of `queries` (row-major, `dim` floats each), the id and
    /// cosine similarity of the nearest record admitted by
    /// `filters[groups[row]]`, or `None` when none reaches `min_similarity`.
    pub fn nearest(
        &self,
        queries: &[f32],
        groups: &[u32],
        filters: &[Filter],
        min_similarity: f32,
    ) -> Result<Vec<Option<(u64, f32)>>> {
        let Some(dim) = self.dim() else {
            return Err(Error::invalid(
                "this store has no vector space (it was created without an embedder)",
            ));
        };
        if queries.len() != groups.len() * dim {
            return Err(Error::invalid(format!(
                "{} query values for {} groups of dimension {dim}",
                queries.len(),
                groups.len()
            )));
        }
        if let Some(&g) = groups.iter().find(|&&g| g as usize >= filters.len()) {
            return Err(Error::invalid(format!(
                "group {g} has no filter ({} given)",
                filters.len()
            )));
        }
        if !min_similarity.is_finite() {
            return Err(Error::invalid("min_similarity must be a finite number"));
        }
        let unit = normalised(queries, dim, "query vector")?;
        // Each group's admitted set, computed once for all of its queries; a
        // filter that admits every record restricts nothing.
        let selections: Vec<_> = filters
            .iter()
            .map(|f| {
                let sel = (!f.is_all())
                    .then(|| {
                        let mut sel = self.select(f);
                        sel.slots.retain(|&s| !self.records.is_closed(s));
                        sel
                    })
                    .filter(|s| s.slots.len() < self.records.len());
                let ids: Option<Vec<u64>> = sel
                    .as_ref()
                    .map(|s| s.slots.iter().map(|&slot| self.records.id(slot)).collect());
                let allowed = self
                    .hnsw
                    .as_ref()
                    .zip(ids.as_deref())
                    .map(|(h, ids)| h.allowed(ids));
                (sel, ids.is_some_and(|ids| ids.is_empty()), allowed)
            })
            .collect();
        crate::pool::install(|| {
            unit.par_chunks(dim)
                .zip(groups.par_iter())
                .map(|(q, &g)| {
                    let (sel, empty, allowed) = &selections[g as usize];
                    if *empty {
                        return Ok(None);
                    }
                    let hits = self.nearest_vectors(q, POOL, allowed.as_ref(), sel.as_ref())?;
                    // A superseded record is no duplicate: what it said is no longer true.
                    Ok(hits
                        .iter()
                        .copied()
                        .find(|&(id, _)| {
                            !self
                                .records
                                .slot(id)
                                .is_some_and(|s| self.records.is_closed(s))
                        })
                        .filter(|&(_, cos)| cos >= min_similarity))
                })
                .collect()
        })
    }
}
