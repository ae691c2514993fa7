"""A search or a listing returns each record as the engine judged it: a record another
writer rewrites between the engine's answer and the read of its row (an ``update`` of
its type, its metadata or its text) is read again, never handed over in a version the
filter did not admit. Both backends; on PostgreSQL the writer may be another process.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import StoreFactory, WordHashEmbedder
from memlane import Memory

ROWS_BETWEEN = Callable[[], None]


@contextlib.contextmanager
def rewrite_between(mem: Memory, write: ROWS_BETWEEN) -> Iterator[None]:
    """Runs ``write`` once, right after the engine answered the next read and before its
    rows are read."""
    sync = mem._sync
    rows = sync.rows
    done = threading.Event()

    def between(ids: Any, embedding: bool = False) -> Any:
        if not done.is_set():
            done.set()
            write()
        return rows(ids, embedding=embedding)

    sync.rows = between  # type: ignore[method-assign]
    try:
        yield
    finally:
        sync.rows = rows  # type: ignore[method-assign]
    assert done.is_set()


def store(make_store: StoreFactory) -> tuple[Memory, list[str]]:
    mem = make_store("judged", WordHashEmbedder())
    ids = [
        mem.add(f"apples and pears {i}", type="semantic", metadata={"n": i}).id for i in range(6)
    ]
    return mem, ids


@pytest.mark.parametrize("read", ["search", "list"])
def test_a_record_rewritten_between_the_answer_and_its_row(
    make_store: StoreFactory, read: str
) -> None:
    mem, ids = store(make_store)

    def ask() -> list[Any]:
        if read == "search":
            return [h.record for h in mem.search("apples", 10, type="semantic")]
        return mem.list(type="semantic", limit=10)

    with rewrite_between(mem, lambda: mem.update(ids[2], type="procedural")):
        got = ask()
    assert {r.type for r in got} == {"semantic"}
    assert ids[2] not in {r.id for r in got} and len(got) == 5
    # A rewrite the filter still admits is read in its new version.
    with rewrite_between(mem, lambda: mem.update(ids[3], metadata={"n": 30})):
        got = ask()
    assert {r.id: r.metadata["n"] for r in got}[ids[3]] == 30


@pytest.mark.parametrize("read", ["search", "list"])
def test_a_renewal_between_the_answer_and_its_row(make_store: StoreFactory, read: str) -> None:
    """A renewal changes ``expires_at`` alone (``updated_at`` stays): a filter on the
    expiry still gets the version it admitted."""
    mem, ids = store(make_store)
    far = time.time() + 10_000
    mem.renew(ids, expires_at=far)
    flt = {"expires_at": {"$gt": far - 1}}

    def ask() -> list[Any]:
        if read == "search":
            return [h.record for h in mem.search("apples", 10, filters=flt)]
        return mem.list(filters=flt, limit=10)

    with rewrite_between(mem, lambda: mem.renew([ids[1]], expires_at=far - 5_000)):
        got = ask()
    assert ids[1] not in {r.id for r in got} and len(got) == 5
    assert all(r.expires_at == far for r in got)


def test_a_search_read_again_records_each_access_once(make_store: StoreFactory) -> None:
    """The accesses a search read again records are those of the hits it returns, in the
    engine (which orders and filters by them) as in the store: one that only the round
    read again found is counted in both."""
    mem, ids = store(make_store)
    first = [h.record.id for h in mem.search("apples", 5, type="semantic", track_access=False)]
    with rewrite_between(mem, lambda: mem.update(first[0], type="procedural")):
        hits = mem.search("apples", 5, type="semantic")
    returned = {h.record.id for h in hits}
    assert first[0] not in returned and len(returned) == 5
    assert returned - set(first)  # the hit the first round did not reach
    assert {h.record.access_count for h in hits} == {1}
    assert {r.id for r in mem.list(filters={"access_count": 1}, limit=10)} == returned
    assert {r.id: r.access_count for r in map(mem.get, ids)} == {i: int(i in returned) for i in ids}


def test_another_writer_of_the_store_between_the_answer_and_its_row(
    make_store: StoreFactory, tmp_path: Path
) -> None:
    if make_store.backend != "postgres":
        pytest.skip("an embedded store admits one process, whose writes reach its engine")
    mem, ids = store(make_store)
    other = Memory(make_store.location("judged"), WordHashEmbedder(), cache_dir=tmp_path / "other")
    make_store.opened.add(other)
    with rewrite_between(mem, lambda: other.update(ids[1], type="procedural")):
        got = mem.search("apples", 10, type="semantic")
    # Either the version judged (the rows this process keeps follow its engine) or left
    # out, never the rewrite the filter does not admit.
    assert {h.record.type for h in got} == {"semantic"}
    with rewrite_between(mem, lambda: other.update(ids[4], type="procedural")):
        listed = mem.list(type="semantic", limit=10)
    assert {r.type for r in listed} == {"semantic"}


def test_reads_racing_a_writer_thread(make_store: StoreFactory) -> None:
    mem, ids = store(make_store)
    stop = threading.Event()

    def writer() -> None:
        for i in range(150):
            kind = "procedural" if (i // len(ids)) % 2 == 0 else "semantic"
            mem.update(ids[i % len(ids)], type=kind)
        stop.set()

    t = threading.Thread(target=writer)
    t.start()
    wrong = []
    while not stop.is_set():
        wrong += [
            h.record.id
            for h in mem.search("apples", 10, type="semantic")
            if h.record.type != "semantic"
        ]
        wrong += [r.id for r in mem.list(type="semantic", limit=10) if r.type != "semantic"]
    t.join()
    assert wrong == []


WRITER = """
import sys
sys.path.insert(0, sys.argv[1])
from conftest import WordHashEmbedder
from memlane import Memory
mem = Memory(sys.argv[2], WordHashEmbedder(), cache_dir=sys.argv[3])
ids = sys.argv[4:]
for i in range(400):
    mem.update(ids[i % len(ids)], type="procedural" if (i // len(ids)) % 2 == 0 else "semantic")
mem.close()
"""


def test_reads_racing_a_writer_process(make_store: StoreFactory, tmp_path: Path) -> None:
    if make_store.backend != "postgres":
        pytest.skip("an embedded store admits one process")
    mem, ids = store(make_store)
    location = str(make_store.location("judged"))
    cache = str(tmp_path / "writer-cache")
    tests = str(Path(__file__).resolve().parent.parent)
    proc = subprocess.Popen([sys.executable, "-c", WRITER, tests, location, cache, *ids])
    wrong = []
    while proc.poll() is None:
        wrong += [
            h.record.id
            for h in mem.search("apples", 10, type="semantic")
            if h.record.type != "semantic"
        ]
        wrong += [r.id for r in mem.list(type="semantic", limit=10) if r.type != "semantic"]
    assert proc.returncode == 0
    assert wrong == []
