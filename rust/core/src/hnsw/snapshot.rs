//! HNSW snapshots. Every parameter (ef included), the graph and the vectors
//! are written; loading checks every count, level and link against the rest
//! of the file, so a damaged file that passes the checksum still cannot
//! produce an index that reads out of bounds.
//!
//! Per slot, from version 3: a byte saying whether its vector follows (1)
//! or was left out (0), the vector if so, then its links on each level.
//! [`Hnsw::save`] writes every vector the index holds; an engine's snapshot
//! ([`Hnsw::save_routing`]) only those of removed slots, whose rows are gone
//! from the database but which still route searches: the live ones come
//! back from the database through [`Hnsw::fill`] (see `missing.rs`).

use std::path::Path;

use super::{Entry, Hnsw, Metric, Params, Precision, NO_ENTRY};
use crate::codec::{DecodeError, DecodeResult, Reader, Writer};
use crate::error::Result;
use crate::persist::{self, corrupt, Kind};

pub(crate) const KIND: Kind = Kind(*b"HNSW");
/// Version 2 leaves out the int8 codes of `int8+f16` indexes, which are made
/// again from the f16 copies on load; version 3 may leave out vectors (a
/// flag per slot). Versions 1 and 2 still load.
pub(crate) const VERSION: u32 = 3;

impl Hnsw {
    /// Writes the index, every vector it holds included.
    pub fn save(&self, path: &Path) -> Result<()> {
        self.save_with(path, |_| true)
    }

    /// Writes the index with the vectors of removed slots only (an engine's
    /// snapshot: its database holds the live ones, given back by
    /// [`Hnsw::fill`] after [`Hnsw::load`]).
    pub(crate) fn save_routing(&self, path: &Path) -> Result<()> {
        self.save_with(path, |slot| self.removed[slot as usize])
    }

    fn save_with(&self, path: &Path, keep: impl Fn(u32) -> bool) -> Result<()> {
        self.settle();
        let dim = self.dim();
        let slots = self.graph.slots();
        let mut w =
            Writer::with_capacity(slots * (dim * 4 + (self.graph.max_degree(0) + 1) * 4 + 16) + 64);
        w.u8(self.metric.code());
        w.u8(self.vectors.precision().code());
        for v in [dim, self.m, self.ef_construction, self.ef] {
            w.u64(v as u64);
        }
        w.u64(self.seed);
        w.u64(self.rng);
        w.u64(self.entry.load(std::sync::atomic::Ordering::Acquire));
        w.u64s(&self.labels);
        w.bytes(
            &self
                .removed
                .iter()
                .map(|&r| u8::from(r))
                .collect::<Vec<_>>(),
        );
        w.bytes(self.graph.levels());
        // One list of the vacant and the freed slots: a load takes them all
        // as freed, and the next clear unlinks the vacant ones again, finding
        // no link to them.
        let free: Vec<u32> = self.vacant.iter().chain(&self.free).copied().collect();
        w.u32s(&free);
        let mut links = Vec::new();
        let mut record = Vec::with_capacity(self.vectors.saved_bytes(VERSION));
        for slot in 0..slots as u32 {
            // A vector still missing stays missing (it reads as zeros).
            if keep(slot) && !self.is_missing(slot) {
                w.u8(1);
                record.clear();
                self.vectors.save_slot(slot, &mut record);
                w.bytes(&record);
            } else {
                w.u8(0);
            }
            for l in 0..=self.graph.level(slot) {
                self.graph.read(slot, l, &mut links);
                w.u32s(&links);
            }
        }
        persist::save(path, KIND, VERSION, &w.into_inner())
    }

    /// Loads what [`Hnsw::save`] wrote. A file whose live ids lack their
    /// vectors (an engine's snapshot: its database holds them) is refused:
    /// nothing could give them back.
    pub fn load(path: &Path) -> Result<Self> {
        let h = Hnsw::load_routing(path)?;
        match h.missing_live {
            0 => Ok(h),
            n => Err(corrupt(
                path,
                format!("{n} live vectors are left out (an engine's snapshot?)"),
            )),
        }
    }

    /// Loads what [`Hnsw::save_routing`] (or [`Hnsw::save`]) wrote; the
    /// vectors left out await [`Hnsw::fill`].
    pub(crate) fn load_routing(path: &Path) -> Result<Self> {
        let (version, payload) = persist::load(path, KIND, VERSION)?;
        decode(&payload, version).map_err(|DecodeError(reason)| corrupt(path, reason))
    }
}

fn bad<T>(msg: impl Into<String>) -> DecodeResult<T> {
    Err(DecodeError(msg.into()))
}

/// Decodes the payload of a snapshot of format `version` (1 to 3).
pub(crate) fn decode(payload: &[u8], version: u32) -> DecodeResult<Hnsw> {
    let mut r = Reader::new(payload);
    let metric = match Metric::from_code(r.u8()?) {
        Some(m) => m,
        None => return bad("unknown metric"),
    };
    let precision = match Precision::from_code(r.u8()?) {
        Some(p) => p,
        None => return bad("unknown precision"),
    };
    let mut next = || -> DecodeResult<usize> {
        usize::try_from(r.u64()?).map_err(|_| DecodeError("parameter out of range".into()))
    };
    let (dim, m, ef_construction, ef) = (next()?, next()?, next()?, next()?);
    let seed = r.u64()?;
    let rng = r.u64()?;
    let entry = r.u64()?;
    let mut h = Hnsw::new(
        dim,
        metric,
        Params {
            m,
            ef_construction,
            ef,
            seed,
            precision,
        },
    )
    .map_err(|e| DecodeError(format!("bad parameters: {e}")))?;
    h.rng = rng;
    h.labels = r.u64s()?;
    let slots = h.labels.len();
    h.removed = r.bytes()?.iter().map(|&b| b != 0).collect();
    let levels = r.bytes()?.to_vec();
    h.free = r.u32s()?;
    if h.removed.len() != slots || levels.len() != slots {
        return bad("slot tables disagree in length");
    }
    if levels.iter().any(|&l| l > 16) {
        return bad("a node level is out of range");
    }
    if h.free
        .iter()
        .any(|&s| s as usize >= slots || !h.removed[s as usize])
    {
        return bad("the free list names a live or missing slot");
    }
    h.vectors.reserve(slots);
    h.graph.reserve(slots);
    h.slots.reserve(slots);
    let mut links = Vec::new();
    let mut missing = vec![false; slots];
    for (slot, &level) in levels.iter().enumerate() {
        h.graph.push(level);
        h.vectors.push_zeroed();
        let saved = match version {
            1 | 2 => true,
            _ => match r.u8()? {
                0 => false,
                1 => true,
                _ => return bad(format!("the vector flag of slot {slot} is damaged")),
            },
        };
        if saved {
            let record = r.bytes()?;
            if record.len() != h.vectors.saved_bytes(version) {
                return bad(format!("vector {slot} is damaged"));
            }
            h.vectors.set_raw(slot as u32, record);
        } else {
            missing[slot] = true;
        }
        for l in 0..=level as usize {
            r.u32s_into(&mut links)?;
            // A link on level l leads to a node that has level l: searches
            // read the target's list on that level.
            let damaged = |&x: &u32| levels.get(x as usize).is_none_or(|&t| (t as usize) < l);
            if links.len() > h.graph.max_degree(l) || links.iter().any(damaged) {
                return bad(format!("links of node {slot} are damaged"));
            }
            h.graph.write(slot as u32, l, &links);
        }
        if !h.removed[slot] && h.slots.insert(h.labels[slot], slot as u32).is_some() {
            return bad(format!("id {} is stored twice", h.labels[slot]));
        }
    }
    if !r.is_empty() {
        return bad("trailing bytes");
    }
    h.vectors.make_codes(&missing);
    h.set_missing(missing);
    // A removed slot outside the free list holds a hidden id.
    let mut freed = vec![false; slots];
    for &s in &h.free {
        freed[s as usize] = true;
    }
    for (slot, &free) in freed.iter().enumerate() {
        if h.removed[slot] && !free {
            let id = h.labels[slot];
            if h.slots.contains_key(&id) || h.held.insert(id, slot as u32).is_some() {
                return bad(format!("hidden id {id} is stored twice"));
            }
        }
    }
    if entry != NO_ENTRY {
        let e = Entry {
            slot: (entry >> 8) as u32,
            level: (entry & 0xFF) as usize,
        };
        if e.slot as usize >= slots || levels[e.slot as usize] as usize != e.level {
            return bad("entry point is damaged");
        }
        h.set_entry(e);
    } else if slots > 0 {
        return bad("nodes without an entry point");
    }
    Ok(h)
}
