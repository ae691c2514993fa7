//! Fusion of ranked lists into one relevance in [0, 1].
//!
//! - Reciprocal rank fusion (Cormack, Clarke and Büttcher, 2009): a document
//!   at 1-based rank `r_i` in list `i` scores `Σ_i 1 / (k + r_i)`; dividing by
//!   the best possible sum, `L / (k + 1)` for `L` non-empty lists, maps a
//!   document ranked first everywhere to 1.
//! - Weighted fusion (the default): `α · cosine⁺ + (1 − α) · bm25 / ceiling`,
//!   where `cosine⁺` is the cosine similarity clamped to [0, 1] and `ceiling`
//!   is the BM25 score no document can reach for this query (the sum of its
//!   terms' idf). Both signals are absolute: a document that matches the
//!   query well scores high whatever the other candidates are, and a query
//!   that matches nothing well scores low everywhere, so a threshold on the
//!   fused relevance cuts irrelevant hits. (Dividing by the best candidate's
//!   BM25 instead gives the best match 1 even when it shares one common word
//!   with the query.)

use crate::error::{Error, Result};
use crate::repr::py_float;

/// The `k` of the original paper, and Nous's and Elasticsearch's default.
pub const DEFAULT_RRF_K: f64 = 60.0;
/// The weight of the cosine in weighted fusion: the largest alpha within
/// 0.005 nDCG@10 of the best on SciFact's train queries (0.4: 0.7397; 0.5:
/// 0.7362), because memories are short conversational texts where the vector
/// side carries more (dated conversation set, recall@10: 0.690 at 0.4, 0.750
/// at 0.5); `benches/tune_search.py`, `benches/bench_conversations.py`.
pub const DEFAULT_ALPHA: f64 = 0.5;

/// The share of a conversation turn's BM25 taken from its context (the turn
/// with its previous and next turn of its session): see [`contextual`].
pub const DEFAULT_CONTEXT_WEIGHT: f64 = 0.2;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Fusion {
    Rrf { k: f64 },
    Weighted { alpha: f64 },
}

impl Default for Fusion {
    fn default() -> Self {
        Fusion::Weighted {
            alpha: DEFAULT_ALPHA,
        }
    }
}

impl Fusion {
    pub fn rrf(k: f64) -> Result<Self> {
        if !(k.is_finite() && k >= 0.0) {
            return Err(Error::invalid(format!(
                "rrf_k must be a finite number >= 0, got {k}"
            )));
        }
        Ok(Fusion::Rrf { k })
    }

    pub fn weighted(alpha: f64) -> Result<Self> {
        if !(0.0..=1.0).contains(&alpha) {
            return Err(Error::invalid(format!(
                "alpha must be in [0, 1], got {alpha}"
            )));
        }
        Ok(Fusion::Weighted { alpha })
    }
}

/// Normalised RRF of one document: `ranks` holds its 1-based rank in each
/// list (`None` where absent); `lists` is the number of non-empty lists.
pub fn rrf(ranks: &[Option<u32>], k: f64, lists: usize) -> f64 {
    if lists == 0 {
        return 0.0;
    }
    let sum: f64 = ranks
        .iter()
        .flatten()
        .map(|&r| 1.0 / (k + f64::from(r)))
        .sum();
    sum * (k + 1.0) / lists as f64
}

/// The BM25 of a turn of a session: `(1 − w) · own + w · context`, where
/// `context` is the query's BM25 over the turn joined with its neighbours, in
/// the same units (same idf, same ceiling). An answer ("yes, every Sunday")
/// shares few words with the question its neighbour asked ("do you go
/// hiking?"); the context lends it some of them.
pub fn contextual(own: f64, context: f64, weight: f64) -> f64 {
    (1.0 - weight) * own + weight * context
}

/// The context weight a caller gives, checked: in [0, 1].
pub fn context_weight(w: f64) -> Result<f64> {
    if !(0.0..=1.0).contains(&w) {
        return Err(Error::invalid(format!(
            "context_weight must be in [0, 1], got {}",
            py_float(w)
        )));
    }
    Ok(w)
}

/// What a speaker the query names is worth, as a share of the BM25 ceiling:
/// see [`speaker`].
pub const DEFAULT_SPEAKER_WEIGHT: f64 = 0.5;

/// The BM25 share (over the ceiling, in [0, 1]) of a candidate of a query
/// that names a speaker (`named`: "I" the store's user, or a speaker's
/// name), the speaker counted as one more query term worth `weight` of the
/// ceiling, as a field of BM25F is: `(share + weight · matched) / (1 +
/// weight)`, still in [0, 1]. A query that names no speaker keeps its share.
pub fn speaker(share: f64, named: bool, matched: bool, weight: f64) -> f64 {
    if !named {
        return share;
    }
    (share + if matched { weight } else { 0.0 }) / (1.0 + weight)
}

/// The speaker weight a caller gives, checked: in [0, 1].
pub fn speaker_weight(w: f64) -> Result<f64> {
    if !(0.0..=1.0).contains(&w) {
        return Err(Error::invalid(format!(
            "speaker_weight must be in [0, 1], got {}",
            py_float(w)
        )));
    }
    Ok(w)
}

/// A cosine similarity as a relevance in [0, 1].
pub fn cosine_relevance(cosine: f64) -> f64 {
    cosine.clamp(0.0, 1.0)
}

/// A BM25 score divided by the query's ceiling, in [0, 1).
pub fn bm25_relevance(score: f64, ceiling: f64) -> f64 {
    if ceiling > 0.0 {
        (score / ceiling).clamp(0.0, 1.0)
    } else {
        0.0
    }
}

/// Weighted fusion of the two normalised signals. A signal that no list
/// produced at all (`None`: the query had no indexed term, or no vector)
/// leaves the whole weight to the other.
pub fn weighted(cosine: Option<f64>, bm25: Option<f64>, alpha: f64) -> f64 {
    match (cosine, bm25) {
        (Some(c), Some(b)) => alpha * c + (1.0 - alpha) * b,
        (Some(c), None) => c,
        (None, Some(b)) => b,
        (None, None) => 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    #[test]
    fn rrf_by_hand() {
        // First in both lists: the best possible, 1.
        assert!(close(rrf(&[Some(1), Some(1)], 60.0, 2), 1.0));
        // Ranks 1 and 3: (1/61 + 1/63) / (2/61).
        assert!(close(
            rrf(&[Some(1), Some(3)], 60.0, 2),
            (1.0 / 61.0 + 1.0 / 63.0) / (2.0 / 61.0)
        ));
        // In one list only.
        assert!(close(
            rrf(&[None, Some(2)], 60.0, 2),
            (1.0 / 62.0) / (2.0 / 61.0)
        ));
        assert!(close(rrf(&[Some(1)], 60.0, 1), 1.0));
        assert!(close(rrf(&[None, None], 60.0, 0), 0.0));
        // k = 0 is plain reciprocal rank.
        assert!(close(rrf(&[Some(2), Some(4)], 0.0, 2), (0.5 + 0.25) / 2.0));
    }

    #[test]
    fn weighted_by_hand() {
        assert!(close(
            weighted(Some(0.8), Some(0.5), 0.25),
            0.25 * 0.8 + 0.75 * 0.5
        ));
        assert!(close(weighted(Some(0.8), None, 0.25), 0.8));
        assert!(close(weighted(None, Some(0.5), 0.25), 0.5));
        assert!(close(bm25_relevance(3.0, 4.0), 0.75));
        assert!(close(bm25_relevance(3.0, 0.0), 0.0));
        assert!(close(cosine_relevance(-0.2), 0.0));
        assert!(Fusion::weighted(1.5).is_err());
        assert!(Fusion::rrf(f64::NAN).is_err());
    }
}
