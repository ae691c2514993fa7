"""memlane: persistent, searchable memory for AI agents, with a Rust engine."""

from __future__ import annotations

from memlane._core import __version__
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
    "EmbedderUnavailableError",
    "InternalError",
    "InvalidArgumentError",
    "MemlaneError",
    "NotFoundError",
    "StorageError",
    "UnknownIdError",
    "__version__",
]
