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
