//! Snapshot files: a fixed header (magic, kind, format version, payload length,
//! CRC-32 of the payload) followed by the payload. Saving writes a temporary
//! file in the same directory, fsyncs it and renames it into place, so a crash
//! mid-save leaves the previous file intact.

use std::fs::{self, File};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

const MAGIC: &[u8; 8] = b"MEMLANE\x00";
const HEADER_LEN: usize = 8 + 4 + 4 + 8 + 4;

/// What a file holds, so that loading a BM25 snapshot as an HNSW index fails clearly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kind(pub [u8; 4]);

impl Kind {
    fn name(self) -> String {
        String::from_utf8_lossy(&self.0).into_owned()
    }
}

pub fn corrupt(path: &Path, reason: impl Into<String>) -> Error {
    Error::Corrupt {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// The header that precedes `payload` in a snapshot file.
pub fn header(kind: Kind, version: u32, payload: &[u8]) -> Vec<u8> {
    let mut header = Vec::with_capacity(HEADER_LEN);
    header.extend_from_slice(MAGIC);
    header.extend_from_slice(&kind.0);
    header.extend_from_slice(&version.to_le_bytes());
    header.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    header.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    header
}

/// What a file's header says of its payload: its format version, length and
/// CRC-32. A snapshot's head records its siblings' stamps, so that a sibling
/// from another save (whole, and valid on its own) is not taken for the one
/// written with it: the CRC the stamp holds is the one [`load`] checks the
/// payload against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    pub version: u32,
    pub len: u64,
    pub crc: u32,
}

/// The file at `path`, opened to be read, if it is a regular file: a FIFO
/// put where a file belongs (a snapshot's, the vector file) would block an
/// open until some writer came, and a device is no file memlane wrote. Opened
/// without blocking, then refused as [`Error::Corrupt`] unless regular (the
/// flag changes nothing for a regular file's reads).
pub fn open_regular(path: &Path) -> Result<File> {
    let mut options = fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(&mut options, libc::O_NONBLOCK);
    let f = options.open(path).map_err(|e| Error::io(path, e))?;
    let meta = f.metadata().map_err(|e| Error::io(path, e))?;
    if !meta.is_file() {
        return Err(corrupt(path, "not a regular file"));
    }
    Ok(f)
}

/// The stamp of the `kind` file at `path`, read from its header alone.
pub fn stamp(path: &Path, kind: Kind) -> Result<Stamp> {
    let mut head = [0u8; HEADER_LEN];
    let mut f = open_regular(path)?;
    match f.read_exact(&mut head) {
        Ok(()) => read_header(path, &head, kind),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            Err(corrupt(path, "not a memlane file (bad magic or too short)"))
        }
        Err(e) => Err(Error::io(path, e)),
    }
}

/// The header at the start of `buf`, checked to be a memlane file of `kind`.
fn read_header(path: &Path, buf: &[u8], kind: Kind) -> Result<Stamp> {
    if buf.len() < HEADER_LEN || &buf[..8] != MAGIC {
        return Err(corrupt(path, "not a memlane file (bad magic or too short)"));
    }
    let file_kind = Kind([buf[8], buf[9], buf[10], buf[11]]);
    if file_kind != kind {
        return Err(corrupt(
            path,
            format!(
                "holds a {:?} snapshot, expected {:?}",
                file_kind.name(),
                kind.name()
            ),
        ));
    }
    let mut len = [0u8; 8];
    len.copy_from_slice(&buf[16..24]);
    Ok(Stamp {
        version: u32::from_le_bytes([buf[12], buf[13], buf[14], buf[15]]),
        len: u64::from_le_bytes(len),
        crc: u32::from_le_bytes([buf[24], buf[25], buf[26], buf[27]]),
    })
}

pub fn save(path: &Path, kind: Kind, version: u32, payload: &[u8]) -> Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let file_name = path
        .file_name()
        .ok_or_else(|| Error::invalid(format!("not a file path: {}", path.display())))?;
    let mut tmp_name = file_name.to_os_string();
    tmp_name.push(format!(".tmp-{}", std::process::id()));
    let tmp = dir.join(tmp_name);

    let write = || -> std::io::Result<()> {
        let mut f = File::create(&tmp)?;
        f.write_all(&header(kind, version, payload))?;
        f.write_all(payload)?;
        f.sync_all()?;
        drop(f);
        fs::rename(&tmp, path)?;
        // The rename is durable only once the directory entry is.
        if let Ok(d) = File::open(&dir) {
            let _ = d.sync_all();
        }
        Ok(())
    };
    write().map_err(|e| {
        let _ = fs::remove_file(&tmp);
        Error::io(path, e)
    })
}

/// A loaded file's payload, without its header: the file mapped into memory,
/// so that a gigabyte-sized graph is read from the page cache where it lies
/// instead of being copied into a buffer first. Snapshot files are never
/// changed once written (a newer snapshot is a new directory), so the map
/// stays valid while it is decoded.
#[derive(Debug)]
pub struct Payload(memmap2::Mmap);

impl std::ops::Deref for Payload {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.0[HEADER_LEN..]
    }
}

/// Reads and verifies a snapshot; returns its format version and payload.
pub fn load(path: &Path, kind: Kind, max_version: u32) -> Result<(u32, Payload)> {
    let f = open_regular(path)?;
    // SAFETY: memlane never modifies a snapshot file (see `Payload`), and the
    // store's lock keeps other memlane processes away; bytes another program
    // changes are caught by the checksum or decode to an error (a file it
    // truncated while mapped would fault, as any mapped reader would).
    let buf = unsafe { memmap2::Mmap::map(&f) }.map_err(|e| Error::io(path, e))?;
    let Stamp { version, len, crc } = read_header(path, &buf, kind)?;
    if version == 0 || version > max_version {
        return Err(corrupt(
            path,
            format!(
                "format version {version} is not supported (this build reads up to {max_version})"
            ),
        ));
    }
    if (buf.len() - HEADER_LEN) as u64 != len {
        return Err(corrupt(
            path,
            format!(
                "payload is {} bytes, header says {len} (truncated?)",
                buf.len() - HEADER_LEN
            ),
        ));
    }
    let payload = Payload(buf);
    if crc32fast::hash(&payload) != crc {
        return Err(corrupt(path, "checksum mismatch"));
    }
    Ok((version, payload))
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: Kind = Kind(*b"TEST");

    fn tmpdir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("memlane-persist-{name}-{}", std::process::id()));
        fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn round_trip_and_damage() {
        let d = tmpdir("rt");
        let p = d.join("x.bin");
        save(&p, K, 1, b"payload").unwrap();
        let (version, payload) = load(&p, K, 1).unwrap();
        assert_eq!((version, &payload[..]), (1, &b"payload"[..]));
        assert!(matches!(
            load(&p, Kind(*b"OTHR"), 1),
            Err(Error::Corrupt { .. })
        ));

        let mut bytes = fs::read(&p).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        fs::write(&p, &bytes).unwrap();
        assert!(matches!(load(&p, K, 1), Err(Error::Corrupt { .. })));

        fs::write(&p, &bytes[..bytes.len() - 2]).unwrap();
        assert!(matches!(load(&p, K, 1), Err(Error::Corrupt { .. })));

        fs::write(&p, b"hello").unwrap();
        assert!(matches!(load(&p, K, 1), Err(Error::Corrupt { .. })));
        // An empty file maps to an empty payload, which is too short.
        fs::write(&p, b"").unwrap();
        assert!(matches!(load(&p, K, 1), Err(Error::Corrupt { .. })));

        assert!(matches!(
            load(&d.join("missing"), K, 1),
            Err(Error::NotFound(_))
        ));
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn stamp_names_the_payload() {
        let d = tmpdir("stamp");
        let p = d.join("x.bin");
        save(&p, K, 2, b"payload").unwrap();
        let first = stamp(&p, K).unwrap();
        let want = Stamp {
            version: 2,
            len: 7,
            crc: crc32fast::hash(b"payload"),
        };
        assert_eq!(first, want);
        // Another save of the same length is another stamp.
        save(&p, K, 2, b"PAYLOAD").unwrap();
        assert_ne!(stamp(&p, K).unwrap(), first);
        assert!(matches!(
            stamp(&p, Kind(*b"OTHR")),
            Err(Error::Corrupt { .. })
        ));
        fs::write(&p, b"MEMLANE").unwrap();
        assert!(matches!(stamp(&p, K), Err(Error::Corrupt { .. })));
        assert!(matches!(
            stamp(&d.join("missing"), K),
            Err(Error::NotFound(_))
        ));
        fs::remove_dir_all(&d).unwrap();
    }

    /// A FIFO or a folder where a snapshot file belongs is refused as damaged
    /// at once: opened as a file, a FIFO held the open until a writer came.
    #[cfg(unix)]
    #[test]
    fn a_file_that_is_not_regular_is_corrupt_not_waited_on() {
        let d = tmpdir("fifo");
        let fifo = d.join("fifo.bin");
        let name = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path in a test's own folder.
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
        let folder = d.join("folder.bin");
        fs::create_dir(&folder).unwrap();
        for p in [&fifo, &folder] {
            assert!(matches!(load(p, K, 1), Err(Error::Corrupt { .. })), "{p:?}");
            assert!(matches!(stamp(p, K), Err(Error::Corrupt { .. })), "{p:?}");
        }
        fs::remove_dir_all(&d).unwrap();
    }
}
