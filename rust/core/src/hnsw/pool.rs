//! The beam of a search that accepts every node (linking): the `ef` nearest
//! nodes found so far in one sorted array, each marked once expanded, in
//! place of the paper's two heaps (candidates and results). The next node to
//! expand is the nearest one not yet expanded, and a node pushed out of the
//! array is one the heaps' version would never expand either (it is past the
//! `ef`-th distance, which only shrinks). An insert is a binary search and a
//! short move of at most `ef` entries, which costs less than sifting two
//! heaps whose order the branch predictor cannot guess.

use super::cand::Cand;

/// Marks an expanded node in its slot's top bit (slots stay below 2^31; see
/// `Hnsw::stage`).
const EXPANDED: u32 = 1 << 31;

#[derive(Default)]
pub struct Pool {
    /// Nearest first; at most `cap` entries.
    items: Vec<Cand>,
    cap: usize,
    /// Every entry before it is expanded.
    cursor: usize,
}

impl Pool {
    /// Empties the beam for a search keeping `cap` nodes of a graph of
    /// `nodes`: the beam never holds more than the graph has (plus the node
    /// being linked), so a hostile `ef` from a snapshot reserves no more.
    pub fn reset(&mut self, cap: usize, nodes: usize) {
        self.items.clear();
        self.cap = cap.max(1);
        self.items.reserve(self.cap.min(nodes.saturating_add(1)));
        self.cursor = 0;
    }

    /// Makes room for one more node (so the next insert always stays).
    pub fn widen(&mut self) {
        self.cap += 1;
    }

    /// Keeps `slot` at distance `d` if it is among the `cap` nearest so far.
    #[inline]
    pub fn insert(&mut self, d: f32, slot: u32) {
        debug_assert!(slot < EXPANDED);
        let len = self.items.len();
        if len == self.cap {
            if d >= self.items[len - 1].d {
                return;
            }
            self.items.pop();
        }
        let at = self.items.partition_point(|c| c.d <= d);
        self.items.insert(at, Cand { d, slot });
        self.cursor = self.cursor.min(at);
    }

    /// The nearest node not yet expanded, marked expanded now.
    #[inline]
    pub fn next(&mut self) -> Option<u32> {
        while let Some(c) = self.items.get_mut(self.cursor) {
            self.cursor += 1;
            if c.slot & EXPANDED == 0 {
                c.slot |= EXPANDED;
                return Some(c.slot & !EXPANDED);
            }
        }
        None
    }

    /// The node [`Pool::next`] returns if nothing is inserted before.
    #[inline]
    pub fn peek(&self) -> Option<u32> {
        self.items[self.cursor.min(self.items.len())..]
            .iter()
            .find(|c| c.slot & EXPANDED == 0)
            .map(|c| c.slot)
    }

    /// Moves the nodes into `out`, nearest first, leaving out `skip`.
    pub fn drain_into(&mut self, out: &mut Vec<Cand>, skip: u32) {
        out.clear();
        out.extend(
            self.items
                .drain(..)
                .map(|c| Cand {
                    d: c.d,
                    slot: c.slot & !EXPANDED,
                })
                .filter(|c| c.slot != skip),
        );
        self.cursor = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;

    fn xorshift(mut s: u64) -> impl FnMut() -> u64 {
        move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        }
    }

    /// The paper's version: the order nodes are expanded in and what is kept,
    /// for a stream of (distance, slot, how many found when it is expanded).
    #[test]
    fn expands_and_keeps_what_the_two_heaps_do() {
        let mut rnd = xorshift(7);
        for round in 0..200 {
            let ef = 1 + (rnd() % 40) as usize;
            // A made-up graph: each node's neighbours are random nodes with
            // distinct random distances.
            let n = 300u32;
            let dist: Vec<f32> = (0..n).map(|i| (i as f32) + (round as f32) * 1e-3).collect();
            let mut order: Vec<u32> = (0..n).collect();
            for i in (1..order.len()).rev() {
                order.swap(i, (rnd() % (i as u64 + 1)) as usize);
            }
            let d_of: Vec<f32> = order.iter().map(|&o| dist[o as usize]).collect();
            let links: Vec<Vec<u32>> = (0..n)
                .map(|_| (0..8).map(|_| (rnd() % n as u64) as u32).collect())
                .collect();
            let start = (rnd() % n as u64) as u32;

            let mut heap_order = Vec::new();
            let mut seen = vec![false; n as usize];
            let mut cands = BinaryHeap::new();
            let mut results: BinaryHeap<Cand> = BinaryHeap::new();
            let c0 = Cand {
                d: d_of[start as usize],
                slot: start,
            };
            seen[start as usize] = true;
            cands.push(Reverse(c0));
            results.push(c0);
            while let Some(Reverse(c)) = cands.pop() {
                let bound = if results.len() >= ef {
                    results.peek().unwrap().d
                } else {
                    f32::INFINITY
                };
                if c.d > bound {
                    break;
                }
                heap_order.push(c.slot);
                for &x in &links[c.slot as usize] {
                    if std::mem::replace(&mut seen[x as usize], true) {
                        continue;
                    }
                    let d = d_of[x as usize];
                    let bound = if results.len() >= ef {
                        results.peek().unwrap().d
                    } else {
                        f32::INFINITY
                    };
                    if d < bound {
                        let cand = Cand { d, slot: x };
                        cands.push(Reverse(cand));
                        results.push(cand);
                        if results.len() > ef {
                            results.pop();
                        }
                    }
                }
            }
            let mut heap_kept = results.into_sorted_vec();
            heap_kept.sort();

            let mut pool_order = Vec::new();
            let mut seen = vec![false; n as usize];
            let mut pool = Pool::default();
            pool.reset(ef, n as usize);
            seen[start as usize] = true;
            pool.insert(c0.d, start);
            while let Some(s) = pool.next() {
                pool_order.push(s);
                for &x in &links[s as usize] {
                    if !std::mem::replace(&mut seen[x as usize], true) {
                        pool.insert(d_of[x as usize], x);
                    }
                }
            }
            let mut kept = Vec::new();
            pool.drain_into(&mut kept, u32::MAX);
            assert_eq!(pool_order, heap_order, "round {round}, ef {ef}");
            assert_eq!(kept, heap_kept, "round {round}, ef {ef}");
        }
    }

    #[test]
    fn drain_leaves_out_the_node_skipped_and_resets() {
        let mut pool = Pool::default();
        pool.reset(3, 1000);
        for (d, s) in [(3.0, 3), (1.0, 1), (4.0, 4), (2.0, 2)] {
            pool.insert(d, s);
        }
        assert_eq!(pool.peek(), Some(1));
        assert_eq!(pool.next(), Some(1));
        assert_eq!(pool.peek(), Some(2));
        let mut out = Vec::new();
        pool.drain_into(&mut out, 2);
        let slots: Vec<u32> = out.iter().map(|c| c.slot).collect();
        assert_eq!(slots, [1, 3]);
        assert_eq!(pool.next(), None);
    }
}
