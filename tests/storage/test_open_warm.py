"""An open searches a few times before it returns (``Searcher.warm``), so the caller's
first search is not the one that pays for a cold process; those searches record no
access and change nothing in the store."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from conftest import WordHashEmbedder
from memlane import CorruptFileError, Memory
from memlane._memory.querying import WARM_SEARCHES, WARM_TEXT, Searcher


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    search = Searcher._search

    def counted(self: Searcher, query: str, request: Any, **options: Any) -> Any:
        calls.append(query)
        return search(self, query, request, **options)

    monkeypatch.setattr(Searcher, "_search", counted)
    return calls


def test_an_open_warms_the_search_and_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "store"
    with Memory(store, WordHashEmbedder()) as mem:
        mem.add_many([{"text": f"note {i} about rivers"} for i in range(40)])
        seq = mem._sync.db.seq()
        before = {r.id: r.last_accessed_at for r in mem.list()}
    calls = _counting(monkeypatch)
    with Memory(store, WordHashEmbedder()) as mem:  # access is tracked by default
        assert calls == [WARM_TEXT] * WARM_SEARCHES
        assert mem._sync.db.seq() == seq
        records = mem.list()
        assert {r.id: r.last_accessed_at for r in records} == before
        assert all(r.access_count == 0 for r in records)
        assert len(mem.search("rivers", k=5)) == 5
    with Memory(store, WordHashEmbedder()) as mem:
        # The one search the caller made is the only access recorded.
        assert sum(r.access_count for r in mem.list()) == 5


def test_an_empty_store_or_one_still_linking_is_not_searched_at_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _counting(monkeypatch)
    with Memory(tmp_path / "empty", WordHashEmbedder()):
        assert calls == []
    with Memory(None, WordHashEmbedder()):
        assert calls == []
    store = tmp_path / "store"
    with Memory(store, WordHashEmbedder()) as mem:
        mem.add_many([{"text": f"note {i}"} for i in range(30)])
    (store / "index").rename(tmp_path / "gone")  # the next open rebuilds: vectors to link
    with pytest.warns(RuntimeWarning, match="it is missing"):
        mem = Memory(store, WordHashEmbedder())
    with mem:
        assert calls == []
        assert len(mem.search("note", k=3)) == 3


def test_a_damaged_row_the_warm_up_meets_is_left_to_the_reads_of_it(tmp_path: Path) -> None:
    """Every warm-up search hits the one damaged record of a small store; the open still
    succeeds and the sound records are read, while a read of the damaged one raises."""
    store = tmp_path / "store"
    with Memory(store, WordHashEmbedder()) as mem:
        kept = [r.id for r in mem.add_many([{"text": f"a fact that stays {i}"} for i in range(5)])]
        damaged = mem.add("a fact the damage reaches").id
    db = sqlite3.connect(store / "memory.db")
    db.execute("UPDATE records SET text = 'a fact the damage reached' WHERE id = ?", (damaged,))
    db.commit()
    db.close()
    with Memory(store, WordHashEmbedder()) as mem:
        assert [mem.get(i).text for i in kept] == [f"a fact that stays {i}" for i in range(5)]
        with pytest.raises(CorruptFileError, match="content hash"):
            mem.get(damaged)
