"""hnswlib's Python API on memlane's Rust HNSW index.

``import memlane.compat.hnswlib as hnswlib`` and an hnswlib program runs unchanged:
:class:`Index` and :class:`BFIndex` take the same arguments, return the same shapes and
dtypes (labels ``uint64``, distances ``float32``, ``(n, k)``) and raise the same
exceptions with the same messages (``RuntimeError("Label not found")``, ``"The number
of elements exceeds the specified limit"``, ``"Cannot return the results in a contiguous
2D array. Probably ef or M is too small"``...).

Spaces: ``'l2'`` squared Euclidean distance, ``'ip'`` ``1 - dot``, ``'cosine'``
``1 - cos`` (vectors are normalised when added, as hnswlib does, so ``get_items``
returns unit vectors).

What differs from hnswlib:

- ``knn_query(filter=...)`` also takes the allowed labels themselves (a numpy array,
  set, list, tuple, range or frozenset): the filter then runs inside the engine, with
  no Python call per candidate. A callable is called on the labels the graph search
  reaches, as hnswlib calls it.
- Searches run on memlane's own thread pool: ``num_threads`` is kept and reported
  but does not size it.
- ``save_index`` writes memlane's format (hnswlib cannot read it); ``load_index`` reads
  it and also files written by hnswlib, rebuilding the graph from their vectors.
- ``BFIndex`` with ``'cosine'`` normalises queries as well as data, so its distances are
  ``1 - cos`` (hnswlib 0.8's brute-force index leaves queries unnormalised).
"""

from __future__ import annotations

import json
import os
import struct
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from memlane._core import HnswIndex
from memlane.errors import InvalidArgumentError

__all__ = ["BFIndex", "Index"]

_SPACES = ("l2", "ip", "cosine")
_MISSING = np.uint64(2**64 - 1)
_MAGIC = b"memlane.compat.hnswlib\n"
_FORMAT = 1

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


def _allowed(labels: Any) -> npt.NDArray[np.uint64]:
    """An allowed-labels filter as a uint64 array (labels outside u64 cannot match)."""
    if isinstance(labels, np.ndarray):
        array = labels.reshape(-1)
    else:
        array = np.fromiter(
            (x for x in labels if 0 <= x < 2**64 - 1),
            dtype=np.uint64,
        )
    if array.dtype.kind == "i":
        array = array[array >= 0]
    elif array.size and array.dtype.kind != "u":
        raise TypeError(f"allowed labels must be integers, got dtype {array.dtype}")
    return array.astype(np.uint64, copy=False)


def _check_full(labels: npt.NDArray[np.uint64]) -> None:
    if labels.size and bool((labels == _MISSING).any()):
        raise RuntimeError(_TOO_FEW)


def _empty(rows: int, k: int) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.float32]]:
    return np.zeros((rows, k), dtype=np.uint64), np.zeros((rows, k), dtype=np.float32)


def _write(path: str | os.PathLike[str], meta: dict[str, Any], blobs: list[bytes]) -> None:
    """Writes ``magic, meta (JSON), blobs`` to ``path`` through a renamed temporary file."""
    head = json.dumps(meta).encode()
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=target.name + ".", suffix=".tmp", dir=target.parent or ".")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(_MAGIC)
            for part in [head, *blobs]:
                f.write(struct.pack("<Q", len(part)))
                f.write(part)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _read_bytes(path: str | os.PathLike[str]) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError:
        raise RuntimeError("Cannot open file") from None


def _parse(
    raw: bytes, path: str | os.PathLike[str], kind: str
) -> tuple[dict[str, Any], list[bytes]]:
    """A file written by ``save_index``: its metadata and blobs."""
    parts: list[bytes] = []
    at = len(_MAGIC)
    while at < len(raw):
        if at + 8 > len(raw):
            raise RuntimeError(f"{os.fspath(path)!r} is truncated")
        (n,) = struct.unpack_from("<Q", raw, at)
        at += 8
        if at + n > len(raw):
            raise RuntimeError(f"{os.fspath(path)!r} is truncated")
        parts.append(raw[at : at + n])
        at += n
    if not parts:
        raise RuntimeError(f"{os.fspath(path)!r} is truncated")
    meta: dict[str, Any] = json.loads(parts[0])
    if meta.get("kind") != kind or meta.get("format") != _FORMAT:
        raise RuntimeError(
            f"{os.fspath(path)!r} holds a {meta.get('kind')} (format {meta.get('format')}), "
            f"not a {kind} of format {_FORMAT}"
        )
    return meta, parts[1:]


# hnswlib's own files: HierarchicalNSW::saveIndex writes these fields, then every
# element's level-0 record (links, vector, label), then the upper levels' links.
_HNSW_HEAD = struct.Struct("<6QiI3QdQ")
# BruteforceSearch::saveIndex: max_elements, bytes per element, count, then the records.
_BF_HEAD = struct.Struct("<3Q")
_DELETE_MARK = 0x01


class _HnswlibFile:
    """The vectors, labels and deleted marks of an index file written by hnswlib."""

    def __init__(self, raw: bytes, dim: int, path: str | os.PathLike[str], brute: bool) -> None:
        bad = RuntimeError(
            f"{os.fspath(path)!r} is neither a memlane.compat.hnswlib file nor an hnswlib "
            f"{'BFIndex' if brute else 'Index'} file of dim {dim}"
        )
        head = _BF_HEAD if brute else _HNSW_HEAD
        if len(raw) < head.size:
            raise bad
        fields = head.unpack_from(raw)
        if brute:
            self.max_elements, size, count = fields
            data_at, label_at, links_at = 0, dim * 4, -1
            self.m, self.ef_construction = 0, 0
        else:
            offset0, self.max_elements, count, size, label_at, data_at = fields[:6]
            self.m, self.ef_construction = int(fields[10]), int(fields[12])
            links_at = 2  # the byte of each record's link header that holds the mark
            if offset0 != 0:
                raise bad
        if (
            label_at - data_at != dim * 4
            or label_at + 8 > size
            or count > self.max_elements
            or head.size + count * size > len(raw)
        ):
            raise bad
        records = np.frombuffer(raw, dtype=np.uint8, count=count * size, offset=head.size)
        records = records.reshape(count, size)
        self.vectors = np.ascontiguousarray(records[:, data_at:label_at]).view(np.float32)
        self.labels = np.ascontiguousarray(records[:, label_at : label_at + 8]).view(np.uint64)
        self.labels = self.labels.reshape(-1)
        self.deleted = (
            np.zeros(count, dtype=bool) if brute else (records[:, links_at] & _DELETE_MARK) > 0
        )
        self.count = int(count)


def _array_bytes(array: npt.NDArray[Any]) -> bytes:
    return np.ascontiguousarray(array).tobytes()


class Index:
    """An HNSW index with hnswlib's ``Index`` API, on memlane's Rust engine.

    ``Index(space, dim)``, then ``init_index(max_elements, ...)`` or ``load_index(path)``.
    ``Index(other)`` copies another index.
    """

    def __init__(
        self,
        space: str | Index | None = None,
        dim: int | None = None,
        *,
        index: Index | None = None,
    ) -> None:
        source = index if index is not None else space
        if isinstance(source, Index):
            self.__setstate__(source.__getstate__())
            return
        if not isinstance(space, str) or dim is None:
            raise TypeError("Index() needs space and dim, or an Index to copy")
        self._space = _check_space(space)
        self._dim = int(dim)
        self._index: HnswIndex | None = None
        self._max_elements = 0
        self._count = 0  # labels holding a place: live and marked deleted
        self._next_label = 0  # hnswlib's default labels continue from here
        # Labels marked deleted, oldest first: hidden in the engine, their places kept.
        self._deleted: dict[int, None] = {}
        self._ef = 10
        self._m = 0
        self._ef_construction = 0
        self._seed = 100
        self._allow_replace_deleted = False
        self._num_threads = _default_threads()

    # -- set up ---------------------------------------------------------------------

    def init_index(
        self,
        max_elements: int,
        M: int = 16,
        ef_construction: int = 200,
        random_seed: int = 100,
        allow_replace_deleted: bool = False,
    ) -> None:
        """Creates the empty index for up to ``max_elements`` labels."""
        if self._index is not None:
            raise RuntimeError("The index is already initiated.")
        for name, value in (("max_elements", max_elements), ("M", M)):
            if int(value) < 0:
                raise TypeError(f"{name} must be non-negative, got {value}")
        self._max_elements = int(max_elements)
        self._m = int(M)
        self._ef_construction = int(ef_construction)
        self._seed = int(random_seed)
        self._allow_replace_deleted = bool(allow_replace_deleted)
        self._index = self._new_engine()

    def _new_engine(self) -> HnswIndex:
        return HnswIndex(
            self._dim,
            # cosine is inner product over vectors normalised here, as in hnswlib.
            metric="l2" if self._space == "l2" else "ip",
            m=min(max(self._m, 2), 200),
            ef_construction=max(self._ef_construction, 1),
            ef=max(self._ef, 1),
            seed=self._seed % 2**64,
        )

    def _engine(self) -> HnswIndex:
        if self._index is None:
            raise RuntimeError("The index is not initiated: call init_index or load_index")
        return self._index

    def _prepared(self, data: npt.ArrayLike) -> npt.NDArray[np.float32]:
        rows = _rows(data, self._dim)
        return _normalised(rows) if self._space == "cosine" else rows

    # -- writes ---------------------------------------------------------------------

    def add_items(
        self,
        data: npt.ArrayLike,
        ids: npt.ArrayLike | None = None,
        num_threads: int = -1,
        replace_deleted: bool = False,
    ) -> None:
        """Adds rows of ``data`` under ``ids`` (default: continuing labels).

        A present label gets the new vector; a label marked deleted is restored with
        it. With ``replace_deleted`` (allowed by ``init_index(allow_replace_deleted=True)``)
        new labels take the places of deleted ones before new places are used.
        """
        index = self._engine()
        if replace_deleted and not self._allow_replace_deleted:
            raise RuntimeError(_NO_REPLACE)
        rows = self._prepared(data)
        if not np.isfinite(rows).all():
            # Checked before anything changes: the engine refuses such vectors.
            raise InvalidArgumentError("vectors must be finite (no NaN or infinity)")
        labels = _labels(ids, rows.shape[0], self._next_label)
        # Within one call a label given twice keeps its last vector, as the
        # serial hnswlib loop leaves it.
        last = {label: row for row, label in enumerate(labels)}
        take: list[int] = []
        released: list[int] = []
        failure: RuntimeError | None = None
        for row, label in enumerate(labels):
            if last[label] != row:
                continue
            if label in self._deleted:
                if self._allow_replace_deleted:
                    failure = RuntimeError(
                        "Can't use addPoint to update deleted elements if replacement of "
                        "deleted elements is enabled."
                    )
                    break
                del self._deleted[label]  # the engine shows it again with the new vector
            elif label not in index:
                if replace_deleted and self._deleted:
                    # The new label takes a deleted one's place: that label is gone.
                    victim = next(iter(self._deleted))
                    del self._deleted[victim]
                    released.append(victim)
                elif self._count >= self._max_elements:
                    failure = RuntimeError(_FULL)
                    break
                else:
                    self._count += 1
            take.append(row)
        if released:
            index.release(np.asarray(released, dtype=np.uint64))
        if take:
            chosen = np.asarray([labels[r] for r in take], dtype=np.uint64)
            index.add(chosen, rows[take])
        if failure is not None:
            raise failure
        # As in hnswlib, a failed call leaves the default labels where they were.
        self._next_label += rows.shape[0]

    def mark_deleted(self, label: int) -> None:
        """Hides ``label`` from searches; it keeps its place (see ``unmark_deleted``)."""
        index = self._engine()
        label = int(label)
        if label in self._deleted:
            raise RuntimeError("The requested to delete element is already deleted")
        if label < 0 or label not in index:
            raise RuntimeError(_NOT_FOUND)
        index.hide(np.asarray([label], dtype=np.uint64))
        self._deleted[label] = None

    def unmark_deleted(self, label: int) -> None:
        """Makes a label marked deleted searchable again, with its vector."""
        index = self._engine()
        label = int(label)
        if label not in self._deleted:
            if label >= 0 and label in index:
                raise RuntimeError("The requested to undelete element is not deleted")
            raise RuntimeError(_NOT_FOUND)
        index.unhide(np.asarray([label], dtype=np.uint64))
        del self._deleted[label]

    def resize_index(self, new_size: int) -> None:
        """Changes the capacity; it cannot drop below the labels held."""
        self._engine()
        if int(new_size) < self._count:
            raise RuntimeError(
                "Cannot resize, max element is less than the current number of elements"
            )
        self._max_elements = int(new_size)

    # -- reads ----------------------------------------------------------------------

    def knn_query(
        self,
        data: npt.ArrayLike,
        k: int = 1,
        num_threads: int = -1,
        filter: Filter = None,
    ) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.float32]]:
        """The ``k`` nearest labels of each row of ``data`` and their distances.

        ``filter`` is a callable ``label -> bool`` (called on the labels the search
        reaches, as hnswlib does) or the allowed labels themselves (array, set, list,
        range), which the engine applies with no Python call per candidate. Raises
        ``RuntimeError`` when fewer than ``k`` labels can be returned for a row.
        """
        index = self._engine()
        k = _query_k(k)
        rows = _rows(data, self._dim)
        if k == 0 or rows.shape[0] == 0:
            return _empty(rows.shape[0], k)
        labels, distances = self._search(index, rows, k, filter)
        _check_full(labels)
        return labels, distances

    def knn_query_return_lists(
        self,
        data: npt.ArrayLike,
        k: int = 1,
        num_threads: int = -1,
        filter: Filter = None,
    ) -> tuple[list[list[int]], list[list[float]]]:
        """``knn_query`` as lists, a row holding fewer than ``k`` results when fewer are
        found (later hnswlib versions' method), instead of raising."""
        index = self._engine()
        k = _query_k(k)
        rows = _rows(data, self._dim)
        if k == 0 or rows.shape[0] == 0:
            return [[] for _ in range(rows.shape[0])], [[] for _ in range(rows.shape[0])]
        labels, distances = self._search(index, rows, k, filter)
        found = labels != _MISSING
        return (
            [row[keep].tolist() for row, keep in zip(labels, found, strict=True)],
            [row[keep].tolist() for row, keep in zip(distances, found, strict=True)],
        )

    def _search(
        self, index: HnswIndex, rows: npt.NDArray[np.float32], k: int, filter: Filter
    ) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.float32]]:
        if self._space == "cosine":
            rows = _normalised(rows)
        if filter is None:
            return index.search(rows, k=k)
        if callable(filter):
            return index.search_where(rows, filter, k=k)
        return index.search(rows, k=k, allowed=_allowed(filter))

    def get_items(
        self, ids: npt.ArrayLike | None = None, return_type: str = "numpy"
    ) -> npt.NDArray[np.float32] | list[list[float]]:
        """The stored vectors of ``ids`` (normalised under ``'cosine'``); all when None."""
        if return_type not in ("numpy", "list"):
            raise ValueError('return_type should be "numpy" or "list"')
        if ids is None:
            # hnswlib 0.8 returns nothing here, later versions every vector.
            labels = [int(x) for x in self._index.ids()] if self._index is not None else []
        else:
            array = np.asarray(ids)
            if array.ndim == 0:
                raise ValueError(
                    "get_items accepts a list of indices and returns a list of vectors"
                )
            labels = [int(x) for x in array.reshape(-1)]
        index = self._engine() if labels else self._index
        vectors = []
        for label in labels:
            assert index is not None
            if label < 0 or label not in index:
                raise RuntimeError(_NOT_FOUND)
            vectors.append(index.get_vector(label))
        if return_type == "list":
            return [v.tolist() for v in vectors]
        if not vectors:
            return np.zeros(0, dtype=np.float32)
        return np.stack(vectors)

    def get_ids_list(self) -> list[int]:
        """Every label holding a place, marked deleted ones included."""
        if self._index is None:
            return []
        return [int(x) for x in self._index.ids()] + list(self._deleted)

    def get_current_count(self) -> int:
        """Labels holding a place, marked deleted ones included."""
        return self._count

    def get_max_elements(self) -> int:
        return self._max_elements

    def set_ef(self, ef: int) -> None:
        """Sets the search's candidate list size (a search uses at least k)."""
        self.ef = ef

    def set_num_threads(self, num_threads: int) -> None:
        self._num_threads = int(num_threads)

    def set_ef_search_default(self, ef: int) -> None:
        """``set_ef`` under the name later hnswlib versions give it."""
        self.ef = ef

    @property
    def ef_search_default(self) -> int:
        return self._ef

    @ef_search_default.setter
    def ef_search_default(self, value: int) -> None:
        self.ef = value

    @property
    def ef(self) -> int:
        return self._ef

    @ef.setter
    def ef(self, value: int) -> None:
        value = int(value)
        if value < 0:
            raise TypeError(f"ef must be non-negative, got {value}")
        self._ef = value
        if self._index is not None:
            self._index.ef = max(value, 1)

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

    @property
    def M(self) -> int:  # hnswlib's name
        return self._m

    @property
    def ef_construction(self) -> int:
        return self._ef_construction

    @property
    def max_elements(self) -> int:
        return self._max_elements

    @property
    def element_count(self) -> int:
        return self._count

    def __repr__(self) -> str:
        return f"<memlane.compat.hnswlib.Index(space={self._space!r}, dim={self._dim})>"

    # -- persistence ----------------------------------------------------------------

    def _meta(self) -> dict[str, Any]:
        return {
            "kind": "Index",
            "format": _FORMAT,
            "space": self._space,
            "dim": self._dim,
            "max_elements": self._max_elements,
            "count": self._count,
            "next_label": self._next_label,
            "M": self._m,
            "ef_construction": self._ef_construction,
            "ef": self._ef,
            "seed": self._seed,
            "allow_replace_deleted": self._allow_replace_deleted,
            "num_threads": self._num_threads,
            "deleted": list(self._deleted),
        }

    def _blobs(self) -> list[bytes]:
        # The engine's snapshot holds the marked deleted labels too (hidden).
        index = self._engine()
        with tempfile.TemporaryDirectory(prefix="memlane-hnswlib-") as tmp:
            path = Path(tmp) / "index"
            index.save(path)
            return [path.read_bytes()]

    def _restore(self, meta: dict[str, Any], blobs: list[bytes]) -> None:
        if len(blobs) != 1:
            raise RuntimeError("the index file is truncated")
        with tempfile.TemporaryDirectory(prefix="memlane-hnswlib-") as tmp:
            path = Path(tmp) / "index"
            path.write_bytes(blobs[0])
            index = HnswIndex.load(path)
        hidden = {int(x) for x in index.hidden()}
        order = [int(x) for x in meta["deleted"]]
        if set(order) != hidden:
            raise RuntimeError("the index file is inconsistent: its deleted labels disagree")
        self._index = index
        self._deleted = dict.fromkeys(order)
        self._count = int(meta["count"])
        self._next_label = int(meta["next_label"])
        self._m = int(meta["M"])
        self._ef_construction = int(meta["ef_construction"])
        self._seed = int(meta["seed"])

    def save_index(self, path_to_index: str | os.PathLike[str]) -> None:
        """Writes the index (marked deleted labels included) to one file, atomically."""
        _write(path_to_index, self._meta(), self._blobs())

    def load_index(
        self,
        path_to_index: str | os.PathLike[str],
        max_elements: int = 0,
        allow_replace_deleted: bool = False,
    ) -> None:
        """Replaces this index by the one saved at ``path_to_index``.

        Reads files of ``save_index`` and, rebuilding the graph from their vectors,
        files written by hnswlib itself. The capacity is ``max_elements`` when it holds
        the saved labels, else the saved one; ``ef`` returns to its default, 10, as in
        hnswlib.
        """
        path = path_to_index
        raw = _read_bytes(path)
        if raw.startswith(_MAGIC):
            meta, blobs = _parse(raw, path, "Index")
            if meta["space"] != self._space or int(meta["dim"]) != self._dim:
                raise RuntimeError(
                    f"the file holds a {meta['space']!r} index of dim {meta['dim']}, "
                    f"this Index is {self._space!r} of dim {self._dim}"
                )
            self._restore(meta, blobs)
            saved_max = int(meta["max_elements"])
        else:
            saved_max = self._load_hnswlib(raw, path)
        self._max_elements = int(max_elements) if int(max_elements) >= self._count else saved_max
        self._allow_replace_deleted = bool(allow_replace_deleted)
        self.ef = 10
        self._next_label = self._count

    def _load_hnswlib(self, raw: bytes, path: str | os.PathLike[str]) -> int:
        """Rebuilds the graph from the vectors of a file hnswlib wrote; its capacity."""
        saved = _HnswlibFile(raw, self._dim, path, brute=False)
        self._m, self._ef_construction, self._seed = saved.m, saved.ef_construction, 100
        index = self._new_engine()
        if saved.count:
            # Under 'cosine' hnswlib stored the vectors normalised, as they stay here.
            index.add(saved.labels, saved.vectors)
        hidden = saved.labels[saved.deleted]
        if hidden.size:
            index.hide(hidden)
        self._index = index
        self._deleted = dict.fromkeys(int(x) for x in hidden)
        self._count = saved.count
        return int(saved.max_elements)

    def index_file_size(self) -> int:
        """Bytes ``save_index`` would write."""
        head = json.dumps(self._meta()).encode()
        return len(_MAGIC) + sum(8 + len(part) for part in [head, *self._blobs()])

    def __getstate__(self) -> dict[str, Any]:
        state: dict[str, Any] = {"meta": self._meta(), "inited": self._index is not None}
        state["meta"]["space"] = self._space
        if self._index is not None:
            state["blobs"] = self._blobs()
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        meta = state["meta"]
        self._space = _check_space(meta["space"])
        self._dim = int(meta["dim"])
        self._index = None
        self._deleted = {}
        self._count = 0
        self._next_label = 0
        self._m = int(meta["M"])
        self._ef_construction = int(meta["ef_construction"])
        self._seed = int(meta["seed"])
        if state["inited"]:
            self._restore(meta, state["blobs"])
        self._max_elements = int(meta["max_elements"])
        self._allow_replace_deleted = bool(meta["allow_replace_deleted"])
        self._num_threads = int(meta["num_threads"])
        self._ef = 10
        self.ef = int(meta["ef"])


class BFIndex:
    """Exact (brute-force) search with hnswlib's ``BFIndex`` API."""

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

    def init_index(self, max_elements: int) -> None:
        if int(max_elements) < 0:
            raise TypeError(f"max_elements must be non-negative, got {max_elements}")
        self._max_elements = int(max_elements)
        self._data = np.zeros((self._max_elements, self._dim), dtype=np.float32)
        self._labels = np.zeros(self._max_elements, dtype=np.uint64)
        self._rows = {}
        self._next_label = 0
        self._inited = True

    def _check(self) -> None:
        if not self._inited:
            raise RuntimeError("The index is not initiated: call init_index or load_index")

    def add_items(self, data: npt.ArrayLike, ids: npt.ArrayLike | None = None) -> None:
        """Adds rows under ``ids`` (default: continuing labels); a present label is updated."""
        self._check()
        rows = _rows(data, self._dim)
        if self._space == "cosine":
            rows = _normalised(rows)
        labels = _labels(ids, rows.shape[0], self._next_label)
        for row, label in enumerate(labels):
            at = self._rows.get(label)
            if at is None:
                if len(self._rows) >= self._max_elements:
                    raise RuntimeError(_FULL)
                at = len(self._rows)
                self._rows[label] = at
                self._labels[at] = label
            self._data[at] = rows[row]
        self._next_label += rows.shape[0]

    def delete_vector(self, label: int) -> None:
        """Removes ``label``; an unknown label is ignored, as in hnswlib."""
        self._check()
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
        n = len(self._rows)
        stored, labels = self._data[:n], self._labels[:n]
        if filter is not None:
            if callable(filter):
                keep = np.fromiter((bool(filter(int(x))) for x in labels), dtype=bool, count=n)
            else:
                keep = np.isin(labels, _allowed(filter))
            stored, labels = stored[keep], labels[keep]
        if labels.shape[0] < k:
            raise RuntimeError(_TOO_FEW)
        if self._space == "cosine":
            queries = _normalised(queries)
        dots = queries @ stored.T
        if self._space == "l2":
            sq = np.einsum("ij,ij->i", stored, stored)
            qq = np.einsum("ij,ij->i", queries, queries)
            dist = np.maximum(qq[:, None] + sq[None, :] - 2 * dots, 0)
        else:
            dist = 1 - dots
        dist = dist.astype(np.float32, copy=False)
        top = np.argpartition(dist, k - 1, axis=1)[:, :k] if k < dist.shape[1] else None
        if top is None:
            top = np.broadcast_to(np.arange(dist.shape[1]), dist.shape)
        part = np.take_along_axis(dist, top, axis=1)
        if self._space == "l2":
            # The expansion above loses digits to cancellation: measure the
            # chosen ones directly.
            diff = stored[top] - queries[:, None, :]
            part = np.einsum("qkd,qkd->qk", diff, diff).astype(np.float32, copy=False)
        order = np.argsort(part, axis=1, kind="stable")
        return labels[np.take_along_axis(top, order, axis=1)], np.take_along_axis(
            part, order, axis=1
        )

    def set_num_threads(self, num_threads: int) -> None:
        self._num_threads = int(num_threads)

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

    def get_max_elements(self) -> int:
        return self._max_elements

    def get_current_count(self) -> int:
        return len(self._rows)

    def save_index(self, path_to_index: str | os.PathLike[str]) -> None:
        path = path_to_index
        self._check()
        n = len(self._rows)
        meta = {
            "kind": "BFIndex",
            "format": _FORMAT,
            "space": self._space,
            "dim": self._dim,
            "max_elements": self._max_elements,
            "count": n,
        }
        _write(path, meta, [_array_bytes(self._labels[:n]), _array_bytes(self._data[:n])])

    def load_index(self, path_to_index: str | os.PathLike[str], max_elements: int = 0) -> None:
        """Reads a file of ``save_index``, or one written by hnswlib's ``BFIndex``."""
        path = path_to_index
        raw = _read_bytes(path)
        if raw.startswith(_MAGIC):
            meta, blobs = _parse(raw, path, "BFIndex")
            if meta["space"] != self._space or int(meta["dim"]) != self._dim:
                raise RuntimeError(
                    f"the file holds a {meta['space']!r} index of dim {meta['dim']}, "
                    f"this BFIndex is {self._space!r} of dim {self._dim}"
                )
            if len(blobs) != 2:
                raise RuntimeError("the index file is truncated")
            n = int(meta["count"])
            labels = np.frombuffer(blobs[0], dtype=np.uint64)
            data = np.frombuffer(blobs[1], dtype=np.float32).reshape(n, self._dim)
            saved_max = int(meta["max_elements"])
        else:
            saved = _HnswlibFile(raw, self._dim, path, brute=True)
            n, labels, data, saved_max = (
                saved.count,
                saved.labels,
                saved.vectors,
                saved.max_elements,
            )
        capacity = int(max_elements) if int(max_elements) >= n else int(saved_max)
        self.init_index(max(capacity, n))
        self._data[:n] = data
        self._labels[:n] = labels
        self._rows = {int(label): i for i, label in enumerate(labels)}
        self._next_label = n

    def __repr__(self) -> str:
        return f"<memlane.compat.hnswlib.BFIndex(space={self._space!r}, dim={self._dim})>"
