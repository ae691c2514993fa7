//! The index's storage and its mutations.
//!
//! Every stored text gets an internal document number (`docno`), handed out
//! in increasing order and never reused until the next compaction, so each
//! term's postings (`docno`, `tf`) are appended in sorted order and stay
//! sorted, which dynamic pruning needs. Removing a document marks its
//! `docno` dead and subtracts it from the exact statistics (`N`, total length,
//! each term's `df`, found through the per-document forward list); its
//! postings stay until dead documents make up a quarter of all `docno`s,
//! when [`Bm25Index::compact`] renumbers the live ones and rebuilds the lists.
//! Adding one document therefore costs a few hash look-ups and appends, and
//! removing one costs its number of distinct terms, amortised.

use crate::idmap::SlotMap;
use rayon::prelude::*;
use rustc_hash::{FxHashMap, FxHashSet};

use crate::error::{Error, Result};

use super::analyzer::{Analyzer, AnalyzerConfig, TermCache, Tokens};
use super::scoring::{Bm25Params, CorpusStats};

/// The id that pads batch results with fewer than `k` hits, so no document
/// may have it (the same value as [`crate::hnsw::MISSING`]).
pub const MISSING: u64 = u64::MAX;

/// Batches at least this large are analysed in parallel.
const PARALLEL_BATCH: usize = 64;

/// One term's postings, sorted by `docno`. Dead documents' postings linger
/// until compaction; `df` counts only live ones. `max_tf` and `min_len` span
/// every posting, dead or alive, so they only over-estimate, which keeps the
/// score bounds built from them valid.
#[derive(Clone, Debug, Default)]
pub(crate) struct Postings {
    pub docs: Vec<u32>,
    pub tfs: Vec<u32>,
    /// Each posting's document length (`doc_lens[docs[i]]`, fixed while the
    /// posting lives): a search scores a posting from its own list instead
    /// of a read of `doc_lens` at a place no other posting is near (a cache
    /// miss each, in a large index after a model run).
    pub lens: Vec<u32>,
    pub df: u32,
    pub max_tf: u32,
    pub min_len: u32,
}

impl Postings {
    fn push(&mut self, docno: u32, tf: u32, len: u32) {
        if self.docs.is_empty() {
            self.max_tf = tf;
            self.min_len = len;
        } else {
            self.max_tf = self.max_tf.max(tf);
            self.min_len = self.min_len.min(len);
        }
        self.docs.push(docno);
        self.tfs.push(tf);
        self.lens.push(len);
        self.df += 1;
    }
}

/// One analysed document: its distinct terms, sorted, with their frequencies.
pub struct DocTerms {
    text: String,
    ends: Vec<usize>,
    tfs: Vec<u32>,
    len: u32,
}

impl DocTerms {
    pub(crate) fn new(analyzer: &Analyzer, text: &str, cache: Option<&mut TermCache>) -> Self {
        let mut tokens = Tokens::default();
        analyzer.tokens(text, &mut tokens, cache);
        let mut sorted: Vec<&str> = tokens.iter().collect();
        sorted.sort_unstable();
        let mut out = DocTerms {
            text: String::new(),
            ends: Vec::new(),
            tfs: Vec::new(),
            len: saturate(tokens.len()),
        };
        let mut i = 0;
        while i < sorted.len() {
            let run = sorted[i..].iter().take_while(|t| **t == sorted[i]).count();
            out.text.push_str(sorted[i]);
            out.ends.push(out.text.len());
            out.tfs.push(saturate(run));
            i += run;
        }
        out
    }

    pub(crate) fn terms(&self) -> impl Iterator<Item = (&str, u32)> + '_ {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts
            .zip(self.ends.iter().copied())
            .zip(self.tfs.iter().copied())
            .map(|((s, e), tf)| (&self.text[s..e], tf))
    }
}

fn saturate(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// A BM25 index over texts keyed by `u64` ids, updated one document at a time.
#[derive(Clone, Debug)]
pub struct Bm25Index {
    pub(crate) params: Bm25Params,
    pub(crate) analyzer: Analyzer,
    /// Term text to term id.
    pub(crate) vocab: FxHashMap<Box<str>, u32>,
    /// Term id to text.
    pub(crate) term_text: Vec<Box<str>>,
    /// Term id to postings.
    pub(crate) postings: Vec<Postings>,
    /// Terms with `df > 0`.
    pub(crate) live_terms: usize,
    /// Per `docno`: external id, length in terms, and whether it is live.
    pub(crate) doc_ids: Vec<u64>,
    pub(crate) doc_lens: Vec<u32>,
    pub(crate) live: Vec<bool>,
    /// Per `docno`: its (term id, tf) pairs sorted by term id, at
    /// `fwd_terms[fwd_start[d]..fwd_start[d + 1]]`.
    pub(crate) fwd_start: Vec<usize>,
    pub(crate) fwd_terms: Vec<u32>,
    pub(crate) fwd_tfs: Vec<u32>,
    /// Live external id to `docno`.
    pub(crate) slots: SlotMap,
    pub(crate) total_len: u64,
}

impl Default for Bm25Index {
    fn default() -> Self {
        Bm25Index::new(Bm25Params::default(), AnalyzerConfig::default())
    }
}

impl Bm25Index {
    pub fn new(params: Bm25Params, analyzer: AnalyzerConfig) -> Self {
        Bm25Index {
            params,
            analyzer: Analyzer::new(analyzer),
            vocab: FxHashMap::default(),
            term_text: Vec::new(),
            postings: Vec::new(),
            live_terms: 0,
            doc_ids: Vec::new(),
            doc_lens: Vec::new(),
            live: Vec::new(),
            fwd_start: vec![0],
            fwd_terms: Vec::new(),
            fwd_tfs: Vec::new(),
            slots: SlotMap::default(),
            total_len: 0,
        }
    }

    pub fn params(&self) -> Bm25Params {
        self.params
    }

    /// Scores are weighed at query time from the statistics (the bounds that
    /// prune too), so new parameters take effect at the next search.
    pub fn set_params(&mut self, params: Bm25Params) {
        self.params = params;
    }

    pub fn analyzer(&self) -> &Analyzer {
        &self.analyzer
    }

    /// Number of documents.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    pub fn contains(&self, id: u64) -> bool {
        self.slots.contains_key(&id)
    }

    /// Number of distinct terms in live documents.
    pub fn vocabulary_size(&self) -> usize {
        self.live_terms
    }

    /// The stored ids, in insertion order.
    pub fn ids(&self) -> Vec<u64> {
        self.doc_ids
            .iter()
            .zip(&self.live)
            .filter(|(_, live)| **live)
            .map(|(id, _)| *id)
            .collect()
    }

    pub fn stats(&self) -> CorpusStats {
        CorpusStats {
            n: self.slots.len() as u64,
            total_len: self.total_len,
        }
    }

    /// Adds texts under `ids`; an id already stored has its text replaced.
    /// The batch is checked first (equal lengths, no repeated id), so an
    /// error changes nothing.
    pub fn add<S: AsRef<str> + Sync>(&mut self, ids: &[u64], texts: &[S]) -> Result<()> {
        Self::check_batch(ids, texts.len())?;
        let docs = self.analyze_batch(texts);
        self.insert_analyzed(ids, docs)
    }

    /// The checks [`add`](Self::add) makes before analysing anything: as many
    /// ids as texts, no id twice, and not [`MISSING`].
    pub fn check_batch(ids: &[u64], n_texts: usize) -> Result<()> {
        if ids.len() != n_texts {
            return Err(Error::invalid(format!(
                "ids and texts differ in length: {} ids, {n_texts} texts",
                ids.len()
            )));
        }
        if ids.contains(&MISSING) {
            return Err(Error::invalid(format!(
                "id {MISSING} is reserved as the 'no result' id"
            )));
        }
        check_unique(ids)
    }

    /// Analyses texts without touching the index (so a caller can do it
    /// before taking a write lock).
    pub fn analyze_batch<S: AsRef<str> + Sync>(&self, texts: &[S]) -> Vec<DocTerms> {
        let analyzer = &self.analyzer;
        if texts.len() < PARALLEL_BATCH {
            // Small batches (an agent's message at a time) use the analyzer's
            // shared cache, which stays warm from one call to the next.
            texts
                .iter()
                .map(|t| DocTerms::new(analyzer, t.as_ref(), None))
                .collect()
        } else {
            crate::pool::install(|| {
                texts
                    .par_iter()
                    .with_min_len(PARALLEL_BATCH / 2)
                    .map_init(TermCache::default, |cache, t| {
                        DocTerms::new(analyzer, t.as_ref(), Some(cache))
                    })
                    .collect()
            })
        }
    }

    /// Inserts documents analysed by [`analyze_batch`](Self::analyze_batch)
    /// of this index, so that a caller can analyse without the write lock.
    pub fn insert_analyzed(&mut self, ids: &[u64], docs: Vec<DocTerms>) -> Result<()> {
        Self::check_batch(ids, docs.len())?;
        let limit = u32::MAX as usize;
        if self.doc_ids.len() + ids.len() > limit {
            self.compact();
            if self.doc_ids.len() + ids.len() > limit {
                return Err(Error::invalid(format!(
                    "the index is full: it holds at most {limit} documents"
                )));
            }
        }
        for (&id, doc) in ids.iter().zip(docs) {
            if let Some(old) = self.slots.get(&id).copied() {
                self.kill(old);
            }
            self.insert(id, &doc);
        }
        self.maybe_compact();
        Ok(())
    }

    /// Removes `ids`; if one is unknown or repeated, nothing is removed.
    pub fn remove(&mut self, ids: &[u64]) -> Result<()> {
        check_unique(ids)?;
        if let Some(&missing) = ids.iter().find(|id| !self.slots.contains_key(id)) {
            return Err(Error::UnknownId(missing));
        }
        for id in ids {
            if let Some(docno) = self.slots.get(id).copied() {
                self.kill(docno);
            }
        }
        self.maybe_compact();
        Ok(())
    }

    fn insert(&mut self, id: u64, doc: &DocTerms) {
        let docno = saturate(self.doc_ids.len());
        let start = self.fwd_terms.len();
        for (term, tf) in doc.terms() {
            let tid = match self.vocab.get(term) {
                Some(&tid) => tid,
                None => {
                    let tid = saturate(self.term_text.len());
                    self.vocab.insert(Box::from(term), tid);
                    self.term_text.push(Box::from(term));
                    self.postings.push(Postings::default());
                    tid
                }
            };
            let p = &mut self.postings[tid as usize];
            if p.df == 0 {
                self.live_terms += 1;
            }
            p.push(docno, tf, doc.len);
            self.fwd_terms.push(tid);
            self.fwd_tfs.push(tf);
        }
        sort_pairs(&mut self.fwd_terms[start..], &mut self.fwd_tfs[start..]);
        self.fwd_start.push(self.fwd_terms.len());
        self.doc_ids.push(id);
        self.doc_lens.push(doc.len);
        self.live.push(true);
        self.slots.insert(id, docno);
        self.total_len += u64::from(doc.len);
    }

    /// Marks a live document dead and takes it out of the statistics.
    fn kill(&mut self, docno: u32) {
        let d = docno as usize;
        self.live[d] = false;
        self.slots.remove(&self.doc_ids[d]);
        self.total_len -= u64::from(self.doc_lens[d]);
        for &tid in &self.fwd_terms[self.fwd_start[d]..self.fwd_start[d + 1]] {
            let p = &mut self.postings[tid as usize];
            p.df -= 1;
            if p.df == 0 {
                self.live_terms -= 1;
            }
        }
    }

    fn maybe_compact(&mut self) {
        let dead = self.doc_ids.len() - self.slots.len();
        if dead > 0 && dead * 4 >= self.doc_ids.len() {
            self.compact();
        }
    }

    /// Renumbers the live documents densely (keeping their order), drops dead
    /// postings and terms that no live document has, and recomputes the
    /// score bounds exactly.
    pub fn compact(&mut self) {
        let mut remap = vec![u32::MAX; self.doc_ids.len()];
        let mut next = 0u32;
        for (d, live) in self.live.iter().enumerate() {
            if *live {
                remap[d] = next;
                next += 1;
            }
        }
        let mut term_remap = vec![u32::MAX; self.postings.len()];
        let mut term_text = Vec::with_capacity(self.live_terms);
        let mut postings = Vec::with_capacity(self.live_terms);
        for (tid, p) in std::mem::take(&mut self.postings).into_iter().enumerate() {
            if p.df == 0 {
                continue;
            }
            term_remap[tid] = saturate(postings.len());
            term_text.push(std::mem::take(&mut self.term_text[tid]));
            let mut q = Postings::default();
            q.docs.reserve_exact(p.df as usize);
            q.tfs.reserve_exact(p.df as usize);
            q.lens.reserve_exact(p.df as usize);
            for (&d, &tf) in p.docs.iter().zip(&p.tfs) {
                let nd = remap[d as usize];
                if nd != u32::MAX {
                    q.push(nd, tf, self.doc_lens[d as usize]);
                }
            }
            postings.push(q);
        }
        self.vocab.retain(|_, tid| {
            let new = term_remap[*tid as usize];
            *tid = new;
            new != u32::MAX
        });
        let mut fwd_start = Vec::with_capacity(next as usize + 1);
        fwd_start.push(0);
        let mut fwd_terms = Vec::new();
        let mut fwd_tfs = Vec::new();
        let mut doc_ids = Vec::with_capacity(next as usize);
        let mut doc_lens = Vec::with_capacity(next as usize);
        for (d, live) in self.live.iter().enumerate() {
            if !*live {
                continue;
            }
            let range = self.fwd_start[d]..self.fwd_start[d + 1];
            // Term ids are renumbered in order, so each list stays sorted.
            fwd_terms.extend(
                self.fwd_terms[range.clone()]
                    .iter()
                    .map(|t| term_remap[*t as usize]),
            );
            fwd_tfs.extend_from_slice(&self.fwd_tfs[range]);
            fwd_start.push(fwd_terms.len());
            doc_ids.push(self.doc_ids[d]);
            doc_lens.push(self.doc_lens[d]);
        }
        for docno in self.slots.values_mut() {
            *docno = remap[*docno as usize];
        }
        self.term_text = term_text;
        self.postings = postings;
        self.fwd_start = fwd_start;
        self.fwd_terms = fwd_terms;
        self.fwd_tfs = fwd_tfs;
        self.live = vec![true; doc_ids.len()];
        self.doc_ids = doc_ids;
        self.doc_lens = doc_lens;
    }

    /// The distinct analysed terms of `id`'s text, as sorted term ids (None
    /// for an id the index does not hold).
    pub(crate) fn terms_of(&self, id: u64) -> Option<&[u32]> {
        self.slots.get(&id).map(|&d| self.forward(d).0)
    }

    /// The forward list of a document: (term ids, tfs), sorted by term id.
    pub(crate) fn forward(&self, docno: u32) -> (&[u32], &[u32]) {
        let d = docno as usize;
        let range = self.fwd_start[d]..self.fwd_start[d + 1];
        (&self.fwd_terms[range.clone()], &self.fwd_tfs[range])
    }
}

fn check_unique(ids: &[u64]) -> Result<()> {
    let mut seen = FxHashSet::with_capacity_and_hasher(ids.len(), Default::default());
    match ids.iter().find(|id| !seen.insert(**id)) {
        Some(dup) => Err(Error::invalid(format!(
            "id {dup} appears more than once in the batch"
        ))),
        None => Ok(()),
    }
}

/// Sorts parallel slices by the first (small slices: one document's terms).
fn sort_pairs(keys: &mut [u32], vals: &mut [u32]) {
    let mut pairs: Vec<(u32, u32)> = keys.iter().copied().zip(vals.iter().copied()).collect();
    pairs.sort_unstable_by_key(|p| p.0);
    for (i, (k, v)) in pairs.into_iter().enumerate() {
        keys[i] = k;
        vals[i] = v;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain() -> Bm25Index {
        Bm25Index::new(
            Bm25Params::default(),
            AnalyzerConfig {
                stemming: false,
                stopwords: super::super::analyzer::Stopwords::None,
                ..AnalyzerConfig::default()
            },
        )
    }

    /// Checks every statistic against a recount from the live documents.
    fn assert_consistent(ix: &Bm25Index) {
        let mut df: FxHashMap<&str, u32> = FxHashMap::default();
        let mut total = 0u64;
        for (id, d) in ix.slots.iter() {
            assert!(ix.live[d as usize]);
            assert_eq!(ix.doc_ids[d as usize], id);
            let (terms, tfs) = ix.forward(d);
            assert!(terms.windows(2).all(|w| w[0] < w[1]));
            assert_eq!(
                tfs.iter().map(|&t| u64::from(t)).sum::<u64>(),
                u64::from(ix.doc_lens[d as usize])
            );
            total += u64::from(ix.doc_lens[d as usize]);
            for &t in terms {
                *df.entry(&ix.term_text[t as usize]).or_default() += 1;
            }
        }
        assert_eq!(ix.total_len, total);
        assert_eq!(ix.live_terms, df.len());
        for (tid, p) in ix.postings.iter().enumerate() {
            assert!(p.docs.windows(2).all(|w| w[0] < w[1]));
            let want = df.get(&*ix.term_text[tid]).copied().unwrap_or(0);
            assert_eq!(p.df, want, "df of {}", ix.term_text[tid]);
            if want > 0 {
                assert_eq!(ix.vocab[&ix.term_text[tid]], tid as u32);
            }
        }
    }

    #[test]
    fn add_remove_replace_keep_exact_stats() {
        let mut ix = plain();
        ix.add(&[1, 2, 3], &["a b b", "b c", "c c c d"]).unwrap();
        assert_eq!(ix.len(), 3);
        assert_eq!(ix.total_len, 9);
        assert_consistent(&ix);
        ix.add(&[2], &["e"]).unwrap();
        assert_eq!(ix.len(), 3);
        assert_eq!(ix.total_len, 8);
        assert_consistent(&ix);
        ix.remove(&[1]).unwrap();
        assert_consistent(&ix);
        assert_eq!(ix.ids(), vec![3, 2]);
        ix.remove(&[3, 2]).unwrap();
        assert!(ix.is_empty());
        assert_eq!(ix.vocabulary_size(), 0);
        assert_consistent(&ix);
    }

    #[test]
    fn bad_batches_change_nothing() {
        let mut ix = plain();
        ix.add(&[1], &["a"]).unwrap();
        assert!(ix.add(&[2, 2], &["b", "c"]).is_err());
        assert!(ix.add(&[2], &["b", "c"]).is_err());
        assert!(ix.add(&[MISSING], &["x"]).is_err());
        assert!(matches!(ix.remove(&[1, 9]), Err(Error::UnknownId(9))));
        assert!(ix.remove(&[1, 1]).is_err());
        assert_eq!(ix.ids(), vec![1]);
        assert_eq!(ix.total_len, 1);
        assert_consistent(&ix);
    }

    #[test]
    fn compaction_preserves_everything() {
        let mut ix = plain();
        let texts: Vec<String> = (0..200)
            .map(|i| format!("w{} w{} common", i % 7, i % 13))
            .collect();
        let ids: Vec<u64> = (0..200).collect();
        ix.add(&ids, &texts).unwrap();
        let victims: Vec<u64> = (0..200).filter(|i| i % 3 != 0).collect();
        for chunk in victims.chunks(9) {
            ix.remove(chunk).unwrap();
            assert_consistent(&ix);
        }
        // Compaction ran: no dead documents are left behind in bulk.
        assert!(ix.doc_ids.len() < 200);
        ix.compact();
        assert_eq!(ix.doc_ids.len(), ix.len());
        assert_consistent(&ix);
    }

    #[test]
    fn parallel_and_serial_analysis_agree() {
        let ix = Bm25Index::default();
        let texts: Vec<String> = (0..300)
            .map(|i| format!("Running dogs {i} the cats"))
            .collect();
        let par = ix.analyze_batch(&texts);
        let ser = ix.analyze_batch(&texts[..10]);
        for (a, b) in par.iter().zip(&ser) {
            assert_eq!(a.terms().collect::<Vec<_>>(), b.terms().collect::<Vec<_>>());
            assert_eq!(a.len, b.len);
        }
    }
}
