"""The in-process record cache of a PostgreSQL store: never older than what it was told."""

from __future__ import annotations

from memlane.schema import COLUMNS, Row
from memlane.storage.rowcache import RowCache


def row(rowid: int, seq: int, text: str = "t", embedding: bytes | None = None) -> Row:
    values = dict.fromkeys(COLUMNS)
    values.update(rowid=rowid, text=text, seq=seq, embedding=embedding)
    return Row(**values)  # type: ignore[arg-type]


def test_newer_rows_win_and_vectors_are_dropped() -> None:
    cache = RowCache(10)
    cache.put([row(1, 5, "new", b"\0" * 8)])
    cache.put([row(1, 3, "old")])  # a slow read of an older state
    found, missing = cache.get([1, 2])
    assert missing == [2] and found[1].text == "new" and found[1].embedding is None


def test_a_write_refuses_reads_from_before_it() -> None:
    cache = RowCache(10)
    cache.put([row(1, 5)])
    cache.invalidate([1], 8)
    assert cache.get([1]) == ({}, [1])
    cache.put([row(1, 5, "read before the write")])
    assert cache.get([1]) == ({}, [1])
    cache.put([row(1, 8, "the write")])
    assert cache.get([1])[0][1][2] == "the write"
    cache.forget([1])
    assert len(cache) == 0


def test_least_recently_used_go_first() -> None:
    cache = RowCache(2)
    cache.put([row(1, 1), row(2, 1)])
    cache.get([1])
    cache.put([row(3, 1)])
    assert sorted(cache.get([1, 2, 3])[0]) == [1, 3]
    off = RowCache(0)
    off.put([row(1, 1)])
    assert len(off) == 0
