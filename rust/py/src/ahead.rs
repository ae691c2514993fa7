//! A hybrid search's BM25 list, retrieved on a pool thread while the caller
//! embeds the query (`Engine.search_ahead`), and handed to its search
//! (`Engine.search(..., ahead=)`); see `memlane_core::engine::TextAhead`.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use memlane_core::engine::{Engine, SearchOptions, TextAhead};
use parking_lot::{Condvar, Mutex};
use pyo3::prelude::*;

use crate::lock::Shared;

enum State {
    /// Waiting for a pool thread.
    Queued,
    /// A pool thread retrieves it, under the engine's read lock.
    Running,
    Done(Option<TextAhead>),
    /// Taken by its search, given up by it before a pool thread began, or
    /// given up by the pool thread (the engine's lock was not free).
    Taken,
}

struct Slot {
    state: Mutex<State>,
    done: Condvar,
}

/// The list a search will take: `Engine.search(..., ahead=)`, once.
#[pyclass(module = "memlane._core", name = "SearchAhead", frozen)]
pub struct PySearchAhead {
    slot: Arc<Slot>,
}

/// What the list is retrieved for: the search's request, but for its vector.
pub struct Asked {
    pub options: SearchOptions,
    pub defaults: SearchOptions,
    pub text: String,
    pub dates: Vec<(f64, f64)>,
    pub now: f64,
    pub expiring: bool,
}

impl Asked {
    fn retrieve(&self, engine: &Engine) -> memlane_core::Result<Option<TextAhead>> {
        let o = &self.options;
        let admitted = engine.build_conditions(&o.admits, self.expiring.then_some(self.now));
        let mut req = o.request(
            &self.defaults,
            Some(&self.text),
            None,
            &self.dates,
            &admitted,
            self.now,
        )?;
        // Without a vector the request reads as a text search; the search
        // that takes the list will have one.
        req.mode = o.mode;
        engine.text_ahead(&req)
    }
}

impl PySearchAhead {
    /// Queues the retrieval on the foreground pool; where that pool cannot
    /// start, the search retrieves its list itself.
    pub fn start(engine: Arc<Shared<Engine>>, asked: Asked) -> Self {
        let slot = Arc::new(Slot {
            state: Mutex::new(State::Queued),
            done: Condvar::new(),
        });
        let task = Arc::clone(&slot);
        let queued = memlane_core::pool::spawn(move || {
            // Never waited for: a writer waiting for the lock waits for its
            // readers, and one of them may wait for this pool (a batch's
            // analysis); the search then retrieves its own list.
            let Some(guard) = engine.try_read() else {
                *task.state.lock() = State::Taken;
                return;
            };
            {
                // Running only under the read lock: a search waiting for the
                // list waits for work that needs nothing more.
                let mut state = task.state.lock();
                if !matches!(*state, State::Queued) {
                    return;
                }
                *state = State::Running;
            }
            // An error or a panic leaves no list: the search retrieves its
            // own, and reports what it meets.
            let list = catch_unwind(AssertUnwindSafe(|| asked.retrieve(&guard)))
                .ok()
                .and_then(Result::ok)
                .flatten();
            drop(guard);
            *task.state.lock() = State::Done(list);
            task.done.notify_all();
        });
        if !queued {
            *slot.state.lock() = State::Taken;
        }
        PySearchAhead { slot }
    }

    /// The list, once: waited for while a pool thread retrieves it, None if
    /// none began yet (none will: the search retrieves its own). Call without
    /// the GIL and without the engine's lock.
    pub fn take(&self) -> Option<TextAhead> {
        let mut state = self.slot.state.lock();
        loop {
            match std::mem::replace(&mut *state, State::Taken) {
                State::Running => {
                    *state = State::Running;
                    self.slot.done.wait(&mut state);
                }
                State::Done(list) => return list,
                State::Queued | State::Taken => return None,
            }
        }
    }
}
