//! Data the unit tests share (compiled for `cargo test` only).

/// Vectors around `clusters` fixed centres: real embeddings are clustered,
/// and uniform random data flatters a graph index more than it should. The
/// centres are fixed; `seed` draws the points around them, so queries come
/// from the same distribution as the data. Not normalised.
pub fn clustered(n: usize, dim: usize, clusters: usize, seed: u64) -> Vec<f32> {
    let rng = |seed: u64| {
        let mut s = seed.wrapping_mul(0x2545_F491_4F6C_DD1D) | 1;
        move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        }
    };
    let mut centre = rng(42);
    let centres: Vec<f32> = (0..clusters * dim).map(|_| centre() * 4.0).collect();
    let mut rnd = rng(seed);
    let mut out = Vec::with_capacity(n * dim);
    for i in 0..n {
        let c = &centres[(i % clusters) * dim..][..dim];
        out.extend(c.iter().map(|x| x + rnd()));
    }
    out
}

/// A small generator (xorshift), so the cases repeat; seed it with a nonzero value.
pub struct Rng(pub u64);

impl Rng {
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}
