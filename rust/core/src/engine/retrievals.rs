//! What recent queries retrieved, reused while the engine is unchanged.
//!
//! A search has two parts. Retrieval (the filter's selection, the BM25 and
//! vector lists, the signals filled in for fusion) reads the indexes and
//! depends only on the query and the engine's contents. Scoring reads the
//! candidates' columns, access times included, which every search may
//! change. A query asked again while the engine is unchanged takes its
//! retrieval from here and runs only the scoring: it touches the columns of
//! some hundred candidates instead of walking the graph and the postings,
//! whose cache lines an embedding run in between has usually evicted.
//!
//! Every method that changes the engine (`&mut self`) empties the cache; so
//! do filters that read access columns, which searches change through
//! `&self` (they bypass it, see [`Filter::reads_access`]).

use std::collections::VecDeque;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use rustc_hash::FxHasher;

use super::mode::Mode;
use super::Filter;

/// Queries remembered; a lookup compares hashes first, so a linear scan of
/// this many costs well under a microsecond.
const CAPACITY: usize = 64;

/// Retrievals of more candidates than this are not kept (a caller asking
/// for huge pools would fill memory for little gain).
pub(super) const MAX_CANDIDATES: usize = 4096;

/// Everything a retrieval depends on besides the engine's contents.
#[derive(PartialEq)]
pub(super) struct Key {
    /// First, so the derived equality rejects most keys on it alone.
    hash: u64,
    text: Option<Box<str>>,
    /// The query vector's bits, as given (before normalising).
    vector: Option<Box<[u32]>>,
    mode: Mode,
    filter: Option<Filter>,
    /// The depths asked for: of a search of records that are no turns, and
    /// of one whose admitted records hold turns (decided in the retrieval).
    pool: (usize, usize),
    current_only: bool,
    /// Which signals were completed for every candidate: cosine, BM25, the
    /// contextual BM25 of turns, and whether the query names their speaker.
    fills: (bool, bool, bool, bool),
}

impl Key {
    pub(super) fn new(
        text: Option<&str>,
        vector: Option<&[f32]>,
        mode: Mode,
        filter: Option<&Filter>,
        pool: (usize, usize),
        current_only: bool,
        fills: (bool, bool, bool, bool),
    ) -> Self {
        let vector: Option<Box<[u32]>> = vector.map(|v| v.iter().map(|x| x.to_bits()).collect());
        let mut h = FxHasher::default();
        (text, &vector, pool, current_only, fills).hash(&mut h);
        Key {
            hash: h.finish(),
            text: text.map(Into::into),
            vector,
            mode,
            filter: filter.cloned(),
            pool,
            current_only,
            fills,
        }
    }
}

/// Generations handed out in this process: no two engines, and no two states
/// of one, share one.
static GENERATIONS: AtomicU64 = AtomicU64::new(0);

/// The most recently used retrievals, newest first.
pub(super) struct Retrievals<T> {
    entries: Mutex<VecDeque<(Key, Arc<T>)>>,
    /// Changes with every change of the engine (each empties the cache): what
    /// was read from the engine under one generation holds while it lasts.
    generation: u64,
}

impl<T> Default for Retrievals<T> {
    fn default() -> Self {
        Retrievals {
            entries: Mutex::new(VecDeque::with_capacity(CAPACITY)),
            generation: GENERATIONS.fetch_add(1, Ordering::Relaxed),
        }
    }
}

impl<T> Retrievals<T> {
    pub(super) fn get(&self, key: &Key) -> Option<Arc<T>> {
        let mut entries = self.entries.lock();
        // The derived equality compares the hashes first.
        let at = entries.iter().position(|(k, _)| k == key)?;
        let entry = entries.remove(at)?;
        let found = Arc::clone(&entry.1);
        entries.push_front(entry);
        Some(found)
    }

    pub(super) fn put(&self, key: Key, value: Arc<T>) {
        let mut entries = self.entries.lock();
        if let Some(at) = entries.iter().position(|(k, _)| k == &key) {
            entries.remove(at);
        }
        if entries.len() == CAPACITY {
            entries.pop_back();
        }
        entries.push_front((key, value));
    }

    /// Forgets everything: the engine changed.
    pub(super) fn clear(&mut self) {
        self.entries.get_mut().clear();
        self.generation = GENERATIONS.fetch_add(1, Ordering::Relaxed);
    }

    /// The engine's state, as [`Self::clear`] last left it.
    pub(super) fn generation(&self) -> u64 {
        self.generation
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.entries.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(text: &str, v: f32) -> Key {
        key_of(text, v, Mode::Hybrid, 50)
    }

    fn key_of(text: &str, v: f32, mode: Mode, pool: usize) -> Key {
        Key::new(
            Some(text),
            Some(&[v, 1.0]),
            mode,
            None,
            (pool, pool),
            true,
            (true, true, true, true),
        )
    }

    #[test]
    fn finds_only_an_equal_key_and_forgets_the_least_recent() {
        let mut r: Retrievals<u32> = Retrievals::default();
        r.put(key("a", 0.0), Arc::new(1));
        assert_eq!(r.get(&key("a", 0.0)).as_deref(), Some(&1));
        assert!(
            r.get(&key("a", -0.0)).is_none(),
            "bits, not values, are compared"
        );
        assert!(r.get(&key("b", 0.0)).is_none());
        assert!(r.get(&key_of("a", 0.0, Mode::Hybrid, 51)).is_none());
        assert!(r.get(&key_of("a", 0.0, Mode::Text, 50)).is_none());
        for i in 1..CAPACITY {
            r.put(key(&i.to_string(), 0.0), Arc::new(i as u32));
        }
        // "a" was used last before the others went in: it is the oldest now.
        r.put(key("new", 0.0), Arc::new(0));
        assert_eq!(r.len(), CAPACITY);
        assert!(r.get(&key("a", 0.0)).is_none());
        assert_eq!(r.get(&key("1", 0.0)).as_deref(), Some(&1));
        let before = r.generation();
        r.clear();
        assert_eq!(r.len(), 0);
        assert_ne!(r.generation(), before);
        let other: Retrievals<u32> = Retrievals::default();
        assert_ne!(other.generation(), r.generation(), "a new engine's too");
    }
}
