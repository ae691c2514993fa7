"""``close`` while other threads read: each read returns or raises a memlane error, and
the process never crashes (closing a SQLite connection in the middle of a read on it
crashed the sqlite3 module; two saves of the snapshot at once clashed on its files).
Run in a child process, so a crash fails the test instead of ending the run."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from conftest import StoreFactory
from memlane import ClosedError, InvalidArgumentError, Memory

CHILD = r"""
import sys, tempfile, threading
import memlane
from memlane.errors import MemlaneError

raw = []
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
            except MemlaneError:
                pass
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
    assert done.stdout.strip().endswith("raw []"), done.stdout[-2000:]


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
    readers, exports = [], []
    for n in range(8):  # the pool's size
        fifo = tmp_path / f"pipe{n}"
        os.mkfifo(fifo)
        readers.append(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))  # open, never read
        exports.append(threading.Thread(target=_export, args=(mem, fifo), daemon=True))
        exports[-1].start()
    closing = threading.Thread(target=mem.close)
    closing.start()
    closing.join(120)
    try:
        assert not closing.is_alive(), "close waited for the exports"
    finally:
        for reader in readers:
            os.close(reader)  # the exports end (a broken pipe)
        for export in exports:
            export.join(60)
    again = make_store("held")
    assert hits and [again.get(i).access_count for i in hits] == [1] * len(hits)
    again.close()


def _export(mem: Memory, fifo: Path) -> None:
    with contextlib.suppress(BaseException):  # what the export met once its pipe broke
        mem.export_jsonl(fifo)


def test_close_waits_for_a_crowded_pool_once(
    make_store: StoreFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With every pooled connection held, each of close's writes waited a second for
    one before it opened its own, and the follower's read, itself waiting for one, held
    close until its own wait ran out (8 s in all with the defaults). Now the first of
    close's calls that waits in vain sends the rest straight to their own connection,
    and the pool's closing ends the follower's wait."""
    if make_store.server is None:
        pytest.skip("SQLite has no pool")
    mem = make_store("crowded")
    mem.add_many([{"text": "x" * 200 + f" {i}", "id": f"r{i}"} for i in range(3000)])
    hits = [h.record.id for h in mem.search("x 7", k=3, mode="text", track_access=True)]
    pool = mem._sync.db._pool  # type: ignore[attr-defined]
    waits: list[tuple[str, float | None, str]] = []  # (thread, timeout, how it ended)
    getconn = pool.getconn

    def watched(timeout: float | None = None) -> object:
        try:
            conn = getconn(timeout=timeout)
        except BaseException as e:
            waits.append((threading.current_thread().name, timeout, type(e).__name__))
            raise
        waits.append((threading.current_thread().name, timeout, "lent"))
        return conn

    monkeypatch.setattr(pool, "getconn", watched)
    readers, exports = [], []
    for n in range(8):  # the pool's size
        fifo = tmp_path / f"pipe{n}"
        os.mkfifo(fifo)
        readers.append(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))  # open, never read
        exports.append(threading.Thread(target=_export, args=(mem, fifo), daemon=True))
        exports[-1].start()
    for _ in range(1200):  # the exports hold the pool; the follower looks every second
        held = sum(w[2] == "lent" and "_export" in w[0] for w in waits)
        if held == 8 and pool.get_stats().get("requests_waiting"):
            break
        threading.Event().wait(0.05)
    assert held == 8 and pool.get_stats().get("requests_waiting"), waits
    waits.clear()
    closing = threading.Thread(target=mem.close)
    closing.start()
    closing.join(120)
    try:
        assert not closing.is_alive(), "close waited for the exports"
    finally:
        for reader in readers:
            os.close(reader)
        for export in exports:
            export.join(60)
    in_vain = [w for w in waits if w[2] == "PoolTimeout" and w[1] != 0]
    assert len(in_vain) == 1, waits
    follower = [w for w in waits if w[0] == "memlane-follow"]
    assert follower and follower[-1][2] == "PoolClosed", waits
    again = make_store("crowded")
    assert hits and [again.get(i).access_count for i in hits] == [1] * len(hits)
    again.close()
