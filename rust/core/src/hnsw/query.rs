//! The searches callers run (the k nearest, filtered by an id set or a
//! predicate, one query or a batch on all cores, and the distances to given
//! ids): checking the query, scanning a small allowed set instead of the
//! graph, and ranking the candidates of the graph search (`search`).

use std::collections::BinaryHeap;

use rayon::prelude::*;

use super::cand::Cand;
use super::distance::Query;
use super::filter::Allowed;
use super::search;
use super::{Hnsw, Neighbor, MISSING};
use crate::error::{Error, Result};

/// Largest k a search accepts, and largest padded result of one call.
pub const MAX_K: usize = 1 << 24;
pub const MAX_RESULTS: usize = 1 << 28;

/// How many of the nodes a search pushed out of its `ef` results are
/// re-ranked too, when it walks approximate distances: enough to re-rank
/// `2 k` in all (none once ef reaches that).
fn spill_for(k: usize, ef: usize) -> usize {
    (2 * k).saturating_sub(ef)
}

impl Hnsw {
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
        self.check_filled()?;
        self.prepare(q, "query")
    }

    /// Refuses a `k` of 0, or one whose padded result for `queries` queries
    /// (`queries * k` labels and distances) is too large: what every search
    /// checks before it allocates its result, and a caller that allocates
    /// one itself checks first.
    pub fn check_k(k: usize, queries: usize) -> Result<()> {
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
            // A search from inside a `search_where` predicate finds this
            // thread's scratch space in use, and takes a fresh one.
            _ => search::with_scratch_or_fresh(|sc| {
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
        self.check_filled()?;
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
            let rows = rows.collect::<Vec<_>>();
            crate::pool::install(|| rows.into_par_iter().for_each(run));
        } else {
            rows.for_each(run);
        }
        Ok((labels, dists))
    }
}
