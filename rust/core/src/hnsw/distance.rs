//! Distances between a query (f32, padded to a multiple of [`LANES`]) and a
//! stored record at any [`Precision`]. The best kernels for the running CPU
//! are chosen once, when an index is created or loaded.

use super::storage::{Grid, Precision, LANES};
use crate::error::{Error, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Metric {
    /// `1 - cos(a, b)`; vectors are normalised on insert, so this is `1 - a·b`.
    Cosine,
    /// `1 - a·b`, as hnswlib defines inner-product distance.
    InnerProduct,
    /// Squared Euclidean distance.
    L2,
}

impl Metric {
    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "cosine" => Ok(Metric::Cosine),
            "ip" => Ok(Metric::InnerProduct),
            "l2" => Ok(Metric::L2),
            other => Err(Error::invalid(format!(
                "metric must be one of {{'cosine', 'ip', 'l2'}}, got {other:?}"
            ))),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Metric::Cosine => "cosine",
            Metric::InnerProduct => "ip",
            Metric::L2 => "l2",
        }
    }

    pub(crate) fn code(self) -> u8 {
        match self {
            Metric::Cosine => 0,
            Metric::InnerProduct => 1,
            Metric::L2 => 2,
        }
    }

    pub(crate) fn from_code(code: u8) -> Option<Self> {
        match code {
            0 => Some(Metric::Cosine),
            1 => Some(Metric::InnerProduct),
            2 => Some(Metric::L2),
            _ => None,
        }
    }
}

/// A query ready for the kernels: padded, with what the int8 formula needs.
pub struct Query {
    pub v: Vec<f32>,
    sum: f32,
    norm2: f32,
    /// `v` on a 16-bit grid (`v ≈ scale16 · q16`), so int8 records are read
    /// with integer multiply-adds instead of a float conversion per byte.
    q16: Vec<i16>,
    scale16: f32,
    /// For a query made of another record's codes ([`Query::set_codes`]):
    /// its `lo`, the part of each component the grid of `q16` leaves out.
    offset: f32,
}

impl Query {
    /// `v` must already be `padded_dim` long (zeros past `dim`).
    pub fn new(v: Vec<f32>) -> Self {
        let mut q = Query {
            v,
            sum: 0.0,
            norm2: 0.0,
            q16: Vec::new(),
            scale16: 0.0,
            offset: 0.0,
        };
        q.refresh();
        q
    }

    /// The query a stored record's int8 `codes` (with their `grid`) make, for
    /// the int8 kernels only: `v` is left empty. Linking measures thousands of
    /// distances between stored records per insert; this takes the codes as
    /// they are (`v[i] = lo + step · code[i]` over the first `dim`), where
    /// decoding them to floats and putting those on a 16-bit grid took three
    /// passes. The distances are those of the decoded vector, exactly (see
    /// [`Distance::eval_with`] for the term `lo` adds), but for L2's constant
    /// below.
    pub fn set_codes(&mut self, codes: &[u8], grid: Grid, dim: usize) {
        debug_assert!(codes.len().is_multiple_of(LANES) && codes[dim..].iter().all(|&c| c == 0));
        self.v.clear();
        self.q16.clear();
        self.q16.extend(codes.iter().map(|&c| i16::from(c)));
        let (lo, step) = (grid.lo, grid.step);
        self.sum = dim as f32 * lo + step * grid.code_sum;
        // The vector's exact squared norm, not the decoded one's: under L2
        // it adds the same to every distance from this query, and linking
        // only compares distances from one query with each other.
        self.norm2 = grid.norm2;
        self.scale16 = step;
        self.offset = lo;
    }

    /// `v` zero-padded to `padded` floats.
    pub fn padded(v: &[f32], padded: usize) -> Self {
        let mut p = Vec::with_capacity(padded);
        p.extend_from_slice(v);
        p.resize(padded, 0.0);
        Query::new(p)
    }

    /// Recomputes the derived fields after `v` was rewritten in place.
    /// Linking runs this for every candidate neighbour, so it has a SIMD path.
    pub fn refresh(&mut self) {
        debug_assert!(self.v.len().is_multiple_of(LANES));
        let (sum, norm2, top) = stats(&self.v);
        self.sum = sum;
        self.norm2 = norm2;
        self.offset = 0.0;
        // The integer kernels accumulate up to len/16 pair sums of
        // 255 · |q16| per i32 lane; the grid is capped so that never overflows.
        let cap = (f64::from(i32::MAX) * 16.0 / (510.0 * self.v.len().max(1) as f64))
            .min(f64::from(i16::MAX)) as f32;
        self.scale16 = if top > 0.0 { top / cap } else { 0.0 };
        let inv = if top > 0.0 { cap / top } else { 0.0 };
        self.q16.resize(self.v.len(), 0);
        quantize(&self.v, inv, &mut self.q16);
    }
}

/// Σ v, Σ v² and max |v| of a whole number of LANES.
fn stats(v: &[f32]) -> (f32, f32, f32) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx512f") {
        // SAFETY: the feature was just detected; `v` is whole LANES.
        return unsafe { x86::stats_512(v) };
    }
    let (mut sum, mut norm2, mut top) = ([0.0f32; LANES], [0.0f32; LANES], [0.0f32; LANES]);
    for c in v.chunks_exact(LANES) {
        for i in 0..LANES {
            sum[i] += c[i];
            norm2[i] += c[i] * c[i];
            let a = c[i].abs();
            top[i] = if a > top[i] { a } else { top[i] };
        }
    }
    let top = top.iter().fold(0.0f32, |m, &x| if x > m { x } else { m });
    (sum.iter().sum(), norm2.iter().sum(), top)
}

/// `out[i] = round(v[i] · inv)`, where every `|v[i] · inv|` fits an i16.
fn quantize(v: &[f32], inv: f32, out: &mut [i16]) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx512f") {
        // SAFETY: the feature was just detected; both are whole LANES.
        unsafe { x86::quantize_512(v, inv, out) };
        return;
    }
    for (d, x) in out.iter_mut().zip(v) {
        let y = x * inv;
        // |y| <= cap + 0.5, so the i32 holds it and the i16 takes it whole.
        *d = (y + 0.5f32.copysign(y)) as i32 as i16;
    }
}

/// A raw kernel over a padded query and a record: Σ q·x or Σ (q − x)² (for
/// int8, Σ q16 · code).
type Kernel = fn(&Query, &[u8]) -> f32;
/// The same over four records at once, so their loads overlap.
type Kernel4 = fn(&Query, [&[u8]; 4]) -> [f32; 4];

#[derive(Clone, Copy)]
pub struct Distance {
    metric: Metric,
    precision: Precision,
    kernel: Kernel,
    kernel4: Kernel4,
}

impl Distance {
    pub fn new(metric: Metric, precision: Precision) -> Self {
        let (kernel, kernel4) = kernels().pick(metric, precision);
        Distance {
            metric,
            precision,
            kernel,
            kernel4,
        }
    }

    /// The distance to a record of floats (f32 or f16); int8 codes, whose
    /// parameters are kept apart from them, go through [`Distance::eval_with`].
    #[inline(always)]
    pub fn eval(&self, q: &Query, x: &[u8]) -> f32 {
        debug_assert!(!matches!(
            self.precision,
            Precision::Int8 | Precision::Int8F16
        ));
        self.finish(q, (self.kernel)(q, x), Grid::default)
    }

    /// Four distances; the same values as four calls of [`Distance::eval`].
    #[inline(always)]
    pub fn eval4(&self, q: &Query, x: [&[u8]; 4]) -> [f32; 4] {
        debug_assert!(!matches!(
            self.precision,
            Precision::Int8 | Precision::Int8F16
        ));
        let raw = (self.kernel4)(q, x);
        std::array::from_fn(|j| self.finish(q, raw[j], Grid::default))
    }

    /// The distance to int8 codes on `grid`.
    ///
    /// With `x[i] = lo + step · code[i]`, `q · x = lo · Σq + step · Σ q·code`,
    /// and the kernel gives `Σ q16·code`, `q16` being `q` on its own grid.
    /// A query made of codes ([`Query::set_codes`]) has `q = offset +
    /// scale16 · q16` over the first `dim` components, so `Σ q·code` gains
    /// `offset · Σ code`, the grid's `code_sum` (zero for other queries).
    #[inline(always)]
    pub fn eval_with(&self, q: &Query, x: &[u8], grid: Grid) -> f32 {
        self.finish(q, (self.kernel)(q, x), || grid)
    }

    /// [`Distance::eval4`] likewise.
    #[inline(always)]
    pub fn eval4_with(&self, q: &Query, x: [&[u8]; 4], grids: [Grid; 4]) -> [f32; 4] {
        let raw = (self.kernel4)(q, x);
        std::array::from_fn(|j| self.finish(q, raw[j], || grids[j]))
    }

    /// The distance from a kernel's raw sum; `grid` gives an int8 record's
    /// grid and is called at int8 precisions only.
    #[inline(always)]
    fn finish(&self, q: &Query, raw: f32, grid: impl FnOnce() -> Grid) -> f32 {
        match (self.precision, self.metric) {
            (Precision::Int8 | Precision::Int8F16, metric) => {
                let g = grid();
                let dot = g.lo * q.sum + g.step * q.scale16 * raw + q.offset * g.step * g.code_sum;
                match metric {
                    Metric::L2 => (q.norm2 + g.norm2 - 2.0 * dot).max(0.0),
                    _ => 1.0 - dot,
                }
            }
            (_, Metric::L2) => raw,
            _ => 1.0 - raw,
        }
    }
}

struct Kernels {
    dot_f32: (Kernel, Kernel4),
    l2_f32: (Kernel, Kernel4),
    dot_f16: (Kernel, Kernel4),
    l2_f16: (Kernel, Kernel4),
    dot_u8: (Kernel, Kernel4),
}

impl Kernels {
    fn pick(&self, metric: Metric, precision: Precision) -> (Kernel, Kernel4) {
        match (precision, metric) {
            (Precision::F32, Metric::L2) => self.l2_f32,
            (Precision::F32, _) => self.dot_f32,
            (Precision::F16, Metric::L2) => self.l2_f16,
            (Precision::F16, _) => self.dot_f16,
            // int8 L2 goes through the dot product: |q|² + |x|² − 2 q·x.
            (Precision::Int8 | Precision::Int8F16, _) => self.dot_u8,
        }
    }
}

fn kernels() -> Kernels {
    avx512_kernels()
        .or_else(avx2_kernels)
        .unwrap_or_else(portable::kernels)
}

/// The AVX-512 kernels, if this CPU runs them.
fn avx512_kernels() -> Option<Kernels> {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("avx512bw") {
        return Some(Kernels {
            dot_f32: (x86::dot_f32_avx512, x86::dot_f32_avx512_x4),
            l2_f32: (x86::l2_f32_avx512, x86::l2_f32_avx512_x4),
            dot_f16: (x86::dot_f16_avx512, x86::dot_f16_avx512_x4),
            l2_f16: (x86::l2_f16_avx512, x86::l2_f16_avx512_x4),
            dot_u8: (x86::dot_u8_avx512, x86::dot_u8_avx512_x4),
        });
    }
    None
}

/// The AVX2 kernels, if this CPU runs them.
fn avx2_kernels() -> Option<Kernels> {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2")
        && std::is_x86_feature_detected!("fma")
        && std::is_x86_feature_detected!("f16c")
    {
        return Some(Kernels {
            dot_f32: (x86::dot_f32_avx2, x86::dot_f32_avx2_x4),
            l2_f32: (x86::l2_f32_avx2, x86::l2_f32_avx2_x4),
            dot_f16: (x86::dot_f16_avx2, x86::dot_f16_avx2_x4),
            l2_f16: (x86::l2_f16_avx2, x86::l2_f16_avx2_x4),
            dot_u8: (x86::dot_u8_avx2, x86::dot_u8_avx2_x4),
        });
    }
    None
}

mod portable {
    use super::{Kernel, Kernel4, Kernels, Query, LANES};

    pub(super) fn kernels() -> Kernels {
        Kernels {
            dot_f32: (dot_f32, |q, x| x.map(|x| dot_f32(q, x))),
            l2_f32: (l2_f32, |q, x| x.map(|x| l2_f32(q, x))),
            dot_f16: (dot_f16, |q, x| x.map(|x| dot_f16(q, x))),
            l2_f16: (l2_f16, |q, x| x.map(|x| l2_f16(q, x))),
            dot_u8: (
                dot_u8 as Kernel,
                (|q, x| x.map(|x| dot_u8(q, x))) as Kernel4,
            ),
        }
    }

    fn f32_at(x: &[u8], i: usize) -> f32 {
        f32::from_le_bytes([x[4 * i], x[4 * i + 1], x[4 * i + 2], x[4 * i + 3]])
    }

    fn f16_at(x: &[u8], i: usize) -> f32 {
        half::f16::from_bits(u16::from_le_bytes([x[2 * i], x[2 * i + 1]])).to_f32()
    }

    fn fold(q: &[f32], x: &[u8], at: fn(&[u8], usize) -> f32, term: fn(f32, f32) -> f32) -> f32 {
        let mut acc = [0.0f32; LANES];
        for (c, qc) in q.chunks_exact(LANES).enumerate() {
            for i in 0..LANES {
                acc[i] += term(qc[i], at(x, c * LANES + i));
            }
        }
        acc.iter().sum()
    }

    fn dot_f32(q: &Query, x: &[u8]) -> f32 {
        fold(&q.v, x, f32_at, |a, b| a * b)
    }

    fn l2_f32(q: &Query, x: &[u8]) -> f32 {
        fold(&q.v, x, f32_at, |a, b| (a - b) * (a - b))
    }

    fn dot_f16(q: &Query, x: &[u8]) -> f32 {
        fold(&q.v, x, f16_at, |a, b| a * b)
    }

    fn l2_f16(q: &Query, x: &[u8]) -> f32 {
        fold(&q.v, x, f16_at, |a, b| (a - b) * (a - b))
    }

    fn dot_u8(q: &Query, x: &[u8]) -> f32 {
        let s: i64 = q
            .q16
            .iter()
            .zip(x)
            .map(|(&a, &b)| i64::from(a) * i64::from(b))
            .sum();
        s as f32
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{Query, LANES};
    use std::arch::x86_64::*;

    // SAFETY (every kernel below): the safe wrappers check that the query is
    // a whole number of LANES and that each record holds at least as many
    // components, so every load is in bounds; the unsafe bodies are only
    // reachable through `kernels()`, after the CPU features were detected.

    macro_rules! safe_kernel {
        ($name:ident, $name4:ident, $imp:ident, $imp4:ident, $width:expr, $q:ident) => {
            pub fn $name(q: &Query, x: &[u8]) -> f32 {
                let n = q.$q.len();
                assert!(n % LANES == 0 && x.len() >= n * $width);
                unsafe { $imp(q.$q.as_ptr(), x.as_ptr(), n) }
            }

            pub fn $name4(q: &Query, x: [&[u8]; 4]) -> [f32; 4] {
                let n = q.$q.len();
                assert!(n % LANES == 0);
                assert!(x.iter().all(|x| x.len() >= n * $width));
                unsafe { $imp4(q.$q.as_ptr(), x.map(<[u8]>::as_ptr), n) }
            }
        };
    }

    safe_kernel!(
        dot_f32_avx512,
        dot_f32_avx512_x4,
        dot_f32_512,
        dot_f32_512_x4,
        4,
        v
    );
    safe_kernel!(
        l2_f32_avx512,
        l2_f32_avx512_x4,
        l2_f32_512,
        l2_f32_512_x4,
        4,
        v
    );
    safe_kernel!(
        dot_f16_avx512,
        dot_f16_avx512_x4,
        dot_f16_512,
        dot_f16_512_x4,
        2,
        v
    );
    safe_kernel!(
        l2_f16_avx512,
        l2_f16_avx512_x4,
        l2_f16_512,
        l2_f16_512_x4,
        2,
        v
    );
    safe_kernel!(
        dot_u8_avx512,
        dot_u8_avx512_x4,
        dot_u8_512,
        dot_u8_512_x4,
        1,
        q16
    );
    safe_kernel!(
        dot_f32_avx2,
        dot_f32_avx2_x4,
        dot_f32_256,
        dot_f32_256_x4,
        4,
        v
    );
    safe_kernel!(l2_f32_avx2, l2_f32_avx2_x4, l2_f32_256, l2_f32_256_x4, 4, v);
    safe_kernel!(
        dot_f16_avx2,
        dot_f16_avx2_x4,
        dot_f16_256,
        dot_f16_256_x4,
        2,
        v
    );
    safe_kernel!(l2_f16_avx2, l2_f16_avx2_x4, l2_f16_256, l2_f16_256_x4, 2, v);
    safe_kernel!(
        dot_u8_avx2,
        dot_u8_avx2_x4,
        dot_u8_256,
        dot_u8_256_x4,
        1,
        q16
    );

    /// `acc + a·b` (DOT) or `acc + (a − b)²`, lane-wise.
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn step512<const DOT: bool>(acc: __m512, a: __m512, b: __m512) -> __m512 {
        if DOT {
            _mm512_fmadd_ps(a, b, acc)
        } else {
            let d = _mm512_sub_ps(a, b);
            _mm512_fmadd_ps(d, d, acc)
        }
    }

    /// Float kernels: `$load` decodes LANES components of a record at `i`;
    /// `$dot` picks Σ q·x over Σ (q − x)².
    macro_rules! kernel512 {
        ($name:ident, $name4:ident, $load:ident, $dot:expr) => {
            #[target_feature(enable = "avx512f")]
            unsafe fn $name(q: *const f32, x: *const u8, n: usize) -> f32 {
                let mut s0 = _mm512_setzero_ps();
                let mut s1 = _mm512_setzero_ps();
                let mut i = 0;
                while i + 2 * LANES <= n {
                    s0 = step512::<$dot>(s0, _mm512_loadu_ps(q.add(i)), $load(x, i));
                    let (a, b) = (_mm512_loadu_ps(q.add(i + LANES)), $load(x, i + LANES));
                    s1 = step512::<$dot>(s1, a, b);
                    i += 2 * LANES;
                }
                if i < n {
                    s0 = step512::<$dot>(s0, _mm512_loadu_ps(q.add(i)), $load(x, i));
                }
                _mm512_reduce_add_ps(_mm512_add_ps(s0, s1))
            }

            /// Sums in the order of the one-record kernel (two accumulators
            /// per record), so both give the same floats: a distance must not
            /// depend on whether a record was measured in a group of four.
            #[target_feature(enable = "avx512f")]
            unsafe fn $name4(q: *const f32, x: [*const u8; 4], n: usize) -> [f32; 4] {
                let mut s0 = [_mm512_setzero_ps(); 4];
                let mut s1 = [_mm512_setzero_ps(); 4];
                let mut i = 0;
                while i + 2 * LANES <= n {
                    let (a0, a1) = (_mm512_loadu_ps(q.add(i)), _mm512_loadu_ps(q.add(i + LANES)));
                    for j in 0..4 {
                        s0[j] = step512::<$dot>(s0[j], a0, $load(x[j], i));
                        s1[j] = step512::<$dot>(s1[j], a1, $load(x[j], i + LANES));
                    }
                    i += 2 * LANES;
                }
                if i < n {
                    let a = _mm512_loadu_ps(q.add(i));
                    for j in 0..4 {
                        s0[j] = step512::<$dot>(s0[j], a, $load(x[j], i));
                    }
                }
                std::array::from_fn(|j| _mm512_reduce_add_ps(_mm512_add_ps(s0[j], s1[j])))
            }
        };
    }

    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn load_f32_512(x: *const u8, i: usize) -> __m512 {
        _mm512_loadu_ps(x.cast::<f32>().add(i))
    }

    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn load_f16_512(x: *const u8, i: usize) -> __m512 {
        _mm512_cvtph_ps(_mm256_loadu_si256(x.add(2 * i).cast()))
    }

    kernel512!(dot_f32_512, dot_f32_512_x4, load_f32_512, true);
    kernel512!(l2_f32_512, l2_f32_512_x4, load_f32_512, false);
    kernel512!(dot_f16_512, dot_f16_512_x4, load_f16_512, true);
    kernel512!(l2_f16_512, l2_f16_512_x4, load_f16_512, false);

    /// Σ q16·code over 32 components from `i`: codes widened to i16, pairs
    /// multiplied and added into i32 lanes (`vpmaddwd`).
    #[target_feature(enable = "avx512f,avx512bw")]
    #[inline]
    unsafe fn madd_u8_512(acc: __m512i, q: *const i16, x: *const u8, i: usize) -> __m512i {
        let b = _mm512_cvtepu8_epi16(_mm256_loadu_si256(x.add(i).cast()));
        let a = _mm512_loadu_si512(q.add(i).cast());
        _mm512_add_epi32(acc, _mm512_madd_epi16(a, b))
    }

    /// The same over the 16 components left when `n` is an odd number of LANES.
    #[target_feature(enable = "avx512f,avx512bw")]
    #[inline]
    unsafe fn madd_u8_tail(acc: __m512i, q: *const i16, x: *const u8, i: usize) -> __m512i {
        let b = _mm256_cvtepu8_epi16(_mm_loadu_si128(x.add(i).cast()));
        let a = _mm256_loadu_si256(q.add(i).cast());
        _mm512_add_epi32(acc, _mm512_zextsi256_si512(_mm256_madd_epi16(a, b)))
    }

    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn dot_u8_512(q: *const i16, x: *const u8, n: usize) -> f32 {
        let mut acc = _mm512_setzero_si512();
        let mut i = 0;
        while i + 2 * LANES <= n {
            acc = madd_u8_512(acc, q, x, i);
            i += 2 * LANES;
        }
        if i < n {
            acc = madd_u8_tail(acc, q, x, i);
        }
        _mm512_reduce_add_ps(_mm512_cvtepi32_ps(acc))
    }

    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn dot_u8_512_x4(q: *const i16, x: [*const u8; 4], n: usize) -> [f32; 4] {
        let mut s = [_mm512_setzero_si512(); 4];
        let mut i = 0;
        while i + 2 * LANES <= n {
            for j in 0..4 {
                s[j] = madd_u8_512(s[j], q, x[j], i);
            }
            i += 2 * LANES;
        }
        if i < n {
            for j in 0..4 {
                s[j] = madd_u8_tail(s[j], q, x[j], i);
            }
        }
        s.map(|s| _mm512_reduce_add_ps(_mm512_cvtepi32_ps(s)))
    }

    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn hsum256(v: __m256) -> f32 {
        let lo = _mm256_castps256_ps128(v);
        let hi = _mm256_extractf128_ps(v, 1);
        let s = _mm_add_ps(lo, hi);
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 0x55));
        _mm_cvtss_f32(s)
    }

    /// `s + a·b` (DOT) or `s + (a − b)²` over LANES components held in two registers.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn step256<const DOT: bool>(
        s: [__m256; 2],
        a: [__m256; 2],
        b: [__m256; 2],
    ) -> [__m256; 2] {
        if DOT {
            [
                _mm256_fmadd_ps(a[0], b[0], s[0]),
                _mm256_fmadd_ps(a[1], b[1], s[1]),
            ]
        } else {
            let (d0, d1) = (_mm256_sub_ps(a[0], b[0]), _mm256_sub_ps(a[1], b[1]));
            [_mm256_fmadd_ps(d0, d0, s[0]), _mm256_fmadd_ps(d1, d1, s[1])]
        }
    }

    macro_rules! kernel256 {
        ($name:ident, $name4:ident, $load:ident, $dot:expr) => {
            #[target_feature(enable = "avx2,fma,f16c")]
            unsafe fn $name(q: *const f32, x: *const u8, n: usize) -> f32 {
                let mut s = [_mm256_setzero_ps(); 2];
                let mut i = 0;
                while i < n {
                    let a = [_mm256_loadu_ps(q.add(i)), _mm256_loadu_ps(q.add(i + 8))];
                    s = step256::<$dot>(s, a, [$load(x, i), $load(x, i + 8)]);
                    i += LANES;
                }
                hsum256(_mm256_add_ps(s[0], s[1]))
            }

            #[target_feature(enable = "avx2,fma,f16c")]
            unsafe fn $name4(q: *const f32, x: [*const u8; 4], n: usize) -> [f32; 4] {
                let mut s = [[_mm256_setzero_ps(); 2]; 4];
                let mut i = 0;
                while i < n {
                    let a = [_mm256_loadu_ps(q.add(i)), _mm256_loadu_ps(q.add(i + 8))];
                    for j in 0..4 {
                        s[j] = step256::<$dot>(s[j], a, [$load(x[j], i), $load(x[j], i + 8)]);
                    }
                    i += LANES;
                }
                s.map(|s| hsum256(_mm256_add_ps(s[0], s[1])))
            }
        };
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn load_f32_256(x: *const u8, i: usize) -> __m256 {
        _mm256_loadu_ps(x.cast::<f32>().add(i))
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn load_f16_256(x: *const u8, i: usize) -> __m256 {
        _mm256_cvtph_ps(_mm_loadu_si128(x.add(2 * i).cast()))
    }

    kernel256!(dot_f32_256, dot_f32_256_x4, load_f32_256, true);
    kernel256!(l2_f32_256, l2_f32_256_x4, load_f32_256, false);
    kernel256!(dot_f16_256, dot_f16_256_x4, load_f16_256, true);
    kernel256!(l2_f16_256, l2_f16_256_x4, load_f16_256, false);

    /// Σ q16·code over LANES components from `i` (`vpmaddwd`, 8 i32 lanes).
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn madd_u8_256(acc: __m256i, q: *const i16, x: *const u8, i: usize) -> __m256i {
        let b = _mm256_cvtepu8_epi16(_mm_loadu_si128(x.add(i).cast()));
        let a = _mm256_loadu_si256(q.add(i).cast());
        _mm256_add_epi32(acc, _mm256_madd_epi16(a, b))
    }

    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn hsum256i(v: __m256i) -> f32 {
        hsum256(_mm256_cvtepi32_ps(v))
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn dot_u8_256(q: *const i16, x: *const u8, n: usize) -> f32 {
        let mut acc = _mm256_setzero_si256();
        let mut i = 0;
        while i < n {
            acc = madd_u8_256(acc, q, x, i);
            i += LANES;
        }
        hsum256i(acc)
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn dot_u8_256_x4(q: *const i16, x: [*const u8; 4], n: usize) -> [f32; 4] {
        let mut s = [_mm256_setzero_si256(); 4];
        let mut i = 0;
        while i < n {
            for j in 0..4 {
                s[j] = madd_u8_256(s[j], q, x[j], i);
            }
            i += LANES;
        }
        s.map(|s| hsum256i(s))
    }

    /// SAFETY: needs AVX-512F; `v.len()` is a multiple of LANES.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn stats_512(v: &[f32]) -> (f32, f32, f32) {
        let (mut sum, mut norm2, mut top) = (
            _mm512_setzero_ps(),
            _mm512_setzero_ps(),
            _mm512_setzero_ps(),
        );
        for c in v.chunks_exact(LANES) {
            let x = _mm512_loadu_ps(c.as_ptr());
            sum = _mm512_add_ps(sum, x);
            norm2 = _mm512_fmadd_ps(x, x, norm2);
            top = _mm512_max_ps(top, _mm512_abs_ps(x));
        }
        (
            _mm512_reduce_add_ps(sum),
            _mm512_reduce_add_ps(norm2),
            _mm512_reduce_max_ps(top),
        )
    }

    /// SAFETY: needs AVX-512F; `v` and `out` are as long, a multiple of LANES.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn quantize_512(v: &[f32], inv: f32, out: &mut [i16]) {
        let scale = _mm512_set1_ps(inv);
        for (c, d) in v.chunks_exact(LANES).zip(out.chunks_exact_mut(LANES)) {
            let y = _mm512_mul_ps(_mm512_loadu_ps(c.as_ptr()), scale);
            // Round to nearest, then narrow with saturation.
            let q = _mm512_cvtps_epi32(y);
            _mm256_storeu_si256(d.as_mut_ptr().cast(), _mm512_cvtsepi32_epi16(q));
        }
    }
}

/// `1 - a·b` or `|a - b|²` in f64, from the floats as given: what the kernels are
/// tested against.
#[cfg(test)]
pub(super) fn reference(metric: Metric, a: &[f32], b: &[f32]) -> f64 {
    match metric {
        Metric::L2 => a.iter().zip(b).map(|(x, y)| f64::from(x - y).powi(2)).sum(),
        _ => {
            1.0 - a
                .iter()
                .zip(b)
                .map(|(x, y)| f64::from(*x) * f64::from(*y))
                .sum::<f64>()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::storage::Vectors;
    use super::*;

    /// Seeded values in `[-shift, 1 - shift)`.
    fn values(seed: u64, shift: f32) -> impl FnMut() -> f32 {
        let mut state = seed;
        move || {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((state >> 40) as f32 / (1u64 << 24) as f32) - shift
        }
    }

    /// Every kernel set this CPU can run, not only the one it would pick.
    fn every_kernel_set() -> Vec<Kernels> {
        [Some(portable::kernels()), avx512_kernels(), avx2_kernels()]
            .into_iter()
            .flatten()
            .collect()
    }

    #[test]
    fn kernels_match_reference_at_every_precision() {
        let mut next = values(12345, 0.5);
        let all = every_kernel_set();
        for dim in [1, 15, 16, 33, 100, 384] {
            let a: Vec<f32> = (0..dim).map(|_| next()).collect();
            let b: Vec<f32> = (0..dim).map(|_| next()).collect();
            for precision in [
                Precision::F32,
                Precision::F16,
                Precision::Int8,
                Precision::Int8F16,
            ] {
                let mut store = Vectors::new(dim, precision);
                let slot = store.push_zeroed();
                store.set(slot, &b);
                let mut q = a.clone();
                q.resize(store.padded_dim(), 0.0);
                let q = Query::new(q);
                for metric in [Metric::Cosine, Metric::InnerProduct, Metric::L2] {
                    let want = reference(metric, &a, &b);
                    let tol = match precision {
                        Precision::F32 => 1e-4,
                        Precision::F16 => 2e-3 * (dim as f64).sqrt(),
                        Precision::Int8 | Precision::Int8F16 => 5e-3 * (dim as f64).sqrt(),
                    };
                    for k in &all {
                        let mut d = Distance::new(metric, precision);
                        (d.kernel, d.kernel4) = k.pick(metric, precision);
                        let x = store.get(slot);
                        let int8 = matches!(precision, Precision::Int8 | Precision::Int8F16);
                        let params = if int8 {
                            store.walk_params(slot)
                        } else {
                            Grid::default()
                        };
                        let got = f64::from(if int8 {
                            d.eval_with(&q, x, params)
                        } else {
                            d.eval(&q, x)
                        });
                        assert!(
                            (got - want).abs() < tol,
                            "{precision:?} {metric:?} dim {dim}: {got} vs {want}"
                        );
                        // Four at once give the very floats of one at a time:
                        // searches measure a record either way, and a distance
                        // must not depend on which (Hnsw::distances promises
                        // the floats search reported).
                        let four = if int8 {
                            d.eval4_with(&q, [x; 4], [params; 4])
                        } else {
                            d.eval4(&q, [x; 4])
                        };
                        for got4 in four {
                            assert_eq!(
                                f64::from(got4),
                                got,
                                "eval4 {precision:?} {metric:?} dim {dim}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_query_made_of_codes_measures_as_its_decoded_floats() {
        // Linking measures from one stored record to others with the codes
        // as they are; the distances must be those of the decoded vector
        // (and the same at every kernel set, one at a time or four).
        let mut next = values(99, 0.3);
        let all = every_kernel_set();
        for dim in [1, 20, 100, 384] {
            let mut store = Vectors::new(dim, Precision::Int8);
            let (a, b) = (store.push_zeroed(), store.push_zeroed());
            store.set(a, &(0..dim).map(|_| next()).collect::<Vec<_>>());
            store.set(b, &(0..dim).map(|_| next()).collect::<Vec<_>>());
            let padded = store.padded_dim();
            let mut decoded = Vec::new();
            store.decode(a, &mut decoded);
            let floats = Query::new(decoded.clone());
            let mut codes = Query::new(Vec::new());
            codes.set_codes(&store.get(a)[..padded], store.walk_params(a), dim);
            let want_dot: f64 = {
                let mut xb = Vec::new();
                store.decode(b, &mut xb);
                decoded.iter().zip(&xb).map(|(x, y)| f64::from(x * y)).sum()
            };
            for metric in [Metric::Cosine, Metric::InnerProduct, Metric::L2] {
                for k in &all {
                    let mut d = Distance::new(metric, Precision::Int8);
                    (d.kernel, d.kernel4) = k.pick(metric, Precision::Int8);
                    let (x, g) = (store.get(b), store.walk_params(b));
                    let got = d.eval_with(&codes, x, g);
                    let old = d.eval_with(&floats, x, g);
                    // The floats go through a 16-bit grid the codes skip;
                    // under L2 a query of codes takes its vector's exact
                    // norm, not the decoded one's (the same for every x).
                    let old = if metric == Metric::L2 {
                        old + store.walk_params(a).norm2 - floats.norm2
                    } else {
                        old
                    };
                    let tol = 1e-4 * (1.0 + old.abs());
                    assert!(
                        (got - old).abs() < tol,
                        "{metric:?} dim {dim}: {got} vs {old}"
                    );
                    if metric != Metric::L2 {
                        let err = (f64::from(1.0 - got) - want_dot).abs();
                        assert!(err < 1e-5 * (1.0 + want_dot.abs()), "dot off by {err}");
                    }
                    assert_eq!(d.eval4_with(&codes, [x; 4], [g; 4]), [got; 4]);
                }
            }
        }
    }

    #[test]
    fn metric_names_round_trip() {
        for m in [Metric::Cosine, Metric::InnerProduct, Metric::L2] {
            assert_eq!(Metric::parse(m.name()).unwrap(), m);
            assert_eq!(Metric::from_code(m.code()), Some(m));
        }
        assert!(Metric::parse("dot").is_err());
    }
}
