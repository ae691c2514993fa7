"""What both of ``memlane.compat.hnswlib``'s indexes share: hnswlib's argument checks,
its error messages and the shapes of its empty answers."""

from __future__ import annotations

import operator
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from collections.abc import Set as AbstractSet
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from memlane.errors import InvalidArgumentError, shown

_SPACES = ("l2", "ip", "cosine")
_MISSING = np.uint64(2**64 - 1)
_LAST = 2**64 - 1  # the first label out of range: u64::MAX is "no result"

# hnswlib's messages, word for word: programs match on them.
_NOT_FOUND = "Label not found"
_FULL = "The number of elements exceeds the specified limit"
_BF_FULL = _FULL + "\n"  # BruteforceSearch's, with its line break
_TOO_FEW = "Cannot return the results in a contiguous 2D array. Probably ef or M is too small"
_NO_REPLACE = "Replacement of deleted elements is disabled in constructor"
_UPDATE_DELETED = (
    "Can't use addPoint to update deleted elements if replacement of deleted elements is enabled."
)
# The engine's words for a change it refuses from a filter callback of its own search.
_IN_CALLBACK = "the index cannot be changed from inside a callback of its own search"
# The largest norm the engine stores a vector with under l2 and ip (its MAX_RAW_NORM,
# so that a squared distance stays finite in float32).
_MAX_NORM = 2.0**62

Filter = Callable[[int], object] | npt.ArrayLike | Iterable[int] | None


def _size(value: object, name: str) -> int:
    """``value`` as hnswlib takes a ``size_t``: a negative one, or one of 2**64 or more
    (which a saved header cannot hold), is its ``TypeError``."""
    number: int = int(value)  # type: ignore[call-overload]
    if number < 0:
        raise TypeError(f"{name} must be non-negative, got {number}")
    if number >= 2**64:
        raise TypeError(f"{name} must be below 2**64, got {shown(number)}")
    return number


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


def _check_vectors(rows: npt.NDArray[np.float32], bounded: bool) -> None:
    """Refuses the vectors the engine would refuse, before anything changes: a value that
    is not finite, or (``bounded``: stored as given, not normalised) a norm above its limit."""
    if not np.isfinite(rows).all():
        raise InvalidArgumentError("vectors must be finite (no NaN or infinity)")
    if bounded and rows.size:
        norms = np.sqrt(np.einsum("ij,ij->i", rows, rows, dtype=np.float64))
        over = np.flatnonzero(norms > _MAX_NORM)
        if over.size:
            row = int(over[0])
            raise InvalidArgumentError(
                f"vector {row} has norm {norms[row]:e}, above {_MAX_NORM:e}: "
                "its distances would overflow"
            )


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
    # A whole float is taken as Python's int (through int64, 2**63 and above overflowed;
    # numpy makes a float64 of a uint64 label beside an int).
    whole = array.dtype.kind == "f" and np.all(np.mod(array, 1) == 0)
    if array.size and array.dtype.kind not in "iu" and not whole:
        raise TypeError(f"labels must be integers, got an array of dtype {array.dtype}")
    labels = [int(x) for x in array.reshape(-1)]
    for label in labels:
        if label < 0 or label >= 2**64:
            raise OverflowError(f"Python integer {label} out of bounds for uint64")
        if label == 2**64 - 1:
            raise ValueError(f"label {label} is reserved (memlane's 'no result' label)")
    return labels


@dataclass
class _Plan:
    """What one ``add_items`` call does, worked out before anything changes."""

    rows: dict[int, int] = field(default_factory=dict)  # label: the row of its vector
    restored: list[int] = field(default_factory=list)  # deleted labels given a vector again
    released: list[int] = field(default_factory=list)  # deleted labels new ones replace
    new: int = 0  # labels taking a new place
    failure: RuntimeError | None = None  # hnswlib's error at the row the call stops at


def _plan_add(
    labels: list[int],
    held: Callable[[int], bool],
    deleted: dict[int, None],
    room: int,
    replace: bool,
    replacing: bool,
) -> _Plan:
    """An add of rows under ``labels``, row by row as hnswlib's serial loop takes them.

    ``held`` says whether a live label is stored, ``deleted`` lists the labels marked
    deleted (oldest first), ``room`` is how many new places are left, ``replace`` is the
    call's ``replace_deleted`` and ``replacing`` the index's ``allow_replace_deleted``. A
    label given twice gets its later vector. At the first row hnswlib refuses, the plan
    stops with its error, keeping the rows before it, as hnswlib has stored them.
    """
    plan = _Plan()
    gone: set[int] = set()  # deleted labels this add restores or releases
    victims = iter(deleted)
    for row, label in enumerate(labels):
        if label in plan.rows:
            plan.rows[label] = row
            continue
        if label in deleted and label not in gone:
            if replacing and not replace:
                plan.failure = RuntimeError(_UPDATE_DELETED)
                break
            # Restored in its own place (hnswlib's replace_deleted reuses some deleted
            # place for it: here the one the label holds).
            plan.restored.append(label)
            gone.add(label)
        elif not held(label):  # a new label (a released one is no longer held)
            victim = next((v for v in victims if v not in gone), None) if replace else None
            if victim is not None:
                plan.released.append(victim)  # the new label takes its place
                gone.add(victim)
            elif plan.new >= room:
                plan.failure = RuntimeError(_FULL)
                break
            else:
                plan.new += 1
        plan.rows[label] = row
    return plan


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
    return np.fromiter((x for x in map(_label, labels) if 0 <= x < _LAST), dtype=np.uint64)


def _label(x: Any) -> int:
    """An allowed label as an int: a float (1.5) is refused, as a float array is, not cut."""
    try:
        if isinstance(x, bool):
            raise TypeError
        return operator.index(x)
    except TypeError:
        raise TypeError(f"allowed labels must be integers, got {type(x).__name__}") from None


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


class _Callbacks(threading.local):
    """The engines of an index this thread is searching with a filter callback, innermost
    last: each held still by the search's read lock while its callback runs."""

    def __init__(self) -> None:
        self.engines: list[Any] = []


class _Guarded:
    """The lock of an index whose engine changes together with bookkeeping of its own
    (labels counted, labels marked deleted): the engine locks itself, but each change
    takes this lock too, from its first check to its last update."""

    def _guards(self) -> None:
        self._lock = threading.Lock()
        self._callbacks = _Callbacks()

    @contextmanager
    def _locked(self, change: bool = True) -> Iterator[None]:
        """This index's lock, for a change (or a read of the whole index) to see no other
        change half done.

        In a filter callback of the index's own search (``_calling_back``) this thread
        holds the engine's read lock, which a writer holding this lock may be waiting
        for: there a change is refused, as the engine refuses it, and a read goes on
        without the lock, reading the engine the search holds still (``_searched``),
        never bookkeeping another thread may be changing.
        """
        if self._callbacks.engines:
            if change:
                raise InvalidArgumentError(_IN_CALLBACK)
            yield
            return
        with self._lock:
            yield

    @contextmanager
    def _calling_back(self, engine: Any) -> Iterator[None]:
        """Around a search of ``engine`` that calls a filter back (see ``_locked``)."""
        self._callbacks.engines.append(engine)
        try:
            yield
        finally:
            self._callbacks.engines.pop()

    def _searched(self) -> Any:
        """In a filter callback of this index's own search, the engine searched; else None."""
        engines = self._callbacks.engines
        return engines[-1] if engines else None


def _deleted_in(engine: Any, books: dict[int, None]) -> list[int]:
    """The labels ``engine`` holds hidden (marked deleted), in the order of ``books`` (the
    labels marked deleted, oldest first), which may lag the engine: a label hidden since
    comes last, one unhidden since is left out."""
    hidden = {int(x) for x in engine.hidden()}
    order = [label for label in books.copy() if label in hidden]  # copy: one C call
    return order + sorted(hidden.difference(order))


# The results one engine search may return (``hnsw::query::MAX_RESULTS`` in the core).
_CALL_RESULTS = 1 << 28

_Found = tuple[npt.NDArray[np.uint64], npt.NDArray[np.float32]]


def _in_parts(
    search: Callable[[npt.NDArray[np.float32]], _Found], rows: npt.NDArray[np.float32], k: int
) -> _Found:
    """``search`` of ``rows`` asked in parts of at most ``_CALL_RESULTS`` results (a kNN
    graph's build asks a million rows for 250 each), the answers joined."""
    step = max(1, _CALL_RESULTS // k)
    if rows.shape[0] <= step:
        return search(rows)
    parts = [search(rows[at : at + step]) for at in range(0, rows.shape[0], step)]
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
