"""memlane: persistent, searchable memory for AI agents, with a Rust engine."""

from __future__ import annotations

from memlane._core import BM25Index, HnswIndex, __version__, analyze
from memlane.embeddings import Embedder, OnnxEmbedder
from memlane.errors import (
    CorruptFileError,
    DimensionMismatchError,
    EmbedderUnavailableError,
    InternalError,
    InvalidArgumentError,
    MemlaneError,
    NotFoundError,
    StorageError,
    UnknownIdError,
)

__all__ = [
    "BM25Index",
    "CorruptFileError",
    "DimensionMismatchError",
    "Embedder",
    "EmbedderUnavailableError",
    "HnswIndex",
    "InternalError",
    "InvalidArgumentError",
    "MemlaneError",
    "NotFoundError",
    "OnnxEmbedder",
    "StorageError",
    "UnknownIdError",
    "__version__",
    "analyze",
]
