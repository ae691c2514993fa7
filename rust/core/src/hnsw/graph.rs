//! Neighbour lists. Level 0 lives in one flat array of `m0 + 1` words per
//! node (count, then ids), the layout that keeps a search's reads compact.
//! Upper levels, held by few nodes, get one small array per node.
//!
//! Words are atomics so that parallel inserts may read lists that other
//! threads are rewriting: a writer holds the node's lock, stores the ids and
//! then the count; a concurrent reader sees only valid node numbers, at worst
//! a mix of an old and a new list, which costs a search nothing but a detour.
//! Relaxed loads compile to plain moves, so searches pay nothing for this.

use std::sync::atomic::{AtomicU32, Ordering::Relaxed};

use parking_lot::{Mutex, MutexGuard};

use crate::pages::Region;
use crate::prefetch::prefetch;

pub struct Graph {
    m: usize,
    m0: usize,
    level0: Vec<AtomicU32>,
    upper: Vec<Box<[AtomicU32]>>,
    levels: Vec<u8>,
    locks: Vec<Mutex<()>>,
}

impl Graph {
    pub fn new(m: usize) -> Self {
        Graph {
            m,
            m0: 2 * m,
            level0: Vec::new(),
            upper: Vec::new(),
            levels: Vec::new(),
            locks: Vec::new(),
        }
    }

    pub fn m(&self) -> usize {
        self.m
    }

    /// Most neighbours a node may keep on `level`.
    pub fn max_degree(&self, level: usize) -> usize {
        if level == 0 {
            self.m0
        } else {
            self.m
        }
    }

    pub fn slots(&self) -> usize {
        self.levels.len()
    }

    pub fn level(&self, slot: u32) -> usize {
        self.levels[slot as usize] as usize
    }

    /// A copy of the level-0 lists with room for `additional` more nodes, or
    /// `None` if they have it (see `Vectors::grown`); no batch may be linking
    /// (see `Hnsw::grown`).
    pub fn grown_level0(&self, additional: usize) -> Option<Vec<AtomicU32>> {
        super::storage::grown_by(&self.level0, additional.saturating_mul(self.m0 + 1), |w| {
            AtomicU32::new(w.load(Relaxed))
        })
    }

    /// Takes the lists [`Graph::grown_level0`] copied (nothing changed since).
    pub fn adopt_level0(&mut self, new: Option<Vec<AtomicU32>>) {
        super::storage::swap_in(&mut self.level0, new);
    }

    pub fn reserve(&mut self, additional: usize) {
        self.level0.reserve(additional * (self.m0 + 1));
        self.levels.reserve(additional);
        self.upper.reserve(additional);
        self.locks.reserve(additional);
    }

    /// Appends a node with empty lists on levels `0..=level`.
    pub fn push(&mut self, level: u8) -> u32 {
        let slot = self.levels.len() as u32;
        self.level0.extend((0..=self.m0).map(|_| AtomicU32::new(0)));
        let upper_len = level as usize * (self.m + 1);
        self.upper
            .push((0..upper_len).map(|_| AtomicU32::new(0)).collect());
        self.levels.push(level);
        self.locks.push(Mutex::new(()));
        slot
    }

    #[inline]
    fn words(&self, slot: u32, level: usize) -> &[AtomicU32] {
        if level == 0 {
            let start = slot as usize * (self.m0 + 1);
            &self.level0[start..start + self.m0 + 1]
        } else {
            let start = (level - 1) * (self.m + 1);
            &self.upper[slot as usize][start..start + self.m + 1]
        }
    }

    /// Calls `f` on each neighbour of `slot` on `level`.
    #[inline]
    pub fn for_each(&self, slot: u32, level: usize, mut f: impl FnMut(u32)) {
        let w = self.words(slot, level);
        let n = (w[0].load(Relaxed) as usize).min(w.len() - 1);
        for x in &w[1..=n] {
            f(x.load(Relaxed));
        }
    }

    /// Starts loading the level-0 list of `slot` (three cache lines hold it
    /// for m = 16), so a search that expands it next finds it in cache.
    #[inline]
    pub fn prefetch(&self, slot: u32) {
        let start = slot as usize * (self.m0 + 1);
        if let Some(w) = self.level0.get(start) {
            let p = (w as *const AtomicU32).cast::<u8>();
            let bytes = (self.m0 + 1) * 4;
            let mut off = 0;
            while off < bytes {
                prefetch(p.wrapping_add(off));
                off += 64;
            }
        }
    }

    /// Copies the neighbours of `slot` on `level` into `out`.
    pub fn read(&self, slot: u32, level: usize, out: &mut Vec<u32>) {
        out.clear();
        self.for_each(slot, level, |x| out.push(x));
    }

    /// Replaces the list; the caller holds the node's lock.
    pub fn write(&self, slot: u32, level: usize, ids: &[u32]) {
        let w = self.words(slot, level);
        let n = ids.len().min(w.len() - 1);
        for (dst, &id) in w[1..=n].iter().zip(ids) {
            dst.store(id, Relaxed);
        }
        w[0].store(n as u32, Relaxed);
    }

    pub fn lock(&self, slot: u32) -> MutexGuard<'_, ()> {
        self.locks[slot as usize].lock()
    }

    /// Node levels, for persistence.
    pub fn levels(&self) -> &[u8] {
        &self.levels
    }

    /// The buffers a search reads (see [`crate::pages`]).
    pub fn regions(&self, out: &mut Vec<Region>) {
        out.extend([Region::of(&self.level0), Region::of(&self.levels)]);
    }

    pub fn memory_bytes(&self) -> usize {
        self.level0.capacity() * 4
            + self.upper.capacity() * std::mem::size_of::<Box<[AtomicU32]>>()
            + self.upper.iter().map(|u| u.len() * 4).sum::<usize>()
            + self.levels.capacity()
            + self.locks.capacity() * std::mem::size_of::<Mutex<()>>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_round_trip() {
        let mut g = Graph::new(4);
        let a = g.push(0);
        let b = g.push(2);
        g.write(b, 0, &[a, 7, 9]);
        g.write(b, 2, &[a]);
        let mut out = Vec::new();
        g.read(b, 0, &mut out);
        assert_eq!(out, vec![a, 7, 9]);
        g.read(b, 2, &mut out);
        assert_eq!(out, vec![a]);
        g.read(a, 0, &mut out);
        assert!(out.is_empty());
        // Longer than the level allows: truncated, never out of bounds.
        g.write(b, 1, &[1, 2, 3, 4, 5, 6]);
        g.read(b, 1, &mut out);
        assert_eq!(out, vec![1, 2, 3, 4]);
        assert_eq!(g.level(b), 2);
    }
}
