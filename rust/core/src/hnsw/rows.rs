//! Checking the rows of vectors a caller hands in (shape, finite values, a
//! norm the metric can use) and scaling them to unit length under cosine.

use crate::error::{Error, Result};

/// The largest norm a vector may have when it is stored as given (the `ip`
/// and `l2` metrics): 2^62, so that a squared distance between two such
/// vectors, at most (2 * 2^62)^2 = 2^126, stays finite in f32.
pub const MAX_RAW_NORM: f64 = 4_611_686_018_427_387_904.0;

/// Checks row-major vectors of `dim` floats: a whole number of rows, every
/// value finite and a norm the metric can use. When `normalise` is set the
/// norm must be a positive normal f32 (not zero, not so small that its
/// reciprocal overflows, not so large that it does) and the row is returned
/// scaled to unit length; otherwise the norm must be at most [`MAX_RAW_NORM`].
/// Returns a copy.
pub fn check_rows(data: &[f32], dim: usize, normalise: bool, what: &str) -> Result<Vec<f32>> {
    let scales = row_scales(data, dim, normalise, what)?;
    let mut out = data.to_vec();
    if normalise {
        for (v, &inv) in out.chunks_exact_mut(dim).zip(&scales) {
            v.iter_mut().for_each(|x| *x *= inv);
        }
    }
    Ok(out)
}

/// `|v|` in f64, over eight partial sums so the loop runs as SIMD (rows of
/// every write and every replayed batch pass through here).
fn norm_f64(v: &[f32]) -> f64 {
    let mut acc = [0.0f64; 8];
    let mut chunks = v.chunks_exact(8);
    for c in &mut chunks {
        for (a, &x) in acc.iter_mut().zip(c) {
            *a += f64::from(x) * f64::from(x);
        }
    }
    let tail: f64 = chunks
        .remainder()
        .iter()
        .map(|&x| f64::from(x) * f64::from(x))
        .sum();
    (acc.iter().sum::<f64>() + tail).sqrt()
}

/// The checks of [`check_rows`], without the copy: the factor each row is
/// to be multiplied by (the reciprocal of its norm when `normalise` is set,
/// else 1), so a caller can scale the rows where it stores them.
pub fn row_scales(data: &[f32], dim: usize, normalise: bool, what: &str) -> Result<Vec<f32>> {
    if dim == 0 || !data.len().is_multiple_of(dim) {
        return Err(Error::DimensionMismatch {
            expected: dim,
            got: data.len(),
        });
    }
    data.chunks_exact(dim)
        .enumerate()
        .map(|(row, v)| row_scale(v, row, normalise, what))
        .collect()
}

/// [`row_scales`] of one row, `row` naming it in an error.
pub fn row_scale(v: &[f32], row: usize, normalise: bool, what: &str) -> Result<f32> {
    let norm = norm_f64(v);
    if normalise && norm.is_finite() {
        // The common case, in one pass: a finite norm means finite values,
        // and a value scaled by a normal 1/norm is at most about 1.
        let norm32 = norm as f32;
        if norm32.is_normal() && (1.0 / norm32).is_normal() {
            return Ok((1.0 / norm) as f32);
        }
    }
    if let Some(col) = v.iter().position(|x| !x.is_finite()) {
        return Err(Error::invalid(format!(
            "{what} {row} has a non-finite value ({}) at position {col}",
            v[col]
        )));
    }
    if !normalise {
        if norm > MAX_RAW_NORM {
            return Err(Error::invalid(format!(
                "{what} {row} has norm {norm:e}, above {MAX_RAW_NORM:e}: its distances would overflow"
            )));
        }
        return Ok(1.0);
    }
    if norm == 0.0 {
        return Err(Error::invalid(format!(
            "{what} {row} is all zeros, which has no direction under the cosine metric"
        )));
    }
    // The norm as the f32 kernels see it: zero or subnormal when the values
    // are tiny (1e-45 everywhere), infinite when they are huge (1e38).
    let norm32 = norm as f32;
    let inv = 1.0 / norm32;
    if !norm32.is_normal() || !inv.is_normal() {
        return Err(Error::invalid(format!(
            "{what} {row} has norm {norm:e}, outside the range of positive normal f32 \
             ({:e} to {:e}), so it cannot be scaled to unit length",
            f32::MIN_POSITIVE,
            f32::MAX
        )));
    }
    let inv = (1.0 / norm) as f32;
    if let Some(col) = v.iter().position(|x| !(x * inv).is_finite()) {
        return Err(Error::invalid(format!(
            "{what} {row} has a non-finite value at position {col} once scaled to unit length"
        )));
    }
    Ok(inv)
}
