//! Linking a stored vector into the graph (the paper's algorithm 1 with the
//! neighbour-selection heuristic of algorithm 4), and unlinking a slot that is
//! about to be cleared. Both take `&self`, so a batch links in parallel; each
//! list is rewritten only under its node's lock.

use rayon::prelude::*;

use super::cand::Cand;
use super::distance::Query;
use super::filter::Allowed;
use super::search::{with_scratch, Scratch};
use super::{Entry, Hnsw};

impl Hnsw {
    /// Links `slot`, whose vector is already stored, into every level up to
    /// its own. `q` is the vector at full precision.
    pub(super) fn link(&self, slot: u32, q: &Query, sc: &mut Scratch) {
        let level = self.graph.level(slot);
        // A node that raises the top level must not race another one doing so.
        let _top = (self.entry().is_none_or(|e| level > e.level)).then(|| self.top_lock.lock());
        let Some(entry) = self.entry() else {
            self.set_entry(Entry { slot, level });
            return;
        };
        if entry.slot == slot {
            return;
        }
        let top = Cand {
            d: self.dist_to(q, entry.slot),
            slot: entry.slot,
        };
        let mut cur = top;
        for l in (level + 1..=entry.level).rev() {
            cur = self.greedy(q, cur, l, sc);
        }
        let mut entries = vec![cur];
        for l in (0..=level.min(entry.level)).rev() {
            // Level 0 also starts from the entry point, as searches do (see
            // `search_graph`): a group whose links stay inside it does not
            // keep the new node's candidates inside it too. (An entry given
            // twice is seen once.)
            if l == 0 {
                entries.push(top);
            }
            self.beam_search(q, &entries, self.ef_construction, l, slot, sc);
            let mut selected = std::mem::take(&mut sc.selected);
            let cands = std::mem::take(&mut sc.cands);
            self.select_neighbors(&cands, self.graph.m(), slot, &mut selected, &mut sc.base);
            sc.cands = cands;
            {
                // Nodes linked in parallel may already have added themselves
                // to this list (they can reach `slot` through an upper level);
                // overwriting it would drop their only way in. Merge instead.
                let _g = self.graph.lock(slot);
                self.graph.read(slot, l, &mut sc.fresh_links);
                let mut merged = selected.clone();
                for &x in &sc.fresh_links {
                    if x != slot && !merged.iter().any(|c| c.slot == x) {
                        merged.push(Cand {
                            d: self.dist_to(q, x),
                            slot: x,
                        });
                    }
                }
                let max = self.graph.max_degree(l);
                if merged.len() > max {
                    merged.sort_unstable();
                    let all = std::mem::take(&mut merged);
                    self.select_neighbors(&all, max, slot, &mut merged, &mut sc.base);
                }
                sc.links.clear();
                sc.links.extend(merged.iter().map(|c| c.slot));
                self.graph.write(slot, l, &sc.links);
            }
            let mut held = false;
            for c in &selected {
                held |= self.connect(c.slot, Cand { d: c.d, slot }, l, sc);
            }
            // Every neighbour may prune the back link (under `ip`, a node is
            // not always nearest to itself), which left a node added alone,
            // with no pass over the graph after it, unreachable: a write no
            // search returned. One link in is made here instead.
            if l == 0 && !held && !selected.is_empty() {
                self.take_in(slot, &sc.cands, &mut sc.base);
            }
            sc.selected = selected;
            entries.clear();
            entries.extend_from_slice(&sc.cands);
        }
        if level > entry.level {
            self.set_entry(Entry { slot, level });
        }
    }

    /// The heuristic of algorithm 4: walk candidates nearest first and keep one
    /// only if it is nearer to `node` than to every neighbour kept so far,
    /// which spreads the links in all directions.
    ///
    /// Copies of `node` (the same text stored again: the same vector) are
    /// kept up to half the list, and never prune: their distance to any
    /// candidate is the node's own. Before, a copy kept first pruned every
    /// other candidate, because the candidate's distance to the node came
    /// from the search (the full vector against a code) and its distance to
    /// the copy from two codes, and the second came out the smaller: copies
    /// linked only to one another, and a search that came down on one found
    /// nothing else. For the same reason a candidate's distance to the node
    /// is taken again here the way its distances to the kept ones are.
    pub(super) fn select_neighbors(
        &self,
        sorted: &[Cand],
        m: usize,
        node: u32,
        out: &mut Vec<Cand>,
        base: &mut Query,
    ) {
        out.clear();
        let most_copies = (m / 2).max(1);
        let mut copies = 0;
        for &c in sorted {
            if out.len() >= m {
                break;
            }
            if self.vectors.same(c.slot, node) {
                if copies < most_copies {
                    out.insert(copies, c);
                    copies += 1;
                }
                continue;
            }
            if out.len() == copies {
                out.push(c);
                continue;
            }
            self.load_query(c.slot, base);
            let to_node = self.dist_to(base, node);
            if self.all_at_least(base, &out[copies..], to_node) {
                out.push(c);
            }
        }
    }

    /// Whether every node of `nodes` is at least `d` away from `q`, four
    /// distances at a time.
    fn all_at_least(&self, q: &Query, nodes: &[Cand], d: f32) -> bool {
        nodes.chunks(4).all(|group| {
            if let [a, b, c, e] = *group {
                let ds = self.dists4(q, [a.slot, b.slot, c.slot, e.slot]);
                ds.iter().all(|&x| x >= d)
            } else {
                group.iter().all(|n| self.dist_to(q, n.slot) >= d)
            }
        })
    }

    /// Adds the back link `node -> new` on `level`, pruning with the heuristic
    /// when the list is full; returns whether the link stayed.
    fn connect(&self, node: u32, new: Cand, level: usize, sc: &mut Scratch) -> bool {
        let _g = self.graph.lock(node);
        let mut links = std::mem::take(&mut sc.links);
        self.graph.read(node, level, &mut links);
        if !links.contains(&new.slot) {
            if links.len() < self.graph.max_degree(level) {
                links.push(new.slot);
            } else {
                self.load_query(node, &mut sc.base);
                let mut cands: Vec<Cand> = Vec::with_capacity(links.len() + 1);
                self.each_dist(&sc.base, &links, |i, d| {
                    cands.push(Cand { d, slot: links[i] });
                });
                cands.push(new);
                cands.sort_unstable();
                let mut kept = Vec::with_capacity(cands.len());
                self.select_neighbors(
                    &cands,
                    self.graph.max_degree(level),
                    node,
                    &mut kept,
                    &mut sc.base,
                );
                links.clear();
                links.extend(kept.iter().map(|c| c.slot));
            }
            self.graph.write(node, level, &links);
        }
        let held = links.contains(&new.slot);
        sc.links = links;
        held
    }

    /// Gives `x` a link in on level 0 from the nearest of `found` (nearest
    /// first) with room, or else from the nearest, in place of its farthest
    /// link; returns whether a link was displaced (which can cut its target
    /// off in turn).
    pub(super) fn take_in(&self, x: u32, found: &[Cand], base: &mut Query) -> bool {
        let max = self.graph.max_degree(0);
        let mut links = Vec::new();
        for c in found.iter().filter(|c| c.slot != x) {
            let _g = self.graph.lock(c.slot);
            self.graph.read(c.slot, 0, &mut links);
            if links.contains(&x) {
                return false;
            }
            if links.len() < max {
                links.push(x);
                self.graph.write(c.slot, 0, &links);
                return false;
            }
        }
        let Some(n) = found.iter().find(|c| c.slot != x) else {
            return false;
        };
        let _g = self.graph.lock(n.slot);
        self.graph.read(n.slot, 0, &mut links);
        self.load_query(n.slot, base);
        let far = links
            .iter()
            .enumerate()
            .map(|(i, &y)| (self.dist_to(base, y), i))
            .max_by(|a, b| a.0.total_cmp(&b.0));
        match far {
            Some((_, i)) => {
                links[i] = x;
                self.graph.write(n.slot, 0, &links);
                true
            }
            None => false,
        }
    }

    /// Clears slots (see [`Hnsw::clear`]). Every link that points at one
    /// of them, from any node, is redirected to the nearest of the slot's old
    /// neighbours (those were near the old vector, and so near the linking
    /// node), so no region loses its path through the slot; then the slots'
    /// own lists are emptied. One pass over all lists finds the links, which
    /// costs about a millisecond per 100,000 nodes, once per clear.
    pub(super) fn unlink(&self, cleared: &Allowed) {
        let slots = self.graph.slots() as u32;
        #[cfg(test)]
        self.walked
            .fetch_add(slots as usize, std::sync::atomic::Ordering::Relaxed);
        let repair = |w: u32| {
            if cleared.contains(w) {
                return;
            }
            with_scratch(|sc| {
                for l in 0..=self.graph.level(w) {
                    let mut stale = false;
                    self.graph.for_each(w, l, |x| stale |= cleared.contains(x));
                    if !stale {
                        continue;
                    }
                    let _g = self.graph.lock(w);
                    let mut links = std::mem::take(&mut sc.links);
                    self.graph.read(w, l, &mut links);
                    self.load_query(w, &mut sc.base);
                    let mut i = 0;
                    while i < links.len() {
                        let x = links[i];
                        if !cleared.contains(x) {
                            i += 1;
                            continue;
                        }
                        self.graph.read(x, l, &mut sc.fresh_links);
                        let best = sc
                            .fresh_links
                            .iter()
                            .filter(|&&y| y != w && !cleared.contains(y) && !links.contains(&y))
                            .map(|&y| Cand {
                                d: self.dist_to(&sc.base, y),
                                slot: y,
                            })
                            .min();
                        match best {
                            Some(b) => {
                                links[i] = b.slot;
                                i += 1;
                            }
                            None => {
                                links.swap_remove(i);
                            }
                        }
                    }
                    self.graph.write(w, l, &links);
                    sc.links = links;
                }
            })
        };
        crate::pool::install(|| (0..slots).into_par_iter().for_each(repair));
        for &s in cleared.slots() {
            for l in 0..=self.graph.level(s) {
                self.graph.write(s, l, &[]);
            }
        }
    }
}
