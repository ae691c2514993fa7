//! Lucene's BM25 (the variant of Lucene 8 and later, which drops the constant
//! `k1 + 1` from the numerator, as bm25s does):
//!
//! ```text
//! score(D, Q) = Σ_{t ∈ Q} idf(t) · tf(t, D) / (tf(t, D) + k1 · (1 − b + b · |D| / avgdl))
//! idf(t)      = ln(1 + (N − df(t) + 0.5) / (df(t) + 0.5))
//! ```
//!
//! `N` is the number of documents (including those without terms), `|D|` a
//! document's number of terms and `avgdl` the mean of `|D|`. A term repeated
//! in the query counts once per repetition. The corpus statistics are
//! separate from the scorer ([`CorpusStats`]), so that the scorer can be
//! tested alone; the length normalisation is folded into two constants, so
//! scoring a posting is a multiply-add and a division, in `f32`.

use crate::error::{Error, Result};

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bm25Params {
    pub k1: f64,
    pub b: f64,
}

/// Lucene's (and bm25s'): what a [`crate::bm25::Bm25Index`] built alone uses.
impl Default for Bm25Params {
    fn default() -> Self {
        Bm25Params { k1: 1.2, b: 0.75 }
    }
}

impl Bm25Params {
    /// The engine's: memories are short texts (a turn, a fact), where Lucene's
    /// length normalisation pushes a turn that says more about the question
    /// below a shorter one that names it in passing. `b` 0.5 was chosen on the
    /// train halves of every retrieval set (`benches/README.md`, "BM25's length
    /// normalisation in a memory store"); lower wins the conversations more but
    /// loses long abstracts (SciFact).
    pub const MEMORIES: Bm25Params = Bm25Params { k1: 1.2, b: 0.5 };

    pub fn new(k1: f64, b: f64) -> Result<Self> {
        if !(k1.is_finite() && k1 >= 0.0) {
            return Err(Error::invalid(format!(
                "k1 must be a finite number >= 0, got {k1}"
            )));
        }
        if !(0.0..=1.0).contains(&b) {
            return Err(Error::invalid(format!("b must be in [0, 1], got {b}")));
        }
        Ok(Bm25Params { k1, b })
    }
}

/// What the scorer needs to know about the corpus, kept exact under adds and removes.
#[derive(Clone, Copy, Debug)]
pub struct CorpusStats {
    /// Number of documents.
    pub n: u64,
    /// Sum of document lengths.
    pub total_len: u64,
}

impl CorpusStats {
    pub fn avgdl(&self) -> f64 {
        if self.n == 0 {
            0.0
        } else {
            self.total_len as f64 / self.n as f64
        }
    }
}

/// Lucene's idf, always positive.
pub fn idf(n: u64, df: u64) -> f64 {
    debug_assert!(df <= n, "df {df} > N {n}");
    let (n, df) = (n as f64, df as f64);
    (1.0 + (n - df + 0.5) / (df + 0.5)).ln()
}

/// Scores the postings of one query term: `weight · tf / (tf + c0 + c1 · len)`.
#[derive(Clone, Copy, Debug)]
pub struct TermScorer {
    weight: f32,
    c0: f32,
    c1: f32,
}

impl TermScorer {
    /// `count` is how many times the term occurs in the query.
    pub fn new(params: Bm25Params, stats: CorpusStats, df: u64, count: u32) -> Self {
        let avgdl = stats.avgdl();
        let c1 = if avgdl > 0.0 {
            params.k1 * params.b / avgdl
        } else {
            0.0
        };
        TermScorer {
            weight: (idf(stats.n, df) * f64::from(count)) as f32,
            c0: (params.k1 * (1.0 - params.b)) as f32,
            c1: c1 as f32,
        }
    }

    #[inline(always)]
    pub fn score(&self, tf: u32, len: u32) -> f32 {
        let tf = tf as f32;
        self.weight * tf / (tf + (self.c0 + self.c1 * len as f32))
    }

    /// [`score`](Self::score) of a text made of `parts` documents, `tf` the
    /// term's count summed over them and `len` their lengths summed: its
    /// length counts against `parts` times the average document length, as
    /// an index of such texts would count it (its average length being
    /// about `parts` times this one's).
    #[inline(always)]
    pub fn score_joined(&self, tf: u32, len: u32, parts: u32) -> f32 {
        let tf = tf as f32;
        let len = len as f32 / parts.max(1) as f32;
        self.weight * tf / (tf + (self.c0 + self.c1 * len))
    }

    /// The supremum of [`score`](Self::score) over every document: the
    /// term's idf (times its count in the query), approached as tf grows.
    pub fn ceiling(&self) -> f32 {
        self.weight
    }

    /// An upper bound of [`score`](Self::score) over postings with `tf <=
    /// max_tf` and `len >= min_len` (the score rises with tf and falls with
    /// length); the caller adds slack for rounding.
    pub fn upper_bound(&self, max_tf: u32, min_len: u32) -> f32 {
        self.score(max_tf, min_len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idf_matches_lucene() {
        assert!((idf(10, 1) - (1.0f64 + 9.5 / 1.5).ln()).abs() < 1e-12);
        assert!(idf(5, 5) > 0.0);
    }

    #[test]
    fn score_matches_formula() {
        let p = Bm25Params::default();
        let stats = CorpusStats {
            n: 4,
            total_len: 20,
        };
        let s = TermScorer::new(p, stats, 2, 1);
        let (tf, len) = (3.0f64, 7.0f64);
        let want = idf(4, 2) * tf / (tf + 1.2 * (1.0 - 0.75 + 0.75 * len / 5.0));
        assert!((f64::from(s.score(3, 7)) - want).abs() < 1e-5 * want);
        // Twice in the query counts twice.
        let s2 = TermScorer::new(p, stats, 2, 2);
        assert!((s2.score(3, 7) - 2.0 * s.score(3, 7)).abs() < 1e-6);
    }

    #[test]
    fn joined_texts_count_length_per_part() {
        let s = TermScorer::new(
            Bm25Params::default(),
            CorpusStats {
                n: 10,
                total_len: 50,
            },
            3,
            1,
        );
        assert_eq!(s.score_joined(2, 7, 1), s.score(2, 7));
        assert!((s.score_joined(3, 21, 3) - s.score(3, 7)).abs() < 1e-6);
        assert!(s.score_joined(1, 12, 3) < s.ceiling());
    }

    #[test]
    fn bound_dominates() {
        let s = TermScorer::new(
            Bm25Params::default(),
            CorpusStats {
                n: 100,
                total_len: 1000,
            },
            7,
            1,
        );
        let ub = s.upper_bound(5, 3);
        for tf in 1..=5 {
            for len in 3..50 {
                assert!(s.score(tf, len) <= ub);
            }
        }
    }

    #[test]
    fn params_are_checked() {
        assert!(Bm25Params::new(1.2, 0.75).is_ok());
        assert!(Bm25Params::new(-1.0, 0.75).is_err());
        assert!(Bm25Params::new(1.2, 1.5).is_err());
        assert!(Bm25Params::new(f64::NAN, 0.5).is_err());
    }
}
