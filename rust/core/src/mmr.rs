//! Maximal marginal relevance (Carbonell & Goldstein, 1998): the order of a
//! search's hits when it asks for diversity. Each next hit is the one that
//! maximises `(1 - λ) · score - λ · max similarity to the hits chosen before
//! it`, so a hit that says again what a better one said gives its place to
//! one that says something else. λ = 0 is the order of the scores; λ = 1
//! takes the best hit, then each time the one least like those chosen.
//!
//! The similarity of two hits is the cosine of their unit vectors when both
//! have one, else the overlap (Jaccard) of their analysed term sets, so a
//! store without an embedder, or a record stored without a vector, is still
//! compared. Below 0 a similarity counts as 0: an opposite says no less than
//! an unrelated text.

use crate::error::Result;

/// The diversity a caller gives, checked: in [0, 1] (0: off).
pub fn diversity(lambda: f64) -> Result<f64> {
    crate::fusion::share("diversity", lambda)
}

/// The positions of up to `k` of `scores` (sorted best first) in MMR order,
/// with `sim(a, b)` the similarity of positions `a` and `b`. Asks for `k·n`
/// similarities at most, each pair once. Ties go to the better-scored hit,
/// so λ = 0 keeps the order given.
pub fn select(
    scores: &[f64],
    k: usize,
    lambda: f64,
    mut sim: impl FnMut(usize, usize) -> f64,
) -> Vec<usize> {
    let n = scores.len();
    let k = k.min(n);
    if lambda <= 0.0 || n <= 1 {
        return (0..k).collect();
    }
    // The largest similarity of each position to the chosen ones (0 before any).
    let mut nearest = vec![0.0f64; n];
    let mut taken = vec![false; n];
    let mut out = Vec::with_capacity(k);
    while out.len() < k {
        let mut best: Option<(usize, f64)> = None;
        for i in (0..n).filter(|&i| !taken[i]) {
            let value = (1.0 - lambda) * scores[i] - lambda * nearest[i];
            if best.is_none_or(|(_, b)| value > b) {
                best = Some((i, value));
            }
        }
        let Some((pick, _)) = best else { break };
        taken[pick] = true;
        out.push(pick);
        if out.len() == k {
            break;
        }
        for i in (0..n).filter(|&i| !taken[i]) {
            let s = sim(pick, i);
            // A NaN (a damaged vector) adds no penalty rather than poisoning the order.
            if s > nearest[i] {
                nearest[i] = s;
            }
        }
    }
    out
}

/// The Jaccard overlap of two sorted sets of term ids (0 when both are empty).
pub fn jaccard(a: &[u32], b: &[u32]) -> f64 {
    let (mut i, mut j, mut common) = (0, 0, 0usize);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                common += 1;
                i += 1;
                j += 1;
            }
        }
    }
    let union = a.len() + b.len() - common;
    if union == 0 {
        0.0
    } else {
        common as f64 / union as f64
    }
}

/// What a hit is compared by: its unit vector, if it has one, and its
/// analysed terms (sorted ids), if the text index holds it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Item<'a> {
    pub vector: Option<&'a [f32]>,
    pub terms: Option<&'a [u32]>,
}

/// The similarity of two hits: the cosine of their vectors when both have
/// one, else the overlap of their terms (0 when either has none).
pub fn similarity(a: &Item<'_>, b: &Item<'_>) -> f64 {
    match (a.vector, b.vector, a.terms, b.terms) {
        (Some(x), Some(y), _, _) => f64::from(crate::dot::dot(x, y)),
        (_, _, Some(x), Some(y)) => jaccard(x, y),
        _ => 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items<'a>(vectors: &'a [[f32; 2]]) -> Vec<Item<'a>> {
        vectors
            .iter()
            .map(|v| Item {
                vector: Some(&v[..]),
                terms: None,
            })
            .collect()
    }

    #[test]
    fn diversity_is_checked() {
        assert_eq!(diversity(0.0).unwrap(), 0.0);
        assert_eq!(diversity(1.0).unwrap(), 1.0);
        for (bad, shown) in [(-0.1, "-0.1"), (1.5, "1.5"), (f64::NAN, "nan")] {
            let err = diversity(bad).unwrap_err().to_string();
            assert!(
                err.contains(&format!("diversity must be in [0, 1], got {shown}")),
                "{err}"
            );
        }
    }

    #[test]
    fn zero_keeps_the_order_and_cuts_to_k() {
        let calls = std::cell::Cell::new(0);
        let scores = [0.9, 0.8, 0.7];
        let picked = select(&scores, 2, 0.0, |_, _| {
            calls.set(calls.get() + 1);
            1.0
        });
        assert_eq!(picked, vec![0, 1]);
        assert_eq!(calls.get(), 0);
        assert_eq!(select(&scores, 10, 0.0, |_, _| 0.0), vec![0, 1, 2]);
        assert_eq!(select(&[], 3, 0.5, |_, _| 0.0), Vec::<usize>::new());
    }

    #[test]
    fn a_near_duplicate_gives_its_place_to_a_distinct_hit() {
        // 0 and 1 say the same; 2 is a little less relevant and says something else.
        let v = [[1.0, 0.0], [0.999, 0.0447], [0.0, 1.0]];
        let it = items(&v);
        let scores = [0.80, 0.79, 0.70];
        let sim = |a: usize, b: usize| similarity(&it[a], &it[b]);
        assert_eq!(select(&scores, 2, 0.0, sim), vec![0, 1]);
        assert_eq!(select(&scores, 2, 0.3, sim), vec![0, 2]);
        // Everything, reordered: the duplicate comes last.
        assert_eq!(select(&scores, 3, 0.3, sim), vec![0, 2, 1]);
    }

    #[test]
    fn a_small_lambda_moves_only_close_calls() {
        let v = [[1.0, 0.0], [0.999, 0.0447], [0.0, 1.0]];
        let it = items(&v);
        let sim = |a: usize, b: usize| similarity(&it[a], &it[b]);
        // The distinct hit is far less relevant: λ = 0.1 keeps the duplicate.
        assert_eq!(select(&[0.8, 0.79, 0.3], 2, 0.1, sim), vec![0, 1]);
        // λ = 1: relevance no longer counts after the first pick.
        assert_eq!(select(&[0.8, 0.79, 0.3], 2, 1.0, sim), vec![0, 2]);
    }

    #[test]
    fn each_pair_is_compared_once_at_most() {
        let mut seen = std::collections::HashSet::new();
        let scores: Vec<f64> = (0..20).map(|i| 1.0 - f64::from(i) * 0.01).collect();
        let picked = select(&scores, 5, 0.5, |a, b| {
            assert!(seen.insert((a.min(b), a.max(b))), "pair {a},{b} twice");
            0.5
        });
        assert_eq!(picked.len(), 5);
        let mut sorted = picked.clone();
        sorted.dedup();
        assert_eq!(sorted.len(), 5);
    }

    #[test]
    fn negative_and_nan_similarities_add_no_penalty() {
        let scores = [0.9, 0.8, 0.7];
        // Position 1 is "opposite" to 0 and 2 is NaN-similar: neither is lifted
        // above its score, neither is pushed below it.
        let sim = |_: usize, b: usize| if b == 1 { -1.0 } else { f64::NAN };
        assert_eq!(select(&scores, 3, 0.5, sim), vec![0, 1, 2]);
    }

    #[test]
    fn terms_stand_in_for_missing_vectors() {
        assert_eq!(jaccard(&[1, 2, 3], &[2, 3, 4]), 0.5);
        assert_eq!(jaccard(&[], &[]), 0.0);
        assert_eq!(jaccard(&[1], &[2]), 0.0);
        let v = [1.0f32, 0.0];
        let a = Item {
            vector: Some(&v),
            terms: Some(&[1, 2]),
        };
        let b = Item {
            vector: None,
            terms: Some(&[1, 2]),
        };
        let none = Item::default();
        assert_eq!(similarity(&a, &b), 1.0);
        assert_eq!(similarity(&a, &a), 1.0);
        assert_eq!(similarity(&a, &none), 0.0);
    }
}
