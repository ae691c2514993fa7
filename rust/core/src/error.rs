//! The one error type of the core. The Python layer maps each variant to a
//! `memlane` exception that also subclasses the matching builtin.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("dimension mismatch: expected {expected}, got {got}")]
    DimensionMismatch { expected: usize, got: usize },

    #[error("{0}")]
    InvalidArgument(String),

    #[error("unknown id {0}")]
    UnknownId(u64),

    #[error("corrupt file {path}: {reason}")]
    Corrupt { path: PathBuf, reason: String },

    /// A vector blob of the database that cannot be what was stored.
    #[error("{0}")]
    DamagedVector(String),

    #[error("file not found: {0}")]
    NotFound(PathBuf),

    #[error("I/O error on {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub fn invalid(msg: impl Into<String>) -> Self {
        Error::InvalidArgument(msg.into())
    }

    pub(crate) fn io(path: &std::path::Path, source: std::io::Error) -> Self {
        if source.kind() == std::io::ErrorKind::NotFound {
            Error::NotFound(path.to_path_buf())
        } else {
            Error::Io {
                path: path.to_path_buf(),
                source,
            }
        }
    }
}
