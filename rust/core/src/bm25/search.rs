//! Top-k retrieval: MaxScore (Turtle and Flood, 1995) over `docno`-sorted
//! postings, scored in windows as Lucene's `MaxScoreBulkScorer` does, with
//! exhaustive scoring kept beside it as the reference.
//!
//! Query terms are sorted by their score bound `ub`, ascending. Once the
//! heap holds `k` hits with lowest score `θ`, the longest prefix of terms
//! whose bounds sum below `θ` is *non-essential*: a document that has only
//! those terms cannot enter. The essential terms are scored term at a time
//! into an accumulator over a window of [`WINDOW`] document numbers; each
//! document they touched is then completed by probing the non-essential
//! lists (galloping search), highest bound first, until its bound falls
//! below `θ`. Frequent terms have small bounds, so they turn non-essential
//! first and their long lists are only probed.
//!
//! Results equal exhaustive scoring bit for bit: a document's score is
//! always the sum of its terms' contributions in one canonical order (highest
//! bound first), whatever path found it, and pruning compares bounds with a
//! relative slack that covers rounding, so it never drops a document that
//! would have entered. Ties are broken by id: hits are ordered by score,
//! descending, then id, ascending.

use std::collections::BinaryHeap;

use rayon::prelude::*;

use super::analyzer::Tokens;
use super::index::Bm25Index;
use super::scoring::TermScorer;
use crate::prefetch::prefetch;
use crate::worst::Worst;

/// Pruning treats bounds as `(1 + SLACK)` times larger than computed, far
/// more than the rounding error of summing `f32` contributions.
const SLACK: f32 = 1e-4;

/// Documents scored together, term at a time, by the essential terms.
const WINDOW: usize = 4096;

/// How many allowed documents ahead a filtered search asks for the reads
/// of the one it will score: enough misses in flight to overlap, few
/// enough lines to stay in the cache until their turn.
const AHEAD: usize = 16;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Hit {
    pub id: u64,
    pub score: f32,
}

/// A set of `docno`s that results are restricted to.
pub struct Filter {
    bits: Vec<u64>,
    docnos: Vec<u32>,
}

impl Filter {
    #[inline(always)]
    fn contains(&self, docno: u32) -> bool {
        let d = docno as usize;
        self.bits
            .get(d / 64)
            .is_some_and(|w| w & (1 << (d % 64)) != 0)
    }
}

struct QueryTerm {
    tid: u32,
    scorer: TermScorer,
    ub: f32,
}

/// A query text analysed against the index ([`Bm25Index::query`]): its
/// distinct indexed terms, with their multiplicity folded into the weight,
/// sorted by score bound. Analysed once, it serves a search, its ceiling and
/// the scores of other documents.
pub struct Query {
    terms: Vec<QueryTerm>,
}

impl Query {
    /// The score no document can reach: the sum of the terms' idf (Lucene's
    /// BM25 approaches idf per term as the term frequency grows). Terms no
    /// document holds count nothing, since no document can score on them. 0
    /// when no query term is indexed.
    pub fn ceiling(&self) -> f64 {
        self.terms
            .iter()
            .map(|t| f64::from(t.scorer.ceiling()))
            .sum()
    }
}

/// Keeps the best `k` hits; its top is the worst of them.
struct TopK {
    k: usize,
    heap: BinaryHeap<Worst<u64>>,
}

impl TopK {
    fn new(k: usize) -> Self {
        TopK {
            k,
            heap: BinaryHeap::with_capacity(k.min(1 << 16) + 1),
        }
    }

    fn offer(&mut self, hit: Hit) {
        let hit = Worst(hit.score, hit.id);
        if self.heap.len() < self.k {
            self.heap.push(hit);
        } else if let Some(mut top) = self.heap.peek_mut() {
            if hit < *top {
                *top = hit;
            }
        }
    }

    /// The score a document must reach to have a chance of entering.
    fn threshold(&self) -> f32 {
        match self.heap.peek() {
            Some(w) if self.heap.len() >= self.k => w.0,
            _ => f32::NEG_INFINITY,
        }
    }

    fn into_sorted(self) -> Vec<Hit> {
        self.heap
            .into_sorted_vec()
            .into_iter()
            .map(|Worst(score, id)| Hit { id, score })
            .collect()
    }
}

/// The first position at or after `pos` whose `docno` is `>= target`.
#[inline]
fn advance(docs: &[u32], pos: usize, target: u32) -> usize {
    if pos >= docs.len() || docs[pos] >= target {
        return pos;
    }
    // docs[lo] < target throughout; gallop, then bisect.
    let mut lo = pos;
    let mut step = 1;
    while lo + step < docs.len() && docs[lo + step] < target {
        lo += step;
        step *= 2;
    }
    let hi = (lo + step).min(docs.len());
    lo + 1 + docs[lo + 1..hi].partition_point(|&d| d < target)
}

impl Bm25Index {
    /// Maps ids to a filter; unknown ids are ignored.
    pub fn filter(&self, allowed: &[u64]) -> Filter {
        let mut bits = vec![0u64; self.doc_ids.len().div_ceil(64)];
        let mut docnos: Vec<u32> = allowed
            .iter()
            .filter_map(|id| self.slots.get(id).copied())
            .collect();
        docnos.sort_unstable();
        docnos.dedup();
        for &d in &docnos {
            bits[d as usize / 64] |= 1 << (d % 64);
        }
        Filter { bits, docnos }
    }

    /// The best `k` documents for `query`, best first (score descending, then
    /// id ascending); fewer when fewer documents match. A query with no
    /// indexed term gives no hits.
    pub fn search(&self, query: &str, k: usize, filter: Option<&Filter>) -> Vec<Hit> {
        self.search_query(&self.query(query), k, filter)
    }

    /// [`search`](Self::search) for a query analysed already.
    pub fn search_query(&self, query: &Query, k: usize, filter: Option<&Filter>) -> Vec<Hit> {
        let terms = &query.terms;
        if terms.is_empty() || k == 0 {
            return Vec::new();
        }
        match filter {
            Some(f) if self.prefer_forward(terms, f) => self.score_filtered(terms, k, f),
            _ => self.max_score(terms, k, filter, |_| true),
        }
    }

    /// [`search_query`](Self::search_query) among the documents whose id
    /// `keep` admits, for a restriction that leaves out few of them (the
    /// records a search skips): `keep` is asked only about documents that
    /// would enter the best `k` as found so far, so it costs what a
    /// search's hits cost, not what the index holds. The hits are those of
    /// a [`Filter`] of the documents `keep` admits.
    pub fn search_query_where(
        &self,
        query: &Query,
        k: usize,
        keep: impl Fn(u64) -> bool,
    ) -> Vec<Hit> {
        if query.terms.is_empty() || k == 0 {
            return Vec::new();
        }
        self.max_score(&query.terms, k, None, keep)
    }

    /// The score no document can reach for `query` ([`Query::ceiling`]).
    pub fn ceiling(&self, query: &str) -> f64 {
        self.query(query).ceiling()
    }

    /// [`search`](Self::search) for many queries in parallel.
    pub fn search_batch<S: AsRef<str> + Sync>(
        &self,
        queries: &[S],
        k: usize,
        filter: Option<&Filter>,
    ) -> Vec<Vec<Hit>> {
        crate::pool::install(|| {
            queries
                .par_iter()
                .map(|q| self.search(q.as_ref(), k, filter))
                .collect()
        })
    }

    /// Scores every matching document; the reference that [`search`](Self::search) equals.
    pub fn search_exhaustive(&self, query: &str, k: usize, filter: Option<&Filter>) -> Vec<Hit> {
        let terms = self.prepare(query);
        let mut acc = vec![0f32; self.doc_ids.len()];
        let mut seen = vec![false; self.doc_ids.len()];
        for t in terms.iter().rev() {
            let p = &self.postings[t.tid as usize];
            for (&d, &tf) in p.docs.iter().zip(&p.tfs) {
                if self.live[d as usize] && filter.is_none_or(|f| f.contains(d)) {
                    acc[d as usize] += t.scorer.score(tf, self.doc_lens[d as usize]);
                    seen[d as usize] = true;
                }
            }
        }
        let mut top = TopK::new(k);
        for (d, hit) in seen.iter().enumerate() {
            if *hit {
                top.offer(Hit {
                    id: self.doc_ids[d],
                    score: acc[d],
                });
            }
        }
        top.into_sorted()
    }

    /// `text` analysed against this index: see [`Query`].
    pub fn query(&self, text: &str) -> Query {
        Query {
            terms: self.prepare(text),
        }
    }

    /// The query's distinct indexed terms, with their multiplicity folded into
    /// the weight, sorted by score bound.
    fn prepare(&self, query: &str) -> Vec<QueryTerm> {
        let mut tokens = Tokens::default();
        self.analyzer.tokens(query, &mut tokens, None);
        let mut tids: Vec<u32> = tokens
            .iter()
            .filter_map(|t| self.vocab.get(t).copied())
            .collect();
        tids.sort_unstable();
        let stats = self.stats();
        let mut terms = Vec::new();
        for run in tids.chunk_by(|a, b| a == b) {
            let tid = run[0];
            let p = &self.postings[tid as usize];
            if p.df == 0 {
                continue;
            }
            let count = u32::try_from(run.len()).unwrap_or(u32::MAX);
            let scorer = TermScorer::new(self.params, stats, u64::from(p.df), count);
            let ub = scorer.upper_bound(p.max_tf, p.min_len);
            terms.push(QueryTerm { tid, scorer, ub });
        }
        terms.sort_by(|a, b| a.ub.total_cmp(&b.ub).then(a.tid.cmp(&b.tid)));
        terms
    }

    /// Whether scoring the allowed documents one by one, through their
    /// forward lists, beats walking the postings.
    fn prefer_forward(&self, terms: &[QueryTerm], filter: &Filter) -> bool {
        let postings: usize = terms
            .iter()
            .map(|t| self.postings[t.tid as usize].docs.len())
            .sum();
        let avg_terms = self.fwd_terms.len() / self.doc_ids.len().max(1) + 1;
        filter.docnos.len() * avg_terms < postings
    }

    fn score_filtered(&self, terms: &[QueryTerm], k: usize, filter: &Filter) -> Vec<Hit> {
        let by_tid = Self::by_tid(terms);
        let mut contrib = vec![0f32; terms.len()];
        let mut top = TopK::new(k);
        // The allowed documents lie scattered through the index (one agent's
        // among every agent's), each forward list behind two dependent reads:
        // while one document is scored, the start of the one AHEAD further on
        // is read (asked for AHEAD documents before) and the one 2 x AHEAD on
        // is asked for, so the misses overlap.
        let docs = &filter.docnos;
        docs.iter()
            .take(2 * AHEAD)
            .for_each(|&d| self.prefetch_head(d));
        docs.iter().take(AHEAD).for_each(|&d| self.prefetch_list(d));
        for (i, &d) in docs.iter().enumerate() {
            if let Some(&far) = docs.get(i + 2 * AHEAD) {
                self.prefetch_head(far);
            }
            if let Some(&near) = docs.get(i + AHEAD) {
                self.prefetch_list(near);
            }
            if let Some(score) = self.score_doc(terms, &by_tid, &mut contrib, d) {
                top.offer(Hit {
                    id: self.doc_ids[d as usize],
                    score,
                });
            }
        }
        top.into_sorted()
    }

    /// Asks for what scoring `docnos` through their forward lists reads. Each
    /// list sits behind two dependent reads (its start, then its terms): every
    /// first read is asked for before any second one, so that the misses of
    /// scattered documents overlap instead of following one another.
    fn prefetch_forward(&self, docnos: impl Iterator<Item = u32> + Clone) {
        docnos.clone().for_each(|d| self.prefetch_head(d));
        docnos.for_each(|d| self.prefetch_list(d));
    }

    /// Asks for document `d`'s first reads: where its forward list starts,
    /// whether it is live, its length.
    fn prefetch_head(&self, d: u32) {
        prefetch(self.fwd_start.as_ptr().wrapping_add(d as usize));
        prefetch(self.live.as_ptr().wrapping_add(d as usize));
        prefetch(self.doc_lens.as_ptr().wrapping_add(d as usize));
    }

    /// Asks for document `d`'s forward list (its terms and their counts);
    /// reads its start, so best after [`Self::prefetch_head`] has arrived.
    fn prefetch_list(&self, d: u32) {
        let start = self.fwd_start[d as usize];
        prefetch(self.fwd_terms.as_ptr().wrapping_add(start));
        prefetch(self.fwd_tfs.as_ptr().wrapping_add(start));
    }

    /// The scores of `query` for the documents `ids`, in order: 0 for a
    /// document no query term occurs in, or one the index does not hold.
    /// Reads each document's forward list, so it costs what the documents
    /// hold, not what the index holds.
    pub fn scores_of(&self, query: &Query, ids: &[u64]) -> Vec<f32> {
        let terms = &query.terms;
        let by_tid = Self::by_tid(terms);
        let mut contrib = vec![0f32; terms.len()];
        let docnos: Vec<Option<u32>> = ids.iter().map(|id| self.slots.get(id).copied()).collect();
        self.prefetch_forward(docnos.iter().flatten().copied());
        docnos
            .iter()
            .map(|d| {
                d.and_then(|d| self.score_doc(terms, &by_tid, &mut contrib, d))
                    .unwrap_or(0.0)
            })
            .collect()
    }

    /// The scores of `query` for joined texts: each group names up to three
    /// documents ([`super::MISSING`] for none), scored as one text whose term
    /// frequencies and length are the sums of theirs, its length counted per
    /// document ([`TermScorer::score_joined`]); idf and ceiling are the
    /// index's. 0 for a group where no query term occurs. Reads the
    /// documents' forward lists, so it costs what the groups hold.
    pub fn joined_scores_of(&self, query: &Query, groups: &[[u64; 3]]) -> Vec<f32> {
        let terms = &query.terms;
        let by_tid = Self::by_tid(terms);
        let mut tfs = vec![0u32; terms.len()];
        let mut contrib = vec![0f32; terms.len()];
        // A turn's neighbours are rarely in cache.
        let docnos: Vec<[Option<u32>; 3]> = groups
            .iter()
            .map(|g| g.map(|id| self.slots.get(&id).copied()))
            .collect();
        self.prefetch_forward(docnos.iter().flatten().flatten().copied());
        docnos
            .iter()
            .map(|group| {
                let (mut len, mut parts) = (0u32, 0u32);
                for &d in group.iter().flatten() {
                    let (doc_terms, doc_tfs) = self.forward(d);
                    len = len.saturating_add(self.doc_lens[d as usize]);
                    parts += 1;
                    let mut j = 0;
                    for &i in &by_tid {
                        j += doc_terms[j..].partition_point(|&t| t < terms[i].tid);
                        if doc_terms.get(j) == Some(&terms[i].tid) {
                            tfs[i] = tfs[i].saturating_add(doc_tfs[j]);
                        }
                    }
                }
                for (i, tf) in tfs.iter_mut().enumerate() {
                    if *tf > 0 {
                        contrib[i] = terms[i].scorer.score_joined(*tf, len, parts);
                        *tf = 0;
                    }
                }
                sum_and_clear(&mut contrib)
            })
            .collect()
    }

    /// Query positions sorted by term id, to merge with forward lists.
    fn by_tid(terms: &[QueryTerm]) -> Vec<usize> {
        let mut by_tid: Vec<usize> = (0..terms.len()).collect();
        by_tid.sort_unstable_by_key(|&i| terms[i].tid);
        by_tid
    }

    /// Document `d`'s score, through its forward list; `None` when it is dead
    /// or holds no query term. `contrib` is scratch space, left zeroed.
    fn score_doc(
        &self,
        terms: &[QueryTerm],
        by_tid: &[usize],
        contrib: &mut [f32],
        d: u32,
    ) -> Option<f32> {
        if !self.live[d as usize] {
            return None;
        }
        let (doc_terms, doc_tfs) = self.forward(d);
        let len = self.doc_lens[d as usize];
        let mut matched = false;
        let mut j = 0;
        for &i in by_tid {
            j += doc_terms[j..].partition_point(|&t| t < terms[i].tid);
            if doc_terms.get(j) == Some(&terms[i].tid) {
                contrib[i] = terms[i].scorer.score(doc_tfs[j], len);
                matched = true;
            }
        }
        // Summed in the canonical order, so every path gives the same float.
        matched.then(|| sum_and_clear(contrib))
    }

    /// MaxScore over the documents `filter` holds (all without one) and
    /// whose id `keep` admits. A document `keep` refuses is only left out of
    /// the best `k`: the bounds that prune come from those it admits, and
    /// the cursors it moves past stay valid for the documents after it, so
    /// the hits are those of a filter that never held it.
    fn max_score(
        &self,
        terms: &[QueryTerm],
        k: usize,
        filter: Option<&Filter>,
        keep: impl Fn(u64) -> bool,
    ) -> Vec<Hit> {
        let mut c = Cursors::new(self, terms);
        let n = terms.len();
        let mut acc = vec![0f32; WINDOW];
        // The length of each document the window's essential terms touched.
        let mut lens = vec![0u32; WINDOW];
        let mut seen = vec![0u64; WINDOW / 64];
        let mut top = TopK::new(k);
        let mut theta = f32::NEG_INFINITY;
        // Terms before `first` are non-essential.
        let mut first = 0;
        while first < n {
            // The next window starts at the smallest unread essential posting.
            let Some(lo) = (first..n).filter_map(|i| c.current(i)).min() else {
                break;
            };
            let hi = lo.saturating_add(WINDOW as u32);
            // Essential terms, highest bound first (the canonical order), term at a time.
            for i in (first..n).rev() {
                let (docs, tfs, doc_lens) = c.lists[i];
                let scorer = &terms[i].scorer;
                let mut p = c.pos[i];
                while let Some(&d) = docs.get(p) {
                    if d >= hi {
                        break;
                    }
                    let off = (d - lo) as usize;
                    acc[off] += scorer.score(tfs[p], doc_lens[p]);
                    lens[off] = doc_lens[p];
                    seen[off / 64] |= 1 << (off % 64);
                    p += 1;
                }
                c.pos[i] = p;
            }
            // Candidates in document order, completed with the terms that
            // were non-essential when the window started.
            let window_first = first;
            for (w, word) in seen.iter_mut().enumerate() {
                let mut bits = std::mem::take(word);
                while bits != 0 {
                    let off = w * 64 + bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    let score = std::mem::take(&mut acc[off]);
                    let d = lo + off as u32;
                    if !filter.is_none_or(|f| f.contains(d)) {
                        continue;
                    }
                    let Some(score) = c.complete(window_first, d, lens[off], score, theta) else {
                        continue;
                    };
                    // Most candidates fall short: decide on the score before
                    // reading whether the document lives, and its id (each a
                    // cache miss in a large index).
                    if score < top.threshold() || !self.live[d as usize] {
                        continue;
                    }
                    let id = self.doc_ids[d as usize];
                    if !keep(id) {
                        continue;
                    }
                    top.offer(Hit { id, score });
                    let t = top.threshold();
                    if t > theta {
                        theta = t;
                        while first < n && c.bound[first] < theta {
                            first += 1;
                        }
                    }
                }
            }
        }
        top.into_sorted()
    }
}

/// The query terms' posting lists, a read position in each, and the
/// cumulative score bounds that decide which terms are essential.
struct Cursors<'a> {
    terms: &'a [QueryTerm],
    /// Each term's postings: documents, term frequencies, document lengths.
    lists: Vec<(&'a [u32], &'a [u32], &'a [u32])>,
    pos: Vec<usize>,
    /// `bound[i]`: the most that terms `0..=i` together can add, with slack.
    bound: Vec<f32>,
}

impl<'a> Cursors<'a> {
    fn new(index: &'a Bm25Index, terms: &'a [QueryTerm]) -> Self {
        let lists = terms
            .iter()
            .map(|t| {
                let p = &index.postings[t.tid as usize];
                (p.docs.as_slice(), p.tfs.as_slice(), p.lens.as_slice())
            })
            .collect();
        let mut sum = 0f32;
        let bound = terms
            .iter()
            .map(|t| {
                sum += t.ub;
                sum * (1.0 + SLACK)
            })
            .collect();
        Cursors {
            terms,
            lists,
            pos: vec![0; terms.len()],
            bound,
        }
    }

    /// The `docno` under the cursor of term `i`, if any is left.
    fn current(&self, i: usize) -> Option<u32> {
        self.lists[i].0.get(self.pos[i]).copied()
    }

    /// Adds the non-essential terms `0..first` (highest bound first) to a
    /// candidate's essential score, or gives `None` once the bounds show it
    /// cannot reach `theta`.
    #[inline]
    fn complete(
        &mut self,
        first: usize,
        d: u32,
        len: u32,
        mut score: f32,
        theta: f32,
    ) -> Option<f32> {
        for i in (0..first).rev() {
            if score * (1.0 + SLACK) + self.bound[i] < theta {
                return None;
            }
            let (docs, tfs, _) = self.lists[i];
            let p = advance(docs, self.pos[i], d);
            self.pos[i] = p;
            if docs.get(p) == Some(&d) {
                score += self.terms[i].scorer.score(tfs[p], len);
            }
        }
        Some(score)
    }
}

/// Sums contributions in the canonical order, highest bound first, and
/// resets them.
#[inline]
fn sum_and_clear(contrib: &mut [f32]) -> f32 {
    let mut s = 0f32;
    for c in contrib.iter_mut().rev() {
        s += *c;
        *c = 0.0;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::super::analyzer::{AnalyzerConfig, Stopwords};
    use super::super::scoring::Bm25Params;
    use super::*;

    /// A tiny deterministic generator, so the tests need no extra crate.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }

        /// Zipf-like word choice: a few frequent words, a long tail.
        fn text(&mut self, vocab: u64, max_len: u64) -> String {
            let len = 1 + self.below(max_len);
            (0..len)
                .map(|_| {
                    let r = self.below(vocab * vocab);
                    format!("w{}", vocab - 1 - (r as f64).sqrt() as u64)
                })
                .collect::<Vec<_>>()
                .join(" ")
        }
    }

    fn plain() -> Bm25Index {
        Bm25Index::new(
            Bm25Params::default(),
            AnalyzerConfig {
                stopwords: Stopwords::None,
                stemming: false,
                ..AnalyzerConfig::default()
            },
        )
    }

    #[test]
    fn advance_finds_first_not_below() {
        let docs = [1, 3, 5, 7, 9, 11, 13, 15, 17];
        for pos in 0..docs.len() {
            for target in 0..20 {
                let want = pos + docs[pos..].iter().take_while(|&&d| d < target).count();
                assert_eq!(
                    advance(&docs, pos, target),
                    want,
                    "pos {pos} target {target}"
                );
            }
        }
    }

    #[test]
    fn max_score_equals_exhaustive() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for round in 0..20 {
            let mut ix = plain();
            let n = 50 + rng.below(400);
            let vocab = 5 + rng.below(60);
            let texts: Vec<String> = (0..n).map(|_| rng.text(vocab, 30)).collect();
            let ids: Vec<u64> = (0..n).map(|i| i * 7 + round).collect();
            ix.add(&ids, &texts).unwrap();
            // Churn: replace and remove some, so dead postings are around.
            let gone: Vec<u64> = ids.iter().copied().filter(|_| rng.below(5) == 0).collect();
            ix.remove(&gone).unwrap();
            let again: Vec<u64> = ids
                .iter()
                .copied()
                .filter(|id| !gone.contains(id) && rng.below(6) == 0)
                .collect();
            let again_texts: Vec<String> = again.iter().map(|_| rng.text(vocab, 30)).collect();
            ix.add(&again, &again_texts).unwrap();
            let allowed: Vec<u64> = ids.iter().copied().filter(|_| rng.below(3) == 0).collect();
            let filter = ix.filter(&allowed);
            for _ in 0..20 {
                let q = rng.text(vocab, 8);
                for k in [1, 3, 10, 1000] {
                    let fast = ix.search(&q, k, None);
                    assert_eq!(fast, ix.search_exhaustive(&q, k, None), "q={q} k={k}");
                    assert!(fast.len() <= k);
                    let fast = ix.search(&q, k, Some(&filter));
                    assert_eq!(fast, ix.search_exhaustive(&q, k, Some(&filter)));
                    assert!(fast.iter().all(|h| allowed.contains(&h.id)));
                    let by_postings = ix.max_score(&ix.prepare(&q), k, Some(&filter), |_| true);
                    let by_forward = ix.score_filtered(&ix.prepare(&q), k, &filter);
                    assert_eq!(by_postings, by_forward);
                    // The same documents asked about as met: the same hits.
                    let kept = ix.search_query_where(&ix.query(&q), k, |id| allowed.contains(&id));
                    assert_eq!(kept, by_postings, "q={q} k={k}");
                }
                // Scores of given documents equal the exhaustive ones (0 where
                // nothing matches, and for removed or unknown ids).
                let all = ix.search_exhaustive(&q, usize::MAX, None);
                let asked: Vec<u64> = ids.iter().copied().chain([u64::MAX - 1]).collect();
                for (id, score) in asked.iter().zip(ix.scores_of(&ix.query(&q), &asked)) {
                    let want = all.iter().find(|h| h.id == *id).map_or(0.0, |h| h.score);
                    assert_eq!(score, want, "q={q} id={id}");
                }
            }
        }
    }

    #[test]
    fn ceiling_bounds_every_score() {
        let mut rng = Rng(11);
        let mut ix = plain();
        let texts: Vec<String> = (0..300).map(|_| rng.text(40, 20)).collect();
        let ids: Vec<u64> = (0..300).collect();
        ix.add(&ids, &texts).unwrap();
        for _ in 0..50 {
            let q = rng.text(40, 6);
            let ceiling = ix.ceiling(&q);
            for h in ix.search(&q, 1000, None) {
                assert!(f64::from(h.score) < ceiling, "q={q}");
            }
        }
        // A document made of the query term many times approaches its idf.
        let mut ix = plain();
        let long = vec!["x"; 10_000].join(" ");
        ix.add(&[1, 2, 3], &[long.as_str(), "y", "y z"]).unwrap();
        let c = ix.ceiling("x");
        let best = f64::from(ix.search("x", 1, None)[0].score);
        assert!(best < c && best > 0.99 * c, "{best} vs {c}");
        assert_eq!(ix.ceiling("unknown words"), 0.0);
        assert!((ix.ceiling("x x") - 2.0 * c).abs() < 1e-6);
    }

    #[test]
    fn many_windows_equal_exhaustive() {
        let mut rng = Rng(7);
        let mut ix = plain();
        let n = 3 * WINDOW as u64 + 17;
        let texts: Vec<String> = (0..n).map(|_| rng.text(200, 12)).collect();
        let ids: Vec<u64> = (0..n).rev().collect();
        ix.add(&ids, &texts).unwrap();
        let gone: Vec<u64> = (0..n).filter(|i| i % 11 == 0).collect();
        ix.remove(&gone).unwrap();
        let filter = ix.filter(&(0..n).filter(|i| i % 3 == 0).collect::<Vec<_>>());
        for _ in 0..40 {
            let q = rng.text(200, 10);
            for k in [1, 10, 100] {
                assert_eq!(ix.search(&q, k, None), ix.search_exhaustive(&q, k, None));
                assert_eq!(
                    ix.max_score(&ix.prepare(&q), k, Some(&filter), |_| true),
                    ix.search_exhaustive(&q, k, Some(&filter))
                );
            }
        }
    }

    #[test]
    fn ties_break_by_id_and_order_is_best_first() {
        let mut ix = plain();
        ix.add(&[5, 3, 9, 1], &["x y", "x y", "x y", "x"]).unwrap();
        let hits = ix.search("x y", 10, None);
        let ids: Vec<u64> = hits.iter().map(|h| h.id).collect();
        assert_eq!(ids, vec![3, 5, 9, 1]);
        assert!(hits.windows(2).all(|w| w[0].score >= w[1].score));
        assert_eq!(ix.search("x y", 2, None).len(), 2);
        assert_eq!(ix.search("x y", 2, None)[1].id, 5);
    }

    #[test]
    fn empty_and_unknown_queries_give_nothing() {
        let mut ix = Bm25Index::default();
        assert!(ix.search("anything", 10, None).is_empty());
        ix.add(&[1], &["some text"]).unwrap();
        assert!(ix.search("", 10, None).is_empty());
        assert!(ix.search("the of and", 10, None).is_empty());
        assert!(ix.search("unseen", 10, None).is_empty());
        assert!(ix.search("text", 0, None).is_empty());
        assert!(ix.search("text", 5, Some(&ix.filter(&[2]))).is_empty());
    }

    #[test]
    fn batch_equals_single() {
        let mut ix = plain();
        let mut rng = Rng(42);
        let texts: Vec<String> = (0..300).map(|_| rng.text(40, 20)).collect();
        let ids: Vec<u64> = (0..300).collect();
        ix.add(&ids, &texts).unwrap();
        let queries: Vec<String> = (0..50).map(|_| rng.text(40, 5)).collect();
        let batch = ix.search_batch(&queries, 7, None);
        for (q, hits) in queries.iter().zip(batch) {
            assert_eq!(hits, ix.search(q, 7, None));
        }
    }
}
