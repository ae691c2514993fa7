"""memlane.compat.hnswlib's reads see no change half done, found by attacking them.

- A pickle, ``save_index`` or ``index_file_size`` taken in a ``knn_query`` filter callback
  (which skips the index's lock) loads back: the count and the deleted labels are those
  of the engine the search holds still, not bookkeeping another thread is changing.
- ``get_ids_list`` waits for a change in progress (and, in a callback, reads the engine).
- ``get_items`` of a label deleted meanwhile is hnswlib's ``RuntimeError("Label not
  found")``, not memlane's ``UnknownIdError``.
- ``BFIndex.knn_query`` scores copies of its rows: a delete meanwhile (which moves the
  last row into its hole) lists no label twice.
- As in hnswlib: ``add_items(replace_deleted=True)`` of a label marked deleted brings it
  back with its new vector; ``BFIndex``'s capacity error ends with hnswlib's line break;
  ``BFIndex.load_index`` ignores ``max_elements`` and keeps the file's capacity.

The races are made deterministic: a change is paused between the engine's update and
the bookkeeping's, and the read is taken there.
"""

from __future__ import annotations

import pickle
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

import memlane.compat.hnswlib as mhnsw

FULL = "The number of elements exceeds the specified limit"
UPDATE_DELETED = (
    "Can't use addPoint to update deleted elements if replacement of deleted elements is enabled."
)
WAIT = 60  # seconds: only a broken test waits this long


def data(n: int = 5, dim: int = 4, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).random((n, dim), dtype=np.float32)


class Pausing(dict):  # type: ignore[type-arg]
    """An index's deleted labels, whose first change once ``armed`` waits for ``go``:
    the engine has changed, the bookkeeping not yet."""

    def __init__(self, items: dict[int, None]) -> None:
        super().__init__(items)
        self.armed = False
        self.reached, self.go = threading.Event(), threading.Event()

    def _pause(self) -> None:
        if self.armed:
            self.armed = False
            self.reached.set()
            assert self.go.wait(WAIT)

    def __setitem__(self, key: int, value: None) -> None:
        self._pause()
        super().__setitem__(key, value)

    def __delitem__(self, key: int) -> None:
        self._pause()
        super().__delitem__(key)


@contextmanager
def half_done(index: mhnsw.Index, change: Callable[[], object]) -> Iterator[None]:
    """``change`` run in another thread and held (with the index's lock) after it has
    changed the engine, before it changes the deleted labels, for the block's length."""
    books = Pausing(index._deleted)
    index._deleted = books
    books.armed = True
    errors: list[BaseException] = []

    def run() -> None:
        try:
            change()
        except BaseException as e:
            errors.append(e)

    writer = threading.Thread(target=run)
    writer.start()
    try:
        assert books.reached.wait(WAIT), errors
        yield
    finally:
        books.go.set()
        writer.join(WAIT)
    assert not writer.is_alive() and errors == []


def saved_in_a_callback(index: mhnsw.Index, path: Path) -> dict[str, Any]:
    """What a filter callback of ``index``'s own search reads, pickles and saves."""
    seen: dict[str, Any] = {}

    def callback(label: int) -> bool:
        if not seen:
            seen["pickle"] = pickle.dumps(index)
            seen["ids"] = index.get_ids_list()
            seen["size"] = index.index_file_size()
            index.save_index(path)
        return True

    index.knn_query(data(1), k=1, filter=callback)
    return seen


def check_loads(seen: dict[str, Any], path: Path, live: list[int], deleted: list[int]) -> None:
    held = sorted(live + deleted)
    loaded = mhnsw.Index(space="l2", dim=4)
    loaded.load_index(path)
    for back in (pickle.loads(seen["pickle"]), loaded):
        assert sorted(back.get_ids_list()) == held and back.element_count == len(held)
        assert sorted(back.knn_query(data(1), k=len(live))[0][0].tolist()) == live
        for label in deleted:
            back.unmark_deleted(label)  # still there, marked deleted
    assert seen["size"] == path.stat().st_size
    assert sorted(seen["ids"]) == held


def test_a_callback_saves_a_mark_half_done_as_its_search_sees_it(tmp_path: Path) -> None:
    index = mhnsw.Index(space="l2", dim=4)
    index.init_index(10)
    index.add_items(data())
    with half_done(index, lambda: index.mark_deleted(3)):
        seen = saved_in_a_callback(index, tmp_path / "saved")
    check_loads(seen, tmp_path / "saved", [0, 1, 2, 4], [3])
    assert sorted(index.knn_query(data(1), k=4)[0][0].tolist()) == [0, 1, 2, 4]


def test_a_callback_saves_an_add_half_done_as_its_search_sees_it(tmp_path: Path) -> None:
    index = mhnsw.Index(space="l2", dim=4)
    index.init_index(10)
    index.add_items(data())
    index.mark_deleted(1)
    # Restores label 1 and adds label 7: the count and the deleted labels both lag.
    with half_done(index, lambda: index.add_items(data(2, seed=1), [1, 7])):
        seen = saved_in_a_callback(index, tmp_path / "saved")
    check_loads(seen, tmp_path / "saved", [0, 1, 2, 3, 4, 7], [])
    assert index.element_count == 6


def test_a_callback_saves_a_replacement_half_done_as_its_search_sees_it(
    tmp_path: Path,
) -> None:
    index = mhnsw.Index(space="l2", dim=4)
    index.init_index(5, allow_replace_deleted=True)
    index.add_items(data())
    index.mark_deleted(0)
    index.mark_deleted(2)
    with half_done(index, lambda: index.add_items(data(1, seed=2), [9], replace_deleted=True)):
        seen = saved_in_a_callback(index, tmp_path / "saved")
    check_loads(seen, tmp_path / "saved", [1, 3, 4, 9], [2])


def test_get_ids_list_waits_for_a_change_half_done() -> None:
    index = mhnsw.Index(space="l2", dim=4)
    index.init_index(10)
    index.add_items(data())
    got: list[list[int]] = []
    with half_done(index, lambda: index.mark_deleted(3)):
        reader = threading.Thread(target=lambda: got.append(index.get_ids_list()))
        reader.start()
        reader.join(0.5)  # done already only if it did not wait: then it must be whole
        assert reader.is_alive() or sorted(got[0]) == [0, 1, 2, 3, 4]
    reader.join(WAIT)
    assert sorted(got[0]) == [0, 1, 2, 3, 4]


class DeletingMeanwhile:
    """An engine whose ``get_vector`` of ``label`` first hides it, as another thread's
    ``mark_deleted`` could between a check and the read."""

    def __init__(self, engine: Any, label: int) -> None:
        self._engine, self._label = engine, label

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def __contains__(self, label: object) -> bool:
        return label in self._engine

    def __len__(self) -> int:
        return len(self._engine)

    def get_vector(self, label: int) -> Any:
        if label == self._label:
            self._engine.hide(np.asarray([label], dtype=np.uint64))
        return self._engine.get_vector(label)


def test_get_items_of_a_label_deleted_meanwhile_is_label_not_found() -> None:
    index = mhnsw.Index(space="l2", dim=4)
    index.init_index(10)
    index.add_items(data())
    index._index = DeletingMeanwhile(index._index, 2)  # type: ignore[assignment]
    assert index.get_items([1]).shape == (1, 4)
    with pytest.raises(RuntimeError, match=r"^Label not found$"):
        index.get_items([1, 2])


def test_get_items_and_ids_in_a_callback_read_the_engine_searched() -> None:
    index = mhnsw.Index(space="l2", dim=4)
    index.init_index(10)
    index.add_items(data())
    seen: list[Any] = []

    def callback(label: int) -> bool:
        if not seen:
            seen.append(sorted(index.get_ids_list()))
            seen.append(index.get_items([0, 1, 2, 4]).shape)
            with pytest.raises(RuntimeError, match=r"^Label not found$"):
                index.get_items([3])
        return True

    with half_done(index, lambda: index.mark_deleted(3)):
        index.knn_query(data(1), k=1, filter=callback)
    assert seen == [[0, 1, 2, 3, 4], (4, 4)]


def test_bfindex_query_lists_each_label_once_when_a_delete_moves_a_row() -> None:
    bf = mhnsw.BFIndex(space="l2", dim=4)
    bf.init_index(10)
    bf.add_items(data(6))

    def deleting(label: int) -> bool:
        if label == 0:
            bf.delete_vector(0)  # moves label 5's row into row 0, in place
        return True

    labels, distances = bf.knn_query(data(1, seed=3), k=6, filter=deleting)
    # The rows as the query took them, before the delete.
    assert sorted(labels[0].tolist()) == [0, 1, 2, 3, 4, 5]
    rows = data(6)[labels[0].astype(np.int64)]
    assert np.allclose(distances[0], ((rows - data(1, seed=3)) ** 2).sum(axis=1), atol=1e-5)
    assert bf.get_current_count() == 5
    assert sorted(bf.knn_query(data(1), k=5)[0][0].tolist()) == [1, 2, 3, 4, 5]


def test_bfindex_queries_beside_deletes_list_each_label_once() -> None:
    n = 400
    bf = mhnsw.BFIndex(space="l2", dim=8)
    bf.init_index(n)
    rows = data(n, 8)
    bf.add_items(rows)
    stop = threading.Event()

    def churn() -> None:
        label = 0
        while not stop.is_set():
            bf.delete_vector(label)
            bf.add_items(rows[label], [label])
            label = (label + 7) % (n // 2)

    worker = threading.Thread(target=churn)
    worker.start()
    try:
        for i in range(200):  # bounded: passes however the threads interleave
            labels, _ = bf.knn_query(data(2, 8, seed=i), k=n - 10)
            for row in labels:
                assert len(set(row.tolist())) == n - 10
    finally:
        stop.set()
        worker.join(WAIT)


# -- as hnswlib does ------------------------------------------------------------------


def readd(module: ModuleType, replace: bool) -> object:
    index = module.Index(space="l2", dim=4)
    index.init_index(2, allow_replace_deleted=True)
    index.add_items(np.eye(4, dtype=np.float32)[:2], [0, 1])
    index.mark_deleted(1)
    try:
        index.add_items(np.full((1, 4), 3, np.float32), [1], replace_deleted=replace)
    except RuntimeError as e:
        return str(e)
    return (
        index.element_count,
        sorted(index.get_ids_list()),
        np.asarray(index.get_items([1])).tolist(),
        index.knn_query(np.full(4, 3, np.float32), k=2)[0].tolist(),
    )


def test_a_deleted_label_readded_with_replace_deleted_comes_back(hnswlib_peer: ModuleType) -> None:
    assert readd(mhnsw, True) == readd(hnswlib_peer, True) == (2, [0, 1], [[3.0] * 4], [[1, 0]])
    assert readd(mhnsw, False) == readd(hnswlib_peer, False) == UPDATE_DELETED


def test_a_deleted_label_readded_with_replace_deleted_takes_its_own_place() -> None:
    index = mhnsw.Index(space="l2", dim=4)
    index.init_index(4, allow_replace_deleted=True)
    index.add_items(data(4))
    for label in (0, 1, 2):
        index.mark_deleted(label)
    index.add_items(data(1, seed=5), [1], replace_deleted=True)
    assert sorted(index.get_ids_list()) == [0, 1, 2, 3] and index.element_count == 4
    assert np.allclose(index.get_items([1]), data(1, seed=5))
    # The next new label replaces the oldest deleted one left, 0.
    index.add_items(data(1, seed=6), [8], replace_deleted=True)
    assert sorted(index.get_ids_list()) == [1, 2, 3, 8]
    index.unmark_deleted(2)
    with pytest.raises(RuntimeError, match=r"^Label not found$"):
        index.unmark_deleted(0)


def test_bfindex_full_message_is_hnswlibs(hnswlib_peer: ModuleType) -> None:
    messages = []
    for module in (hnswlib_peer, mhnsw):
        for cls in (module.BFIndex, module.Index):
            index = cls(space="l2", dim=4)
            index.init_index(1)
            index.add_items(np.ones((1, 4), np.float32), [1])
            with pytest.raises(RuntimeError) as caught:
                index.add_items(np.ones((1, 4), np.float32), [2])
            messages.append(str(caught.value))
    assert messages[:2] == messages[2:] == [FULL + "\n", FULL]


@pytest.mark.parametrize("wanted", [0, 1, 3, 100, 10**13])
def test_bfindex_load_keeps_the_files_capacity(
    tmp_path: Path, hnswlib_peer: ModuleType, wanted: int
) -> None:
    theirs_path, ours_path = tmp_path / "theirs", tmp_path / "ours"
    for module, path in ((hnswlib_peer, theirs_path), (mhnsw, ours_path)):
        bf = module.BFIndex(space="l2", dim=4)
        bf.init_index(5)
        bf.add_items(np.ones((2, 4), np.float32))
        bf.save_index(str(path))
    counts = []
    for module, path in ((hnswlib_peer, theirs_path), (mhnsw, theirs_path), (mhnsw, ours_path)):
        loaded = module.BFIndex(space="l2", dim=4)
        loaded.load_index(str(path), max_elements=wanted)
        with pytest.raises(RuntimeError, match=f"^{FULL}\n$"):
            loaded.add_items(data(4))
        counts.append((loaded.get_max_elements(), loaded.get_current_count()))
    assert counts == [(5, 5)] * 3
