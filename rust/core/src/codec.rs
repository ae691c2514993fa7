//! Little-endian encoding for index snapshots. The reader checks every length
//! against what is left, so a truncated or hostile payload yields an error,
//! never a panic or a huge allocation.

pub struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    pub fn with_capacity(n: usize) -> Self {
        Writer {
            buf: Vec::with_capacity(n),
        }
    }

    pub fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }

    pub fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    pub fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    pub fn f32(&mut self, v: f32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    pub fn f64(&mut self, v: f64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    pub fn bytes(&mut self, v: &[u8]) {
        self.u64(v.len() as u64);
        self.buf.extend_from_slice(v);
    }

    pub fn str(&mut self, v: &str) {
        self.bytes(v.as_bytes());
    }

    pub fn u32s(&mut self, v: &[u32]) {
        self.u64(v.len() as u64);
        self.buf.reserve(v.len() * 4);
        for x in v {
            self.buf.extend_from_slice(&x.to_le_bytes());
        }
    }

    pub fn u64s(&mut self, v: &[u64]) {
        self.u64(v.len() as u64);
        self.buf.reserve(v.len() * 8);
        for x in v {
            self.buf.extend_from_slice(&x.to_le_bytes());
        }
    }

    pub fn f32s(&mut self, v: &[f32]) {
        self.u64(v.len() as u64);
        self.buf.reserve(v.len() * 4);
        for x in v {
            self.buf.extend_from_slice(&x.to_le_bytes());
        }
    }

    pub fn into_inner(self) -> Vec<u8> {
        self.buf
    }
}

/// Why a payload could not be decoded; the caller adds the file path.
#[derive(Debug)]
pub struct DecodeError(pub String);

pub type DecodeResult<T> = std::result::Result<T, DecodeError>;

pub struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf }
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    fn take(&mut self, n: usize) -> DecodeResult<&'a [u8]> {
        if n > self.buf.len() {
            return Err(DecodeError(format!(
                "truncated: needed {n} bytes, {} left",
                self.buf.len()
            )));
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> DecodeResult<[u8; N]> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    pub fn u8(&mut self) -> DecodeResult<u8> {
        Ok(self.take(1)?[0])
    }

    pub fn u32(&mut self) -> DecodeResult<u32> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    pub fn u64(&mut self) -> DecodeResult<u64> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    pub fn f32(&mut self) -> DecodeResult<f32> {
        Ok(f32::from_le_bytes(self.array()?))
    }

    pub fn f64(&mut self) -> DecodeResult<f64> {
        Ok(f64::from_le_bytes(self.array()?))
    }

    /// A length prefix for items of at least `width` bytes, checked against
    /// what is left.
    pub fn len(&mut self, width: usize) -> DecodeResult<usize> {
        let n = self.u64()?;
        let n = usize::try_from(n).map_err(|_| DecodeError(format!("length {n} too large")))?;
        if n.checked_mul(width).is_none_or(|b| b > self.buf.len()) {
            return Err(DecodeError(format!(
                "length {n} exceeds the {} bytes left",
                self.buf.len()
            )));
        }
        Ok(n)
    }

    pub fn bytes(&mut self) -> DecodeResult<&'a [u8]> {
        let n = self.len(1)?;
        self.take(n)
    }

    pub fn str(&mut self) -> DecodeResult<&'a str> {
        std::str::from_utf8(self.bytes()?).map_err(|e| DecodeError(format!("invalid UTF-8: {e}")))
    }

    pub fn u32s(&mut self) -> DecodeResult<Vec<u32>> {
        let mut out = Vec::new();
        self.u32s_into(&mut out)?;
        Ok(out)
    }

    /// [`Reader::u32s`] into a buffer the caller reuses (a graph's million
    /// link lists would otherwise cost a million allocations).
    pub fn u32s_into(&mut self, out: &mut Vec<u32>) -> DecodeResult<()> {
        let n = self.len(4)?;
        out.clear();
        out.extend(
            self.take(n * 4)?
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])),
        );
        Ok(())
    }

    pub fn u64s(&mut self) -> DecodeResult<Vec<u64>> {
        let n = self.len(8)?;
        Ok(self
            .take(n * 8)?
            .chunks_exact(8)
            .map(|c| {
                let mut a = [0u8; 8];
                a.copy_from_slice(c);
                u64::from_le_bytes(a)
            })
            .collect())
    }

    pub fn f32s(&mut self) -> DecodeResult<Vec<f32>> {
        let n = self.len(4)?;
        Ok(self
            .take(n * 4)?
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let mut w = Writer::with_capacity(0);
        w.u8(7);
        w.u32(1);
        w.u64(u64::MAX);
        w.f32(1.5);
        w.f64(-2.25);
        w.str("héllo");
        w.u32s(&[1, 2, 3]);
        w.u64s(&[9]);
        w.f32s(&[0.5, f32::INFINITY]);
        let buf = w.into_inner();
        let mut r = Reader::new(&buf);
        assert_eq!(r.u8().unwrap(), 7);
        assert_eq!(r.u32().unwrap(), 1);
        assert_eq!(r.u64().unwrap(), u64::MAX);
        assert_eq!(r.f32().unwrap(), 1.5);
        assert_eq!(r.f64().unwrap(), -2.25);
        assert_eq!(r.str().unwrap(), "héllo");
        assert_eq!(r.u32s().unwrap(), vec![1, 2, 3]);
        assert_eq!(r.u64s().unwrap(), vec![9]);
        assert_eq!(r.f32s().unwrap(), vec![0.5, f32::INFINITY]);
        assert!(r.is_empty());
    }

    #[test]
    fn hostile_lengths_are_errors() {
        let mut w = Writer::with_capacity(0);
        w.u64(u64::MAX / 2);
        let buf = w.into_inner();
        assert!(Reader::new(&buf).u32s().is_err());
        assert!(Reader::new(&buf[..3]).u64().is_err());
    }
}
