//! Graph search: the layer search of the HNSW paper (Malkov & Yashunin,
//! algorithm 2) with a reusable per-thread scratch space.

use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::cand::Cand;
use super::distance::Query;
use super::pool::Pool;
use super::Hnsw;
use crate::prefetch::prefetch;

/// Per-thread search state, reused across searches so a query allocates nothing.
pub struct Scratch {
    /// `visited[slot] == epoch` marks a node seen by the current search; bumping
    /// `epoch` clears the whole set in O(1).
    visited: Vec<u32>,
    epoch: u32,
    /// C in the paper: nodes still to expand, nearest first.
    candidates: BinaryHeap<Reverse<Cand>>,
    /// W in the paper: the `ef` nearest accepted nodes, farthest on top.
    pub results: BinaryHeap<Cand>,
    /// Unvisited neighbours of the node being expanded.
    fresh: Vec<u32>,
    /// The last `spill_cap` nodes pushed out of `results` (a ring from
    /// `spill_at`), kept for a search that ranks its final candidates on
    /// another copy of the vectors: when ef is close to k, the walk's
    /// approximate distances decide ties at the edge of the top k, and
    /// re-ranking a few more candidates undoes their mistakes. The last ones
    /// out are the nearest of those out, as `results`' bound only shrinks.
    pub spill: Vec<Cand>,
    pub spill_cap: usize,
    spill_at: usize,
    pub links: Vec<u32>,
    pub fresh_links: Vec<u32>,
    /// A stored vector decoded to f32, when distances between two stored
    /// vectors are needed while linking.
    pub base: Query,
    pub cands: Vec<Cand>,
    pub selected: Vec<Cand>,
    /// The beam of [`Hnsw::beam_search`].
    pool: Pool,
}

impl Default for Scratch {
    fn default() -> Self {
        Scratch {
            visited: Vec::new(),
            epoch: 0,
            candidates: BinaryHeap::new(),
            results: BinaryHeap::new(),
            fresh: Vec::new(),
            spill: Vec::new(),
            spill_cap: 0,
            spill_at: 0,
            links: Vec::new(),
            cands: Vec::new(),
            selected: Vec::new(),
            fresh_links: Vec::new(),
            base: Query::new(Vec::new()),
            pool: Pool::default(),
        }
    }
}

impl Scratch {
    fn start(&mut self, slots: usize) {
        if self.visited.len() < slots {
            self.visited.resize(slots, 0);
        }
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            self.visited.fill(0);
            self.epoch = 1;
        }
        self.candidates.clear();
        self.results.clear();
        self.spill.clear();
        self.spill_at = 0;
    }

    /// Marks `slot` visited; true if it was not yet.
    #[inline]
    fn visit(&mut self, slot: u32) -> bool {
        let v = &mut self.visited[slot as usize];
        if *v == self.epoch {
            false
        } else {
            *v = self.epoch;
            true
        }
    }
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

pub fn with_scratch<R>(f: impl FnOnce(&mut Scratch) -> R) -> R {
    SCRATCH.with(|s| f(&mut s.borrow_mut()))
}

/// [`with_scratch`], or a fresh scratch space when this thread's is already
/// in use (a search started from inside another search's filter).
pub fn with_scratch_or_fresh<R>(f: impl FnOnce(&mut Scratch) -> R) -> R {
    SCRATCH.with(|s| match s.try_borrow_mut() {
        Ok(mut sc) => f(&mut sc),
        Err(_) => f(&mut Scratch::default()),
    })
}

/// How many leading cache lines of a vector to prefetch before computing its
/// distance while linking (whose caches are warm from the batch) and before
/// ranking; the hardware streams the rest.
const PREFETCH_LINES: usize = 2;

impl Hnsw {
    #[inline]
    pub(super) fn dist_to(&self, q: &Query, slot: u32) -> f32 {
        let x = self.vectors.get(slot);
        if self.vectors.params_apart() {
            self.dist.eval_with(q, x, self.vectors.walk_params(slot))
        } else {
            self.dist.eval(q, x)
        }
    }

    /// Distances to the first four of `slots` at once (their loads overlap),
    /// or to the one first slot when fewer are left; returns how many.
    #[inline]
    fn dists(&self, q: &Query, slots: &[u32]) -> ([f32; 4], usize) {
        if let [a, b, c, d, ..] = *slots {
            (self.dists4(q, [a, b, c, d]), 4)
        } else {
            ([self.dist_to(q, slots[0]), 0.0, 0.0, 0.0], 1)
        }
    }

    /// The distance results are ranked by: the second copy of the vectors
    /// (see `Hnsw::rank`), else the one searches walk by.
    pub(super) fn rank_dist(&self, q: &Query, slot: u32) -> f32 {
        match &self.rank {
            Some(rank) => rank.eval(q, self.vectors.rank(slot)),
            None => self.dist_to(q, slot),
        }
    }

    /// Calls `f(i, d)` with the distance `d` from `q` to `slots[i]`, in order,
    /// measuring four at a time.
    #[inline]
    pub(super) fn each_dist(&self, q: &Query, slots: &[u32], f: impl FnMut(usize, f32)) {
        in_fours(slots, |s| self.dists(q, s), f);
    }

    /// [`Hnsw::each_dist`] with [`Hnsw::rank_dist`].
    #[inline]
    pub(super) fn each_rank_dist(&self, q: &Query, slots: &[u32], f: impl FnMut(usize, f32)) {
        in_fours(slots, |s| self.rank_dists(q, s), f);
    }

    /// Replaces the distances of `found` by [`Hnsw::rank_dist`]; their
    /// records are all requested first, so the misses overlap.
    pub(super) fn rerank(&self, q: &Query, found: &mut [Cand], slots: &mut Vec<u32>) {
        slots.clear();
        slots.extend(found.iter().map(|c| c.slot));
        for &s in slots.iter() {
            self.prefetch_rank(s);
        }
        self.each_rank_dist(q, slots, |i, d| found[i].d = d);
    }

    /// [`Hnsw::rank_dist`] of the first four of `slots` at once, or of the
    /// first one when fewer are left; returns how many.
    fn rank_dists(&self, q: &Query, slots: &[u32]) -> ([f32; 4], usize) {
        let Some(rank) = &self.rank else {
            return self.dists(q, slots);
        };
        if let [a, b, c, d, ..] = *slots {
            let x = [a, b, c, d].map(|s| self.vectors.rank(s));
            (rank.eval4(q, x), 4)
        } else {
            ([self.rank_dist(q, slots[0]), 0.0, 0.0, 0.0], 1)
        }
    }

    /// Starts loading the first lines of what [`Hnsw::rank_dist`] reads of `slot`.
    pub(super) fn prefetch_rank(&self, slot: u32) {
        let p = if self.rank.is_some() {
            self.vectors.rank(slot).as_ptr()
        } else {
            self.vectors.ptr(slot)
        };
        for line in 0..PREFETCH_LINES {
            prefetch(p.wrapping_add(line * 64));
        }
    }

    #[inline]
    pub(super) fn dists4(&self, q: &Query, slots: [u32; 4]) -> [f32; 4] {
        let x = slots.map(|s| self.vectors.get(s));
        if self.vectors.params_apart() {
            self.dist
                .eval4_with(q, x, slots.map(|s| self.vectors.walk_params(s)))
        } else {
            self.dist.eval4(q, x)
        }
    }

    /// Makes `q` the vector of `slot` as searches compare it: its int8
    /// codes as they are, else its decoded floats.
    pub(super) fn load_query(&self, slot: u32, q: &mut Query) {
        if self.vectors.params_apart() {
            let codes = &self.vectors.get(slot)[..self.vectors.padded_dim()];
            q.set_codes(codes, self.vectors.walk_params(slot), self.vectors.dim());
        } else {
            self.vectors.decode(slot, &mut q.v);
        }
    }

    /// Greedy descent on one upper level (ef = 1).
    pub(super) fn greedy(&self, q: &Query, mut cur: Cand, level: usize, sc: &mut Scratch) -> Cand {
        loop {
            let mut changed = false;
            self.graph.read(cur.slot, level, &mut sc.links);
            let links = &sc.links;
            self.each_dist(q, links, |i, d| {
                if d < cur.d {
                    cur = Cand { d, slot: links[i] };
                    changed = true;
                }
            });
            if !changed {
                return cur;
            }
        }
    }

    /// Searches `level` from `entries`, leaving the `ef` nearest nodes that
    /// `accept` admits in `sc.results`. Rejected nodes are still expanded, so
    /// deleted or filtered-out nodes keep routing the search.
    pub(super) fn search_layer(
        &self,
        q: &Query,
        entries: &[Cand],
        ef: usize,
        level: usize,
        sc: &mut Scratch,
        accept: impl Fn(u32) -> bool,
    ) {
        sc.start(self.graph.slots());
        for &e in entries {
            if sc.visit(e.slot) {
                sc.candidates.push(Reverse(e));
                if accept(e.slot) {
                    sc.results.push(e);
                    if sc.results.len() > ef {
                        let out = sc.results.pop();
                        spill(&mut sc.spill, sc.spill_cap, &mut sc.spill_at, out);
                    }
                }
            }
        }
        // A search reads every line of each vector it measures, mostly from
        // memory (the embedder's run before it evicts the caches): asking for
        // all of them at once beats the hardware's streaming (figures in
        // benches/README.md, "Figures behind the code").
        let lines = self.vectors.lines_per_record();
        while let Some(Reverse(c)) = sc.candidates.pop() {
            let bound = match sc.results.peek() {
                Some(w) if sc.results.len() >= ef => w.d,
                _ => f32::INFINITY,
            };
            if c.d > bound {
                break;
            }
            if level == 0 {
                if let Some(Reverse(next)) = sc.candidates.peek() {
                    self.graph.prefetch(next.slot);
                }
            }
            self.fresh_neighbours(c.slot, level, lines, sc);
            let (fresh, candidates, results) = (&sc.fresh, &mut sc.candidates, &mut sc.results);
            let (spilled, spill_cap, spill_at) = (&mut sc.spill, sc.spill_cap, &mut sc.spill_at);
            self.each_dist(q, fresh, |i, d| {
                let bound = match results.peek() {
                    Some(w) if results.len() >= ef => w.d,
                    _ => f32::INFINITY,
                };
                if d < bound {
                    let cand = Cand { d, slot: fresh[i] };
                    candidates.push(Reverse(cand));
                    if accept(fresh[i]) {
                        results.push(cand);
                        if results.len() > ef {
                            spill(spilled, spill_cap, spill_at, results.pop());
                        }
                    }
                }
            });
        }
    }

    /// Leaves in `sc.fresh` the neighbours of `slot` on `level` not yet
    /// visited (marking them), with the first `lines` of their vectors
    /// requested.
    #[inline]
    fn fresh_neighbours(&self, slot: u32, level: usize, lines: usize, sc: &mut Scratch) {
        // The marks of all neighbours are requested before any is read, so
        // their cache misses overlap instead of following one another.
        self.graph.read(slot, level, &mut sc.links);
        for &n in &sc.links {
            if let Some(v) = sc.visited.get(n as usize) {
                prefetch(v as *const u32);
            }
        }
        // Without a branch: whether a neighbour was seen is a coin toss to
        // the predictor, so each one is written and the new ones counted
        // (faster to build: benches/README.md, "Figures behind the code").
        let epoch = sc.epoch;
        sc.fresh.clear();
        sc.fresh.resize(sc.links.len(), 0);
        let mut fresh = 0;
        for &n in &sc.links {
            let v = &mut sc.visited[n as usize];
            let new = *v != epoch;
            *v = epoch;
            sc.fresh[fresh] = n;
            fresh += usize::from(new);
        }
        sc.fresh.truncate(fresh);
        for &n in sc.fresh.iter() {
            let p = self.vectors.ptr(n);
            for line in 0..lines {
                prefetch(p.wrapping_add(line * 64));
            }
            if self.vectors.params_apart() {
                self.vectors.prefetch_walk_params(n);
            }
        }
    }

    /// [`Hnsw::search_layer`] accepting every node but `exclude` (the node
    /// being linked), with one sorted beam (see `pool`) for its two heaps;
    /// leaves the `ef` nearest, nearest first, in `sc.cands`.
    pub(super) fn beam_search(
        &self,
        q: &Query,
        entries: &[Cand],
        ef: usize,
        level: usize,
        exclude: u32,
        sc: &mut Scratch,
    ) {
        sc.start(self.graph.slots());
        sc.pool.reset(ef, self.graph.slots());
        // `exclude` routes the search like any node (nodes linked in parallel
        // may have linked to it already, and it sits where the query is) but
        // is left out at the end, so it holds a place of its own.
        let keep = |pool: &mut Pool, d: f32, s: u32| {
            if s == exclude {
                pool.widen();
            }
            pool.insert(d, s);
        };
        for &e in entries {
            if sc.visit(e.slot) {
                keep(&mut sc.pool, e.d, e.slot);
            }
        }
        let lines = PREFETCH_LINES.min(self.vectors.lines_per_record());
        while let Some(c) = sc.pool.next() {
            if level == 0 {
                if let Some(next) = sc.pool.peek() {
                    self.graph.prefetch(next);
                }
            }
            self.fresh_neighbours(c, level, lines, sc);
            let (fresh, pool) = (&sc.fresh, &mut sc.pool);
            self.each_dist(q, fresh, |i, d| keep(pool, d, fresh[i]));
        }
        sc.pool.drain_into(&mut sc.cands, exclude);
    }

    /// Descends from the entry point to level 0 and runs the level-0 search,
    /// from where the descent ended and from the entry point itself.
    ///
    /// Every node is reachable from the entry point on level 0 (see
    /// [`Hnsw::reconnect`]), but not always from where a descent ends: the
    /// heuristic can leave a group whose links all stay inside it (measured:
    /// 5 of 16 nodes under `ip`, whose nearest are not their own). Once the
    /// search has taken in all of such a group and still has room, it goes
    /// on from the entry point; when the beam is full, the entry point, far
    /// from the query, ends the search as any candidate past the bound does,
    /// at no cost (its distance was taken for the descent).
    pub(super) fn search_graph(
        &self,
        q: &Query,
        ef: usize,
        sc: &mut Scratch,
        accept: impl Fn(u32) -> bool,
    ) {
        let Some(entry) = self.entry() else {
            sc.start(0);
            return;
        };
        let top = Cand {
            d: self.dist_to(q, entry.slot),
            slot: entry.slot,
        };
        let mut cur = top;
        for level in (1..=entry.level).rev() {
            cur = self.greedy(q, cur, level, sc);
        }
        // The same node twice (a descent that stayed at the entry) is seen once.
        self.search_layer(q, &[cur, top], ef, 0, sc, accept);
    }
}

/// Keeps `out` in the ring of the last `cap` nodes pushed out of the results.
#[inline(always)]
fn spill(ring: &mut Vec<Cand>, cap: usize, at: &mut usize, out: Option<Cand>) {
    if cap == 0 {
        return;
    }
    if let Some(c) = out {
        if ring.len() < cap {
            ring.push(c);
        } else {
            ring[*at] = c;
            *at = if *at + 1 == cap { 0 } else { *at + 1 };
        }
    }
}

/// Runs `four` over `slots` from the front (it measures some of them and says
/// how many) and hands each distance to `f` with its index.
#[inline(always)]
fn in_fours(
    slots: &[u32],
    mut four: impl FnMut(&[u32]) -> ([f32; 4], usize),
    mut f: impl FnMut(usize, f32),
) {
    let mut at = 0;
    while at < slots.len() {
        let (ds, m) = four(&slots[at..]);
        for (j, &d) in ds[..m].iter().enumerate() {
            f(at + j, d);
        }
        at += m;
    }
}
