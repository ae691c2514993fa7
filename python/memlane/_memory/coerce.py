"""Argument checks: each returns the value in its canonical type or raises
:class:`~memlane.errors.InvalidArgumentError` naming the argument."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import numpy as np
import numpy.typing as npt

from memlane.errors import DimensionMismatchError, InvalidArgumentError
from memlane.records import SCOPE_FIELDS

FloatArray = npt.NDArray[np.float32]

WEIGHT_KEYS = frozenset({"relevance", "importance", "recency"})


def text(value: object, label: str) -> str:
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{label} must be a str, got {type(value).__name__}")
    if not value.strip():
        raise InvalidArgumentError(f"{label} must not be empty")
    return value


def number(value: object, label: str, low: float | None = None, high: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise InvalidArgumentError(f"{label} must be a number, got {type(value).__name__}")
    x = float(value)
    if not math.isfinite(x):
        raise InvalidArgumentError(f"{label} must be a finite number, got {x}")
    if (low is not None and x < low) or (high is not None and x > high):
        raise InvalidArgumentError(f"{label} must be in [{low}, {high}], got {x}")
    return x


def count(value: object, label: str, low: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise InvalidArgumentError(f"{label} must be an int >= {low}, got {value!r}")
    return value


def timestamp(value: object, label: str) -> float:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise InvalidArgumentError(f"{label} must be timezone-aware (or unix seconds)")
        return value.timestamp()
    return number(value, label)


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
    try:
        encoded = json.dumps(value, allow_nan=False, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError) as e:
        raise InvalidArgumentError(f"metadata must be JSON-serialisable: {e}") from None
    # Round-trip: what is stored is what a later read returns.
    return json.loads(encoded), encoded


def scope_keys(scope: Mapping[str, Any]) -> None:
    unknown = set(scope) - set(SCOPE_FIELDS)
    if unknown:
        raise InvalidArgumentError(
            f"unknown argument(s) {sorted(unknown)}; scope fields are {list(SCOPE_FIELDS)}"
        )


def weights(value: Mapping[str, float] | None) -> dict[str, float] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise InvalidArgumentError(f"weights must be a dict, got {type(value).__name__}")
    unknown = set(value) - WEIGHT_KEYS
    if unknown:
        raise InvalidArgumentError(
            f"unknown weight(s) {sorted(unknown)}; expected {sorted(WEIGHT_KEYS)}"
        )
    return {k: number(v, f"weights[{k!r}]", 0.0) for k, v in value.items()}


def new_id() -> str:
    """A random (version 4) UUID string, several times cheaper than ``str(uuid.uuid4())``."""
    h = os.urandom(16).hex()
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{'89ab'[int(h[16], 16) & 3]}{h[17:20]}-{h[20:32]}"


def check_vectors(vectors: FloatArray, rows: Sequence[int], label: str) -> None:
    """Finite and non-zero, all rows at once; names the first bad record."""
    finite = np.asarray(np.isfinite(vectors).all(axis=1))
    nonzero = np.asarray((vectors != 0).any(axis=1))
    bad = np.flatnonzero(~(finite & nonzero))
    if bad.size:
        i = int(bad[0])
        what = "has a non-finite value (NaN or infinity)" if not finite[i] else "is all zeros"
        raise InvalidArgumentError(f"record {rows[i]}: {label} {what}")


def vector(value: object, label: str, dim: int | None, check_values: bool = True) -> FloatArray:
    """``value`` as a float32 vector of the store's dimension (finite and non-zero, unless
    ``check_values`` is off because the caller checks a whole batch at once)."""
    if dim is None:
        raise InvalidArgumentError(
            f"{label} given, but this store has no vector space (it was opened with embedder=None)"
        )
    if type(value) is np.ndarray and value.dtype == np.float32:
        v: FloatArray = value
    else:
        try:
            v = np.asarray(value, dtype=np.float32)
        except (TypeError, ValueError) as e:
            raise InvalidArgumentError(f"{label} must be an array of numbers: {e}") from None
    if v.shape != (dim,):
        raise DimensionMismatchError(
            f"{label} has shape {v.shape}; this store's vectors have dimension {dim}"
        )
    if check_values:
        check_vectors(v[None, :], [0], label)
    return v
