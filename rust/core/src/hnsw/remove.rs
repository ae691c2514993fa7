//! Taking ids out of searches: [`Hnsw::remove`] frees their slots for reuse;
//! [`Hnsw::hide`] keeps them as they were, to be shown again
//! ([`Hnsw::unhide`]) or freed later ([`Hnsw::release`]).

use super::Hnsw;
use crate::error::{Error, Result};
use crate::idmap::first_duplicate;

impl Hnsw {
    /// Removes ids; they are never returned again. Their slots keep routing
    /// searches until enough are freed to clear them at once (see
    /// [`Hnsw::clear_due`]), and are then reused by later adds. Fails,
    /// changing nothing, if any id is unknown.
    pub fn remove(&mut self, ids: &[u64]) -> Result<()> {
        if let Some(&id) = ids.iter().find(|id| !self.slots.contains_key(id)) {
            return Err(Error::UnknownId(id));
        }
        if let Some(id) = first_duplicate(ids) {
            return Err(Error::invalid(format!(
                "id {id} appears twice in one remove"
            )));
        }
        for id in ids {
            if let Some(slot) = self.slots.remove(id) {
                self.set_removed(slot, true);
                self.free.push(slot);
            }
        }
        Ok(())
    }

    /// Hides ids from searches (hnswlib's `mark_deleted`): unlike
    /// [`Hnsw::remove`], their slots keep their vectors and links, still route
    /// searches, and are not reused by adds, so [`Hnsw::unhide`] brings them
    /// back exactly. A hidden id is not [`Hnsw::contains`]ed nor counted; adding
    /// it again shows it with the new vector. Fails, changing nothing, if an id
    /// is not live.
    pub fn hide(&mut self, ids: &[u64]) -> Result<()> {
        if let Some(&id) = ids.iter().find(|id| !self.slots.contains_key(id)) {
            return Err(Error::UnknownId(id));
        }
        if let Some(id) = first_duplicate(ids) {
            return Err(Error::invalid(format!("id {id} appears twice in one hide")));
        }
        for id in ids {
            if let Some(slot) = self.slots.remove(id) {
                self.set_removed(slot, true);
                self.held.insert(*id, slot);
            }
        }
        Ok(())
    }

    /// Shows hidden ids again, with the vectors and links they had. Fails,
    /// changing nothing, if an id is not hidden.
    pub fn unhide(&mut self, ids: &[u64]) -> Result<()> {
        self.check_hidden(ids, "unhide")?;
        for id in ids {
            if let Some(slot) = self.held.remove(id) {
                self.set_removed(slot, false);
                self.slots.insert(*id, slot);
            }
        }
        Ok(())
    }

    /// Forgets hidden ids for good: their slots are freed as a remove frees
    /// them, to be reused by later adds (hnswlib's `replace_deleted`). Fails,
    /// changing nothing, if an id is not hidden.
    pub fn release(&mut self, ids: &[u64]) -> Result<()> {
        self.check_hidden(ids, "release")?;
        for id in ids {
            if let Some(slot) = self.held.remove(id) {
                self.free.push(slot);
            }
        }
        Ok(())
    }

    fn check_hidden(&self, ids: &[u64], what: &str) -> Result<()> {
        if let Some(&id) = ids.iter().find(|id| !self.held.contains_key(id)) {
            return Err(Error::UnknownId(id));
        }
        if let Some(id) = first_duplicate(ids) {
            return Err(Error::invalid(format!(
                "id {id} appears twice in one {what}"
            )));
        }
        Ok(())
    }

    /// Hidden ids, in slot order.
    pub fn hidden(&self) -> Vec<u64> {
        let mut held: Vec<(u32, u64)> = self.held.iter().map(|(&id, &s)| (s, id)).collect();
        held.sort_unstable();
        held.into_iter().map(|(_, id)| id).collect()
    }
}
