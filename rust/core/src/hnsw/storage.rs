//! Vector storage: one contiguous, 64-byte aligned buffer holding one record
//! per slot, each a whole number of cache lines. A record is the vector
//! encoded at the index's precision:
//!
//! - `F32`: the floats, zero-padded to a multiple of [`LANES`].
//! - `F16`: IEEE half floats, zero-padded likewise; half the memory traffic,
//!   distances within about 1e-3 of exact.
//! - `Int8`: one byte per component on a per-vector affine grid
//!   (`x ≈ lo + step · code`); a quarter of the memory traffic, distances
//!   within a few 1e-3. Each record's `lo`, `step` and exact squared norm
//!   live in a table of their own, so 384 codes take six lines, not seven
//!   (a seventh line fetched for 12 bytes cost every distance a cache miss).
//!   Snapshots write them after the codes, in the record's old seven lines.
//! - `Int8F16`: the `Int8` record, and the vector in half floats in a
//!   second buffer. Searches walk the graph on the int8 records, which stay
//!   as densely packed as `Int8`'s, and rank their final candidates on the
//!   f16 copies, so results and distances are those of `F16`. The codes are
//!   made from the f16 copy, not from the input, so they are a function of
//!   it: snapshots (from version 2) hold the f16 copy alone, and loading
//!   makes the very same codes again.
//! - `F32` with an int8 walk copy (what `Hnsw` uses for the cosine and `ip`
//!   metrics): int8 codes to walk the graph by, their parameters in a table
//!   as `Int8`'s are, and the floats in the second buffer, on which a
//!   search's final candidates are ranked, so the distances it reports are exact. Snapshots
//!   hold only the floats, as they always have; the codes are derived from
//!   them on load.
//!
//! Zero padding changes no dot product or L2 distance, so the kernels have no
//! tail loops, and aligned records mean no load ever splits a cache line.

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::pages::Region;

/// Floats per step of the distance kernels (one AVX-512 register); a record's
/// floats are padded to a whole number of steps.
pub const LANES: usize = 16;

// Records are read in place by SIMD kernels and written to snapshots as they
// are, which both assume little-endian floats.
#[cfg(target_endian = "big")]
compile_error!("memlane's vector storage assumes a little-endian target");

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precision {
    F32,
    F16,
    Int8,
    Int8F16,
}

impl Precision {
    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "f32" => Ok(Precision::F32),
            "f16" => Ok(Precision::F16),
            "int8" => Ok(Precision::Int8),
            "int8+f16" => Ok(Precision::Int8F16),
            other => Err(Error::invalid(format!(
                "precision must be one of {{'f32', 'f16', 'int8', 'int8+f16'}}, got {other:?}"
            ))),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::F16 => "f16",
            Precision::Int8 => "int8",
            Precision::Int8F16 => "int8+f16",
        }
    }

    pub(crate) fn code(self) -> u8 {
        match self {
            Precision::F32 => 0,
            Precision::F16 => 1,
            Precision::Int8 => 2,
            Precision::Int8F16 => 3,
        }
    }

    pub(crate) fn from_code(code: u8) -> Option<Self> {
        match code {
            0 => Some(Precision::F32),
            1 => Some(Precision::F16),
            2 => Some(Precision::Int8),
            3 => Some(Precision::Int8F16),
            _ => None,
        }
    }
}

const LINE: usize = 64;

/// How a record's int8 codes map back to floats (`x ≈ lo + step · code`),
/// with the vector's exact squared norm and the sum of its codes (which a
/// distance from another record's codes needs, see [`Query::set_codes`]).
///
/// [`Query::set_codes`]: super::distance::Query::set_codes
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Grid {
    pub lo: f32,
    pub step: f32,
    pub norm2: f32,
    pub code_sum: f32,
}

impl Grid {
    fn new(lo: f32, step: f32, norm2: f32, codes: &[u8]) -> Self {
        let code_sum = codes.iter().map(|&c| u32::from(c)).sum::<u32>() as f32;
        Grid {
            lo,
            step,
            norm2,
            code_sum,
        }
    }
}

#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; LINE]);

/// Buffers of [`Vectors`] with more room (see [`Vectors::grown`]); `None`
/// where the buffer has room already.
pub struct GrownVectors {
    lines: Option<Vec<Line>>,
    rank: Option<Vec<Line>>,
    walk_params: Option<Vec<Grid>>,
}

#[cfg(test)]
impl GrownVectors {
    pub fn is_empty(&self) -> bool {
        self.lines.is_none() && self.rank.is_none() && self.walk_params.is_none()
    }
}

/// A copy of `v`, item by item through `copy`, with room for `additional`
/// more items (at least twice its capacity, as `Vec::reserve` grows), or
/// `None` if `v` has that room.
pub(super) fn grown_by<T>(v: &Vec<T>, additional: usize, copy: impl Fn(&T) -> T) -> Option<Vec<T>> {
    let need = v.len().checked_add(additional)?;
    if need <= v.capacity() {
        return None;
    }
    let mut out = Vec::with_capacity(need.max(v.capacity().saturating_mul(2)));
    out.extend(v.iter().map(copy));
    Some(out)
}

/// [`grown_by`] for plain values.
fn grown<T: Copy>(v: &Vec<T>, additional: usize) -> Option<Vec<T>> {
    grown_by(v, additional, |x| *x)
}

/// Puts `new`, a copy of `v` with more room, in place of `v`.
pub(super) fn swap_in<T>(v: &mut Vec<T>, new: Option<Vec<T>>) {
    if let Some(new) = new {
        debug_assert_eq!(new.len(), v.len(), "a copy of another state");
        *v = new;
    }
}

/// How [`Vectors`] encodes a vector (see [`Form::encode`]), apart from its
/// buffers, so slots can be written in parallel.
#[derive(Clone, Copy)]
struct Form {
    precision: Precision,
    dim: usize,
    apart: bool,
    from_rank: bool,
}

impl Form {
    /// Writes `v` to a slot's `record` and its ranking copy `rank` (empty
    /// where there is none); returns the grid of the record's int8 codes,
    /// if it holds codes.
    fn encode(
        self,
        record: &mut [u8],
        rank: &mut [u8],
        v: &[f32],
        buf: &mut Vec<f32>,
    ) -> Option<Grid> {
        // The ranking copy first: int8 codes are made from it.
        if !rank.is_empty() {
            rank.fill(0);
            if self.precision == Precision::Int8F16 {
                write_f16(rank, v);
            } else {
                write_f32(rank, v);
            }
        }
        if self.from_rank {
            return Some(codes_from_rank(record, rank, self.precision, self.dim, buf));
        }
        record.fill(0);
        if self.apart {
            return Some(quantize_int8(record, v));
        }
        if self.precision == Precision::F16 {
            write_f16(record, v);
        } else {
            write_f32(record, v);
        }
        None
    }
}

pub struct Vectors {
    dim: usize,
    padded: usize,
    precision: Precision,
    /// `F32` only: `lines` hold int8 records derived from the floats, which
    /// live in `rank`.
    int8_walk: bool,
    lines_per_record: usize,
    lines: Vec<Line>,
    /// `Int8F16`: the f16 copy of each slot; `F32` with `int8_walk`: the
    /// floats. `rank_lines` lines apiece.
    rank_lines: usize,
    rank: Vec<Line>,
    /// With int8 codes in `lines` (see `params_apart`): each slot's grid.
    walk_params: Vec<Grid>,
}

impl Vectors {
    #[cfg(test)]
    pub fn new(dim: usize, precision: Precision) -> Self {
        Vectors::with_walk(dim, precision, false)
    }

    /// `int8_walk` (honoured for `F32` only) adds the int8 records searches
    /// walk by; the floats become the ranking copy.
    pub fn with_walk(dim: usize, precision: Precision, int8_walk: bool) -> Self {
        let int8_walk = int8_walk && precision == Precision::F32;
        let padded = dim.div_ceil(LANES) * LANES;
        let bytes = match precision {
            // The codes alone: their parameters live in `walk_params`.
            Precision::F32 if int8_walk => padded,
            Precision::F32 => padded * 4,
            Precision::F16 => padded * 2,
            Precision::Int8 | Precision::Int8F16 => padded,
        };
        let rank_bytes = match precision {
            Precision::Int8F16 => padded * 2,
            Precision::F32 if int8_walk => padded * 4,
            _ => 0,
        };
        Vectors {
            dim,
            padded,
            precision,
            int8_walk,
            lines_per_record: bytes.div_ceil(LINE),
            lines: Vec::new(),
            rank_lines: rank_bytes.div_ceil(LINE),
            rank: Vec::new(),
            walk_params: Vec::new(),
        }
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    pub fn padded_dim(&self) -> usize {
        self.padded
    }

    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// The precision of the records searches walk by (`get`).
    pub fn walk_precision(&self) -> Precision {
        if self.int8_walk {
            Precision::Int8
        } else {
            self.precision
        }
    }

    /// The precision of the second copy results are ranked on (`rank`), if any.
    pub fn rank_precision(&self) -> Option<Precision> {
        match self.precision {
            Precision::Int8F16 => Some(Precision::F16),
            Precision::F32 if self.int8_walk => Some(Precision::F32),
            _ => None,
        }
    }

    /// Bytes of the record searches read (`get`).
    pub fn record_bytes(&self) -> usize {
        self.lines_per_record * LINE
    }

    /// Bytes of a slot in a snapshot of format `version` (see
    /// `hnsw::snapshot`): the record, then any ranking copy; where int8 codes
    /// are made from the ranking copy, that copy alone.
    pub fn saved_bytes(&self, version: u32) -> usize {
        let record = if self.record_saved(version) {
            self.saved_record_bytes()
        } else {
            0
        };
        record + self.rank_lines * LINE
    }

    /// Whether a snapshot of format `version` holds the record searches
    /// walk by. Version 1 held the int8 codes of `Int8F16` (made from the
    /// input then, so not from the f16 copy); loading makes them again.
    fn record_saved(&self, version: u32) -> bool {
        !self.codes_from_rank() || (self.precision == Precision::Int8F16 && version == 1)
    }

    /// Whether the int8 codes are made from the ranking copy.
    fn codes_from_rank(&self) -> bool {
        self.params_apart() && self.rank_lines > 0
    }

    /// Bytes of a record in a snapshot: int8 codes are followed by their
    /// parameters there (the format kept since they lived in the record).
    fn saved_record_bytes(&self) -> usize {
        match self.precision {
            Precision::Int8 | Precision::Int8F16 => (self.padded + 12).div_ceil(LINE) * LINE,
            _ => self.record_bytes(),
        }
    }

    pub fn slots(&self) -> usize {
        self.lines.len() / self.lines_per_record.max(1)
    }

    pub fn reserve(&mut self, additional: usize) {
        self.lines.reserve(additional * self.lines_per_record);
        self.rank.reserve(additional * self.rank_lines);
        if self.params_apart() {
            self.walk_params.reserve(additional);
        }
    }

    /// Copies of the buffers that lack room for `additional` more records,
    /// grown as [`Vectors::reserve`] would grow them; through `&self`, so a
    /// caller can make them while searches run and swap them in
    /// ([`Vectors::adopt`]) under its exclusive lock in no time.
    pub fn grown(&self, additional: usize) -> GrownVectors {
        GrownVectors {
            lines: grown(&self.lines, additional * self.lines_per_record),
            rank: grown(&self.rank, additional * self.rank_lines),
            walk_params: if self.params_apart() {
                grown(&self.walk_params, additional)
            } else {
                None
            },
        }
    }

    /// Takes the buffers [`Vectors::grown`] made; the caller makes sure
    /// nothing was stored since (see `Hnsw::adopt`).
    pub fn adopt(&mut self, g: GrownVectors) {
        swap_in(&mut self.lines, g.lines);
        swap_in(&mut self.rank, g.rank);
        swap_in(&mut self.walk_params, g.walk_params);
    }

    fn bytes(&self) -> &[u8] {
        line_bytes(&self.lines)
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        line_bytes_mut(&mut self.lines)
    }

    /// The encoded record of `slot`.
    #[inline]
    pub fn get(&self, slot: u32) -> &[u8] {
        let n = self.record_bytes();
        &self.bytes()[slot as usize * n..][..n]
    }

    /// Whether two slots hold vectors no walk can tell apart: the same
    /// encoded record (and the same parameters of an int8 walk copy), as the
    /// same text embedded twice does.
    #[inline]
    pub fn same(&self, a: u32, b: u32) -> bool {
        self.get(a) == self.get(b)
            && (!self.params_apart()
                || self.walk_params[a as usize] == self.walk_params[b as usize])
    }

    #[inline]
    pub fn ptr(&self, slot: u32) -> *const u8 {
        self.bytes()
            .as_ptr()
            .wrapping_add(slot as usize * self.record_bytes())
    }

    pub fn lines_per_record(&self) -> usize {
        self.lines_per_record
    }

    fn rank_bytes(&self) -> &[u8] {
        line_bytes(&self.rank)
    }

    fn rank_bytes_mut(&mut self) -> &mut [u8] {
        line_bytes_mut(&mut self.rank)
    }

    /// The ranking copy of `slot` (`Int8F16`, or `F32` with an int8 walk
    /// copy; empty otherwise).
    #[inline]
    pub fn rank(&self, slot: u32) -> &[u8] {
        let n = self.rank_lines * LINE;
        &self.rank_bytes()[slot as usize * n..][..n]
    }

    pub fn push_zeroed(&mut self) -> u32 {
        let slot = self.slots() as u32;
        self.lines
            .extend(std::iter::repeat_n(Line([0; LINE]), self.lines_per_record));
        self.rank
            .extend(std::iter::repeat_n(Line([0; LINE]), self.rank_lines));
        if self.params_apart() {
            self.walk_params.push(Grid::default());
        }
        slot
    }

    pub fn set(&mut self, slot: u32, v: &[f32]) {
        debug_assert_eq!(v.len(), self.dim);
        let (n, r, s) = (self.record_bytes(), self.rank_lines * LINE, slot as usize);
        let form = self.form();
        let record = &mut line_bytes_mut(&mut self.lines)[s * n..][..n];
        let rank = &mut line_bytes_mut(&mut self.rank)[s * r..][..r];
        if let Some(grid) = form.encode(record, rank, v, &mut Vec::new()) {
            self.walk_params[s] = grid;
        }
    }

    /// [`Vectors::set`] for many slots at once, on all cores: `rows` holds
    /// `(slot, row)` pairs in increasing slot order, slot `slot` getting row
    /// `row` of `data` (`dim` floats each).
    pub fn set_many(&mut self, rows: &[(u32, usize)], data: &[f32]) {
        let dim = self.dim;
        let stored = self.set_many_with(rows, |row, v| {
            v.copy_from_slice(&data[row * dim..][..dim]);
            Ok(true)
        });
        debug_assert!(stored.is_ok());
    }

    /// [`Vectors::set_many`] with each row's values made where they are
    /// stored: `values(row, v)` writes row `row` into `v` (`dim` floats, one
    /// buffer per thread) and says whether to store it; a slot it declines
    /// is left as it was. Returns, for each of `rows`, whether it was
    /// stored; on an error some slots may hold their new values already.
    pub fn set_many_with(
        &mut self,
        rows: &[(u32, usize)],
        values: impl Fn(usize, &mut [f32]) -> Result<bool> + Sync,
    ) -> Result<Vec<bool>> {
        debug_assert!(rows.windows(2).all(|w| w[0].0 < w[1].0));
        let (n, r, dim) = (self.record_bytes(), self.rank_lines * LINE, self.dim);
        let form = self.form();
        let Vectors {
            lines,
            rank,
            walk_params,
            ..
        } = self;
        // The buffers are split slot by slot (a slot's record, ranking copy
        // and grid are apart), then only the slots that change are handed
        // out: the iterators skip the others at once, so a call costs what
        // its rows do, not what the index holds.
        let mut records = line_bytes_mut(lines).chunks_mut(n);
        let mut ranks = (r > 0).then(|| line_bytes_mut(rank).chunks_mut(r));
        let mut grids = walk_params.iter_mut();
        let mut jobs = Vec::with_capacity(rows.len());
        let mut next = 0;
        for &(slot, row) in rows {
            let skip = (slot - next) as usize;
            next = slot + 1;
            let (Some(record), rank, grid) = (
                records.nth(skip),
                ranks
                    .as_mut()
                    .and_then(|it| it.nth(skip))
                    .unwrap_or_default(),
                grids.nth(skip),
            ) else {
                break;
            };
            jobs.push((record, rank, grid, row));
        }
        crate::pool::install(|| {
            jobs.into_par_iter()
                .with_min_len(256)
                .map_init(
                    || (vec![0f32; dim], Vec::new()),
                    |(v, buf), (record, rank, grid, row)| {
                        if !values(row, v)? {
                            return Ok(false);
                        }
                        if let (Some(new), Some(grid)) = (form.encode(record, rank, v, buf), grid) {
                            *grid = new;
                        }
                        Ok(true)
                    },
                )
                .collect()
        })
    }

    fn form(&self) -> Form {
        Form {
            precision: self.precision,
            dim: self.dim,
            apart: self.params_apart(),
            from_rank: self.codes_from_rank(),
        }
    }

    /// Restores a slot from its snapshot bytes (`saved_bytes` long for the
    /// file's version). Int8 codes made from the ranking copy are left for
    /// [`Vectors::make_codes`], which makes every slot's at once.
    pub fn set_raw(&mut self, slot: u32, saved: &[u8]) {
        let r = self.rank_lines * LINE;
        // The ranking copy as saved, bit for bit (padding included).
        let (record, rank) = saved.split_at(saved.len() - r);
        self.rank_bytes_mut()[slot as usize * r..][..r].copy_from_slice(rank);
        if self.codes_from_rank() {
            // Version 1's codes of `Int8F16` (in `record`) were made from the
            // input: kept, `same` would tell them from a new copy of the same
            // vector.
            return;
        }
        let (n, dim, padded) = (self.record_bytes(), self.dim, self.padded);
        let apart = self.params_apart();
        let dst = &mut self.bytes_mut()[slot as usize * n..][..n];
        if apart {
            // The codes, then their parameters (see `save_slot`); padding
            // stays zero whatever the file holds there, as the kernels and
            // the code sum assume.
            dst.fill(0);
            dst[..dim].copy_from_slice(&record[..dim]);
            let p = &record[padded..padded + 12];
            let f = |i: usize| f32::from_le_bytes([p[i], p[i + 1], p[i + 2], p[i + 3]]);
            self.walk_params[slot as usize] = Grid::new(f(0), f(4), f(8), &record[..dim]);
        } else {
            dst.copy_from_slice(record);
        }
    }

    /// Makes the int8 codes of every slot from its ranking copy, on all
    /// cores (a snapshot's load, after [`Vectors::set_raw`]); nothing where
    /// codes are not made so. Slots marked in `missing` (a snapshot left
    /// their vector out; shorter than the slots: none past its end) keep the
    /// zeros they were pushed with, which are the codes of a zero vector.
    pub fn make_codes(&mut self, missing: &[bool]) {
        if !self.codes_from_rank() {
            return;
        }
        let (n, r, precision, dim) = (
            self.record_bytes(),
            self.rank_lines * LINE,
            self.precision,
            self.dim,
        );
        let (lines, rank, params) = (&mut self.lines, &self.rank, &mut self.walk_params);
        crate::pool::install(|| {
            line_bytes_mut(lines)
                .par_chunks_mut(n)
                .zip(line_bytes(rank).par_chunks(r))
                .zip(params.par_iter_mut())
                .enumerate()
                .with_min_len(1024)
                .for_each_init(Vec::new, |buf, (slot, ((dst, src), grid))| {
                    if !missing.get(slot).copied().unwrap_or(false) {
                        *grid = codes_from_rank(dst, src, precision, dim, buf);
                    }
                });
        });
    }

    /// The snapshot bytes of `slot` in the current format, appended to `out`.
    pub fn save_slot(&self, slot: u32, out: &mut Vec<u8>) {
        // Codes made from the ranking copy are made again on load: not saved.
        if !self.codes_from_rank() {
            if self.params_apart() {
                // The layout int8 records had when their parameters followed
                // the codes in memory: codes, `lo`, `step`, squared norm, zeros.
                let start = out.len();
                out.extend_from_slice(&self.get(slot)[..self.padded]);
                let g = self.walk_params(slot);
                for p in [g.lo, g.step, g.norm2] {
                    out.extend_from_slice(&p.to_le_bytes());
                }
                out.resize(start + self.saved_record_bytes(), 0);
            } else {
                out.extend_from_slice(self.get(slot));
            }
        }
        out.extend_from_slice(self.rank(slot));
    }

    /// The floats int8 codes stand for (the first `dim`, then zeros).
    fn decode_int8(&self, slot: u32, out: &mut Vec<f32>) {
        out.clear();
        let Grid { lo, step, .. } = self.walk_params(slot);
        out.extend(
            self.get(slot)[..self.dim]
                .iter()
                .map(|&c| lo + step * f32::from(c)),
        );
        out.resize(self.padded, 0.0);
    }

    pub fn decode(&self, slot: u32, out: &mut Vec<f32>) {
        out.clear();
        let r = self.get(slot);
        match self.precision {
            Precision::F32 if self.int8_walk => {
                out.extend_from_slice(as_f32s(&self.rank(slot)[..self.padded * 4]));
            }
            Precision::F32 => out.extend_from_slice(as_f32s(&r[..self.padded * 4])),
            Precision::F16 => read_f16(r, self.padded, out),
            Precision::Int8F16 => read_f16(self.rank(slot), self.padded, out),
            Precision::Int8 => self.decode_int8(slot, out),
        }
    }

    /// The buffers a search reads (see [`crate::pages`]).
    pub fn regions(&self, out: &mut Vec<Region>) {
        out.extend([
            Region::of(&self.lines),
            Region::of(&self.rank),
            Region::of(&self.walk_params),
        ]);
    }

    pub fn memory_bytes(&self) -> usize {
        (self.lines.capacity() + self.rank.capacity()) * LINE
            + self.walk_params.capacity() * std::mem::size_of::<Grid>()
    }

    /// Whether the records `get` returns are int8 codes, whose parameters
    /// are read with [`Vectors::walk_params`].
    #[inline(always)]
    pub fn params_apart(&self) -> bool {
        self.int8_walk || matches!(self.precision, Precision::Int8 | Precision::Int8F16)
    }

    /// The grid of the int8 codes of `slot`.
    #[inline(always)]
    pub fn walk_params(&self, slot: u32) -> Grid {
        self.walk_params[slot as usize]
    }

    /// Starts loading what [`Vectors::walk_params`] reads of `slot`.
    #[inline(always)]
    pub fn prefetch_walk_params(&self, slot: u32) {
        if let Some(p) = self.walk_params.get(slot as usize) {
            crate::prefetch::prefetch(p as *const Grid);
        }
    }
}

fn line_bytes(lines: &[Line]) -> &[u8] {
    // SAFETY: Line is repr(C) over [u8; 64] with no padding, so the buffer is
    // a valid run of lines.len() * 64 bytes.
    unsafe { std::slice::from_raw_parts(lines.as_ptr().cast::<u8>(), std::mem::size_of_val(lines)) }
}

fn line_bytes_mut(lines: &mut [Line]) -> &mut [u8] {
    // SAFETY: as in `line_bytes`, with exclusive access.
    unsafe {
        std::slice::from_raw_parts_mut(
            lines.as_mut_ptr().cast::<u8>(),
            std::mem::size_of_val(lines),
        )
    }
}

/// Views the bytes of an f32 record as floats, which they are: records start
/// on 64-byte boundaries and hold native floats.
fn as_f32s(bytes: &[u8]) -> &[f32] {
    debug_assert!(bytes.as_ptr().cast::<f32>().is_aligned() && bytes.len().is_multiple_of(4));
    // SAFETY: aligned (records are 64-byte aligned), in bounds (len / 4
    // floats), and every bit pattern is a valid f32.
    unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<f32>(), bytes.len() / 4) }
}

fn write_f32(dst: &mut [u8], v: &[f32]) {
    for (d, x) in dst.chunks_exact_mut(4).zip(v) {
        d.copy_from_slice(&x.to_le_bytes());
    }
}

fn write_f16(dst: &mut [u8], v: &[f32]) {
    use half::slice::HalfFloatSliceExt;
    // SAFETY: any f16 bit pattern is valid; the slice is only written.
    let (head, halves, _) = unsafe { dst.align_to_mut::<half::f16>() };
    if cfg!(target_endian = "little") && head.is_empty() && halves.len() >= v.len() {
        // A slice at once: the conversion runs on F16C where there is one,
        // rounding as `f16::from_f32` does (to nearest, ties to even).
        halves[..v.len()].convert_from_f32_slice(v);
        return;
    }
    for (d, x) in dst.chunks_exact_mut(2).zip(v) {
        d.copy_from_slice(&half::f16::from_f32(*x).to_bits().to_le_bytes());
    }
}

fn read_f16(src: &[u8], padded: usize, out: &mut Vec<f32>) {
    out.extend(
        src.chunks_exact(2)
            .take(padded)
            .map(|b| half::f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32()),
    );
}

/// Writes to `dst` (a whole record) the int8 codes of the ranking copy `src`
/// (f16 under `Int8F16`, else f32), read through `buf`; returns their grid.
fn codes_from_rank(
    dst: &mut [u8],
    src: &[u8],
    precision: Precision,
    dim: usize,
    buf: &mut Vec<f32>,
) -> Grid {
    buf.clear();
    if precision == Precision::Int8F16 {
        use half::slice::HalfFloatSliceExt;
        // SAFETY: every bit pattern is a valid f16, and ranking copies start
        // on 64-byte boundaries, so `halves` is all of `src`.
        let (head, halves, _) = unsafe { src.align_to::<half::f16>() };
        assert!(head.is_empty(), "a ranking copy off its line");
        buf.resize(dim, 0.0);
        // A slice at once: the conversion runs on F16C where there is one.
        halves[..dim].convert_to_f32_slice(buf);
    } else {
        // Read, not cast: the same code serves any alignment.
        buf.extend(
            src.chunks_exact(4)
                .take(dim)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        );
    }
    dst.fill(0);
    quantize_int8(dst, buf)
}

/// Writes the codes of `v` to the start of `dst`; returns their grid.
fn quantize_int8(dst: &mut [u8], v: &[f32]) -> Grid {
    let (lo, hi, norm2) = range_and_norm2(v);
    let step = (hi - lo) / 255.0;
    let inv = if step > 0.0 { 1.0 / step } else { 0.0 };
    // Rounded half up by adding 0.5 and truncating, which compiles to a few
    // vector instructions where `round` is a call per component (loading a
    // snapshot makes 38 million codes at 100k vectors of 384). `max` and `min`
    // rather than `clamp`, and an unchecked conversion: `clamp` and `as`
    // keep a NaN's own path, which kept the loop scalar.
    for (d, x) in dst.iter_mut().zip(v) {
        // `max` returns 0 for a NaN (a grid too fine for its inverse), where
        // `clamp` would return the NaN.
        #[expect(clippy::manual_clamp, reason = "a NaN must become 0")]
        let y = ((x - lo) * inv + 0.5).max(0.0).min(255.0);
        // SAFETY: `y` is a number in [0, 255], which an i32 holds.
        *d = unsafe { y.to_int_unchecked::<i32>() } as u8;
    }
    Grid::new(lo, step, norm2, &dst[..v.len()])
}

/// The least and greatest component of `v` and its squared norm, each kept
/// in `LANES` independent accumulators: as one fold each, their chains of
/// dependent steps took most of the time an open spends making codes.
fn range_and_norm2(v: &[f32]) -> (f32, f32, f32) {
    let mut lo = [f32::INFINITY; LANES];
    let mut hi = [f32::NEG_INFINITY; LANES];
    let mut sq = [0.0f32; LANES];
    let mut chunks = v.chunks_exact(LANES);
    for c in &mut chunks {
        for i in 0..LANES {
            lo[i] = lo[i].min(c[i]);
            hi[i] = hi[i].max(c[i]);
            sq[i] += c[i] * c[i];
        }
    }
    for (i, &x) in chunks.remainder().iter().enumerate() {
        lo[i] = lo[i].min(x);
        hi[i] = hi[i].max(x);
        sq[i] += x * x;
    }
    let lo = lo.iter().copied().fold(f32::INFINITY, f32::min);
    let hi = hi.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    (lo, hi, sq.iter().sum())
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::hnsw::snapshot::VERSION;

    #[test]
    fn an_int8_walk_copy_keeps_the_floats_and_its_parameters_apart() {
        let v: Vec<f32> = (0..384)
            .map(|i| ((i * 37) % 101) as f32 / 50.0 - 1.0)
            .collect();
        let mut s = Vectors::with_walk(384, Precision::F32, true);
        assert_eq!(
            (s.walk_precision(), s.rank_precision()),
            (Precision::Int8, Some(Precision::F32))
        );
        // 384 codes fill six lines exactly; the floats take 24, and are saved alone.
        assert_eq!(
            (s.lines_per_record(), s.record_bytes(), s.saved_bytes(1)),
            (6, 384, 1536)
        );
        assert_eq!(s.saved_bytes(VERSION), 1536);
        assert!(s.params_apart());
        s.push_zeroed();
        let b = s.push_zeroed();
        s.set(b, &v);
        let mut out = Vec::new();
        s.decode(b, &mut out);
        assert_eq!(&out[..], &v[..]);
        s.decode_int8(b, &mut out);
        for (x, y) in out.iter().zip(&v) {
            assert!((x - y).abs() <= 1.0 / 255.0);
        }
        let norm2 = s.walk_params(b).norm2;
        assert!((norm2 - v.iter().map(|x| x * x).sum::<f32>()).abs() < 1e-3);
        // A snapshot slot restores both copies.
        let mut saved = Vec::new();
        s.save_slot(b, &mut saved);
        let mut t = Vectors::with_walk(384, Precision::F32, true);
        let c = t.push_zeroed();
        t.set_raw(c, &saved);
        t.make_codes(&[]);
        assert_eq!((t.get(c), t.rank(c)), (s.get(b), s.rank(b)));
        assert_eq!(t.walk_params(c), s.walk_params(b));
        // Other precisions ignore the flag.
        assert!(!Vectors::with_walk(384, Precision::F16, true).params_apart());
    }

    #[test]
    fn int8_codes_take_six_lines_and_save_their_parameters_after_them() {
        let v: Vec<f32> = (0..384)
            .map(|i| ((i * 13) % 97) as f32 / 48.0 - 1.0)
            .collect();
        let mut s = Vectors::new(384, Precision::Int8);
        assert!(s.params_apart());
        // Six lines of codes in memory; in a snapshot, the seven lines they
        // had with their parameters.
        assert_eq!((s.lines_per_record(), s.saved_bytes(VERSION)), (6, 7 * 64));
        let a = s.push_zeroed();
        s.set(a, &v);
        let Grid {
            lo, step, norm2, ..
        } = s.walk_params(a);
        let mut saved = Vec::new();
        s.save_slot(a, &mut saved);
        assert_eq!(&saved[..384], s.get(a));
        let at = |i: usize| f32::from_le_bytes(saved[384 + i..][..4].try_into().unwrap());
        assert_eq!((at(0), at(4), at(8)), (lo, step, norm2));
        assert!(saved[396..448].iter().all(|&b| b == 0));
        let mut t = Vectors::new(384, Precision::Int8);
        let b = t.push_zeroed();
        t.set_raw(b, &saved);
        assert_eq!((t.get(b), t.walk_params(b)), (s.get(a), s.walk_params(a)));
    }

    #[test]
    fn int8_f16_codes_are_made_from_the_f16_copy_and_not_saved() {
        let v: Vec<f32> = (0..384)
            .map(|i| ((i * 13) % 97) as f32 / 48.0 - 1.0)
            .collect();
        let mut s = Vectors::new(384, Precision::Int8F16);
        // Version 1 saved the codes and their parameters in seven lines
        // before the 12 lines of the f16 copy; now the copy alone.
        assert_eq!(
            (
                s.lines_per_record(),
                s.saved_bytes(1),
                s.saved_bytes(VERSION)
            ),
            (6, (7 + 12) * 64, 12 * 64)
        );
        let a = s.push_zeroed();
        s.set(a, &v);
        // The codes are those of the f16 copy, not of the input.
        let mut halves = Vec::new();
        read_f16(s.rank(a), 384, &mut halves);
        let mut want = Vectors::new(384, Precision::Int8);
        let w = want.push_zeroed();
        want.set(w, &halves);
        assert_eq!(
            (s.get(a), s.walk_params(a)),
            (want.get(w), want.walk_params(w))
        );
        let mut saved = Vec::new();
        s.save_slot(a, &mut saved);
        assert_eq!(&saved[..], s.rank(a));
        let mut t = Vectors::new(384, Precision::Int8F16);
        let b = t.push_zeroed();
        t.set_raw(b, &saved);
        t.make_codes(&[]);
        assert_eq!(
            (t.get(b), t.rank(b), t.walk_params(b)),
            (s.get(a), s.rank(a), s.walk_params(a))
        );
        // A version 1 slot: its codes are skipped and made again likewise.
        let mut old = vec![0xA5; 7 * 64];
        old.extend_from_slice(s.rank(a));
        let mut u = Vectors::new(384, Precision::Int8F16);
        let c = u.push_zeroed();
        u.set_raw(c, &old);
        u.make_codes(&[]);
        assert_eq!((u.get(c), u.walk_params(c)), (s.get(a), s.walk_params(a)));
    }

    #[test]
    fn records_are_line_sized_and_decode() {
        let v: Vec<f32> = (0..20).map(|i| i as f32 / 10.0 - 1.0).collect();
        for (p, lines) in [
            (Precision::F32, 2),
            (Precision::F16, 1),
            (Precision::Int8, 1),
            (Precision::Int8F16, 1),
        ] {
            let mut s = Vectors::new(20, p);
            assert_eq!(s.padded_dim(), 32);
            assert_eq!(s.lines_per_record, lines);
            let a = s.push_zeroed();
            let b = s.push_zeroed();
            s.set(b, &v);
            assert_eq!(s.ptr(b) as usize % 64, 0);
            let mut out = Vec::new();
            s.decode(b, &mut out);
            assert_eq!(out.len(), 32);
            let tol = if p == Precision::Int8 {
                2.0 / 255.0
            } else {
                1e-3
            };
            for (x, y) in out.iter().zip(&v) {
                assert!((x - y).abs() <= tol, "{p:?}: {x} vs {y}");
            }
            assert!(out[20..].iter().all(|&x| x == 0.0));
            s.decode(a, &mut out);
            assert!(out.iter().all(|&x| x == 0.0));
        }
    }
}
