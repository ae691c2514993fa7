//! Vectors added but not yet linked into the HNSW graph.
//!
//! Linking is the slow part of an add (a graph search per vector), so a bulk
//! add parks its vectors here and returns; a background caller links them
//! in small batches with [`Engine::index_pending`](super::Engine::index_pending).
//! Until then searches scan this buffer exactly, so a parked vector is found
//! as surely as a linked one.

use crate::error::Result;
use crate::idmap::IdMap;

pub struct Pending {
    dim: usize,
    ids: Vec<u64>,
    /// Unit vectors, row-major.
    data: Vec<f32>,
    pos: IdMap<usize>,
}

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

/// Checks `rows` vectors of `dim` floats and returns them at unit length.
pub fn normalised(data: &[f32], dim: usize, what: &str) -> Result<Vec<f32>> {
    crate::hnsw::check_rows(data, dim, true, what)
}

impl Pending {
    pub fn new(dim: usize) -> Self {
        Pending {
            dim,
            ids: Vec::new(),
            data: Vec::new(),
            pos: IdMap::default(),
        }
    }

    pub fn from_parts(dim: usize, ids: Vec<u64>, data: Vec<f32>) -> Option<Self> {
        if data.len() != ids.len() * dim {
            return None;
        }
        let pos: IdMap<usize> = ids.iter().enumerate().map(|(i, &id)| (id, i)).collect();
        (pos.len() == ids.len()).then_some(Pending {
            dim,
            ids,
            data,
            pos,
        })
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    pub fn ids(&self) -> &[u64] {
        &self.ids
    }

    pub fn data(&self) -> &[f32] {
        &self.data
    }

    pub fn contains(&self, id: u64) -> bool {
        self.pos.contains_key(&id)
    }

    pub fn get(&self, id: u64) -> Option<&[f32]> {
        let i = *self.pos.get(&id)?;
        Some(&self.data[i * self.dim..(i + 1) * self.dim])
    }

    /// Parks a unit vector under `id`, replacing any parked one.
    pub fn put(&mut self, id: u64, v: &[f32]) {
        match self.pos.get(&id) {
            Some(&i) => self.data[i * self.dim..(i + 1) * self.dim].copy_from_slice(v),
            None => {
                self.pos.insert(id, self.ids.len());
                self.ids.push(id);
                self.data.extend_from_slice(v);
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
            self.pos.insert(self.ids[i], i);
        }
        self.ids.pop();
        self.data.truncate(last * self.dim);
        true
    }

    /// The last `n` parked entries (ids and vectors), to be linked.
    pub fn tail(&self, n: usize) -> (&[u64], &[f32]) {
        let start = self.ids.len().saturating_sub(n);
        (&self.ids[start..], &self.data[start * self.dim..])
    }

    /// Forgets the last `n` entries once they are linked.
    pub fn truncate_tail(&mut self, n: usize) {
        let keep = self.ids.len().saturating_sub(n);
        for id in self.ids.drain(keep..) {
            self.pos.remove(&id);
        }
        self.data.truncate(keep * self.dim);
    }

    /// The `k` parked vectors most similar to the unit query `q` among those
    /// `accept` admits, as (id, cosine similarity), best first.
    pub fn scan(&self, q: &[f32], k: usize, accept: impl Fn(u64) -> bool) -> Vec<(u64, f32)> {
        let mut out: Vec<(u64, f32)> = self
            .ids
            .iter()
            .zip(self.data.chunks_exact(self.dim))
            .filter(|(id, _)| accept(**id))
            .map(|(&id, v)| (id, dot(q, v)))
            .collect();
        out.sort_unstable_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        out.truncate(k);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    #[test]
    fn put_remove_tail_and_scan() {
        let mut p = Pending::new(2);
        let v = normalised(&[1.0, 0.0, 0.0, 2.0, 1.0, 1.0], 2, "vector").unwrap();
        p.put(1, &v[0..2]);
        p.put(2, &v[2..4]);
        p.put(3, &v[4..6]);
        assert_eq!(p.get(2), Some(&[0.0, 1.0][..]));
        let hits = p.scan(&[1.0, 0.0], 2, |_| true);
        assert_eq!(hits[0], (1, 1.0));
        assert_eq!(hits[1].0, 3);
        assert!(p.remove(1));
        assert!(!p.remove(1));
        assert_eq!(p.get(3).map(|v| v[0] > 0.7), Some(true));
        assert_eq!(p.scan(&[1.0, 0.0], 5, |id| id != 3).len(), 1);
        let (ids, data) = p.tail(1);
        assert_eq!((ids.len(), data.len()), (1, 2));
        p.truncate_tail(1);
        assert_eq!(p.len(), 1);
        assert!(normalised(&[0.0, 0.0], 2, "vector").is_err());
        assert!(normalised(&[f32::NAN, 0.0], 2, "vector").is_err());
        // Finite and non-zero, but no unit vector in f32 (issue 14).
        assert!(normalised(&[1e-45, 1e-45], 2, "vector").is_err());
        assert!(normalised(&[3e38, 3e38], 2, "vector").is_err());
        assert!(matches!(
            normalised(&[1.0, 0.0, 1.0], 2, "vector"),
            Err(Error::DimensionMismatch { .. })
        ));
        assert!((dot(&[1.0; 19], &[2.0; 19]) - 38.0).abs() < 1e-6);
    }
}
