//! Maps from external u64 ids to internal slots. Ids are often sequential or
//! random already, so a single multiply-xorshift mixes them well enough and is
//! several times cheaper than SipHash on the filter and lookup paths.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

#[derive(Default, Clone, Copy)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        let x = self.0.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        x ^ (x >> 29)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x100_0000_01B3);
        }
    }

    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

pub type IdMap<V> = HashMap<u64, V, BuildHasherDefault<IdHasher>>;
pub type IdSet = HashSet<u64, BuildHasherDefault<IdHasher>>;

/// The first id that occurs twice in `ids`, if any.
pub fn first_duplicate(ids: &[u64]) -> Option<u64> {
    let mut seen = IdSet::with_capacity_and_hasher(ids.len(), Default::default());
    ids.iter().copied().find(|&id| !seen.insert(id))
}

/// A slot for no id in [`SlotMap`]'s vector.
const NO_SLOT: u32 = u32::MAX;

/// Ids dense in a vector beyond this many per id held go to the hash map: a
/// store's ids are its database's rowids, counted up from 1, so nearly all
/// are dense; a caller's own scattered ids stay in the map.
const DENSE_PER_ID: usize = 4;
const DENSE_SLACK: usize = 1024;

/// The slot of each id: ids up to a few times as many as are held are looked
/// up in a vector indexed by id (4 bytes apiece against a hash map's 34 at a
/// million, and one memory access per lookup), the others in an [`IdMap`].
#[derive(Clone, Debug, Default)]
pub struct SlotMap {
    dense: Vec<u32>,
    sparse: IdMap<u32>,
    len: usize,
}

impl SlotMap {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn get(&self, id: &u64) -> Option<&u32> {
        match usize::try_from(*id).ok().and_then(|i| self.dense.get(i)) {
            Some(s) => (*s != NO_SLOT).then_some(s),
            None => self.sparse.get(id),
        }
    }

    pub fn contains_key(&self, id: &u64) -> bool {
        self.get(id).is_some()
    }

    /// Sets the slot of `id`; returns the one it replaced. `slot` is below
    /// `u32::MAX`, as every slot of a buffer in memory is.
    pub fn insert(&mut self, id: u64, slot: u32) -> Option<u32> {
        assert_ne!(slot, NO_SLOT, "a slot past every buffer");
        let i = usize::try_from(id).unwrap_or(usize::MAX);
        if i >= self.dense.len() {
            let limit = (self.len + 1)
                .saturating_mul(DENSE_PER_ID)
                .saturating_add(DENSE_SLACK);
            // The vector at least doubles when it grows, so the hash map's ids
            // are looked over for ones it now covers a logarithmic number of
            // times, whatever order the ids come in.
            let to = (self.dense.len() * 2).max(i.saturating_add(1));
            if to > limit {
                let old = self.sparse.insert(id, slot);
                self.len += usize::from(old.is_none());
                return old;
            }
            self.grow(to);
        }
        let old = std::mem::replace(&mut self.dense[i], slot);
        self.len += usize::from(old == NO_SLOT);
        (old != NO_SLOT).then_some(old)
    }

    pub fn remove(&mut self, id: &u64) -> Option<u32> {
        let old = match usize::try_from(*id)
            .ok()
            .and_then(|i| self.dense.get_mut(i))
        {
            Some(s) => Some(std::mem::replace(s, NO_SLOT)).filter(|&s| s != NO_SLOT),
            None => self.sparse.remove(id),
        };
        self.len -= usize::from(old.is_some());
        old
    }

    /// Makes room for `additional` more ids without growing as they come.
    pub fn reserve(&mut self, additional: usize) {
        self.dense.reserve(additional);
    }

    /// Every id and its slot, in no particular order (for tests' checks: the
    /// engine looks ids up, never walks them).
    #[cfg(test)]
    pub fn iter(&self) -> impl Iterator<Item = (u64, u32)> + '_ {
        let dense = self.dense.iter().enumerate();
        dense
            .filter(|(_, &s)| s != NO_SLOT)
            .map(|(i, &s)| (i as u64, s))
            .chain(self.sparse.iter().map(|(&id, &s)| (id, s)))
    }

    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut u32> {
        let dense = self.dense.iter_mut().filter(|s| **s != NO_SLOT);
        dense.chain(self.sparse.values_mut())
    }

    pub fn memory_bytes(&self) -> usize {
        self.dense.capacity() * 4 + self.sparse.capacity() * 16
    }

    /// Lengthens the vector to `to` ids, moving in the map's ids it now covers.
    fn grow(&mut self, to: usize) {
        self.dense.resize(to, NO_SLOT);
        if self.sparse.is_empty() {
            return;
        }
        let moved: Vec<u64> = self
            .sparse
            .keys()
            .copied()
            .filter(|&id| usize::try_from(id).is_ok_and(|i| i < to))
            .collect();
        for id in moved {
            if let Some(s) = self.sparse.remove(&id) {
                self.dense[id as usize] = s;
            }
        }
    }
}

impl std::ops::Index<&u64> for SlotMap {
    type Output = u32;

    fn index(&self, id: &u64) -> &u32 {
        self.get(id).expect("an id with a slot")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The map against a hash map, through inserts, replacements and removals
    /// of dense, scattered and huge ids.
    #[test]
    fn slot_map_agrees_with_a_hash_map() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut map = SlotMap::default();
        let mut want: IdMap<u32> = IdMap::default();
        for step in 0..60_000u32 {
            let r = next();
            let id = match r % 10 {
                0 => r >> 4,                        // scattered, mostly huge
                1 => u64::MAX - (r % 3),            // the very top
                2 => (r >> 8) % 200_000,            // ahead of the dense part
                3 => (4 * map.len() + 1023) as u64, // just under the vector's bound
                _ => u64::from(step) / 2,           // counted up, as rowids are
            };
            if next() % 4 == 0 {
                assert_eq!(map.remove(&id), want.remove(&id));
            } else {
                let slot = (next() % 1_000_000) as u32;
                assert_eq!(map.insert(id, slot), want.insert(id, slot));
            }
            assert_eq!(map.len(), want.len());
            let probe = next() % 40_000;
            assert_eq!(map.get(&probe), want.get(&probe));
        }
        let mut all: Vec<(u64, u32)> = map.iter().collect();
        all.sort_unstable();
        let mut expected: Vec<(u64, u32)> = want.iter().map(|(&i, &s)| (i, s)).collect();
        expected.sort_unstable();
        assert_eq!(all, expected);
        for s in map.values_mut() {
            *s += 1;
        }
        for (id, s) in &want {
            assert_eq!(map[id], s + 1);
        }
        // Counted-up ids live in the vector, not the map.
        let mut dense = SlotMap::default();
        for id in 1..100_000u64 {
            dense.insert(id, id as u32);
        }
        assert!(dense.sparse.is_empty());
        assert!(dense.memory_bytes() < 100_000 * 8);
    }
}
