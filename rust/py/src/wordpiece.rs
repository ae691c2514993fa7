//! `memlane._core.WordPiece`: the Python face of `memlane_core::wordpiece`.

use std::path::PathBuf;

use memlane_core::wordpiece::{Encoding, WordPiece};
use pyo3::prelude::*;

use crate::args;
use crate::bm25::{string, texts};
use crate::errors::{detach, invalid};

/// BERT's WordPiece tokenizer read from a `tokenizer.json`. Immutable, so any
/// number of threads may share one.
#[pyclass(module = "memlane._core", name = "WordPiece", frozen)]
pub struct PyWordPiece {
    inner: WordPiece,
}

/// One text's tokens.
#[pyclass(module = "memlane._core", name = "WordPieceEncoding", frozen)]
pub struct PyEncoding {
    inner: Encoding,
}

#[pymethods]
impl PyWordPiece {
    #[staticmethod]
    #[pyo3(signature = (path, max_length=None))]
    fn from_file(
        py: Python<'_>,
        path: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = args::opt_max_length)] max_length: Option<usize>,
    ) -> PyResult<Self> {
        let path: PathBuf = path.extract().map_err(|_| {
            invalid(
                py,
                "path must be a str or os.PathLike, got another type".to_owned(),
            )
        })?;
        let inner = detach(py, || WordPiece::from_file(&path))?.with_max_length(max_length);
        Ok(Self { inner })
    }

    /// Tokens per encoding at most, special tokens included (None: no limit).
    #[getter]
    fn max_length(&self) -> Option<usize> {
        self.inner.max_length()
    }

    #[getter]
    fn pad_id(&self) -> u32 {
        self.inner.pad_id()
    }

    #[getter]
    fn num_special_tokens(&self) -> usize {
        self.inner.num_special_tokens()
    }

    #[pyo3(signature = (text, add_special_tokens=true))]
    fn encode(
        &self,
        py: Python<'_>,
        text: &Bound<'_, PyAny>,
        add_special_tokens: bool,
    ) -> PyResult<PyEncoding> {
        let text = string(py, text, "text", None)?;
        let inner = detach(py, || Ok(self.inner.encode(&text, add_special_tokens)))?;
        Ok(PyEncoding { inner })
    }

    #[pyo3(signature = (texts, add_special_tokens=true))]
    fn encode_batch(
        &self,
        py: Python<'_>,
        texts: &Bound<'_, PyAny>,
        add_special_tokens: bool,
    ) -> PyResult<Vec<PyEncoding>> {
        let texts = self::texts(py, texts, "texts")?;
        let encodings = detach(py, || {
            Ok(self.inner.encode_batch(&texts, add_special_tokens))
        })?;
        Ok(encodings
            .into_iter()
            .map(|inner| PyEncoding { inner })
            .collect())
    }
}

#[pymethods]
impl PyEncoding {
    #[getter]
    fn ids(&self) -> Vec<u32> {
        self.inner.ids.clone()
    }

    /// Each token's characters in the text; `(0, 0)` for a template's special tokens.
    #[getter]
    fn offsets(&self) -> Vec<(usize, usize)> {
        self.inner.offsets.clone()
    }

    /// Whether tokens beyond `max_length` were cut.
    #[getter]
    fn truncated(&self) -> bool {
        self.inner.truncated
    }

    fn __len__(&self) -> usize {
        self.inner.ids.len()
    }

    fn __repr__(&self) -> String {
        format!(
            "WordPieceEncoding(ids={:?}, truncated={})",
            self.inner.ids,
            if self.inner.truncated {
                "True"
            } else {
                "False"
            }
        )
    }
}
