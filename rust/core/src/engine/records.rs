//! Per-record attributes in slot-indexed columns, with inverted postings on
//! every (field, value) pair that equality and membership filters look up.
//!
//! A record lives in a slot; removing it frees the slot for the next add.
//! Strings (table, type, scope values, metadata string values) are interned
//! to `u32`s, and metadata keys have an interner of their own. Metadata is
//! flattened at insert: nested objects become dotted keys (`{"a": {"b": 1}}`
//! is `a.b = 1`) and a list of scalars gives its key several values, which a
//! filter matches if any of them does (as MongoDB does).

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};
use std::ops::Bound::{self, Excluded, Included, Unbounded};
use std::ops::RangeBounds;
use std::sync::atomic::{AtomicU64, Ordering};

use hashbrown::hash_table::{self, HashTable};
use roaring::RoaringBitmap;
use rustc_hash::{FxHashMap, FxHasher};

use super::speakers::{transcript_speaker, NameWords, MESSAGES};
use crate::error::{Error, Result};
use crate::idmap::SlotMap;
use crate::pages::Region;
use crate::prefetch::prefetch;

/// The scope fields, in the order of [`Attrs::scope`].
pub const SCOPE_FIELDS: [&str; 6] = [
    "agent_id",
    "user_id",
    "room_id",
    "world_id",
    "session_id",
    "namespace",
];

/// An absent scope value.
pub const NONE: u32 = u32::MAX;

/// The place of `session_id` in [`SCOPE_FIELDS`].
const SESSION: usize = 4;

/// Metadata nested deeper than this is refused (a guard against hostile input).
const MAX_DEPTH: usize = 16;

/// A stored scalar: strings are interned.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Num(f64),
    Str(u32),
}

/// The hashable form of a [`Value`] used as a postings key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ValueKey {
    Null,
    Bool(bool),
    Num(u64),
    Str(u32),
}

impl ValueKey {
    pub fn num(x: f64) -> Self {
        // -0.0 and 0.0 are equal, so they must share a key.
        ValueKey::Num(if x == 0.0 { 0 } else { x.to_bits() })
    }
}

impl From<Value> for ValueKey {
    fn from(v: Value) -> Self {
        match v {
            Value::Null => ValueKey::Null,
            Value::Bool(b) => ValueKey::Bool(b),
            Value::Num(x) => ValueKey::num(x),
            Value::Str(s) => ValueKey::Str(s),
        }
    }
}

/// Indexed fields: everything filters look up by equality.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PostingKey {
    Table(u32),
    Type(u32),
    Scope(u8, u32),
    Evergreen(bool),
    Meta(u32, ValueKey),
    /// Records that were superseded (with a `valid_to`): few, so searches
    /// of current records leave them out cheaply.
    Closed,
    /// A conversation turn's speaker (interned): whether a search's scope
    /// holds turns of a speaker its question names.
    Speaker(u32),
    /// The records that hold a metadata key (interned), whatever its value:
    /// `$exists` of a key a few records hold reads those.
    Key(u32),
    /// A record's public id (interned); looked up in [`Records::by_key`]
    /// rather than in the postings, since each names one slot.
    Id(u32),
}

/// Strings numbered in the order they were first met. A store interns every
/// record's public id, so at a million records this holds a million strings:
/// their bytes lie end to end in one buffer, and the table holds only their
/// numbers (a string and a map key apiece took three times the memory, and
/// two allocations per string made loading a snapshot slower).
#[derive(Default, Clone, Debug)]
pub struct Interner {
    /// Every string's bytes, one after another.
    text: String,
    /// Where each string ends in `text`; it starts where the one before ends.
    ends: Vec<usize>,
    /// Numbers into `ends`, found by their string's hash.
    table: HashTable<u32>,
}

impl Interner {
    pub fn get(&self, s: &str) -> Option<u32> {
        self.table
            .find(hash_str(s), |&id| self.resolve(id) == s)
            .copied()
    }

    pub fn intern(&mut self, s: &str) -> u32 {
        let hash = hash_str(s);
        let Interner { text, ends, table } = self;
        let entry = table.entry(
            hash,
            |&id| string(text, ends, id) == s,
            |&id| hash_str(string(text, ends, id)),
        );
        match entry {
            hash_table::Entry::Occupied(e) => *e.get(),
            hash_table::Entry::Vacant(e) => {
                let id = u32::try_from(ends.len()).expect("fewer than 2^32 strings");
                text.push_str(s);
                ends.push(text.len());
                e.insert(id);
                id
            }
        }
    }

    pub fn resolve(&self, id: u32) -> &str {
        string(&self.text, &self.ends, id)
    }

    /// How many strings there are.
    pub fn count(&self) -> usize {
        self.ends.len()
    }

    /// The strings in the order of their numbers.
    pub fn strings(&self) -> impl ExactSizeIterator<Item = &str> {
        (0..self.ends.len() as u32).map(|id| self.resolve(id))
    }

    /// Interns `strings`, numbered in their order; None if one occurs twice.
    pub fn from_strings<'a>(strings: impl ExactSizeIterator<Item = &'a str>) -> Option<Self> {
        let mut out = Interner::default();
        out.ends.reserve(strings.len());
        out.table.reserve(strings.len(), |_| 0);
        for (i, s) in strings.enumerate() {
            if out.intern(s) as usize != i {
                return None;
            }
        }
        Some(out)
    }
}

/// The string numbered `id` (empty past the last).
fn string<'a>(text: &'a str, ends: &[usize], id: u32) -> &'a str {
    let id = id as usize;
    match ends.get(id) {
        Some(&end) => &text[if id == 0 { 0 } else { ends[id - 1] }..end],
        None => "",
    }
}

fn hash_str(s: &str) -> u64 {
    let mut h = FxHasher::default();
    s.hash(&mut h);
    h.finish()
}

/// A metadata scalar before interning.
#[derive(Clone, Debug, PartialEq)]
pub enum RawValue {
    Null,
    Bool(bool),
    Num(f64),
    Str(String),
}

/// How much of `text` asks: the share of its characters (whitespace not
/// counted) in sentences that ask, in 255ths, rounded up, so a text with one
/// such sentence never counts 0. A sentence asks when the run of marks that
/// ends it holds a question mark (`?`, `？` or `؟`), or it holds `¿`. A run of
/// `.`, `!`, `?`, `…`, `؟` ends a sentence unless a letter or digit follows
/// it ("3.5", "porto?day=1", a link's query, end none), and a run holding a
/// full-width `。`, `！` or `？`, which Chinese and Japanese write without a
/// space after, ends it whatever follows.
pub fn question_share(text: &str) -> u8 {
    #[derive(Default)]
    struct Sentence {
        chars: usize,
        opened: bool,
        in_run: bool,
        run_asks: bool,
        run_wide: bool,
    }
    let (mut asked, mut all) = (0usize, 0usize);
    let mut s = Sentence::default();
    let mut close = |s: &mut Sentence| {
        all += s.chars;
        if s.opened || s.run_asks {
            asked += s.chars;
        }
        *s = Sentence::default();
    };
    for c in text.chars() {
        let mark = matches!(
            c,
            '.' | '!' | '?' | '\u{2026}' | '\u{61F}' | '\u{3002}' | '\u{FF01}' | '\u{FF1F}'
        );
        if s.in_run && !mark {
            if c.is_alphanumeric() && !s.run_wide {
                (s.in_run, s.run_asks) = (false, false);
            } else {
                close(&mut s);
            }
        }
        if c.is_whitespace() {
            continue;
        }
        s.chars += 1;
        s.opened |= c == '\u{BF}';
        if mark {
            s.in_run = true;
            s.run_asks |= matches!(c, '?' | '\u{FF1F}' | '\u{61F}');
            s.run_wide |= matches!(c, '\u{3002}' | '\u{FF01}' | '\u{FF1F}');
        }
    }
    close(&mut s);
    if all == 0 {
        return 0;
    }
    // At most 255: `asked <= all`.
    u8::try_from((asked * 255).div_ceil(all)).unwrap_or(u8::MAX)
}

/// The attributes of one record, as a caller gives them. The fields are
/// named as `memlane.schema.Row`'s (the database's columns), whose values
/// fill them (`rust/py/src/engine.rs`).
#[derive(Clone, Debug)]
pub struct Attrs {
    /// The record's public id (the database's `id` string), if the caller
    /// gives it; filters on `id` read it.
    pub id: Option<String>,
    pub tbl: String,
    pub r#type: String,
    pub scope: [Option<String>; 6],
    pub importance: f32,
    pub evergreen: bool,
    pub created_at: f64,
    pub updated_at: f64,
    pub last_accessed_at: f64,
    pub access_count: u64,
    /// When the record stopped being true (it was superseded); `None`: it
    /// still is. A record is valid from its `created_at` until then.
    pub valid_to: Option<f64>,
    /// When the record expires (no read returns it from then on); `None`: never.
    pub expires_at: Option<f64>,
    /// When the store learned the record (its ingestion time, set by the store).
    pub recorded_at: f64,
    /// Who said it, for a conversation turn: `"user"` for the store's own
    /// person, a name otherwise; `None` for a record that is not a turn.
    pub speaker: Option<String>,
    /// Flattened metadata: (dotted key, value) pairs.
    pub metadata: Vec<(String, RawValue)>,
}

impl Attrs {
    /// Whether the record's speaker is read from its text: a message given
    /// without one ([`transcript_speaker`]).
    pub fn speaker_in_text(&self) -> bool {
        self.speaker.is_none() && self.tbl == MESSAGES
    }

    /// Takes the speaker a message's `text` names as a transcript line, where
    /// [`Self::speaker_in_text`]; the engine weighs it as a given one (the
    /// record keeps none: the caller's database is not changed).
    pub fn read_speaker(&mut self, text: &str) {
        if self.speaker_in_text() {
            self.speaker = transcript_speaker(text).map(str::to_owned);
        }
    }
}

#[cfg(test)]
impl Attrs {
    /// A record of `tbl` and `type`, every other field at its plainest
    /// (importance 0.5, times 0, no id, scope, speaker or metadata): what a
    /// unit test sets the fields it is about on.
    pub(crate) fn blank(tbl: &str, r#type: &str) -> Attrs {
        Attrs {
            id: None,
            tbl: tbl.into(),
            r#type: r#type.into(),
            scope: Default::default(),
            importance: 0.5,
            evergreen: false,
            created_at: 0.0,
            updated_at: 0.0,
            last_accessed_at: 0.0,
            access_count: 0,
            valid_to: None,
            expires_at: None,
            recorded_at: 0.0,
            speaker: None,
            metadata: Vec::new(),
        }
    }
}

impl Attrs {
    /// Checks the numbers; called on a whole batch before anything changes.
    pub fn validate(&self, row: usize) -> Result<()> {
        if !(self.importance.is_finite() && (0.0..=1.0).contains(&self.importance)) {
            return Err(Error::invalid(format!(
                "record {row}: importance must be a number in [0, 1], got {}",
                self.importance
            )));
        }
        for (name, t) in [
            ("created_at", self.created_at),
            ("updated_at", self.updated_at),
            ("last_accessed_at", self.last_accessed_at),
            ("recorded_at", self.recorded_at),
        ] {
            if !t.is_finite() {
                return Err(Error::invalid(format!(
                    "record {row}: {name} must be a finite number, got {t}"
                )));
            }
        }
        for (name, t) in [("valid_to", self.valid_to), ("expires_at", self.expires_at)] {
            if let Some(t) = t.filter(|t| !t.is_finite()) {
                return Err(Error::invalid(format!(
                    "record {row}: {name} must be a finite number or None, got {t}"
                )));
            }
        }
        Ok(())
    }
}

/// Flattens a metadata JSON object into (dotted key, scalar) pairs.
pub fn flatten_metadata(json: &str) -> Result<Vec<(String, RawValue)>> {
    let value: serde_json::Value = serde_json::from_str(json)
        .map_err(|e| Error::invalid(format!("metadata is not valid JSON: {e}")))?;
    let serde_json::Value::Object(map) = value else {
        return Err(Error::invalid("metadata must be a JSON object"));
    };
    let mut out = Vec::new();
    for (k, v) in &map {
        flatten_into(&escape_key(k), v, 0, &mut out)?;
    }
    Ok(out)
}

/// A metadata key as one part of a dotted path: a literal `.` (and the `\`
/// escaping it) is escaped, so `{"a.b": 1}` (key `a\.b`) and `{"a": {"b": 1}}`
/// (path `a.b`) stay apart.
pub fn escape_key(key: &str) -> String {
    if !key.contains(['.', '\\']) {
        return key.to_owned();
    }
    key.replace('\\', "\\\\").replace('.', "\\.")
}

fn scalar(v: &serde_json::Value) -> Option<RawValue> {
    match v {
        serde_json::Value::Null => Some(RawValue::Null),
        serde_json::Value::Bool(b) => Some(RawValue::Bool(*b)),
        serde_json::Value::Number(n) => n.as_f64().map(RawValue::Num),
        serde_json::Value::String(s) => Some(RawValue::Str(s.clone())),
        _ => None,
    }
}

fn flatten_into(
    key: &str,
    v: &serde_json::Value,
    depth: usize,
    out: &mut Vec<(String, RawValue)>,
) -> Result<()> {
    if depth > MAX_DEPTH {
        return Err(Error::invalid(format!(
            "metadata is nested more than {MAX_DEPTH} levels deep"
        )));
    }
    match v {
        serde_json::Value::Object(map) => {
            for (k, child) in map {
                flatten_into(&format!("{key}.{}", escape_key(k)), child, depth + 1, out)?;
            }
        }
        // Lists give their scalar elements; objects inside lists are stored
        // (in the database) but not filterable.
        serde_json::Value::Array(items) => {
            out.extend(items.iter().filter_map(scalar).map(|s| (key.to_owned(), s)));
        }
        other => {
            if let Some(s) = scalar(other) {
                out.push((key.to_owned(), s));
            }
        }
    }
    Ok(())
}

/// The columns. Every `Vec` has one entry per slot.
#[derive(Default)]
pub struct Records {
    pub(crate) strings: Interner,
    pub(crate) keys: Interner,
    pub(crate) ids: Vec<u64>,
    /// Per slot: the interned public id, or [`NONE`].
    pub(crate) key: Vec<u32>,
    pub(crate) live: Vec<bool>,
    pub(crate) slots: SlotMap,
    pub(crate) free: Vec<u32>,
    pub(crate) table: Vec<u32>,
    pub(crate) kind: Vec<u32>,
    pub(crate) scope: [Vec<u32>; 6],
    pub(crate) importance: Vec<f32>,
    pub(crate) evergreen: Vec<bool>,
    pub(crate) created_at: Vec<f64>,
    pub(crate) updated_at: Vec<f64>,
    /// f64 bits; atomic so that a search under a read lock can record an access.
    pub(crate) accessed_at: Vec<AtomicU64>,
    /// Accesses recorded; atomic for the same reason.
    pub(crate) access_count: Vec<AtomicU64>,
    /// Per slot: (key id, value), sorted by key id.
    pub(crate) meta: Vec<Vec<(u32, Value)>>,
    /// Sorted slots per indexed (field, value).
    pub(crate) postings: FxHashMap<PostingKey, Vec<u32>>,
    /// Interned public id to its slot.
    pub(crate) by_key: FxHashMap<u32, u32>,
    /// Per scope field, the live slots that leave it unset: what a broader
    /// scope's `{field: None}` reads (an agent's notes shown in each of its
    /// users' conversations). Bitmaps, not postings: most records leave most
    /// fields unset, and a list would hold a slot per record and field.
    pub(crate) unset: [RoaringBitmap; 6],
    /// Per slot: when the record was superseded (infinity while current).
    pub(crate) valid_to: Vec<f64>,
    /// Per slot: when the record expires (infinity: never).
    pub(crate) expires_at: Vec<f64>,
    /// Per slot: when the store learned the record.
    pub(crate) recorded_at: Vec<f64>,
    /// Per slot: the interned speaker, or [`NONE`].
    pub(crate) speaker: Vec<u32>,
    /// Per slot: how much of the record's text asks ([`question_share`]),
    /// set where its text is indexed. A memory that asks seldom holds the
    /// answer (`question_weight`), and a turn that asks nothing after one that
    /// asks answers it, and borrows its likeness to the query (`answer_weight`).
    pub(crate) questions: Vec<u8>,
    /// Live records per interned speaker: the store's speakers (empty in a
    /// store without conversation turns, so a search skips the speaker pass).
    pub(crate) speakers: FxHashMap<u32, u32>,
    /// The names of the speakers with turns (current or superseded: a search
    /// of versions admits both), found from a query's words
    /// ([`NameWords::without_names`]).
    pub(crate) names: NameWords,
    /// How many live records are turns, of all and of the current ones: what
    /// a search that admits all but a few listed records asks.
    pub(crate) turns: TurnCounts,
    /// Live records per table and scope ([`Records::group`]), so that counts
    /// by table and scope of the whole store read no record.
    pub(crate) groups: FxHashMap<[u32; 7], u32>,
    /// Live turns per table and scope, of the groups that hold any: whether
    /// a filter of tables and scopes can admit a turn, told without reading
    /// one.
    pub(crate) turn_groups: FxHashMap<[u32; 7], Turns>,
    /// The live records that expire, by `expires_at` ([`ordered`]) then slot:
    /// those expired at a time are a range of it (usually a few, since
    /// maintenance deletes them), so a read that leaves them out, and a
    /// range filter on `expires_at`, read them alone. Derived from the
    /// columns, as the postings are.
    pub(crate) expiring: BTreeSet<(u64, u32)>,
    /// The live records by `created_at` ([`ordered`]) then id: a page by
    /// creation time walks it from one end and stops when the page is full,
    /// and a narrow window on `created_at` reads its records from it, instead
    /// of reading every record a filter admits. Derived from the columns, as
    /// the postings are.
    pub(crate) by_time: BTreeSet<(u64, u64)>,
    /// Per slot: the previous and the next record of its session by
    /// (`created_at`, id), or [`NONE`]. Derived from the columns, so a
    /// snapshot need not carry them ([`Records::rebuild_index`]).
    pub(crate) prev: Vec<u32>,
    pub(crate) next: Vec<u32>,
    /// Per session, keyed by the whole scope (the interned values of every
    /// scope field, `session_id` among them, so that a turn's context never
    /// holds another agent's or user's record): its records' slots by
    /// [`order_key`], where an add finds its neighbours in `O(log n)`
    /// whatever order turns arrive in.
    pub(crate) sessions: FxHashMap<[u32; 6], BTreeMap<(u64, u64), u32>>,
}

/// The clock times for which an answer that read records' expiry holds:
/// from the latest expiry it found passed (inclusive) until the soonest it
/// found ahead (exclusive).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Held {
    pub from: f64,
    pub until: f64,
}

impl Default for Held {
    fn default() -> Self {
        Held {
            from: f64::NEG_INFINITY,
            until: f64::INFINITY,
        }
    }
}

impl Held {
    /// Whether the answer holds at `now`.
    pub fn at(&self, now: f64) -> bool {
        self.from <= now && now < self.until
    }
}

/// Live records that are conversation turns: with a session, with a speaker;
/// of all, and of the current ones (not superseded).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TurnCounts {
    pub all: Turns,
    pub current: Turns,
}

/// Records with a session and records with a speaker.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Turns {
    pub sessions: usize,
    pub speakers: usize,
}

impl Turns {
    /// Counts a record that is a turn as `turn` says, `by` (1 or -1) times.
    pub fn count(&mut self, turn: (bool, bool), by: isize) {
        self.sessions = self
            .sessions
            .saturating_add_signed(by * isize::from(turn.0));
        self.speakers = self
            .speakers
            .saturating_add_signed(by * isize::from(turn.1));
    }
}

impl TurnCounts {
    fn count(&mut self, turn: ((bool, bool), bool), by: isize) {
        let (turn, closed) = turn;
        self.all.count(turn, by);
        if !closed {
            self.current.count(turn, by);
        }
    }
}

/// The splitmix64 finaliser of `x`: a fixed, well-mixed hash.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Lowers `key`'s total by one, dropping it at zero.
fn decrement<K: std::hash::Hash + Eq>(totals: &mut FxHashMap<K, u32>, key: K) {
    if let Some(n) = totals.get_mut(&key) {
        *n -= 1;
        if *n == 0 {
            totals.remove(&key);
        }
    }
}

/// The keys of a slot's metadata (sorted by key), each once: a list
/// repeats its key.
fn distinct_keys(meta: &[(u32, Value)]) -> impl Iterator<Item = u32> + '_ {
    meta.iter()
        .enumerate()
        .filter(|&(i, &(k, _))| i == 0 || meta[i - 1].0 != k)
        .map(|(_, &(k, _))| k)
}

/// A record's place in its session: `created_at` (as bits that sort as the
/// floats do), then the id, so turns stored in the same second keep the
/// order they were stored in.
fn order_key(created_at: f64, id: u64) -> (u64, u64) {
    let bits = created_at.to_bits();
    let ordered = if bits >> 63 == 1 {
        !bits
    } else {
        bits | (1 << 63)
    };
    (ordered, id)
}

/// A range of keys of an order by time ([`time_keys`]).
pub(crate) type KeyRange<T> = (Bound<(u64, T)>, Bound<(u64, T)>);

/// The keys between two times of an order keyed by the time ([`ordered`])
/// then a number from `low` to `high` (a slot, an id); `None` for a NaN
/// bound, which no time compares with, and for bounds that cross (an empty
/// range, which `BTreeSet::range` refuses).
pub(crate) fn time_keys<T: Copy + Ord>(
    from: Bound<f64>,
    to: Bound<f64>,
    low: T,
    high: T,
) -> Option<KeyRange<T>> {
    if [from, to]
        .iter()
        .any(|b| matches!(b, Included(t) | Excluded(t) if t.is_nan()))
    {
        return None;
    }
    // Each time's entries lie between (time, low) and (time, high).
    let lo = match from {
        Included(t) => Included((ordered(t), low)),
        Excluded(t) => Excluded((ordered(t), high)),
        Unbounded => Unbounded,
    };
    let hi = match to {
        Included(t) => Included((ordered(t), high)),
        Excluded(t) => Excluded((ordered(t), low)),
        Unbounded => Unbounded,
    };
    let crossed = match (lo, hi) {
        (Included(a), Included(b)) => a > b,
        (Included(a) | Excluded(a), Included(b) | Excluded(b)) => a >= b,
        _ => false,
    };
    (!crossed).then_some((lo, hi))
}

/// Bits of a finite float that sort as the float does (-0.0 as 0.0, which
/// compare equal).
pub(crate) fn ordered(x: f64) -> u64 {
    let bits = if x == 0.0 { 0 } else { x.to_bits() };
    if bits >> 63 == 1 {
        !bits
    } else {
        bits | (1 << 63)
    }
}

impl Records {
    /// The per-slot columns a search reads (see [`crate::pages`]).
    pub(crate) fn regions(&self, out: &mut Vec<Region>) {
        out.extend([
            Region::of(&self.ids),
            Region::of(&self.key),
            Region::of(&self.live),
            Region::of(&self.table),
            Region::of(&self.kind),
            Region::of(&self.importance),
            Region::of(&self.evergreen),
            Region::of(&self.created_at),
            Region::of(&self.updated_at),
            Region::of(&self.accessed_at),
            Region::of(&self.access_count),
            Region::of(&self.valid_to),
            Region::of(&self.expires_at),
            Region::of(&self.recorded_at),
            Region::of(&self.speaker),
            Region::of(&self.questions),
        ]);
        out.extend(self.scope.iter().map(|column| Region::of(column)));
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    pub fn slot(&self, id: u64) -> Option<u32> {
        self.slots.get(&id).copied()
    }

    pub fn contains(&self, id: u64) -> bool {
        self.slots.contains_key(&id)
    }

    /// Whether the text of `slot` asks anything ([`question_share`]).
    pub fn asks(&self, slot: u32) -> bool {
        self.questions[slot as usize] > 0
    }

    /// How much of the text of `slot` asks, in [0, 1] ([`question_share`]).
    pub fn question(&self, slot: u32) -> f64 {
        f64::from(self.questions[slot as usize]) / 255.0
    }

    /// Number of slots, live or free.
    pub fn capacity(&self) -> usize {
        self.ids.len()
    }

    pub fn id(&self, slot: u32) -> u64 {
        self.ids[slot as usize]
    }

    pub fn is_live(&self, slot: u32) -> bool {
        self.live.get(slot as usize).copied().unwrap_or(false)
    }

    pub fn accessed_at(&self, slot: u32) -> f64 {
        f64::from_bits(self.accessed_at[slot as usize].load(Ordering::Relaxed))
    }

    pub fn set_accessed_at(&self, slot: u32, t: f64) {
        self.accessed_at[slot as usize].store(t.to_bits(), Ordering::Relaxed);
    }

    pub fn access_count(&self, slot: u32) -> u64 {
        self.access_count[slot as usize].load(Ordering::Relaxed)
    }

    /// Records one access of `slot` at `t`. The latest access stays, as the
    /// database keeps it (a record may carry a later one, and searches in
    /// other threads record theirs in any order).
    pub fn record_access(&self, slot: u32, t: f64) {
        let later = |bits: u64| (t > f64::from_bits(bits)).then_some(t.to_bits());
        // An error is a later time already there: nothing to change.
        let _ = self.accessed_at[slot as usize].fetch_update(
            Ordering::Relaxed,
            Ordering::Relaxed,
            later,
        );
        self.access_count[slot as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Live slots in increasing order.
    pub fn live_slots(&self) -> impl Iterator<Item = u32> + '_ {
        self.live
            .iter()
            .enumerate()
            .filter(|(_, l)| **l)
            .map(|(s, _)| s as u32)
    }

    /// The live records that are turns with a speaker, speaker by speaker.
    pub fn speaker_slots(&self) -> impl Iterator<Item = u32> + '_ {
        (self.speakers.keys()).flat_map(|&k| self.postings(&PostingKey::Speaker(k)).iter().copied())
    }

    pub fn postings(&self, key: &PostingKey) -> &[u32] {
        match key {
            PostingKey::Id(k) => self.by_key.get(k).map_or(&[], std::slice::from_ref),
            _ => self.postings.get(key).map_or(&[], |v| v),
        }
    }

    /// The live slots that leave scope field `field` unset.
    pub fn unset(&self, field: u8) -> &RoaringBitmap {
        &self.unset[usize::from(field)]
    }

    /// The live slots whose `expires_at` lies between `from` and `to`, in the
    /// order of their expiry (a record that never expires has none). A NaN
    /// bound, which no time compares with, and bounds that cross give none.
    pub fn expiring(&self, from: Bound<f64>, to: Bound<f64>) -> impl Iterator<Item = u32> + '_ {
        (time_keys(from, to, 0, u32::MAX).map(|range| self.expiring.range(range)))
            .into_iter()
            .flatten()
            .map(|&(_, slot)| slot)
    }

    /// How many live records `created_at` places between `from` and `to`,
    /// counted no further than `cap + 1` (the order's keys alone).
    pub fn created_count(&self, from: Bound<f64>, to: Bound<f64>, cap: usize) -> usize {
        (time_keys(from, to, 0, u64::MAX).map(|range| self.by_time.range(range)))
            .map_or(0, |keys| keys.take(cap.saturating_add(1)).count())
    }

    /// The share of the live records whose `created_at` lies between `from`
    /// and `to`, as [`Records::share`] tells it.
    pub fn created_share(&self, from: Bound<f64>, to: Bound<f64>, samples: usize) -> f64 {
        self.share(samples, |s| {
            (from, to).contains(&self.created_at[s as usize])
        })
    }

    /// The share of the live records that `within` holds, as `samples`
    /// slots spread over the slots tell it (0 when none of them is live): a
    /// guess of a filter's size that reads `samples` records. The slots are
    /// drawn by a fixed hash of the sample's number (splitmix64), so no
    /// order of adding (records added in turn by a few writers, values given
    /// in a cycle) falls in step with them, as it can with a stride or any
    /// regular sequence of the slots.
    pub fn share(&self, samples: usize, within: impl Fn(u32) -> bool) -> f64 {
        let slots = self.ids.len() as u128;
        let (mut live, mut held) = (0u32, 0u32);
        for i in 0..samples.min(self.ids.len()) as u64 {
            let s = ((u128::from(splitmix64(i)) * slots) >> 64) as usize;
            if self.live[s] {
                live += 1;
                held += u32::from(within(s as u32));
            }
        }
        if live == 0 {
            0.0
        } else {
            f64::from(held) / f64::from(live)
        }
    }

    /// The live slots whose `created_at` lies between `from` and `to`, in the
    /// order of their creation, then id. A NaN bound and bounds that cross
    /// give none.
    pub fn created(&self, from: Bound<f64>, to: Bound<f64>) -> impl Iterator<Item = u32> + '_ {
        (time_keys(from, to, 0, u64::MAX).map(|range| self.by_time.range(range)))
            .into_iter()
            .flatten()
            .map(|&(_, id)| self.slot(id).expect("a live record's slot"))
    }

    /// How many live records hold metadata key `key`.
    pub fn with_key(&self, key: u32) -> usize {
        self.postings(&PostingKey::Key(key)).len()
    }

    /// The previous and the next record of `slot`'s session, if it has a
    /// `session_id` (`None` where it is the first or the last).
    pub fn neighbours(&self, slot: u32) -> Option<[Option<u32>; 2]> {
        let s = slot as usize;
        if self.scope[SESSION][s] == NONE {
            return None;
        }
        let some = |n: u32| (n != NONE).then_some(n);
        Some([some(self.prev[s]), some(self.next[s])])
    }

    /// `neighbour` (a neighbour of some turn, toward its session's start if
    /// `back`) as a read at `now` sees it: past the turns expired by then,
    /// which no read sees, removed yet or not (removing them joins their
    /// neighbours). `held` narrows to the clock times this answer holds for.
    pub fn live_neighbour(
        &self,
        mut neighbour: Option<u32>,
        back: bool,
        now: f64,
        held: &mut Held,
    ) -> Option<u32> {
        let links = if back { &self.prev } else { &self.next };
        while let Some(n) = neighbour {
            let at = self.expires_at[n as usize];
            if at > now {
                held.until = held.until.min(at);
                return Some(n);
            }
            held.from = held.from.max(at);
            neighbour = Some(links[n as usize]).filter(|&l| l != NONE);
        }
        None
    }

    /// Asks for what [`live_neighbour`](Self::live_neighbour) reads first of
    /// `slot`, its id and whether it asks.
    pub fn prefetch_expiry(&self, slot: u32) {
        prefetch(self.expires_at.as_ptr().wrapping_add(slot as usize));
        prefetch(self.ids.as_ptr().wrapping_add(slot as usize));
        prefetch(self.questions.as_ptr().wrapping_add(slot as usize));
    }

    /// Asks for what a search's scoring reads of `slot`: its last access,
    /// importance, evergreen flag and how much of its text asks.
    pub fn prefetch_scoring(&self, slot: u32) {
        let s = slot as usize;
        prefetch(self.accessed_at.as_ptr().wrapping_add(s));
        prefetch(self.importance.as_ptr().wrapping_add(s));
        prefetch(self.evergreen.as_ptr().wrapping_add(s));
        prefetch(self.questions.as_ptr().wrapping_add(s));
    }

    /// Asks for what [`neighbours`](Self::neighbours) reads of `slot`.
    pub fn prefetch_neighbours(&self, slot: u32) {
        let s = slot as usize;
        prefetch(self.scope[SESSION].as_ptr().wrapping_add(s));
        prefetch(self.prev.as_ptr().wrapping_add(s));
        prefetch(self.next.as_ptr().wrapping_add(s));
        prefetch(self.questions.as_ptr().wrapping_add(s));
    }

    /// The interned scope of `slot`, every field: a session's key.
    fn scope_key(&self, s: usize) -> [u32; 6] {
        std::array::from_fn(|f| self.scope[f][s])
    }

    /// Puts `slot` (live, its columns set) in its session's order.
    fn link(&mut self, slot: u32) {
        let s = slot as usize;
        let session = self.scope[SESSION][s];
        if session == NONE {
            return;
        }
        let key = order_key(self.created_at[s], self.ids[s]);
        let chain = self.sessions.entry(self.scope_key(s)).or_default();
        let prev = chain.range(..key).next_back().map_or(NONE, |(_, &p)| p);
        let next = chain
            .range((Excluded(key), Unbounded))
            .next()
            .map_or(NONE, |(_, &n)| n);
        chain.insert(key, slot);
        self.prev[s] = prev;
        self.next[s] = next;
        if prev != NONE {
            self.next[prev as usize] = slot;
        }
        if next != NONE {
            self.prev[next as usize] = slot;
        }
    }

    /// Takes `slot` out of its session's order (before its columns change),
    /// joining its neighbours.
    fn unlink(&mut self, slot: u32) {
        let s = slot as usize;
        let session = self.scope[SESSION][s];
        if session == NONE {
            return;
        }
        let key = order_key(self.created_at[s], self.ids[s]);
        let scope = self.scope_key(s);
        if let Some(chain) = self.sessions.get_mut(&scope) {
            chain.remove(&key);
            if chain.is_empty() {
                self.sessions.remove(&scope);
            }
        }
        let (prev, next) = (self.prev[s], self.next[s]);
        if prev != NONE {
            self.next[prev as usize] = next;
        }
        if next != NONE {
            self.prev[next as usize] = prev;
        }
        self.prev[s] = NONE;
        self.next[s] = NONE;
    }

    /// The posting keys of a slot, as [`insert`](Self::insert) made them.
    fn keys_of(&self, slot: u32) -> Vec<PostingKey> {
        let s = slot as usize;
        // Sized once: growing it was a `realloc` for every record an open posts.
        let mut keys = Vec::with_capacity(5 + self.scope.len() + 2 * self.meta[s].len());
        keys.extend([
            PostingKey::Table(self.table[s]),
            PostingKey::Type(self.kind[s]),
            PostingKey::Evergreen(self.evergreen[s]),
        ]);
        if self.valid_to[s].is_finite() {
            keys.push(PostingKey::Closed);
        }
        if self.speaker[s] != NONE {
            keys.push(PostingKey::Speaker(self.speaker[s]));
        }
        for (f, col) in self.scope.iter().enumerate() {
            if col[s] != NONE {
                keys.push(PostingKey::Scope(f as u8, col[s]));
            }
        }
        keys.extend(
            self.meta[s]
                .iter()
                .map(|&(k, v)| PostingKey::Meta(k, ValueKey::from(v))),
        );
        keys.extend(distinct_keys(&self.meta[s]).map(PostingKey::Key));
        // A key repeated by a list ([1, 1]) is harmless: posting skips a
        // slot already there and unposting one already gone.
        keys
    }

    fn unpost(&mut self, slot: u32) {
        let k = self.key[slot as usize];
        if k != NONE && self.by_key.get(&k) == Some(&slot) {
            self.by_key.remove(&k);
        }
        if let Some(entry) = self.expiry_entry(slot) {
            self.expiring.remove(&entry);
        }
        for key in self.keys_of(slot) {
            if let Some(list) = self.postings.get_mut(&key) {
                if let Ok(i) = list.binary_search(&slot) {
                    list.remove(i);
                }
                if list.is_empty() {
                    self.postings.remove(&key);
                }
            }
        }
        for (col, unset) in self.scope.iter().zip(&mut self.unset) {
            if col[slot as usize] == NONE {
                unset.remove(slot);
            }
        }
    }

    fn post(&mut self, slot: u32) {
        let k = self.key[slot as usize];
        if k != NONE {
            self.by_key.insert(k, slot);
        }
        if let Some(entry) = self.expiry_entry(slot) {
            self.expiring.insert(entry);
        }
        for key in self.keys_of(slot) {
            let list = self.postings.entry(key).or_default();
            // Fresh slots are the largest, so bulk adds append.
            match list.last() {
                Some(&last) if last >= slot => {
                    if let Err(i) = list.binary_search(&slot) {
                        list.insert(i, slot);
                    }
                }
                _ => list.push(slot),
            }
        }
    }

    /// Puts `slot` in the bitmaps of the scope fields it leaves unset.
    fn post_unset(&mut self, slot: u32) {
        for (col, unset) in self.scope.iter().zip(&mut self.unset) {
            // `try_push` appends past the largest slot, as bulk adds do.
            if col[slot as usize] == NONE && unset.try_push(slot).is_err() {
                unset.insert(slot);
            }
        }
    }

    /// `slot`'s place in [`Records::expiring`], if it expires.
    fn expiry_entry(&self, slot: u32) -> Option<(u64, u32)> {
        let at = self.expires_at[slot as usize];
        at.is_finite().then(|| (ordered(at), slot))
    }

    fn push_slot(&mut self) -> u32 {
        let slot = self.ids.len() as u32;
        self.ids.push(0);
        self.key.push(NONE);
        self.live.push(false);
        self.table.push(0);
        self.kind.push(0);
        for col in &mut self.scope {
            col.push(NONE);
        }
        self.importance.push(0.0);
        self.evergreen.push(false);
        self.created_at.push(0.0);
        self.updated_at.push(0.0);
        self.accessed_at.push(AtomicU64::new(0));
        self.access_count.push(AtomicU64::new(0));
        self.valid_to.push(f64::INFINITY);
        self.expires_at.push(f64::INFINITY);
        self.recorded_at.push(0.0);
        self.speaker.push(NONE);
        self.questions.push(0);
        self.prev.push(NONE);
        self.next.push(NONE);
        self.meta.push(Vec::new());
        slot
    }

    /// Inserts or replaces the attributes of `id`; returns its slot.
    ///
    /// A replacement (a rewrite of the record) keeps the accesses the engine
    /// recorded beyond what it brings: its row holds the counts the database
    /// has, which lag those of searches not yet written there, and a rewrite
    /// lowering them lost accesses the store still counts.
    pub fn insert(&mut self, id: u64, a: &Attrs) -> u32 {
        let mut seen = (0, f64::NEG_INFINITY);
        let slot = match self.slots.get(&id) {
            Some(&slot) => {
                seen = (self.access_count(slot), self.accessed_at(slot));
                self.by_time.remove(&self.time_entry(slot));
                self.unpost(slot);
                self.unlink(slot);
                self.untally(slot);
                slot
            }
            None => {
                let slot = match self.free.pop() {
                    Some(s) => s,
                    None => self.push_slot(),
                };
                self.slots.insert(id, slot);
                // A freed slot's share was its last record's; set with the text.
                self.questions[slot as usize] = 0;
                slot
            }
        };
        let s = slot as usize;
        self.ids[s] = id;
        self.key[s] = a.id.as_deref().map_or(NONE, |k| self.strings.intern(k));
        self.live[s] = true;
        self.table[s] = self.strings.intern(&a.tbl);
        self.kind[s] = self.strings.intern(&a.r#type);
        for (f, v) in a.scope.iter().enumerate() {
            self.scope[f][s] = v.as_deref().map_or(NONE, |v| self.strings.intern(v));
        }
        self.importance[s] = a.importance;
        self.evergreen[s] = a.evergreen;
        self.created_at[s] = a.created_at;
        self.updated_at[s] = a.updated_at;
        self.set_accessed_at(slot, a.last_accessed_at.max(seen.1));
        self.access_count[s].store(a.access_count.max(seen.0), Ordering::Relaxed);
        self.valid_to[s] = a.valid_to.unwrap_or(f64::INFINITY);
        self.expires_at[s] = a.expires_at.unwrap_or(f64::INFINITY);
        self.recorded_at[s] = a.recorded_at;
        self.speaker[s] = a
            .speaker
            .as_deref()
            .map_or(NONE, |v| self.strings.intern(v));
        let mut meta: Vec<(u32, Value)> = a
            .metadata
            .iter()
            .map(|(k, v)| {
                let key = self.keys.intern(k);
                let value = match v {
                    RawValue::Null => Value::Null,
                    RawValue::Bool(b) => Value::Bool(*b),
                    RawValue::Num(x) => Value::Num(*x),
                    RawValue::Str(s) => Value::Str(self.strings.intern(s)),
                };
                (key, value)
            })
            .collect();
        meta.sort_by_key(|&(k, _)| k);
        self.meta[s] = meta;
        self.post(slot);
        self.post_unset(slot);
        self.link(slot);
        self.tally(slot);
        self.by_time.insert(self.time_entry(slot));
        slot
    }

    /// `slot`'s place in [`Records::by_time`].
    fn time_entry(&self, slot: u32) -> (u64, u64) {
        let s = slot as usize;
        (ordered(self.created_at[s]), self.ids[s])
    }

    /// Whether `slot` is a turn (has a session, has a speaker), and whether
    /// it was superseded.
    pub fn turn_of(&self, slot: u32) -> ((bool, bool), bool) {
        let turn = (
            self.neighbours(slot).is_some(),
            self.speaker(slot).is_some(),
        );
        (turn, self.is_closed(slot))
    }

    /// The interned speaker of `slot`, if it has one.
    pub fn speaker(&self, slot: u32) -> Option<u32> {
        let v = self.speaker[slot as usize];
        (v != NONE).then_some(v)
    }

    /// The table and scope of `slot`: the interned table, then each scope
    /// field's value (or [`NONE`]) in the order of [`SCOPE_FIELDS`].
    pub fn group(&self, slot: u32) -> [u32; 7] {
        let s = slot as usize;
        let mut key = [self.table[s]; 7];
        for (f, col) in self.scope.iter().enumerate() {
            key[f + 1] = col[s];
        }
        key
    }

    /// Counts `slot` (live, its columns set) in its speaker's and its group's
    /// totals.
    fn tally(&mut self, slot: u32) {
        if let Some(v) = self.speaker(slot) {
            *self.speakers.entry(v).or_default() += 1;
            self.names.add(v, self.strings.resolve(v));
        }
        let of = self.turn_of(slot);
        self.turns.count(of, 1);
        let turn = of.0;
        let group = self.group(slot);
        *self.groups.entry(group).or_default() += 1;
        if turn.0 || turn.1 {
            self.turn_groups.entry(group).or_default().count(turn, 1);
        }
    }

    /// Takes `slot` out of the totals [`tally`](Self::tally) put it in
    /// (before its columns change).
    fn untally(&mut self, slot: u32) {
        if let Some(v) = self.speaker(slot) {
            decrement(&mut self.speakers, v);
            self.names.remove(v, self.strings.resolve(v));
        }
        let of = self.turn_of(slot);
        self.turns.count(of, -1);
        let turn = of.0;
        let group = self.group(slot);
        decrement(&mut self.groups, group);
        if let Some(t) = self.turn_groups.get_mut(&group) {
            t.count(turn, -1);
            if t.sessions == 0 && t.speakers == 0 {
                self.turn_groups.remove(&group);
            }
        }
    }

    /// Removes `id`; returns whether it was there.
    pub fn remove(&mut self, id: u64) -> bool {
        let Some(slot) = self.slots.remove(&id) else {
            return false;
        };
        self.by_time.remove(&self.time_entry(slot));
        self.unpost(slot);
        self.unlink(slot);
        self.untally(slot);
        let s = slot as usize;
        self.live[s] = false;
        self.meta[s] = Vec::new();
        self.free.push(slot);
        true
    }

    /// Whether the record in `slot` was superseded (it has a `valid_to`).
    pub fn is_closed(&self, slot: u32) -> bool {
        self.valid_to[slot as usize].is_finite()
    }

    /// The superseded records' slots, ascending.
    pub fn closed(&self) -> &[u32] {
        self.postings(&PostingKey::Closed)
    }

    /// Rebuilds the id map, the postings and the sessions' order from the
    /// columns (after a load); fails with an id that is live in two slots.
    pub(crate) fn rebuild_index(&mut self) -> std::result::Result<(), u64> {
        self.slots = SlotMap::default();
        self.slots.reserve(self.ids.len());
        self.postings = FxHashMap::default();
        self.by_key = FxHashMap::default();
        self.unset = Default::default();
        self.sessions = FxHashMap::default();
        self.speakers = FxHashMap::default();
        self.names = NameWords::default();
        self.turns = TurnCounts::default();
        self.groups = FxHashMap::default();
        self.turn_groups = FxHashMap::default();
        self.expiring = BTreeSet::new();
        self.prev = vec![NONE; self.ids.len()];
        self.next = vec![NONE; self.ids.len()];
        for slot in 0..self.ids.len() as u32 {
            if self.live[slot as usize] {
                if self.slots.insert(self.ids[slot as usize], slot).is_some() {
                    return Err(self.ids[slot as usize]);
                }
                self.post(slot);
                self.link(slot);
                self.tally(slot);
            }
        }
        // Collected, sorted and built at once, not a record at a time (slots
        // mostly follow creation time, so the sort meets long runs).
        self.by_time = (0..self.ids.len() as u32)
            .filter(|&s| self.live[s as usize])
            .map(|s| self.time_entry(s))
            .collect();
        // Built whole, in slot order: many times faster than a slot at a time, which
        // would weigh on every open (benches/README.md, "A broader scope's records").
        for (col, unset) in self.scope.iter().zip(&mut self.unset) {
            let slots = (0..col.len() as u32).filter(|&s| col[s as usize] == NONE);
            let live = slots.filter(|&s| self.live[s as usize]);
            *unset = RoaringBitmap::from_sorted_iter(live).expect("slots ascend");
        }
        Ok(())
    }

    /// The values of metadata key `key` in `slot` (several for a list).
    pub fn meta_values(&self, slot: u32, key: u32) -> &[(u32, Value)] {
        let m = &self.meta[slot as usize];
        let start = m.partition_point(|&(k, _)| k < key);
        let end = start + m[start..].partition_point(|&(k, _)| k == key);
        &m[start..end]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(table: &str, agent: Option<&str>, meta: &str) -> Attrs {
        Attrs {
            scope: [agent.map(String::from), None, None, None, None, None],
            created_at: 1.0,
            updated_at: 1.0,
            last_accessed_at: 1.0,
            metadata: flatten_metadata(meta).unwrap(),
            ..Attrs::blank(table, "semantic")
        }
    }

    /// Values in a cycle in the order of adding: a share sampled at an even
    /// stride of the slots (39 of 10,000 for 256 samples) sees one value.
    #[test]
    fn a_share_is_not_fooled_by_values_in_a_cycle() {
        let mut r = Records::default();
        for id in 0..10_000u64 {
            r.insert(id, &attrs("memories", None, "{}"));
        }
        // Cycles of many lengths, long ones too (a regular sequence of the
        // slots falls in step with some).
        for (period, held) in [(10, 7), (39, 1), (39, 38), (2, 1), (256, 128), (164, 23)] {
            let share = r.share(256, |s| s % period < held);
            let truth = f64::from(held) / f64::from(period);
            assert!((share - truth).abs() < 0.1, "{held} of {period}: {share}");
        }
        r.remove(5);
        assert_eq!(r.share(256, |_| true), 1.0);
        assert_eq!(Records::default().share(256, |_| true), 0.0);
    }

    #[test]
    fn flattening() {
        let m =
            flatten_metadata(r#"{"a": {"b": 1, "c": [true, "x", {"d": 1}]}, "e": null}"#).unwrap();
        assert_eq!(
            m,
            vec![
                ("a.b".into(), RawValue::Num(1.0)),
                ("a.c".into(), RawValue::Bool(true)),
                ("a.c".into(), RawValue::Str("x".into())),
                ("e".into(), RawValue::Null),
            ]
        );
        assert!(flatten_metadata("[1]").is_err());
        assert!(flatten_metadata("{").is_err());
    }

    #[test]
    fn a_replacement_keeps_the_accesses_recorded_beyond_its_row() {
        let mut r = Records::default();
        let slot = r.insert(
            7,
            &Attrs {
                access_count: 2,
                ..attrs("memories", None, "{}")
            },
        );
        for t in [5.0, 6.0, 7.0] {
            r.record_access(slot, t);
        }
        // The row of a rewrite holds the two the database had: the searches'
        // three stay, and their latest time.
        r.insert(
            7,
            &Attrs {
                access_count: 2,
                ..attrs("memories", None, "{}")
            },
        );
        assert_eq!((r.access_count(slot), r.accessed_at(slot)), (5, 7.0));
        // A row that holds more (another process's, written since) is taken.
        let later = Attrs {
            access_count: 9,
            last_accessed_at: 8.0,
            ..attrs("memories", None, "{}")
        };
        r.insert(7, &later);
        assert_eq!((r.access_count(slot), r.accessed_at(slot)), (9, 8.0));
        // A new record starts from its row.
        let other = r.insert(8, &attrs("memories", None, "{}"));
        assert_eq!((r.access_count(other), r.accessed_at(other)), (0, 1.0));
    }

    #[test]
    fn postings_follow_inserts_replacements_and_removals() {
        let mut r = Records::default();
        r.insert(10, &attrs("memories", Some("a"), r#"{"k": "v"}"#));
        r.insert(11, &attrs("memories", Some("b"), r#"{"k": "v"}"#));
        let a = r.strings.get("a").unwrap();
        let v = r.strings.get("v").unwrap();
        let k = r.keys.get("k").unwrap();
        assert_eq!(r.postings(&PostingKey::Scope(0, a)), &[0]);
        assert_eq!(r.postings(&PostingKey::Meta(k, ValueKey::Str(v))), &[0, 1]);
        r.insert(10, &attrs("memories", Some("b"), r#"{}"#));
        assert!(r.postings(&PostingKey::Scope(0, a)).is_empty());
        assert_eq!(r.postings(&PostingKey::Meta(k, ValueKey::Str(v))), &[1]);
        assert!(r.remove(11));
        assert!(!r.remove(11));
        assert!(r
            .postings(&PostingKey::Meta(k, ValueKey::Str(v)))
            .is_empty());
        // The freed slot is reused.
        assert_eq!(r.insert(12, &attrs("t", None, "{}")), 1);
        assert_eq!(r.len(), 2);
        assert_eq!(r.live_slots().collect::<Vec<_>>(), vec![0, 1]);
    }

    fn turn(session: Option<&str>, created_at: f64) -> Attrs {
        let mut a = attrs("memories", None, "{}");
        a.scope[SESSION] = session.map(String::from);
        a.created_at = created_at;
        a
    }

    #[test]
    fn a_session_shared_by_two_users_is_two_chains() {
        let mut r = Records::default();
        let mut alice = turn(Some("s"), 10.0);
        alice.scope[1] = Some("alice".into());
        let mut bob = turn(Some("s"), 20.0);
        bob.scope[1] = Some("bob".into());
        let mut alice_later = turn(Some("s"), 30.0);
        alice_later.scope[1] = Some("alice".into());
        r.insert(1, &alice);
        r.insert(2, &bob);
        r.insert(3, &alice_later);
        assert_eq!(chains(&r), vec![vec![1, 3], vec![2]]);
    }

    /// Each session's ids in order, walked through the links both ways.
    fn chains(r: &Records) -> Vec<Vec<u64>> {
        let mut out = Vec::new();
        for slot in r.live_slots() {
            let Some([None, _]) = r.neighbours(slot) else {
                continue;
            };
            let mut ids = vec![r.id(slot)];
            let mut at = slot;
            while let Some([_, Some(next)]) = r.neighbours(at) {
                assert_eq!(r.neighbours(next).unwrap()[0], Some(at));
                ids.push(r.id(next));
                at = next;
            }
            out.push(ids);
        }
        out.sort();
        out
    }

    #[test]
    fn sessions_link_turns_in_time_order() {
        let mut r = Records::default();
        r.insert(1, &turn(Some("s"), 10.0));
        r.insert(2, &turn(Some("s"), 30.0));
        r.insert(3, &turn(Some("t"), 5.0));
        r.insert(4, &turn(None, 20.0));
        // Arrives late, belongs in the middle; a tie on time goes by id.
        r.insert(5, &turn(Some("s"), 20.0));
        r.insert(6, &turn(Some("s"), 20.0));
        assert_eq!(chains(&r), vec![vec![1, 5, 6, 2], vec![3]]);
        assert_eq!(r.neighbours(r.slot(4).unwrap()), None);
        assert_eq!(r.neighbours(r.slot(3).unwrap()), Some([None, None]));

        // A removed turn's neighbours are joined; its slot's next owner
        // starts unlinked.
        assert!(r.remove(5));
        assert_eq!(chains(&r), vec![vec![1, 6, 2], vec![3]]);
        r.insert(7, &turn(None, 1.0));
        assert_eq!(r.neighbours(r.slot(7).unwrap()), None);

        // A replacement moves the record: to another time, another session.
        r.insert(1, &turn(Some("s"), 40.0));
        assert_eq!(chains(&r), vec![vec![3], vec![6, 2, 1]]);
        r.insert(2, &turn(Some("t"), 0.0));
        assert_eq!(chains(&r), vec![vec![2, 3], vec![6, 1]]);
        r.insert(6, &turn(None, 0.0));
        assert_eq!(chains(&r), vec![vec![1], vec![2, 3]]);
        assert!(r.remove(1));
        let s = r.strings.get("s").unwrap();
        assert!(!r.sessions.keys().any(|k| k[SESSION] == s));

        // The links are derived from the columns: a rebuild gives them again.
        let before = (r.prev.clone(), r.next.clone());
        r.rebuild_index().unwrap();
        assert_eq!((r.prev.clone(), r.next.clone()), before);
    }

    #[test]
    fn the_expiry_order_key_counts_and_turn_groups_follow_every_change() {
        let mut r = Records::default();
        let mut s = 0x2545_f491_u64;
        let mut below = |m: u64| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s % m
        };
        // What the kept structures must equal, from the columns.
        let check = |r: &Records| {
            let mut order: Vec<(u64, u32)> = r
                .live_slots()
                .filter(|&s| r.expires_at[s as usize].is_finite())
                .map(|s| (ordered(r.expires_at[s as usize]), s))
                .collect();
            order.sort_unstable();
            assert!(r.expiring.iter().copied().eq(order));
            let mut keys: FxHashMap<u32, u32> = FxHashMap::default();
            for s in r.live_slots() {
                for k in distinct_keys(&r.meta[s as usize]) {
                    *keys.entry(k).or_default() += 1;
                }
            }
            for (&k, &n) in &keys {
                assert_eq!(r.with_key(k), n as usize);
            }
            let held = r
                .postings
                .keys()
                .filter(|k| matches!(k, PostingKey::Key(_)));
            assert_eq!(held.count(), keys.len());
            let mut turns: FxHashMap<[u32; 7], Turns> = FxHashMap::default();
            for s in r.live_slots() {
                let (turn, _) = r.turn_of(s);
                if turn.0 || turn.1 {
                    turns.entry(r.group(s)).or_default().count(turn, 1);
                }
            }
            assert_eq!(r.turn_groups, turns);
        };
        for step in 0..2000 {
            let id = below(300);
            if below(4) == 0 {
                r.remove(id);
            } else {
                let agent = ["a", "b"][below(2) as usize];
                let table = ["t", "messages"][below(2) as usize];
                let mut a = attrs(table, Some(agent), r#"{"a": [1, 1, 2], "b": {"c": 1}}"#);
                if below(2) == 0 {
                    a.metadata.truncate(below(4) as usize);
                }
                a.expires_at = (below(3) > 0).then(|| below(50) as f64 - 25.0);
                a.scope[SESSION] = (below(2) == 0).then(|| format!("s{}", below(3)));
                a.speaker = (below(3) == 0).then(|| "Ana".into());
                a.valid_to = (below(5) == 0).then_some(10.0);
                r.insert(id, &a);
            }
            if step % 250 == 0 {
                check(&r);
            }
        }
        check(&r);
        let kept = (
            r.expiring.clone(),
            r.postings.clone(),
            r.turn_groups.clone(),
        );
        r.rebuild_index().unwrap();
        let rebuilt = (
            r.expiring.clone(),
            r.postings.clone(),
            r.turn_groups.clone(),
        );
        assert_eq!(rebuilt, kept);
        // A range of the order, in expiry order; crossed or NaN bounds give none.
        let at = |slots: Vec<u32>| -> Vec<f64> {
            slots.iter().map(|&s| r.expires_at[s as usize]).collect()
        };
        let mid: Vec<f64> = at(r.expiring(Excluded(-5.0), Included(5.0)).collect());
        assert!(mid.windows(2).all(|w| w[0] <= w[1]));
        assert!(mid.iter().all(|&t| -5.0 < t && t <= 5.0));
        assert_eq!(r.expiring(Included(3.0), Excluded(3.0)).count(), 0);
        assert_eq!(r.expiring(Excluded(3.0), Excluded(3.0)).count(), 0);
        assert_eq!(r.expiring(Included(9.0), Included(2.0)).count(), 0);
        assert_eq!(r.expiring(Unbounded, Included(f64::NAN)).count(), 0);
        assert_eq!(r.expiring(Unbounded, Unbounded).count(), r.expiring.len());
    }

    #[test]
    fn interned_strings_keep_their_numbers() {
        let mut i = Interner::default();
        let words = ["", "a", "ab", "b", "é𝄞", "a"];
        let ids: Vec<u32> = words.iter().map(|w| i.intern(w)).collect();
        assert_eq!(ids, vec![0, 1, 2, 3, 4, 1]);
        assert_eq!(i.count(), 5);
        for (w, id) in words.iter().zip(&ids) {
            assert_eq!(i.resolve(*id), *w);
            assert_eq!(i.get(w), Some(*id));
        }
        assert_eq!(i.get("c"), None);
        assert_eq!(i.resolve(99), "");
        let again = Interner::from_strings(i.strings()).unwrap();
        assert!(again.strings().eq(i.strings()));
        assert_eq!(again.get("b"), Some(3));
        // A list naming one string twice is no interner's.
        assert!(Interner::from_strings(["x", "y", "x"].into_iter()).is_none());
    }

    #[test]
    fn many_interned_strings_are_found() {
        let mut i = Interner::default();
        for n in 0..50_000u32 {
            assert_eq!(i.intern(&format!("id-{n}")), n);
        }
        for n in (0..50_000u32).step_by(7) {
            assert_eq!(i.get(&format!("id-{n}")), Some(n));
            assert_eq!(i.resolve(n), format!("id-{n}"));
        }
    }
}
