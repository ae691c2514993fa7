//! Vectors as the database keeps them (the Python package's `encoding.blobs`
//! writes them): `dim` little-endian float32s, or a tag byte, a power-of-two
//! float32 scale and `dim` half floats. Opening a store decodes every one of
//! them, so the decode lives here rather than in numpy's half-float casts.

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
    let (half_len, full_len) = (HALF_HEADER + 2 * dim, 4 * dim);
    let mut out = vec![0f32; stored.len() * dim];
    // Half floats widen a row at a time (SIMD where the CPU has it), from an
    // aligned copy: a blob's values follow its 5-byte header.
    let mut halves = vec![f16::ZERO; dim];
    for (b, row) in stored.zip(out.chunks_exact_mut(dim)) {
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
            for (h, c) in halves.iter_mut().zip(b[HALF_HEADER..].chunks_exact(2)) {
                *h = f16::from_le_bytes([c[0], c[1]]);
            }
            halves.convert_to_f32_slice(row);
            row.iter_mut().for_each(|x| *x *= scale);
        } else {
            return Err(damaged(format!(
                "a stored vector ({} bytes, dimension {dim}) is damaged",
                b.len()
            )));
        }
    }
    Ok(out)
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
