//! The dot product of two float vectors: the cosine of unit vectors, which
//! the engine's exact scores and MMR's similarities take.

/// Dot product with eight accumulators, which the compiler vectorises.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    acc.iter().sum::<f32>() + tail
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_chunks_and_the_tail_count() {
        assert!((dot(&[1.0; 19], &[2.0; 19]) - 38.0).abs() < 1e-6);
    }
}
