//! The filter grammar: a MongoDB-style expression, read from wherever the
//! caller's value lives ([`Source`]: JSON here, the binding's own objects
//! there), checked once and parsed into a tree that names metadata keys and
//! strings by their text. Parsing needs no records, so a binding parses while
//! it still holds its caller's objects and before it takes the engine's lock;
//! [`super::filter`] then binds the tree to the records and evaluates it.
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
//! are values of the wrong type for a record field (`{"importance": "high"}`),
//! numbers that are not finite and unknown operators: a mistake is an error,
//! never an empty result.

use std::fmt;
use std::ops::Deref;

use serde_json::Value as Json;

use super::records::SCOPE_FIELDS;
use crate::error::Error;

/// Filters nested deeper than this are refused. Every recursion of the parse
/// goes one level deeper, so this also bounds a value that contains itself.
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
pub const UNFILTERABLE: [&str; 6] = [
    "text",
    "embedding",
    "metadata",
    "unique",
    "content_hash",
    "speaker",
];

const FIELD_OPERATORS: &str = "$eq, $ne, $in, $nin, $gt, $gte, $lt, $lte, $exists, $not";

/// A field a filter reads; `K` is how a metadata key is known (its name once
/// parsed, its interned id once bound).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Field<K> {
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
    /// A metadata key.
    Meta(K),
}

impl<K> Field<K> {
    /// The same field with its metadata key, if it is one, turned by `f`.
    pub fn map_key<T>(&self, f: impl FnOnce(&K) -> T) -> Field<T> {
        match self {
            Field::Id => Field::Id,
            Field::Table => Field::Table,
            Field::Type => Field::Type,
            Field::Scope(i) => Field::Scope(*i),
            Field::Importance => Field::Importance,
            Field::Evergreen => Field::Evergreen,
            Field::AccessCount => Field::AccessCount,
            Field::CreatedAt => Field::CreatedAt,
            Field::UpdatedAt => Field::UpdatedAt,
            Field::LastAccessedAt => Field::LastAccessedAt,
            Field::ValidTo => Field::ValidTo,
            Field::ExpiresAt => Field::ExpiresAt,
            Field::RecordedAt => Field::RecordedAt,
            Field::Meta(k) => Field::Meta(f(k)),
        }
    }
}

/// A query-side scalar; a string keeps its text (for ordering) and `S`, what
/// binding learnt of it (its interned id).
#[derive(Clone, Debug, PartialEq)]
pub enum Scalar<S> {
    Null,
    Bool(bool),
    Num(f64),
    Str(Box<str>, S),
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Cmp {
    Gt,
    Gte,
    Lt,
    Lte,
}

/// A filter expression over fields whose metadata keys are `K` and whose
/// strings carry `S`.
#[derive(Clone, Debug, PartialEq)]
pub enum Node<K, S> {
    All,
    And(Vec<Node<K, S>>),
    Or(Vec<Node<K, S>>),
    Not(Box<Node<K, S>>),
    Eq(Field<K>, Scalar<S>),
    In(Field<K>, Vec<Scalar<S>>),
    Range(Field<K>, Cmp, Scalar<S>),
    Exists(Field<K>, bool),
}

/// A parsed node: metadata keys by name, strings by text alone.
pub type ParsedNode = Node<Box<str>, ()>;

/// A filter that passed every check of the grammar, not yet bound to records.
#[derive(Clone, Debug, PartialEq)]
pub struct Parsed {
    root: ParsedNode,
}

/// What a value of a filter is, as its [`Source`] reads it.
pub enum Shape<S: Source> {
    Null,
    Bool(bool),
    /// A number; the parse refuses one that is not finite.
    Num(f64),
    Str(S::Text),
    List(S::Items),
    Object(S::Entries),
}

/// Why a source gave no value.
#[derive(Debug)]
pub enum Unread<E> {
    /// The value is not one a filter holds; the message says what it is, and
    /// the parse adds where it sits.
    Refused(String),
    /// The source itself failed; its error is passed through unchanged.
    Failed(E),
}

/// A read of a [`Source`].
pub type Read<T, E> = std::result::Result<T, Unread<E>>;

/// Where a filter's values come from: each value tells its [`Shape`], and
/// lists and objects hand out their items and (key, value) pairs in order.
pub trait Source: Sized {
    /// The error a parse of this source returns: the parse's own refusals
    /// (an [`Error::InvalidArgument`]) and the source's failures.
    type Error: From<Error>;
    type Text: Deref<Target = str>;
    type Items: Iterator<Item = Read<Self, Self::Error>>;
    type Entries: Iterator<Item = Read<(Self::Text, Self), Self::Error>>;

    fn shape(self) -> Read<Shape<Self>, Self::Error>;
}

impl<'a> Source for &'a Json {
    type Error = Error;
    type Text = &'a str;
    type Items = std::iter::Map<std::slice::Iter<'a, Json>, fn(&'a Json) -> Read<&'a Json, Error>>;
    type Entries = std::iter::Map<
        serde_json::map::Iter<'a>,
        fn((&'a String, &'a Json)) -> Read<(&'a str, &'a Json), Error>,
    >;

    fn shape(self) -> Read<Shape<Self>, Error> {
        Ok(match self {
            Json::Null => Shape::Null,
            Json::Bool(b) => Shape::Bool(*b),
            // `as_f64` fails only under `arbitrary_precision` (off), and NaN is refused.
            Json::Number(n) => Shape::Num(n.as_f64().unwrap_or(f64::NAN)),
            Json::String(s) => Shape::Str(s.as_str()),
            Json::Array(items) => Shape::List(items.iter().map(Ok as fn(_) -> _)),
            Json::Object(map) => Shape::Object(map.iter().map(json_entry as fn(_) -> _)),
        })
    }
}

fn json_entry<'a>((key, value): (&'a String, &'a Json)) -> Read<(&'a str, &'a Json), Error> {
    Ok((key, value))
}

impl<S: Source> Shape<S> {
    fn kind(&self) -> &'static str {
        match self {
            Shape::Null => "null",
            Shape::Bool(_) => "a boolean",
            Shape::Num(_) => "a number",
            Shape::Str(_) => "a string",
            Shape::List(_) => "a list",
            Shape::Object(_) => "an object",
        }
    }
}

fn bad(msg: impl Into<String>) -> Error {
    Error::invalid(format!("invalid filter: {}", msg.into()))
}

/// Where a value sits: the keys that lead to it, the first one quoted (`"$and"
/// agent_id`); a list's items sit where the list does. Written out only in a
/// message.
struct At<'a> {
    up: Option<&'a At<'a>>,
    key: &'a str,
}

impl fmt::Display for At<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.up {
            None => write!(f, "{:?}", self.key),
            Some(up) => write!(f, "{up} {}", self.key),
        }
    }
}

/// An operator's place in the messages that name it: `"importance" $gt`.
struct Ctx<'a> {
    name: &'a str,
    op: &'a str,
}

impl fmt::Display for Ctx<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} {}", self.name, self.op)
    }
}

fn unread<E: From<Error>>(u: Unread<E>, at: Option<&At<'_>>) -> E {
    match u {
        Unread::Failed(e) => e,
        Unread::Refused(msg) => match at {
            None => bad(msg).into(),
            Some(at) => bad(format!("at {at}: {msg}")).into(),
        },
    }
}

fn shape<S: Source>(v: S, at: Option<&At<'_>>) -> Result<Shape<S>, S::Error> {
    v.shape().map_err(|u| unread(u, at))
}

impl Parsed {
    /// Reads and checks the filter `value` holds.
    pub fn read<S: Source>(value: S) -> Result<Parsed, S::Error> {
        Ok(Parsed {
            root: node(value, None, 0)?,
        })
    }

    /// Reads and checks a filter written as JSON text.
    pub fn from_json_text(json: &str) -> crate::Result<Parsed> {
        let value: Json =
            serde_json::from_str(json).map_err(|e| bad(format!("not valid JSON: {e}")))?;
        Parsed::read(&value)
    }

    pub(super) fn root(&self) -> &ParsedNode {
        &self.root
    }
}

fn node<S: Source>(v: S, at: Option<&At<'_>>, depth: usize) -> Result<ParsedNode, S::Error> {
    if depth > MAX_DEPTH {
        return Err(bad(format!("nested more than {MAX_DEPTH} levels deep")).into());
    }
    let entries = match shape(v, at)? {
        Shape::Object(entries) => entries,
        other => {
            return Err(bad(format!("a filter must be an object, got {}", other.kind())).into())
        }
    };
    let mut parts = Vec::new();
    for entry in entries {
        let (key, val) = entry.map_err(|u| unread(u, at))?;
        let here = At { up: at, key: &key };
        parts.push(match &*key {
            "$and" | "$or" => {
                let items = match shape(val, Some(&here))? {
                    Shape::List(items) => items,
                    other => {
                        return Err(bad(format!(
                            "{} takes a list of filters, got {}",
                            &*key,
                            other.kind()
                        ))
                        .into())
                    }
                };
                let children = items
                    .map(|i| {
                        node(
                            i.map_err(|u| unread(u, Some(&here)))?,
                            Some(&here),
                            depth + 1,
                        )
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                if children.is_empty() {
                    return Err(bad(format!("{} takes a non-empty list", &*key)).into());
                }
                if &*key == "$and" {
                    Node::And(children)
                } else {
                    Node::Or(children)
                }
            }
            "$not" => Node::Not(Box::new(node(val, Some(&here), depth + 1)?)),
            op if op.starts_with('$') => {
                return Err(bad(format!(
                    "unknown operator {op:?} at the top level (expected $and, $or or $not)"
                ))
                .into())
            }
            name => field_condition(field(name)?, name, val, &here, depth)?,
        });
    }
    Ok(match parts.len() {
        0 => Node::All,
        1 => parts.pop().unwrap_or(Node::All),
        _ => Node::And(parts),
    })
}

fn field(name: &str) -> Result<Field<Box<str>>, Error> {
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
                if has_empty_part(key) {
                    return Err(bad(format!(
                        "unknown field {name:?}: a metadata key is non-empty, with no \
                         empty part between dots"
                    )));
                }
                Field::Meta(Box::from(key))
            }
        }
    })
}

/// Whether a metadata key path has an empty part: the path's parts are
/// separated by dots, and a key's own dot is written `\.` (as
/// `records::escape_key` stores it), so an escaped dot ends no part.
fn has_empty_part(key: &str) -> bool {
    let mut part = 0usize;
    let mut chars = key.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                chars.next();
                part += 1;
            }
            '.' if part == 0 => return true,
            '.' => part = 0,
            _ => part += 1,
        }
    }
    part == 0
}

/// Refuses a value a record field can never hold, naming what it takes;
/// rounds an importance to the f32 it is stored as, so that `0.2` finds a
/// record given 0.2 (and `{"$gt": 0.2}` does not).
fn typed<K>(field: &Field<K>, name: &str, q: Scalar<()>) -> Result<Scalar<()>, Error> {
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
    if !ok {
        let got = match q {
            Scalar::Null => "null",
            Scalar::Bool(_) => "a boolean",
            Scalar::Num(_) => "a number",
            Scalar::Str(..) => "a string",
        };
        return Err(bad(format!("{name:?} takes {takes}, got {got}")));
    }
    Ok(match (field, q) {
        (Field::Importance, Scalar::Num(x)) => Scalar::Num(f64::from(x as f32)),
        (_, q) => q,
    })
}

/// The scalar a shape holds; a list or an object is refused, `what` naming
/// the place that takes a scalar.
fn scalar<S: Source>(
    shape: Shape<S>,
    at: &At<'_>,
    what: &dyn fmt::Display,
) -> Result<Scalar<()>, S::Error> {
    Ok(match shape {
        Shape::Null => Scalar::Null,
        Shape::Bool(b) => Scalar::Bool(b),
        Shape::Num(x) if x.is_finite() => Scalar::Num(x),
        Shape::Num(x) => {
            return Err(unread(
                Unread::Refused(format!("{x} is not a finite number")),
                Some(at),
            ))
        }
        Shape::Str(s) => Scalar::Str(Box::from(&*s), ()),
        other => {
            return Err(bad(format!(
                "{what} takes a string, number, boolean or null, got {}",
                other.kind()
            ))
            .into())
        }
    })
}

fn unknown_operator(op: &str, name: &str) -> Error {
    bad(format!(
        "unknown operator {op:?} on {name:?} (expected one of {FIELD_OPERATORS})"
    ))
}

fn not_operators(name: &str) -> Error {
    bad(format!(
        "{name:?}: an object value must hold operators ($eq, $in, ...); \
         match nested metadata with dotted keys"
    ))
}

fn field_condition<S: Source>(
    field: Field<Box<str>>,
    name: &str,
    v: S,
    at: &At<'_>,
    depth: usize,
) -> Result<ParsedNode, S::Error> {
    match shape(v, Some(at))? {
        Shape::Object(ops) => operators::<S>(&field, name, ops, at, depth, false),
        Shape::List(_) => Err(bad(format!(
            "{name:?}: a list is ambiguous here; use {{\"$in\": [...]}}"
        ))
        .into()),
        other => {
            let q = typed(&field, name, scalar(other, at, &name)?)?;
            Ok(Node::Eq(field, q))
        }
    }
}

/// The operators of `field` (named `name`); `negated` when they are the
/// operand of `$not`.
fn operators<S: Source>(
    field: &Field<Box<str>>,
    name: &str,
    ops: S::Entries,
    at: &At<'_>,
    depth: usize,
    negated: bool,
) -> Result<ParsedNode, S::Error> {
    if depth > MAX_DEPTH {
        return Err(bad(format!("nested more than {MAX_DEPTH} levels deep")).into());
    }
    let mut parts = Vec::new();
    // A key that is no operator is told once the object is read: as an
    // unknown operator beside operators, as a nested object without them.
    let mut plain: Option<String> = None;
    for entry in ops {
        let (op, arg) = entry.map_err(|u| unread(u, Some(at)))?;
        if !negated && !op.starts_with('$') {
            plain.get_or_insert_with(|| op.to_string());
            continue;
        }
        let here = At {
            up: Some(at),
            key: &op,
        };
        let ctx = Ctx { name, op: &op };
        let one = |arg: S| -> Result<Scalar<()>, S::Error> {
            let q = scalar(shape(arg, Some(&here))?, &here, &ctx)?;
            Ok(typed(field, name, q)?)
        };
        let list = |arg: S| -> Result<Vec<Scalar<()>>, S::Error> {
            let items = match shape(arg, Some(&here))? {
                Shape::List(items) => items,
                other => {
                    return Err(bad(format!("{ctx} takes a list, got {}", other.kind())).into())
                }
            };
            items
                .map(|i| one(i.map_err(|u| unread(u, Some(&here)))?))
                .collect()
        };
        let range = |cmp: Cmp, arg: S| -> Result<ParsedNode, S::Error> {
            let q = scalar(shape(arg, Some(&here))?, &here, &ctx)?;
            if !matches!(q, Scalar::Num(_) | Scalar::Str(..)) {
                return Err(bad(format!("{ctx} takes a number or a string")).into());
            }
            if matches!(field, Field::Evergreen) {
                return Err(bad(format!(
                    "{ctx}: \"evergreen\" is true or false, not ordered"
                ))
                .into());
            }
            Ok(Node::Range(field.clone(), cmp, typed(field, name, q)?))
        };
        parts.push(match &*op {
            "$eq" => Node::Eq(field.clone(), one(arg)?),
            "$ne" => Node::Not(Box::new(Node::Eq(field.clone(), one(arg)?))),
            "$in" => Node::In(field.clone(), list(arg)?),
            "$nin" => Node::Not(Box::new(Node::In(field.clone(), list(arg)?))),
            "$gt" => range(Cmp::Gt, arg)?,
            "$gte" => range(Cmp::Gte, arg)?,
            "$lt" => range(Cmp::Lt, arg)?,
            "$lte" => range(Cmp::Lte, arg)?,
            "$exists" => match shape(arg, Some(&here))? {
                Shape::Bool(b) => Node::Exists(field.clone(), b),
                other => {
                    return Err(
                        bad(format!("{ctx} takes true or false, got {}", other.kind())).into(),
                    )
                }
            },
            "$not" => match shape(arg, Some(&here))? {
                Shape::Object(inner) => Node::Not(Box::new(operators::<S>(
                    field,
                    name,
                    inner,
                    &here,
                    depth + 1,
                    true,
                )?)),
                other => {
                    return Err(bad(format!(
                        "{name:?}: $not takes an object of operators, got {}",
                        other.kind()
                    ))
                    .into())
                }
            },
            other => return Err(unknown_operator(other, name).into()),
        });
    }
    if let Some(other) = plain {
        return Err(if parts.is_empty() {
            not_operators(name)
        } else {
            unknown_operator(&other, name)
        }
        .into());
    }
    match parts.len() {
        0 if negated => Err(bad(format!("{name:?}: empty operator object")).into()),
        0 => Err(not_operators(name).into()),
        1 => Ok(parts.pop().unwrap_or(Node::All)),
        _ => Ok(Node::And(parts)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_escaped_dot_ends_no_part() {
        for key in ["v1\\.", "\\.", "misc.etc\\.", "a\\.\\.b", "a\\\\", "a.b"] {
            assert!(!has_empty_part(key), "{key}");
        }
        for key in ["", ".", "a.", ".a", "a..b", "v1\\..", "a\\\\."] {
            assert!(has_empty_part(key), "{key}");
        }
    }

    /// JSON whose string "?" stands for a value no filter holds, "!" for a
    /// read that fails and "NaN" for that number.
    struct Odd<'a>(&'a Json);

    impl<'a> Source for Odd<'a> {
        type Error = Error;
        type Text = &'a str;
        type Items = Box<dyn Iterator<Item = Read<Odd<'a>, Error>> + 'a>;
        type Entries = Box<dyn Iterator<Item = Read<(&'a str, Odd<'a>), Error>> + 'a>;

        fn shape(self) -> Read<Shape<Self>, Error> {
            Ok(match self.0 {
                Json::String(s) if s == "?" => return Err(Unread::Refused("an odd value".into())),
                Json::String(s) if s == "!" => return Err(Unread::Failed(Error::UnknownId(7))),
                Json::String(s) if s == "NaN" => Shape::Num(f64::NAN),
                Json::String(s) => Shape::Str(s.as_str()),
                Json::Null => Shape::Null,
                Json::Bool(b) => Shape::Bool(*b),
                Json::Number(n) => Shape::Num(n.as_f64().unwrap_or(f64::NAN)),
                Json::Array(items) => {
                    let items = items.iter().map(|v| Ok(Odd(v)));
                    Shape::List(Box::new(items) as Self::Items)
                }
                Json::Object(map) => {
                    let entries = map.iter().map(|(k, v)| Ok((k.as_str(), Odd(v))));
                    Shape::Object(Box::new(entries) as Self::Entries)
                }
            })
        }
    }

    fn odd(value: serde_json::Value) -> String {
        Parsed::read(Odd(&value)).unwrap_err().to_string()
    }

    #[test]
    fn bad_filters_are_named() {
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
            (r#"{"a.": 1}"#, "empty part"),
            (r#"{".a": 1}"#, "empty part"),
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
            let err = Parsed::from_json_text(json).unwrap_err().to_string();
            assert!(err.contains(needle), "{json}: {err}");
        }
        let deep = format!(r#"{}{{}}{}"#, r#"{"$not": "#.repeat(40), "}".repeat(40));
        let err = Parsed::from_json_text(&deep).unwrap_err().to_string();
        assert!(err.contains("levels deep"), "{err}");
    }

    #[test]
    fn a_source_refusal_says_where() {
        use serde_json::json;
        assert_eq!(odd(json!("?")), "invalid filter: an odd value");
        assert_eq!(
            odd(json!({"a": "?"})),
            "invalid filter: at \"a\": an odd value"
        );
        assert_eq!(
            odd(json!({"$and": [{"a": 1}, {"b": {"$in": [1, "?"]}}]})),
            "invalid filter: at \"$and\" b $in: an odd value"
        );
        assert_eq!(
            odd(json!({"a": {"$not": {"$gt": "NaN"}}})),
            "invalid filter: at \"a\" $not $gt: NaN is not a finite number"
        );
        // The source's own failure passes through as it is.
        assert_eq!(odd(json!({"a": {"$eq": "!"}})), "unknown id 7");
    }

    #[test]
    fn parsing_needs_no_records() {
        let parsed =
            Parsed::from_json_text(r#"{"importance": 0.2, "metadata.type": {"$in": ["a", null]}}"#)
                .unwrap();
        assert_eq!(
            parsed.root(),
            &Node::And(vec![
                Node::Eq(Field::Importance, Scalar::Num(f64::from(0.2f32))),
                Node::In(
                    Field::Meta(Box::from("type")),
                    vec![Scalar::Str(Box::from("a"), ()), Scalar::Null]
                ),
            ])
        );
    }
}
