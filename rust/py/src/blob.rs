//! Vector blobs as the database keeps them (see `memlane_core::blob`):
//! copied out of their Python objects under the GIL, decoded without it, and
//! encoded without it from a float32 matrix.

use memlane_core::{blob, Error};
use numpy::{PyArray1, PyArray2, PyArrayMethods};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

use crate::args;
use crate::convert::Matrix;
use crate::errors::{detach, to_py};

/// Blobs (with the ids of their rows, when given as rows) in one buffer.
#[derive(Default)]
pub struct Stored {
    pub ids: Vec<u64>,
    joined: Vec<u8>,
    ends: Vec<usize>,
}

impl Stored {
    /// From a sequence of bytes.
    fn blobs(py: Python<'_>, stored: &Bound<'_, PyAny>, dim: usize) -> PyResult<Self> {
        let mut out = Stored::default();
        for item in stored.try_iter()? {
            out.push(py, &item?, dim)?;
        }
        Ok(out)
    }

    /// From a sequence of `(id, blob)` rows.
    pub fn rows(py: Python<'_>, rows: &Bound<'_, PyAny>, dim: usize) -> PyResult<Self> {
        let mut out = Stored::default();
        for (i, row) in rows.try_iter()?.enumerate() {
            let row = row?;
            let row = row.cast::<PyTuple>()?;
            if row.len() != 2 {
                return Err(to_py(py, Error::invalid("a row is (id, blob)")));
            }
            let id = row.get_item(0)?;
            // The id's name is written out only for the message of one out of range.
            let id = match id.extract::<u64>() {
                Ok(id) => id,
                Err(_) => args::unsigned(&id, &format!("the id of rows[{i}]"))?,
            };
            out.ids.push(id);
            out.push(py, &row.get_item(1)?, dim)?;
        }
        Ok(out)
    }

    fn push(&mut self, py: Python<'_>, item: &Bound<'_, PyAny>, dim: usize) -> PyResult<()> {
        let Ok(b) = item.cast::<PyBytes>() else {
            let kind = item.get_type().name()?;
            let msg = format!("a stored vector ({kind}, dimension {dim}) is damaged");
            return Err(to_py(py, Error::DamagedVector(msg)));
        };
        self.joined.extend_from_slice(b.as_bytes());
        self.ends.push(self.joined.len());
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// The blobs decoded into one row-major buffer.
    pub fn decode(&self, dim: usize) -> memlane_core::Result<Vec<f32>> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        let blobs: Vec<&[u8]> = starts
            .zip(&self.ends)
            .map(|(s, &e)| &self.joined[s..e])
            .collect();
        // The buffer holds `dim` floats a blob: a `dim` no blob can be of
        // (the caller's, say 2**40) is refused before it is allocated.
        let lengths = [
            dim.checked_mul(4),
            dim.checked_mul(2).and_then(|n| n.checked_add(5)),
        ];
        if let Some(b) = blobs.iter().find(|b| !lengths.contains(&Some(b.len()))) {
            return Err(Error::DamagedVector(format!(
                "a stored vector ({} bytes, dimension {dim}) is damaged",
                b.len()
            )));
        }
        blob::decode(blobs.iter().copied(), dim)
    }
}

/// Decodes the stored vectors `stored` (a sequence of bytes) of `dim`
/// components into an `(n, dim)` float32 matrix; a damaged one raises
/// `CorruptFileError`, a `dim` above any index's an `InvalidArgumentError`.
#[pyfunction]
pub fn unblobs<'py>(
    py: Python<'py>,
    stored: &Bound<'py, PyAny>,
    #[pyo3(from_py_with = args::blob_dim)] dim: usize,
) -> PyResult<Bound<'py, PyArray2<f32>>> {
    let stored = Stored::blobs(py, stored, dim)?;
    let data = detach(py, || stored.decode(dim))?;
    PyArray1::from_vec(py, data).reshape([stored.len(), dim])
}

/// The rows of `vectors` (an `(n, dim)` float32 matrix, or one vector) as the
/// database keeps them: float32, or scaled half floats when `half`; a row with
/// a non-finite value raises `InvalidArgumentError`.
#[pyfunction]
pub fn blobs<'py>(
    py: Python<'py>,
    vectors: &Bound<'py, PyAny>,
    half: bool,
) -> PyResult<Vec<Bound<'py, PyBytes>>> {
    let m = Matrix::extract(py, vectors, "vectors")?;
    let (data, dim) = (m.as_slice(), m.cols());
    if dim == 0 {
        return Ok(Vec::new());
    }
    let joined = detach(py, || blob::encode(data, dim, half))?;
    Ok(joined
        .chunks_exact(blob::stored_len(dim, half))
        .map(|b| PyBytes::new(py, b))
        .collect())
}
