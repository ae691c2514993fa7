//! [`Worst`]: a score and a key, ordered so that a max-heap (`BinaryHeap`)
//! of them keeps its worst entry on top, ready to be replaced by a better
//! one. The bounded top-k of BM25 and the parked vectors' sketch scan share it.

use std::cmp::Ordering;

/// Greater means worse: the lower score, then (on a tie) the greater key, so
/// ties go to the smaller key whatever order the entries came in.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Worst<K>(pub f32, pub K);

impl<K: Ord> PartialEq for Worst<K> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl<K: Ord> Eq for Worst<K> {}

impl<K: Ord> PartialOrd for Worst<K> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<K: Ord> Ord for Worst<K> {
    fn cmp(&self, other: &Self) -> Ordering {
        other.0.total_cmp(&self.0).then(self.1.cmp(&other.1))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BinaryHeap;

    use super::Worst;

    #[test]
    fn the_top_is_the_lowest_score_then_the_greatest_key() {
        let heap: BinaryHeap<Worst<u64>> =
            [Worst(0.5, 1), Worst(0.2, 3), Worst(0.2, 7), Worst(0.9, 0)]
                .into_iter()
                .collect();
        let order: Vec<(f32, u64)> = heap.into_sorted_vec().iter().map(|w| (w.0, w.1)).collect();
        assert_eq!(order, vec![(0.9, 0), (0.5, 1), (0.2, 3), (0.2, 7)]);
    }
}
