//! Fusion of ranked lists into one relevance in [0, 1].
//!
//! - Reciprocal rank fusion (Cormack, Clarke and Büttcher, 2009): a document
//!   at 1-based rank `r_i` in list `i` scores `Σ_i 1 / (k + r_i)`; dividing by
//!   the best possible sum, `L / (k + 1)` for `L` non-empty lists, maps a
//!   document ranked first everywhere to 1.
//! - Weighted fusion: `α · cosine⁺ + (1 − α) · bm25 / ceiling`,
//!   where `cosine⁺` is the cosine similarity clamped to [0, 1] and `ceiling`
//!   is the BM25 score no document can reach for this query (the sum of its
//!   terms' idf). Both signals are absolute: a document that matches the
//!   query well scores high whatever the other candidates are, and a query
//!   that matches nothing well scores low everywhere, so a threshold on the
//!   fused relevance cuts irrelevant hits. (Dividing by the best candidate's
//!   BM25 instead gives the best match 1 even when it shares one common word
//!   with the query.)
//! - Adaptive fusion (the default): the same sum, its `α` chosen per query
//!   from the two lists themselves ([`adaptive_alpha`]): the list whose best
//!   candidate stands further above its 30th weighs more.

use crate::error::{Error, Result};
use crate::repr::py_float;

/// The `k` of the original paper, and Nous's and Elasticsearch's default.
pub const DEFAULT_RRF_K: f64 = 60.0;
/// The weight of the cosine in weighted fusion with a fixed weight (what
/// `search_knowledge` uses): the largest alpha within 0.005 nDCG@10 of the
/// best on SciFact's train queries (0.4: 0.7397; 0.5: 0.7362), because
/// memories are short conversational texts where the vector side carries more
/// (dated conversation set, recall@10: 0.690 at 0.4, 0.750 at 0.5);
/// `benches/tune_search.py`, `benches/bench_conversations.py`.
pub const DEFAULT_ALPHA: f64 = 0.5;

/// The cosine's weight in adaptive fusion runs from [`ADAPTIVE_LOW`] (the
/// vector list flat, BM25's best standing out) to [`ADAPTIVE_HIGH`] (the
/// other way round): see [`adaptive_alpha`]. Chosen on the train halves of
/// `benches/bench_quality.py`'s sets by `benches/tune_fusion.py`: the range
/// that loses no train set and gains on each of LoCoMo's shapes. Wider
/// ranges gain more on LoCoMo and lose the real chats (0.1-0.6: Chit-Chat's
/// test nDCG@10 0.405 -> 0.388; 0.35-0.55: 0.400).
pub const ADAPTIVE_LOW: f64 = 0.4;
/// See [`ADAPTIVE_LOW`].
pub const ADAPTIVE_HIGH: f64 = 0.55;
/// A list's spread is its best score minus the score at this rank.
pub const SPREAD_RANK: usize = 30;

/// The share of a conversation turn's BM25 taken from its context (the turn
/// with its previous and next turn of its session): see [`contextual`].
pub const DEFAULT_CONTEXT_WEIGHT: f64 = 0.2;

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum Fusion {
    Rrf {
        k: f64,
    },
    Weighted {
        alpha: f64,
    },
    /// Weighted, with the weight [`adaptive_alpha`] gives each query.
    #[default]
    Adaptive,
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

/// A share a caller gives (`name` the argument's), checked: in [0, 1].
pub(crate) fn share(name: &str, w: f64) -> Result<f64> {
    if !(0.0..=1.0).contains(&w) {
        return Err(Error::invalid(format!(
            "{name} must be in [0, 1], got {}",
            py_float(w)
        )));
    }
    Ok(w)
}

/// The context weight a caller gives, checked: in [0, 1].
pub fn context_weight(w: f64) -> Result<f64> {
    share("context_weight", w)
}

/// The share of the gap to the cosine of the turn before that a turn answering
/// it takes (it asks nothing, and that turn asks): "Yes, every Sunday
/// morning." says little of "When does she go hiking?", the question before it
/// says more. Chosen on the train halves of `benches/bench_quality.py`'s
/// conversation sets (`benches/README.md`, "A turn that answers the question
/// before it").
pub const DEFAULT_ANSWER_WEIGHT: f64 = 0.4;

/// The answer weight a caller gives, checked: in [0, 1].
pub fn answer_weight(w: f64) -> Result<f64> {
    share("answer_weight", w)
}

/// The share of its relevance a memory whose text is all questions loses in
/// weighted fusion: "Who is your favourite basketball player?" says the
/// words and the likeness of "Who is John's favourite basketball player?",
/// and holds no answer. Chosen on the train halves of
/// `benches/bench_quality.py`'s sets (`benches/README.md`, "A memory that
/// asks").
pub const DEFAULT_QUESTION_WEIGHT: f64 = 0.08;

/// The question weight a caller gives, checked: in [0, 1].
pub fn question_weight(w: f64) -> Result<f64> {
    share("question_weight", w)
}

/// The relevance of a memory of which `asked` (in [0, 1]) is questions:
/// `relevance · (1 − weight · asked)`, still in [0, 1].
pub fn questioned(relevance: f64, asked: f64, weight: f64) -> f64 {
    relevance * (1.0 - weight * asked)
}

/// A turn's cosine in weighted fusion: `own` takes `context_weight` of the gap
/// to its neighbours' better cosine `context`, or, if it answers the turn
/// before (`asked`, that turn's cosine), `answer_weight` of the gap to it,
/// whichever lends more. A turn that answers nothing, or whose question is
/// farther from the query than it is, gets exactly the context's lending.
pub fn lent_cosine(
    own: f64,
    context: f64,
    asked: Option<f64>,
    context_weight: f64,
    answer_weight: f64,
) -> f64 {
    let lent = contextual(own, own.max(context), context_weight);
    match asked {
        Some(q) if answer_weight > 0.0 && q > own => lent.max(contextual(own, q, answer_weight)),
        _ => lent,
    }
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
    share("speaker_weight", w)
}

/// What a date the query names is worth to the candidates created in or near
/// it, as a share of the relevance: see [`dated`]. Chosen on LoCoMo's train
/// half, whose questions name their sessions' dates (0.1 and 0.3 within 0.003
/// of it; the other sets' questions name none: `benches/README.md`).
pub const DEFAULT_DATE_WEIGHT: f64 = 0.2;

/// How far a candidate's `created_at` may fall before the start of a date the
/// query names, and after its end, and still be of that date: a memory is
/// often written in the days after what it tells of.
pub const DATE_BEFORE: f64 = 2.0 * 86_400.0;
/// See [`DATE_BEFORE`].
pub const DATE_AFTER: f64 = 7.0 * 86_400.0;

/// Whether `created_at` falls in or near one of `dates` (intervals `[start,
/// end)` in unix seconds), widened by [`DATE_BEFORE`] and [`DATE_AFTER`].
pub fn near_date(created_at: f64, dates: &[(f64, f64)]) -> bool {
    dates
        .iter()
        .any(|&(start, end)| start - DATE_BEFORE <= created_at && created_at < end + DATE_AFTER)
}

/// The relevance of a candidate of a query that names a date some candidate
/// was created near (`named`), the date counted as one more signal worth
/// `weight` of the relevance: `(relevance + weight · matched) / (1 +
/// weight)`, still in [0, 1]. A query whose dates no candidate is near keeps
/// its relevances.
pub fn dated(relevance: f64, named: bool, matched: bool, weight: f64) -> f64 {
    if !named {
        return relevance;
    }
    (relevance + if matched { weight } else { 0.0 }) / (1.0 + weight)
}

/// The date weight a caller gives, checked: in [0, 1].
pub fn date_weight(w: f64) -> Result<f64> {
    share("date_weight", w)
}

/// What a memory that tells a time is worth to a question that asks when, as
/// a share of the relevance ([`dated`]'s form; `engine/when.rs`). Chosen on
/// LoCoMo's train half, where the evidence of a "when" question is mostly the
/// turn that says when (the best recall@10 in both shapes; the other sets do
/// not move: `benches/README.md`).
pub const DEFAULT_WHEN_WEIGHT: f64 = 0.05;

/// The when weight a caller gives, checked: in [0, 1].
pub fn when_weight(w: f64) -> Result<f64> {
    share("when_weight", w)
}

/// The dates a query names, checked: each a finite interval `[start, end)`
/// with `start < end`.
pub fn named_dates(dates: &[(f64, f64)]) -> Result<()> {
    match dates
        .iter()
        .find(|(start, end)| !(start.is_finite() && end.is_finite() && start < end))
    {
        Some(&(start, end)) => Err(Error::invalid(format!(
            "a date must be a finite interval (start, end) with start < end, got ({}, {})",
            py_float(start),
            py_float(end)
        ))),
        None => Ok(()),
    }
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

/// How far the best of `scores` (one list's relevances) stands above the one
/// at rank [`SPREAD_RANK`] (the last, in a shorter list): 0 for no scores.
/// Reorders `scores`; one selection, linear in their number.
pub fn spread(scores: &mut [f64]) -> f64 {
    let Some(last) = scores.len().checked_sub(1) else {
        return 0.0;
    };
    let best = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let (_, nth, _) =
        scores.select_nth_unstable_by(last.min(SPREAD_RANK - 1), |a, b| b.total_cmp(a));
    best - *nth
}

/// The cosine's weight for one query, from the spread ([`spread`]) of the
/// candidates' cosines and of their BM25 shares (over the ceiling, with the
/// speaker and session passes): `LOW + (HIGH − LOW) · c / (c + b)`, halfway
/// when both are flat. A list whose best hits stand out from the rest found
/// something the query singles out; a flat list ranks by words or topics
/// the candidates share. On short turns the vectors' spread is the larger
/// when a question paraphrases its answer, BM25's when it reuses the
/// answer's rare words (LoCoMo's questions, written reading the evidence).
/// (`benches/README.md`).
pub fn adaptive_alpha(cosine_spread: f64, bm25_spread: f64) -> f64 {
    let (c, b) = (cosine_spread.max(0.0), bm25_spread.max(0.0));
    let share = if c + b > 0.0 { c / (c + b) } else { 0.5 };
    ADAPTIVE_LOW + (ADAPTIVE_HIGH - ADAPTIVE_LOW) * share
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
    #[test]
    fn an_answer_lends_exactly_the_context_where_it_answers_nothing() {
        let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = || {
            rng = rng.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            (rng >> 11) as f64 / (1u64 << 53) as f64
        };
        for _ in 0..100_000 {
            let (own, context, asked, cw) = (next(), next(), next(), next());
            let alone = contextual(own, own.max(context), cw);
            // Bit for bit: no answer, a zero weight, or a question farther away.
            assert_eq!(
                lent_cosine(own, context, None, cw, 0.4).to_bits(),
                alone.to_bits()
            );
            assert_eq!(
                lent_cosine(own, context, Some(asked), cw, 0.0).to_bits(),
                alone.to_bits()
            );
            let lent = lent_cosine(own, context, Some(asked), cw, 0.4);
            if asked <= own {
                assert_eq!(lent.to_bits(), alone.to_bits());
            } else {
                assert_eq!(lent, alone.max(contextual(own, asked, 0.4)));
            }
        }
    }

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
    fn a_date_counts_near_its_interval() {
        let day = 86_400.0;
        let dates = [(100.0 * day, 101.0 * day)];
        assert!(near_date(100.5 * day, &dates));
        // Two days before, up to seven days after its end.
        assert!(near_date(98.0 * day, &dates));
        assert!(!near_date(98.0 * day - 1.0, &dates));
        assert!(near_date(108.0 * day - 1.0, &dates));
        assert!(!near_date(108.0 * day, &dates));
        // Any of several; none named, none near.
        assert!(near_date(
            500.0 * day,
            &[(0.0, day), (500.0 * day, 501.0 * day)]
        ));
        assert!(!near_date(100.5 * day, &[]));
    }

    #[test]
    fn dated_by_hand() {
        assert!(close(dated(0.6, true, true, 0.2), 0.8 / 1.2));
        assert!(close(dated(0.6, true, false, 0.2), 0.6 / 1.2));
        // No candidate near the dates: the relevance as it was.
        assert!(close(dated(0.6, false, false, 0.2), 0.6));
        assert!(close(dated(1.0, true, true, 1.0), 1.0));
        assert!(close(dated(0.6, true, true, 0.0), 0.6));
    }

    #[test]
    fn date_weights_and_dates_are_checked() {
        assert_eq!(date_weight(0.0).unwrap(), 0.0);
        assert_eq!(date_weight(1.0).unwrap(), 1.0);
        for bad in [-0.1, 1.5, f64::NAN, f64::INFINITY] {
            assert!(date_weight(bad).is_err(), "{bad}");
        }
        assert!(named_dates(&[]).is_ok());
        assert!(named_dates(&[(0.0, 1.0), (-5.0, 3.0)]).is_ok());
        for bad in [
            (1.0, 1.0),
            (2.0, 1.0),
            (f64::NAN, 1.0),
            (0.0, f64::INFINITY),
        ] {
            assert!(named_dates(&[(0.0, 1.0), bad]).is_err(), "{bad:?}");
        }
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

    #[test]
    fn spread_is_the_best_above_the_one_at_its_rank() {
        assert!(close(spread(&mut []), 0.0));
        assert!(close(spread(&mut [0.4]), 0.0));
        // Shorter than the rank: the best above the last.
        assert!(close(spread(&mut [0.2, 0.9, 0.5]), 0.7));
        // Longer: the 30th best, whatever the order given.
        let mut scores: Vec<f64> = (0..40).map(|i| f64::from((i * 7) % 40) / 100.0).collect();
        assert!(close(spread(&mut scores), 0.39 - 0.10));
    }

    #[test]
    fn the_adaptive_weight_follows_the_list_that_stands_out() {
        let mid = (ADAPTIVE_LOW + ADAPTIVE_HIGH) / 2.0;
        assert!(close(adaptive_alpha(0.0, 0.0), mid));
        assert!(close(adaptive_alpha(0.2, 0.2), mid));
        assert!(close(adaptive_alpha(0.3, 0.0), ADAPTIVE_HIGH));
        assert!(close(adaptive_alpha(0.0, 0.3), ADAPTIVE_LOW));
        let a = adaptive_alpha(0.3, 0.1);
        assert!(close(
            a,
            ADAPTIVE_LOW + (ADAPTIVE_HIGH - ADAPTIVE_LOW) * 0.75
        ));
        assert!(adaptive_alpha(0.1, 0.3) < mid && mid < a);
        assert_eq!(Fusion::default(), Fusion::Adaptive);
    }
}
