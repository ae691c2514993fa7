//! A query's BM25 list retrieved on one of the foreground pool's threads
//! while the caller's thread makes the query's vector (runs the embedding
//! model), then handed to the search, which uses it if it still holds
//! ([`TextAhead`]).

use std::panic::{self, AssertUnwindSafe};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex, RwLock};

use super::{Engine, SearchOptions, TextAhead};

enum State {
    Queued,
    Running,
    /// The search came first and retrieves the list itself.
    Taken,
    /// None: nothing usable (the engine was being written, or the filter
    /// selects nothing); the search retrieves it itself.
    Done(Option<TextAhead>),
}

/// The hand-over between the pool thread and the search.
struct Slot {
    state: Mutex<State>,
    done: Condvar,
}

/// What the pool thread needs of the search it runs ahead of: the arguments
/// the search will be given, but its vector.
pub struct AheadQuery {
    pub options: SearchOptions,
    pub defaults: SearchOptions,
    pub text: String,
    pub dates: Vec<(f64, f64)>,
    pub now: f64,
    pub expiring: bool,
}

/// A BM25 list being retrieved for a search's [`super::SearchRequest::ahead`].
pub struct Ahead {
    slot: Arc<Slot>,
}

impl Ahead {
    /// Queues the retrieval of `query`'s BM25 list from `engine`; None if the
    /// pool cannot start.
    pub fn start(engine: Arc<RwLock<Engine>>, query: AheadQuery) -> Option<Self> {
        let slot = Arc::new(Slot {
            state: Mutex::new(State::Queued),
            done: Condvar::new(),
        });
        let job = Arc::clone(&slot);
        let spawned = crate::pool::spawn(move || {
            {
                let mut state = job.state.lock();
                if !matches!(*state, State::Queued) {
                    return;
                }
                *state = State::Running;
            }
            // A panic is a bug: the search then retrieves the list itself.
            let found = panic::catch_unwind(AssertUnwindSafe(|| retrieve(&engine, &query)))
                .ok()
                .flatten();
            *job.state.lock() = State::Done(found);
            job.done.notify_all();
        });
        spawned.then_some(Ahead { slot })
    }

    /// Whether the pool thread has finished (with a list or without).
    #[cfg(test)]
    pub(crate) fn done(&self) -> bool {
        matches!(*self.slot.state.lock(), State::Done(_))
    }

    /// The list, waiting while the pool thread retrieves it; None if it was not
    /// begun (it never will be) or gave nothing. Called before the search
    /// takes the engine's lock: the pool thread may be waiting for it.
    pub fn take(&self) -> Option<TextAhead> {
        let mut state = self.slot.state.lock();
        loop {
            match std::mem::replace(&mut *state, State::Taken) {
                State::Queued | State::Taken => return None,
                State::Done(found) => return found,
                State::Running => {
                    *state = State::Running;
                    self.slot.done.wait(&mut state);
                }
            }
        }
    }
}

/// The retrieval itself, if the engine can be read at once: a pool thread
/// must not wait for the lock, since a writer holding it may need the pool's
/// threads for its own parallel work.
fn retrieve(engine: &RwLock<Engine>, q: &AheadQuery) -> Option<TextAhead> {
    let engine = engine.try_read()?;
    let admitted = engine.build_conditions(&q.options.admits, q.expiring.then_some(q.now));
    let req = q
        .options
        .request(&q.defaults, Some(&q.text), None, &q.dates, &admitted, q.now)
        .ok()?;
    engine.text_ahead(&req)
}
