//! Pages of the records a filter admits, sorted by a column, and the count
//! of those records per table and scope.
//!
//! A page by creation time walks [`Records::by_time`] from its end, checking
//! each record met, while the filter's records lie near that end (one room
//! of a long conversation, the whole store); otherwise, and for the other
//! columns, a page is one pass over the admitted slots, reading the columns
//! the engine keeps current (access counts and times change with every
//! search, under a read lock, so no order of them is kept ahead); it keeps
//! the first `offset + limit` keys of the pass (`select_nth_unstable`,
//! linear) and sorts only those. The counts of the whole store are kept as
//! records come and go ([`Records::group`]); a filter of tables and scopes
//! reads them, others take a pass.

use rustc_hash::FxHashMap;

use std::ops::Bound::Unbounded;

use super::filter::{Field, Filter, Node, Scalar};
use super::records::{ordered, time_keys, Records, NONE};
use super::{Engine, Order};
use crate::error::{Error, Result};

/// A column a page may be sorted by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Column {
    CreatedAt,
    Importance,
    AccessCount,
    LastAccessedAt,
}

impl Column {
    /// Every column, by the name of the record field it reads.
    pub const ALL: [(&'static str, Column); 4] = [
        ("created_at", Column::CreatedAt),
        ("importance", Column::Importance),
        ("access_count", Column::AccessCount),
        ("last_accessed_at", Column::LastAccessedAt),
    ];

    /// The column named `name` (a record field), or an error naming those there are.
    pub fn parse(name: &str) -> Result<Column> {
        Self::ALL
            .iter()
            .find(|(n, _)| *n == name)
            .map(|&(_, c)| c)
            .ok_or_else(|| {
                let names: Vec<&str> = Self::ALL.iter().map(|(n, _)| *n).collect();
                Error::invalid(format!(
                    "sort must be one of {}, got {name:?}",
                    names.join(", ")
                ))
            })
    }
}

/// How a page is sorted: by `column`, then by creation time, then by id (the
/// order records were stored in), all ascending or all descending, so that
/// ties are the oldest first, or the newest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sort {
    pub column: Column,
    pub descending: bool,
}

impl From<Order> for Sort {
    fn from(order: Order) -> Self {
        Sort {
            column: Column::CreatedAt,
            descending: order == Order::CreatedDesc,
        }
    }
}

/// The records of one table and scope, and how many a filter admits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    pub table: String,
    /// The scope's values, in the order of [`SCOPE_FIELDS`](super::SCOPE_FIELDS).
    pub scope: [Option<String>; 6],
    pub count: usize,
}

impl Engine {
    /// The admitted slots (every live one without a filter).
    fn admitted(&self, filter: Option<&Filter>) -> Vec<u32> {
        match filter {
            Some(f) if !f.is_all() => f.select(&self.records).slots,
            _ => self.records.live_slots().collect(),
        }
    }

    /// Ids of the records `filter` admits, in `sort`'s order, skipping
    /// `offset` and returning at most `limit`.
    pub fn ids_sorted(
        &self,
        filter: Option<&Filter>,
        sort: Sort,
        offset: usize,
        limit: usize,
    ) -> Vec<u64> {
        if sort.column == Column::CreatedAt {
            if let Some(ids) = self.page_by_time(filter, sort.descending, offset, limit) {
                return ids;
            }
        }
        let r = &self.records;
        let slots = self.admitted(filter);
        let wanted = offset.saturating_add(limit).min(slots.len());
        if wanted == 0 {
            return Vec::new();
        }
        // Each key ascends in the page's order: a descending one is complemented.
        let flip = if sort.descending { u64::MAX } else { 0 };
        let mut keys: Vec<[u64; 3]> = slots
            .iter()
            .map(|&slot| {
                let s = slot as usize;
                let created = ordered(r.created_at[s]);
                let first = match sort.column {
                    Column::CreatedAt => created,
                    Column::Importance => ordered(f64::from(r.importance[s])),
                    Column::AccessCount => r.access_count(slot),
                    Column::LastAccessedAt => ordered(r.accessed_at(slot)),
                };
                [first ^ flip, created ^ flip, r.id(slot) ^ flip]
            })
            .collect();
        if wanted < keys.len() {
            keys.select_nth_unstable(wanted - 1);
            keys.truncate(wanted);
        }
        keys.sort_unstable();
        keys.into_iter().skip(offset).map(|k| k[2] ^ flip).collect()
    }

    /// A page by creation time, read by walking [`Records::by_time`] from the
    /// page's end (within the creation times the filter leaves) and checking
    /// each record met; `None` when the walk would read more records than a
    /// pass over the filter's candidates costs: a page longer than a share of
    /// them, or records the filter admits too rare where the walk goes (a
    /// small scope among many newer records), which only the walk finds out.
    fn page_by_time(
        &self,
        filter: Option<&Filter>,
        descending: bool,
        offset: usize,
        limit: usize,
    ) -> Option<Vec<u64>> {
        let r = &self.records;
        let filter = filter.filter(|f| !f.is_all());
        if limit == 0 {
            return Some(Vec::new());
        }
        let wanted = offset.saturating_add(limit);
        let budget = match filter {
            // Each record met is one of the page's.
            None => usize::MAX,
            Some(f) => {
                let candidates = f.estimate(r).unwrap_or(r.len()).max(1);
                // What a walk meets for the page if the candidates were spread
                // evenly; a few times more tells they lie elsewhere.
                let spread = wanted.saturating_mul(r.len()) / candidates;
                if spread > candidates / WALK_SHARE {
                    return None;
                }
                (candidates / WALK_SHARE).min(spread.saturating_mul(4).saturating_add(256))
            }
        };
        let (lo, hi) = filter.map_or((Unbounded, Unbounded), Filter::created_bounds);
        let Some(range) = time_keys(lo, hi, 0, u64::MAX) else {
            return Some(Vec::new());
        };
        let walk = r.by_time.range(range).map(|&(_, id)| id);
        let admitted = |id: u64| {
            filter.is_none_or(|f| f.matches(r, r.slot(id).expect("a live record's slot")))
        };
        if descending {
            walked(walk.rev(), admitted, offset, limit, budget)
        } else {
            walked(walk, admitted, offset, limit, budget)
        }
    }

    /// How many records `filter` admits: from the totals kept, or by a pass
    /// over its candidates (a window's read from the creation order).
    pub fn count(&self, filter: Option<&Filter>) -> usize {
        let r = &self.records;
        match filter.filter(|f| !f.is_all()) {
            None => r.len(),
            Some(f) => self.count_by_groups(f).unwrap_or_else(|| f.count(r)),
        }
    }

    /// The count of a filter of tables and scope values, read from the
    /// totals kept per table and scope ([`Engine::by_groups`]): a long
    /// conversation's count reads none of its records.
    fn count_by_groups(&self, filter: &Filter) -> Option<usize> {
        let r = &self.records;
        let (of, except) = self.by_groups(filter)?;
        let total: usize = (r.groups.iter())
            .filter(|(group, _)| of.admits(group))
            .map(|(_, &n)| n as usize)
            .sum();
        Some(total - except.iter().filter(|&&s| of.admits(&r.group(s))).count())
    }

    /// When `filter` is tables and scope values (each field equal to one of
    /// some values, or unset) and conditions that leave out a few records
    /// found exactly (a read's "not expired now"): the groups it admits, and
    /// the records left out (of any group). `None` for other filters, and
    /// where the store's tables and scopes, or the records left out, are more
    /// than a share of the filter's candidates (many small scopes; most of the
    /// store expired, or not of a `$ne`), which a pass reads sooner.
    fn by_groups(&self, filter: &Filter) -> Option<(GroupTerms, Vec<u32>)> {
        let r = &self.records;
        let mut of = GroupTerms(Vec::new());
        let mut rest: Vec<Node> = Vec::new();
        split_groups(filter.root(), &mut of.0, &mut rest);
        let candidates = filter.estimate(r).unwrap_or(r.len());
        if of.0.is_empty() || r.groups.len() >= candidates / 2 {
            return None;
        }
        // Few left out: told by counting them no further than that, which a
        // count that then takes a pass pays on top of it.
        let cap = (candidates / WALK_SHARE).saturating_sub(r.groups.len());
        let except = match rest.len() {
            0 => Vec::new(),
            _ => Filter::from_root(Node::And(rest)).exclusion_within(r, cap)?,
        };
        Some((of, except))
    }

    /// How many records `filter` admits in each table and scope: by table,
    /// then the largest count first, then by the scope's values (absent
    /// first).
    pub fn groups(&self, filter: Option<&Filter>) -> Vec<Group> {
        let r = &self.records;
        let group = |(key, &count): (&[u32; 7], &u32)| Group {
            table: r.strings.resolve(key[0]).to_owned(),
            scope: std::array::from_fn(|f| resolved(r, key[f + 1])),
            count: count as usize,
        };
        let filter = filter.filter(|f| !f.is_all());
        // Tables and scopes, and the few records left out (those expired); or
        // every group less those.
        let kept = |f: &Filter| {
            (self.by_groups(f)).or_else(|| {
                f.exclusion(r)
                    .map(|except| (GroupTerms(Vec::new()), except))
            })
        };
        let mut groups: Vec<Group> = match filter.map(|f| (f, kept(f))) {
            // The totals kept, less the records left out.
            Some((_, Some((of, except)))) => {
                let mut counts: FxHashMap<[u32; 7], u32> = (r.groups.iter())
                    .filter(|(g, _)| of.admits(g))
                    .map(|(g, &n)| (*g, n))
                    .collect();
                for slot in except {
                    if let Some(n) = counts.get_mut(&r.group(slot)) {
                        *n -= 1;
                    }
                }
                counts.iter().filter(|(_, &n)| n > 0).map(group).collect()
            }
            Some((f, None)) => {
                let mut counts: FxHashMap<[u32; 7], u32> = FxHashMap::default();
                for slot in f.select(r).slots {
                    *counts.entry(r.group(slot)).or_default() += 1;
                }
                counts.iter().map(group).collect()
            }
            None => r.groups.iter().map(group).collect(),
        };
        groups.sort_unstable_by(|a, b| {
            (&a.table, std::cmp::Reverse(a.count), &a.scope).cmp(&(
                &b.table,
                std::cmp::Reverse(b.count),
                &b.scope,
            ))
        });
        groups
    }
}

/// A walk of [`Records::by_time`] is tried when the page's records, spread
/// evenly, lie within one in this many of the filter's candidates, and meets
/// no more before it gives way to a pass over them. A record met costs about
/// 1.5 times one passed over (a step of the tree, the id's slot, columns read
/// out of slot order), so a walk that gives way adds a fifth to the pass at
/// most, and usually far less (`benches/README.md`).
const WALK_SHARE: usize = 8;

/// The ids of `walk` that `admitted` takes, past the first `offset` of them,
/// `limit` at most; `None` when it meets `budget` records first.
fn walked(
    walk: impl Iterator<Item = u64>,
    admitted: impl Fn(u64) -> bool,
    offset: usize,
    limit: usize,
    budget: usize,
) -> Option<Vec<u64>> {
    let mut page = Vec::new();
    let mut skip = offset;
    for (met, id) in walk.enumerate() {
        if met == budget {
            return None;
        }
        if !admitted(id) {
            continue;
        }
        if skip > 0 {
            skip -= 1;
            continue;
        }
        page.push(id);
        if page.len() == limit {
            break;
        }
    }
    Some(page)
}

/// What a filter asks of a group's key ([`Records::group`]): at each place,
/// one of the values (none: every group).
pub(super) struct GroupTerms(pub(super) Vec<(usize, Vec<u32>)>);

impl GroupTerms {
    pub(super) fn admits(&self, group: &[u32; 7]) -> bool {
        (self.0.iter()).all(|(at, values)| values.contains(&group[*at]))
    }
}

/// Sorts the conditions under `node`'s `$and`s into those on the table or a
/// scope field that a group's key tells (the key's place, and the values
/// that meet it: [`NONE`] for unset) and the others.
pub(super) fn split_groups(node: &Node, wants: &mut Vec<(usize, Vec<u32>)>, rest: &mut Vec<Node>) {
    let at = |field: &Field| match field {
        Field::Table => Some(0),
        Field::Scope(i) => Some(usize::from(*i) + 1),
        _ => None,
    };
    // A value no record holds, or of another type, meets no group.
    let value = |q: &Scalar| match q {
        Scalar::Str(_, id) => *id,
        Scalar::Null => Some(NONE),
        Scalar::Bool(_) | Scalar::Num(_) => None,
    };
    match node {
        Node::And(parts) => parts.iter().for_each(|p| split_groups(p, wants, rest)),
        Node::Eq(f, q) if at(f).is_some() => {
            wants.extend(at(f).map(|at| (at, value(q).into_iter().collect())));
        }
        Node::In(f, qs) if at(f).is_some() => {
            wants.extend(at(f).map(|at| (at, qs.iter().filter_map(value).collect())));
        }
        other => rest.push(other.clone()),
    }
}

fn resolved(r: &Records, value: u32) -> Option<String> {
    (value != NONE).then(|| r.strings.resolve(value).to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{flatten_metadata, Attrs, Batch, EngineConfig};

    use crate::testdata::Rng;

    fn attrs(rng: &mut Rng) -> Attrs {
        // Few distinct values, so ties on every column, creation time included.
        let created = rng.below(20) as f64 - 5.0;
        Attrs {
            id: None,
            tbl: ["memories", "notes"][rng.below(2) as usize].into(),
            r#type: "semantic".into(),
            scope: [
                Some(format!("agent{}", rng.below(3))),
                (rng.below(2) == 0).then(|| format!("user{}", rng.below(2))),
                None,
                None,
                None,
                None,
            ],
            importance: rng.below(5) as f32 / 4.0,
            evergreen: false,
            created_at: if created == 0.0 { -0.0 } else { created },
            updated_at: created,
            last_accessed_at: created + rng.below(10) as f64,
            access_count: rng.below(4),
            valid_to: None,
            expires_at: (rng.below(3) == 0).then(|| rng.below(20) as f64),
            recorded_at: 0.0,
            speaker: None,
            metadata: flatten_metadata("{}").unwrap(),
        }
    }

    /// Stores `ids` (again), each with random attributes.
    fn store(e: &mut Engine, ids: &[u64], rng: &mut Rng) {
        let attrs: Vec<Attrs> = ids.iter().map(|_| attrs(rng)).collect();
        let texts: Vec<String> = ids.iter().map(|i| format!("record {i}")).collect();
        e.upsert(Batch {
            ids,
            texts: Some(&texts),
            vectors: None,
            attrs: &attrs,
        })
        .unwrap();
    }

    fn filled(n: u64, rng: &mut Rng) -> Engine {
        let mut e = Engine::new(EngineConfig::default()).unwrap();
        let ids: Vec<u64> = (1..=n).map(|i| i * 3).collect();
        store(&mut e, &ids, rng);
        // Searches record accesses, later and earlier than those stored.
        for _ in 0..n / 2 {
            let id = (rng.below(n) + 1) * 3;
            e.touch(&[id], rng.below(30) as f64);
        }
        e
    }

    /// Every admitted id sorted one comparison at a time: the order a page must follow.
    fn expected(e: &Engine, filter: Option<&Filter>, sort: Sort) -> Vec<u64> {
        let r = &e.records;
        let mut slots: Vec<u32> = r
            .live_slots()
            .filter(|&s| filter.is_none_or(|f| f.matches(r, s)))
            .collect();
        let value = |s: u32| match sort.column {
            Column::CreatedAt => r.created_at[s as usize],
            Column::Importance => f64::from(r.importance[s as usize]),
            Column::AccessCount => r.access_count(s) as f64,
            Column::LastAccessedAt => r.accessed_at(s),
        };
        slots.sort_by(|&a, &b| {
            let by = value(a)
                .partial_cmp(&value(b))
                .unwrap()
                .then(
                    r.created_at[a as usize]
                        .partial_cmp(&r.created_at[b as usize])
                        .unwrap(),
                )
                .then(r.id(a).cmp(&r.id(b)));
            if sort.descending {
                by.reverse()
            } else {
                by
            }
        });
        slots.into_iter().map(|s| r.id(s)).collect()
    }

    #[test]
    fn pages_follow_the_whole_order_with_ties_and_filters() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut e = filled(60, &mut rng);
        e.remove(&[3, 30, 90], false).unwrap();
        let filters = [
            None,
            Some(e.parse_filter(r#"{"agent_id": "agent1"}"#).unwrap()),
            Some(
                e.parse_filter(r#"{"importance": {"$gte": 0.5}, "table": "notes"}"#)
                    .unwrap(),
            ),
            Some(e.parse_filter(r#"{"user_id": "nobody"}"#).unwrap()),
            // Every record but those expired at 7: the others unread.
            Some(
                e.parse_filter(r#"{"expires_at": {"$not": {"$lte": 7}}}"#)
                    .unwrap(),
            ),
        ];
        for (_, column) in Column::ALL {
            for descending in [false, true] {
                let sort = Sort { column, descending };
                for filter in &filters {
                    let all = expected(&e, filter.as_ref(), sort);
                    assert_eq!(e.ids_sorted(filter.as_ref(), sort, 0, usize::MAX), all);
                    for limit in [1, 4, 7] {
                        for offset in [0, 1, 5, 30, all.len(), all.len() + 3] {
                            let page = e.ids_sorted(filter.as_ref(), sort, offset, limit);
                            let want: Vec<u64> =
                                all.iter().copied().skip(offset).take(limit).collect();
                            assert_eq!(page, want, "{sort:?} {offset} {limit}");
                        }
                    }
                }
            }
        }
        let by_time = e.ids_where(None, Order::CreatedAsc, 2, 5);
        let sort = Sort::from(Order::CreatedAsc);
        assert_eq!(by_time, expected(&e, None, sort)[2..7]);
    }

    /// A store of `n` records in a few scopes, some replaced and removed.
    fn churned(n: u64, rng: &mut Rng) -> Engine {
        let mut e = filled(n, rng);
        let mut gone: Vec<u64> = (0..n / 10).map(|_| (rng.below(n) + 1) * 3).collect();
        gone.sort_unstable();
        gone.dedup();
        e.remove(&gone, false).unwrap();
        let moved: Vec<u64> = (0..n / 10).map(|i| (i * 7 % n + 1) * 3).collect();
        store(&mut e, &moved, rng);
        e
    }

    const FILTERS: [&str; 10] = [
        r#"{"agent_id": "agent1"}"#,
        r#"{"agent_id": "agent1", "user_id": null, "table": "notes"}"#,
        r#"{"agent_id": {"$in": ["agent0", "agent2"]}, "table": {"$in": ["notes", "x"]}}"#,
        r#"{"agent_id": "agent2", "expires_at": {"$not": {"$lte": 7}}}"#,
        r#"{"expires_at": {"$not": {"$lte": 7}}}"#,
        r#"{"created_at": {"$gte": 2, "$lt": 9}, "agent_id": "agent0"}"#,
        r#"{"$and": [{"created_at": {"$gt": 3}}, {"created_at": {"$lte": 3}}]}"#,
        r#"{"created_at": {"$gte": 4, "$lte": 4}, "user_id": "user1"}"#,
        r#"{"user_id": "nobody"}"#,
        r#"{"importance": {"$gte": 0.5}, "agent_id": "agent1"}"#,
    ];

    #[test]
    fn a_walk_by_time_gives_the_page_a_pass_gives() {
        let mut rng = Rng(0x5eed);
        let e = churned(400, &mut rng);
        let (mut walked, mut passed) = (0, 0);
        let filters = FILTERS.map(|json| Some(e.parse_filter(json).unwrap()));
        for filter in filters.iter().chain([&None]) {
            for descending in [false, true] {
                let sort = Sort {
                    column: Column::CreatedAt,
                    descending,
                };
                let all = expected(&e, filter.as_ref(), sort);
                for limit in [0, 1, 3, 20, usize::MAX] {
                    for offset in [0, 2, 50, all.len()] {
                        let want: Vec<u64> = all.iter().copied().skip(offset).take(limit).collect();
                        match e.page_by_time(filter.as_ref(), descending, offset, limit) {
                            Some(page) => {
                                walked += 1;
                                assert_eq!(page, want, "{filter:?} {descending} {offset} {limit}");
                            }
                            None => passed += 1,
                        }
                        let page = e.ids_sorted(filter.as_ref(), sort, offset, limit);
                        assert_eq!(page, want, "{filter:?} {descending} {offset} {limit}");
                    }
                }
            }
        }
        assert!(walked > 100 && passed > 100, "{walked} {passed}");
    }

    #[test]
    fn a_walk_by_time_stops_where_the_filter_admits_too_few() {
        let mut rng = Rng(3);
        let mut e = filled(200, &mut rng);
        // One record of its own scope, older than every other.
        let mut old = attrs(&mut rng);
        old.scope[0] = Some("rare".into());
        old.created_at = -100.0;
        e.upsert(Batch {
            ids: &[9999],
            texts: Some(&["old".to_owned()]),
            vectors: None,
            attrs: &[old],
        })
        .unwrap();
        // Its scope among agent1's records: the walk meets agent1's newer
        // records first, then gives way to a pass.
        let f = e
            .parse_filter(r#"{"agent_id": {"$in": ["rare", "agent1"]}, "importance": {"$lt": 0}}"#)
            .unwrap();
        assert_eq!(e.page_by_time(Some(&f), true, 0, 1), None);
        let f = e.parse_filter(r#"{"agent_id": {"$in": ["rare", "agent1"]}, "evergreen": false, "created_at": {"$lt": -50}}"#).unwrap();
        assert_eq!(
            e.ids_sorted(Some(&f), Sort::from(Order::CreatedDesc), 0, 1),
            [9999]
        );
    }

    #[test]
    fn counts_from_the_totals_match_a_pass() {
        let mut rng = Rng(0xc0de);
        let e = churned(600, &mut rng);
        let mut grouped = 0;
        let windows = [
            r#"{"created_at": {"$gte": 14}, "user_id": null}"#,
            r#"{"created_at": {"$lt": -4}, "agent_id": {"$in": ["agent1", "agent2"]}}"#,
            r#"{"created_at": {"$gt": 3, "$lte": 5}, "table": "notes"}"#,
        ];
        for json in FILTERS.iter().chain(&windows) {
            let f = e.parse_filter(json).unwrap();
            let want = f.count(&e.records);
            if let Some(n) = e.count_by_groups(&f) {
                grouped += 1;
                assert_eq!(n, want, "{json}");
            }
            assert_eq!(e.count(Some(&f)), want, "{json}");
        }
        assert!(grouped >= 3, "{grouped}");
    }

    #[test]
    fn records_left_out_are_listed_only_within_the_cap() {
        let mut rng = Rng(21);
        let e = churned(600, &mut rng);
        let r = &e.records;
        for json in [
            r#"{"agent_id": {"$ne": "agent1"}}"#,
            r#"{"table": {"$nin": ["notes"]}, "expires_at": {"$not": {"$lte": 9}}}"#,
            r#"{"$or": [{"type": "none"}, {"user_id": "user0"}]}"#,
            r#"{"expires_at": {"$not": {"$lte": 9}}}"#,
        ] {
            let f = e.parse_filter(json).unwrap();
            let all = f.exclusion(r);
            assert_eq!(f.exclusion_within(r, usize::MAX), all, "{json}");
            // The bound told first is the parts' sizes summed: at least the union's.
            let n = all.as_ref().map_or(0, Vec::len);
            for cap in [0, n / 2, n, 2 * n] {
                let within = f.exclusion_within(r, cap);
                assert!(within.is_none() || within == all, "{json} {cap}");
                assert!(cap >= n || within.is_none(), "{json} {cap}");
            }
        }
        // A scope of a few records, most of the store left out: a pass reads less.
        let f = e
            .parse_filter(r#"{"user_id": "user0", "agent_id": {"$ne": "agent1"}}"#)
            .unwrap();
        assert!(e.by_groups(&f).is_none());
        assert_eq!(e.count(Some(&f)), f.count(r));
    }

    #[test]
    fn the_time_order_follows_every_change() {
        let mut rng = Rng(11);
        let mut e = churned(300, &mut rng);
        let kept = |e: &Engine| -> Vec<(u64, u64)> {
            let r = &e.records;
            let mut want: Vec<(u64, u64)> = r
                .live_slots()
                .map(|s| (ordered(r.created_at[s as usize]), r.id(s)))
                .collect();
            want.sort_unstable();
            assert_eq!(r.by_time.iter().copied().collect::<Vec<_>>(), want);
            want
        };
        let before = kept(&e);
        e.records.rebuild_index().unwrap();
        assert_eq!(kept(&e), before);
    }

    #[test]
    fn an_access_keeps_the_latest_time() {
        let mut rng = Rng(7);
        let e = filled(1, &mut rng);
        let slot = e.records.slot(3).unwrap();
        let before = e.records.accessed_at(slot);
        let count = e.records.access_count(slot);
        e.touch(&[3], before - 100.0);
        assert_eq!(e.records.accessed_at(slot), before);
        e.touch(&[3], before + 1.0);
        assert_eq!(e.records.accessed_at(slot), before + 1.0);
        assert_eq!(e.records.access_count(slot), count + 2);
    }

    #[test]
    fn groups_count_each_table_and_scope() {
        let mut rng = Rng(12345);
        let mut e = filled(80, &mut rng);
        e.remove(&[6, 9], false).unwrap();
        // Stored again elsewhere: out of one group, into another.
        store(&mut e, &[12, 15, 18, 21, 24], &mut rng);
        // The totals a load rebuilds are those kept.
        let kept = e.groups(None);
        e.records.rebuild_index().unwrap();
        assert_eq!(e.groups(None), kept);
        let filters = [
            r#"{"agent_id": "agent2"}"#,
            r#"{"importance": 1}"#,
            r#"{"expires_at": {"$not": {"$lte": 9}}}"#,
            r#"{"expires_at": {"$not": {"$lte": 100}}}"#,
        ];
        for json in [None].into_iter().chain(filters.map(Some)) {
            same_groups_as_a_pass(&e, json);
        }
        // Tables and scopes read from the totals, less the records left out.
        let big = churned(600, &mut rng);
        let mut read = 0;
        for json in FILTERS.iter().chain(&filters) {
            read += usize::from(big.by_groups(&big.parse_filter(json).unwrap()).is_some());
            same_groups_as_a_pass(&big, Some(json));
        }
        assert!(read >= 3, "{read}");
        assert!(e
            .groups(Some(&e.parse_filter(r#"{"table": "none"}"#).unwrap()))
            .is_empty());
    }

    /// Asserts that `e.groups` of the filter `json` counts what a look at each
    /// record counts, in its order.
    fn same_groups_as_a_pass(e: &Engine, json: Option<&str>) {
        let r = &e.records;
        let filter = json.map(|j| e.parse_filter(j).unwrap());
        let mut want: FxHashMap<(String, [Option<String>; 6]), usize> = FxHashMap::default();
        for slot in r.live_slots() {
            if filter.as_ref().is_some_and(|f| !f.matches(r, slot)) {
                continue;
            }
            let s = slot as usize;
            let table = r.strings.resolve(r.table[s]).to_owned();
            *want
                .entry((table, std::array::from_fn(|f| resolved(r, r.scope[f][s]))))
                .or_default() += 1;
        }
        let groups = e.groups(filter.as_ref());
        assert_eq!(groups.len(), want.len(), "{json:?}");
        for g in &groups {
            assert_eq!(want[&(g.table.clone(), g.scope.clone())], g.count, "{g:?}");
        }
        for pair in groups.windows(2) {
            let (a, b) = (&pair[0], &pair[1]);
            assert!(
                (&a.table, std::cmp::Reverse(a.count), &a.scope)
                    < (&b.table, std::cmp::Reverse(b.count), &b.scope)
            );
        }
    }

    #[test]
    fn a_column_is_named_as_its_field() {
        assert_eq!(Column::parse("access_count").unwrap(), Column::AccessCount);
        let err = Column::parse("size").unwrap_err().to_string();
        assert!(
            err.contains("importance") && err.contains("\"size\""),
            "{err}"
        );
    }
}
