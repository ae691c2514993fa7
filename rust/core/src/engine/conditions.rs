//! Which records a read admits, as typed fields: the table(s), the type(s),
//! the scope, the creation-time range, the `unique` flag, the versions, and
//! the caller's own filter, the only part that stays an expression. The
//! binding fills them from a call's arguments; [`Conditions::build`] turns
//! them, with expiry at the caller's clock, into one [`Filter`] against the
//! records, so no expression is written only to be parsed again.

use super::filter::{Field, Filter, Node, Scalar};
use super::filter_syntax::{Cmp, Parsed};
use super::records::Records;
use crate::error::{Error, Result};

/// The metadata key under which the engine's copy of a unique record's
/// metadata holds its `unique` flag (the engine keeps no column for it; the
/// stored metadata never has the key).
pub const UNIQUE_KEY: &str = "memlane:unique";

/// Which versions a read admits.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum Versions {
    /// Current records only: the superseded ones are left out (cheaply: see
    /// [`super::SearchRequest::current_only`]).
    #[default]
    Current,
    /// Every version, superseded ones too.
    Every,
    /// The versions true at `as_of` (valid time, as known now); the ones the
    /// store held for current at `known_at` (recorded by then and not yet
    /// closed then: a closed version's `updated_at` is when it was closed);
    /// with both, those true at `as_of` as the store knew it at `known_at`
    /// (recorded by then, and valid at `as_of` by the `valid_to` it had then:
    /// none, for a version closed since).
    At {
        as_of: Option<f64>,
        known_at: Option<f64>,
    },
}

impl Versions {
    /// The versions a search's `as_of`, `known_at` and `include_superseded`
    /// ask for; `include_superseded` with either time is refused.
    pub fn new(as_of: Option<f64>, known_at: Option<f64>, every: bool) -> Result<Versions> {
        match (as_of, known_at, every) {
            (None, None, false) => Ok(Versions::Current),
            (None, None, true) => Ok(Versions::Every),
            (_, _, true) => Err(Error::invalid(
                "give as_of or known_at, or include_superseded, not both",
            )),
            (as_of, known_at, false) => Ok(Versions::At { as_of, known_at }),
        }
    }
}

/// A read's conditions, each checked where it was given; `None` (or an
/// unset scope field) admits any value.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Conditions {
    pub tables: Option<Vec<String>>,
    pub types: Option<Vec<String>>,
    /// The scope fields ([`super::SCOPE_FIELDS`], in order) a record must equal.
    pub scope: [Option<String>; 6],
    /// The earliest creation time admitted (included).
    pub start: Option<f64>,
    /// The creation time admitted up to (not included).
    pub end: Option<f64>,
    /// Only the unique records (true), only the others (false).
    pub unique: Option<bool>,
    pub versions: Versions,
    /// The caller's own filter, parsed (the grammar of [`super::filter_syntax`]).
    pub filter: Option<Parsed>,
}

/// What [`Conditions::build`] made: the filter (`None`: every record) and
/// whether superseded records are left out besides.
#[derive(Clone, Debug, PartialEq)]
pub struct Admitted {
    pub filter: Option<Filter>,
    pub current_only: bool,
}

fn string(s: &str, records: &Records) -> Scalar {
    Scalar::Str(Box::from(s), records.strings.get(s))
}

fn one_of(field: Field, values: &[String], records: &Records) -> Node {
    match values {
        [one] => Node::Eq(field, string(one, records)),
        many => Node::In(field, many.iter().map(|v| string(v, records)).collect()),
    }
}

/// `field` null (the record has none) or above `t`.
fn null_or_after(field: Field, t: f64) -> Node {
    Node::Or(vec![
        Node::Eq(Field::ValidTo, Scalar::Null),
        Node::Range(field, Cmp::Gt, Scalar::Num(t)),
    ])
}

impl Conditions {
    /// The conditions against `records`; with `expire_at`, the records
    /// expired then are left out (a record that never expires has no
    /// `expires_at`, which `$lte` never matches).
    pub fn build(&self, records: &Records, expire_at: Option<f64>) -> Admitted {
        let mut parts = Vec::new();
        if let Some(tables) = &self.tables {
            parts.push(one_of(Field::Table, tables, records));
        }
        if let Some(types) = &self.types {
            parts.push(one_of(Field::Type, types, records));
        }
        for (i, value) in self.scope.iter().enumerate() {
            if let Some(v) = value {
                parts.push(Node::Eq(Field::Scope(i as u8), string(v, records)));
            }
        }
        if let Some(t) = self.start {
            parts.push(Node::Range(Field::CreatedAt, Cmp::Gte, Scalar::Num(t)));
        }
        if let Some(t) = self.end {
            parts.push(Node::Range(Field::CreatedAt, Cmp::Lt, Scalar::Num(t)));
        }
        if let Some(unique) = self.unique {
            let key = Field::Meta(records.keys.get(UNIQUE_KEY));
            parts.push(if unique {
                Node::Eq(key, Scalar::Bool(true))
            } else {
                Node::Exists(key, false)
            });
        }
        if let Some(filter) = &self.filter {
            parts.push(Filter::bind(filter, records).into_root());
        }
        if let Versions::At { as_of, known_at } = self.versions {
            if let Some(t) = as_of {
                parts.push(Node::Range(Field::CreatedAt, Cmp::Lte, Scalar::Num(t)));
                let mut open = null_or_after(Field::ValidTo, t);
                if let (Node::Or(either), Some(k)) = (&mut open, known_at) {
                    // Still open as the store knew it at `known_at`: closed later.
                    either.push(Node::Range(Field::UpdatedAt, Cmp::Gt, Scalar::Num(k)));
                }
                parts.push(open);
            }
            if let Some(t) = known_at {
                parts.push(Node::Range(Field::RecordedAt, Cmp::Lte, Scalar::Num(t)));
                if as_of.is_none() {
                    parts.push(null_or_after(Field::UpdatedAt, t));
                }
            }
        }
        if let Some(now) = expire_at {
            // The records' expiry order lists those it leaves out, so with
            // nothing else to narrow it no other record is read
            // ([`Filter::exclusion`]).
            parts.push(Node::Not(Box::new(Node::Range(
                Field::ExpiresAt,
                Cmp::Lte,
                Scalar::Num(now),
            ))));
        }
        let filter = match parts.len() {
            0 => None,
            1 => parts.pop().map(Filter::from_root),
            _ => Some(Filter::from_root(Node::And(parts))),
        };
        Admitted {
            filter,
            current_only: self.versions == Versions::Current,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::records::{flatten_metadata, Attrs};

    /// Slot i: table t{i % 2}, type k{i % 3}, agent a{i % 2}, created at
    /// 100 i, recorded at 100 i + 50; slot 1 superseded at 250 (closed at
    /// 260), slot 2 expires at 500, slot 3 unique.
    fn records() -> Records {
        let mut r = Records::default();
        for i in 0..5u64 {
            let meta = if i == 3 {
                format!(r#"{{"{UNIQUE_KEY}": true, "n": {i}}}"#)
            } else {
                format!(r#"{{"n": {i}}}"#)
            };
            r.insert(
                i,
                &Attrs {
                    id: Some(format!("r{i}")),
                    tbl: format!("t{}", i % 2),
                    r#type: format!("k{}", i % 3),
                    scope: [Some(format!("a{}", i % 2)), None, None, None, None, None],
                    importance: 0.5,
                    evergreen: false,
                    created_at: 100.0 * i as f64,
                    updated_at: if i == 1 { 260.0 } else { 100.0 * i as f64 },
                    last_accessed_at: 0.0,
                    access_count: 0,
                    valid_to: (i == 1).then_some(250.0),
                    expires_at: (i == 2).then_some(500.0),
                    recorded_at: 100.0 * i as f64 + 50.0,
                    speaker: None,
                    metadata: flatten_metadata(&meta).unwrap(),
                },
            );
        }
        r
    }

    fn admitted(c: &Conditions, expire_at: Option<f64>) -> (Vec<u32>, bool) {
        let r = records();
        let a = c.build(&r, expire_at);
        let slots = a
            .filter
            .map_or_else(|| r.live_slots().collect(), |f| f.select(&r).slots);
        (slots, a.current_only)
    }

    #[test]
    fn each_field_admits_what_it_names() {
        let every = Conditions {
            versions: Versions::Every,
            ..Conditions::default()
        };
        assert_eq!(every.build(&records(), None).filter, None);
        let with = |c: Conditions| admitted(&c, None).0;
        let tables = |t: &[&str]| Some(t.iter().map(|s| s.to_string()).collect());
        assert_eq!(
            with(Conditions {
                tables: tables(&["t1"]),
                ..every.clone()
            }),
            vec![1, 3]
        );
        assert_eq!(
            with(Conditions {
                tables: tables(&["t1", "t0", "nowhere"]),
                types: tables(&["k0"]),
                ..every.clone()
            }),
            vec![0, 3]
        );
        // An empty list admits nothing; a value no record holds, nothing.
        assert!(with(Conditions {
            types: tables(&[]),
            ..every.clone()
        })
        .is_empty());
        let mut scope: [Option<String>; 6] = Default::default();
        scope[0] = Some("a0".into());
        assert_eq!(
            with(Conditions {
                scope: scope.clone(),
                start: Some(100.0),
                end: Some(400.0),
                ..every.clone()
            }),
            vec![2]
        );
        assert_eq!(
            with(Conditions {
                unique: Some(true),
                ..every.clone()
            }),
            vec![3]
        );
        assert_eq!(
            with(Conditions {
                unique: Some(false),
                filter: Some(Parsed::read(&serde_json::json!({"n": {"$gte": 2}})).unwrap()),
                ..every.clone()
            }),
            vec![2, 4]
        );
    }

    #[test]
    fn versions_and_expiry() {
        let (slots, current_only) = admitted(&Conditions::default(), None);
        assert_eq!((slots.len(), current_only), (5, true));
        let at = |as_of, known_at| Conditions {
            versions: Versions::new(as_of, known_at, false).unwrap(),
            ..Conditions::default()
        };
        // As of 200: created by then (0, 1, 2), and slot 1 still valid then.
        assert_eq!(
            admitted(&at(Some(200.0), None), None),
            (vec![0, 1, 2], false)
        );
        assert_eq!(admitted(&at(Some(250.0), None), None).0, vec![0, 2]);
        // Known at 255: recorded by then (0, 1, 2), and slot 1 not yet closed.
        assert_eq!(admitted(&at(None, Some(255.0)), None).0, vec![0, 1, 2]);
        assert_eq!(admitted(&at(None, Some(270.0)), None).0, vec![0, 2]);
        // Both: what was true at 200 as the store knew it at 160.
        assert_eq!(admitted(&at(Some(200.0), Some(160.0)), None).0, vec![0, 1]);
        // At 255 slot 1 was not yet closed: then it was true at 270 too; by 265
        // it was closed at 250, and slot 2 had been recorded.
        assert_eq!(
            admitted(&at(Some(270.0), Some(255.0)), None).0,
            vec![0, 1, 2]
        );
        assert_eq!(admitted(&at(Some(270.0), Some(265.0)), None).0, vec![0, 2]);
        // Closed by then, and true at 200 all the same.
        assert_eq!(
            admitted(&at(Some(200.0), Some(265.0)), None).0,
            vec![0, 1, 2]
        );
        let every = Conditions {
            versions: Versions::Every,
            ..Conditions::default()
        };
        assert_eq!(admitted(&every, Some(499.0)).0, vec![0, 1, 2, 3, 4]);
        assert_eq!(admitted(&every, Some(500.0)).0, vec![0, 1, 3, 4]);
        let err = Versions::new(Some(1.0), None, true)
            .unwrap_err()
            .to_string();
        assert!(err.contains("not both"), "{err}");
        assert_eq!(Versions::new(None, None, true).unwrap(), Versions::Every);
    }

    #[test]
    fn the_callers_filter_is_bound_when_built() {
        // Parsed once; the key and the string it names are looked up at each build.
        let c = Conditions {
            versions: Versions::Every,
            filter: Some(Parsed::read(&serde_json::json!({"later": "yes"})).unwrap()),
            ..Conditions::default()
        };
        let mut r = records();
        let admits = |r: &Records| c.build(r, None).filter.unwrap().select(r).slots;
        assert!(admits(&r).is_empty());
        r.insert(
            9,
            &Attrs {
                metadata: flatten_metadata(r#"{"later": "yes"}"#).unwrap(),
                ..Attrs::blank("t0", "k0")
            },
        );
        assert_eq!(admits(&r), vec![5]);
    }
}
