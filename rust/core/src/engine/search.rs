//! The query path: filter to a candidate set, retrieve from BM25 and from the
//! vectors (graph and parked), fuse, score, cut, and record the access.
//!
//! Relevance by mode: `text` is BM25 divided by the query's ceiling (the
//! score no document can reach); `vector` is the cosine similarity clamped to
//! [0, 1]; `hybrid` fuses the two lists by [`Fusion`]. The final score is the
//! relevance times [`Weights::boost`] (see [`scoring`]).

mod ahead;

use std::sync::Arc;

pub use ahead::TextAhead;

use rustc_hash::FxHashMap;

use super::admission::Admission;
use super::mode::Mode;
use super::pending::normalised;
use super::records::Held;
use super::retrievals::{Key, MAX_CANDIDATES};
use super::speakers::SpeakerQuery;
use super::when;
use super::{Engine, Filter};
use crate::bm25::Query;
use crate::error::{Error, Result};
use crate::fusion::{self, Fusion};
use crate::hnsw::Allowed;
use crate::mmr;
use crate::scoring::{self, Weights};

pub struct SearchRequest<'a> {
    pub text: Option<&'a str>,
    pub vector: Option<&'a [f32]>,
    pub mode: Mode,
    pub filter: Option<&'a Filter>,
    pub k: usize,
    /// How many hits each retriever contributes before fusion.
    pub candidates: usize,
    /// The same in a store of conversation turns, whose speaker and session passes
    /// rescore the candidates ([`super::options::TURN_CANDIDATES`]).
    pub turn_candidates: usize,
    pub fusion: Fusion,
    /// The share of BM25 that a turn of a session takes from its context
    /// ([`fusion::contextual`]).
    pub context_weight: f64,
    /// The share of the gap to the cosine of the turn before that a turn
    /// answering it takes ([`fusion::DEFAULT_ANSWER_WEIGHT`]).
    pub answer_weight: f64,
    /// The share of its relevance a memory that is all questions loses
    /// ([`fusion::DEFAULT_QUESTION_WEIGHT`]).
    pub question_weight: f64,
    /// What a speaker the query names is worth to its turns, as a share of
    /// the BM25 ceiling ([`fusion::speaker`]).
    pub speaker_weight: f64,
    /// What a date the query names is worth to the candidates created near it
    /// ([`fusion::dated`]).
    pub date_weight: f64,
    /// The intervals `[start, end)` (unix seconds) of the dates the query's
    /// text names (the caller reads them: `memlane._memory.dates`).
    pub dates: &'a [(f64, f64)],
    /// What a candidate that tells a time is worth when the query asks when
    /// ([`super::when`]).
    pub when_weight: f64,
    pub weights: Weights,
    /// λ of the recency signal, per hour ([`scoring::rate`]).
    pub rate: f64,
    /// Ages count from `now` (the clock) instead of from the newest candidate: what an
    /// explicit decay rate asks for ([`scoring::AgeFrom`]).
    pub age_from: scoring::AgeFrom,
    /// Unix seconds: the time of the access recorded by `touch`.
    pub now: f64,
    /// Minimum final score.
    pub threshold: Option<f64>,
    /// Minimum cosine similarity.
    pub min_similarity: Option<f64>,
    pub explain: bool,
    /// Record an access of the returned hits at `now`.
    pub touch: bool,
    /// Leave out superseded records (those with a `valid_to`).
    pub current_only: bool,
    /// λ of maximal marginal relevance over the scored candidates ([`mmr`]; 0: the
    /// hits in score order).
    pub diversity: f64,
}

impl<'a> SearchRequest<'a> {
    /// A request for the `k` best of `mode` by `text` and `vector`, every other
    /// option at its plainest: no filter, 50 candidates a retriever, the
    /// default fusion and pass weights, the default score weights with no
    /// decay, ages from the newest candidate, no cut-off, no explain, no
    /// access recorded, superseded records kept, no diversity. Callers set
    /// what they are about on it (`SearchRequest { k: 3, ..new(...) }`).
    pub fn new(text: Option<&'a str>, vector: Option<&'a [f32]>, mode: Mode, k: usize) -> Self {
        SearchRequest {
            text,
            vector,
            mode,
            filter: None,
            k,
            candidates: 50,
            turn_candidates: 50,
            fusion: crate::fusion::Fusion::default(),
            context_weight: crate::fusion::DEFAULT_CONTEXT_WEIGHT,
            answer_weight: crate::fusion::DEFAULT_ANSWER_WEIGHT,
            question_weight: crate::fusion::DEFAULT_QUESTION_WEIGHT,
            speaker_weight: crate::fusion::DEFAULT_SPEAKER_WEIGHT,
            date_weight: crate::fusion::DEFAULT_DATE_WEIGHT,
            dates: &[],
            when_weight: crate::fusion::DEFAULT_WHEN_WEIGHT,
            weights: Weights::default(),
            rate: 0.0,
            age_from: scoring::AgeFrom::NewestCandidate,
            now: 0.0,
            threshold: None,
            min_similarity: None,
            explain: false,
            touch: false,
            current_only: false,
            diversity: 0.0,
        }
    }
}

/// Records a hybrid search must look through (all, or the filter's
/// selection) from which its two retrievers run at once, BM25 on a pool
/// thread: below it, handing the postings over costs more than running the
/// two side by side saves (benches/README.md, "Both retrievers at once").
/// The unit tests' stores are small, so there every hybrid search runs them
/// at once (the Python tests' searches run them one after the other).
const PARALLEL_MIN: usize = if cfg!(test) { 1 } else { 250_000 };

/// Every signal behind one hit's score.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Signals {
    pub bm25: Option<f32>,
    /// BM25 of the hit's turn with its previous and next turn of its session,
    /// if it has a `session_id` and the search computed it.
    pub bm25_context: Option<f32>,
    /// Whether the query names the hit's speaker, if the store has speakers
    /// and the search looked.
    pub bm25_speaker: Option<bool>,
    /// Whether the hit was created in or near a date the query names, if the
    /// search's date pass applied (some candidate was: [`fusion::dated`]).
    pub date: Option<bool>,
    /// Whether the hit's text tells a time, if the query asks when and the
    /// search's when pass applied (some candidate tells one: [`super::when`]).
    pub when: Option<bool>,
    /// 1-based rank in the BM25 list, if the hit was in it.
    pub bm25_rank: Option<u32>,
    pub cosine: Option<f32>,
    /// The best cosine of the hit's previous and next turn of its session,
    /// if it has a `session_id` and the search computed it.
    pub cosine_context: Option<f32>,
    /// The cosine of the turn before the hit, if the hit answers it (it asks
    /// nothing, and that turn asks: [`super::records::question_share`]) and the
    /// search computed it.
    pub cosine_asked: Option<f32>,
    pub vector_rank: Option<u32>,
    /// How much of the hit's text asks, in [0, 1], if the search weighed it
    /// (weighted fusion of a hybrid search with a question weight).
    pub question: Option<f64>,
    /// Fused relevance in [0, 1].
    pub relevance: f64,
    pub importance: f64,
    pub recency: f64,
    /// Hours from the last access to the newest candidate's (to `now` with
    /// [`scoring::AgeFrom::Clock`]).
    pub age_hours: f64,
    /// The factor applied to the relevance.
    pub boost: f64,
    pub score: f64,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Hits {
    pub ids: Vec<u64>,
    pub scores: Vec<f64>,
    /// One per hit when the request asked to explain, else empty.
    pub signals: Vec<Signals>,
}

/// What a query retrieved, before scoring (see [`super::retrievals`]).
pub(super) struct Retrieved {
    /// Candidates in the order first seen: the BM25 list, then the vector list.
    order: Vec<u64>,
    cands: FxHashMap<u64, Cand>,
    text_found: bool,
    vector_found: bool,
    /// The query text's BM25 ceiling (0 without BM25 hits).
    ceiling: f64,
    /// Whether the query names the speaker of a candidate.
    named: bool,
    /// The clock times for which the turns' neighbours it read hold (it is
    /// retrieved again at another time).
    held: Held,
}

#[derive(Clone, Copy, Default)]
struct Cand {
    bm25: Option<f32>,
    bm25_context: Option<f32>,
    bm25_speaker: Option<bool>,
    bm25_rank: Option<u32>,
    cosine: Option<f32>,
    cosine_context: Option<f32>,
    cosine_asked: Option<f32>,
    vector_rank: Option<u32>,
}

/// The pools of a request: of a search of records that are no turns, and of
/// one whose admitted records hold turns.
pub(super) fn pools(req: &SearchRequest<'_>) -> (usize, usize) {
    (req.candidates.max(req.k), req.turn_candidates.max(req.k))
}

impl Engine {
    /// One query. The request's knobs were checked where they were given
    /// ([`super::SearchOptions::new`]); `now` is the caller's clock.
    pub fn search(&self, req: &SearchRequest<'_>) -> Result<Hits> {
        self.search_with(req, None)
    }

    /// [`Self::search`], taking its BM25 list from `ahead` where that was
    /// retrieved for this request with the engine as it is now.
    pub fn search_with(&self, req: &SearchRequest<'_>, ahead: Option<TextAhead>) -> Result<Hits> {
        if !req.now.is_finite() {
            return Err(Error::invalid("now must be a finite time"));
        }
        let query = match (req.vector, self.dim()) {
            (Some(_), None) => {
                return Err(Error::invalid(
                    "this store has no vector space (it was created without an embedder)",
                ))
            }
            (Some(v), Some(dim)) => {
                if v.len() != dim {
                    return Err(Error::DimensionMismatch {
                        expected: dim,
                        got: v.len(),
                    });
                }
                Some(normalised(v, dim, "query vector")?)
            }
            (None, _) => None,
        };
        if req.mode == Mode::Vector && query.is_none() {
            return Err(Error::invalid("vector search needs a query vector"));
        }
        if req.min_similarity.is_some() && query.is_none() {
            return Err(Error::invalid("min_similarity needs a query vector"));
        }
        let text = req.text.filter(|t| !t.trim().is_empty());
        if req.mode == Mode::Text && text.is_none() {
            return Err(Error::invalid("query must not be empty"));
        }
        let weighted = matches!(req.fusion, Fusion::Weighted { .. } | Fusion::Adaptive)
            && req.mode == Mode::Hybrid;
        // The contextual BM25 and the speakers are scored where BM25's
        // scores count (weighted fusion, text alone) or are shown.
        let bm25_counts = weighted || req.mode == Mode::Text;
        let fills = (
            query.is_some() && (weighted || req.explain || req.min_similarity.is_some()),
            text.is_some() && (weighted || req.explain),
            text.is_some()
                && (req.explain
                    || (req.context_weight > 0.0 && bm25_counts)
                    || (req.answer_weight > 0.0 && weighted)),
            text.is_some()
                && !self.records.speakers.is_empty()
                && (req.explain || (req.speaker_weight > 0.0 && bm25_counts)),
        );
        let pools = pools(req);
        let ahead = ahead.filter(|a| a.holds(self, req, text, pools));
        let key = (!req.filter.is_some_and(Filter::reads_access)).then(|| {
            Key::new(
                text,
                req.vector,
                req.mode,
                req.filter,
                pools,
                req.current_only,
                fills,
            )
        });
        let cached = key.as_ref().and_then(|k| self.retrievals.get(k));
        let retrieved = match cached.filter(|found| found.held.at(req.now)) {
            Some(found) => found,
            None => {
                let Some(found) =
                    self.retrieve(req, query.as_deref(), text, pools, fills, ahead)?
                else {
                    return Ok(Hits::default());
                };
                let found = Arc::new(found);
                if let Some(key) = key.filter(|_| found.order.len() <= MAX_CANDIDATES) {
                    self.retrievals.put(key, Arc::clone(&found));
                }
                found
            }
        };
        Ok(self.score(req, query.is_some(), &retrieved))
    }

    /// The candidates of both retrievers with their signals (`fills`: which
    /// signals to complete for every candidate: cosine, BM25, the contextual
    /// BM25 of turns), or None when the filter selects nothing; the BM25 list
    /// `ahead`'s when given (it holds for this request).
    fn retrieve(
        &self,
        req: &SearchRequest<'_>,
        query: Option<&[f32]>,
        text: Option<&str>,
        pools: (usize, usize),
        fills: (bool, bool, bool, bool),
        ahead: Option<TextAhead>,
    ) -> Result<Option<Retrieved>> {
        // The records admitted, shared by both retrievers (see `admission`;
        // the depth only decides how they are listed, not which they are).
        let vectors = query.is_some() && req.mode != Mode::Text;
        let admitted = self.admission(req.filter, req.current_only, pools.0.max(pools.1), vectors);
        if let Admission::Only { ids, .. } = &admitted {
            if ids.is_empty() {
                return Ok(None);
            }
        }
        let (pool, speakers) = self.pool_of(&admitted, pools);
        let fills = (fills.0, fills.1, fills.2, fills.3 && speakers);
        let admits = |id: u64| admitted.admits(&self.records, id);

        // The query text is analysed once, for the BM25 list, its ceiling and
        // the scores of the vector list's hits.
        let (analysed, text_ahead) = match ahead {
            Some(a) => (Some(a.analysed), Some(a.hits)),
            None => (
                text.filter(|_| req.mode != Mode::Vector || fills.1 || fills.2)
                    .map(|t| self.bm25.query(t)),
                None,
            ),
        };
        let text_part = || match &analysed {
            Some(q) if req.mode != Mode::Vector => self.text_list(q, pool, &admitted),
            _ => Ok(Vec::new()),
        };
        let vector_part = || match query {
            Some(q) if vectors => match &admitted {
                Admission::All { closed } => self.current_hits(
                    pool,
                    *closed,
                    |n| self.vector_candidates(q, n, None, None),
                    |h| h.0,
                ),
                Admission::Only { selection, ids } => {
                    self.vector_candidates(q, pool, Some(ids), Some(selection))
                }
                Admission::Except { .. } | Admission::Check { .. } => {
                    let skips = admitted.skips(&self.records);
                    self.vectors_where(q, pool, skips.then_some(&admits))
                }
            },
            _ => Ok(Vec::new()),
        };
        let both = analysed.is_some() && query.is_some() && req.mode == Mode::Hybrid;
        let searched = match &admitted {
            Admission::Only { ids, .. } => ids.len(),
            _ => self.len(),
        };
        // The postings scored on a pool thread while this one walks the graph,
        // with the search space this thread's earlier walks made.
        let mut text_hits = None;
        let vector_hits = if let Some(hits) = text_ahead {
            text_hits = Some(Ok(hits));
            Some(vector_part())
        } else if both && searched >= PARALLEL_MIN {
            crate::pool::in_place_scope(|s| {
                s.spawn(|_| text_hits = Some(text_part()));
                vector_part()
            })
        } else {
            None
        };
        let (text_hits, vector_hits) = match vector_hits {
            Some(v) => (text_hits.expect("the scope waits for what it spawned"), v),
            None => (text_part(), vector_part()),
        };
        let (text_hits, vector_hits) = (text_hits?, vector_hits?);

        let mut order: Vec<u64> = Vec::with_capacity(text_hits.len() + vector_hits.len());
        let mut cands: FxHashMap<u64, Cand> = FxHashMap::default();
        for (rank, h) in text_hits.iter().enumerate() {
            let c = cands.entry(h.id).or_insert_with(|| {
                order.push(h.id);
                Cand::default()
            });
            c.bm25 = Some(h.score);
            c.bm25_rank = Some(rank as u32 + 1);
        }
        for (rank, &(id, cos)) in vector_hits.iter().enumerate() {
            let c = cands.entry(id).or_insert_with(|| {
                order.push(id);
                Cand::default()
            });
            c.cosine = Some(cos);
            c.vector_rank = Some(rank as u32 + 1);
        }
        if let (Some(q), true) = (query, fills.0) {
            self.fill_cosines(q, &order, &mut cands)?;
        }
        if let (Some(q), true) = (&analysed, fills.1) {
            self.fill_bm25(q, &order, &mut cands);
        }
        let held = match (&analysed, fills.2) {
            (Some(q), true) => {
                self.fill_context(q, query, &order, &mut cands, req.now, &admitted)?
            }
            _ => Held::default(),
        };
        let named = match text {
            Some(t) if fills.3 => self.fill_speakers(t, &order, &mut cands),
            _ => false,
        };
        let ceiling = match &analysed {
            Some(q) if !text_hits.is_empty() => q.ceiling(),
            _ => 0.0,
        };
        Ok(Some(Retrieved {
            order,
            cands,
            text_found: !text_hits.is_empty(),
            vector_found: !vector_hits.is_empty(),
            ceiling,
            named,
            held,
        }))
    }

    /// The pool each retriever fills for the records `admitted`, and whether
    /// they hold turns with speakers. Turns are searched deeper, and their
    /// speakers weighed, where the records admitted hold them (not where any
    /// scope of the store does).
    pub(super) fn pool_of(&self, admitted: &Admission, pools: (usize, usize)) -> (usize, bool) {
        let (sessions, speakers) = admitted.turns(&self.records);
        let pool = if sessions || speakers {
            pools.1
        } else {
            pools.0
        };
        (pool, speakers)
    }

    /// The BM25 list of `query`'s `pool` best among the records `admitted`.
    pub(super) fn text_list(
        &self,
        query: &Query,
        pool: usize,
        admitted: &Admission,
    ) -> Result<Vec<crate::bm25::Hit>> {
        match admitted {
            Admission::All { closed } => self.current_hits(
                pool,
                *closed,
                |n| Ok(self.bm25.search_query(query, n, None)),
                |h| h.id,
            ),
            Admission::Only { ids, .. } => {
                Ok(self
                    .bm25
                    .search_query(query, pool, Some(&self.bm25.filter(ids))))
            }
            Admission::Except { .. } | Admission::Check { .. } => {
                Ok(self
                    .bm25
                    .search_query_where(query, pool, |id| admitted.admits(&self.records, id)))
            }
        }
    }

    /// Scores what a query retrieved, cuts to `k` and records the access.
    fn score(&self, req: &SearchRequest<'_>, has_query: bool, found: &Retrieved) -> Hits {
        let ceiling = found.ceiling;
        let lists = usize::from(found.text_found) + usize::from(found.vector_found);
        let cos_of = |c: &Cand| fusion::cosine_relevance(c.cosine.map_or(0.0, f64::from));
        // Weighted fusion's cosine: a turn's takes `context_weight` from its
        // neighbours' where theirs is higher (the answer to a question often
        // says little of it: "Yes, last May!"), as its BM25 takes from theirs,
        // and a turn that answers the one before takes `answer_weight` of it.
        let fused_cos_of = |c: &Cand| match c.cosine_context {
            Some(context) => fusion::cosine_relevance(fusion::lent_cosine(
                c.cosine.map_or(0.0, f64::from),
                f64::from(context),
                c.cosine_asked.map(f64::from),
                req.context_weight,
                req.answer_weight,
            )),
            None => cos_of(c),
        };
        let bm_of = |c: &Cand| {
            let own = c.bm25.map_or(0.0, f64::from);
            let score = match c.bm25_context {
                Some(context) => fusion::contextual(own, f64::from(context), req.context_weight),
                None => own,
            };
            let share = fusion::bm25_relevance(score, ceiling);
            fusion::speaker(
                share,
                found.named,
                c.bm25_speaker == Some(true),
                req.speaker_weight,
            )
        };
        // Adaptive fusion's weight, from every candidate retrieved (those
        // `min_similarity` drops below included: a cut does not reweigh the rest).
        let alpha = match req.fusion {
            Fusion::Weighted { alpha } => alpha,
            Fusion::Adaptive if req.mode == Mode::Hybrid && has_query && found.text_found => {
                let (mut cos, mut bm): (Vec<f64>, Vec<f64>) = found
                    .cands
                    .values()
                    .map(|c| (fused_cos_of(c), bm_of(c)))
                    .unzip();
                fusion::adaptive_alpha(fusion::spread(&mut cos), fusion::spread(&mut bm))
            }
            _ => fusion::DEFAULT_ALPHA, // one list at most: weighted() ignores it
        };
        let relevance = |c: &Cand| -> f64 {
            let cos = || cos_of(c);
            let bm = || bm_of(c);
            match (req.mode, req.fusion) {
                (Mode::Text, _) => bm(),
                (Mode::Vector, _) => cos(),
                (Mode::Hybrid, Fusion::Rrf { k }) => {
                    fusion::rrf(&[c.bm25_rank, c.vector_rank], k, lists)
                }
                (Mode::Hybrid, Fusion::Weighted { .. } | Fusion::Adaptive) => fusion::weighted(
                    has_query.then(|| fused_cos_of(c)),
                    found.text_found.then(bm),
                    alpha,
                ),
            }
        };

        let r = &self.records;
        let mut pool: Vec<(u64, u32, &Cand)> = Vec::with_capacity(found.order.len());
        for &id in &found.order {
            let (Some(c), Some(slot)) = (found.cands.get(&id), r.slot(id)) else {
                continue;
            };
            if let Some(min) = req.min_similarity {
                if c.cosine.is_none_or(|cos| f64::from(cos) < min) {
                    continue;
                }
            }
            r.prefetch_scoring(slot);
            pool.push((id, slot, c));
        }
        let newest = match req.age_from {
            scoring::AgeFrom::Clock => req.now,
            scoring::AgeFrom::NewestCandidate => pool
                .iter()
                .map(|&(_, slot, _)| r.accessed_at(slot))
                .fold(f64::NEG_INFINITY, f64::max),
        };
        // The date pass: a candidate's creation time against the dates the
        // query names, a compare per candidate and date.
        let near: Vec<bool> = if req.date_weight > 0.0 && !req.dates.is_empty() {
            pool.iter()
                .map(|&(_, slot, _)| fusion::near_date(r.created_at[slot as usize], req.dates))
                .collect()
        } else {
            Vec::new()
        };
        let dated = near.contains(&true);
        // The when pass: a question that asks when, against each candidate's terms.
        let tells: Vec<bool> = match req.text {
            Some(t) if req.when_weight > 0.0 && when::asks_when(t) => {
                let terms = when::TimeTerms::of(&self.bm25, &self.time_words);
                if terms.is_empty() {
                    Vec::new()
                } else {
                    pool.iter().map(|&(id, _, _)| terms.told(id)).collect()
                }
            }
            _ => Vec::new(),
        };
        let told = tells.contains(&true);
        // A memory that asks seldom holds the answer.
        let weighs_questions = req.question_weight > 0.0
            && req.mode == Mode::Hybrid
            && matches!(req.fusion, Fusion::Weighted { .. } | Fusion::Adaptive);
        let mut scored: Vec<(u64, Signals)> = Vec::with_capacity(pool.len());
        for (j, (id, slot, c)) in pool.into_iter().enumerate() {
            let s = slot as usize;
            let age_hours = scoring::age_hours(newest, r.accessed_at(slot));
            let recency = scoring::recency(req.rate, age_hours, r.evergreen[s]);
            let importance = f64::from(r.importance[s]);
            let date = dated.then(|| near[j]);
            let relevance = fusion::dated(relevance(c), dated, date == Some(true), req.date_weight);
            let when = told.then(|| tells[j]);
            let relevance = fusion::dated(relevance, told, when == Some(true), req.when_weight);
            let question = weighs_questions.then(|| r.question(slot));
            let relevance = question.map_or(relevance, |asked| {
                fusion::questioned(relevance, asked, req.question_weight)
            });
            let boost = req.weights.boost(importance, recency);
            let score = relevance * boost;
            if req.threshold.is_some_and(|t| score < t) {
                continue;
            }
            scored.push((
                id,
                Signals {
                    bm25: c.bm25,
                    bm25_context: c.bm25_context,
                    bm25_speaker: c.bm25_speaker,
                    date,
                    when,
                    bm25_rank: c.bm25_rank,
                    cosine: c.cosine,
                    cosine_context: c.cosine_context,
                    cosine_asked: c.cosine_asked,
                    vector_rank: c.vector_rank,
                    question,
                    relevance,
                    importance,
                    recency,
                    age_hours,
                    boost,
                    score,
                },
            ));
        }
        // Equal scores go to the nearer hit: every cosine at or below 0 is relevance
        // 0, and a store with fewer than `k` related records must still rank the rest
        // by what the retrievers saw, not by id.
        let seen = |s: &Signals| {
            let or_least = |x: Option<f32>| x.unwrap_or(f32::NEG_INFINITY);
            (or_least(s.cosine), or_least(s.bm25))
        };
        scored.sort_unstable_by(|a, b| {
            let (ac, ab) = seen(&a.1);
            let (bc, bb) = seen(&b.1);
            (b.1.score.total_cmp(&a.1.score))
                .then(bc.total_cmp(&ac))
                .then(bb.total_cmp(&ab))
                .then(a.0.cmp(&b.0))
        });
        if req.diversity > 0.0 && scored.len() > 1 {
            let ids: Vec<u64> = scored.iter().map(|(id, _)| *id).collect();
            let scores: Vec<f64> = scored.iter().map(|(_, s)| s.score).collect();
            scored = self
                .diverse(&ids, &scores, req.k, req.diversity)
                .into_iter()
                .map(|i| scored[i])
                .collect();
        } else {
            scored.truncate(req.k);
        }

        if req.touch {
            for (id, _) in &scored {
                if let Some(slot) = r.slot(*id) {
                    r.record_access(slot, req.now);
                }
            }
        }
        Hits {
            ids: scored.iter().map(|(id, _)| *id).collect(),
            scores: scored.iter().map(|(_, s)| s.score).collect(),
            signals: if req.explain {
                scored.into_iter().map(|(_, s)| s).collect()
            } else {
                Vec::new()
            },
        }
    }

    /// The positions of `k` of the candidates `ids` (scored `scores`, best
    /// first) in MMR order ([`mmr::select`]): compared by the vectors the
    /// engine holds, or by their analysed terms where one has none.
    fn diverse(&self, ids: &[u64], scores: &[f64], k: usize, lambda: f64) -> Vec<usize> {
        let vectors: Vec<Option<Vec<f32>>> = ids.iter().map(|&id| self.vector(id)).collect();
        let items: Vec<mmr::Item<'_>> = ids
            .iter()
            .zip(&vectors)
            .map(|(&id, v)| mmr::Item {
                vector: v.as_deref(),
                terms: self.bm25.terms_of(id),
            })
            .collect();
        mmr::select(scores, k, lambda, |a, b| {
            mmr::similarity(&items[a], &items[b])
        })
    }

    /// A retriever's `pool` best hits among current records, `closed` of its
    /// records being superseded: it is asked for `pool` hits plus as many as
    /// could be superseded among them (at most `pool`), and again for `pool +
    /// closed` only when too many of those were, so a few superseded records
    /// cost a search little more than none.
    fn current_hits<T>(
        &self,
        pool: usize,
        closed: usize,
        fetch: impl Fn(usize) -> Result<Vec<T>>,
        id: impl Fn(&T) -> u64,
    ) -> Result<Vec<T>> {
        if closed == 0 {
            return fetch(pool);
        }
        let mut want = pool + closed.min(pool);
        loop {
            let mut hits = fetch(want)?;
            let full = hits.len() >= want;
            hits.retain(|h| {
                !self
                    .records
                    .slot(id(h))
                    .is_some_and(|s| self.records.is_closed(s))
            });
            if hits.len() >= pool || !full || want >= pool + closed {
                hits.truncate(pool);
                return Ok(hits);
            }
            want = pool + closed;
        }
    }

    /// The `pool` nearest vectors (graph and parked) among the allowed ones,
    /// as (id, cosine similarity), best first.
    pub(super) fn vector_candidates(
        &self,
        q: &[f32],
        pool: usize,
        allowed_ids: Option<&[u64]>,
        selection: Option<&super::Selection>,
    ) -> Result<Vec<(u64, f32)>> {
        let allowed = self
            .hnsw
            .as_ref()
            .zip(allowed_ids)
            .map(|(h, ids)| h.allowed(ids));
        self.nearest_vectors(q, pool, allowed.as_ref(), selection)
    }

    /// [`Self::vector_candidates`] with the graph's admitted set built already
    /// (`None`: all of it); `selection` restricts the parked vectors.
    pub(super) fn nearest_vectors(
        &self,
        q: &[f32],
        pool: usize,
        allowed: Option<&Allowed>,
        selection: Option<&super::Selection>,
    ) -> Result<Vec<(u64, f32)>> {
        self.nearest_of(
            q,
            pool,
            |hnsw| match allowed {
                Some(a) if a.is_empty() => Ok(Vec::new()),
                _ => hnsw.search(q, pool, None, allowed),
            },
            |id| {
                selection.is_none_or(|sel| {
                    self.records
                        .slot(id)
                        .is_some_and(|s| sel.slots.binary_search(&s).is_ok())
                })
            },
        )
    }

    /// The `pool` nearest vectors (graph and parked) among the records
    /// `admits` admits (`None`: all), as (id, cosine similarity), best first:
    /// the graph asks only about the nodes its search reaches.
    fn vectors_where(
        &self,
        q: &[f32],
        pool: usize,
        admits: Option<&(dyn Fn(u64) -> bool + Sync)>,
    ) -> Result<Vec<(u64, f32)>> {
        self.nearest_of(
            q,
            pool,
            |hnsw| match admits {
                Some(admits) => hnsw.search_where(q, pool, None, admits),
                None => hnsw.search(q, pool, None, None),
            },
            |id| admits.is_none_or(|admits| admits(id)),
        )
    }

    /// The `pool` nearest of the graph's hits (`graph`) and of the parked
    /// vectors `parked` admits, as (id, cosine similarity), best first.
    fn nearest_of(
        &self,
        q: &[f32],
        pool: usize,
        graph: impl FnOnce(&crate::hnsw::Hnsw) -> Result<Vec<crate::hnsw::Neighbor>>,
        parked: impl Fn(u64) -> bool,
    ) -> Result<Vec<(u64, f32)>> {
        let mut hits: Vec<(u64, f32)> = Vec::new();
        if let Some(hnsw) = self.hnsw.as_ref().filter(|h| !h.is_empty()) {
            for n in graph(hnsw)? {
                // Reduced-precision distances can put a vector's
                // similarity to itself a hair above 1.
                hits.push((n.id, (1.0 - n.distance).clamp(-1.0, 1.0)));
            }
        }
        if !self.pending.is_empty() {
            hits.extend(self.pending.scan(q, pool, parked));
        }
        // Ties go to the smaller id, not to the graph's slot order, which
        // differs between processes that built the same store's graph.
        hits.sort_unstable_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        hits.truncate(pool);
        Ok(hits)
    }

    /// Cosines for candidates the vector list did not hold, computed as the
    /// retrievers compute them: exactly for parked vectors, with the graph's
    /// ranking kernel for linked ones.
    fn fill_cosines(
        &self,
        q: &[f32],
        order: &[u64],
        cands: &mut FxHashMap<u64, Cand>,
    ) -> Result<()> {
        let missing: Vec<u64> = order
            .iter()
            .copied()
            .filter(|id| cands.get(id).is_some_and(|c| c.cosine.is_none()))
            .collect();
        for (id, cos) in self.cosines_of(q, &missing)? {
            if let Some(c) = cands.get_mut(&id) {
                c.cosine = Some(cos);
            }
        }
        Ok(())
    }

    /// The cosines of `ids` that have a vector, computed as the retrievers
    /// compute them: exactly for parked vectors, with the graph's ranking
    /// kernel for linked ones.
    fn cosines_of(&self, q: &[f32], ids: &[u64]) -> Result<FxHashMap<u64, f32>> {
        let mut out = FxHashMap::default();
        let mut linked = Vec::new();
        for &id in ids {
            match self.pending.get(id) {
                Some(v) => {
                    out.insert(id, crate::dot::dot(q, v));
                }
                None => linked.push(id),
            }
        }
        if let (Some(hnsw), false) = (self.hnsw.as_ref(), linked.is_empty()) {
            for (id, d) in linked.iter().zip(hnsw.distances(q, &linked)?) {
                if let Some(d) = d {
                    out.insert(*id, (1.0 - d).clamp(-1.0, 1.0));
                }
            }
        }
        Ok(out)
    }

    /// The contextual BM25 of the candidates that have a `session_id`: the
    /// query's score over the turn joined with its previous and next turn
    /// of the session that the search admits, not expired at `now` (a few
    /// candidates times the query's terms, whatever the store holds), from
    /// the three forward lists; with a query `vector`, the better of those
    /// two turns' cosines too. A turn the search leaves out (by its filter,
    /// its versions or its times) lends nothing. Returns the clock times for
    /// which these neighbours hold.
    fn fill_context(
        &self,
        query: &Query,
        vector: Option<&[f32]>,
        order: &[u64],
        cands: &mut FxHashMap<u64, Cand>,
        now: f64,
        admitted: &Admission,
    ) -> Result<Held> {
        let r = &self.records;
        let mut held = Held::default();
        if r.sessions.is_empty() {
            return Ok(held); // no record is a conversation turn
        }
        // Each step's reads are asked for before the next step needs them, so
        // the misses of scattered slots overlap.
        let slots: Vec<(u64, u32)> = order
            .iter()
            .filter_map(|&id| Some((id, r.slot(id)?)))
            .collect();
        for &(_, s) in &slots {
            r.prefetch_neighbours(s);
        }
        let linked: Vec<(u64, u32, [Option<u32>; 2])> = slots
            .iter()
            .filter_map(|&(id, s)| Some((id, s, r.neighbours(s)?)))
            .collect();
        if linked.is_empty() {
            return Ok(held);
        }
        for n in linked.iter().flat_map(|(_, _, n)| n).flatten() {
            r.prefetch_expiry(*n);
        }
        let mut slot_of = |n: Option<u32>, back: bool| {
            r.live_neighbour(n, back, now, &mut held)
                .filter(|&n| admitted.admits_slot(r, n))
        };
        let id_of = |n: Option<u32>| n.map_or(crate::bm25::MISSING, |n| r.id(n));
        // Whether each turn answers its previous one: it holds no question
        // mark, and the previous turn does.
        let mut answers: Vec<bool> = Vec::with_capacity(linked.len());
        let groups: Vec<[u64; 3]> = linked
            .iter()
            .map(|&(id, own, [prev, next])| {
                let prev = slot_of(prev, true);
                answers.push(prev.is_some_and(|p| r.asks(p) && !r.asks(own)));
                [id_of(prev), id, id_of(slot_of(next, false))]
            })
            .collect();
        for (&(id, _, _), score) in linked
            .iter()
            .zip(self.bm25.joined_scores_of(query, &groups))
        {
            if let Some(c) = cands.get_mut(&id) {
                c.bm25_context = Some(score);
            }
        }
        if let Some(q) = vector {
            // Neighbours that are candidates have their cosine already.
            let mut cosines: FxHashMap<u64, f32> = FxHashMap::default();
            let mut missing: Vec<u64> = Vec::new();
            for n in groups.iter().flat_map(|g| [g[0], g[2]]) {
                if n == crate::bm25::MISSING || cosines.contains_key(&n) {
                    continue;
                }
                match cands.get(&n).and_then(|c| c.cosine) {
                    Some(cos) => {
                        cosines.insert(n, cos);
                    }
                    None => missing.push(n),
                }
            }
            missing.sort_unstable();
            missing.dedup();
            cosines.extend(self.cosines_of(q, &missing)?);
            for ((&(id, _, _), g), &answers) in linked.iter().zip(&groups).zip(&answers) {
                let best = [g[0], g[2]]
                    .iter()
                    .filter_map(|n| cosines.get(n).copied())
                    .reduce(f32::max);
                if let Some(c) = cands.get_mut(&id) {
                    c.cosine_context = best;
                    c.cosine_asked = cosines.get(&g[0]).copied().filter(|_| answers);
                }
            }
        }
        Ok(held)
    }

    /// Which candidates' speaker the query names (a hash look-up and a
    /// compare per candidate, each distinct speaker decided once); returns
    /// whether it names any.
    fn fill_speakers(&self, text: &str, order: &[u64], cands: &mut FxHashMap<u64, Cand>) -> bool {
        let r = &self.records;
        let mut query = SpeakerQuery::new(self.bm25.analyzer(), text);
        let mut named = false;
        for id in order {
            let (Some(c), Some(slot)) = (cands.get_mut(id), r.slot(*id)) else {
                continue;
            };
            let matched = r
                .speaker(slot)
                .is_some_and(|v| query.names(v, r.strings.resolve(v)));
            c.bm25_speaker = Some(matched);
            named |= matched;
        }
        named
    }

    /// Exact BM25 scores for candidates the BM25 list did not hold (0 when
    /// no query term occurs in them), read from their forward lists.
    fn fill_bm25(&self, query: &Query, order: &[u64], cands: &mut FxHashMap<u64, Cand>) {
        let missing: Vec<u64> = order
            .iter()
            .copied()
            .filter(|id| cands.get(id).is_some_and(|c| c.bm25.is_none()))
            .collect();
        if missing.is_empty() {
            return;
        }
        for (id, score) in missing.iter().zip(self.bm25.scores_of(query, &missing)) {
            if let Some(c) = cands.get_mut(id) {
                c.bm25 = Some(score);
            }
        }
    }
}
