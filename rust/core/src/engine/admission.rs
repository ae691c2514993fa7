//! Which records a search's retrievers may return, found without reading
//! every record where the conditions allow it.
//!
//! A search among current records of a store with few superseded ones asks
//! each retriever for more hits and drops the superseded. A filter with
//! postings selects its records, and the retrievers are restricted to that
//! selection. A filter that admits every record but a few it can list (the
//! read's "not expired now", [`Filter::exclusion`]), or a search among
//! current records of a store with many superseded ones, lists no record:
//! the retrievers skip the ones left out as they meet them, which a graph
//! search and BM25 do for the hits they reach, not for the store. Each way
//! gives the hits a selection of the same records gives.
//!
//! A filter that admits much of the store (one agent's records in a store
//! of one agent, an `as_of` or `known_at` near now, a broad range) lists
//! nothing either: listing it read every record it admits, as much as a
//! scan, to return a few hits. Its records are checked where the retrievers
//! meet them, which costs a search about what the share left out costs it.

use super::filter::without;
use super::order::{split_groups, GroupTerms};
use super::records::Records;
use super::{Engine, Filter, Selection};

/// Past this many superseded records, a search of current ones with no
/// filter skips them where the retrievers meet them instead of asking each
/// retriever for that many more hits and dropping the superseded ones.
const MAX_OVERFETCH: usize = 2048;

/// The share of the store from which a filter's records are checked where
/// the retrievers meet them rather than listed: a retriever that meets
/// records the filter leaves out reads about `1 / share` times as many.
const CHECK_SHARE: f64 = 0.25;

/// The records sampled to tell a filter's share, and by how much a sample
/// may overstate it (about three standard errors of a share near a half).
const CHECK_SAMPLES: usize = 256;
const SAMPLE_ERROR: f64 = 0.1;

/// The turns and sessions read, at most, to tell whether a checked filter
/// admits a turn (see [`Admission::turns`]); past them its records are
/// listed, as they were.
const TURNS_READ: usize = 1024;
/// Past this many groups of table and scope holding turns, their totals
/// are not read to tell it.
const TURN_GROUPS_READ: usize = 4096;

/// The records a search's retrievers may return (see [`Engine::admission`]).
pub(super) enum Admission<'f> {
    /// Every live record, of which `closed` superseded ones are dropped from
    /// each retriever's longer list ([`Engine::current_hits`]).
    All { closed: usize },
    /// The selected records alone, by slot and by id.
    Only { selection: Selection, ids: Vec<u64> },
    /// Every live record but those of these slots (ascending), and but the
    /// superseded ones when `current`, skipped where the retrievers meet them.
    Except { slots: Vec<u32>, current: bool },
    /// Every live record `filter` admits, but the superseded ones when
    /// `current`, checked where the retrievers meet them; `turns`: whether
    /// they hold turns with a session, with a speaker (told as it was chosen).
    Check {
        filter: &'f Filter,
        current: bool,
        turns: (bool, bool),
    },
}

impl Admission<'_> {
    /// Whether an [`Admission::Except`] admits the record `id` (any other
    /// admission restricts the retrievers by itself).
    pub(super) fn admits(&self, records: &Records, id: u64) -> bool {
        match self {
            Admission::Except { .. } | Admission::Check { .. } => records
                .slot(id)
                .is_some_and(|s| self.admits_slot(records, s)),
            _ => true,
        }
    }

    /// Whether the search admits the live record in `slot`, whatever the
    /// kind of admission (a turn's neighbours are read by slot).
    pub(super) fn admits_slot(&self, records: &Records, slot: u32) -> bool {
        match self {
            Admission::All { closed } => *closed == 0 || !records.is_closed(slot),
            Admission::Only { selection, .. } => selection.slots.binary_search(&slot).is_ok(),
            Admission::Except { slots, current } => {
                !(*current && records.is_closed(slot)) && slots.binary_search(&slot).is_err()
            }
            Admission::Check {
                filter, current, ..
            } => !(*current && records.is_closed(slot)) && filter.matches(records, slot),
        }
    }

    /// Whether the records admitted hold conversation turns: (any with a
    /// session, any with a speaker), so that turns the search leaves out
    /// (another scope's, expired, superseded) never change how deep it
    /// searches or which passes it runs. A selection's records are read; a
    /// search of all records but a few takes the store's counts less those.
    pub(super) fn turns(&self, records: &Records) -> (bool, bool) {
        let counts = records.turns;
        let left = match self {
            Admission::All { closed } if *closed > 0 => counts.current,
            Admission::All { .. } => counts.all,
            Admission::Except { slots, current } => {
                let mut left = if *current { counts.current } else { counts.all };
                for &s in slots {
                    let (turn, closed) = records.turn_of(s);
                    if !(*current && closed) {
                        left.count(turn, -1);
                    }
                }
                left
            }
            Admission::Only { selection, .. } => {
                let (mut sessions, mut speakers) = (false, false);
                for &s in &selection.slots {
                    let ((session, speaker), _) = records.turn_of(s);
                    sessions |= session;
                    speakers |= speaker;
                    if (sessions || counts.all.sessions == 0)
                        && (speakers || counts.all.speakers == 0)
                    {
                        break;
                    }
                }
                return (sessions, speakers);
            }
            Admission::Check { turns, .. } => return *turns,
        };
        (left.sessions > 0, left.speakers > 0)
    }

    /// Whether the graph search needs to ask about the nodes it reaches
    /// (the question costs a look-up each): not when nothing is left out.
    pub(super) fn skips(&self, records: &Records) -> bool {
        match self {
            Admission::Except { slots, current } => {
                !slots.is_empty() || (*current && !records.closed().is_empty())
            }
            Admission::Check { .. } => true,
            _ => false,
        }
    }
}

impl Engine {
    /// The records a search admits: `filter` (none: all), less the
    /// superseded ones with `current_only`. `pool` is what each retriever
    /// is asked for, and `vectors` whether the graph is searched, which
    /// decide when listing the records costs no more than the search does.
    pub(super) fn admission<'f>(
        &self,
        filter: Option<&'f Filter>,
        current_only: bool,
        pool: usize,
        vectors: bool,
    ) -> Admission<'f> {
        let r = &self.records;
        let closed = if current_only { r.closed().len() } else { 0 };
        let slots = match filter.filter(|f| !f.is_all()) {
            Some(f) => match f.exclusion(r) {
                Some(slots) => slots,
                None => match self.checks(f, current_only, pool, vectors) {
                    Some(turns) => {
                        return Admission::Check {
                            filter: f,
                            current: current_only,
                            turns,
                        };
                    }
                    None => {
                        let mut selection = self.select(f);
                        if closed > 0 {
                            selection.slots.retain(|&s| !r.is_closed(s));
                        }
                        return self.only(selection);
                    }
                },
            },
            None if closed <= MAX_OVERFETCH => return Admission::All { closed },
            None => Vec::new(),
        };
        if vectors && self.graph_may_scan(slots.len() + closed, pool) {
            // The graph scans what a small admitted set holds rather than
            // search it (so must this search, to find the same hits): the
            // list costs no more than that scan.
            let selection = Selection {
                examined: slots.len(),
                slots: without(r.live_slots(), &slots)
                    .filter(|&s| !(current_only && r.is_closed(s)))
                    .collect(),
            };
            return self.only(selection);
        }
        Admission::Except {
            slots,
            current: current_only,
        }
    }

    /// Whether the records `filter` admits are checked where the retrievers
    /// meet them rather than listed: when its candidates are a large share
    /// of the store (or it has none), and a sample says it admits a large
    /// share. Not where the graph could scan what a list admits instead of
    /// searching it (a walk would not find the same hits), nor where whether
    /// it admits turns takes long to tell. `Some` of the turns it admits.
    fn checks(
        &self,
        filter: &Filter,
        current_only: bool,
        pool: usize,
        vectors: bool,
    ) -> Option<(bool, bool)> {
        #[cfg(test)]
        if tests::LISTED.get() {
            return None;
        }
        let r = &self.records;
        let most = (r.len() as f64 * CHECK_SHARE) as usize;
        if r.is_empty() || filter.estimate_within(r, most).is_some_and(|n| n < most) {
            return None;
        }
        let share = filter.share(r, CHECK_SAMPLES, |s| !(current_only && r.is_closed(s)));
        if share < CHECK_SHARE {
            return None;
        }
        let surely = ((share - SAMPLE_ERROR).max(0.0) * r.len() as f64) as usize;
        if vectors && self.graph_may_scan(r.len() - surely, pool) {
            return None;
        }
        self.admitted_turns(filter, current_only)
    }

    /// Whether `filter` admits turns with a session, with a speaker (as a
    /// list of its records would tell), so that turns it leaves out never
    /// change how a search runs: none where no group of table and scope it
    /// admits holds one, else the first admitted turn found among the
    /// turns; `None` when that takes more than [`TURNS_READ`] reads.
    fn admitted_turns(&self, filter: &Filter, current: bool) -> Option<(bool, bool)> {
        let r = &self.records;
        let mut may = (r.turns.all.sessions > 0, r.turns.all.speakers > 0);
        if r.turn_groups.len() <= TURN_GROUPS_READ {
            let (mut terms, mut rest) = (Vec::new(), Vec::new());
            split_groups(filter.root(), &mut terms, &mut rest);
            let terms = GroupTerms(terms);
            may = (false, false);
            let admitted = r.turn_groups.iter().filter(|(g, _)| terms.admits(g));
            for (_, t) in admitted {
                may = (may.0 || t.sessions > 0, may.1 || t.speakers > 0);
            }
        }
        let mut read = 0;
        let mut admitted = |slots: &mut dyn Iterator<Item = u32>| -> Option<bool> {
            for s in slots {
                read += 1;
                if read > TURNS_READ {
                    return None;
                }
                if !(current && r.is_closed(s)) && filter.matches(r, s) {
                    return Some(true);
                }
            }
            Some(false)
        };
        let mut sessions = r.sessions.values().flat_map(|t| t.values().copied());
        let sessions = may.0 && admitted(&mut sessions)?;
        let speakers = may.1 && admitted(&mut r.speaker_slots())?;
        Some((sessions, speakers))
    }

    fn only(&self, selection: Selection) -> Admission<'static> {
        let ids = selection
            .slots
            .iter()
            .map(|&slot| self.records.id(slot))
            .collect();
        Admission::Only { selection, ids }
    }

    /// Whether the graph could scan the vectors a search admits rather than
    /// walk its links, when at most `excluded` of its records are left out:
    /// the choice the graph makes for an allowed set (`Hnsw::prefer_scan`:
    /// a scan of `a` of `n` vectors when `a * a <= ef * 2m * n`), taken
    /// with room to spare, so that `false` is sure.
    fn graph_may_scan(&self, excluded: usize, pool: usize) -> bool {
        let Some(h) = self.hnsw.as_ref().filter(|h| !h.is_empty()) else {
            return false;
        };
        let params = h.params();
        let live = h.len().max(1) as f64;
        let admitted = h.len().saturating_sub(excluded) as f64;
        let ef = params.ef.max(pool) as f64;
        let degree = 2.0 * params.m as f64;
        admitted * admitted <= 2.0 * ef * degree * live
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{
        flatten_metadata, Attrs, Batch, Conditions, EngineConfig, Mode, ParsedFilter,
        SearchRequest, Versions,
    };
    use crate::fusion::Fusion;
    use crate::hnsw::Params;

    const NOW: f64 = 1000.0;

    thread_local! {
        /// Makes this thread's searches list the records a filter admits
        /// (see [`Engine::checks`]): what the other ways are compared with.
        pub(super) static LISTED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }

    use crate::testdata::Rng;

    /// `n` records of a few words and clustered 8-d vectors, every one with
    /// the metadata `{"all": 1}` (postings that select them all: the path a
    /// search took before it could skip records), a fifth expiring around
    /// [`NOW`], `closed` of them superseded, the last 50 vectors parked. A
    /// sparse graph (m 4, ef 8), so a search that walked it differently
    /// would find other hits.
    fn store(n: usize, closed: usize, seed: u64) -> Engine {
        let sparse = Params {
            m: 4,
            ef: 8,
            ef_construction: 32,
            ..Params::default()
        };
        store_with(n, closed, seed, sparse)
    }

    fn store_with(n: usize, closed: usize, seed: u64, hnsw: Params) -> Engine {
        let mut rng = Rng(seed | 1);
        let mut e = Engine::new(EngineConfig {
            dim: Some(8),
            hnsw,
            ..EngineConfig::default()
        })
        .unwrap();
        let words = [
            "dark", "mode", "cake", "light", "tea", "blue", "north", "song",
        ];
        let ids: Vec<u64> = (1..=n as u64).collect();
        let texts: Vec<String> = ids
            .iter()
            .map(|_| {
                let len = 2 + rng.below(5) as usize;
                (0..len)
                    .map(|_| words[rng.below(words.len() as u64) as usize])
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect();
        let attrs: Vec<Attrs> = ids
            .iter()
            .map(|&id| {
                let importance = rng.below(5) as f32 / 4.0;
                // The least important are turns of a few sessions, half of
                // them with a speaker.
                let turn = importance == 0.0;
                let mut scope: [Option<String>; 6] = Default::default();
                scope[4] = turn.then(|| format!("s{}", id % 3));
                Attrs {
                    id: Some(format!("r{id}")),
                    scope,
                    speaker: (turn && id % 2 == 0)
                        .then(|| ["Ana", "Bo"][id as usize % 4 / 2].into()),
                    importance,
                    created_at: rng.below(100) as f64,
                    last_accessed_at: rng.below(100) as f64,
                    expires_at: (rng.below(5) == 0).then(|| NOW + rng.below(40) as f64 - 20.0),
                    valid_to: (id as usize <= closed).then_some(50.0),
                    metadata: flatten_metadata(r#"{"all": 1}"#).unwrap(),
                    ..Attrs::blank("memories", "semantic")
                }
            })
            .collect();
        let vectors = crate::testdata::clustered(n, 8, 20, seed);
        e.upsert(Batch {
            ids: &ids,
            texts: Some(&texts),
            vectors: Some(&vectors),
            attrs: &attrs,
        })
        .unwrap();
        e.index_pending(n - 50).unwrap();
        e
    }

    /// The filter of a read's conditions at [`NOW`], with the caller's
    /// `filter`, and whether it keeps current records only.
    fn read(e: &Engine, versions: Versions, filter: Option<&str>) -> (Option<Filter>, bool) {
        let c = Conditions {
            versions,
            filter: filter.map(|f| ParsedFilter::from_json_text(f).unwrap()),
            ..Conditions::default()
        };
        let a = e.build_conditions(&c, Some(NOW));
        (a.filter, a.current_only)
    }

    /// Searches of every mode, with and without superseded records, by a
    /// skipping admission and by a selection of the same records (`{"all":
    /// 1}` added), which must give the same hits, scores and signals.
    fn same_hits(e: &Engine, expect_skip: bool) {
        let queries = crate::testdata::clustered(24, 8, 20, 99);
        for (i, q) in queries.chunks_exact(8).enumerate() {
            let text = ["dark mode", "tea song north", "blue"][i % 3];
            for versions in [Versions::Current, Versions::Every] {
                let (skip, current) = read(e, versions, None);
                let (select, _) = read(e, versions, Some(r#"{"all": 1}"#));
                let skipped = e.admission(skip.as_ref(), current, 10, true);
                assert_eq!(matches!(skipped, Admission::Except { .. }), expect_skip);
                let selected = listed(|| e.admission(select.as_ref(), current, 10, true));
                assert!(matches!(selected, Admission::Only { .. }));
                for mode in [Mode::Vector, Mode::Text, Mode::Hybrid] {
                    for fusion in [Fusion::Adaptive, Fusion::rrf(60.0).unwrap()] {
                        let req = |filter| SearchRequest {
                            filter,
                            fusion,
                            candidates: 10,
                            turn_candidates: 10,
                            current_only: current,
                            explain: true,
                            now: NOW,
                            ..SearchRequest::new(Some(text), Some(q), mode, 5)
                        };
                        let got = e.search(&req(skip.as_ref())).unwrap();
                        let want = listed(|| e.search(&req(select.as_ref()))).unwrap();
                        assert!(!want.ids.is_empty());
                        assert_eq!(got, want, "{mode:?} {fusion:?} {versions:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn a_search_that_skips_finds_what_a_selection_finds() {
        // Large enough that the graph is searched, not scanned.
        let e = store(3000, 300, 7);
        same_hits(&e, true);
        // Small for its graph (the default's, which scans up to about
        // 2,000 admitted vectors): the graph would scan its admitted set,
        // so it is listed.
        let e = store_with(1500, 100, 8, Params::default());
        same_hits(&e, false);
    }

    /// `f` with this thread's searches listing what a filter admits.
    fn listed<T>(f: impl FnOnce() -> T) -> T {
        LISTED.set(true);
        let out = f();
        LISTED.set(false);
        out
    }

    /// Searches of every mode with `filter`, checked as met and listed,
    /// which must give the same hits, scores and signals; whether it was
    /// checked.
    fn checked_as_listed(e: &Engine, filter: &str, current: bool) -> bool {
        let f = e.parse_filter(filter).unwrap();
        let got = e.admission(Some(&f), current, 10, true);
        let want = listed(|| e.admission(Some(&f), current, 10, true));
        let checked = matches!(got, Admission::Check { .. });
        assert_eq!(got.turns(&e.records), want.turns(&e.records), "{filter}");
        let queries = crate::testdata::clustered(12, 8, 20, 98);
        for (i, q) in queries.chunks_exact(8).enumerate() {
            let text = ["dark mode", "tea song north", "blue cake"][i % 3];
            for mode in [Mode::Vector, Mode::Text, Mode::Hybrid] {
                let req = SearchRequest {
                    filter: Some(&f),
                    candidates: 10,
                    turn_candidates: 20,
                    current_only: current,
                    explain: true,
                    now: NOW,
                    ..SearchRequest::new(Some(text), Some(q), mode, 5)
                };
                let got = e.search(&req).unwrap();
                let want = listed(|| e.search(&req)).unwrap();
                assert!(!want.ids.is_empty(), "{filter} {mode:?}");
                assert_eq!(got, want, "{filter} {mode:?} {current}");
            }
        }
        checked
    }

    #[test]
    fn a_filter_of_most_records_is_checked_as_met() {
        let e = store(3000, 300, 13);
        for current in [false, true] {
            // All, with the turns; four in five, without them (the least
            // important are the turns); a range alone; one in five, listed.
            assert!(checked_as_listed(&e, r#"{"all": 1}"#, current));
            assert!(checked_as_listed(
                &e,
                r#"{"importance": {"$gte": 0.25}}"#,
                current
            ));
            assert!(checked_as_listed(
                &e,
                r#"{"last_accessed_at": {"$lt": 80}}"#,
                current
            ));
            assert!(!checked_as_listed(
                &e,
                r#"{"importance": {"$gte": 1.0}}"#,
                current
            ));
        }
        let turns = |json| {
            let f = e.parse_filter(json).unwrap();
            e.admission(Some(&f), false, 10, true).turns(&e.records)
        };
        assert_eq!(turns(r#"{"all": 1}"#), (true, true));
        assert_eq!(turns(r#"{"importance": {"$gte": 0.25}}"#), (false, false));
        // Small for its graph: the graph would scan a list, so it is listed;
        // with no vectors searched, checked.
        let e = store_with(1500, 100, 8, Params::default());
        assert!(!checked_as_listed(&e, r#"{"all": 1}"#, true));
        let f = e.parse_filter(r#"{"all": 1}"#).unwrap();
        assert!(matches!(
            e.admission(Some(&f), true, 10, false),
            Admission::Check { .. }
        ));
    }

    /// Turns of a table beside as many notes of another: whether a checked
    /// filter admits turns is told from the groups' totals when its tables
    /// leave them out, and from the turns when they do not, up to
    /// [`TURNS_READ`] of them; past that its records are listed.
    #[test]
    fn whether_a_checked_filter_admits_turns_is_told_cheaply_or_it_is_listed() {
        let n = 3 * TURNS_READ;
        let mut e = Engine::new(EngineConfig::default()).unwrap();
        let ids: Vec<u64> = (1..=2 * n as u64).collect();
        let texts: Vec<String> = ids.iter().map(|i| format!("note {}", i % 7)).collect();
        let attrs: Vec<Attrs> = ids
            .iter()
            .map(|&id| {
                let turn = id as usize <= n;
                let mut scope: [Option<String>; 6] = Default::default();
                scope[0] = Some("agent".into());
                scope[4] = turn.then(|| format!("s{}", id % 5));
                Attrs {
                    scope,
                    speaker: turn.then(|| "Ana".into()),
                    importance: if turn { 0.0 } else { 0.75 },
                    ..Attrs::blank(if turn { "messages" } else { "notes" }, "semantic")
                }
            })
            .collect();
        e.upsert(Batch {
            ids: &ids,
            texts: Some(&texts),
            vectors: None,
            attrs: &attrs,
        })
        .unwrap();
        let admission = |json: &str| {
            let f = e.parse_filter(json).unwrap();
            let got = e.admission(Some(&f), false, 10, false);
            let want = listed(|| e.admission(Some(&f), false, 10, false));
            assert_eq!(got.turns(&e.records), want.turns(&e.records), "{json}");
            (
                matches!(got, Admission::Check { .. }),
                got.turns(&e.records),
            )
        };
        // The notes' table holds no turn: told by the totals.
        assert_eq!(admission(r#"{"table": "notes"}"#), (true, (false, false)));
        // The agent's records hold turns: the first one read is admitted.
        assert_eq!(admission(r#"{"agent_id": "agent"}"#), (true, (true, true)));
        // The notes again, by importance: every turn is read and left out.
        assert_eq!(
            admission(r#"{"importance": {"$gt": 0.5}}"#),
            (false, (false, false))
        );
    }

    #[test]
    fn many_superseded_are_skipped_as_met() {
        let mut e = store(6000, MAX_OVERFETCH + 100, 11);
        let (none, _) = read(&e, Versions::Current, Some("{}"));
        assert!(matches!(
            e.admission(none.as_ref(), true, 10, true),
            Admission::Except { .. }
        ));
        // Without expiry: no filter at all.
        assert!(matches!(
            e.admission(None, true, 10, true),
            Admission::Except { ref slots, current: true } if slots.is_empty()
        ));
        let q = crate::testdata::clustered(1, 8, 20, 5);
        for mode in [Mode::Vector, Mode::Text, Mode::Hybrid] {
            let select = e.parse_filter(r#"{"all": 1}"#).unwrap();
            let req = |filter| SearchRequest {
                filter,
                candidates: 10,
                turn_candidates: 10,
                current_only: true,
                explain: true,
                ..SearchRequest::new(Some("dark cake"), Some(&q), mode, 5)
            };
            let got = e.search(&req(None)).unwrap();
            let want = listed(|| e.search(&req(Some(&select)))).unwrap();
            assert_eq!(got, want, "{mode:?}");
            assert!(got.ids.iter().all(|&id| id as usize > MAX_OVERFETCH + 100));
        }
        // A few superseded: each retriever is asked for more hits instead.
        e.remove(&(1..=200).collect::<Vec<_>>(), false).unwrap();
        assert!(matches!(
            e.admission(None, true, 10, true),
            Admission::All { closed } if closed == MAX_OVERFETCH - 100
        ));
    }

    #[test]
    fn a_read_that_leaves_out_the_expired_lists_only_them() {
        let e = store(3000, 0, 3);
        let expired: Vec<u32> = e
            .records
            .live_slots()
            .filter(|&s| e.records.expires_at[s as usize] <= NOW)
            .collect();
        assert!(!expired.is_empty());
        let (filter, _) = read(&e, Versions::Every, None);
        let filter = filter.unwrap();
        assert_eq!(filter.exclusion(&e.records), Some(expired.clone()));
        assert_eq!(e.count(Some(&filter)), e.len() - expired.len());
        assert_eq!(filter.select(&e.records).examined, expired.len());
        match e.admission(Some(&filter), false, 10, true) {
            Admission::Except { slots, current } => {
                assert_eq!((slots, current), (expired, false));
            }
            _ => panic!("the expired records are skipped, not the others listed"),
        }
        // With no vectors searched, the graph's choice does not count.
        let small = store(120, 0, 4);
        let (filter, _) = read(&small, Versions::Every, None);
        assert!(matches!(
            small.admission(filter.as_ref(), false, 10, false),
            Admission::Except { .. }
        ));
    }
}
