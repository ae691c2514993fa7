//! BM25 keyword search, updated one document at a time.
//!
//! - [`analyzer`]: text to terms (UAX #29 words, lowercase, stopwords,
//!   Snowball stems, optional accent folding; bigrams for scripts without spaces).
//! - [`language`], [`stopwords`]: the languages and their stopword lists.
//! - [`scoring`]: Lucene's BM25 formula, apart from any index.
//! - `index`: postings sorted by internal document number, exact corpus
//!   statistics under adds and removes, lazy compaction.
//! - `search`: MaxScore top-k that equals exhaustive scoring, id filters.
//! - `snapshot`: the versioned file format.
//! - [`okapi`]: `rank_bm25`'s Okapi BM25 over the caller's tokens, static.

pub mod analyzer;
mod index;
pub mod language;
pub mod okapi;
pub mod scoring;
mod search;
pub(crate) mod snapshot;
mod stopwords;

pub use analyzer::{Analyzer, AnalyzerConfig, Stopwords, MAX_TOKEN_CHARS};
pub use index::{Bm25Index, DocTerms, MISSING};
pub use language::Language;
pub use scoring::{Bm25Params, CorpusStats};
pub use search::{Filter, Hit, Query};
