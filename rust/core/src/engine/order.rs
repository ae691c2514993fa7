//! Pages of the records a filter admits, sorted by a column, and the count
//! of those records per table and scope.
//!
//! A page is one pass over the admitted slots, reading the columns the
//! engine keeps current (access counts and times change with every search,
//! under a read lock, so no order of them is kept ahead); it keeps the first
//! `offset + limit` keys of the pass (`select_nth_unstable`, linear) and
//! sorts only those. The counts of the whole store are kept as records come
//! and go ([`Records::group`]); those of a filter take a pass.

use rustc_hash::FxHashMap;

use super::filter::Filter;
use super::records::{ordered, Records, NONE};
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
        let mut groups: Vec<Group> = match filter.map(|f| (f, f.exclusion(r))) {
            // The totals kept, less the few records left out (those expired).
            Some((_, Some(except))) => {
                let mut counts = r.groups.clone();
                for slot in except {
                    let n = counts
                        .get_mut(&r.group(slot))
                        .expect("a live record's group");
                    *n -= 1;
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

    fn filled(n: u64, rng: &mut Rng) -> Engine {
        let mut e = Engine::new(EngineConfig::default()).unwrap();
        let ids: Vec<u64> = (1..=n).map(|i| i * 3).collect();
        let attrs: Vec<Attrs> = ids.iter().map(|_| attrs(rng)).collect();
        let texts: Vec<String> = ids.iter().map(|i| format!("record {i}")).collect();
        e.upsert(Batch {
            ids: &ids,
            texts: Some(&texts),
            vectors: None,
            attrs: &attrs,
        })
        .unwrap();
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
        let moved: Vec<Attrs> = (0..5).map(|_| attrs(&mut rng)).collect();
        let texts: Vec<String> = (0..5).map(|i| format!("moved {i}")).collect();
        e.upsert(Batch {
            ids: &[12, 15, 18, 21, 24],
            texts: Some(&texts),
            vectors: None,
            attrs: &moved,
        })
        .unwrap();
        // The totals a load rebuilds are those kept.
        let kept = e.groups(None);
        e.records.rebuild_index().unwrap();
        assert_eq!(e.groups(None), kept);
        let r = &e.records;
        for json in [
            None,
            Some(r#"{"agent_id": "agent2"}"#),
            Some(r#"{"importance": 1}"#),
            Some(r#"{"expires_at": {"$not": {"$lte": 9}}}"#),
            Some(r#"{"expires_at": {"$not": {"$lte": 100}}}"#),
        ] {
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
            assert_eq!(groups.len(), want.len());
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
        assert!(e
            .groups(Some(&e.parse_filter(r#"{"table": "none"}"#).unwrap()))
            .is_empty());
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
