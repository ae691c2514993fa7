//! Keeping every node reachable: the pass over the whole graph that links
//! in the nodes cut off ([`Hnsw::reconnect`]), and when a batch runs it;
//! and when a batch clears the freed slots, which takes such a pass too.

use std::sync::atomic::Ordering;

use super::add::{Staged, PARALLEL_MIN_BATCH};
use super::cand::Cand;
use super::distance::Query;
use super::filter::Allowed;
use super::search::with_scratch;
use super::Hnsw;

/// A reachability pass may be put off until the nodes linked since the last
/// one reach this fraction (1 / n) of the graph.
const DEFERRED_CHECK_SHARE: usize = 8;
/// Up to this many nodes, every add ends with the reachability pass: it
/// walks the whole graph, which is then cheaper than linking one node.
const ALWAYS_CHECKED: usize = 1024;
/// Freed slots are cleared once they are this fraction (1 / n) of the
/// graph: the clear's passes over the graph then cost a constant per slot
/// freed (n nodes' worth), and the slots stay within 64/63 of those in use
/// however long adds and removes go on. The rest of a clear's work grows
/// with the slots it clears (the links into each are redirected, the nodes
/// they cut off linked again), so a larger share would make the add that
/// runs it wait that much longer (figures in benches/README.md, "Freed
/// slots cleared a share at a time").
pub(super) const CLEARED_SHARE: usize = 64;

impl Hnsw {
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
    pub(super) fn check_due(&self, n: usize) -> bool {
        n >= PARALLEL_MIN_BATCH || self.graph.slots() <= ALWAYS_CHECKED || self.share_new(n)
    }

    /// Whether the next batch clears the freed slots (see [`Hnsw::clear`]):
    /// once they are a share of the graph ([`CLEARED_SHARE`]), or in a graph
    /// small enough that every add checks it. Until then a freed slot routes
    /// searches as it did: reusing each one at the next add would make every
    /// such add pay both passes over the graph.
    pub(super) fn clear_due(&self) -> bool {
        let slots = self.graph.slots();
        !self.free.is_empty()
            && (slots <= ALWAYS_CHECKED || self.free.len() * CLEARED_SHARE >= slots)
    }

    /// When a clear is due, makes every freed slot vacant and returns them
    /// with the vacant slots from before, for the batch being staged to
    /// unlink (the links into the freed ones are found by one pass over
    /// every list, [`Hnsw::unlink`]) and then to take its slots from. The
    /// vacant ones are in the set so that none becomes the entry point
    /// ([`Hnsw::move_entry_off`]). Empty when no clear is due.
    pub(super) fn clear(&mut self) -> Allowed {
        if !self.clear_due() {
            return Allowed::new(0, std::iter::empty());
        }
        let freed = std::mem::take(&mut self.free).into_iter();
        let cleared = Allowed::new(self.graph.slots(), freed.chain(self.vacant.drain(..)));
        self.vacant.extend_from_slice(cleared.slots());
        cleared
    }

    /// Slots the next batch can take without growing the graph.
    pub(super) fn reusable(&self) -> usize {
        self.vacant.len() + if self.clear_due() { self.free.len() } else { 0 }
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
    /// work slowed linking). A batch that clears slots keeps its pass:
    /// unlinking needs it.
    pub(crate) fn plan_check(&self, staged: &mut Staged, more_follow: bool) {
        if !more_follow {
            if self.put_off.load(Ordering::Acquire) {
                staged.check = true;
            }
        } else if staged.cleared.is_empty() && !self.share_new(staged.plan.len()) {
            staged.check = false;
            self.put_off.store(true, Ordering::Release);
        }
    }

    /// Makes every live node reachable from the entry point on level 0. The
    /// neighbour heuristic may prune a node out of every list that pointed at
    /// it, and unlinking cleared slots removes the links they held, which can
    /// cut nodes or whole groups off; hnswlib accepts that, but a memory that
    /// no search can reach is a lost write. A breadth-first walk finds the
    /// nodes cut off; each gets links out (from a search, if it has none) and
    /// one link in from the nearest reachable node with room, or else from
    /// the nearest one, replacing its farthest link. Replacing can cut off
    /// another node, so the walk repeats, a few times at most. The `staged`
    /// slots count as live (they are published once linked); other removed
    /// slots are only routes, and a vacant one has no link to be reached by.
    pub(super) fn reconnect(&self, staged: &Allowed) {
        let Some(entry) = self.entry() else {
            return;
        };
        let slots = self.graph.slots();
        let mut q = Query::new(Vec::new());
        for _round in 0..3 {
            #[cfg(test)]
            self.walked.fetch_add(slots, Ordering::Relaxed);
            let mut reached = vec![false; slots];
            let mut queue = vec![entry.slot];
            reached[entry.slot as usize] = true;
            let walk = |queue: &mut Vec<u32>, reached: &mut Vec<bool>| {
                while let Some(s) = queue.pop() {
                    self.graph.for_each(s, 0, |n| {
                        if !reached[n as usize] {
                            reached[n as usize] = true;
                            queue.push(n);
                        }
                    });
                }
            };
            walk(&mut queue, &mut reached);
            let mut displaced = false;
            for x in 0..slots as u32 {
                if reached[x as usize] || (self.removed[x as usize] && !staged.contains(x)) {
                    continue;
                }
                self.load_query(x, &mut q);
                with_scratch(|sc| {
                    let r = &reached;
                    self.search_graph(&q, self.ef_construction, sc, |s| r[s as usize]);
                    let mut found: Vec<Cand> = sc.results.drain().collect();
                    found.sort_unstable();
                    self.graph.read(x, 0, &mut sc.links);
                    if sc.links.is_empty() {
                        let mut selected = Vec::new();
                        self.select_neighbors(
                            &found,
                            self.graph.m(),
                            x,
                            &mut selected,
                            &mut sc.base,
                        );
                        sc.links.extend(selected.iter().map(|c| c.slot));
                        self.graph.write(x, 0, &sc.links);
                    }
                    displaced |= self.take_in(x, &found, &mut sc.base);
                });
                // Everything x leads to is now reachable too.
                reached[x as usize] = true;
                queue.push(x);
                walk(&mut queue, &mut reached);
            }
            if !displaced {
                return;
            }
        }
    }
}
