"""hnswlib's Python API on memlane's Rust HNSW index.

``import memlane.compat.hnswlib as hnswlib`` and an hnswlib program runs unchanged:
[`Index`][memlane.compat.hnswlib.Index] and [`BFIndex`][memlane.compat.hnswlib.BFIndex]
take the same arguments, return the same shapes and
dtypes (labels ``uint64``, distances ``float32``, ``(n, k)``) and raise the same
exceptions with the same messages (``RuntimeError("Label not found")``, ``"The number
of elements exceeds the specified limit"``, ``"Cannot return the results in a contiguous
2D array. Probably ef or M is too small"``...).

Spaces: ``'l2'`` squared Euclidean distance, ``'ip'`` ``1 - dot``, ``'cosine'``
``1 - cos`` (vectors are normalised when added, as hnswlib does, so ``get_items``
returns unit vectors).

What differs from hnswlib:

- ``knn_query(filter=...)`` also takes the allowed labels themselves (a numpy array,
  set, list, tuple, range, frozenset or any iterable of labels): the filter then runs
  inside the engine, with no Python call per candidate. A range, a set or an iterable
  costs no more than the labels the index holds (``range(0, 10**12)`` is intersected
  with them arithmetically). A callable is called on the labels the graph search
  reaches, as hnswlib calls it.
- Searches run on memlane's own thread pool: ``num_threads`` is kept and reported
  but does not size it.
- ``save_index`` writes memlane's format (hnswlib cannot read it); ``load_index`` reads
  it and also files written by hnswlib, rebuilding the graph from their vectors.
- ``BFIndex`` with ``'cosine'`` normalises queries as well as data, so its distances are
  ``1 - cos`` (hnswlib 0.8's brute-force index leaves queries unnormalised).
- A filter callback may read, pickle and save its own index (not change it): it sees
  the index its search holds still, a change another thread is making whole or not at
  all. ``add_items(replace_deleted=True)`` restores a label marked deleted in its own
  place (hnswlib reuses any deleted place for it).
- A file hnswlib wrote holding a label twice (``replace_deleted`` with a present label
  leaves its old record) loads with the record hnswlib's loader keeps, the last, and
  counts the label once (hnswlib counts both records).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from memlane._core import HnswIndex
from memlane.compat._hnswlib_bruteforce import BFIndex
from memlane.compat._hnswlib_common import (
    _MISSING,
    _NO_REPLACE,
    _NOT_FOUND,
    Filter,
    _allowed,
    _Attributes,
    _check_full,
    _check_space,
    _check_vectors,
    _default_threads,
    _deleted_in,
    _empty,
    _Found,
    _Guarded,
    _in_parts,
    _labels,
    _normalised,
    _plan_add,
    _query_k,
    _rows,
    _size,
)
from memlane.compat._hnswlib_files import (
    _CORRUPTED,
    _DAMAGE,
    _FORMAT,
    _MAGIC,
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
from memlane.errors import CorruptFileError, UnknownIdError

__all__ = ["BFIndex", "Index"]


#: hnswlib's largest ef (a size_t); the engine's is 2**63 - 1, and a longer candidate
#: list than that could never fill, so an ef past it searches the same.
_EF_MAX = 2**64 - 1
_ENGINE_EF_MAX = 2**63 - 1


def _engine_ef(ef: int) -> int:
    """An ``ef`` or ``ef_construction`` as the engine takes it: 1 to 2**63 - 1."""
    return min(max(ef, 1), _ENGINE_EF_MAX)


class Index(_Attributes, _Guarded):
    """An HNSW index with hnswlib's ``Index`` API, on memlane's Rust engine.

    ``Index(space, dim)``, then ``init_index(max_elements, ...)`` or ``load_index(path)``.
    ``Index(other)`` copies another index. Safe to share between threads, as hnswlib's.
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
        self._guards()
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
        with self._locked():
            if self._index is not None:
                raise RuntimeError("The index is already initiated.")
            self._max_elements = _size(max_elements, "max_elements")
            self._m = _size(M, "M")
            self._ef_construction = int(ef_construction)
            self._seed = int(random_seed)
            self._allow_replace_deleted = bool(allow_replace_deleted)
            self._index = self._new_engine()

    def _new_engine(
        self, m: int | None = None, ef_construction: int | None = None, seed: int | None = None
    ) -> HnswIndex:
        """An empty engine with this index's settings, or those given."""
        m = self._m if m is None else m
        ef_construction = self._ef_construction if ef_construction is None else ef_construction
        seed = self._seed if seed is None else seed
        return HnswIndex(
            self._dim,
            # cosine is inner product over vectors normalised here, as in hnswlib.
            metric="l2" if self._space == "l2" else "ip",
            m=min(max(m, 2), 200),
            ef_construction=_engine_ef(ef_construction),
            ef=_engine_ef(self._ef),
            seed=seed % 2**64,
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
        new labels take the places of deleted ones before new places are used. Rows are
        taken in order, as hnswlib's serial loop takes them: a label given twice keeps its
        later vector, and at the first row over the capacity the rows before it are added
        and hnswlib's error raised. A call the engine refuses changes nothing.
        """
        self._engine()
        rows = self._prepared(data)
        _check_vectors(rows, bounded=self._space != "cosine")
        with self._locked():
            index = self._engine()
            if replace_deleted and not self._allow_replace_deleted:
                raise RuntimeError(_NO_REPLACE)
            labels = _labels(ids, rows.shape[0], self._next_label)
            plan = _plan_add(
                labels,
                index.__contains__,
                self._deleted,
                self._max_elements - self._count,
                replace_deleted,
                self._allow_replace_deleted,
            )
            if plan.released:
                index.release(np.asarray(plan.released, dtype=np.uint64))
            if plan.rows:
                chosen = np.fromiter(plan.rows, dtype=np.uint64, count=len(plan.rows))
                index.add(chosen, rows[list(plan.rows.values())])
            # The engine took the vectors: only now does the bookkeeping follow it.
            for label in (*plan.restored, *plan.released):
                del self._deleted[label]
            self._count += plan.new
            if plan.failure is not None:
                raise plan.failure
            # As in hnswlib, a failed call leaves the default labels where they were.
            self._next_label += rows.shape[0]

    def mark_deleted(self, label: int) -> None:
        """Hides ``label`` from searches; it keeps its place (see ``unmark_deleted``)."""
        label = int(label)
        with self._locked():
            index = self._engine()
            if label in self._deleted:
                raise RuntimeError("The requested to delete element is already deleted")
            if label < 0 or label not in index:
                raise RuntimeError(_NOT_FOUND)
            index.hide(np.asarray([label], dtype=np.uint64))
            self._deleted[label] = None

    def unmark_deleted(self, label: int) -> None:
        """Makes a label marked deleted searchable again, with its vector."""
        label = int(label)
        with self._locked():
            index = self._engine()
            if label not in self._deleted:
                if label >= 0 and label in index:
                    raise RuntimeError("The requested to undelete element is not deleted")
                raise RuntimeError(_NOT_FOUND)
            index.unhide(np.asarray([label], dtype=np.uint64))
            del self._deleted[label]

    def resize_index(self, new_size: int) -> None:
        """Changes the capacity; it cannot drop below the labels held."""
        with self._locked():
            self._engine()
            size = _size(new_size, "new_size")
            if size < self._count:
                raise RuntimeError(
                    "Cannot resize, max element is less than the current number of elements"
                )
            self._max_elements = size

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

    def _search(self, index: HnswIndex, rows: npt.NDArray[np.float32], k: int, f: Filter) -> _Found:
        def part(rows: npt.NDArray[np.float32]) -> _Found:
            if f is None:
                return index.search(rows, k=k)
            if callable(f):
                with self._calling_back(index):
                    return index.search_where(rows, f, k=k)
            return index.search(rows, k=k, allowed=_allowed(f, index.ids, len(index)))

        return _in_parts(part, _normalised(rows) if self._space == "cosine" else rows, k)

    def get_items(
        self, ids: npt.ArrayLike | None = None, return_type: str = "numpy"
    ) -> npt.NDArray[np.float32] | list[list[float]]:
        """The stored vectors of ``ids`` (normalised under ``'cosine'``); all when None."""
        if return_type not in ("numpy", "list"):
            raise ValueError('return_type should be "numpy" or "list"')
        searched = self._searched()  # in a filter callback, the engine searched
        index = self._index if searched is None else searched
        if ids is None:
            # hnswlib 0.8 returns nothing here, later versions every vector.
            labels = [int(x) for x in index.ids()] if index is not None else []
        else:
            array = np.asarray(ids)
            if array.ndim == 0:
                raise ValueError(
                    "get_items accepts a list of indices and returns a list of vectors"
                )
            labels = [int(x) for x in array.reshape(-1)]
        if labels and index is None:
            index = self._engine()  # raises: not initiated
        vectors = []
        for label in labels:
            assert index is not None
            try:  # one call of the engine: a label deleted meanwhile is not found
                vectors.append(index.get_vector(label))
            except UnknownIdError:
                raise RuntimeError(_NOT_FOUND) from None
        if return_type == "list":
            return [v.tolist() for v in vectors]
        if not vectors:
            return np.zeros(0, dtype=np.float32)
        return np.stack(vectors)

    def get_ids_list(self) -> list[int]:
        """Every label holding a place, marked deleted ones included."""
        with self._locked(change=False):
            if self._index is None:
                return []
            index, deleted, _ = self._state()
            return [int(x) for x in index.ids()] + deleted

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
        if value > _EF_MAX:
            raise TypeError(f"ef must be at most 2**64 - 1 (a size_t, as in hnswlib), got {value}")
        self._ef = value  # reported as given, as hnswlib does
        if self._index is not None:
            self._index.ef = _engine_ef(value)

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

    def _state(self) -> tuple[HnswIndex, list[int], int]:
        """The engine, its labels marked deleted (oldest first) and the count, agreeing:
        the books, under ``_locked``; in a filter callback of this index's own search (no
        lock: the books may lag another thread's change), those of the engine searched,
        which its read lock holds still."""
        searched = self._searched()
        if searched is None:
            return self._engine(), list(self._deleted), self._count
        deleted = _deleted_in(searched, self._deleted)
        return searched, deleted, len(searched) + len(deleted)

    def _meta(self, deleted: list[int], count: int) -> dict[str, Any]:
        return {
            "kind": "Index",
            "format": _FORMAT,
            "space": self._space,
            "dim": self._dim,
            "max_elements": max(self._max_elements, count),
            "count": count,
            "next_label": self._next_label,
            "M": self._m,
            "ef_construction": self._ef_construction,
            "ef": self._ef,
            "seed": self._seed,
            "allow_replace_deleted": self._allow_replace_deleted,
            "num_threads": self._num_threads,
            "deleted": deleted,
        }

    def _saved(self) -> tuple[dict[str, Any], list[bytes]]:
        """The metadata and blobs ``save_index`` and pickles write, agreeing."""
        with self._locked(change=False):
            index, deleted, count = self._state()
            return self._meta(deleted, count), self._blobs(index)

    def _blobs(self, index: HnswIndex) -> list[bytes]:
        # The engine's snapshot holds the marked deleted labels too (hidden).
        with tempfile.TemporaryDirectory(prefix="memlane-hnswlib-") as tmp:
            path = Path(tmp) / "index"
            index.save(path)
            return [path.read_bytes()]

    def _restored(self, meta: dict[str, Any], blobs: list[bytes]) -> dict[str, Any]:
        """The engine and the fields a saved index gives back, as the attributes to set:
        nothing is changed here, so a damaged file leaves this index as it was. Damage
        raises one of ``_DAMAGE`` (``CorruptFileError`` for the graph)."""
        if len(blobs) != 1:
            raise _Damaged("is truncated")
        with tempfile.TemporaryDirectory(prefix="memlane-hnswlib-") as tmp:
            path = Path(tmp) / "index"
            path.write_bytes(blobs[0])
            index = HnswIndex.load(path)
        hidden = {int(x) for x in index.hidden()}
        order = [int(x) for x in meta["deleted"]]
        if set(order) != hidden:
            raise _Damaged("is inconsistent: its deleted labels disagree")
        count = _header_int(meta, "count")
        if count != len(index) + len(hidden):
            raise _Damaged("is inconsistent: its count disagrees with its graph")
        return {
            "_index": index,
            "_deleted": dict.fromkeys(order),
            "_count": count,
            "_next_label": _header_int(meta, "next_label", high=None),
            "_m": int(meta["M"]),
            "_ef_construction": int(meta["ef_construction"]),
            "_seed": int(meta["seed"]),
            "_max_elements": _header_int(meta, "max_elements", low=count),
        }

    def _take(self, fields: dict[str, Any]) -> None:
        for name, value in fields.items():
            setattr(self, name, value)

    def save_index(self, path_to_index: str | bytes | os.PathLike[str]) -> None:
        """Writes the index (marked deleted labels included) to one file, atomically."""
        _write(path_to_index, *self._saved())

    def load_index(
        self,
        path_to_index: str | bytes | os.PathLike[str],
        max_elements: int = 0,
        allow_replace_deleted: bool = False,
    ) -> None:
        """Replaces this index by the one saved at ``path_to_index``.

        Reads files of ``save_index`` and, rebuilding the graph from their vectors,
        files written by hnswlib itself. The capacity is ``max_elements`` when it holds
        the saved labels, else the saved one; ``ef`` returns to its default, 10, as in
        hnswlib.
        """
        path = _path(path_to_index)
        wanted = _size(max_elements, "max_elements")
        raw = _read_bytes(path)
        try:
            if raw.startswith(_MAGIC):
                meta, blobs = _parse(raw, path, "Index", self._space, self._dim)
                fields = self._restored(meta, blobs)
            else:
                fields = self._from_hnswlib(raw, path)
        except CorruptFileError:  # its message names the temporary file
            raise _corrupted(path, "has a damaged graph") from None
        except _DAMAGE as e:
            raise _corrupted(path, _why(e)) from None
        # Nothing has changed until here: the file read whole, its parts checked.
        saved_max = fields.pop("_max_elements")
        with self._locked():
            self._take(fields)
            self._max_elements = wanted if wanted >= self._count else saved_max
            self._allow_replace_deleted = bool(allow_replace_deleted)
            self.ef = 10
            self._next_label = self._count

    def _from_hnswlib(self, raw: bytes, path: str | os.PathLike[str]) -> dict[str, Any]:
        """The graph rebuilt from the vectors of a file hnswlib wrote, and the fields it
        gives back (as ``_restored``: nothing is changed here)."""
        saved = _HnswlibFile(raw, self._dim, path, brute=False)
        index = self._new_engine(saved.m, saved.ef_construction, seed=100)
        if saved.count:
            # Under 'cosine' hnswlib stored the vectors normalised, as they stay here.
            index.add(saved.labels, saved.vectors)
        hidden = saved.labels[saved.deleted]
        if hidden.size:
            index.hide(hidden)
        return {
            "_index": index,
            "_deleted": dict.fromkeys(int(x) for x in hidden),
            "_count": saved.count,
            "_m": saved.m,
            "_ef_construction": saved.ef_construction,
            "_seed": 100,
            "_max_elements": int(saved.max_elements),
        }

    def index_file_size(self) -> int:
        """Bytes ``save_index`` would write."""
        meta, blobs = self._saved()
        head = json.dumps(meta).encode()
        return len(_MAGIC) + sum(8 + len(part) for part in [head, *blobs])

    def __getstate__(self) -> dict[str, Any]:
        if self._index is None:
            return {"meta": self._meta([], 0), "inited": False}
        meta, blobs = self._saved()
        return {"meta": meta, "inited": True, "blobs": blobs}

    def __setstate__(self, state: dict[str, Any]) -> None:
        meta = state["meta"]
        self._guards()
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
            try:
                self._take(self._restored(meta, state["blobs"]))
            except CorruptFileError:  # its message names the temporary file
                raise RuntimeError(f"{_CORRUPTED}: the pickled graph is damaged") from None
            except _Damaged as e:
                raise RuntimeError(f"{_CORRUPTED}: the pickled index {e}") from None
        self._max_elements = int(meta["max_elements"])
        self._allow_replace_deleted = bool(meta["allow_replace_deleted"])
        self._num_threads = int(meta["num_threads"])
        self._ef = 10
        self.ef = int(meta["ef"])
