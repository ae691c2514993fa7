"""The PyO3 bindings of the indexes (rust/py), found by attacking them.

- A huge ``k`` given to ``HnswIndex.search_where`` (or to hnswlib's ``knn_query`` with a
  filter callable, which calls it) is the InvalidArgumentError ``search`` gives: its
  result buffers were allocated from ``k`` before anything checked it, a PanicException
  for ``k=2**62`` and an aborted process for ``k=2**40``. ``unblobs`` with a dimension
  no index has is an InvalidArgumentError, not an allocation of ``n * dim`` floats (nor,
  with no blobs, numpy's raw ValueError for an ``(0, 2**62)`` array).
- No binding waits for an index's lock holding the GIL: ``search_where`` held the read
  lock while its predicate took the GIL, and ``len``, ``in`` and ``add`` took the lock
  with the GIL held, so a writer waiting between them (parking_lot's lock is fair)
  deadlocked the process. A predicate may ask its own index again; it may not change it.
- Every int parameter out of range is memlane's InvalidArgumentError naming it, never
  PyO3's raw OverflowError: ints inside a list too (``Engine.nearest``'s groups,
  ``Engine.fill``'s ids, ``log_entries``' and ``log_blobs``' rowids), named with their
  position. ``Engine.touch`` refuses a time that is not finite, as ``Engine.search`` does.
- A list of ints is read item by item, its ``__len__`` only a hint: ``range(-1, 2**40)``
  as rowids or groups (refused at its first item) aborted the process reserving 8 TB,
  and a ``__len__`` of ``2**62`` raised PanicException('capacity overflow').

The checks that may crash or hang the interpreter run in a child process.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from memlane import BM25Index, HnswIndex
from memlane._core import BM25Okapi, Engine, WordPiece, log_blobs, log_entries, unblobs
from memlane.errors import CorruptFileError, InvalidArgumentError, UnknownIdError

# A child whose allocation is refused aborts at once instead of eating the machine.
LIMIT_MEMORY = "import resource; resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))\n"


def run_child(code: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Runs `code` in a fresh interpreter; a hang fails the test instead of the suite."""
    try:
        return subprocess.run(
            [sys.executable, "-c", LIMIT_MEMORY + textwrap.dedent(code)],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the child still ran after {timeout} s (deadlocked?): {e.stderr!r}")


def child_results(code: str, timeout: float = 120) -> Any:
    """The JSON the child prints last, after checking it exited normally."""
    p = run_child(code, timeout)
    assert p.returncode == 0, f"child died ({p.returncode}): {p.stderr[-2000:]}"
    return json.loads(p.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------
# 1. A huge k is refused before anything is allocated from it


def test_search_where_huge_k_is_the_error_search_gives() -> None:
    results = child_results(
        """
        import json
        import numpy as np
        import memlane
        import memlane.compat.hnswlib as hnswlib

        idx = memlane.HnswIndex(dim=4)
        idx.add([1, 2], np.random.rand(2, 4).astype(np.float32))
        one, many = np.ones((1, 4), np.float32), np.ones((100, 4), np.float32)
        ci = hnswlib.Index(space="l2", dim=4)
        ci.init_index(10)
        ci.add_items(np.random.rand(2, 4))

        def outcome(call):
            try:
                call()
                return ["no error"]
            except BaseException as e:
                return [type(e).__name__, str(e)]

        cases = {}
        for k in [2**62, 2**40, 2**24 + 1]:
            cases[f"search_where k={k}"] = (
                outcome(lambda: idx.search_where(one, lambda i: True, k=k)),
                outcome(lambda: idx.search(one, k=k)),
            )
        # Each k fits alone; the padded (100, 2**24) result is too large.
        cases["search_where 100 x 2**24"] = (
            outcome(lambda: idx.search_where(many, lambda i: True, k=2**24)),
            outcome(lambda: idx.search(many, k=2**24)),
        )
        cases["knn_query filter k=2**40"] = (
            outcome(lambda: ci.knn_query(one, k=2**40, filter=lambda label: True)),
            outcome(lambda: ci.knn_query(one, k=2**40)),
        )
        print(json.dumps(cases))
        """
    )
    for name, (where, plain) in results.items():
        assert where[0] == "InvalidArgumentError", (name, where)
        assert where == plain, name
        assert "too large" in where[1], name


def test_search_where_still_answers_after_the_check() -> None:
    idx = HnswIndex(dim=4, metric="l2")
    vectors = np.eye(4, dtype=np.float32)
    idx.add([10, 11, 12, 13], vectors)
    labels, dists = idx.search_where(vectors, lambda i: i != 12, k=3)
    assert labels.shape == dists.shape == (4, 3)
    assert 12 not in labels
    assert labels[0, 0] == 10 and dists[0, 0] == 0.0
    empty = idx.search_where(np.zeros((0, 4), np.float32), lambda i: True, k=5)
    assert empty[0].shape == (0, 5)
    with pytest.raises(ZeroDivisionError):
        idx.search_where(vectors, lambda i: 1 / 0, k=2)
    with pytest.raises(InvalidArgumentError, match="k must be at least 1"):
        idx.search_where(vectors, lambda i: True, k=0)


def test_unblobs_with_a_huge_dim_is_refused_before_any_allocation() -> None:
    results = child_results(
        """
        import json
        from memlane._core import unblobs

        out = {}
        for dim in [65_537, 2**40, 2**62, 2**63 - 1]:
            for stored in ([b"abcd"], []):
                try:
                    unblobs(stored, dim)
                    out[f"{dim} {len(stored)}"] = "no error"
                except BaseException as e:
                    out[f"{dim} {len(stored)}"] = f"{type(e).__name__}: {e}"
        print(json.dumps(out))
        """
    )
    assert all(
        r.startswith("InvalidArgumentError: dim must be at most 65536") for r in results.values()
    ), results
    assert unblobs([], 65_536).shape == (0, 65_536)
    with pytest.raises(CorruptFileError, match="dimension 3"):
        unblobs([np.ones(3, np.float32).tobytes(), b"abc"], 3)
    assert unblobs([np.ones(3, np.float32).tobytes()], 3).tolist() == [[1.0, 1.0, 1.0]]


# ---------------------------------------------------------------------------
# 2. No lock is waited for with the GIL held


def test_search_where_beside_writers_and_readers_does_not_deadlock() -> None:
    results = child_results(
        """
        import json, threading
        import numpy as np
        import memlane

        dim = 8
        rng = np.random.default_rng(0)
        idx = memlane.HnswIndex(dim=dim, metric="l2")
        idx.add(np.arange(2000, dtype=np.uint64), rng.random((2000, dim), dtype=np.float32))
        lock = threading.Lock()
        next_id = [10**6]
        done, counts = [], {"searches": 0, "looks": 0}

        def query():
            q = np.random.default_rng(1).random((4, dim), dtype=np.float32)
            while len(done) < 2:
                idx.search_where(q, lambda i: i % 2 == 0, k=5)
                counts["searches"] += 1

        def add(seed):
            r = np.random.default_rng(seed)
            for _ in range(1500):
                with lock:
                    i = next_id[0]
                    next_id[0] += 1
                idx.add([i], r.random((1, dim), dtype=np.float32))
            done.append(1)

        def look():
            while len(done) < 2:
                len(idx)
                _ = 5 in idx
                counts["looks"] += 1

        threads = [threading.Thread(target=f, args=a) for f, a in
                   [(query, ()), (add, (2,)), (add, (3,)), (look, ())]]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print(json.dumps({"len": len(idx), **counts}))
        """
    )
    assert results["len"] == 2000 + 3000
    assert results["searches"] > 0 and results["looks"] > 0


def test_a_predicate_may_read_its_own_index_while_a_writer_waits() -> None:
    results = child_results(
        """
        import json, threading, time
        import numpy as np
        import memlane

        idx = memlane.HnswIndex(dim=4, metric="l2")
        idx.add(np.arange(200, dtype=np.uint64), np.random.rand(200, 4).astype(np.float32))
        q = np.ones((1, 4), np.float32)
        started = threading.Event()
        seen = []

        def predicate(i):
            if not started.is_set():
                started.set()
                time.sleep(0.3)  # the writer is now waiting for the lock
            # Asking the index again from inside its own search.
            seen.append((len(idx), 3 in idx, idx.dim))
            idx.search(q, k=2)
            return True

        def write():
            started.wait()
            idx.add([10_000], np.ones((1, 4), np.float32))

        writer = threading.Thread(target=write)
        writer.start()
        labels, _ = idx.search_where(q, predicate, k=3)
        writer.join()
        try:
            idx.search_where(q, lambda i: idx.add([20_000], q) or True, k=1)
            changed = "no error"
        except memlane.errors.InvalidArgumentError as e:
            changed = str(e)
        print(json.dumps({"seen": len(seen), "found": len(labels[0]), "len": len(idx),
                          "changed": changed}))
        """
    )
    assert results["seen"] > 0 and results["found"] == 3
    assert results["len"] == 201
    assert "cannot be changed from inside" in results["changed"]


def test_bm25_readers_and_writers_share_the_index() -> None:
    results = child_results(
        """
        import json, threading
        import memlane

        bm = memlane.BM25Index()
        bm.add(list(range(100)), [f"fox number {i}" for i in range(100)])
        done = []

        def write(start):
            for i in range(start, start + 500):
                bm.add([i], [f"hound {i}"])
            done.append(1)

        def read():
            while len(done) < 2:
                len(bm), 3 in bm, bm.vocabulary_size, bm.stopwords, repr(bm)
                bm.search("fox", k=3)

        threads = [threading.Thread(target=write, args=(1000,)),
                   threading.Thread(target=write, args=(5000,)),
                   threading.Thread(target=read), threading.Thread(target=read)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print(json.dumps({"len": len(bm)}))
        """
    )
    assert results["len"] == 1100


# ---------------------------------------------------------------------------
# 3. An int out of range is InvalidArgumentError naming the parameter


@pytest.fixture
def hnsw() -> HnswIndex:
    idx = HnswIndex(dim=4)
    idx.add([1], np.ones((1, 4), np.float32))
    return idx


@pytest.fixture
def bm25() -> BM25Index:
    bm = BM25Index()
    bm.add([1], ["fox"])
    return bm


Q = np.ones(4, np.float32)
# Beyond both 64-bit ranges, on either side.
HUGE = [2**64, 2**200, -(2**64), -(2**200)]

Call = Callable[[int, HnswIndex, BM25Index], object]
# (the parameter named in the message, the call), one per int parameter of the bindings.
CALLS: list[tuple[str, Call]] = [
    ("dim", lambda v, h, b: HnswIndex(dim=v)),
    ("m", lambda v, h, b: HnswIndex(dim=4, m=v)),
    ("ef_construction", lambda v, h, b: HnswIndex(dim=4, ef_construction=v)),
    ("ef", lambda v, h, b: HnswIndex(dim=4, ef=v)),
    ("seed", lambda v, h, b: HnswIndex(dim=4, seed=v)),
    ("k", lambda v, h, b: h.search(Q, k=v)),
    ("ef", lambda v, h, b: h.search(Q, ef=v)),
    ("k", lambda v, h, b: h.search_where(Q, bool, k=v)),
    ("ef", lambda v, h, b: h.search_where(Q, bool, ef=v)),
    ("ef", lambda v, h, b: setattr(h, "ef", v)),
    ("k", lambda v, h, b: b.search("fox", k=v)),
    ("k", lambda v, h, b: b.search_batch(["fox"], k=v)),
    ("dim", lambda v, h, b: Engine(dim=v)),
    ("m", lambda v, h, b: Engine(dim=4, m=v)),
    ("ef_construction", lambda v, h, b: Engine(dim=4, ef_construction=v)),
    ("ef", lambda v, h, b: Engine(dim=4, ef=v)),
    ("seed", lambda v, h, b: Engine(dim=4, seed=v)),
    ("ef", lambda v, h, b: Engine(dim=4).set_ef(v)),
    ("max", lambda v, h, b: Engine(dim=4).index_pending(max=v)),
    ("budget", lambda v, h, b: Engine(dim=4).settle_pages(v)),
    ("offset", lambda v, h, b: Engine().ids_where(offset=v)),
    ("limit", lambda v, h, b: Engine().ids_where(limit=v)),
    ("id", lambda v, h, b: Engine().vector(v)),
    ("seq", lambda v, h, b: Engine().save("/nonexistent", v)),
    ("end", lambda v, h, b: Engine().fill_log("/nonexistent", v)),
    ("dim", lambda v, h, b: unblobs([], v)),
    ("max_length", lambda v, h, b: WordPiece.from_file("/nonexistent.json", max_length=v)),
]


@pytest.mark.parametrize("value", HUGE)
@pytest.mark.parametrize(
    ("name", "call"), CALLS, ids=[f"{i}-{n}" for i, (n, _) in enumerate(CALLS)]
)
def test_an_int_out_of_range_names_its_parameter(
    name: str, call: Call, value: int, hnsw: HnswIndex, bm25: BM25Index
) -> None:
    with pytest.raises(InvalidArgumentError, match=rf"^{name} must ") as caught:
        call(value, hnsw, bm25)
    assert not isinstance(caught.value, OverflowError)
    assert str(value) in str(caught.value)


def test_in_range_ints_and_other_types_behave_as_before(hnsw: HnswIndex) -> None:
    idx = HnswIndex(dim=4, seed=2**64 - 1, ef=2**40)
    assert idx.seed == 2**64 - 1 and idx.ef == 2**40
    hnsw.ef = np.int64(7)  # type: ignore[assignment]
    assert hnsw.ef == 7
    hnsw.ef = 2**63  # hnswlib takes any size_t
    assert hnsw.ef == 2**63
    assert hnsw.search(Q, k=np.uint64(3), ef=2**63)[0].shape == (1, 3)
    with pytest.raises(InvalidArgumentError, match="ef must be at least 1, got 0"):
        hnsw.ef = 0
    with pytest.raises(InvalidArgumentError, match="seed must not be negative, got -1"):
        HnswIndex(dim=4, seed=-1)
    with pytest.raises(InvalidArgumentError, match="dim must not be negative, got -1"):
        HnswIndex(dim=-1)
    with pytest.raises(TypeError):
        hnsw.search(Q, k="3")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        HnswIndex(dim=4.0)  # type: ignore[arg-type]


def test_other_bindings_refuse_huge_ints_as_argument_errors() -> None:
    okapi = BM25Okapi([["fox"], ["dog"]])
    assert okapi.get_batch_scores(["fox"], [1, 0]).shape == (2,)
    for bad in [2, -1, 2**64, -(2**70)]:
        with pytest.raises(InvalidArgumentError, match=f"document {bad} is out of range"):
            okapi.get_batch_scores(["fox"], [0, bad])
    with pytest.raises(InvalidArgumentError, match="max_length must not be negative, got -1"):
        WordPiece.from_file("/nonexistent.json", max_length=-1)


# Ints inside a list, each with the list's name and its position in the message.
LIST_CALLS: list[tuple[str, Callable[[int], object]]] = [
    ("groups[1]", lambda v: Engine(dim=4).nearest(np.ones((2, 4), np.float32), [0, v], [{}], 0.5)),
    ("the id of rows[1]", lambda v: Engine(dim=4).fill([(1, bytes(16)), (v, bytes(16))])),
    ("rowids[1]", lambda v: log_entries(0, None, [1, v], [b"abcd", b"abcd"])),
    ("rowids[1]", lambda v: log_blobs("/nonexistent", 0, [1, v], [b"", b""])),
]


@pytest.mark.parametrize("value", [-1, 2**64, *HUGE])
@pytest.mark.parametrize(
    ("name", "call"), LIST_CALLS, ids=[f"{i}-{n}" for i, (n, _) in enumerate(LIST_CALLS)]
)
def test_an_int_out_of_range_in_a_list_names_the_list_and_its_place(
    name: str, call: Callable[[int], object], value: int
) -> None:
    with pytest.raises(InvalidArgumentError, match=rf"^{re.escape(name)} must ") as caught:
        call(value)
    assert not isinstance(caught.value, OverflowError)
    assert str(value) in str(caught.value)


def test_a_group_past_32_bits_is_refused_and_groups_in_range_still_work() -> None:
    engine = Engine(dim=4)
    vectors = np.ones((2, 4), np.float32)
    with pytest.raises(InvalidArgumentError, match=r"^groups\[0\] must be at most 4294967295"):
        engine.nearest(vectors, [2**32, 0], [{}], 0.5)
    ids, _ = engine.nearest(vectors, np.zeros(2, np.uint32), [{}], 0.5)
    assert ids.tolist() == [2**64 - 1] * 2
    with pytest.raises(TypeError):
        engine.nearest(vectors, [0, 1.5], [{}], 0.5)  # type: ignore[list-item]
    data, markers, _, _ = log_entries(0, None, np.array([1, 2**64 - 1], np.uint64), [b"a", b"b"])
    assert len(markers) == 2 and data


@pytest.mark.parametrize("now", [float("nan"), float("inf"), float("-inf")])
def test_touch_refuses_a_time_that_is_not_finite(now: float) -> None:
    engine = Engine()
    with pytest.raises(InvalidArgumentError, match="now must be a finite time"):
        engine.touch([1], now)
    engine.touch([1], 1.0)  # an unknown id is skipped


@pytest.mark.parametrize(
    ("ids", "message"),
    [
        ([True], "must be integers"),
        ([1, 2.0], "must be integers"),
        ([-1], "must be non-negative"),
        ([1, -2], "must be non-negative"),
        (["1"], "must be integers"),
    ],
)
def test_a_list_of_ids_is_checked_as_an_array_is(ids: list[object], message: str) -> None:
    # A list of exact ints skips numpy; anything else gets numpy's checks.
    engine = Engine()
    with pytest.raises(InvalidArgumentError, match=message):
        engine.touch(ids, 1.0)
    with pytest.raises(InvalidArgumentError, match=message):
        engine.touch(np.asarray(ids), 1.0)


@pytest.mark.parametrize("missing", [-1, 2**64, 2**200, -(2**200)])
def test_a_vector_by_an_id_no_index_can_hold_is_an_unknown_id(missing: int) -> None:
    index = HnswIndex(dim=2)
    index.add(np.array([1], dtype=np.uint64), np.array([[1.0, 0.0]], dtype=np.float32))
    with pytest.raises(UnknownIdError, match="unknown id"):
        index.get_vector(missing)
    with pytest.raises(InvalidArgumentError, match="id must be an int, got str"):
        index.get_vector("1")  # type: ignore[arg-type]


def test_a_list_of_ints_is_not_reserved_by_its_length() -> None:
    results = child_results(
        """
        import json
        import numpy as np
        from memlane._core import BM25Index, Engine, log_entries

        class Claims:
            def __init__(self, items): self.items = items
            def __len__(self): return 2**62
            def __iter__(self): return iter(self.items)

        def nearest(groups):
            return Engine(dim=4).nearest(np.ones((2, 4), np.float32), groups, [{}], 0.5)

        calls = {
            "rowids": lambda: log_entries(0, None, range(-1, 2**40), [b"ab", b"ab"]),
            "groups": lambda: nearest(range(-1, 2**40)),
            "claimed rowids": lambda: len(log_entries(0, None, Claims([1, 2]), [b"a", b"b"])[1]),
            "claimed groups": lambda: len(nearest(Claims([0, 0]))[0]),
            "long rowids": lambda: len(log_entries(0, None, range(1, 10_001), [b"a"] * 10_000)[1]),
            "claimed texts": lambda: BM25Index().add(np.array([1], np.uint64), Claims(["a b"])),
            "claimed rows": lambda: type(Engine(dim=4).prepare(Claims([]), True)).__name__,
        }
        out = {}
        for name, call in calls.items():
            try:
                out[name] = call()
            except Exception as e:
                out[name] = f"{type(e).__name__}: {e}"
        print(json.dumps(out))
        """
    )
    assert results == {
        "rowids": "InvalidArgumentError: rowids[0] must not be negative, got -1",
        "groups": "InvalidArgumentError: groups[0] must not be negative, got -1",
        "claimed rowids": 2,
        "claimed groups": 2,
        "long rowids": 10_000,
        "claimed texts": None,
        "claimed rows": "PreparedBatch",
    }


def _unaligned(values: np.ndarray) -> np.ndarray:
    """``values`` as a C-contiguous array whose data starts one byte off alignment."""
    raw = np.zeros(values.nbytes + 1, dtype=np.uint8)
    out = np.frombuffer(raw.data, dtype=values.dtype, count=values.size, offset=1)
    out = out.reshape(values.shape)
    out[...] = values
    assert not out.flags.aligned and out.flags.c_contiguous
    return out


def test_ids_and_vectors_in_any_layout_are_read_as_given() -> None:
    # numpy's strides need not be whole elements (a field of a record array), and a
    # contiguous array need not be aligned: each is read as numpy reads it.
    records = np.zeros(3, dtype=[("id", "<u8"), ("pad", "<u2")])
    records["id"] = [7, 8, 9]
    ids = records["id"]
    assert ids.strides == (10,)
    vectors = np.eye(3, 4, dtype=np.float32) + 0.1
    index = HnswIndex(dim=4)
    index.add(ids, _unaligned(vectors))
    labels, _ = index.search(_unaligned(vectors), k=1)
    assert labels[:, 0].tolist() == [7, 8, 9]
    labels, _ = index.search(_unaligned(vectors[1]), k=1)
    assert labels[0, 0] == 8
