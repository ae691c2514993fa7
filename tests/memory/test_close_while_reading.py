"""``close`` while other threads read: each read returns or raises a memlane error, and
the process never crashes (closing a SQLite connection in the middle of a read on it
crashed the sqlite3 module; two saves of the snapshot at once clashed on its files).
Run in a child process, so a crash fails the test instead of ending the run."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import StoreFactory
from memlane import (
    AsyncMemory,
    ClosedError,
    InvalidArgumentError,
    Memory,
    MemoryRecord,
    StorageError,
    StoreClosedError,
)
from memlane.storage import postgres

CHILD = r"""
import sys, tempfile, threading
import memlane
from memlane.errors import ClosedError, MemlaneError

raw, other = [], set()
for cycle in range(12):
    m = memlane.Memory(tempfile.mkdtemp(dir=sys.argv[1]))
    m.add_many([{"text": f"seed {i} kiwi", "id": f"s{i}"} for i in range(400)])
    stop = threading.Event()

    def read(kind):
        i = 0
        while not stop.is_set():
            i += 1
            try:
                if kind == 0:
                    f"s{i % 400}" in m
                elif kind == 1:
                    m.snapshot()
                elif kind == 2:
                    m.get(f"s{i % 400}")
                else:
                    m.list(limit=50)
            except ClosedError:
                pass
            except MemlaneError as e:  # closing is not this error's cause
                other.add(repr(e))
            except Exception as e:  # a raw error reached the caller
                raw.append(repr(e))

    threads = [threading.Thread(target=read, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    m.close()
    stop.set()
    for t in threads:
        t.join()
    with memlane.Memory(m.location) as again:
        assert len(again) == 400, len(again)
print("other", sorted(other))
print("raw", raw)
"""


def test_reads_racing_close_end_cleanly(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    # Each read returned, or raised ClosedError (a read that was waiting for the store
    # as it closed is a StoreClosedError, also a StorageError).
    assert done.stdout.strip().endswith("other []\nraw []"), done.stdout[-2000:]


@pytest.mark.parametrize("path", [12, None, b"x".decode, "a\x00b"])
def test_jsonl_paths_are_checked(tmp_path: Path, path: object) -> None:
    with Memory(tmp_path / "store") as mem:
        with pytest.raises(InvalidArgumentError, match="path"):
            mem.export_jsonl(path)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError, match="path"):
            mem.import_jsonl(path)  # type: ignore[arg-type]


def test_close_does_not_wait_for_an_export_to_a_stalled_pipe(tmp_path: Path) -> None:
    """An export blocked writing into a pipe nobody reads holds its read for as long:
    close leaves that read its connection (the read closes it as it ends)."""
    mem = Memory(tmp_path / "store", None)
    mem.add_many([{"text": "x" * 200 + f" {i}"} for i in range(3000)])
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # open, and never read
    outcome: list[BaseException | int] = []

    def export() -> None:
        try:
            outcome.append(mem.export_jsonl(fifo))
        except BaseException as e:  # what the export met once the pipe was drained
            outcome.append(e)

    exporting = threading.Thread(target=export)
    exporting.start()
    closing = threading.Thread(target=mem.close)
    closing.start()
    closing.join(120)
    try:
        assert not closing.is_alive(), "close waited for the export"
    finally:
        with os.fdopen(reader, "rb") as pipe:  # drain it: the export ends
            while exporting.is_alive():
                try:
                    pipe.read()
                except BlockingIOError:
                    exporting.join(0.01)
        exporting.join()
    assert len(outcome) == 1


def test_no_subscription_after_close(tmp_path: Path) -> None:
    mem = Memory(tmp_path / "store", None)
    mem.close()
    with pytest.raises(ClosedError):
        mem.events.subscribe()


class _NotAPath:
    def __fspath__(self) -> object:
        return 12


def test_a_path_like_that_gives_no_path_is_refused(tmp_path: Path) -> None:
    with Memory(tmp_path / "store", None) as mem, pytest.raises(InvalidArgumentError):
        mem.import_jsonl(_NotAPath())  # type: ignore[arg-type]


def test_len_of_a_closed_store_raises(make_store: StoreFactory) -> None:
    mem = make_store("len-closed")
    mem.add("one")
    mem.close()
    with pytest.raises(ClosedError):
        len(mem)


def test_close_is_not_held_off_by_reads_holding_every_connection(
    make_store: StoreFactory, tmp_path: Path
) -> None:
    """On PostgreSQL a read holds a pooled connection while it runs: with exports into
    pipes nobody reads holding all of them, close still flushes the access counts (on a
    connection of its own) and returns."""
    if make_store.server is None:
        pytest.skip("SQLite: test_close_does_not_wait_for_an_export_to_a_stalled_pipe")
    mem = make_store("held")
    mem.add_many([{"text": "x" * 200 + f" {i}", "id": f"r{i}"} for i in range(3000)])
    hits = [h.record.id for h in mem.search("x 7", k=3, mode="text", track_access=True)]
    stalled = _stalled_exports(mem, tmp_path)
    closing = threading.Thread(target=mem.close)
    closing.start()
    closing.join(120)
    try:
        assert not closing.is_alive(), "close waited for the exports"
    finally:
        _end(stalled)
    again = make_store("held")
    assert hits and [again.get(i).access_count for i in hits] == [1] * len(hits)
    again.close()


def _stalled_exports(mem: Memory, folder: Path) -> tuple[list[int], list[threading.Thread]]:
    """Eight exports (the pool's size) into pipes opened and never read: each holds a
    connection until ``_end``."""
    readers, exports = [], []
    for n in range(8):
        fifo = folder / f"pipe{n}"
        os.mkfifo(fifo)
        readers.append(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))
        exports.append(threading.Thread(target=_export, args=(mem, fifo), daemon=True))
        exports[-1].start()
    return readers, exports


def _end(stalled: tuple[list[int], list[threading.Thread]]) -> None:
    """Ends the exports (a broken pipe)."""
    readers, exports = stalled
    for reader in readers:
        os.close(reader)
    for export in exports:
        export.join(60)


def _export(mem: Memory, fifo: Path) -> None:
    with contextlib.suppress(BaseException):  # what the export met once its pipe broke
        mem.export_jsonl(fifo)


def test_close_waits_for_a_crowded_pool_once(
    make_store: StoreFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With every pooled connection held, each of close's writes waited a second for
    one before it opened its own; a call in flight that was waiting for one (a write,
    the follower's read) waited its whole 10 s and failed, holding the store's lock, so
    close waited for it (8-19 s in all). Now close first fails the calls waiting for a
    pooled connection (closing the pool), and its own writes take connections of their
    own, after one wait in vain at most."""
    if make_store.server is None:
        pytest.skip("SQLite has no pool")
    mem = make_store("crowded")
    mem.add_many([{"text": "x" * 200 + f" {i}", "id": f"r{i}"} for i in range(3000)])
    hits = [h.record.id for h in mem.search("x 7", k=3, mode="text", track_access=True)]
    store = mem._sync.db  # type: ignore[attr-defined]
    pool = store._pool
    # (thread, timeout asked, how it ended); "close" marks where close began.
    waits: list[tuple[str, float | None, str]] = []
    waiting: set[str] = set()
    getconn = pool.getconn

    def watched(timeout: float | None = None) -> object:
        name = threading.current_thread().name
        waiting.add(name)
        try:
            conn = getconn(timeout=timeout)
        except BaseException as e:
            waits.append((name, timeout, type(e).__name__))
            raise
        finally:
            waiting.discard(name)
        waits.append((name, timeout, "lent"))
        return conn

    monkeypatch.setattr(pool, "getconn", watched)
    stalled = _stalled_exports(mem, tmp_path)
    added: list[object] = []
    seen_closed: list[bool] = []

    def write() -> None:
        added.append(_outcome(lambda: mem.add("in flight")))
        seen_closed.append(mem.closed)  # False after StoreClosedError before

    writer = threading.Thread(target=write, name="writer")
    for _ in range(1200):  # the exports hold the pool; then the write waits for one
        held = sum(w[2] == "lent" and "_export" in w[0] for w in waits)
        if held == 8 and not writer.is_alive() and not added:
            writer.start()
        if "writer" in waiting:
            break
        threading.Event().wait(0.05)
    assert "writer" in waiting, waits
    waits.append(("close", None, "begins"))
    closing = threading.Thread(target=mem.close, name="closing")
    closing.start()
    closing.join(120)
    writer.join(120)
    try:
        assert not closing.is_alive(), "close waited for the exports"
    finally:
        _end(stalled)
    assert added == ["returned"] or isinstance(added[0], StoreClosedError), added
    assert added == ["returned"] or seen_closed == [True]
    after = waits[waits.index(("close", None, "begins")) :]
    # Close's own calls: one wait in vain (in slices) at most, the rest at once.
    in_vain = [w[1] or 0 for w in after if w[0] == "closing" and w[2] == "PoolTimeout"]
    assert sum(in_vain) <= postgres._LAST_WAIT, waits
    # A call waiting when close began: not left to wait out a timeout after it.
    for name in ("writer", "memlane-follow"):
        late = [w for w in after if w[0] == name and w[2] == "PoolTimeout" and w[1]]
        assert len(late) <= 1, waits
    again = make_store("crowded")
    assert hits and [again.get(i).access_count for i in hits] == [1] * len(hits)
    again.close()


def _outcome(call: Callable[[], object]) -> object:
    try:
        call()
    except Exception as e:  # handed to the test
        return e
    return "returned"


def test_async_close_does_not_queue_behind_writes_waiting_for_the_pool(
    make_store: StoreFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``AsyncMemory.close`` ran on a worker thread, queued behind the writes in flight
    on the others: with reads holding every pooled connection, each write waited its
    10 s for one and failed, and only then did the store hear that it closed (61 s, six
    writes failed). It now runs on a thread of its own: the writes waiting for the pool
    are refused at once, as the store closes."""
    if make_store.server is None:
        pytest.skip("SQLite has no pool")
    mem = make_store("crowded_async")
    mem.add_many([{"text": "x" * 200 + f" {i}", "id": f"r{i}"} for i in range(3000)])
    pool = mem._sync.db._pool  # type: ignore[attr-defined]
    lent, asked = threading.Semaphore(0), threading.Event()
    getconn = pool.getconn

    def watched(timeout: float | None = None) -> object:
        if threading.current_thread().name.startswith("asyncio"):
            asked.set()
        conn = getconn(timeout=timeout)
        if "_export" in threading.current_thread().name:
            lent.release()
        return conn

    monkeypatch.setattr(pool, "getconn", watched)
    stalled = _stalled_exports(mem, tmp_path)
    for _ in range(8):
        assert lent.acquire(timeout=60)

    async def main() -> list[object]:
        # As many worker threads as writes: the close waits for one to be free.
        workers = ThreadPoolExecutor(max_workers=6, thread_name_prefix="asyncio")
        asyncio.get_running_loop().set_default_executor(workers)
        amem = AsyncMemory(memory=mem)
        writes = [asyncio.create_task(amem.add(f"in flight {n}")) for n in range(6)]
        for _ in range(6000):  # until a write waits for the pool
            if asked.is_set():
                break
            await asyncio.sleep(0.01)
        assert asked.is_set()
        await asyncio.wait_for(amem.close(), 120)
        return await asyncio.gather(*writes, return_exceptions=True)

    try:
        done = asyncio.run(main())
    finally:
        _end(stalled)
    # Each write is stored, or refused as the store closed: none waited for the pool.
    refused = [d for d in done if not isinstance(d, MemoryRecord)]
    assert all(isinstance(d, ClosedError) for d in refused), refused
    stored = [d.id for d in done if isinstance(d, MemoryRecord)]
    again = make_store("crowded_async")
    assert all(again.get(i).text.startswith("in flight") for i in stored)
    again.close()


def test_a_read_that_meets_the_store_closed_raises_closed_error(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read that passed the open check and reached the database after ``close``
    raised a bare ``StorageError("the store is closed")``, which ``except ClosedError``
    did not catch. It is a ``StoreClosedError`` now, both a ``ClosedError`` and a
    ``StorageError``, on both backends."""
    mem = make_store("read_meets_close")
    mem.add("kept", id="r1")
    db = mem._sync.db  # type: ignore[attr-defined]
    entered, go = threading.Event(), threading.Event()
    row_by_id = db.row_by_id

    def held(*args: object, **kwargs: object) -> object:
        entered.set()
        go.wait()
        return row_by_id(*args, **kwargs)

    monkeypatch.setattr(db, "row_by_id", held)
    got: list[object] = []
    reader = threading.Thread(target=lambda: got.append(_outcome(lambda: mem.get("r1"))))
    reader.start()
    assert entered.wait(60)
    mem.close()
    go.set()
    reader.join(60)
    (error,) = got
    assert isinstance(error, StoreClosedError), error
    assert isinstance(error, ClosedError) and isinstance(error, StorageError)
    assert "the store is closed" in str(error)
