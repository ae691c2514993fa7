"""A record's access count never goes back: the counts a write saves stay counted while
its transaction is open, and those of a write that rolled back are saved by the next."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from conftest import StoreFactory, WordHashEmbedder
from memlane import Memory


def _counts(mem: Memory) -> tuple[int, int, int]:
    """X's access count as get, list and a search (which counts no access) give it."""
    (listed,) = [r for r in mem.list() if r.id == "X"]
    hit = mem.search("zebra quokka", k=1, mode="text", track_access=False)[0]
    return mem.get("X").access_count, listed.access_count, hit.record.access_count


def _searched(mem: Memory, times: int) -> None:
    for _ in range(times):
        assert mem.search("zebra quokka", k=1, mode="text")[0].record.id == "X"


def test_counts_being_saved_are_counted_until_the_write_commits(
    make_store: StoreFactory, word_embedder: WordHashEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    mem = make_store("counts", word_embedder)
    mem.add("target zebra quokka", id="X")
    mem.add("other record", id="Y")
    _searched(mem, 5)
    assert _counts(mem) == (5, 5, 5)
    saved, go_on = threading.Event(), threading.Event()
    record_accesses = mem._db.record_accesses

    def held(conn: Any, accesses: dict[int, tuple[int, float]], seq: int) -> None:
        record_accesses(conn, accesses, seq)
        saved.set()  # the counts are written, the transaction not yet committed
        assert go_on.wait(30)

    monkeypatch.setattr(mem._db, "record_accesses", held)
    writer = threading.Thread(target=lambda: mem.update("Y", importance=0.9))
    writer.start()
    try:
        assert saved.wait(30)
        assert _counts(mem) == (5, 5, 5)
        _searched(mem, 2)  # counted again meanwhile, not yet saved
        assert _counts(mem) == (7, 7, 7)
    finally:
        go_on.set()
        writer.join(30)
    assert _counts(mem) == (7, 7, 7)
    monkeypatch.undo()
    mem.update("Y", importance=0.5)  # saves the last two
    assert _counts(mem) == (7, 7, 7)
    mem.close()
    with make_store("counts", word_embedder) as again:
        assert _counts(again) == (7, 7, 7)


def test_counts_of_a_write_that_rolled_back_are_saved_by_the_next(
    make_store: StoreFactory, word_embedder: WordHashEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    mem = make_store("rolled-back", word_embedder)
    mem.add("target zebra quokka", id="X")
    mem.add("other record", id="Y")
    _searched(mem, 3)
    record_accesses = mem._db.record_accesses

    def failing(conn: Any, accesses: dict[int, tuple[int, float]], seq: int) -> None:
        record_accesses(conn, accesses, seq)
        raise OSError("the disk is gone")

    monkeypatch.setattr(mem._db, "record_accesses", failing)
    with pytest.raises(OSError):
        mem.update("Y", importance=0.9)
    monkeypatch.undo()
    assert _counts(mem) == (3, 3, 3)
    _searched(mem, 1)
    mem.update("Y", importance=0.8)
    assert _counts(mem) == (4, 4, 4)
    mem.close()
    with make_store("rolled-back", word_embedder) as again:
        assert _counts(again) == (4, 4, 4)
