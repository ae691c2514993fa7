//! A node and its distance to the query: what the layer search's heaps, the
//! linking beam ([`Pool`](super::pool::Pool)) and the result lists hold.

use std::cmp::Ordering;

/// Ordered by distance, ties by slot, so every search visits and returns
/// nodes in one order whatever the order they were found in.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cand {
    pub d: f32,
    pub slot: u32,
}

impl Eq for Cand {}

impl Ord for Cand {
    fn cmp(&self, other: &Self) -> Ordering {
        self.d.total_cmp(&other.d).then(self.slot.cmp(&other.slot))
    }
}

impl PartialOrd for Cand {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
