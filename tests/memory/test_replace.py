"""Memory.replace: a delete and an add in one transaction, as knowledge re-ingestion needs."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from conftest import WordHashEmbedder
from memlane import AsyncMemory, Memory
from memlane.errors import InvalidArgumentError


def _store(tmp_path: Path) -> Memory:
    return Memory(tmp_path / "s", WordHashEmbedder(), dedup_window=0)


def test_replace_swaps_the_matching_records_only(tmp_path: Path) -> None:
    with _store(tmp_path) as m:
        m.add_many([{"text": f"old fragment {i}", "metadata": {"doc": "a"}} for i in range(3)])
        m.add_many([{"text": "another document", "metadata": {"doc": "b"}}])
        m.add("a fact about doc a", table="facts", metadata={"doc": "a"})
        gone, new = m.replace(
            [{"text": f"new fragment {i}", "metadata": {"doc": "a"}} for i in range(2)],
            "memories",
            filters={"doc": "a"},
        )
        assert gone == 3 and [r.text for r in new] == ["new fragment 0", "new fragment 1"]
        texts = sorted(r.text for r in m.list(limit=100))
        assert texts == [
            "a fact about doc a",
            "another document",
            "new fragment 0",
            "new fragment 1",
        ]
        hits = m.search("fragment", k=10, mode="text")
        assert {h.record.text for h in hits} == {"new fragment 0", "new fragment 1"}
    with _store(tmp_path) as m:  # durable, and the reopened index agrees
        assert m.count() == 4
        assert {h.record.text for h in m.search("fragment", k=10, mode="text")} == {
            "new fragment 0",
            "new fragment 1",
        }


def test_replace_over_several_tables_and_with_nothing_to_add(tmp_path: Path) -> None:
    with _store(tmp_path) as m:
        m.add("doc", table="documents", metadata={"document_id": "d1"})
        m.add("frag", table="fragments", metadata={"document_id": "d1"})
        m.add("kept", table="notes", metadata={"document_id": "d1"})
        gone, new = m.replace([], ["documents", "fragments"], filters={"document_id": "d1"})
        assert (gone, new) == (2, [])
        assert [r.text for r in m.list(limit=10)] == ["kept"]


def test_a_failed_replace_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with _store(tmp_path) as m:
        m.add_many([{"text": f"old {i}", "metadata": {"doc": "a"}} for i in range(3)])

        def broken_insert(conn: Any, rows: Any) -> None:
            raise RuntimeError("disk on fire")

        monkeypatch.setattr(m._db, "insert", broken_insert)
        with pytest.raises(RuntimeError, match="disk on fire"):
            m.replace([{"text": "new", "metadata": {"doc": "a"}}], filters={"doc": "a"})
        monkeypatch.undo()
        assert sorted(r.text for r in m.list(limit=10)) == ["old 0", "old 1", "old 2"]
        assert len(m.search("old", k=10, mode="text")) == 3
    with _store(tmp_path) as m:
        assert m.count() == 3


def test_a_replacement_may_take_the_ids_it_replaces(tmp_path: Path) -> None:
    with _store(tmp_path) as m:
        m.add("version 1", id="doc-1", metadata={"doc": "1"})
        m.add("other", id="doc-2", metadata={"doc": "2"})
        gone, new = m.replace([{"text": "version 2", "id": "doc-1"}], filters={"doc": "1"})
        assert gone == 1 and new[0].id == "doc-1" and m.get("doc-1").text == "version 2"
        with pytest.raises(InvalidArgumentError, match="already stored"):
            m.replace([{"text": "clash", "id": "doc-2"}], filters={"doc": "1"})
        assert m.get("doc-2").text == "other"


def test_replace_refuses_dedup(tmp_path: Path) -> None:
    with _store(tmp_path) as m:
        m.add("keep me")
        with pytest.raises(InvalidArgumentError, match="unique=True is refused"):
            m.replace([{"text": "x", "unique": True}], filters={"doc": "a"})
        assert m.count() == 1


def test_async_replace(tmp_path: Path) -> None:
    async def run() -> tuple[int, list[str]]:
        mem = await AsyncMemory.open(tmp_path / "s", WordHashEmbedder(), dedup_window=0)
        try:
            await mem.add_many([{"text": "old", "metadata": {"doc": "a"}}])
            gone, new = await mem.replace([{"text": "new"}], filters={"doc": "a"})
            assert [r.text for r in new] == ["new"]
            return gone, [r.text for r in await mem.list()]
        finally:
            await mem.close()

    assert asyncio.run(run()) == (1, ["new"])
