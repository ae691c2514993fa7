//! Vectors as the database keeps them, written and read here only (the Python
//! package calls `encode` and `decode` through `memlane._core`): `dim`
//! little-endian float32s, or a tag byte, a power-of-two float32 scale and `dim`
//! half floats. A half-float blob is `2 * dim + 5` bytes, an odd length, which no
//! float32 blob (`4 * dim`) has, so a store reads both.
//!
//! The scale is the power of two at or above the row's largest magnitude, and the
//! components are divided by it before they are rounded to half floats: no vector
//! the engine accepts overflows or underflows them, and since a power of two
//! divides exactly, a component decodes to its own half-float rounding, the value
//! the index holds, so a store rebuilt from its database scores as the one that
//! wrote it.

use half::f16;
use half::slice::HalfFloatSliceExt;

use crate::error::{Error, Result};

/// The tag byte of a half-float blob.
pub const HALF_TAG: u8 = 1;
/// Tag byte and scale before a half-float blob's values.
const HALF_HEADER: usize = 5;

/// Decodes `stored` vectors of `dim` components into one row-major buffer,
/// as a decode of each would: half floats widened exactly and multiplied by
/// their scale in f32. A blob of neither length, with another tag, or whose
/// scale is not a finite positive power of two is [`Error::DamagedVector`].
pub fn decode<'a>(stored: impl ExactSizeIterator<Item = &'a [u8]>, dim: usize) -> Result<Vec<f32>> {
    if dim == 0 {
        return Err(Error::invalid("vectors need at least one dimension"));
    }
    let mut out = vec![0f32; stored.len() * dim];
    for (b, row) in stored.zip(out.chunks_exact_mut(dim)) {
        decode_row(b, row)?;
    }
    Ok(out)
}

/// [`decode`] of one stored vector into `row` (its `dim` components).
pub fn decode_row(b: &[u8], row: &mut [f32]) -> Result<()> {
    let dim = row.len();
    let (half_len, full_len) = (HALF_HEADER + 2 * dim, 4 * dim);
    if b.len() == full_len {
        for (x, c) in row.iter_mut().zip(b.chunks_exact(4)) {
            *x = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        }
    } else if b.len() == half_len {
        if b[0] != HALF_TAG {
            return Err(damaged(format!(
                "a stored vector of {half_len} bytes is damaged"
            )));
        }
        let scale = f32::from_le_bytes([b[1], b[2], b[3], b[4]]);
        if !power_of_two(scale) {
            return Err(damaged(format!(
                "a stored vector's scale ({}) is damaged",
                f64::from(scale)
            )));
        }
        // Half floats widen a block at a time (SIMD where the CPU has it),
        // from an aligned copy: a blob's values follow its 5-byte header.
        let mut halves = [f16::ZERO; 64];
        for (out, bytes) in row
            .chunks_mut(halves.len())
            .zip(b[HALF_HEADER..].chunks(2 * halves.len()))
        {
            let block = &mut halves[..out.len()];
            for (h, c) in block.iter_mut().zip(bytes.chunks_exact(2)) {
                *h = f16::from_le_bytes([c[0], c[1]]);
            }
            block.convert_to_f32_slice(out);
        }
        row.iter_mut().for_each(|x| *x *= scale);
    } else {
        return Err(damaged(format!(
            "a stored vector ({} bytes, dimension {dim}) is damaged",
            b.len()
        )));
    }
    Ok(())
}

/// The bytes of one stored vector of `dim` components.
pub fn stored_len(dim: usize, half: bool) -> usize {
    if half {
        HALF_HEADER + 2 * dim
    } else {
        4 * dim
    }
}

/// Encodes `values`, rows of `dim` components, as the database keeps them, one
/// blob after another (`stored_len(dim, half)` bytes each): float32s, or with
/// `half` scaled half floats (an all-zero row, which no index takes, gets the
/// scale 1). A row with a non-finite value, or too large for a float32 scale,
/// is refused.
pub fn encode(values: &[f32], dim: usize, half: bool) -> Result<Vec<u8>> {
    if dim == 0 || !values.len().is_multiple_of(dim) {
        return Err(Error::invalid(format!(
            "{} values are no rows of dimension {dim}",
            values.len()
        )));
    }
    let mut out = Vec::with_capacity(values.len() / dim * stored_len(dim, half));
    let mut scaled = vec![0f32; dim];
    let mut halves = vec![f16::ZERO; dim];
    for (i, row) in values.chunks_exact(dim).enumerate() {
        if let Some(x) = row.iter().find(|x| !x.is_finite()) {
            return Err(Error::invalid(format!(
                "vector {i} has a non-finite value ({x}) and cannot be stored"
            )));
        }
        if !half {
            out.extend(row.iter().flat_map(|x| x.to_le_bytes()));
            continue;
        }
        let top = row.iter().fold(0f32, |m, x| m.max(x.abs()));
        let scale = power_at_or_above(top);
        if !scale.is_finite() {
            return Err(Error::invalid(format!(
                "vector {i} has a value ({top}) too large to store"
            )));
        }
        for (s, &x) in scaled.iter_mut().zip(row) {
            *s = x / scale;
        }
        halves.convert_from_f32_slice(&scaled);
        out.push(HALF_TAG);
        out.extend_from_slice(&scale.to_le_bytes());
        out.extend(halves.iter().flat_map(|h| h.to_le_bytes()));
    }
    Ok(out)
}

/// The least power of two at or above `x` (finite, >= 0); 1 for 0; infinity
/// beyond the largest float32 power of two.
fn power_at_or_above(x: f32) -> f32 {
    if x == 0.0 {
        return 1.0;
    }
    let bits = x.to_bits();
    let (exponent, mantissa) = (bits >> 23, bits & 0x7f_ffff);
    if exponent == 0 {
        // Subnormal: its value is the mantissa's, in units of the least one.
        return f32::from_bits(mantissa.next_power_of_two());
    }
    if mantissa == 0 {
        x
    } else {
        f32::from_bits((exponent + 1) << 23)
    }
}

fn damaged(msg: String) -> Error {
    Error::DamagedVector(msg)
}

/// A finite, positive power of two (subnormal ones included).
fn power_of_two(x: f32) -> bool {
    let bits = x.to_bits();
    let (exponent, mantissa) = ((bits >> 23) & 0xff, bits & 0x7f_ffff);
    x > 0.0
        && exponent != 0xff
        && if exponent == 0 {
            mantissa.count_ones() == 1
        } else {
            mantissa == 0
        }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn half_blob(scale: f32, values: &[f32]) -> Vec<u8> {
        let mut b = vec![HALF_TAG];
        b.extend_from_slice(&scale.to_le_bytes());
        for &v in values {
            b.extend_from_slice(&f16::from_f32(v / scale).to_le_bytes());
        }
        b
    }

    #[test]
    fn decodes_half_and_full_blobs_mixed() {
        let full: Vec<u8> = [0.5f32, -0.25, 1.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let half = half_blob(0.5, &[0.25, -0.125, 0.5]);
        let got = decode([half.as_slice(), full.as_slice()].into_iter(), 3).unwrap();
        assert_eq!(got, vec![0.25, -0.125, 0.5, 0.5, -0.25, 1.0]);
    }

    #[test]
    fn refuses_damaged_blobs() {
        let good = half_blob(0.5, &[0.25, 0.5, 0.125]);
        let mut tag = good.clone();
        tag[0] = 2;
        let mut scale = good.clone();
        scale[1..5].copy_from_slice(&0.3f32.to_le_bytes());
        let short = &good[..good.len() - 1];
        for bad in [tag.as_slice(), scale.as_slice(), short] {
            let err = decode([good.as_slice(), bad].into_iter(), 3).unwrap_err();
            assert!(matches!(err, Error::DamagedVector(_)), "{err}");
        }
    }

    #[test]
    fn encodes_what_decode_reads() {
        let rows = [
            0.3f32,
            -1.5,
            0.0,
            0.0,
            0.0,
            0.0,
            2.0f32.powi(-140),
            1e-3,
            0.25,
        ];
        let full = encode(&rows, 3, false).unwrap();
        assert_eq!(full.len(), 3 * stored_len(3, false));
        let back = decode(full.chunks(stored_len(3, false)), 3).unwrap();
        assert_eq!(back, rows);
        let half = encode(&rows, 3, true).unwrap();
        assert_eq!(half.len(), 3 * stored_len(3, true));
        assert_eq!(&half[..5], &[HALF_TAG, 0, 0, 0, 0x40]); // scale 2.0
        assert_eq!(&half[11..16], &[HALF_TAG, 0, 0, 0x80, 0x3f]); // an all-zero row: 1.0
        let back = decode(half.chunks(stored_len(3, true)), 3).unwrap();
        for (b, r) in back.iter().zip(rows) {
            assert!((b - r).abs() <= 1e-3, "{b} {r}");
        }
        assert_eq!(half[5..11], half_blob(2.0, &rows[..3])[5..]);
    }

    #[test]
    fn refuses_what_cannot_be_stored() {
        for bad in [f32::NAN, f32::INFINITY] {
            assert!(encode(&[0.5, bad], 2, true).is_err());
            assert!(encode(&[0.5, bad], 2, false).is_err());
        }
        assert!(encode(&[f32::MAX, 0.0], 2, true).is_err());
        assert!(encode(&[0.5, 0.5, 0.5], 2, true).is_err());
    }

    #[test]
    fn least_powers_of_two_above() {
        let cases = [
            (0.0f32, 1.0f32),
            (1.0, 1.0),
            (1.000_000_1, 2.0),
            (0.75, 1.0),
            (0.5, 0.5),
            (300.0, 512.0),
            (2.0f32.powi(-140), 2.0f32.powi(-140)),
            (3.0 * 2.0f32.powi(-140), 2.0f32.powi(-138)),
            (f32::MIN_POSITIVE * 0.75, f32::MIN_POSITIVE),
            (f32::MAX, f32::INFINITY),
        ];
        for (x, want) in cases {
            assert_eq!(power_at_or_above(x), want, "{x}");
        }
    }

    #[test]
    fn powers_of_two() {
        for x in [1.0f32, 0.5, 2.0f32.powi(-130), 2.0f32.powi(100)] {
            assert!(power_of_two(x), "{x}");
        }
        for x in [
            0.0f32,
            -0.5,
            0.3,
            3.0,
            f32::INFINITY,
            f32::NAN,
            2.0f32.powi(-130) * 3.0,
        ] {
            assert!(!power_of_two(x), "{x}");
        }
    }
}
