//! The vector file's format (`memlane_core::vector_log`) for its writer in
//! `memlane.storage.vector_log`: headers, entries and markers encoded and
//! read here, so the format is declared once.

use std::path::PathBuf;

use memlane_core::{vector_log, Error};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::args;
use crate::errors::{detach, to_py};

/// The header of the vector file of the store whose id is `store` (16 bytes).
#[pyfunction]
pub fn log_header<'py>(py: Python<'py>, store: &[u8]) -> PyResult<Bound<'py, PyBytes>> {
    let store: &[u8; 16] = store
        .try_into()
        .map_err(|_| to_py(py, Error::invalid("a store id is 16 bytes")))?;
    Ok(PyBytes::new(py, &vector_log::header(store)))
}

/// The store id a file's first bytes `head` name, or None if they are not a
/// vector file's header of this version.
#[pyfunction]
pub fn log_header_store<'py>(py: Python<'py>, head: &[u8]) -> Option<Bound<'py, PyBytes>> {
    vector_log::header_store(head).map(|s| PyBytes::new(py, &s))
}

/// `(rowid, blob length, checksum, chain)` of the entry `entry` starts with,
/// or None if it is too short for a head. `chain` is the one a writer goes on
/// from when this entry is the last the database records, if `entry` holds
/// the whole entry and it checks (`memlane_core::vector_log::chain_after`);
/// else None.
#[pyfunction]
pub fn log_entry_head(entry: &[u8]) -> Option<(u64, u32, u32, Option<u64>)> {
    vector_log::head(entry).map(|h| (h.rowid, h.len, h.crc, vector_log::chain_after(entry)))
}

/// What [`log_entries`] returns: the entries' bytes, each record's marker,
/// the last entry's (offset, checksum), and the chain after them.
type Staged<'py> = (
    Bound<'py, PyBytes>,
    Vec<Bound<'py, PyBytes>>,
    Option<(u64, u32)>,
    u64,
);

/// `chain` as [`log_entries`] reads it: None (no entries before), or a u64
/// (else an error naming it).
fn chain_arg(obj: &Bound<'_, PyAny>) -> PyResult<Option<u64>> {
    if obj.is_none() {
        return Ok(None);
    }
    args::unsigned(obj, "chain").map(Some)
}

/// The entries of `rowids` holding `blobs`, to be written at byte `at` after
/// entries whose chain is `chain` (None: after none), then, with `seal`, their
/// seal: their bytes, each record's marker, the last entry's (offset,
/// checksum), and the chain after them.
#[pyfunction]
#[pyo3(signature = (at, chain, rowids, blobs, *, seal = false))]
pub fn log_entries<'py>(
    py: Python<'py>,
    #[pyo3(from_py_with = args::at)] at: u64,
    #[pyo3(from_py_with = chain_arg)] chain: Option<u64>,
    #[pyo3(from_py_with = args::rowids)] rowids: Vec<u64>,
    blobs: Vec<Bound<'py, PyBytes>>,
    seal: bool,
) -> PyResult<Staged<'py>> {
    if rowids.len() != blobs.len() {
        return Err(to_py(
            py,
            Error::invalid("log_entries: as many rowids as blobs"),
        ));
    }
    let size: usize = blobs
        .iter()
        .map(|b| vector_log::ENTRY + b.as_bytes().len())
        .sum::<usize>()
        + if seal { vector_log::SEAL } else { 0 };
    // Where the entries end fits in a u64, so no offset below wraps into the header.
    if at.checked_add(size as u64).is_none() {
        return Err(to_py(py, Error::invalid("log_entries: offsets past 2^64")));
    }
    let mut out = Vec::with_capacity(size);
    let mut markers = Vec::with_capacity(blobs.len());
    let mut last = None;
    let mut chain = chain.unwrap_or(vector_log::CHAIN_START);
    for (&rowid, blob) in rowids.iter().zip(&blobs) {
        let start = at + out.len() as u64;
        let crc = vector_log::append(&mut out, rowid, blob.as_bytes()).map_err(|e| to_py(py, e))?;
        markers.push(PyBytes::new(py, &vector_log::marker(start)));
        last = Some((start, crc));
        chain = vector_log::chain(chain, crc);
    }
    if seal {
        let start = at + out.len() as u64;
        let crc = vector_log::seal(&mut out, chain);
        last = Some((start, crc));
        chain = vector_log::chain(chain, crc);
    }
    Ok((PyBytes::new(py, &out), markers, last, chain))
}

/// The blobs the markers `markers` name in an embedded store's vector file at
/// `path`, read up to byte `end`, one for each of the records `rowids`: each
/// entry checked (its record, its checksum), or `CorruptFileError` naming the
/// first that is not (see `memlane_core::vector_log::entries`).
#[pyfunction]
pub fn log_blobs<'py>(
    py: Python<'py>,
    path: PathBuf,
    #[pyo3(from_py_with = args::end)] end: u64,
    #[pyo3(from_py_with = args::rowids)] rowids: Vec<u64>,
    markers: Vec<Bound<'py, PyBytes>>,
) -> PyResult<Vec<Bound<'py, PyBytes>>> {
    if rowids.len() != markers.len() {
        return Err(to_py(
            py,
            Error::invalid("log_blobs: as many rowids as markers"),
        ));
    }
    let mut wanted = Vec::with_capacity(rowids.len());
    for (&rowid, m) in rowids.iter().zip(&markers) {
        let at = vector_log::marker_offset(m.as_bytes())
            .ok_or_else(|| to_py(py, Error::invalid(format!("record {rowid}: not a marker"))))?;
        wanted.push((rowid, at));
    }
    let (joined, ends) = detach(py, || {
        let map = vector_log::map(&path)?;
        let end = usize::try_from(end).unwrap_or(usize::MAX);
        let found = vector_log::entries(&path, &map, end, &wanted)?;
        let mut joined = Vec::with_capacity(found.iter().map(|b| b.len()).sum());
        let ends = found
            .iter()
            .map(|b| {
                joined.extend_from_slice(b);
                joined.len()
            })
            .collect::<Vec<_>>();
        Ok((joined, ends))
    })?;
    let starts = std::iter::once(0).chain(ends.iter().copied());
    Ok(starts
        .zip(&ends)
        .map(|(s, &e)| PyBytes::new(py, &joined[s..e]))
        .collect())
}
