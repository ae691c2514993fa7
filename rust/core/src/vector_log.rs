//! The vector file of an embedded store: a 32-byte header (`MAGIC`, the
//! format's `VERSION`, four zero bytes, the store's 16-byte id), then entries
//! of a 16-byte head (rowid, blob length, CRC-32 of the three) and a blob
//! (`crate::blob`'s format). The format is declared here alone: the writer in
//! `python/memlane/storage/vector_log.py` (which says why the file is
//! append-only) encodes through [`header`], [`append`], [`seal`] and
//! [`marker`], and an open reads the entries up to the end the database
//! records, each checksum checked, so a damaged file is never taken for
//! vectors.
//!
//! Each write's entries end with a seal: an entry of rowid [`SEAL_ROWID`]
//! (records' rowids start at 1) whose blob is the [`chain`] of the entries
//! before it, from the seal before it. The database records the last entry,
//! a seal, by offset and checksum, so it names the file's history, not only
//! its end: another copy of the store written apart has another history, and
//! so another seal there (the last entry alone was the same in two copies
//! that each changed a record and then added the same one, and an open took
//! the other copy's vectors). Readers that predate seals skip them as entries
//! no row names; a file they wrote chains from its last entry (see
//! [`chain_after`]).

use std::path::Path;

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::idmap::SlotMap;
use crate::persist;

/// Bytes before the first entry.
pub const HEADER: usize = 32;
/// The magic bytes the header starts with.
pub const MAGIC: &[u8; 8] = b"MLVECLOG";
/// The format's version, after `MAGIC` in the header.
pub const VERSION: u32 = 1;
/// Bytes of an entry's head.
pub const ENTRY: usize = 16;
/// The first byte of the marker a record holds where it would hold its blob
/// (no blob starts with it: see `crate::blob`), then the entry's offset.
pub const MARKER_TAG: u8 = 2;
/// A marker's length: the tag and a little-endian u64.
pub const MARKER_BYTES: usize = 9;
/// The rowid of a seal, the entry that ends each write's entries.
pub const SEAL_ROWID: u64 = 0;
/// Bytes of a seal: a head and the chain it holds (a little-endian u64).
pub const SEAL: usize = ENTRY + 8;
/// The chain of a file without entries (FNV-1a's offset basis).
pub const CHAIN_START: u64 = 0xcbf2_9ce4_8422_2325;

/// `chain` followed by the entry whose checksum is `crc`: FNV-1a over the
/// checksum's bytes. Each checksum covers its entry's rowid, length and blob,
/// so the chain of a file's entries changes with any of them, and with their
/// order.
pub fn chain(chain: u64, crc: u32) -> u64 {
    crc.to_le_bytes().iter().fold(chain, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The header of the vector file of the store whose id is `store`.
pub fn header(store: &[u8; 16]) -> [u8; HEADER] {
    let mut out = [0u8; HEADER];
    out[..8].copy_from_slice(MAGIC);
    out[8..12].copy_from_slice(&VERSION.to_le_bytes());
    out[16..].copy_from_slice(store);
    out
}

/// The store id `bytes` (a file's first bytes) name, or None if they are not
/// the header of a vector file of this version.
pub fn header_store(bytes: &[u8]) -> Option<[u8; 16]> {
    let h = bytes.get(..HEADER)?;
    let version = u32::from_le_bytes(h[8..12].try_into().expect("4 bytes"));
    (&h[..8] == MAGIC && version == VERSION && h[12..16] == [0; 4])
        .then(|| h[16..].try_into().expect("16 bytes"))
}

/// An entry's head: its rowid, its blob's length and its checksum.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Head {
    pub rowid: u64,
    pub len: u32,
    pub crc: u32,
}

/// The head `bytes` start with, or None if they are too short for one.
pub fn head(bytes: &[u8]) -> Option<Head> {
    let h = bytes.get(..ENTRY)?;
    Some(Head {
        rowid: u64::from_le_bytes(h[..8].try_into().expect("8 bytes")),
        len: u32::from_le_bytes(h[8..12].try_into().expect("4 bytes")),
        crc: u32::from_le_bytes(h[12..16].try_into().expect("4 bytes")),
    })
}

/// The checksum of the entry of `rowid` holding `blob`.
fn checksum(rowid_and_len: &[u8], blob: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(rowid_and_len);
    h.update(blob);
    h.finalize()
}

/// Appends the entry of `rowid` holding `blob` to `out`; its checksum.
pub fn append(out: &mut Vec<u8>, rowid: u64, blob: &[u8]) -> Result<u32> {
    let len =
        u32::try_from(blob.len()).map_err(|_| Error::invalid("a vector blob of 4 GiB or more"))?;
    let start = out.len();
    out.extend_from_slice(&rowid.to_le_bytes());
    out.extend_from_slice(&len.to_le_bytes());
    let crc = checksum(&out[start..], blob);
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(blob);
    Ok(crc)
}

/// Appends the seal of entries whose chain is `chain` to `out`; its checksum.
pub fn seal(out: &mut Vec<u8>, chain: u64) -> u32 {
    append(out, SEAL_ROWID, &chain.to_le_bytes()).expect("an 8-byte blob")
}

/// The chain a writer goes on from when `entry` (an entry's head and blob)
/// is the last the database records: after a seal, the chain it holds
/// followed by the seal; after a record's entry (written before seals), that
/// entry alone. None if `entry` is not a whole entry whose checksum holds,
/// or a seal of another length.
pub fn chain_after(entry: &[u8]) -> Option<u64> {
    let h = head(entry)?;
    let blob = entry.get(ENTRY..ENTRY + h.len as usize)?;
    if checksum(&entry[..12], blob) != h.crc {
        return None;
    }
    let from = if h.rowid == SEAL_ROWID {
        u64::from_le_bytes(blob.try_into().ok()?)
    } else {
        CHAIN_START
    };
    Some(chain(from, h.crc))
}

/// The marker a record holds for its entry at byte `at`.
pub fn marker(at: u64) -> [u8; MARKER_BYTES] {
    let mut out = [MARKER_TAG; MARKER_BYTES];
    out[1..].copy_from_slice(&at.to_le_bytes());
    out
}

/// The offset of the entry `value` (a record's stored vector) names, or None
/// if it is not a marker.
pub fn marker_offset(value: &[u8]) -> Option<u64> {
    (value.len() == MARKER_BYTES && value[0] == MARKER_TAG)
        .then(|| u64::from_le_bytes(value[1..].try_into().expect("8 bytes")))
}

/// The file at `path`, mapped: its bytes stay on disk until read.
pub fn map(path: &Path) -> Result<memmap2::Mmap> {
    let f = persist::open_regular(path)?;
    // SAFETY: the one writer only appends past the end the caller reads up to,
    // and never truncates below it while the store is open.
    unsafe { memmap2::Mmap::map(&f) }.map_err(|e| Error::io(path, e))
}

/// The newest blob of each rowid of `wanted` that has one among the entries
/// of `bytes[..end]`, in rowid order. Every entry up to `end` is checked, not
/// only the wanted ones: an entry whose checksum fails, or that runs past
/// `end`, is [`Error::DamagedVector`]. The newest entry of a record is the
/// one its row's marker names as long as the file is the database's, which
/// an open checks first by the seal the database records
/// (`storage/vector_log.py`): it names the file's history up to `end` (each
/// row's marker checked instead would read every row of the database at an
/// open). Seals are no record's entries: rowids start at 1.
pub fn newest<'a>(
    path: &Path,
    bytes: &'a [u8],
    end: usize,
    wanted: &[u64],
) -> Result<Vec<(u64, &'a [u8])>> {
    let damaged = |at: usize, why: &str| {
        Error::DamagedVector(format!(
            "the vector file {} is damaged ({why} at byte {at}); restore the store from a backup",
            path.display()
        ))
    };
    if end > bytes.len() {
        return Err(damaged(bytes.len(), "the file ends"));
    }
    if end < HEADER || header_store(bytes).is_none() {
        return Err(damaged(0, "no vector file header"));
    }
    // The heads in one walk (each gives the next's offset), then the
    // checksums on every core.
    let mut entries = Vec::with_capacity(end / 256);
    let mut at = HEADER;
    while at < end {
        let Some(h) = head(&bytes[at..end]) else {
            return Err(damaged(at, "an entry cut short"));
        };
        let stop = at + ENTRY + h.len as usize;
        if stop > end {
            return Err(damaged(at, "an entry runs past the end"));
        }
        entries.push((at, h.rowid, h.crc));
        at = stop;
    }
    let too_many = || Error::invalid("a vector file of 2^32 entries or more");
    let blob = |at: usize| {
        let len = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().expect("4 bytes"));
        &bytes[at + ENTRY..at + ENTRY + len as usize]
    };
    let fails = crate::pool::install(|| {
        entries
            .par_iter()
            .position_first(|&(at, _, crc)| checksum(&bytes[at..at + 12], blob(at)) != crc)
    });
    if let Some(i) = fails {
        return Err(damaged(entries[i].0, "an entry whose checksum fails"));
    }
    // The wanted rowids sorted, each found through a `SlotMap` by its place
    // among them: a table indexed by rowid, as a store's rowids are dense
    // from 1, but one bounded by the entries wanted, never by the largest
    // rowid (a damaged rowid counter gave a record rowid 2^40, and a table
    // that long aborted every open).
    let mut order = wanted.to_vec();
    order.sort_unstable();
    order.dedup();
    let mut place = SlotMap::default();
    place.reserve(order.len());
    for (i, &id) in order.iter().enumerate() {
        place.insert(id, u32::try_from(i).map_err(|_| too_many())?);
    }
    let mut newest = vec![u32::MAX; order.len()];
    for (i, &(_, rowid, _)) in entries.iter().enumerate() {
        // Later entries of a rowid replace earlier ones: the file is in commit order.
        if let Some(&w) = place.get(&rowid) {
            newest[w as usize] = u32::try_from(i).map_err(|_| too_many())?;
        }
    }
    let found = order
        .iter()
        .zip(&newest)
        .filter(|(_, &i)| i != u32::MAX)
        .map(|(&rowid, &i)| (rowid, blob(entries[i as usize].0)))
        .collect();
    Ok(found)
}

/// The blob of each entry `wanted` names, `(rowid, offset)` each (the offset
/// a record's marker holds), in `wanted`'s order. Each entry must lie within
/// `bytes[..end]`, be its rowid's, and check; else [`Error::DamagedVector`],
/// naming the first that does not. Unlike [`newest`], no other entry is read:
/// this is a read of rows, not an open.
pub fn entries<'a>(
    path: &Path,
    bytes: &'a [u8],
    end: usize,
    wanted: &[(u64, u64)],
) -> Result<Vec<&'a [u8]>> {
    let end = end.min(bytes.len());
    let damaged = |rowid: u64, why: String| {
        Error::DamagedVector(format!(
            "the vector file {} is damaged (record {rowid} {why}); restore the store from a backup",
            path.display()
        ))
    };
    wanted
        .iter()
        .map(|&(rowid, at)| {
            let start = usize::try_from(at)
                .ok()
                .filter(|&a| a >= HEADER && a <= end.saturating_sub(ENTRY))
                .ok_or_else(|| damaged(rowid, format!("names byte {at}, past its end")))?;
            let h = head(&bytes[start..]).expect("within the end");
            let blob = bytes[..end]
                .get(start + ENTRY..start + ENTRY + h.len as usize)
                .ok_or_else(|| damaged(rowid, format!("has its entry at byte {at} cut short")))?;
            if h.rowid != rowid || checksum(&bytes[start..start + 12], blob) != h.crc {
                return Err(damaged(
                    rowid,
                    format!("has an entry at byte {at} that does not check"),
                ));
            }
            Ok(blob)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(entries: &[(u64, &[u8])]) -> Vec<u8> {
        let mut out = header(&[7; 16]).to_vec();
        for (r, b) in entries {
            append(&mut out, *r, b).unwrap();
        }
        out
    }

    /// The bytes of stores written before the format moved here: a header
    /// and an entry as `struct` and `zlib` wrote them, byte for byte.
    #[test]
    fn the_format_is_the_one_stores_hold() {
        let store: [u8; 16] = *b"0123456789abcdef";
        let mut want = b"MLVECLOG\x01\0\0\0\0\0\0\0".to_vec();
        want.extend_from_slice(&store);
        assert_eq!(header(&store).to_vec(), want);
        assert_eq!(header_store(&want), Some(store));
        for (at, bad) in [(0, b'X'), (8, 2), (12, 1)] {
            let mut other = want.clone();
            other[at] = bad;
            assert_eq!(header_store(&other), None);
        }
        assert_eq!(header_store(&want[..HEADER - 1]), None);
        let mut entry = Vec::new();
        // zlib.crc32 of rowid 5 and length 3 (little-endian) and b"abc".
        let crc = append(&mut entry, 5, b"abc").unwrap();
        assert_eq!(crc, 0x1fd9_3f21);
        let mut head_bytes = 5u64.to_le_bytes().to_vec();
        head_bytes.extend_from_slice(&3u32.to_le_bytes());
        head_bytes.extend_from_slice(&crc.to_le_bytes());
        head_bytes.extend_from_slice(b"abc");
        assert_eq!(entry, head_bytes);
        assert_eq!(
            head(&entry),
            Some(Head {
                rowid: 5,
                len: 3,
                crc
            })
        );
        assert_eq!(head(&entry[..ENTRY - 1]), None);
        let m = marker(0x0102_0304_0506_0708);
        assert_eq!(m.to_vec(), [2, 8, 7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(marker_offset(&m), Some(0x0102_0304_0506_0708));
        assert_eq!(marker_offset(&m[..8]), None);
        assert_eq!(marker_offset(&[1; MARKER_BYTES]), None);
    }

    /// `writes` written as a writer does, each write's entries and their seal,
    /// after `before` (entries written before seals).
    fn sealed(before: &[(u64, &[u8])], writes: &[&[(u64, &[u8])]]) -> Vec<u8> {
        let mut out = file(before);
        let mut chained = if before.is_empty() {
            CHAIN_START
        } else {
            let last = out.len() - ENTRY - before[before.len() - 1].1.len();
            chain_after(&out[last..]).unwrap()
        };
        for write in writes {
            for (r, b) in *write {
                chained = chain(chained, append(&mut out, *r, b).unwrap());
            }
            chained = chain(chained, seal(&mut out, chained));
        }
        out
    }

    #[test]
    fn a_seal_holds_the_chain_of_the_entries_before_it() {
        let v = Path::new("v");
        let writes: &[&[(u64, &[u8])]] = &[&[(1, b"aaaa"), (2, b"bbbb")], &[(1, b"cccc")]];
        let bytes = sealed(&[], writes);
        let last = bytes.len() - SEAL;
        let crcs: Vec<u32> = writes
            .iter()
            .flat_map(|w| w.iter())
            .map(|(r, b)| append(&mut Vec::new(), *r, b).unwrap())
            .collect();
        let first = chain(chain(CHAIN_START, crcs[0]), crcs[1]);
        let first_seal = head(&bytes[HEADER + 2 * (ENTRY + 4)..]).unwrap();
        let held = chain(chain(first, first_seal.crc), crcs[2]);
        assert_eq!(bytes[last + ENTRY..], held.to_le_bytes());
        let after = chain(held, head(&bytes[last..]).unwrap().crc);
        assert_eq!(chain_after(&bytes[last..]), Some(after));
        // A record's entry chains alone; a seal whose checksum fails, or cut, is none.
        let one = &bytes[HEADER..HEADER + ENTRY + 4];
        assert_eq!(chain_after(one), Some(chain(CHAIN_START, crcs[0])));
        let mut bad = bytes.clone();
        bad[last + ENTRY] ^= 1;
        assert_eq!(chain_after(&bad[last..]), None);
        assert_eq!(chain_after(&bytes[last..bytes.len() - 1]), None);
        // An open reads past seals, as past entries no record wants.
        let found = newest(v, &bytes, bytes.len(), &[1, 2]).unwrap();
        assert_eq!(found, vec![(1, &b"cccc"[..]), (2, &b"bbbb"[..])]);
        // A write after entries an older memlane wrote goes on from the last of them.
        let mut mixed = sealed(&[(1, b"aaaa")], writes);
        let old = mixed.len();
        append(&mut mixed, 3, b"dddd").unwrap();
        let go_on = chain_after(&mixed[old..]).unwrap();
        assert_eq!(go_on, chain(CHAIN_START, head(&mixed[old..]).unwrap().crc));
        seal(&mut mixed, go_on);
        let found = newest(v, &mixed, mixed.len(), &[1, 3]).unwrap();
        assert_eq!(found, vec![(1, &b"cccc"[..]), (3, &b"dddd"[..])]);
    }

    /// Two copies of one store, each changing another record by an entry of
    /// the same length and then adding the same record: the last record entry
    /// is the same in both, the seal after it is not.
    #[test]
    fn copies_written_apart_end_in_other_seals() {
        let shared: &[(u64, &[u8])] = &[(1, b"aaaa"), (2, b"bbbb")];
        for before in [&[][..], shared] {
            let writes = |change: (u64, &'static [u8])| {
                let write = [change];
                sealed(before, &[shared, &write, &[(3, b"tail")]])
            };
            let (a, b) = (writes((1, b"AAAA")), writes((2, b"BBBB")));
            assert_eq!(a.len(), b.len());
            let last = a.len() - SEAL;
            let record = last - ENTRY - 4;
            assert_eq!(a[record..last], b[record..last]);
            assert_ne!(head(&a[last..]).unwrap().crc, head(&b[last..]).unwrap().crc);
        }
    }

    #[test]
    fn the_newest_entry_of_each_wanted_rowid() {
        let bytes = file(&[(1, b"aaaa"), (2, b"bbbb"), (1, b"cccc")]);
        let found = newest(Path::new("v"), &bytes, bytes.len(), &[3, 1]).unwrap();
        assert_eq!(found, vec![(1, &b"cccc"[..])]);
    }

    /// A rowid far past the others (a damaged rowid counter's) costs a place
    /// among the wanted, not a table as long as the rowid: this aborted the
    /// process with an allocation of 2^42 bytes.
    #[test]
    fn scattered_rowids_are_found_without_a_table_as_long_as_them() {
        let huge = (1u64 << 40) + 3;
        let bytes = file(&[
            (huge, b"hhhh"),
            (2, b"bbbb"),
            (u64::MAX, b"mmmm"),
            (huge, b"HHHH"),
        ]);
        let wanted = [u64::MAX, huge, 2, huge, 7];
        let found = newest(Path::new("v"), &bytes, bytes.len(), &wanted).unwrap();
        assert_eq!(
            found,
            vec![
                (2, &b"bbbb"[..]),
                (huge, &b"HHHH"[..]),
                (u64::MAX, &b"mmmm"[..])
            ]
        );
    }

    #[test]
    fn bytes_past_the_end_are_not_read() {
        let mut bytes = file(&[(1, b"aaaa")]);
        let end = bytes.len();
        bytes.extend_from_slice(b"garbage of a write that never committed");
        let found = newest(Path::new("v"), &bytes, end, &[1]).unwrap();
        assert_eq!(found, vec![(1, &b"aaaa"[..])]);
    }

    #[test]
    fn a_damaged_entry_is_refused_even_when_unwanted() {
        let mut bytes = file(&[(1, b"aaaa"), (2, b"bbbb")]);
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        let err = newest(Path::new("v"), &bytes, bytes.len(), &[1]).unwrap_err();
        assert!(matches!(err, Error::DamagedVector(_)), "{err}");
    }

    #[test]
    fn a_short_file_or_a_cut_entry_is_refused() {
        let bytes = file(&[(1, b"aaaa")]);
        let none = &[];
        assert!(newest(Path::new("v"), &bytes, bytes.len() + 1, none).is_err());
        assert!(newest(Path::new("v"), &bytes, bytes.len() - 1, none).is_err());
        assert!(newest(Path::new("v"), &bytes[..HEADER], HEADER, none)
            .unwrap()
            .is_empty());
        let mut foreign = bytes.clone();
        foreign[0] = b'X';
        assert!(newest(Path::new("v"), &foreign, foreign.len(), none).is_err());
    }
    #[test]
    fn entries_are_read_by_offset_and_checked() {
        let bytes = file(&[(1, b"aaaa"), (2, b"bbbb")]);
        let second = (HEADER + ENTRY + 4) as u64;
        let end = bytes.len();
        let v = Path::new("v");
        let got = entries(v, &bytes, end, &[(2, second), (1, HEADER as u64)]).unwrap();
        assert_eq!(got, vec![&b"bbbb"[..], &b"aaaa"[..]]);
        // Another record's entry, an offset past the end or inside the header, an
        // entry cut by the end, a flipped bit: each refused, naming the record.
        for (wanted, at_end, flip) in [
            ((1, second), end, false),
            ((2, end as u64), end, false),
            ((2, u64::MAX), end, false),
            ((1, 3), end, false),
            ((2, second), end - 1, false),
            ((2, second), end, true),
        ] {
            let mut b = bytes.clone();
            if flip {
                b[end - 1] ^= 1;
            }
            let err = entries(v, &b, at_end, &[wanted]).unwrap_err();
            let Error::DamagedVector(msg) = err else {
                panic!("{err}")
            };
            assert!(msg.contains(&format!("record {}", wanted.0)), "{msg}");
        }
    }
}
