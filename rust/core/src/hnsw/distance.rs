//! Distances between a query (f32, padded to a multiple of [`LANES`]) and a
//! stored record at any [`Precision`]. The best kernels for the running CPU
//! are chosen once, when an index is created or loaded.

use super::storage::{int8_params, Precision};
use crate::error::{Error, Result};

/// Floats per kernel step: one AVX-512 register.
pub const LANES: usize = 16;

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

/// A query ready for the kernels: padded, with the sums the int8 formula needs.
pub struct Query {
    pub v: Vec<f32>,
    sum: f32,
    norm2: f32,
}

impl Query {
    /// `v` must already be `padded_dim` long (zeros past `dim`).
    pub fn new(v: Vec<f32>) -> Self {
        let mut q = Query {
            v,
            sum: 0.0,
            norm2: 0.0,
        };
        q.refresh();
        q
    }

    /// `v` zero-padded to `padded` floats.
    pub fn padded(v: &[f32], padded: usize) -> Self {
        let mut p = Vec::with_capacity(padded);
        p.extend_from_slice(v);
        p.resize(padded, 0.0);
        Query::new(p)
    }

    /// Recomputes the sums after `v` was rewritten in place.
    pub fn refresh(&mut self) {
        self.sum = self.v.iter().sum();
        self.norm2 = self.v.iter().map(|x| x * x).sum();
    }
}

/// A raw kernel over a padded query and a record: Σ q·x or Σ (q − x)².
type Kernel = fn(&[f32], &[u8]) -> f32;

#[derive(Clone, Copy)]
pub struct Distance {
    metric: Metric,
    precision: Precision,
    kernel: Kernel,
}

impl Distance {
    pub fn new(metric: Metric, precision: Precision) -> Self {
        let k = kernels();
        let kernel = match (precision, metric) {
            (Precision::F32, Metric::L2) => k.l2_f32,
            (Precision::F32, _) => k.dot_f32,
            (Precision::F16, Metric::L2) => k.l2_f16,
            (Precision::F16, _) => k.dot_f16,
            // int8 L2 goes through the dot product: |q|² + |x|² − 2 q·x.
            (Precision::Int8, _) => k.dot_u8,
        };
        Distance {
            metric,
            precision,
            kernel,
        }
    }

    #[inline(always)]
    pub fn eval(&self, q: &Query, x: &[u8]) -> f32 {
        let raw = (self.kernel)(&q.v, x);
        match (self.precision, self.metric) {
            (Precision::Int8, metric) => {
                let (lo, step, norm2) = int8_params(x, q.v.len());
                let dot = lo * q.sum + step * raw;
                match metric {
                    Metric::L2 => (q.norm2 + norm2 - 2.0 * dot).max(0.0),
                    _ => 1.0 - dot,
                }
            }
            (_, Metric::L2) => raw,
            _ => 1.0 - raw,
        }
    }
}

struct Kernels {
    dot_f32: Kernel,
    l2_f32: Kernel,
    dot_f16: Kernel,
    l2_f16: Kernel,
    dot_u8: Kernel,
}

fn kernels() -> Kernels {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx512f") {
            return Kernels {
                dot_f32: x86::dot_f32_avx512,
                l2_f32: x86::l2_f32_avx512,
                dot_f16: x86::dot_f16_avx512,
                l2_f16: x86::l2_f16_avx512,
                dot_u8: x86::dot_u8_avx512,
            };
        }
        if std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("fma")
            && std::is_x86_feature_detected!("f16c")
        {
            return Kernels {
                dot_f32: x86::dot_f32_avx2,
                l2_f32: x86::l2_f32_avx2,
                dot_f16: x86::dot_f16_avx2,
                l2_f16: x86::l2_f16_avx2,
                dot_u8: x86::dot_u8_avx2,
            };
        }
    }
    Kernels {
        dot_f32: portable::dot_f32,
        l2_f32: portable::l2_f32,
        dot_f16: portable::dot_f16,
        l2_f16: portable::l2_f16,
        dot_u8: portable::dot_u8,
    }
}

/// Portable kernels written so the compiler vectorises them: one independent
/// accumulator per lane, no reduction inside the loop.
mod portable {
    use super::LANES;

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

    pub fn dot_f32(q: &[f32], x: &[u8]) -> f32 {
        fold(q, x, f32_at, |a, b| a * b)
    }

    pub fn l2_f32(q: &[f32], x: &[u8]) -> f32 {
        fold(q, x, f32_at, |a, b| (a - b) * (a - b))
    }

    pub fn dot_f16(q: &[f32], x: &[u8]) -> f32 {
        fold(q, x, f16_at, |a, b| a * b)
    }

    pub fn l2_f16(q: &[f32], x: &[u8]) -> f32 {
        fold(q, x, f16_at, |a, b| (a - b) * (a - b))
    }

    pub fn dot_u8(q: &[f32], x: &[u8]) -> f32 {
        fold(q, x, |x, i| f32::from(x[i]), |a, b| a * b)
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::LANES;
    use std::arch::x86_64::*;

    // SAFETY (all kernels below): `kernels()` hands these out only after
    // detecting the CPU features they enable. `q.len()` is a multiple of
    // LANES and every record holds at least `q.len()` elements of its type
    // (storage.rs sizes records so), which the asserts check before any load.

    macro_rules! safe_kernel {
        ($name:ident, $imp:ident, $width:expr) => {
            pub fn $name(q: &[f32], x: &[u8]) -> f32 {
                assert!(q.len() % LANES == 0 && x.len() >= q.len() * $width);
                unsafe { $imp(q.as_ptr(), x.as_ptr(), q.len()) }
            }
        };
    }

    safe_kernel!(dot_f32_avx512, dot_f32_512, 4);
    safe_kernel!(l2_f32_avx512, l2_f32_512, 4);
    safe_kernel!(dot_f16_avx512, dot_f16_512, 2);
    safe_kernel!(l2_f16_avx512, l2_f16_512, 2);
    safe_kernel!(dot_u8_avx512, dot_u8_512, 1);
    safe_kernel!(dot_f32_avx2, dot_f32_256, 4);
    safe_kernel!(l2_f32_avx2, l2_f32_256, 4);
    safe_kernel!(dot_f16_avx2, dot_f16_256, 2);
    safe_kernel!(l2_f16_avx2, l2_f16_256, 2);
    safe_kernel!(dot_u8_avx2, dot_u8_256, 1);

    // Each AVX-512 kernel loads one 16-lane block of the record per step and
    // keeps two accumulators to hide the FMA latency.
    macro_rules! kernel512 {
        ($name:ident, $load:expr, $dot:expr) => {
            #[target_feature(enable = "avx512f")]
            unsafe fn $name(q: *const f32, x: *const u8, n: usize) -> f32 {
                #[target_feature(enable = "avx512f")]
                #[inline]
                unsafe fn step(acc: __m512, q: *const f32, x: *const u8, i: usize) -> __m512 {
                    let a = _mm512_loadu_ps(q.add(i));
                    let b: __m512 = $load(x, i);
                    if $dot {
                        _mm512_fmadd_ps(a, b, acc)
                    } else {
                        let d = _mm512_sub_ps(a, b);
                        _mm512_fmadd_ps(d, d, acc)
                    }
                }
                let mut s0 = _mm512_setzero_ps();
                let mut s1 = _mm512_setzero_ps();
                let mut i = 0;
                while i + 2 * LANES <= n {
                    s0 = step(s0, q, x, i);
                    s1 = step(s1, q, x, i + LANES);
                    i += 2 * LANES;
                }
                if i < n {
                    s0 = step(s0, q, x, i);
                }
                _mm512_reduce_add_ps(_mm512_add_ps(s0, s1))
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

    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn load_u8_512(x: *const u8, i: usize) -> __m512 {
        _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(x.add(i).cast())))
    }

    kernel512!(dot_f32_512, load_f32_512, true);
    kernel512!(l2_f32_512, load_f32_512, false);
    kernel512!(dot_f16_512, load_f16_512, true);
    kernel512!(l2_f16_512, load_f16_512, false);
    kernel512!(dot_u8_512, load_u8_512, true);

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

    // AVX2 kernels process a 16-lane block as two 8-lane halves.
    macro_rules! kernel256 {
        ($name:ident, $load:expr, $dot:expr) => {
            #[target_feature(enable = "avx2,fma,f16c")]
            unsafe fn $name(q: *const f32, x: *const u8, n: usize) -> f32 {
                let mut s0 = _mm256_setzero_ps();
                let mut s1 = _mm256_setzero_ps();
                let mut i = 0;
                while i < n {
                    let (a0, a1) = (_mm256_loadu_ps(q.add(i)), _mm256_loadu_ps(q.add(i + 8)));
                    let (b0, b1): (__m256, __m256) = ($load(x, i), $load(x, i + 8));
                    if $dot {
                        s0 = _mm256_fmadd_ps(a0, b0, s0);
                        s1 = _mm256_fmadd_ps(a1, b1, s1);
                    } else {
                        let (d0, d1) = (_mm256_sub_ps(a0, b0), _mm256_sub_ps(a1, b1));
                        s0 = _mm256_fmadd_ps(d0, d0, s0);
                        s1 = _mm256_fmadd_ps(d1, d1, s1);
                    }
                    i += LANES;
                }
                hsum256(_mm256_add_ps(s0, s1))
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

    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn load_u8_256(x: *const u8, i: usize) -> __m256 {
        _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(x.add(i).cast())))
    }

    kernel256!(dot_f32_256, load_f32_256, true);
    kernel256!(l2_f32_256, load_f32_256, false);
    kernel256!(dot_f16_256, load_f16_256, true);
    kernel256!(l2_f16_256, load_f16_256, false);
    kernel256!(dot_u8_256, load_u8_256, true);

    /// Hints the cache to fetch a line that is about to be read.
    #[inline(always)]
    pub fn prefetch(p: *const u8) {
        // SAFETY: prefetch never faults, whatever the address.
        unsafe { _mm_prefetch(p.cast::<i8>(), _MM_HINT_T0) };
    }
}

#[inline(always)]
pub fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    x86::prefetch(p);
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

#[cfg(test)]
mod tests {
    use super::super::storage::Vectors;
    use super::*;

    fn reference(metric: Metric, a: &[f32], b: &[f32]) -> f64 {
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

    #[test]
    fn kernels_match_reference_at_every_precision() {
        let mut state = 12345u64;
        let mut next = || {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((state >> 40) as f32 / (1u64 << 24) as f32) - 0.5
        };
        let all = [portable_kernels(), kernels()];
        for dim in [1, 15, 16, 33, 100, 384] {
            let a: Vec<f32> = (0..dim).map(|_| next()).collect();
            let b: Vec<f32> = (0..dim).map(|_| next()).collect();
            for precision in [Precision::F32, Precision::F16, Precision::Int8] {
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
                        Precision::Int8 => 5e-3 * (dim as f64).sqrt(),
                    };
                    for k in &all {
                        let mut d = Distance::new(metric, precision);
                        d.kernel = match (precision, metric) {
                            (Precision::F32, Metric::L2) => k.l2_f32,
                            (Precision::F32, _) => k.dot_f32,
                            (Precision::F16, Metric::L2) => k.l2_f16,
                            (Precision::F16, _) => k.dot_f16,
                            (Precision::Int8, _) => k.dot_u8,
                        };
                        let got = f64::from(d.eval(&q, store.get(slot)));
                        assert!(
                            (got - want).abs() < tol,
                            "{precision:?} {metric:?} dim {dim}: {got} vs {want}"
                        );
                    }
                }
            }
        }
    }

    fn portable_kernels() -> Kernels {
        Kernels {
            dot_f32: portable::dot_f32,
            l2_f32: portable::l2_f32,
            dot_f16: portable::dot_f16,
            l2_f16: portable::l2_f16,
            dot_u8: portable::dot_u8,
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
