//! Vectors added but not yet linked into the HNSW graph.
//!
//! Linking is the slow part of an add (a graph search per vector), so a bulk
//! add parks its vectors here and returns; a background caller links them
//! in batches with [`Engine::index_pending`](super::Engine::index_pending).
//! Until then searches scan this buffer, so a parked vector is found as surely
//! as a linked one.
//!
//! A scan of many parked vectors reads their sign sketches first (one bit per
//! component, a twelfth of the floats' bytes at 384 dimensions), scored
//! against the query at 4-bit precision; the best `16 k` (at least 512) are
//! then scored exactly, so the similarities reported are exact and only the
//! choice of candidates is approximate. On 100,000 perturbed WordNet gloss
//! vectors the exact top 50 is found 99.96% of the time, the top 10 always.

use std::collections::BinaryHeap;

use crate::dot::dot;
use crate::error::Result;
use crate::idmap::IdMap;
use crate::worst::Worst;

/// Scans of at most this many parked vectors are exact throughout.
const SKETCH_MIN: usize = 2048;
/// Below this dimension a sign sketch says too little; scans are exact.
const SKETCH_MIN_DIM: usize = 64;
/// Candidates scored exactly per hit wanted, and at least.
const OVERSAMPLE: usize = 16;
const SKETCH_POOL_MIN: usize = 512;

pub struct Pending {
    dim: usize,
    /// The buffers' rows from `start` on are parked, oldest first; the rows
    /// before it were linked (see [`Pending::drop_head`]).
    ids: Vec<u64>,
    /// Unit vectors, row-major.
    data: Vec<f32>,
    /// Row of each parked id.
    pos: IdMap<usize>,
    /// Sign bits of each vector (bit `j % 64` of word `j / 64` is set when
    /// component `j` is positive), `words` per vector, row-major.
    signs: Vec<u64>,
    words: usize,
    start: usize,
}

/// Checks `rows` vectors of `dim` floats and returns them at unit length.
pub fn normalised(data: &[f32], dim: usize, what: &str) -> Result<Vec<f32>> {
    crate::hnsw::check_rows(data, dim, true, what)
}

/// Appends the sign sketch of `v` to `out` (`words` words).
fn push_signs(v: &[f32], words: usize, out: &mut Vec<u64>) {
    // A word at a time, without branches, so the compiler makes it SIMD: every
    // write and every replayed batch passes each vector through here.
    let start = out.len();
    out.extend(v.chunks(64).map(|chunk| {
        chunk
            .iter()
            .enumerate()
            .fold(0u64, |w, (b, &x)| w | (u64::from(x > 0.0) << b))
    }));
    out.resize(start + words, 0);
}

impl Pending {
    pub fn new(dim: usize) -> Self {
        Pending {
            dim,
            ids: Vec::new(),
            data: Vec::new(),
            pos: IdMap::default(),
            signs: Vec::new(),
            words: dim.div_ceil(64),
            start: 0,
        }
    }

    pub fn from_parts(dim: usize, ids: Vec<u64>, data: Vec<f32>) -> Option<Self> {
        if data.len() != ids.len() * dim {
            return None;
        }
        let pos: IdMap<usize> = ids.iter().enumerate().map(|(i, &id)| (id, i)).collect();
        let words = dim.div_ceil(64);
        let mut signs = Vec::with_capacity(ids.len() * words);
        // A store without vectors has dim 0 and nothing parked.
        for v in data.chunks(dim.max(1)) {
            push_signs(v, words, &mut signs);
        }
        (pos.len() == ids.len()).then_some(Pending {
            dim,
            ids,
            data,
            pos,
            signs,
            words,
            start: 0,
        })
    }

    pub fn len(&self) -> usize {
        self.ids.len() - self.start
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The parked ids, oldest first.
    pub fn ids(&self) -> &[u64] {
        &self.ids[self.start..]
    }

    /// The parked vectors, in the order of [`Pending::ids`].
    pub fn data(&self) -> &[f32] {
        &self.data[self.start * self.dim..]
    }

    pub fn contains(&self, id: u64) -> bool {
        self.pos.contains_key(&id)
    }

    pub fn get(&self, id: u64) -> Option<&[f32]> {
        let i = *self.pos.get(&id)?;
        Some(&self.data[i * self.dim..(i + 1) * self.dim])
    }

    /// The sign sketches of `rows` (row-major, `dim` floats each), as
    /// [`put_sketched`](Self::put_sketched) takes them: computed apart, so a
    /// caller can make them without holding the engine.
    pub fn sketches(rows: &[f32], dim: usize) -> Vec<u64> {
        let words = dim.div_ceil(64);
        let mut out = Vec::with_capacity((rows.len() / dim.max(1)) * words);
        for v in rows.chunks_exact(dim.max(1)) {
            push_signs(v, words, &mut out);
        }
        out
    }

    /// Parks a unit vector under `id`, replacing any parked one.
    #[cfg(test)]
    pub fn put(&mut self, id: u64, v: &[f32]) {
        let mut sketch = Vec::with_capacity(self.words);
        push_signs(v, self.words, &mut sketch);
        self.put_sketched(id, v, &sketch);
    }

    /// [`put`](Self::put) with the vector's sketch made already ([`Self::sketches`]).
    pub fn put_sketched(&mut self, id: u64, v: &[f32], sketch: &[u64]) {
        let words = self.words;
        debug_assert_eq!(sketch.len(), words);
        match self.pos.get(&id) {
            Some(&i) => {
                self.data[i * self.dim..(i + 1) * self.dim].copy_from_slice(v);
                self.signs[i * words..(i + 1) * words].copy_from_slice(sketch);
            }
            None => {
                self.pos.insert(id, self.ids.len());
                self.ids.push(id);
                self.data.extend_from_slice(v);
                self.signs.extend_from_slice(sketch);
            }
        }
    }

    pub fn remove(&mut self, id: u64) -> bool {
        let Some(i) = self.pos.remove(&id) else {
            return false;
        };
        let last = self.ids.len() - 1;
        if i != last {
            self.ids.swap(i, last);
            let (head, tail) = self.data.split_at_mut(last * self.dim);
            head[i * self.dim..(i + 1) * self.dim].copy_from_slice(tail);
            let w = self.words;
            let (head, tail) = self.signs.split_at_mut(last * w);
            head[i * w..(i + 1) * w].copy_from_slice(tail);
            self.pos.insert(self.ids[i], i);
        }
        self.ids.pop();
        self.data.truncate(last * self.dim);
        self.signs.truncate(last * self.words);
        if self.is_empty() {
            self.compact();
        }
        true
    }

    /// The `n` oldest parked entries (ids and vectors), to be linked.
    ///
    /// Oldest first, so the graph grows in the order the store did, as a
    /// single add's link does. During a load of 100,000 WordNet gloss
    /// vectors (`benches/bench_scale.py`, five interleaved pairs on 2 cores)
    /// that linked 11,800-12,600 memories/s, newest batch first 10,500-12,600;
    /// linking alone, after the load, was as fast either way.
    pub fn head(&self, n: usize) -> (&[u64], &[f32]) {
        let end = self.start + n.min(self.len());
        (
            &self.ids[self.start..end],
            &self.data[self.start * self.dim..end * self.dim],
        )
    }

    /// Forgets the `n` oldest entries once they are linked. Their rows stay
    /// in the buffers until they are three times as many as the rows still
    /// parked (see [`Pending::compact`]).
    pub fn drop_head(&mut self, n: usize) {
        let end = self.start + n.min(self.len());
        for id in &self.ids[self.start..end] {
            self.pos.remove(id);
        }
        self.start = end;
        if self.start >= 3 * self.len() {
            self.compact();
        }
    }

    /// Moves the parked rows into buffers of twice their size, leaving the
    /// linked ones behind. A bulk load parks hundreds of megabytes that
    /// linking then drains, and the process must not keep the high-water
    /// mark; each row is moved at most once per three dropped, and the move is
    /// the same size as the old shrink to a quarter was.
    fn compact(&mut self) {
        fn moved<T: Copy>(v: &mut Vec<T>, from: usize, room: usize) {
            let mut out = Vec::with_capacity(room);
            out.extend_from_slice(&v[from..]);
            *v = out;
        }
        let start = std::mem::take(&mut self.start);
        let parked = self.ids.len() - start;
        moved(&mut self.ids, start, 2 * parked);
        moved(&mut self.data, start * self.dim, 2 * parked * self.dim);
        moved(&mut self.signs, start * self.words, 2 * parked * self.words);
        if start > 0 {
            for (i, id) in self.ids.iter().enumerate() {
                self.pos.insert(*id, i);
            }
        }
        self.pos.shrink_to(2 * parked);
    }

    /// The `k` parked vectors most similar to the unit query `q` among those
    /// `accept` admits, as (id, cosine similarity), best first (ties by id).
    /// The similarities are exact; when many vectors are parked, the
    /// candidates scored come from the sign sketches (see the module note).
    pub fn scan(&self, q: &[f32], k: usize, accept: impl Fn(u64) -> bool) -> Vec<(u64, f32)> {
        let n = self.len();
        let keep = k.saturating_mul(OVERSAMPLE).max(SKETCH_POOL_MIN);
        let mut out: Vec<(u64, f32)> = if n <= SKETCH_MIN.max(keep) || self.dim < SKETCH_MIN_DIM {
            self.ids()
                .iter()
                .zip(self.data().chunks_exact(self.dim))
                .filter(|(id, _)| accept(**id))
                .map(|(&id, v)| (id, dot(q, v)))
                .collect()
        } else {
            self.sketch_candidates(q, keep, accept)
                .into_iter()
                .map(|i| (self.ids[i], dot(q, self.row(i))))
                .collect()
        };
        out.sort_unstable_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        out.truncate(k);
        out
    }

    fn row(&self, i: usize) -> &[f32] {
        &self.data[i * self.dim..(i + 1) * self.dim]
    }

    /// Rows of the `keep` admitted vectors whose sketches score best
    /// against `q`. `accept` is asked only about vectors that would enter the
    /// running best, so a filter that admits most of them costs little.
    fn sketch_candidates(
        &self,
        q: &[f32],
        keep: usize,
        accept: impl Fn(u64) -> bool,
    ) -> Vec<usize> {
        let planes = Planes::new(q, self.words);
        let mut scores = vec![0f32; self.len()];
        planes.scores(&self.signs[self.start * self.words..], &mut scores);
        let mut best: BinaryHeap<Worst<usize>> = BinaryHeap::with_capacity(keep + 1);
        for (i, &s) in (self.start..).zip(&scores) {
            if best.len() >= keep && best.peek().is_some_and(|w| s <= w.0) {
                continue;
            }
            if !accept(self.ids[i]) {
                continue;
            }
            best.push(Worst(s, i));
            if best.len() > keep {
                best.pop();
            }
        }
        best.into_iter().map(|w| w.1).collect()
    }
}

/// The query on a 4-bit grid (`q_j ≈ lo + step · u_j`), as four bit planes
/// laid out like the sketches: the sum of `q_j` over the set bits of a
/// sketch `b` is then `lo · |b| + step · Σ_p 2^p · |b & plane_p|`, a few
/// popcounts per word. Ranking by that sum ranks by `q · sign(x)`.
struct Planes {
    lo: f32,
    step: f32,
    words: usize,
    /// Plane-major: `bits[p * words + w]`.
    bits: Vec<u64>,
}

impl Planes {
    fn new(q: &[f32], words: usize) -> Self {
        let lo = q.iter().copied().fold(f32::INFINITY, f32::min);
        let hi = q.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let step = if hi > lo { (hi - lo) / 15.0 } else { 0.0 };
        let mut bits = vec![0u64; 4 * words];
        if step > 0.0 {
            for (j, &x) in q.iter().enumerate() {
                let u = ((x - lo) / step).round().clamp(0.0, 15.0) as u32;
                for (p, plane) in bits.chunks_exact_mut(words).enumerate() {
                    if u >> p & 1 == 1 {
                        plane[j / 64] |= 1 << (j % 64);
                    }
                }
            }
        }
        Planes {
            lo,
            step,
            words,
            bits,
        }
    }

    /// The sketch score of each vector of `signs` (`words` per vector).
    fn scores(&self, signs: &[u64], out: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        {
            if std::is_x86_feature_detected!("avx512f")
                && std::is_x86_feature_detected!("avx512vpopcntdq")
            {
                // SAFETY: the features were just detected.
                unsafe { x86::scores_512(self, signs, out) };
                return;
            }
            if std::is_x86_feature_detected!("popcnt") {
                // SAFETY: the feature was just detected.
                unsafe { x86::scores_popcnt(self, signs, out) };
                return;
            }
        }
        self.scores_portable(signs, out);
    }

    #[inline(always)]
    fn scores_portable(&self, signs: &[u64], out: &mut [f32]) {
        let w = self.words;
        let (p0, rest) = self.bits.split_at(w);
        let (p1, rest) = rest.split_at(w);
        let (p2, p3) = rest.split_at(w);
        for (code, o) in signs.chunks_exact(w).zip(out.iter_mut()) {
            let (mut ones, mut weighted) = (0u32, 0u32);
            for j in 0..w {
                let b = code[j];
                ones += b.count_ones();
                weighted += (b & p0[j]).count_ones()
                    + 2 * (b & p1[j]).count_ones()
                    + 4 * (b & p2[j]).count_ones()
                    + 8 * (b & p3[j]).count_ones();
            }
            *o = self.lo * ones as f32 + self.step * weighted as f32;
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::Planes;

    /// SAFETY: needs POPCNT.
    #[target_feature(enable = "popcnt")]
    pub(super) unsafe fn scores_popcnt(planes: &Planes, signs: &[u64], out: &mut [f32]) {
        planes.scores_portable(signs, out);
    }

    /// Eight words of a sketch per step; the score of each vector is reduced
    /// once. SAFETY: needs AVX-512F and AVX-512 VPOPCNTDQ.
    #[target_feature(enable = "avx512f,avx512vpopcntdq")]
    pub(super) unsafe fn scores_512(planes: &Planes, signs: &[u64], out: &mut [f32]) {
        let w = planes.words;
        let bits = planes.bits.as_ptr();
        for (code, o) in signs.chunks_exact(w).zip(out.iter_mut()) {
            let (mut ones, mut weighted) = (_mm512_setzero_si512(), _mm512_setzero_si512());
            let mut at = 0;
            while at < w {
                let m: __mmask8 = if w - at >= 8 {
                    0xFF
                } else {
                    (1u8 << (w - at)) - 1
                };
                let b = _mm512_maskz_loadu_epi64(m, code.as_ptr().add(at).cast());
                let plane = |p: usize| _mm512_maskz_loadu_epi64(m, bits.add(p * w + at).cast());
                ones = _mm512_add_epi64(ones, _mm512_popcnt_epi64(b));
                let c0 = _mm512_popcnt_epi64(_mm512_and_si512(b, plane(0)));
                let c1 = _mm512_popcnt_epi64(_mm512_and_si512(b, plane(1)));
                let c2 = _mm512_popcnt_epi64(_mm512_and_si512(b, plane(2)));
                let c3 = _mm512_popcnt_epi64(_mm512_and_si512(b, plane(3)));
                let c = _mm512_add_epi64(
                    _mm512_add_epi64(c0, _mm512_slli_epi64::<1>(c1)),
                    _mm512_add_epi64(_mm512_slli_epi64::<2>(c2), _mm512_slli_epi64::<3>(c3)),
                );
                weighted = _mm512_add_epi64(weighted, c);
                at += 8;
            }
            let ones = _mm512_reduce_add_epi64(ones) as f32;
            let weighted = _mm512_reduce_add_epi64(weighted) as f32;
            *o = planes.lo * ones + planes.step * weighted;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    #[test]
    fn signs_are_one_bit_per_positive_component() {
        for dim in [1usize, 63, 64, 65, 384, 700] {
            let v: Vec<f32> = (0..dim)
                .map(|j| match j % 5 {
                    0 => -0.0,
                    1 => f32::NAN,
                    2 => (j as f32).sin(),
                    _ => 1.0 / (j as f32 + 1.0),
                })
                .collect();
            let words = dim.div_ceil(64);
            let mut got = vec![7u64];
            push_signs(&v, words, &mut got);
            let mut want = vec![0u64; words];
            for (j, &x) in v.iter().enumerate() {
                if x > 0.0 {
                    want[j / 64] |= 1 << (j % 64);
                }
            }
            assert_eq!(got[0], 7, "what was there stays");
            assert_eq!(&got[1..], &want[..], "dim {dim}");
        }
    }

    #[test]
    fn put_remove_head_and_scan() {
        let mut p = Pending::new(2);
        let v = normalised(&[1.0, 0.0, 0.0, 2.0, 1.0, 1.0], 2, "vector").unwrap();
        p.put(1, &v[0..2]);
        p.put(2, &v[2..4]);
        p.put(3, &v[4..6]);
        assert_eq!(p.head(2).0, &[1, 2], "oldest first");
        assert_eq!(p.get(2), Some(&[0.0, 1.0][..]));
        let hits = p.scan(&[1.0, 0.0], 2, |_| true);
        assert_eq!(hits[0], (1, 1.0));
        assert_eq!(hits[1].0, 3);
        assert!(p.remove(1));
        assert!(!p.remove(1));
        assert_eq!(p.get(3).map(|v| v[0] > 0.7), Some(true));
        assert_eq!(p.scan(&[1.0, 0.0], 5, |id| id != 3).len(), 1);
        let (ids, data) = p.head(1);
        assert_eq!((ids, data.len()), (&[3][..], 2));
        p.drop_head(1);
        assert_eq!(p.ids(), &[2]);
        // A store without vectors saves an empty parked set, which loads.
        assert!(Pending::from_parts(0, Vec::new(), Vec::new()).is_some_and(|p| p.is_empty()));
        assert!(normalised(&[0.0, 0.0], 2, "vector").is_err());
        assert!(normalised(&[f32::NAN, 0.0], 2, "vector").is_err());
        // Finite and non-zero, but no unit vector in f32 (issue 14).
        assert!(normalised(&[1e-45, 1e-45], 2, "vector").is_err());
        assert!(normalised(&[3e38, 3e38], 2, "vector").is_err());
        assert!(matches!(
            normalised(&[1.0, 0.0, 1.0], 2, "vector"),
            Err(Error::DimensionMismatch { .. })
        ));
    }

    fn xorshift(seed: u64) -> impl FnMut() -> f32 {
        let mut s = seed | 1;
        move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        }
    }

    /// Unit vectors around 20 fixed centres, as embeddings cluster; `seed`
    /// draws the points, so queries come from the same distribution.
    fn clustered(n: usize, dim: usize, seed: u64) -> Vec<f32> {
        let mut rnd = xorshift(seed);
        let mut crnd = xorshift(0x1234_5678);
        let centres: Vec<f32> = (0..20 * dim).map(|_| crnd()).collect();
        let mut out = Vec::with_capacity(n * dim);
        for i in 0..n {
            let c = &centres[(i % 20) * dim..(i % 20 + 1) * dim];
            out.extend(c.iter().map(|x| x + 0.4 * rnd()));
        }
        normalised(&out, dim, "vector").unwrap()
    }

    fn exact(p: &Pending, q: &[f32], k: usize, accept: impl Fn(u64) -> bool) -> Vec<(u64, f32)> {
        let mut all: Vec<(u64, f32)> = p
            .ids()
            .iter()
            .enumerate()
            .filter(|(_, id)| accept(**id))
            .map(|(i, &id)| (id, dot(q, p.row(i))))
            .collect();
        all.sort_unstable_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        all.truncate(k);
        all
    }

    /// The share of `want`'s ids that `got` holds.
    fn recall(got: &[u64], want: &[(u64, f32)]) -> f64 {
        want.iter().filter(|w| got.contains(&w.0)).count() as f64 / want.len() as f64
    }

    #[test]
    fn sketched_scans_find_parked_vectors_as_surely_as_the_graph_finds_linked_ones() {
        use crate::hnsw::{Hnsw, Metric, Params, Precision};
        let (n, dim) = (6000, 96);
        let data = clustered(n, dim, 3);
        let ids: Vec<u64> = (0..n as u64).map(|i| i * 7 + 1).collect();
        let p = Pending::from_parts(dim, ids.clone(), data.clone()).unwrap();
        assert!(p.len() > SKETCH_MIN && dim >= SKETCH_MIN_DIM);
        let params = Params {
            precision: Precision::Int8F16,
            ef_construction: 100,
            ..Params::default()
        };
        let mut h = Hnsw::new(dim, Metric::Cosine, params).unwrap();
        h.add(&ids, &data).unwrap();
        // Queries like the data, and queries unlike all of it (every
        // similarity low and close to the others: hard for both).
        let mut r = xorshift(77);
        let random: Vec<f32> = (0..50 * dim).map(|_| r()).collect();
        let like = clustered(50, dim, 11);
        let unlike = normalised(&random, dim, "query").unwrap();
        for (queries, floor) in [(like, 0.99), (unlike, 0.85)] {
            let (mut parked, mut linked) = (0.0, 0.0);
            for q in queries.chunks_exact(dim) {
                let got = p.scan(q, 50, |_| true);
                let want = exact(&p, q, 50, |_| true);
                assert_eq!(got.len(), 50);
                // Similarities are exact, whatever chose the candidates.
                for &(id, sim) in &got {
                    assert_eq!(sim, dot(q, p.row(p.pos[&id])));
                }
                let got: Vec<u64> = got.iter().map(|h| h.0).collect();
                parked += recall(&got, &want);
                let graph = h.search(q, 50, None, None).unwrap();
                let graph: Vec<u64> = graph.iter().map(|n| n.id).collect();
                linked += recall(&graph, &want);
                // A filter: only admitted ids.
                let some = |id: u64| id.is_multiple_of(3);
                assert!(p.scan(q, 10, some).iter().all(|&(id, _)| some(id)));
                // The one id a narrow filter admits is found exactly.
                let one = p.ids()[4321];
                assert_eq!(
                    p.scan(q, 10, |id| id == one),
                    exact(&p, q, 10, |id| id == one)
                );
            }
            let (parked, linked) = (parked / 50.0, linked / 50.0);
            assert!(parked >= floor, "recall {parked}");
            assert!(parked >= linked - 0.01, "parked {parked}, linked {linked}");
        }
    }

    #[test]
    fn sketch_scores_agree_on_every_kernel() {
        for dim in [64, 100, 384, 700] {
            let data = clustered(40, dim, 5);
            let p = Pending::from_parts(dim, (0..40).collect(), data).unwrap();
            let q = &clustered(1, dim, 9)[..];
            let planes = Planes::new(q, p.words);
            let (mut fast, mut slow) = (vec![0f32; 40], vec![0f32; 40]);
            planes.scores(&p.signs, &mut fast);
            planes.scores_portable(&p.signs, &mut slow);
            assert_eq!(fast, slow);
            // The score is the sum of q over the positive components, each
            // within half a step of the grid.
            for (i, &s) in slow.iter().enumerate() {
                let set: Vec<f32> = p
                    .row(i)
                    .iter()
                    .zip(q)
                    .filter(|(x, _)| **x > 0.0)
                    .map(|(_, y)| *y)
                    .collect();
                let want: f32 = set.iter().sum();
                let bound = set.len() as f32 * planes.step / 2.0 + 1e-4;
                assert!((s - want).abs() <= bound, "{s} vs {want}");
            }
        }
    }

    #[test]
    fn sketches_follow_puts_removes_and_truncation() {
        let dim = 70;
        let data = clustered(3000, dim, 2);
        let mut p = Pending::new(dim);
        for (i, v) in data.chunks_exact(dim).enumerate() {
            p.put(i as u64, v);
        }
        // Replace some, remove some, drop the oldest.
        for i in (0..3000).step_by(7) {
            p.put(i, &data[((i as usize + 1) % 3000) * dim..][..dim]);
        }
        for i in (0..3000).step_by(5) {
            p.remove(i);
        }
        let q = &clustered(1, dim, 4)[..];
        // Linked rows stay in the buffers until they are three times the parked ones.
        for (dropped, compacted) in [(100, false), (1800, true)] {
            let oldest = p.ids()[..dropped].to_vec();
            p.drop_head(dropped);
            assert_eq!(p.start == 0, compacted);
            assert!(oldest
                .iter()
                .all(|&id| !p.contains(id) && p.get(id).is_none()));
            let rebuilt = Pending::from_parts(dim, p.ids().to_vec(), p.data().to_vec()).unwrap();
            assert_eq!(p.signs[p.start * p.words..], rebuilt.signs[..]);
            assert_eq!(p.scan(q, 20, |_| true), rebuilt.scan(q, 20, |_| true));
            let id = p.ids()[7];
            assert_eq!(p.get(id), rebuilt.get(id));
        }
        // Removing every parked entry leaves nothing behind.
        for id in p.ids().to_vec() {
            assert!(p.remove(id));
        }
        assert!(p.is_empty() && p.start == 0 && p.data.is_empty());
    }
}
