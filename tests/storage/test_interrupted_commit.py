"""A Ctrl-C that lands while a write commits, or between its commit and the engine's
taking it, leaves the store as the commit made it; one while an open takes the store's
lock frees it.

Python raises ``KeyboardInterrupt`` once the C call it arrived in returns: a signal that
arrives during SQLite's COMMIT (its fsync) is raised after the COMMIT went through. That
write was taken for rolled back, so the vector file's end moved back and the next write
overwrote the committed entries: the store no longer opened. And a write stopped after
its commit, before the engine took it, left its records unsearchable in the process
until it reopened the store."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import WordHashEmbedder, unit_rows
from memlane import Memory
from memlane.cli import main as cli_main
from memlane.storage import opening
from memlane.storage.interrupts import Hold

DIM = 32


def store(path: Path) -> Memory:
    return Memory(path, WordHashEmbedder(DIM))  # type: ignore[arg-type]


class InterruptedAfterCommit:
    """The writer connection, whose next COMMIT goes through and then raises, as a
    Ctrl-C during it does."""

    def __init__(self, conn: Any) -> None:
        self.conn, self.armed = conn, True

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)

    def execute(self, sql: str, *args: Any) -> Any:
        out = self.conn.execute(sql, *args)
        if sql == "COMMIT" and self.armed:
            self.armed = False
            raise KeyboardInterrupt
        return out


class SignalledDuring:
    """The writer connection, whose next statement starting with ``statement`` is sent
    SIGINT as it returns, as a Ctrl-C pressed during it is (Python runs the handler
    once the C call is over)."""

    def __init__(self, conn: Any, statement: str) -> None:
        self.conn, self.statement, self.armed = conn, statement, True

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)

    def execute(self, sql: str, *args: Any) -> Any:
        out = self.conn.execute(sql, *args)
        if sql.startswith(self.statement) and self.armed:
            self.armed = False
            os.kill(os.getpid(), signal.SIGINT)
        return out


class InterruptedApply:
    """The engine, whose next ``apply`` (the write's records, after its commit) is
    stopped by a Ctrl-C before it runs."""

    def __init__(self, engine: Any) -> None:
        self.engine, self.armed = engine, True

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)

    def __contains__(self, rowid: int) -> bool:
        return rowid in self.engine

    def apply(self, prepared: Any) -> Any:
        if self.armed:
            self.armed = False
            raise KeyboardInterrupt
        return self.engine.apply(prepared)


def items(vectors: np.ndarray, start: int, stop: int) -> list[dict[str, Any]]:
    return [
        {"id": f"r{i}", "text": f"record {i}", "embedding": vectors[i]} for i in range(start, stop)
    ]


def found_by_their_vectors(mem: Memory, vectors: np.ndarray, ids: range) -> bool:
    for i in ids:
        hits = mem.search("", mode="vector", k=1, query_embedding=vectors[i], track_access=False)
        if not hits or hits[0].record.id != f"r{i}":
            return False
    return True


def kept_their_vectors(mem: Memory, vectors: np.ndarray, ids: Iterable[int]) -> bool:
    return all(
        float(np.dot(mem.get(f"r{i}", include_embedding=True).embedding, vectors[i])) > 0.999
        for i in ids
    )


@pytest.mark.parametrize(
    "where", ["during the commit", "before the engine took it", "then a write"]
)
def test_a_write_interrupted_after_its_commit_is_kept_and_found(tmp_path: Path, where: str) -> None:
    vectors = unit_rows(30, DIM, 7)
    mem = store(tmp_path / "s")
    mem.add_many(items(vectors, 0, 10))
    sync = mem._sync  # type: ignore[attr-defined]
    if where == "during the commit":
        db = mem._db  # type: ignore[attr-defined]
        db._writer = InterruptedAfterCommit(db._writer)
    else:
        sync.engine = InterruptedApply(sync.engine)
    with pytest.raises(KeyboardInterrupt):
        mem.add_many(items(vectors, 10, 15))
    if where != "during the commit":
        sync.engine = sync.engine.engine
    if where == "then a write":  # its check comes inside the write: the gap tells
        mem.add_many(items(vectors, 25, 26))
        assert found_by_their_vectors(mem, vectors, range(10, 15))
        mem.delete("r25")
    # Stored, as the commit made it: this process finds them (read back from the
    # database), and the writes after them go after them in the vector file.
    assert mem.count() == 15
    assert found_by_their_vectors(mem, vectors, range(10, 15))
    mem.add_many(items(vectors, 15, 20))
    mem.update("r3", embedding=vectors[20])
    vectors[3] = vectors[20]
    assert kept_their_vectors(mem, vectors, range(20))
    mem.close()
    with store(tmp_path / "s") as again:
        assert again.count() == 20
        assert kept_their_vectors(again, vectors, range(20))
        assert found_by_their_vectors(again, vectors, range(4, 20))


@pytest.mark.parametrize("statement", ["BEGIN", "COMMIT"])
def test_a_ctrl_c_during_a_writes_begin_or_commit_is_raised_once_its_outcome_is_kept(
    tmp_path: Path, statement: str
) -> None:
    # During the BEGIN it was raised before the code that rolls back was in force: the
    # connection stayed in its transaction and every later write was refused.
    vectors = unit_rows(30, DIM, 9)
    mem = store(tmp_path / "s")
    mem.add_many(items(vectors, 0, 10))
    db = mem._db  # type: ignore[attr-defined]
    real = db._writer
    db._writer = SignalledDuring(real, statement)
    with pytest.raises(KeyboardInterrupt):
        mem.add_many(items(vectors, 10, 15))
    db._writer = real
    stored = 15 if statement == "COMMIT" else 10
    assert mem.count() == stored
    assert found_by_their_vectors(mem, vectors, range(stored))
    mem.add_many(items(vectors, 15, 20))
    ids = [*range(stored), *range(15, 20)]
    assert kept_their_vectors(mem, vectors, ids)
    mem.close()
    with store(tmp_path / "s") as again:
        assert again.count() == len(ids)
        assert kept_their_vectors(again, vectors, ids)


def test_a_ctrl_c_while_an_open_takes_the_lock_frees_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Raised before the code that frees the lock was in force, it kept the store locked
    # to the process: every later open raised StoreLockedError.
    store(tmp_path / "s").close()

    class SignalledLock(opening.StoreLock):
        def __init__(self, folder: Path) -> None:
            super().__init__(folder)
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(opening, "StoreLock", SignalledLock)
    with pytest.raises(KeyboardInterrupt):
        store(tmp_path / "s")
    monkeypatch.undo()
    with store(tmp_path / "s") as again:
        assert again.count() == 0


def test_a_ctrl_c_is_held_and_raised_as_the_hold_ends() -> None:
    hold = Hold()
    os.kill(os.getpid(), signal.SIGINT)
    assert sum(range(1000)) > 0  # Python has run its handler by now: held
    with pytest.raises(KeyboardInterrupt):
        hold.end()
    hold.end()  # again: nothing
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_every_ctrl_c_held_reaches_the_callers_handler(tmp_path: Path) -> None:
    calls: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: calls.append(signum))
    try:
        hold = Hold()
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)
        assert sum(range(1000)) > 0 and calls == []
        hold.end()
        assert calls == [signal.SIGINT, signal.SIGINT]
    finally:
        signal.signal(signal.SIGINT, previous)


def test_opening_a_store_gives_ctrl_c_back(tmp_path: Path) -> None:
    # The CLI read a store's embedder through open_store and never ended the hold it
    # took: Ctrl-C was ignored for the rest of the process (`memlane mcp` ran on).
    store(tmp_path / "s").close()
    assert cli_main(["stats", str(tmp_path / "s")]) == 0
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    opening.open_store(None).db.close()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_an_update_interrupted_during_its_commit_is_kept(tmp_path: Path) -> None:
    vectors = unit_rows(12, DIM, 8)
    mem = store(tmp_path / "s")
    mem.add_many(items(vectors, 0, 10))
    db = mem._db  # type: ignore[attr-defined]
    db._writer = InterruptedAfterCommit(db._writer)
    with pytest.raises(KeyboardInterrupt):
        mem.update("r2", embedding=vectors[10])
    vectors[2] = vectors[10]
    mem.add_many(items(vectors, 11, 12))
    kept = [*range(10), 11]
    assert kept_their_vectors(mem, vectors, kept)
    mem.close()
    with store(tmp_path / "s") as again:
        assert kept_their_vectors(again, vectors, kept)


def test_numpys_interface_is_loaded_with_the_module(tmp_path: Path) -> None:
    # The native module loaded it at its first use, and a Ctrl-C while numpy's Python
    # code ran for it became a Rust panic raised from that call (PanicException).
    script = textwrap.dedent(
        f"""
        import os
        import sys
        import numpy as np
        import memlane
        from conftest import WordHashEmbedder

        fired = []

        def tracer(frame, event, arg):
            name = frame.f_code.co_filename
            if not fired and name.endswith(os.path.join("numpy", "lib", "_version.py")):
                fired.append(frame.f_code.co_filename)
                raise KeyboardInterrupt
            return None

        mem = memlane.Memory({str(tmp_path / "s")!r}, WordHashEmbedder({DIM}))
        sys.settrace(tracer)
        mem.add_many([{{"text": "hello", "embedding": np.ones({DIM}, np.float32)}}])
        sys.settrace(None)
        print("stored", mem.count())
        """
    )
    tests = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tests,
        env={**os.environ, "PYTHONPATH": str(tests)},
    )
    assert "PanicException" not in done.stderr
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().endswith("stored 1")
