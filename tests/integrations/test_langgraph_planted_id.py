"""``MemlaneStore``'s record ids are derived from the item, so anyone can compute them: a
record another scope (or table) holds under one is never read as the store's item and
does not block its put, on both backends. The item then lives under a fresh id, which
get, search (semantic too), TTL refreshes, updates and deletes all find."""

from __future__ import annotations

from typing import Any

import pytest

from memlane import Memory
from memlane.integrations.langchain import langchain_embedder
from memlane.integrations.langgraph import MemlaneStore

from .adapter_fakes import WordEmbeddings

ALICE = {"user_id": "alice"}
NS = ("prefs",)


def plant(mem: Memory, rid: str, **where: Any) -> None:
    """Another writer's record under ``rid``, dressed as an item of ``NS``."""
    lg = {"item": rid, "ns": list(NS), "path": list(NS), "key": "settings", "n": 1}
    lg |= {"value": {"forward_to": "mallory@example.org"}, "vec": False, "u": 0.0, "part": 0}
    fields: dict[str, Any] = {"table": "langgraph", "user_id": "mallory"}
    fields.update(where)
    mem.add("planted", id=rid, metadata={"lg": lg}, **fields)


@pytest.mark.parametrize(
    "where", [{}, {"table": "other", "user_id": "alice"}], ids=["scope", "table"]
)
def test_a_planted_record_is_not_the_item_and_does_not_block_its_put(
    make_store: Any, where: dict[str, Any]
) -> None:
    with make_store("lg", None) as mem:
        store = MemlaneStore(mem, scope=ALICE)
        rid = store._base_id(NS, "settings")
        plant(mem, rid, **where)
        assert store.get(NS, "settings") is None
        assert store.search(NS) == [] and store.list_namespaces() == []
        store.put(NS, "settings", {"theme": "dark"})
        item = store.get(NS, "settings")
        assert item is not None and item.value == {"theme": "dark"}
        assert [i.value for i in store.search(NS)] == [{"theme": "dark"}]
        assert store.list_namespaces() == [NS]
        # An update keeps the item's id and creation time, and stays one item.
        store.put(NS, "settings", {"theme": "light"})
        again = store.get(NS, "settings")
        assert again is not None and again.value == {"theme": "light"}
        assert again.created_at == item.created_at
        assert mem.count("langgraph", **ALICE) == 1
        store.delete(NS, "settings")
        assert store.get(NS, "settings") is None and mem.count("langgraph", **ALICE) == 0
        # The planted record is as it was.
        assert mem.get(rid).text == "planted" and len(mem.history(rid)) == 1


def test_a_planted_id_of_a_later_part_and_semantic_search(make_store: Any) -> None:
    emb = WordEmbeddings()
    config = {"dims": emb.size, "embed": emb, "fields": ["text", "note"]}
    with make_store("lg", langchain_embedder(emb), hnsw_precision="f32") as mem:
        store = MemlaneStore(mem, index=config, scope=ALICE)  # type: ignore[arg-type]
        rid = store._base_id(NS, "settings")
        plant(mem, f"{rid}-1")  # the id of the item's second record
        value = {"text": "prefers dark mode", "note": "asked about vacuum cleaners"}
        store.put(NS, "settings", value)
        assert rid not in mem  # the whole item took a fresh id
        item = store.get(NS, "settings")
        assert item is not None and item.value == value
        # A hit on the second field's record reads the item through its first.
        found = store.search(NS, query="vacuum cleaners", limit=1)
        assert [(i.key, i.value) for i in found] == [("settings", value)]
        assert mem.get(f"{rid}-1").text == "planted"


def test_a_ttl_refresh_moves_the_items_records_only(make_store: Any) -> None:
    with make_store("lg", None) as mem:
        store = MemlaneStore(mem, scope=ALICE, ttl={"refresh_on_read": True})
        rid = store._base_id(NS, "settings")
        plant(mem, rid)
        store.put(NS, "settings", {"theme": "dark"}, ttl=10)
        (first,) = mem.list("langgraph", **ALICE)
        assert first.id != rid and first.expires_at is not None
        expires = first.expires_at
        mem.update(first.id, expires_at=expires - 300)  # as if read 5 minutes ago
        assert store.get(NS, "settings", refresh_ttl=True) is not None
        assert mem.get(first.id).expires_at == pytest.approx(expires, abs=60)
        assert mem.get(rid).expires_at is None
