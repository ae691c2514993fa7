"""What both of ``memlane.compat.hnswlib``'s indexes share: hnswlib's argument checks,
its error messages and the shapes of its empty answers."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from collections.abc import Set as AbstractSet
from typing import Any

import numpy as np
import numpy.typing as npt

_SPACES = ("l2", "ip", "cosine")
_MISSING = np.uint64(2**64 - 1)
_LAST = 2**64 - 1  # the first label out of range: u64::MAX is "no result"

# hnswlib's messages, word for word: programs match on them.
_NOT_FOUND = "Label not found"
_FULL = "The number of elements exceeds the specified limit"
_TOO_FEW = "Cannot return the results in a contiguous 2D array. Probably ef or M is too small"
_NO_REPLACE = "Replacement of deleted elements is disabled in constructor"

Filter = Callable[[int], object] | npt.ArrayLike | Iterable[int] | None


def _default_threads() -> int:
    return os.cpu_count() or 1


def _check_space(space: str) -> str:
    if space not in _SPACES:
        raise RuntimeError("Space name must be one of l2, ip, or cosine.")
    return space


def _rows(data: npt.ArrayLike, dim: int) -> npt.NDArray[np.float32]:
    """``data`` as a C-contiguous float32 (n, dim) array; a 1-d vector is one row."""
    array = np.asarray(data, dtype=np.float32)
    if array.ndim == 1:
        array = array.reshape(1, -1)
    elif array.ndim != 2:
        raise RuntimeError(
            f"Input vector data wrong shape. Number of dimensions {array.ndim}. "
            "Data must be a 1D or 2D array."
        )
    if array.shape[1] != dim and array.shape[0] > 0:
        raise RuntimeError("Wrong dimensionality of the vectors")
    return np.ascontiguousarray(array)


def _normalised(rows: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    # hnswlib multiplies by 1 / (norm + 1e-30), so a zero vector stays zero.
    if rows.shape[0] == 1:  # one query: fewer numpy calls
        row = rows[0]
        scale = np.float32(1) / (np.sqrt(np.dot(row, row)) + np.float32(1e-30))
        single: npt.NDArray[np.float32] = rows * scale
        return single
    norms = np.sqrt(np.einsum("ij,ij->i", rows, rows, dtype=np.float32))
    inverse = np.float32(1) / (norms + np.float32(1e-30))
    return np.ascontiguousarray(rows * inverse[:, None], dtype=np.float32)


def _labels(ids: npt.ArrayLike | None, rows: int, start: int) -> list[int]:
    """The labels of an add: ``ids`` checked against ``rows``, or ``start, start+1, ...``."""
    if ids is None:
        return list(range(start, start + rows))
    array = np.asarray(ids)
    if not ((array.ndim == 1 and array.shape[0] == rows) or (array.ndim == 0 and rows == 1)):
        raise RuntimeError(
            f"The input label shape {array.ndim} does not match the input data vector shape {rows}"
        )
    if array.size and array.dtype.kind not in "iu":
        if array.dtype.kind == "f" and np.all(np.mod(array, 1) == 0):
            array = array.astype(np.int64)
        else:
            raise TypeError(f"labels must be integers, got an array of dtype {array.dtype}")
    labels = [int(x) for x in array.reshape(-1)]
    for label in labels:
        if label < 0 or label >= 2**64:
            raise OverflowError(f"Python integer {label} out of bounds for uint64")
        if label == 2**64 - 1:
            raise ValueError(f"label {label} is reserved (memlane's 'no result' label)")
    return labels


def _query_k(k: int) -> int:
    if isinstance(k, bool) or not isinstance(k, int | np.integer):
        raise TypeError(f"k must be an int, got {type(k).__name__}")
    if k < 0:
        raise TypeError(f"k must be non-negative, got {k}")
    return int(k)


def _allowed(
    labels: Any, held: Callable[[], npt.NDArray[np.uint64]], count: int
) -> npt.NDArray[np.uint64]:
    """An allowed-labels filter as a uint64 array (labels outside u64 cannot match).

    ``held`` gives the labels the index holds and ``count`` how many there are. A filter
    the caller has not materialised (a range, a set, any iterable) is never turned into
    more than ``count`` labels: ``range(0, 10**12)`` on a small index costs what the
    index holds, not 8 TB.
    """
    if isinstance(labels, np.ndarray):
        array = labels.reshape(-1)
    elif isinstance(labels, list | tuple):
        # Already materialised by the caller: its size is theirs.
        array = _in_u64(labels)
    elif isinstance(labels, range):
        return _range_allowed(labels, held, count)
    elif isinstance(labels, AbstractSet) and len(labels) <= count:
        array = _in_u64(labels)
    elif isinstance(labels, AbstractSet):
        array = np.fromiter((x for x in held().tolist() if x in labels), dtype=np.uint64)
    else:
        return _iterable_allowed(labels, held, count)
    if array.dtype.kind == "i":
        array = array[array >= 0]
    elif array.size and array.dtype.kind != "u":
        raise TypeError(f"allowed labels must be integers, got dtype {array.dtype}")
    return array.astype(np.uint64, copy=False)


def _in_u64(labels: Iterable[Any]) -> npt.NDArray[np.uint64]:
    return np.fromiter((x for x in labels if 0 <= x < _LAST), dtype=np.uint64)


def _range_allowed(
    labels: range, held: Callable[[], npt.NDArray[np.uint64]], count: int
) -> npt.NDArray[np.uint64]:
    """The labels of ``labels`` that are valid and held, by arithmetic on the range."""
    ascending = labels if labels.step > 0 else labels[::-1]
    start, stop, step = ascending.start, ascending.stop, ascending.step
    if start < 0:
        start += -(start // step) * step  # the first element >= 0
    window = range(start, min(stop, _LAST), step)
    if len(window) <= count:
        return np.fromiter(window, dtype=np.uint64, count=len(window))
    # More labels than the index holds, so step < 2**64: keep the held labels on it.
    ids = held()
    ids = ids[(ids >= np.uint64(window.start)) & (ids < np.uint64(window.stop))]
    if window.step > 1:
        ids = ids[(ids - np.uint64(window.start)) % np.uint64(window.step) == 0]
    return ids


def _iterable_allowed(
    labels: Iterable[Any], held: Callable[[], npt.NDArray[np.uint64]], count: int
) -> npt.NDArray[np.uint64]:
    """The held labels an iterable yields, keeping no more than the index holds.

    The iteration stops once every held label has been seen, so an endless iterable
    that covers them (``itertools.count()``) ends too.
    """
    if count == 0:
        return np.zeros(0, dtype=np.uint64)
    remaining = set(held().tolist())
    found: list[int] = []
    for label in labels:
        if isinstance(label, bool) or not isinstance(label, int | np.integer):
            raise TypeError(f"allowed labels must be integers, got {type(label).__name__}")
        if int(label) in remaining:
            remaining.discard(int(label))
            found.append(int(label))
            if not remaining:
                break
    return np.asarray(found, dtype=np.uint64)


def _check_full(labels: npt.NDArray[np.uint64]) -> None:
    if labels.size and bool((labels == _MISSING).any()):
        raise RuntimeError(_TOO_FEW)


def _empty(rows: int, k: int) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.float32]]:
    return np.zeros((rows, k), dtype=np.uint64), np.zeros((rows, k), dtype=np.float32)


class _Attributes:
    """hnswlib's ``num_threads``, ``space`` and ``dim`` attributes, shared by both indexes."""

    _num_threads: int
    _space: str
    _dim: int

    @property
    def num_threads(self) -> int:
        return self._num_threads

    @num_threads.setter
    def num_threads(self, value: int) -> None:
        self._num_threads = int(value)

    @property
    def space(self) -> str:
        return self._space

    @property
    def dim(self) -> int:
        return self._dim
