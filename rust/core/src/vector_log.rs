//! The vector file of an embedded store, read back at open: a 32-byte header, then
//! entries of a 16-byte head (rowid, blob length, CRC-32 of the three) and a blob
//! (`crate::blob`'s format). `python/memlane/storage/vector_log.py` writes it
//! and says why it is append-only; this reads the entries up to the end the
//! database records, each checksum checked, so a damaged file is never taken
//! for vectors.

use std::fs::File;
use std::path::Path;

use rustc_hash::{FxHashMap, FxHashSet};

use crate::error::{Error, Result};

/// Bytes before the first entry.
pub const HEADER: usize = 32;
/// The magic bytes the header starts with.
pub const MAGIC: &[u8; 8] = b"MLVECLOG";
const ENTRY: usize = 16;

/// The file at `path`, mapped: its bytes stay on disk until read.
pub fn map(path: &Path) -> Result<memmap2::Mmap> {
    let f = File::open(path).map_err(|e| Error::io(path, e))?;
    // SAFETY: the one writer only appends past the end the caller reads up to,
    // and never truncates below it while the store is open.
    unsafe { memmap2::Mmap::map(&f) }.map_err(|e| Error::io(path, e))
}

/// The newest blob of each rowid of `wanted` among the entries of
/// `bytes[..end]`. Every entry up to `end` is checked, not only the wanted
/// ones: an entry whose checksum fails, or that runs past `end`, is
/// [`Error::DamagedVector`].
pub fn newest<'a>(
    path: &Path,
    bytes: &'a [u8],
    end: usize,
    wanted: &FxHashSet<u64>,
) -> Result<FxHashMap<u64, &'a [u8]>> {
    let damaged = |at: usize, why: &str| {
        Error::DamagedVector(format!(
            "the vector file {} is damaged ({why} at byte {at}); restore the store from a backup",
            path.display()
        ))
    };
    if end > bytes.len() {
        return Err(damaged(bytes.len(), "the file ends"));
    }
    if end < HEADER || &bytes[..MAGIC.len()] != MAGIC {
        return Err(damaged(0, "no vector file header"));
    }
    let mut found = FxHashMap::default();
    found.reserve(wanted.len());
    let mut at = HEADER;
    while at < end {
        let Some(head) = bytes.get(at..at + ENTRY).filter(|_| at + ENTRY <= end) else {
            return Err(damaged(at, "an entry cut short"));
        };
        let rowid = u64::from_le_bytes(head[..8].try_into().expect("8 bytes"));
        let len = u32::from_le_bytes(head[8..12].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_le_bytes(head[12..16].try_into().expect("4 bytes"));
        let start = at + ENTRY;
        let Some(blob) = start
            .checked_add(len)
            .filter(|&stop| stop <= end)
            .map(|stop| &bytes[start..stop])
        else {
            return Err(damaged(at, "an entry runs past the end"));
        };
        let mut h = crc32fast::Hasher::new();
        h.update(&head[..12]);
        h.update(blob);
        if h.finalize() != crc {
            return Err(damaged(at, "an entry whose checksum fails"));
        }
        if wanted.contains(&rowid) {
            // Later entries of a rowid replace earlier ones: the file is in commit order.
            found.insert(rowid, blob);
        }
        at = start + len;
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(rowid: u64, blob: &[u8]) -> Vec<u8> {
        let mut head = Vec::new();
        head.extend_from_slice(&rowid.to_le_bytes());
        head.extend_from_slice(&(blob.len() as u32).to_le_bytes());
        let mut h = crc32fast::Hasher::new();
        h.update(&head);
        h.update(blob);
        head.extend_from_slice(&h.finalize().to_le_bytes());
        head.extend_from_slice(blob);
        head
    }

    fn file(entries: &[(u64, &[u8])]) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        out.resize(HEADER, 0);
        for (r, b) in entries {
            out.extend(entry(*r, b));
        }
        out
    }

    #[test]
    fn the_newest_entry_of_each_wanted_rowid() {
        let bytes = file(&[(1, b"aaaa"), (2, b"bbbb"), (1, b"cccc")]);
        let wanted: FxHashSet<u64> = [1, 3].into_iter().collect();
        let found = newest(Path::new("v"), &bytes, bytes.len(), &wanted).unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(found[&1], b"cccc");
    }

    #[test]
    fn bytes_past_the_end_are_not_read() {
        let mut bytes = file(&[(1, b"aaaa")]);
        let end = bytes.len();
        bytes.extend_from_slice(b"garbage of a write that never committed");
        let wanted: FxHashSet<u64> = [1].into_iter().collect();
        assert_eq!(newest(Path::new("v"), &bytes, end, &wanted).unwrap()[&1], b"aaaa");
    }

    #[test]
    fn a_damaged_entry_is_refused_even_when_unwanted() {
        let mut bytes = file(&[(1, b"aaaa"), (2, b"bbbb")]);
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        let wanted: FxHashSet<u64> = [1].into_iter().collect();
        let err = newest(Path::new("v"), &bytes, bytes.len(), &wanted).unwrap_err();
        assert!(matches!(err, Error::DamagedVector(_)), "{err}");
    }

    #[test]
    fn a_short_file_or_a_cut_entry_is_refused() {
        let bytes = file(&[(1, b"aaaa")]);
        let none = FxHashSet::default();
        assert!(newest(Path::new("v"), &bytes, bytes.len() + 1, &none).is_err());
        assert!(newest(Path::new("v"), &bytes, bytes.len() - 1, &none).is_err());
        assert!(newest(Path::new("v"), &bytes[..HEADER], HEADER, &none).unwrap().is_empty());
        let mut foreign = bytes.clone();
        foreign[0] = b'X';
        assert!(newest(Path::new("v"), &foreign, foreign.len(), &none).is_err());
    }
}
