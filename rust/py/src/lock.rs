//! The lock of each index and of the engine (`HnswIndex`, `BM25Index`,
//! `Engine`), and the one rule every binding keeps with it:
//!
//! **Never wait for one of these locks while holding the GIL.**
//!
//! A thread holding the lock may need the GIL (`HnswIndex.search_where` calls
//! the caller's predicate under the read lock), and parking_lot's `RwLock` is
//! task-fair: once a writer waits, a new reader waits too. A thread that waited
//! for the lock with the GIL held would keep the lock's holder from the GIL,
//! and the holder would never let the lock go: the whole process deadlocks.
//! So the lock is taken either without the GIL (inside `errors::detach`,
//! `read`, `write` and friends below), or by [`Shared::peek`], which takes it
//! with the GIL only when it is free at once, and otherwise waits without it.
//! The inner `RwLock` is private so that no binding takes it another way.

use std::cell::RefCell;

use memlane_core::{Error, Result};
use parking_lot::{RwLock, RwLockReadGuard, RwLockUpgradableReadGuard, RwLockWriteGuard};
use pyo3::prelude::*;

thread_local! {
    /// The locks this thread holds for reading around a call back into Python
    /// ([`Shared::read_calling_back`]), by address.
    static CALLING_BACK: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// A value behind a read-write lock that Python threads share.
pub struct Shared<T> {
    lock: RwLock<T>,
}

/// Forgets the innermost lock of [`CALLING_BACK`] when dropped (a panic too).
struct Unmark;

impl Drop for Unmark {
    fn drop(&mut self) {
        CALLING_BACK.with(|c| c.borrow_mut().pop());
    }
}

impl<T: Send + Sync> Shared<T> {
    pub fn new(value: T) -> Self {
        Shared {
            lock: RwLock::new(value),
        }
    }

    /// Whether this thread reached here from a callback it runs under this
    /// lock's read guard.
    fn calling_back(&self) -> bool {
        let me = &self.lock as *const RwLock<T> as usize;
        CALLING_BACK.with(|c| c.borrow().contains(&me))
    }

    /// `f` on the value, for a cheap look by a binding holding the GIL: the
    /// read lock taken at once when it is free, else waited for without the GIL.
    pub fn peek<R: Send>(&self, py: Python<'_>, f: impl FnOnce(&T) -> R + Send) -> R {
        if let Some(guard) = self.lock.try_read() {
            return f(&guard);
        }
        py.detach(|| f(&self.read()))
    }

    /// The read lock if it is free now: never waits, so work on a pool thread
    /// may take it (one waiting behind a writer that waits for a reader who
    /// waits for the pool would never end).
    pub fn try_read(&self) -> Option<RwLockReadGuard<'_, T>> {
        self.lock.try_read()
    }

    /// The read lock. Call without the GIL only (inside `detach`). Inside a
    /// callback this thread runs under the read lock (a predicate that asks the
    /// index again), it is taken recursively: a fair wait behind a waiting
    /// writer would wait for this thread itself.
    pub fn read(&self) -> RwLockReadGuard<'_, T> {
        if self.calling_back() {
            self.lock.read_recursive()
        } else {
            self.lock.read()
        }
    }

    /// The write lock. Call without the GIL only (inside `detach`). Refused
    /// inside a callback this thread runs under the read lock, which it would
    /// wait for forever.
    pub fn write(&self) -> Result<RwLockWriteGuard<'_, T>> {
        if self.calling_back() {
            return Err(Error::invalid(
                "the index cannot be changed from inside a callback of its own search",
            ));
        }
        Ok(self.lock.write())
    }

    /// The upgradable read lock. Call without the GIL only (inside `detach`).
    pub fn upgradable_read(&self) -> RwLockUpgradableReadGuard<'_, T> {
        self.lock.upgradable_read()
    }

    /// The lock itself, for a core function that takes it in turns. Call
    /// without the GIL only (inside `detach`).
    pub fn raw(&self) -> &RwLock<T> {
        &self.lock
    }

    /// `f` under the read lock, for a search that calls back into Python (and
    /// takes the GIL for it, which is sound because no thread waits for this
    /// lock while holding the GIL). Call without the GIL (inside `detach`).
    /// While `f` runs, this thread's own later locks of this value, from the
    /// callback, are taken as [`Shared::read`] and [`Shared::write`] say.
    pub fn read_calling_back<R>(&self, f: impl FnOnce(&T) -> R) -> R {
        let guard = self.read();
        CALLING_BACK.with(|c| c.borrow_mut().push(&self.lock as *const RwLock<T> as usize));
        let _unmark = Unmark;
        f(&guard)
    }
}
