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
//! scope, evergreen, metadata) read postings, ranges on `expires_at` the
//! records' expiry order, and ranges on `created_at` (an `$and`'s together:
//! a window) the creation order when they leave few records; `$and` starts
//! from its cheapest such child and `$or` unions its children when all have
//! postings. Only those candidates
//! are then checked against the columns, so a filter that selects 1% of the
//! store examines about 1% of it. A filter that admits every record but
//! those of conditions it negates, each found so exactly (a read's "not
//! expired now": [`Filter::exclusion`]), examines only those. Filters with
//! no such handle (a lone range on another field, a negation of one) scan
//! the live slots.

use std::ops::Bound::{self, Excluded, Included, Unbounded};

use rustc_hash::FxHashSet;

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

    /// Whether any of `slots` (live, ascending) matches and passes `keep`:
    /// read from the shorter of `slots` and the filter's candidates, so a
    /// scope asked about another scope's many records reads its own.
    pub fn matches_any(
        &self,
        records: &Records,
        slots: &[u32],
        keep: impl Fn(u32) -> bool,
    ) -> bool {
        let hit = |s: u32| keep(s) && self.matches(records, s);
        match estimate(&self.root, records, slots.len()) {
            Some(n) if n < slots.len() => candidates(&self.root, records)
                .unwrap_or_default()
                .into_iter()
                .any(|s| slots.binary_search(&s).is_ok() && hit(s)),
            _ => slots.iter().any(|&s| hit(s)),
        }
    }

    /// The matching live slots, ascending.
    pub fn select(&self, records: &Records) -> Selection {
        self.run(self.plan(records), records)
    }

    fn run(&self, plan: Plan, records: &Records) -> Selection {
        match plan {
            Plan::Candidates(cands) => Selection {
                examined: cands.len(),
                slots: cands
                    .into_iter()
                    .filter(|&s| self.matches(records, s))
                    .collect(),
            },
            // The others match unread.
            Plan::Except(except) => Selection {
                examined: except.len(),
                slots: without(records.live_slots(), &except).collect(),
            },
            Plan::Scan => Selection {
                examined: records.len(),
                slots: records
                    .live_slots()
                    .filter(|&s| eval(&self.root, records, s))
                    .collect(),
            },
        }
    }

    /// How many live records match: without a look at each one when the
    /// filter is an [`exclusion`](Self::exclusion).
    pub fn count(&self, records: &Records) -> usize {
        match self.plan(records) {
            Plan::Except(except) => records.len() - except.len(),
            plan => self.run(plan, records).slots.len(),
        }
    }

    /// When the filter has no postings to start from and admits every live
    /// record but those of conditions it negates, which postings or the
    /// expiry order give exactly (a read's `Not(expires_at <= now)`, a `$ne`
    /// or `$nin` on an indexed field, any of them under an `$and`): those
    /// records' slots, ascending, so that a caller leaves them out instead of
    /// reading every record. `None` otherwise.
    pub fn exclusion(&self, records: &Records) -> Option<Vec<u32>> {
        // Whether there are candidates, told without listing them.
        if estimate(&self.root, records, 0).is_some() {
            return None;
        }
        excluded(&self.root, records)
    }

    /// [`exclusion`](Self::exclusion), when it leaves out `cap` records at
    /// most, told from the postings' lengths (and the expiry order counted no
    /// further than `cap`) before any is listed; `None` otherwise.
    pub fn exclusion_within(&self, records: &Records, cap: usize) -> Option<Vec<u32>> {
        if estimate(&self.root, records, 0).is_some() {
            return None;
        }
        (excluded_size(&self.root, records, cap)? <= cap)
            .then(|| excluded(&self.root, records))
            .flatten()
    }

    /// An upper bound on how many records the filter's postings or expiry
    /// order give as candidates, told without listing them; `None` when it
    /// has none (every live record is a candidate).
    pub fn estimate(&self, records: &Records) -> Option<usize> {
        self.estimate_within(records, usize::MAX)
    }

    /// [`estimate`](Self::estimate), where a bound above `cap` may stop at
    /// any value above it (a range of the expiry or creation order is
    /// counted no further).
    pub fn estimate_within(&self, records: &Records, cap: usize) -> Option<usize> {
        estimate(&self.root, records, cap)
    }

    /// The share of the live records the filter admits and `keep` keeps, as
    /// `samples` of them spread over the store tell it (see
    /// [`Records::share`]).
    pub fn share(&self, records: &Records, samples: usize, keep: impl Fn(u32) -> bool) -> f64 {
        records.share(samples, |s| keep(s) && eval(&self.root, records, s))
    }

    /// The range of `created_at` that the filter's conditions on it (under
    /// `$and` alone) leave: every record it admits lies within. A bound that
    /// is not a number, which no record meets, is left out.
    pub fn created_bounds(&self) -> (Bound<f64>, Bound<f64>) {
        window([&self.root])
    }

    fn plan(&self, records: &Records) -> Plan {
        if let Some(cands) = candidates(&self.root, records) {
            return Plan::Candidates(cands);
        }
        excluded(&self.root, records).map_or(Plan::Scan, Plan::Except)
    }
}

/// How a filter's matches are found.
enum Plan {
    /// A sorted superset, each checked.
    Candidates(Vec<u32>),
    /// Every live slot but these (sorted), none checked.
    Except(Vec<u32>),
    /// Every live slot, each checked.
    Scan,
}

/// `slots` (ascending) less `except` (ascending), in one merge.
pub(super) fn without<'a>(
    slots: impl Iterator<Item = u32> + 'a,
    except: &'a [u32],
) -> impl Iterator<Item = u32> + 'a {
    let mut at = 0;
    slots.filter(move |&s| {
        at += except[at..].partition_point(|&e| e < s);
        except.get(at) != Some(&s)
    })
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
        syntax::Node::In(f, qs) => {
            // Each value once: its candidates are counted once in an estimate.
            let mut seen = FxHashSet::default();
            let once = qs.iter().filter(|q| seen.insert(InKey::of(q)));
            Node::In(field(f), once.map(scalar).collect())
        }
        syntax::Node::Range(f, cmp, q) => Node::Range(field(f), *cmp, scalar(q)),
        syntax::Node::Exists(f, want) => Node::Exists(field(f), *want),
    }
}

/// A value of an `$in`, as equality ([`equal`]) tells values apart.
#[derive(PartialEq, Eq, Hash)]
enum InKey<'a> {
    Null,
    Bool(bool),
    /// The bits of the number, 0.0 for -0.0 (which equals it).
    Num(u64),
    Str(&'a str),
}

impl<'a> InKey<'a> {
    fn of(q: &'a syntax::Scalar<()>) -> Self {
        match q {
            syntax::Scalar::Null => InKey::Null,
            syntax::Scalar::Bool(b) => InKey::Bool(*b),
            syntax::Scalar::Num(x) => InKey::Num(if *x == 0.0 { 0 } else { x.to_bits() }),
            syntax::Scalar::Str(s, ()) => InKey::Str(s),
        }
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

/// The scope field that `field == q` asks to be unset, if it does: those
/// slots are [`Records::unset`]'s, not postings.
fn unset_scope(field: Field, q: &Scalar) -> Option<u8> {
    match (field, q) {
        (Field::Scope(i), Scalar::Null) => Some(i),
        _ => None,
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
        // Null (no scope value) is read from `Records::unset` (`unset_scope`).
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

/// How many slots the postings (or [`Records::unset`]) hold for `field ==
/// q`; `None` if the field is not indexed.
fn posted(field: Field, q: &Scalar, records: &Records) -> Option<usize> {
    match unset_scope(field, q) {
        Some(i) => usize::try_from(records.unset(i).len()).ok(),
        None => posting_key(field, q).map(|k| k.map_or(0, |k| records.postings(&k).len())),
    }
}

fn union(lists: Vec<&[u32]>) -> Vec<u32> {
    let mut out: Vec<u32> = lists.into_iter().flatten().copied().collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// The times that compare to `q` as `cmp` asks, as bounds; `None` for a `q`
/// that is not a number (no time compares with it).
fn bounds(cmp: Cmp, q: &Scalar) -> Option<(Bound<f64>, Bound<f64>)> {
    let Scalar::Num(t) = *q else { return None };
    Some(match cmp {
        Cmp::Lt => (Unbounded, Excluded(t)),
        Cmp::Lte => (Unbounded, Included(t)),
        Cmp::Gt => (Excluded(t), Unbounded),
        Cmp::Gte => (Included(t), Unbounded),
    })
}

/// The slots whose `expires_at` compares to `q` as `cmp` asks, in the order
/// of their expiry (a record that never expires has none).
fn expiring<'a>(cmp: Cmp, q: &Scalar, records: &'a Records) -> impl Iterator<Item = u32> + 'a {
    (bounds(cmp, q).map(|(from, to)| records.expiring(from, to)))
        .into_iter()
        .flatten()
}

/// The range of `created_at` that the conditions on it in `nodes` (and under
/// their `$and`s) leave, all of them holding. A bound that is not a number,
/// which no record meets, is left out.
fn window<'n>(nodes: impl IntoIterator<Item = &'n Node>) -> (Bound<f64>, Bound<f64>) {
    fn tighten(node: &Node, lo: &mut Bound<f64>, hi: &mut Bound<f64>) {
        match node {
            Node::And(parts) => parts.iter().for_each(|p| tighten(p, lo, hi)),
            Node::Range(Field::CreatedAt, cmp, Scalar::Num(t)) if !t.is_nan() => {
                let (t, inclusive) = (*t, matches!(cmp, Cmp::Gte | Cmp::Lte));
                let bound = if inclusive { Included(t) } else { Excluded(t) };
                let (at, above) = match cmp {
                    Cmp::Gt | Cmp::Gte => (lo, true),
                    Cmp::Lt | Cmp::Lte => (hi, false),
                };
                // The tighter of two: the further in, or at the same value the excluding one.
                let tighter = match *at {
                    Unbounded => true,
                    Included(u) | Excluded(u) if u == t => !inclusive,
                    Included(u) | Excluded(u) => (t > u) == above,
                };
                if tighter {
                    *at = bound;
                }
            }
            _ => {}
        }
    }
    let (mut lo, mut hi) = (Unbounded, Unbounded);
    nodes.into_iter().for_each(|n| tighten(n, &mut lo, &mut hi));
    (lo, hi)
}

/// A creation window holding more than one in this many of the live records
/// gives no candidates: read a slot at a time from the creation order and
/// sorted, they cost more than a scan of every record.
const WINDOW_SHARE: usize = 4;

/// Slots a creation window's share of the store is first told from.
const WINDOW_SAMPLES: usize = 128;

/// What a window's candidate costs in posted candidates: its id's slot looked
/// up, then a sort.
const WINDOW_COST: usize = 4;

/// How many records the creation window between `from` and `to` holds,
/// counted no further than `cap` (a count above it may stop at any value
/// above it); `None` for a window too wide to read ([`WINDOW_SHARE`]).
fn window_size(from: Bound<f64>, to: Bound<f64>, records: &Records, cap: usize) -> Option<usize> {
    let most = records.len() / WINDOW_SHARE;
    let limit = cap.min(most);
    // A window a sample of the slots shows near the limit or past it is not
    // counted: counting it cost a search or a list that then read another
    // child's candidates, or scanned, up to a quarter of the store more.
    let share = records.created_share(from, to, WINDOW_SAMPLES);
    let n = if share * records.len() as f64 > 0.75 * limit as f64 {
        limit.saturating_add(1)
    } else {
        records.created_count(from, to, limit)
    };
    (n <= most || cap < most).then_some(n)
}

/// The slots of the creation window between `from` and `to`, ascending.
fn window_slots(from: Bound<f64>, to: Bound<f64>, records: &Records) -> Vec<u32> {
    let mut slots: Vec<u32> = records.created(from, to).collect();
    slots.sort_unstable();
    slots
}

/// The live records holding the metadata key `field` names (none for a key
/// no record ever held), ascending: those `$exists: true` of it admits;
/// `None` for a field that is not a metadata key.
fn holders<'r>(field: &Field, records: &'r Records) -> Option<&'r [u32]> {
    match field {
        Field::Meta(None) => Some(&[]),
        Field::Meta(Some(key)) => Some(records.postings(&PostingKey::Key(*key))),
        _ => None,
    }
}

/// [`holders`], to leave out: only when they are at most half the store. A
/// key most records hold leaves few in, which a scan finds sooner than a
/// merge of every record with the holders.
fn few_holders<'r>(field: &Field, records: &'r Records) -> Option<&'r [u32]> {
    holders(field, records).filter(|h| h.len() <= records.len() / 2)
}

/// The slots matching `node`, ascending, when postings or the expiry order
/// give exactly them; `None` when some must be checked.
fn exact(node: &Node, records: &Records) -> Option<Vec<u32>> {
    match node {
        // Postings hold exactly the slots with the value.
        Node::Eq(..) | Node::In(..) | Node::Range(Field::ExpiresAt, ..) => {
            candidates(node, records)
        }
        Node::Exists(f, true) => few_holders(f, records).map(<[u32]>::to_vec),
        Node::Or(children) => {
            let parts = children
                .iter()
                .map(|c| exact(c, records))
                .collect::<Option<Vec<_>>>()?;
            Some(union(parts.iter().map(Vec::as_slice).collect()))
        }
        _ => None,
    }
}

/// See [`Filter::exclusion`].
fn excluded(node: &Node, records: &Records) -> Option<Vec<u32>> {
    match node {
        Node::All => Some(Vec::new()),
        Node::Not(inner) => exact(inner, records),
        Node::Exists(f, false) => few_holders(f, records).map(<[u32]>::to_vec),
        Node::And(children) => {
            let parts = children
                .iter()
                .map(|c| excluded(c, records))
                .collect::<Option<Vec<_>>>()?;
            Some(union(parts.iter().map(Vec::as_slice).collect()))
        }
        _ => None,
    }
}

/// An upper bound on the size of [`excluded`] of `node`, where it has one;
/// a bound above `cap` may stop at any value above it.
fn excluded_size(node: &Node, records: &Records, cap: usize) -> Option<usize> {
    match node {
        Node::All => Some(0),
        Node::Not(inner) => exact_size(inner, records, cap),
        Node::Exists(f, false) => few_holders(f, records).map(<[u32]>::len),
        Node::And(children) => children.iter().try_fold(0usize, |n, c| {
            Some(n.saturating_add(excluded_size(c, records, cap.saturating_sub(n))?))
        }),
        _ => None,
    }
}

/// An upper bound on the size of [`exact`] of `node`, where it has one; a
/// bound above `cap` may stop at any value above it.
fn exact_size(node: &Node, records: &Records, cap: usize) -> Option<usize> {
    match node {
        Node::Eq(..) | Node::In(..) | Node::Range(Field::ExpiresAt, ..) => {
            estimate(node, records, cap)
        }
        Node::Exists(f, true) => few_holders(f, records).map(<[u32]>::len),
        Node::Or(children) => children.iter().try_fold(0usize, |n, c| {
            Some(n.saturating_add(exact_size(c, records, cap.saturating_sub(n))?))
        }),
        _ => None,
    }
}

/// A sorted superset of the slots matching `node`, read from postings or
/// the expiry order, or `None` when only a scan can tell.
fn candidates(node: &Node, records: &Records) -> Option<Vec<u32>> {
    match node {
        Node::Eq(f, q) => match unset_scope(*f, q) {
            Some(i) => Some(records.unset(i).iter().collect()),
            None => posting_key(*f, q)
                .map(|key| key.map_or(Vec::new(), |k| records.postings(&k).to_vec())),
        },
        Node::Range(Field::ExpiresAt, cmp, q) => {
            let mut slots: Vec<u32> = expiring(*cmp, q, records).collect();
            slots.sort_unstable();
            Some(slots)
        }
        Node::Range(Field::CreatedAt, ..) => {
            let (from, to) = window([node]);
            window_size(from, to, records, usize::MAX)?;
            Some(window_slots(from, to, records))
        }
        Node::Exists(f, true) if holders(f, records).is_some() => {
            holders(f, records).map(<[u32]>::to_vec)
        }
        Node::In(f, qs) => {
            let unset: Option<Vec<u32>> = qs
                .iter()
                .find_map(|q| unset_scope(*f, q))
                .map(|i| records.unset(i).iter().collect());
            let mut lists = Vec::with_capacity(qs.len());
            lists.extend(unset.as_deref());
            for q in qs.iter().filter(|q| unset_scope(*f, q).is_none()) {
                if let Some(k) = posting_key(*f, q)? {
                    lists.push(records.postings(&k));
                }
            }
            Some(union(lists))
        }
        Node::And(children) => {
            // Estimate each child's size cheaply before materialising the smallest.
            match smallest(children, records, usize::MAX)?.1 {
                Start::Child(c) => candidates(c, records),
                Start::Window(from, to) => Some(window_slots(from, to, records)),
            }
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

/// Whether [`estimate`] of `node` takes a count (of a range of the expiry
/// or the creation order) rather than a posting's length.
fn counted(node: &Node) -> bool {
    match node {
        Node::Range(Field::ExpiresAt | Field::CreatedAt, ..) => true,
        Node::And(c) | Node::Or(c) => c.iter().any(counted),
        _ => false,
    }
}

/// Where an `$and` reads its candidates from.
enum Start<'n> {
    /// One of its children's.
    Child(&'n Node),
    /// The range of `created_at` that its children's conditions on it leave
    /// together, read from the creation order (each alone may hold most of
    /// the store when the window is narrow).
    Window(Bound<f64>, Bound<f64>),
}

/// Where an `$and` of `children` reads the fewest candidates from, and how
/// many; `None` when no child has candidates. Those whose estimate is a count
/// go last (its creation window once for its ranges on `created_at`), each
/// counted no further than the smallest found before it.
fn smallest<'n>(children: &'n [Node], records: &Records, cap: usize) -> Option<(usize, Start<'n>)> {
    let timed = |c: &&Node| matches!(c, Node::Range(Field::CreatedAt, ..));
    let mut best: Option<(usize, Start)> = None;
    let read = children.iter().filter(|c| !counted(c));
    let counts = children.iter().filter(|c| counted(c) && !timed(c));
    for c in read.chain(counts) {
        let cap = best.as_ref().map_or(cap, |(n, _)| *n);
        if let Some(n) = estimate(c, records, cap) {
            if best.as_ref().is_none_or(|(b, _)| n < *b) {
                best = Some((n, Start::Child(c)));
            }
        }
    }
    if children.iter().any(|c| timed(&c)) {
        // Weighed by what its candidates cost beside posted ones.
        let cap = best.as_ref().map_or(cap, |(n, _)| *n / WINDOW_COST);
        let (from, to) = window(children.iter().filter(timed));
        if let Some(n) = window_size(from, to, records, cap) {
            if n <= cap {
                best = Some((n, Start::Window(from, to)));
            }
        }
    }
    best
}

/// An upper bound on the size of `candidates(node)`, or `None` if it has none.
/// An estimate that would exceed `cap` may stop at any value above it.
fn estimate(node: &Node, records: &Records, cap: usize) -> Option<usize> {
    match node {
        Node::Eq(f, q) => posted(*f, q, records),
        Node::In(f, qs) => qs
            .iter()
            .try_fold(0usize, |acc, q| Some(acc + posted(*f, q, records)?)),
        Node::Range(Field::ExpiresAt, cmp, q) => Some(
            expiring(*cmp, q, records)
                .take(cap.saturating_add(1))
                .count(),
        ),
        Node::Range(Field::CreatedAt, ..) => {
            let (from, to) = window([node]);
            window_size(from, to, records, cap)
        }
        Node::Exists(f, true) if holders(f, records).is_some() => {
            holders(f, records).map(<[u32]>::len)
        }
        Node::And(c) => smallest(c, records, cap).map(|(n, _)| n),
        Node::Or(c) => c.iter().try_fold(0usize, |acc, n| {
            Some(acc.saturating_add(estimate(n, records, cap.saturating_sub(acc))?))
        }),
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

    /// A store of `n` records: tables t0..t2, agents a0..a3 (or none), a
    /// metadata tag of a few values, and an expiry for some, several sharing
    /// a time (a small generator, so the cases repeat); some removed.
    fn expiring_store(n: u64, seed: u64) -> Records {
        let mut s = seed | 1;
        let mut below = |m: u64| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s % m
        };
        let mut r = Records::default();
        for i in 0..n {
            let agent = below(5);
            let expires = below(3) == 0;
            let at = below(40) as f64 - 10.0;
            let meta = format!(r#"{{"tag": {}, "on": {}}}"#, below(4), below(2) == 0);
            r.insert(
                i,
                &Attrs {
                    id: Some(format!("r{i}")),
                    scope: [
                        (agent < 4).then(|| format!("a{agent}")),
                        None,
                        None,
                        None,
                        None,
                        None,
                    ],
                    expires_at: expires.then_some(if at == 0.0 { -0.0 } else { at }),
                    metadata: flatten_metadata(&meta).unwrap(),
                    ..Attrs::blank(&format!("t{}", below(3)), "k")
                },
            );
        }
        for i in (0..n).step_by(7) {
            r.remove(i);
        }
        r
    }

    /// Whether time `at` compares to `t` as the range operator `cmp` asks.
    fn meets(at: f64, cmp: &str, t: f64) -> bool {
        match cmp {
            "$lt" => at < t,
            "$lte" => at <= t,
            "$gt" => at > t,
            _ => at >= t,
        }
    }

    #[test]
    fn expiry_ranges_and_exclusions_match_a_scan() {
        for seed in [1, 2, 3] {
            let r = expiring_store(400, seed);
            let expiring = |t: f64, cmp: &str| {
                r.live_slots()
                    .filter(|&s| {
                        let at = r.expires_at[s as usize];
                        at.is_finite() && meets(at, cmp, t)
                    })
                    .count()
            };
            for t in [-11.0, -0.0, 0.0, 5.0, 12.5, 29.0, 40.0] {
                for cmp in ["$lt", "$lte", "$gt", "$gte"] {
                    let range = format!(r#"{{"expires_at": {{"{cmp}": {t:?}}}}}"#);
                    let filters = [
                        range.clone(),
                        format!(r#"{{"expires_at": {{"$not": {{"{cmp}": {t:?}}}}}}}"#),
                        format!(r#"{{"$and": [{range}, {{"table": "t1"}}]}}"#),
                        format!(r#"{{"$and": [{range}, {{"tag": {{"$ne": 2}}}}]}}"#),
                        format!(r#"{{"$or": [{range}, {{"agent_id": "a1"}}]}}"#),
                        format!(
                            r#"{{"$and": [{{"$not": {range}}}, {{"table": {{"$nin": ["t0"]}}}},
                                {{"id": {{"$ne": "r5"}}}}, {{}}]}}"#
                        ),
                        format!(r#"{{"$and": [{{"$not": {range}}}, {{"importance": 0.5}}]}}"#),
                        format!(r#"{{"$not": {{"$or": [{range}, {{"on": true}}]}}}}"#),
                    ];
                    for json in &filters {
                        let f = Filter::parse(json, &r).unwrap();
                        let want: Vec<u32> = r.live_slots().filter(|&s| f.matches(&r, s)).collect();
                        let got = f.select(&r);
                        assert_eq!(got.slots, want, "{json}");
                        assert_eq!(f.count(&r), want.len(), "{json}");
                        if let Some(except) = f.exclusion(&r) {
                            assert_eq!(except.len() + want.len(), r.len(), "{json}");
                            assert_eq!(got.examined, except.len(), "{json}");
                        }
                    }
                    // Read from the expiry order: what it holds is all it reads.
                    let f = Filter::parse(&range, &r).unwrap();
                    assert_eq!(f.select(&r).examined, expiring(t, cmp), "{range}");
                    let not = format!(r#"{{"expires_at": {{"$not": {{"{cmp}": {t:?}}}}}}}"#);
                    let f = Filter::parse(&not, &r).unwrap();
                    assert_eq!(f.exclusion(&r).map(|e| e.len()), Some(expiring(t, cmp)));
                }
            }
        }
    }

    #[test]
    fn creation_ranges_are_read_from_the_creation_order() {
        let mut r = expiring_store(400, 9);
        // Creation times with ties, -0.0 among them, replaced and removed records too.
        let slots: Vec<u32> = r.live_slots().collect();
        for (n, &slot) in slots.iter().enumerate() {
            let id = r.id(slot);
            let at = (n % 37) as f64 - 12.0;
            let attrs = Attrs {
                id: Some(format!("r{id}")),
                created_at: if at == 0.0 && n % 2 == 0 { -0.0 } else { at },
                ..Attrs::blank(&format!("t{}", n % 3), "k")
            };
            r.insert(id, &attrs);
        }
        for id in (0..400).step_by(11) {
            r.remove(id);
        }
        let created = |t: f64, cmp: &str| {
            (r.live_slots())
                .filter(|&s| meets(r.created_at[s as usize], cmp, t))
                .count()
        };
        for t in [-13.0, -0.0, 0.0, 4.0, 7.5, 24.0, 30.0] {
            for cmp in ["$lt", "$lte", "$gt", "$gte"] {
                let range = format!(r#"{{"created_at": {{"{cmp}": {t:?}}}}}"#);
                for json in [
                    range.clone(),
                    format!(r#"{{"$and": [{range}, {{"table": "t1"}}]}}"#),
                    format!(r#"{{"$or": [{range}, {{"table": "t2"}}]}}"#),
                    format!(r#"{{"$not": {range}}}"#),
                ] {
                    let f = Filter::parse(&json, &r).unwrap();
                    let want: Vec<u32> = r.live_slots().filter(|&s| f.matches(&r, s)).collect();
                    assert_eq!(f.select(&r).slots, want, "{json}");
                    assert_eq!(f.count(&r), want.len(), "{json}");
                }
                // What the order holds in a narrow range is all it reads; a wide one
                // is scanned, and one near the limit either way (its sample tells).
                let f = Filter::parse(&range, &r).unwrap();
                let (n, most) = (created(t, cmp), r.len() / WINDOW_SHARE);
                let examined = f.select(&r).examined;
                match n {
                    n if n * 2 < most => assert_eq!(examined, n, "{range}"),
                    n if n > most => assert_eq!(examined, r.len(), "{range}"),
                    n => assert!(examined == n || examined == r.len(), "{range}"),
                }
            }
        }
        // Two ranges, each wide, read together as their narrow window.
        let within = |lo: f64, hi: f64| {
            (r.live_slots())
                .filter(|&s| (lo..hi).contains(&r.created_at[s as usize]))
                .count()
        };
        for (lo, hi) in [(-3.0, 1.0), (5.0, 5.5), (20.0, 10.0)] {
            let json = format!(r#"{{"created_at": {{"$gte": {lo:?}, "$lt": {hi:?}}}}}"#);
            let f = Filter::parse(&json, &r).unwrap();
            let got = f.select(&r);
            assert_eq!(got.examined, within(lo, hi), "{json}");
            assert_eq!(got.slots.len(), within(lo, hi), "{json}");
        }
    }

    #[test]
    fn a_value_listed_twice_in_an_in_is_counted_once() {
        let r = store();
        let once = Filter::parse(r#"{"agent_id": {"$in": ["a"]}}"#, &r).unwrap();
        let twice = Filter::parse(r#"{"agent_id": {"$in": ["a", "a", "b", "a", "b"]}}"#, &r);
        let (once, twice) = (once.estimate(&r), twice.unwrap().estimate(&r));
        assert_eq!((once, twice), (Some(2), Some(3)));
    }

    #[test]
    fn an_unset_scope_is_read_from_its_bitmap() {
        for seed in [1, 2, 3] {
            let mut r = expiring_store(400, seed);
            // A record moved out of the unset scope and one moved into it.
            let moved = |agent: Option<&str>| Attrs {
                id: Some("moved".into()),
                scope: [agent.map(String::from), None, None, None, None, None],
                ..Attrs::blank("t1", "k")
            };
            r.insert(1_000, &moved(None));
            r.insert(1_000, &moved(Some("a1")));
            r.insert(1_001, &moved(Some("a2")));
            r.insert(1_001, &moved(None));
            let unset = r.live_slots().filter(|&s| r.scope[0][s as usize] == NONE);
            let unset: Vec<u32> = unset.collect();
            assert!(r.unset(0).iter().eq(unset.iter().copied()));
            // As a snapshot's load builds them, whole.
            r.rebuild_index().unwrap();
            assert!(r.unset(0).iter().eq(unset.iter().copied()));
            let broader = r#"{"$or": [{"agent_id": "a1"}, {"agent_id": null}]}"#;
            for (json, reads) in [
                (r#"{"agent_id": null}"#.to_string(), unset.len()),
                (
                    broader.to_string(),
                    unset.len() + r.postings(&key(&r, "a1")).len(),
                ),
                (
                    r#"{"agent_id": {"$in": ["a2", null, "nobody"]}}"#.to_string(),
                    0,
                ),
                (format!(r#"{{"$and": [{{"table": "t1"}}, {broader}]}}"#), 0),
                (
                    r#"{"$and": [{"user_id": null}, {"agent_id": "a3"}]}"#.to_string(),
                    0,
                ),
            ] {
                let f = Filter::parse(&json, &r).unwrap();
                let want: Vec<u32> = r.live_slots().filter(|&s| f.matches(&r, s)).collect();
                let got = f.select(&r);
                assert_eq!(got.slots, want, "{json}");
                assert!(got.examined < r.len(), "{json}");
                if reads > 0 {
                    assert_eq!(got.examined, reads, "{json}");
                }
            }
        }
    }

    fn key(r: &Records, agent: &str) -> PostingKey {
        PostingKey::Scope(0, r.strings.get(agent).unwrap())
    }

    #[test]
    fn an_and_starts_from_its_smallest_part_an_expiry_range_too() {
        let mut r = Records::default();
        for i in 0..1000u64 {
            r.insert(
                i,
                &Attrs {
                    // Every record expires, a few of them by 10.
                    expires_at: Some(if i % 100 == 0 { 5.0 } else { 50.0 + i as f64 }),
                    ..Attrs::blank("items", "k")
                },
            );
        }
        let sweep = Filter::parse(r#"{"table": "items", "expires_at": {"$lte": 10}}"#, &r).unwrap();
        let s = sweep.select(&r);
        assert_eq!((s.slots.len(), s.examined), (10, 10));
        let late = Filter::parse(r#"{"expires_at": {"$gt": 10}, "table": "items"}"#, &r).unwrap();
        assert_eq!(late.select(&r).slots.len(), 990);
        // `$exists` reads the records holding the key alone: none for a key
        // no record holds, interned or not.
        r.insert(
            5000,
            &Attrs {
                metadata: flatten_metadata(r#"{"old": 1}"#).unwrap(),
                ..Attrs::blank("items", "k")
            },
        );
        for json in [
            r#"{"table": "items", "old": {"$exists": true}}"#,
            r#"{"table": "items", "never": {"$exists": true}}"#,
        ] {
            let f = Filter::parse(json, &r).unwrap();
            let s = f.select(&r);
            let held = usize::from(json.contains("old"));
            assert_eq!((s.slots.len(), s.examined), (held, held));
        }
        assert!(r.remove(5000));
        let f = Filter::parse(r#"{"table": "items", "old": {"$exists": true}}"#, &r).unwrap();
        assert_eq!(f.select(&r).examined, 0);
    }

    /// `$exists` of keys held by many, few or no records, alone, negated,
    /// under `$and` and `$or`, after removals: the holders' postings give
    /// what a scan of the columns gives, and reading a few holders examines
    /// those alone.
    #[test]
    fn exists_reads_the_holders_of_its_key() {
        let mut r = Records::default();
        let mut rng = crate::testdata::Rng(17);
        for i in 0..3000u64 {
            let meta = match rng.below(10) {
                0 => r#"{"rare": null, "many": 1}"#,
                1..=6 => r#"{"many": [1, 2], "nested": {"x": 1}}"#,
                _ => "{}",
            };
            r.insert(
                i,
                &Attrs {
                    metadata: flatten_metadata(meta).unwrap(),
                    ..Attrs::blank(["a", "b"][i as usize % 2], "k")
                },
            );
        }
        for i in (0..3000).step_by(7) {
            r.remove(i);
        }
        let scan = |f: &Filter| -> Vec<u32> {
            r.live_slots().filter(|&s| eval(f.root(), &r, s)).collect()
        };
        for json in [
            r#"{"rare": {"$exists": true}}"#,
            r#"{"rare": {"$exists": false}}"#,
            r#"{"many": {"$exists": true}}"#,
            r#"{"many": {"$exists": false}}"#,
            r#"{"nested.x": {"$exists": true}}"#,
            r#"{"nested": {"$exists": true}}"#,
            r#"{"never": {"$exists": false}}"#,
            r#"{"$not": {"rare": {"$exists": true}}}"#,
            r#"{"table": "a", "rare": {"$exists": true}}"#,
            r#"{"$or": [{"rare": {"$exists": true}}, {"table": "b"}]}"#,
            r#"{"rare": {"$exists": false}, "many": {"$exists": true}}"#,
        ] {
            let f = Filter::parse(json, &r).unwrap();
            let want = scan(&f);
            assert_eq!(f.select(&r).slots, want, "{json}");
            assert_eq!(f.count(&r), want.len(), "{json}");
        }
        let rare = r.with_key(r.keys.get("rare").unwrap());
        assert!(rare > 0 && rare < 400);
        let f = Filter::parse(r#"{"rare": {"$exists": true}}"#, &r).unwrap();
        assert_eq!(f.select(&r).examined, rare);
        let f = Filter::parse(r#"{"rare": {"$exists": false}}"#, &r).unwrap();
        assert_eq!(f.select(&r).examined, rare);
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
