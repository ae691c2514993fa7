"""JSONL import and export under attack, on both backends: counts past the 64-bit
column, an import killed before its history was written and retried, the same export
imported twice, and an export taken while another connection rewrites a record."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import StoreFactory, WordHashEmbedder
from memlane import Memory
from memlane.coerce import MAX_COUNT
from memlane.errors import InvalidArgumentError
from memlane.schema import Row
from memlane.storage.base import HistoryEntry
from memlane.storage.sql import SQLStore


def _lines(path: Path, items: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(i) + "\n" for i in items), encoding="utf-8")
    return path


def _history(mem: Memory, record_id: str) -> list[tuple[str, str, str | None]]:
    return [(v.record.text, v.event, v.by) for v in mem.history(record_id)]


# -- access counts ------------------------------------------------------------------------


@pytest.mark.parametrize("count", [MAX_COUNT + 1, 2**64 - 1, 2**64, 10**30])
@pytest.mark.parametrize("where", ["record", "history"])
def test_a_count_past_the_column_is_named_and_nothing_is_stored(
    make_store: StoreFactory, tmp_path: Path, count: int, where: str
) -> None:
    # Past the first transaction's worth of good lines: the refusal came only while its
    # batch was written, after the first was committed (or as a raw OverflowError).
    items: list[dict[str, Any]] = [{"id": f"r{i}", "text": f"fact {i}"} for i in range(1500)]
    bad = {"id": "bad", "text": "bad", "access_count": count}
    items.insert(
        1200, bad if where == "record" else {"history": {**bad, "event": "update", "at": 1.7e9}}
    )
    path = _lines(tmp_path / "in.jsonl", items)
    with make_store("j") as mem:
        with pytest.raises(
            InvalidArgumentError, match=r"in\.jsonl:1201: access_count must be at most"
        ):
            mem.import_jsonl(path)
        assert mem.count() == 0


@pytest.mark.parametrize("where", ["record", "history"])
def test_a_metadata_number_no_double_holds_is_named_and_nothing_is_stored(
    make_store: StoreFactory, tmp_path: Path, where: str
) -> None:
    # Valid JSON, which Python reads as an int; the engine reads a number past 64 bits as
    # a double and refused this one only while its batch was written.
    items: list[dict[str, Any]] = [{"id": f"r{i}", "text": f"fact {i}"} for i in range(1500)]
    bad = {"id": "bad", "text": "bad", "metadata": {"serial": 10**400}}
    items.insert(
        1200, bad if where == "record" else {"history": {**bad, "event": "update", "at": 1.7e9}}
    )
    path = _lines(tmp_path / "in.jsonl", items)
    with make_store("j") as mem:
        with pytest.raises(InvalidArgumentError, match=r"in\.jsonl:1201: metadata holds an int"):
            mem.import_jsonl(path)
        assert mem.count() == 0


@pytest.mark.parametrize("field", ["by", "next_id"])
def test_a_history_name_no_database_stores_is_named_and_nothing_is_stored(
    make_store: StoreFactory, tmp_path: Path, field: str
) -> None:
    # A lone surrogate (valid JSON as "\\ud800") passed the check: the records were
    # committed, then the history's insert raised a raw UnicodeEncodeError.
    entry = {"id": "r0", "text": "old", "event": "update", "at": 1.7e9, field: "\ud800"}
    path = _lines(tmp_path / "in.jsonl", [{"id": "r0", "text": "new"}, {"history": entry}])
    with make_store("j") as mem:
        with pytest.raises(
            InvalidArgumentError, match=rf"in\.jsonl:2: history '{field}' contains a lone surrogate"
        ):
            mem.import_jsonl(path)
        assert mem.count() == 0


def test_the_largest_count_saturates_when_searches_count_more(
    make_store: StoreFactory, tmp_path: Path
) -> None:
    path = _lines(
        tmp_path / "in.jsonl", [{"id": "a", "text": "hello there", "access_count": MAX_COUNT}]
    )
    with make_store("j") as mem:
        assert mem.import_jsonl(path) == 1
        assert [h.record.id for h in mem.search("hello")] == ["a"]
        assert mem.get("a").access_count == MAX_COUNT
    # The flush at close added one: SQLite stored a REAL (the reopened store called its
    # file damaged), PostgreSQL refused it (every close raised 'bigint out of range').
    with make_store("j") as mem:
        assert mem.get("a").access_count == MAX_COUNT
        assert [h.record.id for h in mem.search("hello")] == ["a"]
        mem.export_jsonl(tmp_path / "out.jsonl")
    with make_store("k") as other:
        assert other.import_jsonl(tmp_path / "out.jsonl") == 1
        assert other.get("a").access_count == MAX_COUNT


# -- history ------------------------------------------------------------------------------


def _versions(tmp_path: Path, n: int) -> Path:
    """``n`` records (more than one transaction's worth), each with its earlier version."""
    base = {"created_at": 1.7e9, "updated_at": 1.7e9 + 1}
    items: list[dict[str, Any]] = [
        {**base, "id": f"r{i}", "text": f"version two of fact {i}"} for i in range(n)
    ]
    items += [
        {
            "history": {
                **base,
                "id": f"r{i}",
                "text": f"version one of fact {i}",
                "event": "update",
                "at": 1.7e9 + 1,
                "by": "importer",
                "next_id": None,
            }
        }
        for i in range(n)
    ]
    return _lines(tmp_path / "in.jsonl", items)


def test_a_retry_after_an_import_killed_before_its_history_writes_it(
    make_store: StoreFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _versions(tmp_path, 1500)
    insert_history = SQLStore.insert_history

    def killed(self: SQLStore, conn: Any, entries: Sequence[HistoryEntry]) -> None:
        raise KeyboardInterrupt  # as kill -9 there: the records are committed, no history

    with make_store("clean") as clean:
        clean.import_jsonl(path)
        sample = ("r0", "r7", "r999", "r1000", "r1499")
        want = {i: _history(clean, i) for i in sample}
    assert all(len(v) == 2 for v in want.values())  # the version imported, and this one
    with make_store("j") as mem:
        monkeypatch.setattr(SQLStore, "insert_history", killed)
        with pytest.raises(KeyboardInterrupt):
            mem.import_jsonl(path)
        monkeypatch.setattr(SQLStore, "insert_history", insert_history)
        assert mem.count() == 1500
        assert len(mem.history("r0")) == 1
        # The retry the DuplicateIdError suggests skips the stored records, not their
        # history, which was never written.
        assert mem.import_jsonl(path, on_conflict="skip") == 0
        assert {i: _history(mem, i) for i in sample} == want
        # And once it is there, another import writes none again.
        assert mem.import_jsonl(path, on_conflict="skip") == 0
        assert {i: _history(mem, i) for i in sample} == want


def test_the_same_export_imported_twice_keeps_each_history_entry_once(
    make_store: StoreFactory, tmp_path: Path
) -> None:
    out = tmp_path / "x.jsonl"
    with make_store("a") as src:
        src.add("Bob likes tea", id="gone")
        src.delete("gone")
        src.add("Ann likes tea", id="kept")
        src.update("kept", text="Ann likes coffee")
        src.add("two identical versions", id="twice")
        src.update("twice", text="two identical versions, later")
        src.export_jsonl(out)
        want = {i: _history(src, i) for i in ("gone", "kept", "twice")}
    with make_store("b") as dst:
        assert dst.import_jsonl(out, on_conflict="skip") == 2
        assert dst.import_jsonl(out, on_conflict="skip") == 0
        assert {i: _history(dst, i) for i in want} == want
    # Into the store it came from: every entry is there already.
    with make_store("a") as src:
        assert src.import_jsonl(out, on_conflict="skip") == 0
        assert {i: _history(src, i) for i in want} == want


# -- an export while others write ---------------------------------------------------------


def test_an_export_reads_one_state_while_another_connection_rewrites_a_record(
    make_store: StoreFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    iter_rows = SQLStore.iter_rows
    with make_store("j") as mem:
        mem.add("the moving record, version 0", id="moving")
        mem.add_many([{"text": f"filler record {i}"} for i in range(1500)])

        def rewrite() -> None:
            mem.delete("moving")
            mem.add("the moving record, version 1", id="moving")

        def paused(self: SQLStore, embedding: bool, batch: int = 1024) -> Iterator[Row]:
            rows = iter_rows(self, embedding, batch)
            yield next(rows)  # the first page is read
            # Another thread (its own connection) deletes the record and adds it again,
            # with a rowid past the first page, while the export waits.
            t = threading.Thread(target=rewrite)
            t.start()
            t.join()
            yield from rows

        monkeypatch.setattr(SQLStore, "iter_rows", paused)
        out = tmp_path / "x.jsonl"
        assert mem.export_jsonl(out) == 1501
        monkeypatch.setattr(SQLStore, "iter_rows", iter_rows)
        assert mem.get("moving").text == "the moving record, version 1"
    lines = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    moving = [i for i in lines if i.get("id") == "moving"]
    # As the export began: version 0, and no history of the deletion that came later.
    assert [m["text"] for m in moving] == ["the moving record, version 0"]
    assert [i for i in lines if "history" in i] == []
    with make_store("k") as other:
        assert other.import_jsonl(out) == 1501
        assert other.get("moving").text == "the moving record, version 0"


@pytest.mark.parametrize(
    "embedding",
    [[True] * 16, ["0.25"] * 16, [True] + [0.25] * 15],
    ids=["bools", "texts", "a bool among numbers"],
)
def test_an_embedding_of_booleans_or_texts_is_refused(
    make_store: StoreFactory, tmp_path: Path, embedding: list[Any]
) -> None:
    path = _lines(
        tmp_path / "in.jsonl",
        [{"id": "a", "text": "fine"}, {"id": "b", "text": "x", "embedding": embedding}],
    )
    with make_store("j", WordHashEmbedder(16)) as mem:
        with pytest.raises(
            InvalidArgumentError, match=r"in\.jsonl:2: .*must be an array of numbers"
        ):
            mem.import_jsonl(path)
        assert mem.count() == 0
        with pytest.raises(InvalidArgumentError, match="must be an array of numbers"):
            mem.add("direct", embedding=embedding)


@pytest.mark.parametrize(
    "embedding",
    [[Fraction(1, 2), "0.25"] + [0.25] * 14, [Fraction(1, 2), np.True_] + [0.25] * 14],
    ids=["a text among numbers", "a numpy bool among numbers"],
)
def test_an_embedding_of_objects_holding_no_number_is_refused(embedding: list[Any]) -> None:
    with Memory(None, WordHashEmbedder(16)) as mem:
        with pytest.raises(InvalidArgumentError, match="must be an array of numbers"):
            mem.add("direct", embedding=embedding)
        assert mem.count() == 0
        # Numbers of other types are numbers.
        assert mem.add("fine", embedding=[Fraction(1, 2)] + [np.float64(0.25)] * 15).id
