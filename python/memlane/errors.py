"""The exceptions memlane raises.

Every class derives from [`MemlaneError`][memlane.errors.MemlaneError] and also from the builtin a
caller would reach for, so ``except ValueError`` keeps working.
"""

from __future__ import annotations

import reprlib

__all__ = [
    "ClosedError",
    "ConflictError",
    "CorruptFileError",
    "DimensionMismatchError",
    "DuplicateIdError",
    "EmbedderMismatchError",
    "EmbedderUnavailableError",
    "InternalError",
    "InvalidArgumentError",
    "MemlaneError",
    "NotFoundError",
    "StorageError",
    "StoreClosedError",
    "StoreLockedError",
    "UnknownIdError",
]


class MemlaneError(Exception):
    """Base class of every memlane exception."""


class InvalidArgumentError(MemlaneError, ValueError):
    """An argument has the wrong value, type, shape or length."""


class ClosedError(MemlaneError, RuntimeError):
    """The object was closed (a ``Memory`` or an ``AgentMemory`` after ``close()``):
    make a new one."""


class ConflictError(MemlaneError, RuntimeError):
    """A record changed between the moment a change read it and its commit: another
    writer superseded, updated or deleted it first. Nothing of the losing change is
    stored; read the record again and retry if it still applies."""


class DuplicateIdError(InvalidArgumentError):
    """An import met an id that is already stored. ``id`` is that id, ``where`` the
    file and line that gave it."""

    def __init__(self, message: str, *, id: str, where: str) -> None:
        super().__init__(message)
        self.id = id
        self.where = where


class DimensionMismatchError(InvalidArgumentError):
    """A vector's dimension differs from the index's or the store's."""


class CorruptFileError(MemlaneError, ValueError):
    """A file is truncated, damaged, of another kind, or of an unknown version."""


class UnknownIdError(MemlaneError, KeyError):
    """An id that is not stored was asked for."""

    def __str__(self) -> str:
        # KeyError quotes its argument; a message reads better plain.
        return str(self.args[0]) if self.args else ""


class NotFoundError(MemlaneError, FileNotFoundError):
    """A file or store that should exist does not."""


class StorageError(MemlaneError, OSError):
    """Reading or writing the disk failed."""


class StoreClosedError(ClosedError, StorageError):
    """The store closed while a call waited for it (for its lock or a database
    connection): the call stored nothing. Both a ``ClosedError`` and a ``StorageError``."""


class EmbedderUnavailableError(MemlaneError, RuntimeError):
    """The embedding model or its tokenizer cannot be loaded."""


class InternalError(MemlaneError, RuntimeError):
    """A bug in memlane; please report it with the message."""


class StoreLockedError(MemlaneError, BlockingIOError):
    """Another Memory (in this process or another) has the store open."""


class EmbedderMismatchError(MemlaneError, ValueError):
    """A store was opened with an embedder other than the one its vectors come from."""


_SHOWN = reprlib.Repr()
_SHOWN.maxlevel = 3
_SHOWN.maxstring = _SHOWN.maxother = 120
#: Past 4,300 decimal digits (Python's limit on writing an int out) an int is named by
#: its size; this many bits stay below that.
_WRITTEN_BITS = 14_000


def shown(value: object) -> str:
    """``value``'s repr as an error message names it, cut short: a refused argument can
    be a dict nested thousands deep (whose own repr raises ``RecursionError``) or a
    string of megabytes, or an int too long for Python to write in decimal."""
    if isinstance(value, int) and value.bit_length() > _WRITTEN_BITS:
        return f"{'a negative' if value < 0 else 'an'} int of {value.bit_length()} bits"
    try:
        return _SHOWN.repr(value)
    except Exception:  # such an int inside it, or a repr of its own that raises
        return f"a {type(value).__name__} that cannot be shown"
