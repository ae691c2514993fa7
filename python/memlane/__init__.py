"""memlane: persistent, searchable memory for AI agents, with a Rust engine."""

from __future__ import annotations

from memlane._core import __version__
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
    "CorruptFileError",
    "DimensionMismatchError",
    "Embedder",
    "EmbedderUnavailableError",
    "InternalError",
    "InvalidArgumentError",
    "MemlaneError",
    "NotFoundError",
    "OnnxEmbedder",
    "StorageError",
    "UnknownIdError",
    "__version__",
]
