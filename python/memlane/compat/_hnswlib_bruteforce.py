"""hnswlib's ``BFIndex`` (exact search), re-exported by ``memlane.compat.hnswlib``."""

from __future__ import annotations

import os
import sys
import threading

import numpy as np
import numpy.typing as npt

from memlane.compat._hnswlib_common import (
    _BF_FULL,
    _TOO_FEW,
    Filter,
    _allowed,
    _Attributes,
    _check_space,
    _default_threads,
    _empty,
    _labels,
    _normalised,
    _query_k,
    _rows,
    _size,
)
from memlane.compat._hnswlib_files import (
    _DAMAGE,
    _FORMAT,
    _MAGIC,
    _array_bytes,
    _corrupted,
    _Damaged,
    _header_int,
    _HnswlibFile,
    _parse,
    _path,
    _read_bytes,
    _why,
    _write,
)

# Distances computed at once by a search: 64 MiB of float32.
_BLOCK_CELLS = 1 << 24
# hnswlib's messages for a capacity whose arrays it cannot allocate.
_NO_MEMORY = "Not enough memory: BruteforceSearch failed to allocate data"
_LOAD_NO_MEMORY = "Not enough memory: loadIndex failed to allocate data"


def _fits(capacity: int, dim: int) -> bool:
    """Whether ``capacity`` vectors of ``dim`` floats and their labels fit in this
    machine's memory: hnswlib allocates them all up front, and refuses a capacity it
    cannot hold. (Here the arrays grow with the labels held instead.)"""
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # no sysconf (Windows): the address space
        memory = sys.maxsize
    return capacity * (dim * 4 + 8) <= memory


class BFIndex(_Attributes):
    """Exact (brute-force) search with hnswlib's ``BFIndex`` API. Safe to share between
    threads."""

    # Pickles name the class where programs import it from, not this module.
    __module__ = "memlane.compat.hnswlib"

    def __init__(self, space: str, dim: int) -> None:
        self._space = _check_space(space)
        self._dim = int(dim)
        self._max_elements = 0
        self._inited = False
        self._data = np.zeros((0, self._dim), dtype=np.float32)
        self._labels = np.zeros(0, dtype=np.uint64)
        self._rows: dict[int, int] = {}
        self._next_label = 0
        self._num_threads = _default_threads()
        # Held by every change, and by a search while it takes the rows it reads.
        self._lock = threading.Lock()

    def init_index(self, max_elements: int) -> None:
        capacity = _size(max_elements, "max_elements")
        if not _fits(capacity, self._dim):
            raise RuntimeError(_NO_MEMORY)
        with self._lock:
            if self._inited:  # as hnswlib: the labels held are kept
                raise RuntimeError("The index is already initiated.")
            self._start(capacity, np.zeros(0, np.uint64), np.zeros((0, self._dim), np.float32))

    def _start(
        self, capacity: int, labels: npt.NDArray[np.uint64], data: npt.NDArray[np.float32]
    ) -> None:
        """Holds ``labels`` and their rows of ``data``, with room for ``capacity`` labels."""
        self._max_elements = capacity
        self._data, self._labels = data, labels
        self._rows = {int(label): i for i, label in enumerate(labels.tolist())}
        self._next_label = labels.shape[0]
        self._inited = True

    def _grow(self, rows: int) -> None:
        """Room in the arrays for ``rows`` rows (doubling, up to the capacity)."""
        if rows <= self._labels.shape[0]:
            return
        size = min(max(rows, 2 * self._labels.shape[0], 16), self._max_elements)
        held = len(self._rows)
        try:
            data = np.zeros((size, self._dim), dtype=np.float32)
            labels = np.zeros(size, dtype=np.uint64)
        except (MemoryError, ValueError):  # numpy's "array is too big" is a ValueError
            raise RuntimeError(_NO_MEMORY) from None
        data[:held], labels[:held] = self._data[:held], self._labels[:held]
        self._data, self._labels = data, labels

    def _check(self) -> None:
        if not self._inited:
            raise RuntimeError("The index is not initiated: call init_index or load_index")

    def add_items(self, data: npt.ArrayLike, ids: npt.ArrayLike | None = None) -> None:
        """Adds rows under ``ids`` (default: continuing labels); a present label is updated."""
        self._check()
        rows = _rows(data, self._dim)
        if self._space == "cosine":
            rows = _normalised(rows)
        with self._lock:
            labels = _labels(ids, rows.shape[0], self._next_label)
            for row, label in enumerate(labels):
                at = self._rows.get(label)
                if at is None:
                    if len(self._rows) >= self._max_elements:
                        raise RuntimeError(_BF_FULL)
                    at = len(self._rows)
                    self._grow(at + 1)
                    self._rows[label] = at
                    self._labels[at] = label
                self._data[at] = rows[row]
            self._next_label += rows.shape[0]

    def delete_vector(self, label: int) -> None:
        """Removes ``label``; an unknown label is ignored, as in hnswlib."""
        self._check()
        with self._lock:
            at = self._rows.pop(int(label), None)
            if at is None:
                return
            last = len(self._rows)
            if at != last:
                # The last row fills the hole.
                moved = int(self._labels[last])
                self._data[at] = self._data[last]
                self._labels[at] = moved
                self._rows[moved] = at

    def knn_query(
        self,
        data: npt.ArrayLike,
        k: int = 1,
        num_threads: int = -1,
        filter: Filter = None,
    ) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.float32]]:
        """The exact ``k`` nearest labels of each row and their distances."""
        self._check()
        k = _query_k(k)
        queries = _rows(data, self._dim)
        if k == 0 or queries.shape[0] == 0:
            return _empty(queries.shape[0], k)
        with self._lock:
            # Copies: a delete moves the last row into its hole in place, and an add
            # writes rows or swaps the arrays, while this search reads them.
            n = len(self._rows)
            stored, labels = self._data[:n].copy(), self._labels[:n].copy()
        if filter is not None:
            if callable(filter):
                keep = np.fromiter((bool(filter(int(x))) for x in labels), dtype=bool, count=n)
            else:
                keep = np.isin(labels, _allowed(filter, lambda: labels, n))
            stored, labels = stored[keep], labels[keep]
        if labels.shape[0] < k:
            raise RuntimeError(_TOO_FEW)
        if self._space == "cosine":
            queries = _normalised(queries)
        sq = np.einsum("ij,ij->i", stored, stored) if self._space == "l2" else None
        out_labels = np.empty((queries.shape[0], k), dtype=np.uint64)
        out_dist = np.empty((queries.shape[0], k), dtype=np.float32)
        # A block of queries at a time: the distances of all of them to every stored row
        # at once were a queries x rows matrix (1,000 by a million: 3.7 GiB); under l2
        # the k nearest are measured again, k x dim values a query.
        step = max(1, _BLOCK_CELLS // max(labels.shape[0], k * self._dim))
        for at in range(0, queries.shape[0], step):
            block = queries[at : at + step]
            found, dist = self._nearest(block, stored, sq, k)
            out_labels[at : at + step] = labels[found]
            out_dist[at : at + step] = dist
        return out_labels, out_dist

    def _nearest(
        self,
        queries: npt.NDArray[np.float32],
        stored: npt.NDArray[np.float32],
        sq: npt.NDArray[np.float32] | None,
        k: int,
    ) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.float32]]:
        """The rows of ``stored`` nearest each query, nearest first, and their distances
        (``sq``: the stored rows' squared norms, under l2)."""
        dots = queries @ stored.T
        if sq is not None:
            qq = np.einsum("ij,ij->i", queries, queries)
            dist = np.maximum(qq[:, None] + sq[None, :] - 2 * dots, 0)
        else:
            dist = 1 - dots
        dist = dist.astype(np.float32, copy=False)
        top = np.argpartition(dist, k - 1, axis=1)[:, :k] if k < dist.shape[1] else None
        if top is None:
            top = np.broadcast_to(np.arange(dist.shape[1]), dist.shape)
        part = np.take_along_axis(dist, top, axis=1)
        if sq is not None:
            # The expansion above loses digits to cancellation: measure the
            # chosen ones directly.
            diff = stored[top] - queries[:, None, :]
            part = np.einsum("qkd,qkd->qk", diff, diff).astype(np.float32, copy=False)
        order = np.argsort(part, axis=1, kind="stable")
        return np.take_along_axis(top, order, axis=1), np.take_along_axis(part, order, axis=1)

    def set_num_threads(self, num_threads: int) -> None:
        self._num_threads = int(num_threads)

    def get_max_elements(self) -> int:
        return self._max_elements

    def get_current_count(self) -> int:
        return len(self._rows)

    def save_index(self, path_to_index: str | bytes | os.PathLike[str]) -> None:
        path = _path(path_to_index)
        self._check()
        with self._lock:
            n = len(self._rows)
            meta = {
                "kind": "BFIndex",
                "format": _FORMAT,
                "space": self._space,
                "dim": self._dim,
                "max_elements": self._max_elements,
                "count": n,
            }
            blobs = [_array_bytes(self._labels[:n]), _array_bytes(self._data[:n])]
        _write(path, meta, blobs)

    def load_index(
        self, path_to_index: str | bytes | os.PathLike[str], max_elements: int = 0
    ) -> None:
        """Reads a file of ``save_index``, or one written by hnswlib's ``BFIndex``.

        The capacity is the file's: ``max_elements`` is ignored, as hnswlib's ``BFIndex``
        ignores it.
        """
        path = _path(path_to_index)
        raw = _read_bytes(path)
        try:
            if raw.startswith(_MAGIC):
                meta, blobs = _parse(raw, path, "BFIndex", self._space, self._dim)
                if len(blobs) != 2:
                    raise _Damaged("is truncated")
                n = _header_int(meta, "count")
                labels = np.frombuffer(blobs[0], dtype=np.uint64)
                data = np.frombuffer(blobs[1], dtype=np.float32).reshape(n, self._dim)
                saved_max = _header_int(meta, "max_elements", low=n)
                if labels.shape != (n,):
                    raise _Damaged("is inconsistent: its counts disagree")
                if np.unique(labels).size != n:
                    raise _Damaged("is inconsistent: a label appears twice")
            else:
                saved = _HnswlibFile(raw, self._dim, path, brute=True)
                n, labels, data, saved_max = (
                    saved.count,
                    saved.labels,
                    saved.vectors,
                    saved.max_elements,
                )
        except _DAMAGE as e:
            raise _corrupted(path, _why(e)) from None
        capacity = int(saved_max)
        if not _fits(capacity, self._dim):
            raise RuntimeError(_LOAD_NO_MEMORY)
        # Arrays for the labels held only, as many as the file holds: writable copies.
        try:
            labels, data = labels.copy(), data.copy()
        except MemoryError:
            raise RuntimeError(_LOAD_NO_MEMORY) from None
        # Nothing has changed until here.
        with self._lock:
            self._start(capacity, labels, data)

    def __repr__(self) -> str:
        return f"<memlane.compat.hnswlib.BFIndex(space={self._space!r}, dim={self._dim})>"
