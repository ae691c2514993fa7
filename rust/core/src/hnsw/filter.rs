//! The set of slots a filtered search may return: a bitset for the graph
//! search's membership test and a sorted list for an exact scan.

pub struct Allowed {
    bits: Vec<u64>,
    slots: Vec<u32>,
}

impl Allowed {
    pub fn new(capacity: usize, slots: impl Iterator<Item = u32>) -> Self {
        let mut bits = vec![0u64; capacity.div_ceil(64)];
        let mut list = Vec::new();
        for s in slots {
            let (w, b) = (s as usize / 64, s % 64);
            if w < bits.len() && bits[w] & (1 << b) == 0 {
                bits[w] |= 1 << b;
                list.push(s);
            }
        }
        // Slot order reads the vector buffer front to back during a scan.
        list.sort_unstable();
        Allowed { bits, slots: list }
    }

    #[inline]
    pub fn contains(&self, slot: u32) -> bool {
        self.bits
            .get(slot as usize / 64)
            .is_some_and(|w| w & (1 << (slot % 64)) != 0)
    }

    pub fn slots(&self) -> &[u32] {
        &self.slots
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }
}
