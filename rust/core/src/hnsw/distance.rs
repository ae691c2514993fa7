//! Distance kernels. Vectors are stored padded to a multiple of [`LANES`]
//! floats and 64-byte aligned, so the kernels have no tail loop and their
//! loads never split a cache line. The best kernel for the running CPU is
//! chosen once, when an index is created or loaded.

use crate::error::{Error, Result};

/// Floats per storage block: one AVX-512 register, one cache line.
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

/// A distance over two padded slices of equal length (a multiple of [`LANES`]).
pub type DistanceFn = fn(&[f32], &[f32]) -> f32;

pub fn select(metric: Metric) -> DistanceFn {
    let dot: DistanceFn;
    let l2: DistanceFn;
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx512f") {
            dot = x86::dot_distance_avx512;
            l2 = x86::l2_avx512;
        } else if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            dot = x86::dot_distance_avx2;
            l2 = x86::l2_avx2;
        } else {
            dot = dot_distance_portable;
            l2 = l2_portable;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        dot = dot_distance_portable;
        l2 = l2_portable;
    }
    match metric {
        Metric::Cosine | Metric::InnerProduct => dot,
        Metric::L2 => l2,
    }
}

/// Portable kernels written so the compiler vectorises them: sixteen
/// independent accumulators, one per lane, no reduction inside the loop.
pub fn dot_distance_portable(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; LANES];
    for (ca, cb) in a.chunks_exact(LANES).zip(b.chunks_exact(LANES)) {
        for i in 0..LANES {
            acc[i] += ca[i] * cb[i];
        }
    }
    1.0 - acc.iter().sum::<f32>()
}

pub fn l2_portable(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; LANES];
    for (ca, cb) in a.chunks_exact(LANES).zip(b.chunks_exact(LANES)) {
        for i in 0..LANES {
            let d = ca[i] - cb[i];
            acc[i] += d * d;
        }
    }
    acc.iter().sum()
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::LANES;
    use std::arch::x86_64::*;

    // SAFETY (all kernels below): `select` hands these out only after
    // detecting the CPU features they enable; both slices have the same
    // length, a multiple of LANES, so every 16-float load is in bounds.

    pub fn dot_distance_avx512(a: &[f32], b: &[f32]) -> f32 {
        debug_assert!(a.len() == b.len() && a.len().is_multiple_of(LANES));
        unsafe { dot_avx512(a, b) }
    }

    pub fn l2_avx512(a: &[f32], b: &[f32]) -> f32 {
        debug_assert!(a.len() == b.len() && a.len().is_multiple_of(LANES));
        unsafe { l2_avx512_impl(a, b) }
    }

    pub fn dot_distance_avx2(a: &[f32], b: &[f32]) -> f32 {
        debug_assert!(a.len() == b.len() && a.len().is_multiple_of(LANES));
        unsafe { dot_avx2(a, b) }
    }

    pub fn l2_avx2(a: &[f32], b: &[f32]) -> f32 {
        debug_assert!(a.len() == b.len() && a.len().is_multiple_of(LANES));
        unsafe { l2_avx2_impl(a, b) }
    }

    #[target_feature(enable = "avx512f")]
    unsafe fn dot_avx512(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len();
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        // Two accumulators hide the FMA latency on 384-d vectors.
        let mut s0 = _mm512_setzero_ps();
        let mut s1 = _mm512_setzero_ps();
        let mut i = 0;
        while i + 2 * LANES <= n {
            s0 = _mm512_fmadd_ps(_mm512_loadu_ps(pa.add(i)), _mm512_loadu_ps(pb.add(i)), s0);
            s1 = _mm512_fmadd_ps(
                _mm512_loadu_ps(pa.add(i + LANES)),
                _mm512_loadu_ps(pb.add(i + LANES)),
                s1,
            );
            i += 2 * LANES;
        }
        if i < n {
            s0 = _mm512_fmadd_ps(_mm512_loadu_ps(pa.add(i)), _mm512_loadu_ps(pb.add(i)), s0);
        }
        1.0 - _mm512_reduce_add_ps(_mm512_add_ps(s0, s1))
    }

    #[target_feature(enable = "avx512f")]
    unsafe fn l2_avx512_impl(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len();
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        let mut s0 = _mm512_setzero_ps();
        let mut s1 = _mm512_setzero_ps();
        let mut i = 0;
        while i + 2 * LANES <= n {
            let d0 = _mm512_sub_ps(_mm512_loadu_ps(pa.add(i)), _mm512_loadu_ps(pb.add(i)));
            let d1 = _mm512_sub_ps(
                _mm512_loadu_ps(pa.add(i + LANES)),
                _mm512_loadu_ps(pb.add(i + LANES)),
            );
            s0 = _mm512_fmadd_ps(d0, d0, s0);
            s1 = _mm512_fmadd_ps(d1, d1, s1);
            i += 2 * LANES;
        }
        if i < n {
            let d0 = _mm512_sub_ps(_mm512_loadu_ps(pa.add(i)), _mm512_loadu_ps(pb.add(i)));
            s0 = _mm512_fmadd_ps(d0, d0, s0);
        }
        _mm512_reduce_add_ps(_mm512_add_ps(s0, s1))
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn hsum256(v: __m256) -> f32 {
        let lo = _mm256_castps256_ps128(v);
        let hi = _mm256_extractf128_ps(v, 1);
        let s = _mm_add_ps(lo, hi);
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 0x55));
        _mm_cvtss_f32(s)
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn dot_avx2(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len();
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        let mut s0 = _mm256_setzero_ps();
        let mut s1 = _mm256_setzero_ps();
        let mut i = 0;
        while i < n {
            s0 = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)), s0);
            s1 = _mm256_fmadd_ps(
                _mm256_loadu_ps(pa.add(i + 8)),
                _mm256_loadu_ps(pb.add(i + 8)),
                s1,
            );
            i += LANES;
        }
        1.0 - hsum256(_mm256_add_ps(s0, s1))
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn l2_avx2_impl(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len();
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        let mut s0 = _mm256_setzero_ps();
        let mut s1 = _mm256_setzero_ps();
        let mut i = 0;
        while i < n {
            let d0 = _mm256_sub_ps(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)));
            let d1 = _mm256_sub_ps(
                _mm256_loadu_ps(pa.add(i + 8)),
                _mm256_loadu_ps(pb.add(i + 8)),
            );
            s0 = _mm256_fmadd_ps(d0, d0, s0);
            s1 = _mm256_fmadd_ps(d1, d1, s1);
            i += LANES;
        }
        hsum256(_mm256_add_ps(s0, s1))
    }

    /// Hints the cache to fetch the first lines of a vector that is about to be read.
    #[inline(always)]
    pub fn prefetch(p: *const f32) {
        // SAFETY: prefetch never faults, whatever the address.
        unsafe { _mm_prefetch(p as *const i8, _MM_HINT_T0) };
    }
}

#[inline(always)]
pub fn prefetch(p: *const f32) {
    #[cfg(target_arch = "x86_64")]
    x86::prefetch(p);
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(metric: Metric, a: &[f32], b: &[f32]) -> f64 {
        match metric {
            Metric::L2 => a.iter().zip(b).map(|(x, y)| ((x - y) as f64).powi(2)).sum(),
            _ => {
                1.0 - a
                    .iter()
                    .zip(b)
                    .map(|(x, y)| *x as f64 * *y as f64)
                    .sum::<f64>()
            }
        }
    }

    #[test]
    fn kernels_match_reference() {
        let mut state = 12345u64;
        let mut next = || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 40) as f32 / (1u64 << 24) as f32) - 0.5
        };
        for blocks in 1..8 {
            let n = blocks * LANES;
            let a: Vec<f32> = (0..n).map(|_| next()).collect();
            let b: Vec<f32> = (0..n).map(|_| next()).collect();
            for metric in [Metric::Cosine, Metric::InnerProduct, Metric::L2] {
                let want = reference(metric, &a, &b);
                let kernels: Vec<DistanceFn> = match metric {
                    Metric::L2 => vec![select(metric), l2_portable],
                    _ => vec![select(metric), dot_distance_portable],
                };
                for f in kernels {
                    let got = f(&a, &b) as f64;
                    assert!((got - want).abs() < 1e-4, "{metric:?} {got} vs {want}");
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
