//! The Okapi BM25 of the `rank_bm25` Python package, score for score.
//!
//! `rank_bm25.BM25Okapi` scores pre-tokenized documents with
//! `idf(t) = ln(N - n + 0.5) - ln(n + 0.5)`, where a negative idf is replaced
//! by `epsilon * average_idf`, and
//! `score = Σ_{query tokens} idf · tf·(k1+1) / (tf + k1·(1 - b + b·len/avgdl))`
//! (a query token repeated counts again). This module keeps postings instead
//! of one dictionary per document, and evaluates the same floating-point
//! operations in the same order, so its scores equal `rank_bm25`'s.
//!
//! Separate from [`super::Bm25Index`]: that one is Lucene's formula over
//! analysed text, updated incrementally; this one is static, over the caller's
//! tokens.

use rustc_hash::FxHashMap;

use crate::error::{Error, Result};

/// Collects documents token by token, then [`OkapiBuilder::finish`] computes
/// the statistics.
#[derive(Default)]
pub struct OkapiBuilder {
    vocab: FxHashMap<String, u32>,
    terms: Vec<String>,
    /// Per term, its (document, tf) pairs in document order.
    postings: Vec<Vec<(u32, u32)>>,
    /// Per document, its (term, tf) pairs in order of first appearance.
    forward: Vec<(u32, u32)>,
    starts: Vec<usize>,
    doc_len: Vec<u32>,
    /// Position in `forward` of each term of the open document.
    open: FxHashMap<u32, usize>,
    open_len: u32,
}

impl OkapiBuilder {
    pub fn new() -> Self {
        OkapiBuilder {
            starts: vec![0],
            ..Default::default()
        }
    }

    /// Adds a token to the open document.
    pub fn push(&mut self, token: &str) -> Result<()> {
        let term = match self.vocab.get(token) {
            Some(&t) => t,
            None => {
                let t = u32::try_from(self.terms.len())
                    .map_err(|_| Error::invalid("too many distinct tokens"))?;
                self.vocab.insert(token.to_owned(), t);
                self.terms.push(token.to_owned());
                self.postings.push(Vec::new());
                t
            }
        };
        match self.open.get(&term) {
            Some(&at) => self.forward[at].1 += 1,
            None => {
                self.open.insert(term, self.forward.len());
                self.forward.push((term, 1));
            }
        }
        self.open_len = self
            .open_len
            .checked_add(1)
            .ok_or_else(|| Error::invalid("a document has too many tokens"))?;
        Ok(())
    }

    /// Closes the open document (possibly empty) and starts the next one.
    pub fn end_document(&mut self) -> Result<()> {
        let doc =
            u32::try_from(self.doc_len.len()).map_err(|_| Error::invalid("too many documents"))?;
        let start = self.starts[self.starts.len() - 1];
        for &(term, tf) in &self.forward[start..] {
            self.postings[term as usize].push((doc, tf));
        }
        self.starts.push(self.forward.len());
        self.doc_len.push(self.open_len);
        self.open.clear();
        self.open_len = 0;
        Ok(())
    }

    /// The index, with `rank_bm25`'s statistics. Fails on a corpus with no
    /// document or no token, where `rank_bm25` divides by zero.
    pub fn finish(self, k1: f64, b: f64, epsilon: f64) -> Result<Okapi> {
        for (name, v) in [("k1", k1), ("b", b), ("epsilon", epsilon)] {
            if !v.is_finite() {
                return Err(Error::invalid(format!("{name} must be finite, got {v}")));
            }
        }
        let n = self.doc_len.len();
        if n == 0 {
            return Err(Error::invalid("the corpus has no documents"));
        }
        if self.terms.is_empty() {
            return Err(Error::invalid("the corpus has no tokens"));
        }
        let total: u64 = self.doc_len.iter().map(|&l| u64::from(l)).sum();
        let avgdl = total as f64 / n as f64;
        // rank_bm25 sums the idfs in order of first appearance; so do we, for
        // the same rounding.
        let mut idf: Vec<f64> = Vec::with_capacity(self.terms.len());
        let mut idf_sum = 0.0f64;
        for p in &self.postings {
            let df = p.len() as f64;
            let v = (n as f64 - df + 0.5).ln() - (df + 0.5).ln();
            idf_sum += v;
            idf.push(v);
        }
        let average_idf = idf_sum / idf.len() as f64;
        let floor = epsilon * average_idf;
        for v in &mut idf {
            if *v < 0.0 {
                *v = floor;
            }
        }
        let norm = self
            .doc_len
            .iter()
            .map(|&l| k1 * ((1.0 - b) + b * f64::from(l) / avgdl))
            .collect();
        Ok(Okapi {
            k1,
            b,
            epsilon,
            vocab: self.vocab,
            terms: self.terms,
            postings: self.postings,
            forward: self.forward,
            starts: self.starts,
            doc_len: self.doc_len,
            idf,
            average_idf,
            avgdl,
            norm,
        })
    }
}

/// A static BM25 index scoring as `rank_bm25.BM25Okapi` does.
pub struct Okapi {
    k1: f64,
    b: f64,
    epsilon: f64,
    vocab: FxHashMap<String, u32>,
    terms: Vec<String>,
    postings: Vec<Vec<(u32, u32)>>,
    forward: Vec<(u32, u32)>,
    starts: Vec<usize>,
    doc_len: Vec<u32>,
    idf: Vec<f64>,
    average_idf: f64,
    avgdl: f64,
    /// `k1 · (1 - b + b · len / avgdl)` per document.
    norm: Vec<f64>,
}

impl Okapi {
    /// Builds from whole documents.
    pub fn new<D, T>(corpus: D, k1: f64, b: f64, epsilon: f64) -> Result<Self>
    where
        D: IntoIterator,
        D::Item: IntoIterator<Item = T>,
        T: AsRef<str>,
    {
        let mut builder = OkapiBuilder::new();
        for doc in corpus {
            for token in doc {
                builder.push(token.as_ref())?;
            }
            builder.end_document()?;
        }
        builder.finish(k1, b, epsilon)
    }

    pub fn len(&self) -> usize {
        self.doc_len.len()
    }

    pub fn is_empty(&self) -> bool {
        self.doc_len.is_empty()
    }

    pub fn k1(&self) -> f64 {
        self.k1
    }

    pub fn b(&self) -> f64 {
        self.b
    }

    pub fn epsilon(&self) -> f64 {
        self.epsilon
    }

    pub fn avgdl(&self) -> f64 {
        self.avgdl
    }

    pub fn average_idf(&self) -> f64 {
        self.average_idf
    }

    /// Distinct tokens, in order of first appearance.
    pub fn terms(&self) -> &[String] {
        &self.terms
    }

    /// The idf of each of [`Okapi::terms`], negative ones floored.
    pub fn idf(&self) -> &[f64] {
        &self.idf
    }

    /// Tokens per document.
    pub fn doc_len(&self) -> &[u32] {
        &self.doc_len
    }

    /// The (term index, count) pairs of document `doc`, in order of first
    /// appearance.
    pub fn document(&self, doc: usize) -> &[(u32, u32)] {
        &self.forward[self.starts[doc]..self.starts[doc + 1]]
    }

    /// The contribution of one occurrence of `term` in the query to a
    /// document with `tf` occurrences.
    #[inline]
    fn term_score(&self, term: usize, tf: u32, doc: usize) -> f64 {
        let tf = f64::from(tf);
        self.idf[term] * (tf * (self.k1 + 1.0) / (tf + self.norm[doc]))
    }

    /// The score of every document, in corpus order.
    pub fn scores<T: AsRef<str>>(&self, query: &[T]) -> Vec<f64> {
        let mut scores = vec![0.0f64; self.len()];
        for token in query {
            if let Some(&t) = self.vocab.get(token.as_ref()) {
                for &(doc, tf) in &self.postings[t as usize] {
                    scores[doc as usize] += self.term_score(t as usize, tf, doc as usize);
                }
            }
        }
        scores
    }

    /// The scores of the documents `docs` (indices below [`Okapi::len`]), in
    /// that order.
    pub fn scores_of<T: AsRef<str>>(&self, query: &[T], docs: &[usize]) -> Result<Vec<f64>> {
        if let Some(&d) = docs.iter().find(|&&d| d >= self.len()) {
            return Err(Error::invalid(format!(
                "document {d} is out of range for a corpus of {}",
                self.len()
            )));
        }
        let mut scores = vec![0.0f64; docs.len()];
        for token in query {
            let Some(&t) = self.vocab.get(token.as_ref()) else {
                continue;
            };
            let postings = &self.postings[t as usize];
            for (score, &doc) in scores.iter_mut().zip(docs) {
                if let Ok(at) = postings.binary_search_by_key(&(doc as u32), |p| p.0) {
                    *score += self.term_score(t as usize, postings[at].1, doc);
                }
            }
        }
        Ok(scores)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn corpus() -> Vec<Vec<&'static str>> {
        vec![
            vec!["hello", "there", "good", "man", "man"],
            vec!["it", "is", "quite", "windy", "in", "london"],
            vec!["how", "is", "the", "weather", "today"],
            vec![],
        ]
    }

    /// rank_bm25's formulas written out directly, one document at a time.
    fn reference(docs: &[Vec<&str>], query: &[&str], k1: f64, b: f64, eps: f64) -> Vec<f64> {
        let n = docs.len() as f64;
        let avgdl = docs.iter().map(|d| d.len()).sum::<usize>() as f64 / n;
        let mut order: Vec<&str> = Vec::new();
        for d in docs {
            for t in d {
                if !order.contains(t) {
                    order.push(t);
                }
            }
        }
        let df = |t: &str| docs.iter().filter(|d| d.contains(&t)).count() as f64;
        let raw: Vec<f64> = order
            .iter()
            .map(|t| (n - df(t) + 0.5).ln() - (df(t) + 0.5).ln())
            .collect();
        let avg = raw.iter().sum::<f64>() / raw.len() as f64;
        let idf = |t: &str| {
            order.iter().position(|o| *o == t).map_or(0.0, |i| {
                if raw[i] < 0.0 {
                    eps * avg
                } else {
                    raw[i]
                }
            })
        };
        docs.iter()
            .map(|d| {
                query
                    .iter()
                    .map(|q| {
                        let tf = d.iter().filter(|t| *t == q).count() as f64;
                        let dl = d.len() as f64;
                        idf(q) * (tf * (k1 + 1.0) / (tf + k1 * (1.0 - b + b * dl / avgdl)))
                    })
                    .sum()
            })
            .collect()
    }

    #[test]
    fn scores_equal_the_reference_formulas() {
        let docs = corpus();
        let o = Okapi::new(docs.clone(), 1.5, 0.75, 0.25).unwrap();
        for query in [
            vec!["windy", "london"],
            vec!["is", "is", "man"],
            vec!["nothing"],
            vec![],
        ] {
            let got = o.scores(&query);
            let want = reference(&docs, &query, 1.5, 0.75, 0.25);
            assert_eq!(got.len(), 4);
            for (g, w) in got.iter().zip(&want) {
                assert!(
                    (g - w).abs() <= 1e-12 * w.abs().max(1.0),
                    "{got:?} {want:?}"
                );
            }
            let picked = o.scores_of(&query, &[2, 0, 2]).unwrap();
            assert_eq!(picked, vec![got[2], got[0], got[2]]);
        }
        assert!(o.scores_of(&["man"], &[4]).is_err());
    }

    #[test]
    fn statistics_follow_rank_bm25() {
        let o = Okapi::new(corpus(), 1.5, 0.75, 0.25).unwrap();
        assert_eq!(o.len(), 4);
        assert_eq!(o.doc_len(), &[5, 6, 5, 0]);
        assert_eq!(o.avgdl(), 4.0);
        assert_eq!(&o.terms()[..4], &["hello", "there", "good", "man"]);
        assert_eq!(o.document(0), &[(0, 1), (1, 1), (2, 1), (3, 2)]);
        assert!(o.document(3).is_empty());
        // "is" is in 2 of 4 documents: ln(2.5) - ln(2.5) = 0, not negative.
        let is = o.terms().iter().position(|t| t == "is").unwrap();
        assert_eq!(o.idf()[is], 0.0);
        // Every other term is in one document: ln(3.5) - ln(1.5).
        let hello = o.idf()[0];
        assert!((hello - (3.5f64.ln() - 1.5f64.ln())).abs() < 1e-15);
    }

    #[test]
    fn negative_idf_is_floored_at_epsilon_times_the_average() {
        // "a" is in all three documents: ln(0.5) - ln(3.5) < 0.
        let docs = vec![vec!["a", "b"], vec!["a", "c"], vec!["a", "b", "d"]];
        let o = Okapi::new(docs.clone(), 1.2, 0.5, 0.3).unwrap();
        let raw_a = 0.5f64.ln() - 3.5f64.ln();
        let raw_b = 1.5f64.ln() - 2.5f64.ln();
        let raw_1 = 2.5f64.ln() - 1.5f64.ln();
        let avg = (raw_a + raw_b + raw_1 + raw_1) / 4.0;
        assert!((o.average_idf() - avg).abs() < 1e-15);
        assert!(raw_b < 0.0);
        assert_eq!(o.idf()[0], 0.3 * avg);
        assert_eq!(o.idf()[1], 0.3 * avg);
        let got = o.scores(&["a", "d"]);
        let want = reference(&docs, &["a", "d"], 1.2, 0.5, 0.3);
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() <= 1e-12);
        }
    }

    #[test]
    fn degenerate_corpora_are_refused() {
        let none: Vec<Vec<&str>> = vec![];
        assert!(Okapi::new(none, 1.5, 0.75, 0.25).is_err());
        assert!(Okapi::new(vec![Vec::<&str>::new()], 1.5, 0.75, 0.25).is_err());
        assert!(Okapi::new(vec![vec!["a"]], f64::NAN, 0.75, 0.25).is_err());
    }
}
