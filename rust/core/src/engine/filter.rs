//! Filters: a MongoDB-style expression compiled against the record columns,
//! then evaluated to the set of matching slots. The Python layer hands the
//! caller's dict over as a JSON value (no text); this module is the one place
//! that validates it.
//!
//! Syntax: `{"field": value}` (equality), `{"field": {"$op": value, ...}}`
//! with `$eq $ne $in $nin $gt $gte $lt $lte $exists $not`, and the logical
//! `{"$and": [..]}`, `{"$or": [..]}`, `{"$not": {..}}`; several keys in one
//! object must all hold.
//!
//! Fields: the record fields [`RECORD_FIELDS`] (`id`, `table`, `type`, the
//! scope fields, `importance`, `evergreen`, `access_count`, `created_at`,
//! `updated_at`, `last_accessed_at`); any other name is a metadata key,
//! dotted for nested metadata (`{"user.plan": "pro"}` reads `{"user":
//! {"plan": "pro"}}`), and `metadata.<key>` names a metadata key explicitly
//! (for one called like a record field). Record fields that are not
//! filterable ([`UNFILTERABLE`]: `text`, `embedding`, ...) are refused, as
//! are values of the wrong type for a record field (`{"importance": "high"}`)
//! and unknown operators: a mistake is an error, never an empty result.
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

use serde_json::Value as Json;

use super::records::{PostingKey, Records, Value, ValueKey, NONE, SCOPE_FIELDS};
use crate::error::{Error, Result};

/// Filters nested deeper than this are refused.
pub const MAX_DEPTH: usize = 32;

/// The record fields a filter reads (every other name is a metadata key).
pub const RECORD_FIELDS: [&str; 19] = [
    "id",
    "table",
    "type",
    "agent_id",
    "user_id",
    "room_id",
    "world_id",
    "session_id",
    "namespace",
    "importance",
    "evergreen",
    "access_count",
    "created_at",
    "updated_at",
    "last_accessed_at",
    "valid_to",
    "expires_at",
    "recorded_at",
    "metadata.<key>",
];

/// Record fields no filter reads; naming one is an error rather than a
/// lookup of a metadata key of that name (write `metadata.<key>` for that).
pub const UNFILTERABLE: [&str; 5] = ["text", "embedding", "metadata", "unique", "content_hash"];

const FIELD_OPERATORS: &str = "$eq, $ne, $in, $nin, $gt, $gte, $lt, $lte, $exists, $not";

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Field {
    Id,
    Table,
    Type,
    Scope(u8),
    Importance,
    Evergreen,
    AccessCount,
    CreatedAt,
    UpdatedAt,
    LastAccessedAt,
    /// When a superseded record stopped being true; null while current.
    ValidTo,
    /// When a record expires; null when it never does.
    ExpiresAt,
    /// When the store learned a record.
    RecordedAt,
    /// A metadata key; `None` when no record ever had it.
    Meta(Option<u32>),
}

/// A query-side scalar; strings keep their text (for ordering) and their
/// interned id, if any record holds them.
#[derive(Clone, Debug, PartialEq)]
pub enum Scalar {
    Null,
    Bool(bool),
    Num(f64),
    Str(Box<str>, Option<u32>),
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Cmp {
    Gt,
    Gte,
    Lt,
    Lte,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Node {
    All,
    And(Vec<Node>),
    Or(Vec<Node>),
    Not(Box<Node>),
    Eq(Field, Scalar),
    In(Field, Vec<Scalar>),
    Range(Field, Cmp, Scalar),
    Exists(Field, bool),
}

/// A compiled filter.
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

fn bad(msg: impl Into<String>) -> Error {
    Error::invalid(format!("invalid filter: {}", msg.into()))
}

fn scalar_kind(q: &Scalar) -> &'static str {
    match q {
        Scalar::Null => "null",
        Scalar::Bool(_) => "a boolean",
        Scalar::Num(_) => "a number",
        Scalar::Str(..) => "a string",
    }
}

fn json_kind(v: &Json) -> &'static str {
    match v {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "a list",
        Json::Object(_) => "an object",
    }
}

impl Filter {
    /// Parses `json` and resolves its names against `records`.
    pub fn parse(json: &str, records: &Records) -> Result<Filter> {
        let value: Json =
            serde_json::from_str(json).map_err(|e| bad(format!("not valid JSON: {e}")))?;
        Filter::from_json(&value, records)
    }

    pub fn from_json(value: &Json, records: &Records) -> Result<Filter> {
        let root = Compiler { records }.node(value, 0)?;
        Ok(Filter { root })
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

struct Compiler<'a> {
    records: &'a Records,
}

impl Compiler<'_> {
    fn node(&self, v: &Json, depth: usize) -> Result<Node> {
        if depth > MAX_DEPTH {
            return Err(bad(format!("nested more than {MAX_DEPTH} levels deep")));
        }
        let Json::Object(map) = v else {
            return Err(bad(format!(
                "a filter must be an object, got {}",
                json_kind(v)
            )));
        };
        let mut parts = Vec::with_capacity(map.len());
        for (key, val) in map {
            parts.push(match key.as_str() {
                "$and" | "$or" => {
                    let Json::Array(items) = val else {
                        return Err(bad(format!(
                            "{key} takes a list of filters, got {}",
                            json_kind(val)
                        )));
                    };
                    if items.is_empty() {
                        return Err(bad(format!("{key} takes a non-empty list")));
                    }
                    let children = items
                        .iter()
                        .map(|i| self.node(i, depth + 1))
                        .collect::<Result<Vec<_>>>()?;
                    if key == "$and" {
                        Node::And(children)
                    } else {
                        Node::Or(children)
                    }
                }
                "$not" => Node::Not(Box::new(self.node(val, depth + 1)?)),
                op if op.starts_with('$') => {
                    return Err(bad(format!(
                        "unknown operator {op:?} at the top level (expected $and, $or or $not)"
                    )))
                }
                field => self.field_condition(field, val, depth)?,
            });
        }
        Ok(match parts.len() {
            0 => Node::All,
            1 => parts.pop().unwrap_or(Node::All),
            _ => Node::And(parts),
        })
    }

    fn field(&self, name: &str) -> Result<Field> {
        Ok(match name {
            "id" => Field::Id,
            "table" => Field::Table,
            "type" => Field::Type,
            "importance" => Field::Importance,
            "evergreen" => Field::Evergreen,
            "access_count" => Field::AccessCount,
            "created_at" => Field::CreatedAt,
            "updated_at" => Field::UpdatedAt,
            "last_accessed_at" => Field::LastAccessedAt,
            "valid_to" => Field::ValidTo,
            "expires_at" => Field::ExpiresAt,
            "recorded_at" => Field::RecordedAt,
            _ => {
                if let Some(i) = SCOPE_FIELDS.iter().position(|f| *f == name) {
                    Field::Scope(i as u8)
                } else if UNFILTERABLE.contains(&name) {
                    return Err(bad(format!(
                        "unknown field {name:?}: it cannot be filtered on; the record fields \
                         are {}, and any other name is a metadata key (write \
                         \"metadata.{name}\" for a metadata key called {name:?})",
                        RECORD_FIELDS.join(", ")
                    )));
                } else {
                    let key = name.strip_prefix("metadata.").unwrap_or(name);
                    if key.is_empty() || key.split('.').any(str::is_empty) {
                        return Err(bad(format!(
                            "unknown field {name:?}: a metadata key is non-empty, with no \
                             empty part between dots"
                        )));
                    }
                    Field::Meta(self.records.keys.get(key))
                }
            }
        })
    }

    /// Refuses a value a record field can never hold, naming what it takes;
    /// rounds an importance to the f32 it is stored as, so that `0.2` finds
    /// a record given 0.2 (and `{"$gt": 0.2}` does not).
    fn typed(&self, field: Field, name: &str, q: Scalar) -> Result<Scalar> {
        self.check_kind(field, name, &q)?;
        Ok(match (field, q) {
            (Field::Importance, Scalar::Num(x)) => Scalar::Num(f64::from(x as f32)),
            (_, q) => q,
        })
    }

    fn check_kind(&self, field: Field, name: &str, q: &Scalar) -> Result<()> {
        let (ok, takes) = match field {
            Field::Id | Field::Table | Field::Type => (matches!(q, Scalar::Str(..)), "a string"),
            Field::Scope(_) => (
                matches!(q, Scalar::Str(..) | Scalar::Null),
                "a string (or null for none)",
            ),
            Field::Evergreen => (matches!(q, Scalar::Bool(_)), "true or false"),
            Field::ValidTo => (
                matches!(q, Scalar::Num(_) | Scalar::Null),
                "a number (or null for a current record)",
            ),
            Field::ExpiresAt => (
                matches!(q, Scalar::Num(_) | Scalar::Null),
                "a number (or null for a record that never expires)",
            ),
            Field::RecordedAt
            | Field::Importance
            | Field::AccessCount
            | Field::CreatedAt
            | Field::UpdatedAt
            | Field::LastAccessedAt => (matches!(q, Scalar::Num(_)), "a number"),
            Field::Meta(_) => (true, ""),
        };
        if ok {
            Ok(())
        } else {
            Err(bad(format!(
                "{name:?} takes {takes}, got {}",
                scalar_kind(q)
            )))
        }
    }

    fn scalar(&self, v: &Json, ctx: &str) -> Result<Scalar> {
        Ok(match v {
            Json::Null => Scalar::Null,
            Json::Bool(b) => Scalar::Bool(*b),
            Json::Number(n) => match n.as_f64() {
                Some(x) if x.is_finite() => Scalar::Num(x),
                _ => return Err(bad(format!("{ctx}: {n} is not a finite number"))),
            },
            Json::String(s) => Scalar::Str(Box::from(s.as_str()), self.records.strings.get(s)),
            other => {
                return Err(bad(format!(
                    "{ctx} takes a string, number, boolean or null, got {}",
                    json_kind(other)
                )))
            }
        })
    }

    fn field_condition(&self, name: &str, v: &Json, depth: usize) -> Result<Node> {
        let field = self.field(name)?;
        match v {
            Json::Object(ops) if ops.keys().any(|k| k.starts_with('$')) => {
                self.operators(field, name, v, depth)
            }
            Json::Object(_) => Err(bad(format!(
                "{name:?}: an object value must hold operators ($eq, $in, ...); \
                 match nested metadata with dotted keys"
            ))),
            Json::Array(_) => Err(bad(format!(
                "{name:?}: a list is ambiguous here; use {{\"$in\": [...]}}"
            ))),
            _ => {
                let q = self.scalar(v, name)?;
                Ok(Node::Eq(field, self.typed(field, name, q)?))
            }
        }
    }

    fn operators(&self, field: Field, name: &str, v: &Json, depth: usize) -> Result<Node> {
        if depth > MAX_DEPTH {
            return Err(bad(format!("nested more than {MAX_DEPTH} levels deep")));
        }
        let Json::Object(ops) = v else {
            return Err(bad(format!(
                "{name:?}: $not takes an object of operators, got {}",
                json_kind(v)
            )));
        };
        if ops.is_empty() {
            return Err(bad(format!("{name:?}: empty operator object")));
        }
        let mut parts = Vec::with_capacity(ops.len());
        for (op, arg) in ops {
            let ctx = format!("{name:?} {op}");
            let list = |arg: &Json| -> Result<Vec<Scalar>> {
                let Json::Array(items) = arg else {
                    return Err(bad(format!("{ctx} takes a list, got {}", json_kind(arg))));
                };
                items
                    .iter()
                    .map(|i| self.typed(field, name, self.scalar(i, &ctx)?))
                    .collect()
            };
            let one =
                |arg: &Json| -> Result<Scalar> { self.typed(field, name, self.scalar(arg, &ctx)?) };
            let range = |cmp: Cmp| -> Result<Node> {
                let s = self.scalar(arg, &ctx)?;
                if !matches!(s, Scalar::Num(_) | Scalar::Str(..)) {
                    return Err(bad(format!("{ctx} takes a number or a string")));
                }
                if matches!(field, Field::Evergreen) {
                    return Err(bad(format!(
                        "{ctx}: \"evergreen\" is true or false, not ordered"
                    )));
                }
                Ok(Node::Range(field, cmp, self.typed(field, name, s)?))
            };
            parts.push(match op.as_str() {
                "$eq" => Node::Eq(field, one(arg)?),
                "$ne" => Node::Not(Box::new(Node::Eq(field, one(arg)?))),
                "$in" => Node::In(field, list(arg)?),
                "$nin" => Node::Not(Box::new(Node::In(field, list(arg)?))),
                "$gt" => range(Cmp::Gt)?,
                "$gte" => range(Cmp::Gte)?,
                "$lt" => range(Cmp::Lt)?,
                "$lte" => range(Cmp::Lte)?,
                "$exists" => match arg {
                    Json::Bool(b) => Node::Exists(field, *b),
                    other => {
                        return Err(bad(format!(
                            "{ctx} takes true or false, got {}",
                            json_kind(other)
                        )))
                    }
                },
                "$not" => Node::Not(Box::new(self.operators(field, name, arg, depth + 1)?)),
                other => {
                    return Err(bad(format!(
                        "unknown operator {other:?} on {name:?} (expected one of \
                         {FIELD_OPERATORS})"
                    )))
                }
            });
        }
        Ok(if parts.len() == 1 {
            parts.pop().unwrap_or(Node::All)
        } else {
            Node::And(parts)
        })
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

    #[test]
    fn bad_filters_are_named() {
        let r = store();
        for (json, needle) in [
            (r#"{"x": {"$regex": "a"}}"#, "$regex"),
            (r#"{"x": {"$regex": "a"}}"#, "$nin"),
            (r#"{"$nor": []}"#, "$nor"),
            (r#"{"$and": []}"#, "non-empty"),
            (r#"{"$and": {}}"#, "list"),
            (r#"{"x": {"$in": 3}}"#, "list"),
            (r#"{"x": {"$gt": true}}"#, "number or a string"),
            (r#"{"x": {"$exists": 1}}"#, "true or false"),
            (r#"{"x": [1]}"#, "$in"),
            (r#"{"x": {"a": 1}}"#, "dotted"),
            (r#"{"text": "a"}"#, "unknown field \"text\""),
            (r#"{"text": "a"}"#, "access_count"),
            (r#"{"embedding": {"$exists": true}}"#, "metadata.embedding"),
            (r#"{"metadata": {"$exists": true}}"#, "unknown field"),
            (r#"{"metadata.": 1}"#, "unknown field"),
            (r#"{"a..b": 1}"#, "empty part"),
            (r#"{"": 1}"#, "unknown field"),
            (
                r#"{"importance": "high"}"#,
                "\"importance\" takes a number, got a string",
            ),
            (r#"{"access_count": {"$gte": "1"}}"#, "takes a number"),
            (r#"{"created_at": {"$in": [1, null]}}"#, "takes a number"),
            (r#"{"id": 3}"#, "\"id\" takes a string"),
            (r#"{"table": {"$in": ["a", 1]}}"#, "takes a string"),
            (r#"{"agent_id": 1}"#, "a string (or null"),
            (r#"{"evergreen": 1}"#, "true or false"),
            (r#"{"evergreen": {"$gt": false}}"#, "number or a string"),
            (r#"[1]"#, "object"),
            (r#"{"#, "JSON"),
        ] {
            let err = Filter::parse(json, &r).unwrap_err().to_string();
            assert!(err.contains(needle), "{json}: {err}");
        }
        let deep = format!(r#"{}{{}}{}"#, r#"{"$not": "#.repeat(40), "}".repeat(40));
        let err = Filter::parse(&deep, &r).unwrap_err().to_string();
        assert!(err.contains("levels deep"), "{err}");
    }
}
