//! memlane's engine. Pure Rust: no Python anywhere in this crate's dependency
//! graph, so `cargo test` and `cargo bench` need no interpreter.

pub mod background;
pub mod blob;
pub mod bm25;
pub mod codec;
pub mod dot;
pub mod engine;
pub mod error;
pub mod fusion;
#[doc(hidden)]
pub mod fuzzing;
pub(crate) mod heap;
pub mod hnsw;
pub mod idmap;
pub mod mmr;
pub mod pages;
pub mod persist;
pub mod pool;
pub(crate) mod prefetch;
pub(crate) mod repr;
pub mod scoring;
#[cfg(test)]
pub(crate) mod testdata;
pub mod vector_log;
pub mod wordpiece;
pub(crate) mod worst;

pub use error::{Error, Result};
