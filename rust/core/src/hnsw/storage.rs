//! Vector storage: one contiguous, 64-byte aligned buffer with each vector
//! padded to a multiple of [`LANES`] floats (zeros in the padding change no
//! dot product or L2 distance).

use super::distance::LANES;

#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Block([f32; LANES]);

const ZERO: Block = Block([0.0; LANES]);

pub struct Vectors {
    dim: usize,
    blocks_per_vector: usize,
    blocks: Vec<Block>,
}

impl Vectors {
    pub fn new(dim: usize) -> Self {
        Vectors {
            dim,
            blocks_per_vector: dim.div_ceil(LANES),
            blocks: Vec::new(),
        }
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Padded length of every stored vector.
    pub fn stride(&self) -> usize {
        self.blocks_per_vector * LANES
    }

    pub fn slots(&self) -> usize {
        self.blocks.len() / self.blocks_per_vector.max(1)
    }

    pub fn reserve(&mut self, additional: usize) {
        self.blocks.reserve(additional * self.blocks_per_vector);
    }

    fn floats(&self) -> &[f32] {
        // SAFETY: Block is repr(C) over [f32; LANES] with no padding (64 bytes,
        // align 64), so the buffer is a valid run of blocks.len() * LANES floats.
        unsafe {
            std::slice::from_raw_parts(
                self.blocks.as_ptr().cast::<f32>(),
                self.blocks.len() * LANES,
            )
        }
    }

    fn floats_mut(&mut self) -> &mut [f32] {
        // SAFETY: as in `floats`, with exclusive access.
        unsafe {
            std::slice::from_raw_parts_mut(
                self.blocks.as_mut_ptr().cast::<f32>(),
                self.blocks.len() * LANES,
            )
        }
    }

    /// The padded vector in `slot`.
    #[inline]
    pub fn get(&self, slot: u32) -> &[f32] {
        let s = self.stride();
        let start = slot as usize * s;
        &self.floats()[start..start + s]
    }

    #[inline]
    pub fn ptr(&self, slot: u32) -> *const f32 {
        self.floats()
            .as_ptr()
            .wrapping_add(slot as usize * self.stride())
    }

    /// Appends an all-zero slot and returns its number.
    pub fn push_zeroed(&mut self) -> u32 {
        let slot = self.slots() as u32;
        self.blocks
            .extend(std::iter::repeat_n(ZERO, self.blocks_per_vector));
        slot
    }

    /// Writes `v` (exactly `dim` floats) into `slot`, zeroing the padding.
    pub fn set(&mut self, slot: u32, v: &[f32]) {
        debug_assert_eq!(v.len(), self.dim);
        let (s, dim) = (self.stride(), self.dim);
        let start = slot as usize * s;
        let dst = &mut self.floats_mut()[start..start + s];
        dst[..dim].copy_from_slice(v);
        dst[dim..].fill(0.0);
    }

    pub fn memory_bytes(&self) -> usize {
        self.blocks.capacity() * std::mem::size_of::<Block>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padded_and_aligned() {
        let mut v = Vectors::new(20);
        assert_eq!(v.stride(), 32);
        let a = v.push_zeroed();
        let b = v.push_zeroed();
        v.set(b, &[1.0; 20]);
        assert_eq!(v.get(a), &[0.0; 32][..]);
        assert_eq!(&v.get(b)[..20], &[1.0; 20][..]);
        assert_eq!(&v.get(b)[20..], &[0.0; 12][..]);
        assert_eq!(v.ptr(b) as usize % 64, 0);
        assert_eq!(v.slots(), 2);
    }
}
