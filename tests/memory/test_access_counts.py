"""A record's access count never goes back: the counts a write saves stay counted while
its transaction is open, and those of a write that rolled back are saved by the next."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from conftest import StoreFactory, WordHashEmbedder
from memlane import Memory
from memlane._memory import access as access_module
from memlane._memory.access import KEEP_FLUSHED_SECONDS, AccessLog
from memlane.schema import COLUMNS, Row


def _counts(mem: Memory) -> tuple[int, int, int]:
    """X's access count as get, list and a search (which counts no access) give it."""
    (listed,) = [r for r in mem.list() if r.id == "X"]
    hit = mem.search("zebra quokka", k=1, mode="text", track_access=False)[0]
    return mem.get("X").access_count, listed.access_count, hit.record.access_count


def _searched(mem: Memory, times: int) -> None:
    for _ in range(times):
        assert mem.search("zebra quokka", k=1, mode="text")[0].record.id == "X"


def _store(make_store: StoreFactory, name: str, embedder: WordHashEmbedder, times: int) -> Memory:
    """A store of X and Y, X found ``times`` times."""
    mem = make_store(name, embedder)
    mem.add("target zebra quokka", id="X")
    mem.add("other record", id="Y")
    _searched(mem, times)
    return mem


def _update_failing_at_its_save(mem: Memory, monkeypatch: pytest.MonkeyPatch) -> None:
    """An update of Y whose transaction rolls back once it has written the counts."""
    record_accesses = mem._db.record_accesses

    def failing(conn: Any, accesses: dict[int, tuple[int, float]], seq: int) -> None:
        record_accesses(conn, accesses, seq)
        raise OSError("the disk is gone")

    monkeypatch.setattr(mem._db, "record_accesses", failing)
    with pytest.raises(OSError):
        mem.update("Y", importance=0.9)
    monkeypatch.undo()


@contextmanager
def _held_in(
    mem: Memory, monkeypatch: pytest.MonkeyPatch, step: str, write: Any, fails: bool = False
) -> Iterator[list[BaseException]]:
    """Runs ``write(mem)`` on a thread held inside its transaction, right after the
    database's ``step`` (raising there with ``fails``), while the block runs; then lets
    it end. Gives the errors the write raised, once it has ended."""
    original = getattr(mem._db, step)
    reached, go_on = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def held(*args: Any) -> Any:
        out = original(*args)
        reached.set()
        assert go_on.wait(30)
        if fails:
            raise OSError("the disk is gone")
        return out

    def run() -> None:
        try:
            write(mem)
        except OSError as e:
            errors.append(e)

    monkeypatch.setattr(mem._db, step, held)
    writer = threading.Thread(target=run)
    writer.start()
    try:
        assert reached.wait(30)
        yield errors
    finally:
        go_on.set()
        writer.join(30)
        monkeypatch.undo()


def test_counts_being_saved_are_counted_until_the_write_commits(
    make_store: StoreFactory, word_embedder: WordHashEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    mem = _store(make_store, "counts", word_embedder, 5)
    assert _counts(mem) == (5, 5, 5)
    # Held once the counts are written, the transaction not yet committed.
    with _held_in(mem, monkeypatch, "record_accesses", lambda m: m.update("Y", importance=0.9)):
        assert _counts(mem) == (5, 5, 5)
        _searched(mem, 2)  # counted again meanwhile, not yet saved
        assert _counts(mem) == (7, 7, 7)
    assert _counts(mem) == (7, 7, 7)
    mem.update("Y", importance=0.5)  # saves the last two
    assert _counts(mem) == (7, 7, 7)
    mem.close()
    with make_store("counts", word_embedder) as again:
        assert _counts(again) == (7, 7, 7)


def test_counts_of_a_write_that_rolled_back_are_saved_by_the_next(
    make_store: StoreFactory, word_embedder: WordHashEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    mem = _store(make_store, "rolled-back", word_embedder, 3)
    _update_failing_at_its_save(mem, monkeypatch)
    assert _counts(mem) == (3, 3, 3)
    _searched(mem, 1)
    mem.update("Y", importance=0.8)
    assert _counts(mem) == (4, 4, 4)
    mem.close()
    with make_store("rolled-back", word_embedder) as again:
        assert _counts(again) == (4, 4, 4)


class _Recording:
    """A store that keeps what each flush asks it to write."""

    def __init__(self) -> None:
        self.written: list[tuple[int, dict[int, tuple[int, float]]]] = []

    def record_accesses(self, conn: Any, accesses: dict[int, tuple[int, float]], seq: int) -> None:
        self.written.append((seq, dict(accesses)))


def _row(rowid: int, seq: int) -> Row:
    """A row of ``rowid`` as read after change ``seq``; the counts are the log's to add."""
    values: dict[str, Any] = dict.fromkeys(COLUMNS)
    values.update(rowid=rowid, seq=seq)
    return Row(**values)


def test_a_row_read_before_several_flushes_counts_each_of_them() -> None:
    log, db = AccessLog(), _Recording()
    log.note([1, 1, 1, 2], 100.0)
    log.flush(db, None, 5)  # type: ignore[arg-type]: a recording store
    log.note([1, 1], 101.0)
    log.flush(db, None, 6)  # type: ignore[arg-type]: a recording store
    log.note([1], 102.0)
    # Read before change 5 committed: counts none of the flushes; between them: 6's.
    assert log.get(_row(1, 4)) == (6, 102.0)
    assert log.get(_row(1, 5)) == (3, 102.0)
    assert log.get(_row(1, 6)) == (1, 102.0)
    assert log.get(_row(2, 4)) == (1, 100.0) and log.get(_row(2, 5)) is None
    assert log.of([_row(1, 5), _row(2, 6), _row(3, 1)]) == {1: (3, 102.0)}


def test_a_flush_that_takes_a_rolled_back_change_writes_its_counts_again() -> None:
    log, db = AccessLog(), _Recording()
    log.note([1, 1], 100.0)
    log.flush(db, None, 7)  # type: ignore[arg-type]: a recording store
    log.note([1], 101.0)
    log.flush(db, None, 7)  # type: ignore[arg-type]: the next write took change 7 again
    assert db.written == [(7, {1: (2, 100.0)}), (7, {1: (3, 101.0)})]
    assert log.get(_row(1, 6)) == (3, 101.0) and log.get(_row(1, 7)) is None


@pytest.mark.parametrize(
    "rewrite",
    [
        lambda mem: mem.update("X", metadata={"n": 1}),
        lambda mem: mem.renew(["X"], expires_at=4_000_000_000.0),
        lambda mem: mem.update("X", importance=0.9),
    ],
    ids=["update", "renew", "importance"],
)
def test_a_rewrite_keeps_the_accesses_the_index_recorded(
    make_store: StoreFactory,
    word_embedder: WordHashEmbedder,
    rewrite: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A rewrite gives the index the record's counts as the store holds them, which
    lack an access a search has recorded in the index and not yet noted for the store.
    The index keeps it. Before, a rewrite landing there lowered the index's count: X
    showed 4 accesses but was listed with ``access_count`` 3, and under a writer
    thread the index fell 1 to 60 behind."""
    mem = _store(make_store, "rewrite", word_embedder, 3)
    access = mem._searcher.access
    note = access.note

    def late(rowids: Any, now: float) -> bool:
        monkeypatch.undo()
        rewrite(mem)
        return note(rowids, now)

    monkeypatch.setattr(access, "note", late)
    _searched(mem, 1)
    assert mem.get("X").access_count == 4
    assert [r.id for r in mem.list(filters={"access_count": 4})] == ["X"]
    assert [r.id for r in mem.list(sort="access_count")] == ["X", "Y"]


def test_counts_a_failed_write_tried_to_save_are_saved_at_close(
    make_store: StoreFactory, word_embedder: WordHashEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing was searched between the failed write and close: close saves them still."""
    mem = _store(make_store, "failed-then-closed", word_embedder, 3)
    _update_failing_at_its_save(mem, monkeypatch)
    mem.close()
    with make_store("failed-then-closed", word_embedder) as again:
        assert _counts(again) == (3, 3, 3)


def test_a_record_being_deleted_keeps_its_counts_until_it_is_gone(
    make_store: StoreFactory, word_embedder: WordHashEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A search while X's delete runs shows all of X's accesses, and a delete that rolls
    back leaves them all to be saved. Before, the delete forgot the counts not yet saved
    as it began: X, found 5 times, showed 3 meanwhile, and 3 for good after a rollback."""
    mem = _store(make_store, "deleted", word_embedder, 3)
    mem.update("Y", importance=0.9)  # saves 3
    _searched(mem, 2)
    with _held_in(mem, monkeypatch, "delete", lambda m: m.delete("X"), fails=True) as errors:
        hit = mem.search("zebra quokka", k=1, mode="text", track_access=False)[0]
        assert (hit.record.id, hit.record.access_count) == ("X", 5)
    assert len(errors) == 1
    assert _counts(mem) == (5, 5, 5)
    mem.close()
    with make_store("deleted", word_embedder) as again:
        assert _counts(again) == (5, 5, 5)
        again.delete("X")
        assert again.search("zebra quokka", k=1, mode="text") == []


def test_the_counts_by_record_agree_with_every_flush_read_in_turn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Random notes, flushes (some taking a rolled-back change again) and the clock's
    passing: what a row read at any change is owed equals the sum over the flushes still
    kept, as a read of each in turn computes it."""
    clock = [1000.0]
    monkeypatch.setattr(access_module.time, "monotonic", lambda: clock[0])
    rnd = random.Random(5)
    log, db = AccessLog(), _Recording()
    kept: list[tuple[int, float, dict[int, tuple[int, float]]]] = []
    seq = 0
    for _ in range(3000):
        log.note([rnd.randrange(40) for _ in range(rnd.randrange(1, 6))], clock[0])
        again = bool(kept) and rnd.random() < 0.1  # the last flush's change rolled back
        if not again:
            seq += 1
        clock[0] += rnd.random() * 0.02
        log.flush(db, None, seq)  # type: ignore[arg-type]: a recording store
        written = db.written[-1][1]
        if again and kept[-1][0] == seq:
            kept.pop()
        kept = [f for f in kept if clock[0] - f[1] < KEEP_FLUSHED_SECONDS]
        kept.append((seq, clock[0], written))
        if rnd.random() < 0.05:
            row = _row(rnd.randrange(40), rnd.randrange(max(1, seq - 300), seq + 1))
            owed: tuple[int, float] | None = None
            for s, _, accesses in kept:
                if row.seq < s and row.rowid in accesses:
                    n, at = accesses[row.rowid]
                    owed = (n, at) if owed is None else (owed[0] + n, max(owed[1], at))
            assert log.get(row) == owed
