"""memlane.compat.hnswlib keeps its labels counted exactly, as hnswlib does.

- ``Index``'s writes from several threads count each label once: the checks, the count
  and the engine's change are made under one lock (a filter callback of the index's own
  ``knn_query`` that tries a change is refused, not deadlocked).
- An add the engine refuses (a norm it cannot store, a change from a filter callback)
  changes nothing: no phantom element, no deleted label released.
- ``add_items`` takes its rows in order, as hnswlib's serial loop: a label given twice
  and a capacity running out leave what hnswlib leaves.
- A saved index's header is checked against its graph (count, capacity, next label).
- A file hnswlib writes after ``replace_deleted`` (two records of one label) loads, with
  the record hnswlib's own loader keeps.
- ``BFIndex`` sizes its arrays by the labels held, not by a capacity read from a file: a
  capacity no memory holds is hnswlib's ``RuntimeError``, not a raw ``MemoryError``.
"""

from __future__ import annotations

import json
import pickle
import struct
import subprocess
import sys
import textwrap
import threading
import tracemalloc
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

import memlane.compat.hnswlib as mhnsw
from memlane.errors import InvalidArgumentError

CORRUPTED = "Index seems to be corrupted or unsupported"
FULL = "The number of elements exceeds the specified limit"
MAGIC = b"memlane.compat.hnswlib\n"


def data(n: int = 50, dim: int = 8, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).random((n, dim), dtype=np.float32)


# -- threads ------------------------------------------------------------------------


def crowded_add(per: int, threads: int) -> tuple[mhnsw.Index, list[str]]:
    """``threads`` threads adding the same ``per`` labels into room for ``per``."""
    rows = data(per, 16)
    index = mhnsw.Index(space="l2", dim=16)
    index.init_index(per)
    start, errors = threading.Barrier(threads), []

    def work() -> None:
        start.wait()
        try:
            for j in range(0, per, 10):
                index.add_items(rows[j : j + 10], np.arange(j, j + 10))
        except Exception as e:
            errors.append(repr(e))

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return index, errors


def test_threads_adding_the_same_labels_count_each_once() -> None:
    for _ in range(5):  # the race needs a few tries to show
        index, errors = crowded_add(200, 8)
        assert errors == []
        assert index.element_count == 200 == len(index.get_ids_list())


def marked_and_added() -> mhnsw.Index:
    """Two threads marking 200 labels deleted while two others add 100 new ones."""
    index = mhnsw.Index(space="l2", dim=8)
    index.init_index(400)
    index.add_items(data(200))
    start = threading.Barrier(4)

    def mark(labels: range) -> None:
        start.wait()
        for label in labels:
            index.mark_deleted(label)
            index.unmark_deleted(label)
            index.mark_deleted(label)

    def add(labels: range) -> None:
        start.wait()
        for label in labels:
            index.add_items(data(1, seed=label), [label])

    workers = [
        threading.Thread(target=mark, args=(range(0, 100),)),
        threading.Thread(target=mark, args=(range(100, 200),)),
        threading.Thread(target=add, args=(range(200, 300),)),
        threading.Thread(target=add, args=(range(200, 300),)),
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return index


def test_threads_marking_and_adding_keep_the_count() -> None:
    for _ in range(5):  # the race needs a few tries to show
        index = marked_and_added()
        assert index.element_count == 300 == len(set(index.get_ids_list()))
        found = index.knn_query(data(1), k=100)[0][0].tolist()
        assert sorted(found) == list(range(200, 300))


def test_a_change_from_a_filter_callback_is_refused_beside_a_writer() -> None:
    # In a child: were the change to wait for a writer that waits for the search, the
    # process would hang.
    code = """
        import threading
        import numpy as np
        import memlane.compat.hnswlib as mhnsw
        from memlane.errors import InvalidArgumentError

        index = mhnsw.Index(space="l2", dim=8)
        index.init_index(10_000)
        index.add_items(np.random.default_rng(0).random((500, 8), dtype=np.float32))
        refused = []

        def changing(label):
            for change in (
                lambda: index.add_items(np.ones(8, np.float32), [9_999]),
                lambda: index.mark_deleted(1),
                lambda: index.resize_index(20_000),
            ):
                try:
                    change()
                except InvalidArgumentError as e:
                    refused.append(str(e))
            index.get_current_count()  # reads are allowed
            return True

        def write():
            for i in range(300):
                index.add_items(np.ones((1, 8), np.float32) * i, [1_000 + i])

        writer = threading.Thread(target=write)
        writer.start()
        for _ in range(30):
            index.knn_query(np.ones(8, np.float32), k=3, filter=changing)
        writer.join()
        assert 9_999 not in index.get_ids_list() and index.max_elements == 10_000
        assert index.element_count == 800 == len(index.get_ids_list())
        assert refused and set(refused) == {
            "the index cannot be changed from inside a callback of its own search"
        }
        print("ok")
    """
    try:
        child = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("a change from a filter callback deadlocked beside a writer")
    assert child.returncode == 0 and child.stdout.strip() == "ok", child.stderr[-2000:]


# -- refused adds ---------------------------------------------------------------------


def test_an_add_the_engine_refuses_changes_nothing() -> None:
    index = mhnsw.Index(space="l2", dim=4)
    index.init_index(3)
    for _ in range(3):
        with pytest.raises(InvalidArgumentError, match=r"norm .* its distances would overflow"):
            index.add_items(np.full((1, 4), 1e19, dtype=np.float32))
    assert index.element_count == 0 and index.get_ids_list() == []
    index.add_items(np.ones((3, 4), dtype=np.float32))
    assert index.get_ids_list() == [0, 1, 2]  # the refused calls took no default label


def test_a_refused_add_releases_no_deleted_label() -> None:
    index = mhnsw.Index(space="ip", dim=4)
    index.init_index(2, allow_replace_deleted=True)
    index.add_items(data(2, 4))
    index.mark_deleted(0)
    big = np.full((1, 4), 1e19, dtype=np.float32)
    with pytest.raises(InvalidArgumentError):
        index.add_items(np.vstack([data(1, 4), big]), [5, 6], replace_deleted=True)
    assert sorted(index.get_ids_list()) == [0, 1] and index.element_count == 2
    index.unmark_deleted(0)  # still there, as marked
    assert index.knn_query(data(2, 4), k=2)[0].shape == (2, 2)


def test_adds_refused_in_a_filter_callback_leave_no_phantom() -> None:
    index = mhnsw.Index(space="l2", dim=4)
    index.init_index(10)
    index.add_items(data(3, 4))

    def adding(label: int) -> bool:
        with pytest.raises(InvalidArgumentError):
            index.add_items(np.ones(4, dtype=np.float32), [7])
        return True

    index.knn_query(np.ones(4, dtype=np.float32), k=1, filter=adding)
    assert index.element_count == 3 and sorted(index.get_ids_list()) == [0, 1, 2]


# -- row order ------------------------------------------------------------------------


def test_a_repeated_label_and_a_full_index_leave_what_hnswlib_leaves(
    hnswlib_peer: ModuleType,
) -> None:
    rows = np.eye(4, dtype=np.float32)[:3]
    held = []
    for module in (hnswlib_peer, mhnsw):
        index = module.Index(space="l2", dim=4)
        index.init_index(1)
        with pytest.raises(RuntimeError, match=f"^{FULL}$"):
            index.add_items(rows, [5, 0, 5])
        held.append((index.get_ids_list(), index.get_items([5]).tolist(), index.element_count))
    assert held[0] == held[1] == ([5], [rows[0].tolist()], 1)


def test_rows_are_taken_in_order_up_to_the_first_over_the_capacity() -> None:
    rows = data(6, 4)
    index = mhnsw.Index(space="l2", dim=4)
    index.init_index(3)
    with pytest.raises(RuntimeError, match=f"^{FULL}$"):
        index.add_items(rows, [1, 2, 1, 3, 4, 2])
    # Row 4 (label 4) is the first over: rows 0 to 3 are in, label 1 with row 2's vector.
    assert sorted(index.get_ids_list()) == [1, 2, 3] and index.element_count == 3
    assert np.allclose(index.get_items([1, 2, 3]), rows[[2, 1, 3]])
    index.resize_index(4)
    index.add_items(rows[:1])  # the failed call took no default label: 0 is next
    assert 0 in index.get_ids_list()
    index.add_items(rows[:2], [1, 1])  # within a call, a label keeps its later vector
    assert np.allclose(index.get_items([1]), rows[1:2])


# -- saved headers --------------------------------------------------------------------


def header_and_rest(path: Path) -> tuple[dict[str, object], bytes]:
    raw = path.read_bytes()
    (n,) = struct.unpack_from("<Q", raw, len(MAGIC))
    head = json.loads(raw[len(MAGIC) + 8 : len(MAGIC) + 8 + n])
    return head, raw[len(MAGIC) + 8 + n :]


def with_header(path: Path, head: dict[str, object], rest: bytes) -> None:
    encoded = json.dumps(head).encode()
    path.write_bytes(MAGIC + struct.pack("<Q", len(encoded)) + encoded + rest)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("count", -7),
        ("count", 0),
        ("count", 5),
        ("count", 10**20),
        ("count", "3"),
        ("count", 3.0),
        ("count", True),
        ("max_elements", 2),
        ("max_elements", -1),
        ("max_elements", 2**64),
        ("max_elements", "10"),
        ("next_label", -1),
        ("next_label", None),
    ],
)
def test_a_header_that_disagrees_with_its_graph_is_refused(
    tmp_path: Path, key: str, value: object
) -> None:
    path = tmp_path / "index.bin"
    index = mhnsw.Index(space="l2", dim=4)
    index.init_index(10)
    index.add_items(data(4, 4))
    index.mark_deleted(2)  # the count holds deleted labels too
    index.save_index(path)
    head, rest = header_and_rest(path)
    with_header(path, head, rest)
    mhnsw.Index(space="l2", dim=4).load_index(path)  # as saved, it loads
    with_header(path, dict(head, **{key: value}), rest)
    loaded = mhnsw.Index(space="l2", dim=4)
    with pytest.raises(RuntimeError, match=f"^{CORRUPTED}: {str(path)!r} "):
        loaded.load_index(path)
    assert loaded.element_count == 0
    state = index.__getstate__()
    pickle.loads(pickle.dumps(index))  # as pickled, it loads
    state["meta"][key] = value
    with pytest.raises(RuntimeError, match=f"^{CORRUPTED}: the pickled index "):
        mhnsw.Index(space="l2", dim=4).__setstate__(state)


# -- hnswlib's files ------------------------------------------------------------------


def test_a_file_hnswlib_writes_with_a_label_twice_loads_as_hnswlib_loads_it(
    tmp_path: Path, hnswlib_peer: ModuleType
) -> None:
    rows = data(3, 4)
    path = tmp_path / "hnswlib.bin"
    theirs = hnswlib_peer.Index(space="l2", dim=4)
    theirs.init_index(10, allow_replace_deleted=True)
    theirs.add_items(rows, [0, 1, 2])
    theirs.mark_deleted(0)
    theirs.add_items(rows[:1] + 1, [1], replace_deleted=True)  # label 1 now twice
    theirs.mark_deleted(1)  # marks the record the label points to, the first
    theirs.save_index(str(path))
    back = hnswlib_peer.Index(space="l2", dim=4)
    back.load_index(str(path))
    ours = mhnsw.Index(space="l2", dim=4)
    ours.load_index(path)
    assert sorted(ours.get_ids_list()) == sorted(back.get_ids_list()) == [1, 2]
    # hnswlib's loader keeps the last record of the label: the old vector, not deleted.
    assert np.array_equal(ours.get_items([1]), back.get_items([1]))
    assert np.array_equal(ours.get_items([1]), rows[1:2])
    assert ours.knn_query(rows[1], k=2)[0].tolist() == [[1, 2]]
    assert ours.element_count == 2  # one place a label (hnswlib counts its records: 3)


# -- BFIndex --------------------------------------------------------------------------


def test_bfindex_refuses_a_capacity_no_memory_holds_as_hnswlib_does(
    hnswlib_peer: ModuleType,
) -> None:
    for module in (hnswlib_peer, mhnsw):
        with pytest.raises(RuntimeError, match=r"^Not enough memory: BruteforceSearch failed"):
            module.BFIndex(space="l2", dim=8).init_index(2**40)


def test_bfindex_allocates_for_the_labels_held_not_the_capacity() -> None:
    bf = mhnsw.BFIndex(space="l2", dim=64)
    tracemalloc.start()
    try:
        bf.init_index(2_000_000)  # 512 MB of vectors at capacity
        bf.add_items(data(3, 64))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, peak
    more = data(100, 64, seed=1)
    bf.add_items(more)  # grows as labels arrive
    labels, distances = bf.knn_query(more[[0, 99]], k=1)
    assert labels.ravel().tolist() == [3, 102] and np.allclose(distances, 0)
    assert bf.get_current_count() == 103 and bf.get_max_elements() == 2_000_000


@pytest.mark.parametrize("claim", [2**40, 2**62, 2**64 - 1])
def test_bfindex_load_of_a_capacity_no_memory_holds_is_a_runtime_error(
    tmp_path: Path, claim: int
) -> None:
    path = tmp_path / "bf.bin"
    bf = mhnsw.BFIndex(space="l2", dim=8)
    bf.init_index(10)
    bf.add_items(data(3))
    bf.save_index(path)
    head, rest = header_and_rest(path)
    with_header(path, dict(head, max_elements=claim), rest)
    with pytest.raises(RuntimeError, match=r"^Not enough memory: loadIndex failed"):
        mhnsw.BFIndex(space="l2", dim=8).load_index(path)
    with_header(path, dict(head, max_elements=2), rest)  # below the count: damaged
    with pytest.raises(RuntimeError, match=f"^{CORRUPTED}: "):
        mhnsw.BFIndex(space="l2", dim=8).load_index(path)
    # In hnswlib's own format: max_elements, bytes per element, count, then the records.
    records = b"".join(np.ones(8, np.float32).tobytes() + struct.pack("<Q", i) for i in range(3))
    path.write_bytes(struct.pack("<3Q", claim, 40, 3) + records)
    with pytest.raises(RuntimeError, match=r"^Not enough memory: loadIndex failed"):
        mhnsw.BFIndex(space="l2", dim=8).load_index(path)
    path.write_bytes(struct.pack("<3Q", 10, 40, 3) + records)
    loaded = mhnsw.BFIndex(space="l2", dim=8)
    loaded.load_index(path)
    loaded.add_items(data(7))  # room up to the file's capacity
    assert loaded.get_current_count() == 10
    with pytest.raises(RuntimeError, match=f"^{FULL}$"):
        loaded.add_items(data(1))
