//! Filters bound to the records, and their evaluation to the set of
//! matching slots. The grammar and every check of it live in
//! [`super::filter_syntax`]; binding a parsed filter only looks its metadata
//! keys and strings up in the records, so it cannot fail.
//!
//! Semantics, shared with the Python reference in the tests: numbers compare
//! as f64, strings by code point, booleans and null only by equality, and
//! values of different types are never equal nor ordered. A field with
//! several values (a metadata list) matches a condition if any value does;
//! `$ne`, `$nin` and `$not` are the negations of `$eq`, `$in` and their
//! operand, so they also match records that lack the field. A scope field a
//! record lacks equals null (`{"agent_id": null}` selects records without
//! one).
//!
//! Evaluation: equality and membership on indexed fields (id, table, type,
//! scope, evergreen, metadata) read postings; `$and` starts from its cheapest
//! such child and `$or` unions its children when all have postings. Only
//! those candidates are then checked against the columns, so a filter that
//! selects 1% of the store examines about 1% of it. Filters with no such
//! handle (a lone range or negation) scan the live slots.

use super::filter_syntax::{self as syntax, Cmp, Parsed, ParsedNode};
use super::records::{PostingKey, Records, Value, ValueKey, NONE};
use crate::error::Result;

/// A field as evaluation reads it: a metadata key by its interned id, `None`
/// when no record ever had it.
pub type Field = syntax::Field<Option<u32>>;

/// A query-side scalar; a string carries its interned id, if any record
/// holds it.
pub type Scalar = syntax::Scalar<Option<u32>>;

pub type Node = syntax::Node<Option<u32>, Option<u32>>;

/// A filter bound to the records: what evaluation reads.
#[derive(Clone, Debug, PartialEq)]
pub struct Filter {
    root: Node,
}

/// What evaluating a filter found and how much it looked at.
#[derive(Clone, Debug, Default)]
pub struct Selection {
    /// Matching live slots, ascending.
    pub slots: Vec<u32>,
    /// Slots checked against the columns.
    pub examined: usize,
}

impl Filter {
    /// Parses `json` and binds it to `records`.
    pub fn parse(json: &str, records: &Records) -> Result<Filter> {
        Ok(Filter::bind(&Parsed::from_json_text(json)?, records))
    }

    /// `parsed` with its metadata keys and strings looked up in `records`.
    pub fn bind(parsed: &Parsed, records: &Records) -> Filter {
        Filter {
            root: bind(parsed.root(), records),
        }
    }

    pub fn all() -> Filter {
        Filter { root: Node::All }
    }

    /// A filter of conditions built from typed fields ([`super::conditions`]).
    pub(super) fn from_root(root: Node) -> Filter {
        Filter { root }
    }

    pub(super) fn into_root(self) -> Node {
        self.root
    }

    pub fn and(parts: Vec<Filter>) -> Filter {
        Filter {
            root: Node::And(parts.into_iter().map(|f| f.root).collect()),
        }
    }

    pub fn root(&self) -> &Node {
        &self.root
    }

    /// Whether the filter reads a column that searches change (the access
    /// count and time): what it selects may differ between two searches of
    /// an unchanged engine.
    pub fn reads_access(&self) -> bool {
        fn reads(n: &Node) -> bool {
            match n {
                Node::All => false,
                Node::And(parts) | Node::Or(parts) => parts.iter().any(reads),
                Node::Not(inner) => reads(inner),
                Node::Eq(f, _) | Node::In(f, _) | Node::Range(f, _, _) | Node::Exists(f, _) => {
                    matches!(f, Field::AccessCount | Field::LastAccessedAt)
                }
            }
        }
        reads(&self.root)
    }

    /// Whether the filter accepts every record.
    pub fn is_all(&self) -> bool {
        match &self.root {
            Node::All => true,
            Node::And(c) => c.iter().all(|n| matches!(n, Node::All)),
            _ => false,
        }
    }

    pub fn matches(&self, records: &Records, slot: u32) -> bool {
        records.is_live(slot) && eval(&self.root, records, slot)
    }

    /// The matching live slots, ascending.
    pub fn select(&self, records: &Records) -> Selection {
        match candidates(&self.root, records) {
            Some(cands) => Selection {
                examined: cands.len(),
                slots: cands
                    .into_iter()
                    .filter(|&s| self.matches(records, s))
                    .collect(),
            },
            None => Selection {
                examined: records.len(),
                slots: records
                    .live_slots()
                    .filter(|&s| eval(&self.root, records, s))
                    .collect(),
            },
        }
    }
}

fn bind(node: &ParsedNode, records: &Records) -> Node {
    let field = |f: &syntax::Field<Box<str>>| f.map_key(|key| records.keys.get(key));
    let scalar = |q: &syntax::Scalar<()>| match q {
        syntax::Scalar::Null => Scalar::Null,
        syntax::Scalar::Bool(b) => Scalar::Bool(*b),
        syntax::Scalar::Num(x) => Scalar::Num(*x),
        syntax::Scalar::Str(s, ()) => Scalar::Str(s.clone(), records.strings.get(s)),
    };
    match node {
        syntax::Node::All => Node::All,
        syntax::Node::And(parts) => Node::And(parts.iter().map(|n| bind(n, records)).collect()),
        syntax::Node::Or(parts) => Node::Or(parts.iter().map(|n| bind(n, records)).collect()),
        syntax::Node::Not(inner) => Node::Not(Box::new(bind(inner, records))),
        syntax::Node::Eq(f, q) => Node::Eq(field(f), scalar(q)),
        syntax::Node::In(f, qs) => Node::In(field(f), qs.iter().map(scalar).collect()),
        syntax::Node::Range(f, cmp, q) => Node::Range(field(f), *cmp, scalar(q)),
        syntax::Node::Exists(f, want) => Node::Exists(field(f), *want),
    }
}

/// The values `field` holds in `slot`, passed one by one to `f` until it
/// returns true; returns whether it did. `present` learns if any value exists.
fn any_value(
    field: Field,
    records: &Records,
    slot: u32,
    present: &mut bool,
    mut f: impl FnMut(&Value) -> bool,
) -> bool {
    let s = slot as usize;
    let single = match field {
        Field::Id => {
            let v = records.key[s];
            if v == NONE {
                return false;
            }
            Value::Str(v)
        }
        Field::Table => Value::Str(records.table[s]),
        Field::Type => Value::Str(records.kind[s]),
        Field::Scope(i) => {
            let v = records.scope[i as usize][s];
            if v == NONE {
                // Absent: equal to null, yet not present.
                return f(&Value::Null);
            }
            Value::Str(v)
        }
        Field::Importance => Value::Num(f64::from(records.importance[s])),
        Field::Evergreen => Value::Bool(records.evergreen[s]),
        Field::AccessCount => Value::Num(records.access_count(slot) as f64),
        Field::CreatedAt => Value::Num(records.created_at[s]),
        Field::UpdatedAt => Value::Num(records.updated_at[s]),
        Field::LastAccessedAt => Value::Num(records.accessed_at(slot)),
        Field::ValidTo => {
            if !records.is_closed(slot) {
                // Current: equal to null, yet not present.
                return f(&Value::Null);
            }
            Value::Num(records.valid_to[s])
        }
        Field::ExpiresAt => {
            if !records.expires_at[s].is_finite() {
                // Never expires: equal to null, yet not present.
                return f(&Value::Null);
            }
            Value::Num(records.expires_at[s])
        }
        Field::RecordedAt => Value::Num(records.recorded_at[s]),
        Field::Meta(None) => return false,
        Field::Meta(Some(key)) => {
            let values = records.meta_values(slot, key);
            *present = !values.is_empty();
            return values.iter().any(|(_, v)| f(v));
        }
    };
    *present = true;
    f(&single)
}

fn equal(v: &Value, q: &Scalar) -> bool {
    match (v, q) {
        (Value::Null, Scalar::Null) => true,
        (Value::Bool(a), Scalar::Bool(b)) => a == b,
        (Value::Num(a), Scalar::Num(b)) => a == b,
        (Value::Str(a), Scalar::Str(_, Some(b))) => a == b,
        _ => false,
    }
}

fn ordered(v: &Value, cmp: Cmp, q: &Scalar, records: &Records) -> bool {
    let ord = match (v, q) {
        (Value::Num(a), Scalar::Num(b)) => a.partial_cmp(b),
        (Value::Str(a), Scalar::Str(b, _)) => Some(records.strings.resolve(*a).cmp(b)),
        _ => None,
    };
    let Some(ord) = ord else { return false };
    match cmp {
        Cmp::Gt => ord.is_gt(),
        Cmp::Gte => ord.is_ge(),
        Cmp::Lt => ord.is_lt(),
        Cmp::Lte => ord.is_le(),
    }
}

fn eval(node: &Node, records: &Records, slot: u32) -> bool {
    let mut present = false;
    match node {
        Node::All => true,
        Node::And(c) => c.iter().all(|n| eval(n, records, slot)),
        Node::Or(c) => c.iter().any(|n| eval(n, records, slot)),
        Node::Not(n) => !eval(n, records, slot),
        Node::Eq(f, q) => any_value(*f, records, slot, &mut present, |v| equal(v, q)),
        Node::In(f, qs) => any_value(*f, records, slot, &mut present, |v| {
            qs.iter().any(|q| equal(v, q))
        }),
        Node::Range(f, cmp, q) => any_value(*f, records, slot, &mut present, |v| {
            ordered(v, *cmp, q, records)
        }),
        Node::Exists(f, want) => {
            any_value(*f, records, slot, &mut present, |_| false);
            present == *want
        }
    }
}

/// The postings key of `field == q`, if the field is indexed. `Some(None)`
/// means indexed but no record can match (a string nobody holds).
fn posting_key(field: Field, q: &Scalar) -> Option<Option<PostingKey>> {
    let string = |q: &Scalar| match q {
        Scalar::Str(_, id) => Some(*id),
        _ => None,
    };
    Some(match field {
        Field::Id => string(q).flatten().map(PostingKey::Id),
        Field::Table => string(q).flatten().map(PostingKey::Table),
        Field::Type => string(q).flatten().map(PostingKey::Type),
        // Null (no scope value) has no postings: it is found by a scan.
        Field::Scope(i) => string(q)?.map(|id| PostingKey::Scope(i, id)),
        Field::Evergreen => match q {
            Scalar::Bool(b) => Some(PostingKey::Evergreen(*b)),
            _ => None,
        },
        Field::Meta(None) => None,
        Field::Meta(Some(key)) => {
            let value = match q {
                Scalar::Null => Some(ValueKey::Null),
                Scalar::Bool(b) => Some(ValueKey::Bool(*b)),
                Scalar::Num(x) => Some(ValueKey::num(*x)),
                Scalar::Str(_, id) => id.map(ValueKey::Str),
            };
            value.map(|v| PostingKey::Meta(key, v))
        }
        Field::Importance
        | Field::AccessCount
        | Field::CreatedAt
        | Field::UpdatedAt
        | Field::LastAccessedAt
        | Field::ValidTo
        | Field::ExpiresAt
        | Field::RecordedAt => return None,
    })
}

fn union(lists: Vec<&[u32]>) -> Vec<u32> {
    let mut out: Vec<u32> = lists.into_iter().flatten().copied().collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// A sorted superset of the slots matching `node`, read from postings, or
/// `None` when only a scan can tell.
fn candidates(node: &Node, records: &Records) -> Option<Vec<u32>> {
    match node {
        Node::Eq(f, q) => {
            posting_key(*f, q).map(|key| key.map_or(Vec::new(), |k| records.postings(&k).to_vec()))
        }
        Node::In(f, qs) => {
            let mut lists = Vec::with_capacity(qs.len());
            for q in qs {
                if let Some(k) = posting_key(*f, q)? {
                    lists.push(records.postings(&k));
                }
            }
            Some(union(lists))
        }
        Node::And(children) => {
            // Estimate each child's size cheaply before materialising the smallest.
            children
                .iter()
                .filter_map(|c| estimate(c, records).map(|n| (n, c)))
                .min_by_key(|(n, _)| *n)
                .and_then(|(_, c)| candidates(c, records))
        }
        Node::Or(children) => {
            let parts = children
                .iter()
                .map(|c| candidates(c, records))
                .collect::<Option<Vec<_>>>()?;
            Some(union(parts.iter().map(Vec::as_slice).collect()))
        }
        Node::All | Node::Not(_) | Node::Range(..) | Node::Exists(..) => None,
    }
}

/// An upper bound on the size of `candidates(node)`, or `None` if it has none.
fn estimate(node: &Node, records: &Records) -> Option<usize> {
    match node {
        Node::Eq(f, q) => posting_key(*f, q).map(|k| k.map_or(0, |k| records.postings(&k).len())),
        Node::In(f, qs) => qs.iter().try_fold(0usize, |acc, q| {
            posting_key(*f, q).map(|k| acc + k.map_or(0, |k| records.postings(&k).len()))
        }),
        Node::And(c) => c.iter().filter_map(|n| estimate(n, records)).min(),
        Node::Or(c) => c
            .iter()
            .try_fold(0usize, |acc, n| Some(acc + estimate(n, records)?)),
        Node::All | Node::Not(_) | Node::Range(..) | Node::Exists(..) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::records::{flatten_metadata, Attrs};

    fn store() -> Records {
        let mut r = Records::default();
        let rows = [
            (
                "memories",
                Some("a"),
                r#"{"source": "telegram", "n": 1, "tags": ["x", "y"]}"#,
            ),
            (
                "memories",
                Some("b"),
                r#"{"source": "discord", "n": 2.5, "flag": true}"#,
            ),
            ("facts", Some("a"), r#"{"n": "3", "nested": {"k": null}}"#),
            ("facts", None, r#"{}"#),
        ];
        for (i, (table, agent, meta)) in rows.into_iter().enumerate() {
            r.insert(
                100 + i as u64,
                &Attrs {
                    id: Some(format!("rec-{i}")),
                    tbl: table.into(),
                    r#type: if i % 2 == 0 { "semantic" } else { "episodic" }.into(),
                    scope: [agent.map(String::from), None, None, None, None, None],
                    importance: i as f32 / 4.0,
                    evergreen: i == 3,
                    created_at: 1000.0 + i as f64,
                    updated_at: 0.0,
                    last_accessed_at: 2000.0 + i as f64,
                    access_count: i as u64 * 10,
                    valid_to: None,
                    expires_at: (i == 1).then_some(5000.0),
                    recorded_at: 3000.0 + i as f64,
                    speaker: None,
                    metadata: flatten_metadata(meta).unwrap(),
                },
            );
        }
        r
    }

    fn store_attrs() -> Attrs {
        Attrs::blank("t", "k")
    }

    fn sel(r: &Records, json: &str) -> Vec<u32> {
        Filter::parse(json, r).unwrap().select(r).slots
    }

    #[test]
    fn expiry_and_recording_times() {
        let r = store();
        // A record that never expires has no expires_at: `$not $lte` keeps it.
        assert_eq!(sel(&r, r#"{"expires_at": {"$lte": 6000}}"#), vec![1]);
        assert_eq!(
            sel(&r, r#"{"expires_at": {"$not": {"$lte": 6000}}}"#),
            vec![0, 2, 3]
        );
        assert_eq!(sel(&r, r#"{"expires_at": null}"#), vec![0, 2, 3]);
        assert_eq!(sel(&r, r#"{"recorded_at": {"$lte": 3001}}"#), vec![0, 1]);
        assert!(Filter::parse(r#"{"recorded_at": null}"#, &r).is_err());
    }

    #[test]
    fn operators_match_by_hand() {
        let r = store();
        assert_eq!(sel(&r, r#"{}"#), vec![0, 1, 2, 3]);
        assert_eq!(sel(&r, r#"{"table": "memories"}"#), vec![0, 1]);
        assert_eq!(sel(&r, r#"{"agent_id": "a"}"#), vec![0, 2]);
        assert_eq!(sel(&r, r#"{"agent_id": {"$ne": "a"}}"#), vec![1, 3]);
        assert_eq!(sel(&r, r#"{"agent_id": {"$exists": false}}"#), vec![3]);
        assert_eq!(
            sel(&r, r#"{"metadata.source": {"$in": ["telegram", "slack"]}}"#),
            vec![0]
        );
        assert_eq!(
            sel(&r, r#"{"metadata.source": {"$nin": ["telegram"]}}"#),
            vec![1, 2, 3]
        );
        // Numbers and strings never compare with each other.
        assert_eq!(sel(&r, r#"{"metadata.n": {"$gt": 1}}"#), vec![1]);
        assert_eq!(
            sel(&r, r#"{"metadata.n": {"$gte": 1, "$lt": 3}}"#),
            vec![0, 1]
        );
        assert_eq!(sel(&r, r#"{"metadata.n": {"$gte": "3"}}"#), vec![2]);
        assert_eq!(sel(&r, r#"{"metadata.n": 1.0}"#), vec![0]);
        // Lists match if any element does.
        assert_eq!(sel(&r, r#"{"metadata.tags": "y"}"#), vec![0]);
        assert_eq!(sel(&r, r#"{"metadata.tags": {"$ne": "y"}}"#), vec![1, 2, 3]);
        assert_eq!(sel(&r, r#"{"metadata.nested.k": null}"#), vec![2]);
        assert_eq!(
            sel(&r, r#"{"metadata.nested.k": {"$exists": true}}"#),
            vec![2]
        );
        assert_eq!(sel(&r, r#"{"metadata.flag": true}"#), vec![1]);
        assert_eq!(sel(&r, r#"{"metadata.flag": 1}"#), Vec::<u32>::new());
        assert_eq!(
            sel(&r, r#"{"metadata.unknown": {"$exists": false}}"#),
            vec![0, 1, 2, 3]
        );
        assert_eq!(
            sel(&r, r#"{"metadata.unknown": {"$ne": 1}}"#),
            vec![0, 1, 2, 3]
        );
        assert_eq!(
            sel(
                &r,
                r#"{"$or": [{"agent_id": "b"}, {"table": "facts", "type": "episodic"}]}"#
            ),
            vec![1, 3]
        );
        assert_eq!(sel(&r, r#"{"$not": {"table": "facts"}}"#), vec![0, 1]);
        assert_eq!(
            sel(&r, r#"{"importance": {"$not": {"$gte": 0.5}}}"#),
            vec![0, 1]
        );
        assert_eq!(
            sel(&r, r#"{"created_at": {"$gte": 1001, "$lte": 1002}}"#),
            vec![1, 2]
        );
        // Decimal times round-trip exactly (serde_json's float_roundtrip).
        let mut exact = Records::default();
        let t = 1_795_318_020.693_239_5_f64;
        exact.insert(
            1,
            &Attrs {
                created_at: t,
                ..store_attrs()
            },
        );
        assert_eq!(sel(&exact, &format!(r#"{{"created_at": {t}}}"#)), vec![0]);
        assert_eq!(sel(&r, r#"{"evergreen": true}"#), vec![3]);
        assert_eq!(sel(&r, r#"{"table": "nothing"}"#), Vec::<u32>::new());
        assert_eq!(
            sel(
                &r,
                r#"{"$and": [{"table": "memories"}, {"agent_id": "a"}]}"#
            ),
            vec![0]
        );
    }

    #[test]
    fn postings_narrow_the_scan() {
        let r = store();
        let f = Filter::parse(r#"{"table": "memories", "metadata.n": {"$gt": 0}}"#, &r).unwrap();
        let s = f.select(&r);
        assert_eq!(s.slots, vec![0, 1]);
        assert_eq!(s.examined, 2);
        let f = Filter::parse(r#"{"metadata.n": {"$gt": 0}}"#, &r).unwrap();
        assert_eq!(f.select(&r).examined, 4);
    }

    #[test]
    fn record_fields_match_by_hand() {
        let r = store();
        // Slots 0..4 hold ids rec-0..rec-3, importance i/4, access_count 10 i,
        // last_accessed_at 2000 + i; slot 3 has no agent and is evergreen.
        assert_eq!(sel(&r, r#"{"id": "rec-2"}"#), vec![2]);
        assert_eq!(sel(&r, r#"{"id": "nobody"}"#), Vec::<u32>::new());
        assert_eq!(
            sel(&r, r#"{"id": {"$in": ["rec-1", "rec-3", "x"]}}"#),
            vec![1, 3]
        );
        assert_eq!(
            sel(&r, r#"{"id": {"$nin": ["rec-1", "rec-3"]}}"#),
            vec![0, 2]
        );
        assert_eq!(sel(&r, r#"{"id": {"$ne": "rec-0"}}"#), vec![1, 2, 3]);
        assert_eq!(sel(&r, r#"{"id": {"$gte": "rec-2"}}"#), vec![2, 3]);
        assert_eq!(sel(&r, r#"{"type": "episodic"}"#), vec![1, 3]);
        assert_eq!(sel(&r, r#"{"importance": {"$gte": 0.5}}"#), vec![2, 3]);
        assert_eq!(sel(&r, r#"{"importance": 0.25}"#), vec![1]);
        // Importance is an f32: a query value is rounded to one.
        let mut r2 = Records::default();
        r2.insert(
            1,
            &Attrs {
                importance: 0.2,
                ..store_attrs()
            },
        );
        assert_eq!(sel(&r2, r#"{"importance": 0.2}"#), vec![0]);
        assert_eq!(
            sel(&r2, r#"{"importance": {"$gt": 0.2}}"#),
            Vec::<u32>::new()
        );
        assert_eq!(sel(&r2, r#"{"importance": {"$in": [0.1, 0.2]}}"#), vec![0]);
        assert_eq!(sel(&r, r#"{"evergreen": false}"#), vec![0, 1, 2]);
        assert_eq!(sel(&r, r#"{"access_count": {"$gt": 10}}"#), vec![2, 3]);
        assert_eq!(sel(&r, r#"{"access_count": 0}"#), vec![0]);
        assert_eq!(sel(&r, r#"{"updated_at": {"$lt": 1}}"#), vec![0, 1, 2, 3]);
        assert_eq!(
            sel(&r, r#"{"last_accessed_at": {"$lte": 2001}}"#),
            vec![0, 1]
        );
        assert_eq!(
            sel(&r, r#"{"created_at": {"$in": [1000, 1003]}}"#),
            vec![0, 3]
        );
        // A scope field a record lacks equals null.
        assert_eq!(sel(&r, r#"{"agent_id": null}"#), vec![3]);
        assert_eq!(sel(&r, r#"{"agent_id": {"$in": [null, "b"]}}"#), vec![1, 3]);
        assert_eq!(sel(&r, r#"{"agent_id": {"$exists": true}}"#), vec![0, 1, 2]);
        for field in ["user_id", "room_id", "world_id", "session_id", "namespace"] {
            assert_eq!(
                sel(&r, &format!(r#"{{"{field}": null}}"#)),
                vec![0, 1, 2, 3]
            );
            assert_eq!(
                sel(&r, &format!(r#"{{"{field}": "a"}}"#)),
                Vec::<u32>::new()
            );
        }
        // Mine or shared.
        assert_eq!(
            sel(
                &r,
                r#"{"$or": [{"agent_id": "b"}, {"flag": true}, {"evergreen": true}]}"#
            ),
            vec![1, 3]
        );
        // Bare names and metadata.<name> are both metadata keys.
        assert_eq!(sel(&r, r#"{"source": "telegram"}"#), vec![0]);
        assert_eq!(sel(&r, r#"{"nested.k": null}"#), vec![2]);
        assert_eq!(
            sel(&r, r#"{"n": {"$gt": 1}}"#),
            sel(&r, r#"{"metadata.n": {"$gt": 1}}"#)
        );
    }

    #[test]
    fn id_lookups_use_the_id_map() {
        let mut r = store();
        let f = Filter::parse(
            r#"{"id": {"$in": ["rec-1", "rec-2"]}, "n": {"$exists": true}}"#,
            &r,
        )
        .unwrap();
        let s = f.select(&r);
        assert_eq!((s.slots, s.examined), (vec![1, 2], 2));
        // Replacing and removing keep the map in step.
        r.insert(
            101,
            &Attrs {
                id: Some("renamed".into()),
                ..store_attrs()
            },
        );
        assert_eq!(sel(&r, r#"{"id": "rec-1"}"#), Vec::<u32>::new());
        assert_eq!(sel(&r, r#"{"id": "renamed"}"#), vec![1]);
        assert!(r.remove(101));
        assert_eq!(sel(&r, r#"{"id": "renamed"}"#), Vec::<u32>::new());
    }
}
