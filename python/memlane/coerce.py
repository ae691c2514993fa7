"""Argument checks: each returns the value in its canonical type or raises
``InvalidArgumentError`` naming the argument."""

from __future__ import annotations

import json
import math
import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from memlane import _core, times
from memlane.errors import DimensionMismatchError, InvalidArgumentError, shown
from memlane.records import SCOPE_FIELDS

FloatArray = npt.NDArray[np.float32]

WEIGHT_KEYS = frozenset({"relevance", "importance", "recency"})


#: The largest count (``k``, ``limit``, ``offset``, ...) a call takes: the largest
#: signed 64-bit integer, which SQLite, PostgreSQL and the engine all hold.
MAX_COUNT = 2**63 - 1
#: How deep metadata may nest (dicts and lists alike), as the engine's
#: ``flatten_metadata`` allows for dicts.
MAX_METADATA_DEPTH = 16
#: The longest id a caller can give a new record, in UTF-8 bytes: PostgreSQL's indexes
#: hold an entry of at most about 2.7 kB, and both backends take the same new ids.
MAX_ID_BYTES = 1024
#: The metadata key under which the engine indexes a record's ``unique`` flag (the
#: engine holds no column for it; its conditions read metadata). Only the engine's copy of
#: a unique record's metadata has it, never the stored one, so no caller's metadata may.
UNIQUE_KEY: str = _core.UNIQUE_KEY


def clean(value: str, label: str, nul: bool = False) -> str:
    """``value`` if both databases can store it: valid Unicode (no lone surrogate, which
    has no UTF-8 form) and, unless ``nul`` allows it, no NUL character (PostgreSQL's
    text cannot hold one)."""
    if not nul and "\x00" in value:
        raise InvalidArgumentError(
            f"{label} contains a NUL character (\\x00) at position {value.index(chr(0))}, "
            "which PostgreSQL cannot store"
        )
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as e:
            raise InvalidArgumentError(
                f"{label} contains a lone surrogate ({value[e.start]!r}) at position "
                f"{e.start}, which is not valid Unicode"
            ) from None
    return value


def text(value: object, label: str, nul: bool = False) -> str:
    """A non-empty str both databases can store (see ``clean``), as an exact str: a
    subclass's own methods (``__eq__``, ``__hash__``, ``strip``) decide nothing."""
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{label} must be a str, got {type(value).__name__}")
    if type(value) is not str:
        value = str.__str__(value)
    if not value.strip():
        raise InvalidArgumentError(f"{label} must not be empty")
    return clean(value, label, nul)


def record_id(value: object, label: str) -> str:
    """``value`` as ``text`` takes it, and no longer than ``MAX_ID_BYTES`` in UTF-8."""
    value = text(value, label)
    if len(value) > MAX_ID_BYTES // 4 and len(value.encode()) > MAX_ID_BYTES:
        raise InvalidArgumentError(
            f"{label} is {len(value.encode())} bytes long in UTF-8: at most {MAX_ID_BYTES}"
        )
    return value


def path(value: object, label: str) -> Path:
    """``value``, a path given as a str or ``os.PathLike`` of one, as a ``Path``;
    ``InvalidArgumentError`` naming ``label`` otherwise, when it is empty, or when it holds
    a NUL (which no path may: every look at the disk would raise ``ValueError``)."""
    try:
        text = os.fspath(value) if isinstance(value, str | os.PathLike) else None
    except TypeError:  # a PathLike whose __fspath__ gives no str nor bytes
        text = None
    if not isinstance(text, str):
        raise InvalidArgumentError(f"{label} must be a str or a path, got {shown(value)}")
    if "\x00" in text:
        raise InvalidArgumentError(f"{label} must not hold a NUL character: {text!r}")
    if not text:  # Path("") is the current folder: a path left blank by mistake, mostly
        raise InvalidArgumentError(f"{label} must not be empty (write '.' for this folder)")
    try:  # a name read from the disk keeps its undecodable bytes as escapes: those pass
        os.fsencode(text)
    except UnicodeEncodeError as e:
        raise InvalidArgumentError(
            f"{label} holds {text[e.start]!r} at position {e.start}, which no file name can"
        ) from None
    return Path(text)


def items(value: object) -> bool:
    """Whether ``value`` holds items a call takes one by one: iterable, and no str,
    bytes, mapping, or 0-d array (whose iteration raises ``TypeError``)."""
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
        return False
    return not (isinstance(value, np.ndarray) and value.ndim == 0)


def names(keys: Iterable[object]) -> list[str]:
    """``keys`` as a message lists them, sorted: str keys as they are, any other (which
    may not sort among str, or have a repr of its own that raises) as ``shown`` gives it."""
    return sorted(k if type(k) is str else shown(k) for k in keys)


def number(value: object, label: str, low: float | None = None, high: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise InvalidArgumentError(f"{label} must be a number, got {type(value).__name__}")
    try:
        x = float(value)
    except OverflowError:
        raise InvalidArgumentError(f"{label} is too large for a float") from None
    if not math.isfinite(x):
        raise InvalidArgumentError(f"{label} must be a finite number, got {x}")
    if (low is not None and x < low) or (high is not None and x > high):
        raise InvalidArgumentError(f"{label} must be in [{low}, {high}], got {x}")
    return x


def count(value: object, label: str, low: int = 0, high: int = MAX_COUNT) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise InvalidArgumentError(f"{label} must be an int >= {low}, got {shown(value)}")
    if value > high:
        raise InvalidArgumentError(f"{label} must be at most {high}, got {shown(value)}")
    return value


def seconds(value: object, label: str) -> float:
    """A number of seconds >= 0; infinity stands for "never"."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise InvalidArgumentError(f"{label} must be a number of seconds >= 0, got {shown(value)}")
    return value


def timestamp(value: object, label: str) -> float:
    """Unix seconds from a number or a timezone-aware datetime, refused unless a datetime
    can hold it (years 1 to 9999 in UTC): every stored time must be showable as a date."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise InvalidArgumentError(f"{label} must be timezone-aware (or unix seconds)")
        # Year 1 or 9999 in a zone ahead of or behind UTC can fall outside in UTC.
        return times.check(value.timestamp(), label)
    return times.check(number(value, label), label)


def flag(value: object, label: str) -> bool:
    if not isinstance(value, bool | np.bool_):
        raise InvalidArgumentError(f"{label} must be a bool, got {type(value).__name__}")
    return bool(value)


def metadata(value: object) -> tuple[dict[str, Any], str]:
    """The metadata as stored (a JSON round trip) and its JSON text."""
    if value is None:
        return {}, "{}"
    if not isinstance(value, Mapping):
        raise InvalidArgumentError(f"metadata must be a dict, got {type(value).__name__}")
    if not all(isinstance(k, str) for k in value):
        raise InvalidArgumentError("metadata keys must be str")
    if UNIQUE_KEY in value:
        raise InvalidArgumentError(
            f"metadata key {UNIQUE_KEY!r} is reserved: it indexes the record's unique flag "
            "(read it as record.unique; filter on it with unique=True)"
        )
    try:
        encoded = json.dumps(value, allow_nan=False, separators=(",", ":"), ensure_ascii=False)
    except RecursionError:
        raise InvalidArgumentError(
            f"metadata is nested more than {MAX_METADATA_DEPTH} levels deep"
        ) from None
    except (TypeError, ValueError) as e:
        raise InvalidArgumentError(f"metadata must be JSON-serialisable: {e}") from None
    # NUL is escaped in JSON text (\u0000); a lone surrogate is kept as it is.
    clean(encoded, "metadata", nul=True)
    # What a later read returns, built from the value (no parse of the text just written).
    try:
        return _as_read(value, 0), encoded
    except _KeyNotStr:
        raise InvalidArgumentError(
            f"{_key_not_str(value, 'metadata')}: metadata keys must be str at every level "
            "(JSON would turn it into one, changing the value or merging two keys)"
        ) from None


#: Below this many bits an int is always a finite double.
_DOUBLE_BITS = 1000


class _KeyNotStr(Exception):
    """A dict key ``_as_read`` met that is not a str (``metadata`` then names where)."""


def _as_read(value: Any, depth: int) -> Any:
    """``value`` as ``json.loads(json.dumps(value))`` gives it back, for a value that
    ``json.dumps`` accepted: tuples become lists, subclasses their base type; refuses
    dict keys that are not str (``_KeyNotStr``) and dicts and lists nested deeper than
    ``MAX_METADATA_DEPTH`` below the top level (lists too, which the engine does not
    descend into but the database keeps)."""
    if isinstance(value, dict):
        if depth > MAX_METADATA_DEPTH:
            raise InvalidArgumentError(
                f"metadata is nested more than {MAX_METADATA_DEPTH} levels deep"
            )
        return {_key(k): _as_read(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        if depth > MAX_METADATA_DEPTH:
            raise InvalidArgumentError(
                f"metadata is nested more than {MAX_METADATA_DEPTH} levels deep"
            )
        return [_as_read(v, depth + 1) for v in value]
    if value is None or value is True or value is False:
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        # The engine reads a JSON number past 64 bits as a double, and refuses one no
        # double holds: refused here, before the batch it would fail is written.
        if value.bit_length() > _DOUBLE_BITS:
            try:
                float(value)
            except OverflowError:
                raise InvalidArgumentError(
                    f"metadata holds an int of {value.bit_length()} bits, larger than any "
                    "number a record can hold (about 1.8e308)"
                ) from None
        return int.__int__(value)
    return float.__float__(value)


def _key(key: Any) -> str:
    """A dict key as JSON writes it, a str (a subclass becomes its base type)."""
    if isinstance(key, str):
        return str.__str__(key)
    raise _KeyNotStr


def _key_not_str(value: Any, at: str) -> str | None:
    """Where in ``value`` (written as ``at``) the first dict key that is not a str is, in
    ``_as_read``'s order, which met no deeper nesting than ``MAX_METADATA_DEPTH`` first."""
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                return f"{at} has the key {shown(k)} ({type(k).__name__})"
            found = _key_not_str(v, f"{at}[{shown(k)}]")
            if found is not None:
                return found
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            found = _key_not_str(v, f"{at}[{i}]")
            if found is not None:
                return found
    return None


def scope_keys(scope: Mapping[str, Any]) -> None:
    unknown = set(scope) - set(SCOPE_FIELDS)
    if unknown:
        raise InvalidArgumentError(
            f"unknown argument(s) {names(unknown)}; scope fields are {list(SCOPE_FIELDS)}"
        )


def weights(value: Mapping[str, float] | None) -> dict[str, float] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise InvalidArgumentError(f"weights must be a dict, got {type(value).__name__}")
    unknown = set(value) - WEIGHT_KEYS
    if unknown:
        raise InvalidArgumentError(
            f"unknown weight(s) {names(unknown)}; expected {sorted(WEIGHT_KEYS)}"
        )
    return {k: number(v, f"weights[{k!r}]", 0.0) for k, v in value.items()}


class _Random(threading.local):
    """Random hex digits drawn from the OS 4 kB at a time: one ``urandom`` call per 256
    ids instead of one each (a system call that cost more than the rest of ``new_id``)."""

    hex = ""
    at = 0


_random = _Random()


def _forget_random() -> None:
    # A forked child must not hand out the ids its parent will.
    _random.hex, _random.at = "", 0


os.register_at_fork(after_in_child=_forget_random)


def new_id() -> str:
    """A random (version 4) UUID string, several times cheaper than ``str(uuid.uuid4())``."""
    r = _random
    if r.at >= len(r.hex):
        r.hex, r.at = os.urandom(4096).hex(), 0
    h = r.hex[r.at : r.at + 32]
    r.at += 32
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{'89ab'[int(h[16], 16) & 3]}{h[17:20]}-{h[20:32]}"


_F32 = np.finfo(np.float32)
#: Float32 sums of squares that settle a vector as usable (see ``usable_vectors``).
_SURE = (1e-30, 1e30)


def _vector_checks(
    vectors: FloatArray,
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_], npt.NDArray[np.bool_], npt.NDArray[Any]]:
    finite = np.asarray(np.isfinite(vectors).all(axis=1))
    nonzero = np.asarray((vectors != 0).any(axis=1))
    with np.errstate(over="ignore", invalid="ignore"):
        norm = np.sqrt(np.square(vectors, dtype=np.float64).sum(axis=1))
    # The norm must be a positive normal float32 whose reciprocal is one too: 1e-45
    # everywhere has a subnormal norm, 1e38 everywhere an infinite one.
    scalable = (norm >= float(_F32.tiny)) & (norm <= 1.0 / float(_F32.tiny))
    return finite, nonzero, scalable, norm


def usable_vectors(vectors: FloatArray) -> npt.NDArray[np.bool_]:
    """Which rows ``check_vectors`` accepts."""
    # A float32 sum of squares well inside the range can come only from finite
    # components, not all zero, whose norm is scalable: most rows (those a store
    # wrote, near unit length) are settled by it, at a tenth of the float64 checks'
    # cost; the others take those.
    with np.errstate(over="ignore", invalid="ignore"):
        sq = np.einsum("ij,ij->i", vectors, vectors, dtype=np.float32, casting="same_kind")
    ok: npt.NDArray[np.bool_] = (sq >= _SURE[0]) & (sq <= _SURE[1])
    if not ok.all():
        unsure = np.flatnonzero(~ok)
        finite, nonzero, scalable, _ = _vector_checks(vectors[unsure])
        ok[unsure] = finite & nonzero & scalable
    return ok


def check_vectors(vectors: FloatArray, rows: Sequence[int] | None, label: str) -> None:
    """Finite, non-zero and scalable to unit length in float32 (the engine's rule in
    ``check_rows``), all rows at once; names the first bad record (its number in
    ``rows``; with ``rows=None``, the one record of a single add, no number)."""
    finite, nonzero, scalable, norm = _vector_checks(vectors)
    bad = np.flatnonzero(~(finite & nonzero & scalable))
    if bad.size:
        i = int(bad[0])
        if not finite[i]:
            what = "has a non-finite value (NaN or infinity)"
        elif not nonzero[i]:
            what = "is all zeros"
        else:
            what = (
                f"has norm {norm[i]:.3g}, outside the range of positive normal float32 "
                "values, so it cannot be scaled to unit length"
            )
        where = "" if rows is None else f"record {rows[i]}: "
        raise InvalidArgumentError(f"{where}{label} {what}")


# What numpy takes as a number but is none.
_NOT_NUMBERS = (bool, np.bool_, str, bytes)


def _items(value: object) -> Iterable[object]:
    """The components of a vector given as a list or tuple (nothing else is looked into)."""
    return value if isinstance(value, list | tuple) else ()


def vector(
    value: object, label: str, dim: int | None, check_values: bool = True, any_length: bool = False
) -> FloatArray:
    """``value`` as a float32 vector of the store's dimension (finite and non-zero, unless
    ``check_values`` is off because the caller checks a whole batch at once); of any length
    on a store without vectors where ``any_length`` allows it (a vector it will not use)."""
    if dim is None and not any_length:
        raise InvalidArgumentError(
            f"{label} given, but this store has no vector space (it was opened with embedder=None)"
        )
    if type(value) is np.ndarray and value.dtype == np.float32:
        v: FloatArray = value
    else:
        try:
            # Numbers only: numpy would make True 1.0 and the text "1.5" 1.5, alone or
            # among numbers.
            raw = value if isinstance(value, np.ndarray) else np.asarray(value)
            if raw.dtype.kind not in "fiuO":
                raise TypeError(f"got {raw.dtype} values")
            if raw.dtype.kind == "O" or not isinstance(value, np.ndarray):
                items = raw.flat if raw.dtype.kind == "O" else _items(value)
                if odd := next((x for x in items if isinstance(x, _NOT_NUMBERS)), None):
                    raise TypeError(f"got {type(odd).__name__} values")
            # A float past float32's range becomes inf, which the value checks name.
            with np.errstate(over="ignore", invalid="ignore"):
                v = np.asarray(value, dtype=np.float32)
        except (TypeError, ValueError) as e:
            raise InvalidArgumentError(f"{label} must be an array of numbers: {e}") from None
        except OverflowError:  # a Python int past float range (numpy makes floats inf)
            raise InvalidArgumentError(f"{label} holds a number too large for a float") from None
    if dim is None:
        if v.ndim != 1 or not v.size:
            raise InvalidArgumentError(f"{label} must be one vector, got shape {v.shape}")
    elif v.shape != (dim,):
        raise DimensionMismatchError(
            f"{label} has shape {v.shape}; this store's vectors have dimension {dim}"
        )
    if check_values:
        check_vectors(v[None, :], None, label)
    return v
