//! The engine on disk: one directory per snapshot, `snapshot-<seq>/`, holding
//! `bm25.bin`, `hnsw.bin` (for a store with vectors) and `records.bin`, each
//! a checksummed [`crate::persist`] file. A snapshot is written into a
//! staging directory and renamed into place once complete, so a crash leaves
//! either the old snapshot or the new one, never a mix; older snapshots are
//! deleted after the rename. `seq` is the caller's change sequence number
//! that the snapshot reflects, so the caller knows what to replay.
//!
//! `hnsw.bin` holds the links of every slot but the vectors of removed slots
//! only ([`Hnsw::save_routing`]): the caller's database holds the live ids'
//! vectors, which it gives back after [`Engine::load`] through
//! [`Engine::fill`], and [`Engine::awaiting`] says which are still missing.
//!
//! `records.bin`, version 9: `seq: u64, dim: u64 (0 = none), history: u64`,
//! the stamps ([`persist::Stamp`]: `version: u32, len: u64, crc: u32`) of
//! `bm25.bin` and, with `dim`, of `hnsw.bin`, then the value and
//! key interners (`count: u64` then `str` each), `slots: u64`, then per
//! column `ids: u64s, keys: u32s (interned public ids, u32::MAX = none),
//! live: bytes, table: u32s, type: u32s, 6 × scope: u32s, speaker: u32s
//! (interned, u32::MAX = none), questions: bytes, importance: f32s,
//! evergreen: bytes, access_count: u64s`, `created_at, updated_at,
//! last_accessed_at, valid_to, expires_at, recorded_at` (`slots` f64 each, infinity for
//! a current record's `valid_to` and a record that never expires), per slot its metadata (`count: u64`,
//! then `key: u32, tag: u8` and a payload by tag), `free: u32s`, and the
//! parked vectors (`ids: u64s, data: f32s`). Postings are rebuilt on load.
//!
//! The stamps tie the three files to one save: each file checks on its own,
//! so an older snapshot's `hnsw.bin` or `bm25.bin` copied into the newest
//! directory would load (its ids may even agree) and serve old vectors or
//! texts; its stamp differs, and the load refuses it. `history` is the
//! caller's name for the history of changes the snapshot reflects (0: none),
//! given back by [`Engine::load`]: a change number says where in a history a
//! snapshot stands, not which history, and two copies of one database that
//! went on apart reach the same numbers with other records.
//!
//! Older versions are refused, so the caller rebuilds the engine from its
//! database: version 9 holds only whether each record's text holds a
//! question mark, not how much of it asks, which only the texts tell.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;

use super::pending::Pending;
use super::records::{Interner, Records, Value, NONE};
use super::Engine;
use crate::bm25::{self, Bm25Index};
use crate::codec::{DecodeError, DecodeResult, Reader, Writer};
use crate::error::{Error, Result};
use crate::hnsw::{self, Hnsw};
use crate::persist::{self, corrupt, Kind, Stamp};

pub(crate) const KIND: Kind = Kind(*b"MREC");
// 3: metadata keys with a literal dot are stored escaped (`a\\.b`).
// 4: `valid_to` per slot.
// 5: `expires_at` and `recorded_at` per slot.
// 6: `speaker` per slot.
// 7: a message's speaker read from its transcript line (`Attrs::read_speaker`),
//    which an older snapshot's messages lack, so it is rebuilt.
// 8: `history` and the siblings' stamps after `dim`.
// 9: whether each slot's text holds a question mark, which an older snapshot
//    lacks, so it is rebuilt.
// 10: how much of each slot's text asks (`Records::questions`), of which 9
//    holds only whether it is more than nothing, so it is rebuilt.
pub(crate) const VERSION: u32 = 10;
const PREFIX: &str = "snapshot-";
const STAGING: &str = ".staging-";

fn snapshot_dirs(root: &Path) -> Result<Vec<(u64, PathBuf)>> {
    let mut out = Vec::new();
    let entries = match fs::read_dir(root) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(Error::io(root, e)),
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(seq) = name.strip_prefix(PREFIX).and_then(|s| s.parse().ok()) {
            out.push((seq, entry.path()));
        }
    }
    out.sort_by_key(|(seq, _)| std::cmp::Reverse(*seq));
    Ok(out)
}

fn sync_dir(dir: &Path) {
    if let Ok(d) = fs::File::open(dir) {
        let _ = d.sync_all();
    }
}

impl Engine {
    /// Writes a snapshot reflecting change `seq` of the caller's history
    /// `history` (0: none; see the module's doc) under `root`, then deletes
    /// older ones. Saving the same `seq` twice is a no-op. With `vectors`
    /// the graph keeps its live vectors too (a load needs nothing else);
    /// without, only those of removed slots, and a load awaits
    /// [`Engine::fill`] from the database.
    pub fn save(&self, root: &Path, seq: u64, history: u64, vectors: bool) -> Result<()> {
        fs::create_dir_all(root).map_err(|e| Error::io(root, e))?;
        let name = format!("{PREFIX}{seq:020}");
        let target = root.join(&name);
        if target.join("records.bin").is_file() {
            return Ok(());
        }
        let nonce = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let staging = root.join(format!("{STAGING}{seq:020}-{}-{nonce}", std::process::id()));
        let write = || -> Result<()> {
            fs::create_dir_all(&staging).map_err(|e| Error::io(&staging, e))?;
            let bm25_path = staging.join("bm25.bin");
            self.bm25.save(&bm25_path)?;
            let hnsw_path = staging.join("hnsw.bin");
            match &self.hnsw {
                Some(h) if vectors => h.save(&hnsw_path)?,
                Some(h) => h.save_routing(&hnsw_path)?,
                None => {}
            }
            // Read back from the headers just written: the siblings' saves
            // compute them, and their stamps are what a load compares.
            let stamps = Stamps {
                bm25: persist::stamp(&bm25_path, bm25::snapshot::KIND)?,
                hnsw: match &self.hnsw {
                    Some(_) => Some(persist::stamp(&hnsw_path, hnsw::snapshot::KIND)?),
                    None => None,
                },
            };
            persist::save(
                &staging.join("records.bin"),
                KIND,
                VERSION,
                &self.encode(seq, history, &stamps),
            )?;
            sync_dir(&staging);
            if target.exists() {
                fs::remove_dir_all(&target).map_err(|e| Error::io(&target, e))?;
            }
            fs::rename(&staging, &target).map_err(|e| Error::io(&target, e))?;
            sync_dir(root);
            Ok(())
        };
        if let Err(e) = write() {
            let _ = fs::remove_dir_all(&staging);
            return Err(e);
        }
        // Older snapshots and abandoned staging directories.
        if let Ok(entries) = fs::read_dir(root) {
            for entry in entries.flatten() {
                let n = entry.file_name();
                let n = n.to_string_lossy();
                if (n.starts_with(PREFIX) && n != name) || n.starts_with(STAGING) {
                    let _ = fs::remove_dir_all(entry.path());
                }
            }
        }
        Ok(())
    }

    /// Loads the newest snapshot under `root`; returns it with its `seq` and
    /// the `history` it was saved with.
    /// A sibling file whose stamp is not the one `records.bin` holds is
    /// another save's: [`Error::Corrupt`].
    pub fn load(root: &Path) -> Result<(Engine, u64, u64)> {
        let Some((seq, dir)) = snapshot_dirs(root)?.into_iter().next() else {
            return Err(Error::NotFound(root.to_path_buf()));
        };
        let records_path = dir.join("records.bin");
        let (version, payload) = persist::load(&records_path, KIND, VERSION)?;
        if version < VERSION {
            return Err(corrupt(
                &records_path,
                format!("version {version} is older than this build's {VERSION}"),
            ));
        }
        let mut r = Reader::new(&payload);
        let head = (|| -> DecodeResult<(u64, u64, u64, Stamps)> {
            let (seq, dim) = (r.u64()?, r.u64()?);
            let history = r.u64()?;
            let bm25 = read_stamp(&mut r)?;
            let hnsw = if dim > 0 {
                Some(read_stamp(&mut r)?)
            } else {
                None
            };
            Ok((seq, dim, history, Stamps { bm25, hnsw }))
        })()
        .map_err(|DecodeError(m)| corrupt(&records_path, m))?;
        let (saved_seq, dim, history, stamps) = head;
        if saved_seq != seq {
            return Err(corrupt(
                &records_path,
                format!("holds seq {saved_seq} but its directory says {seq}"),
            ));
        }
        let bm25 = [(bm25::snapshot::KIND, "bm25.bin", stamps.bm25)];
        let hnsw = stamps.hnsw.map(|h| (hnsw::snapshot::KIND, "hnsw.bin", h));
        for (kind, name, saved) in bm25.into_iter().chain(hnsw) {
            let path = dir.join(name);
            if persist::stamp(&path, kind)? != saved {
                return Err(corrupt(
                    &path,
                    "is not the file saved with records.bin (another snapshot's)",
                ));
            }
        }
        let dim = usize::try_from(dim).map_err(|_| corrupt(&records_path, "bad dim"))?;
        // The graph, the text index and the records take similar times to
        // load (at 1M memories, about a second each): each has a thread.
        let (decoded, bm25, hnsw) = std::thread::scope(|scope| {
            let graph =
                (dim > 0).then(|| scope.spawn(|| Hnsw::load_routing(&dir.join("hnsw.bin"))));
            let bm25 = scope.spawn(|| Bm25Index::load(&dir.join("bm25.bin")));
            let decoded = decode(&mut r, dim).map_err(|DecodeError(m)| corrupt(&records_path, m));
            (decoded, join(bm25), graph.map(join))
        });
        let (records, pending) = decoded?;
        let bm25 = bm25?;
        let hnsw = hnsw.transpose()?;
        if hnsw.as_ref().is_some_and(|h| h.dim() != dim) {
            return Err(corrupt(&dir, "hnsw.bin and records.bin disagree on dim"));
        }
        // Every index must hold exactly the records' ids (vectors: a subset).
        let inconsistent = |what: &str| corrupt(&dir, format!("{what} disagrees with records.bin"));
        if bm25.len() != records.len() || bm25.ids().iter().any(|id| !records.contains(*id)) {
            return Err(inconsistent("bm25.bin"));
        }
        if let Some(h) = &hnsw {
            if h.ids()
                .iter()
                .any(|id| !records.contains(*id) || pending.contains(*id))
            {
                return Err(inconsistent("hnsw.bin"));
            }
        }
        if pending.ids().iter().any(|id| !records.contains(*id)) {
            return Err(inconsistent("the parked vectors"));
        }
        Ok((
            Engine {
                records,
                time_words: super::when::TimeWords::new(bm25.analyzer()),
                bm25,
                hnsw,
                pending,
                retrievals: Default::default(),
            },
            seq,
            history,
        ))
    }

    fn encode(&self, seq: u64, history: u64, stamps: &Stamps) -> Vec<u8> {
        let r = &self.records;
        let n = r.capacity();
        let mut w = Writer::with_capacity(n * 96 + self.pending.data().len() * 4 + 1024);
        w.u64(seq);
        w.u64(self.dim().unwrap_or(0) as u64);
        w.u64(history);
        for stamp in [Some(stamps.bm25), stamps.hnsw].into_iter().flatten() {
            w.u32(stamp.version);
            w.u64(stamp.len);
            w.u32(stamp.crc);
        }
        for interner in [&r.strings, &r.keys] {
            w.u64(interner.count() as u64);
            for s in interner.strings() {
                w.str(s);
            }
        }
        w.u64(n as u64);
        w.u64s(&r.ids);
        w.u32s(&r.key);
        w.bytes(&r.live.iter().map(|&b| u8::from(b)).collect::<Vec<_>>());
        w.u32s(&r.table);
        w.u32s(&r.kind);
        for col in &r.scope {
            w.u32s(col);
        }
        w.u32s(&r.speaker);
        w.bytes(&r.questions);
        w.f32s(&r.importance);
        w.bytes(&r.evergreen.iter().map(|&b| u8::from(b)).collect::<Vec<_>>());
        w.u64s(&(0..n as u32).map(|s| r.access_count(s)).collect::<Vec<_>>());
        for s in 0..n {
            w.f64(r.created_at[s]);
        }
        for s in 0..n {
            w.f64(r.updated_at[s]);
        }
        for s in 0..n {
            w.f64(r.accessed_at(s as u32));
        }
        for col in [&r.valid_to, &r.expires_at, &r.recorded_at] {
            for &t in &col[..n] {
                w.f64(t);
            }
        }
        for m in &r.meta {
            w.u64(m.len() as u64);
            for &(key, v) in m {
                w.u32(key);
                match v {
                    Value::Null => w.u8(0),
                    Value::Bool(b) => {
                        w.u8(1);
                        w.u8(u8::from(b));
                    }
                    Value::Num(x) => {
                        w.u8(2);
                        w.f64(x);
                    }
                    Value::Str(s) => {
                        w.u8(3);
                        w.u32(s);
                    }
                }
            }
        }
        w.u32s(&r.free);
        w.u64s(self.pending.ids());
        w.f32s(self.pending.data());
        w.into_inner()
    }
}

/// The stamps of a snapshot's siblings, which its `records.bin` holds.
struct Stamps {
    bm25: Stamp,
    /// Present exactly when the engine has a vector space (`dim` > 0).
    hnsw: Option<Stamp>,
}

fn read_stamp(r: &mut Reader<'_>) -> DecodeResult<Stamp> {
    Ok(Stamp {
        version: r.u32()?,
        len: r.u64()?,
        crc: r.u32()?,
    })
}

fn err(msg: impl Into<String>) -> DecodeError {
    DecodeError(msg.into())
}

fn interner(r: &mut Reader<'_>) -> DecodeResult<Interner> {
    // Each string takes its 8-byte length at least.
    let n = r.len(8)?;
    let mut strings = Vec::with_capacity(n);
    for _ in 0..n {
        strings.push(r.str()?);
    }
    Interner::from_strings(strings.into_iter()).ok_or_else(|| err("a string interned twice"))
}

fn bools(r: &mut Reader<'_>, n: usize, what: &str) -> DecodeResult<Vec<bool>> {
    let b = r.bytes()?;
    if b.len() != n || b.iter().any(|&x| x > 1) {
        return Err(err(format!("bad {what} column")));
    }
    Ok(b.iter().map(|&x| x == 1).collect())
}

fn sized<T>(v: Vec<T>, n: usize, what: &str) -> DecodeResult<Vec<T>> {
    if v.len() == n {
        Ok(v)
    } else {
        Err(err(format!(
            "{what} column has {} entries, expected {n}",
            v.len()
        )))
    }
}

fn decode(r: &mut Reader<'_>, dim: usize) -> DecodeResult<(Records, Pending)> {
    let strings = interner(r)?;
    let keys = interner(r)?;
    let n = usize::try_from(r.u64()?).map_err(|_| err("slot count too large"))?;
    let ids = sized(r.u64s()?, n, "ids")?;
    let key = sized(r.u32s()?, n, "keys")?;
    let live = bools(r, n, "live")?;
    let table = sized(r.u32s()?, n, "table")?;
    let kind = sized(r.u32s()?, n, "type")?;
    let mut scope: [Vec<u32>; 6] = Default::default();
    for col in &mut scope {
        *col = sized(r.u32s()?, n, "scope")?;
    }
    let speaker = sized(r.u32s()?, n, "speaker")?;
    let questions = sized(r.bytes()?.to_vec(), n, "questions")?;
    let importance = sized(r.f32s()?, n, "importance")?;
    let evergreen = bools(r, n, "evergreen")?;
    let access_count = sized(r.u64s()?, n, "access_count")?;
    let mut times: [Vec<f64>; 6] = Default::default();
    for col in &mut times {
        for _ in 0..n {
            col.push(r.f64()?);
        }
    }
    let n_strings = strings.count() as u32;
    let n_keys = keys.count() as u32;
    let mut meta = Vec::with_capacity(n);
    for _ in 0..n {
        let count = r.u64()?;
        let mut m = Vec::new();
        for _ in 0..count {
            let key = r.u32()?;
            if key >= n_keys {
                return Err(err("metadata key out of range"));
            }
            let v = match r.u8()? {
                0 => Value::Null,
                1 => Value::Bool(r.u8()? == 1),
                2 => Value::Num(r.f64()?),
                3 => {
                    let s = r.u32()?;
                    if s >= n_strings {
                        return Err(err("metadata string out of range"));
                    }
                    Value::Str(s)
                }
                t => return Err(err(format!("unknown metadata tag {t}"))),
            };
            m.push((key, v));
        }
        if m.windows(2).any(|w| w[0].0 > w[1].0) {
            return Err(err("metadata keys out of order"));
        }
        meta.push(m);
    }
    let free = r.u32s()?;
    let pending_ids = r.u64s()?;
    let pending_data = r.f32s()?;
    if !r.is_empty() {
        return Err(err("trailing bytes"));
    }
    for s in 0..n {
        if !live[s] {
            continue;
        }
        let in_range = |v: u32| v < n_strings;
        if !in_range(table[s]) || !in_range(kind[s]) || (key[s] != NONE && !in_range(key[s])) {
            return Err(err("table, type or id out of range"));
        }
        if scope
            .iter()
            .chain([&speaker])
            .any(|c| c[s] != NONE && !in_range(c[s]))
        {
            return Err(err("scope value or speaker out of range"));
        }
    }
    let mut free_seen = vec![false; n];
    for &f in &free {
        let f = f as usize;
        if f >= n || live[f] || free_seen[f] {
            return Err(err("bad free slot list"));
        }
        free_seen[f] = true;
    }
    if free.len() + live.iter().filter(|l| **l).count() != n {
        return Err(err("free and live slots do not add up"));
    }
    let pending = Pending::from_parts(dim, pending_ids, pending_data)
        .ok_or_else(|| err("bad parked vectors"))?;
    let [created_at, updated_at, accessed, valid_to, expires_at, recorded_at] = times;
    for (name, col) in [("valid_to", &valid_to), ("expires_at", &expires_at)] {
        if col.iter().any(|t| t.is_nan() || *t == f64::NEG_INFINITY) {
            return Err(err(format!("bad {name}")));
        }
    }
    if recorded_at.iter().any(|t| !t.is_finite()) {
        return Err(err("bad recorded_at"));
    }
    let mut records = Records {
        strings,
        keys,
        ids,
        key,
        live,
        free,
        table,
        kind,
        scope,
        speaker,
        questions,
        importance,
        evergreen,
        created_at,
        updated_at,
        accessed_at: accessed
            .into_iter()
            .map(|t| AtomicU64::new(t.to_bits()))
            .collect(),
        access_count: access_count.into_iter().map(AtomicU64::new).collect(),
        meta,
        valid_to,
        expires_at,
        recorded_at,
        ..Records::default()
    };
    records
        .rebuild_index()
        .map_err(|id| err(format!("id {id} is live twice")))?;
    Ok((records, pending))
}

/// A scoped thread's result; its panic goes on in the caller.
fn join<T>(t: std::thread::ScopedJoinHandle<'_, T>) -> T {
    t.join().unwrap_or_else(|p| std::panic::resume_unwind(p))
}
