"""Knowledge is what ingest writes: records scoped by their agent alone (shared knowledge
has no scope field set, an agent's own its ``agent_id`` and nothing else). Anyone may add
a record to the ``fragments`` or ``documents`` table with ``shared`` metadata, a caller
scoped to a user or to another agent too (a scoped server key), and such a record, were
it taken for knowledge, would reach every agent's prompt. So no knowledge read returns
it, and no ingest, prune, removal or clearing deletes, replaces or counts it. On both
backends."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conftest import StoreFactory, WordHashEmbedder
from memlane import Memory
from memlane.knowledge.api import _visible_filter
from memlane.knowledge.documents import knowledge_only

WIFI = "The office wifi password is on the fridge."
SECRET = "Agent two keeps the vault code in the blue folder."
PLANTED = "PLANTED: the wifi password is hunter2, the vault code is 0000"
# What a planted record may carry: a scope and whether it claims to be shared (else a2's
# own). An agent's key writing a record of its own agent marked private writes that
# agent's own knowledge, which its key may ingest anyway: not planted in anyone else's.
PLANTS: list[tuple[dict[str, str], bool | list[bool]]] = [
    ({"agent_id": "a1"}, True),
    # A list matches a filter when one of its items does: private and shared at once.
    ({"agent_id": "a1"}, [True, False]),
    ({"agent_id": "a2"}, [False, True]),
    ({"user_id": "alice"}, True),
    ({"user_id": "alice"}, False),
    ({"agent_id": "a2", "user_id": "alice"}, True),
    ({"agent_id": "a2", "user_id": "alice"}, False),
]


def plant(mem: Memory, shared_id: str, private_id: str, root: Path) -> list[str]:
    """Records mimicking the real documents' and fragments' (a document's id, its place
    under the root), of every scope in PLANTS, in both tables; their ids."""
    ids = []
    for scope, shared in PLANTS:
        meta: dict[str, Any] = {
            "document_id": shared_id if shared else private_id,
            "shared": shared,
            "agent_id": None if shared else "a2",
            "source": "gone.txt",
            "root": str(root.resolve()),
            "position": 0,
            "total": 1,
        }
        for table, type_ in (("fragments", "fragment"), ("documents", "document")):
            ids.append(mem.add(PLANTED, table=table, type=type_, metadata=meta, **scope).id)
    return ids


def texts(records: list[Any]) -> list[str]:
    return [getattr(r, "record", r).text for r in records]


def test_records_of_another_scope_are_never_knowledge(
    make_store: StoreFactory, word_embedder: WordHashEmbedder, tmp_path: Path
) -> None:
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "wifi.txt").write_text(WIFI)
    mem = make_store("planted", word_embedder)
    shared_id = mem.ingest(kb, shared=True, progress=False).ingested["wifi.txt"]
    private_id = mem.ingest_text(SECRET, source="vault.txt", agent_id="a2").ingested["vault.txt"]
    planted = plant(mem, shared_id, private_id, kb)

    for agent in (None, "a1", "a2"):
        for search in (mem.search_knowledge, mem.search_documents):
            for mode in ("text", "hybrid"):
                hits = search("wifi password vault code", agent_id=agent, mode=mode, threshold=None)
                assert PLANTED not in texts(hits), (search.__name__, agent, mode)
                assert hits  # the real knowledge is still found
        for shared in (None, True, False):
            assert PLANTED not in texts(mem.list_documents(agent, shared))
    assert texts(mem.get_fragments(shared_id)) == [WIFI]
    assert texts(mem.get_fragments(private_id)) == [SECRET]

    # An ingest that replaces the document, one that prunes a file gone (the planted
    # documents name one under the root), a removal and a clearing leave them all.
    every = {"id": {"$in": planted}}
    (kb / "wifi.txt").write_text(WIFI + " Ask the front desk.")
    report = mem.ingest(kb, shared=True, progress=False, prune_missing=True)
    assert report.replaced == {"wifi.txt": shared_id} and report.pruned == {}
    assert mem.count(filters=every) == len(planted)
    assert mem.remove_document(private_id) == 1
    assert mem.count(filters=every) == len(planted)
    assert mem.clear_knowledge(shared=None) == 1
    assert mem.list_documents() == []
    assert mem.count(filters=every) == len(planted)


def test_a_knowledge_filter_examines_knowledge_alone(
    make_store: StoreFactory, word_embedder: WordHashEmbedder
) -> None:
    """The scope conditions are checked on the records the ``shared`` metadata's postings
    give, never by a scan of the store's other records."""
    mem = make_store("examined", word_embedder)
    mem.add_many([{"text": f"note {i}", "user_id": "alice"} for i in range(500)])
    mem.ingest_text(WIFI, source="wifi.txt", shared=True)
    mem.ingest_text(SECRET, source="vault.txt", agent_id="a2")
    knowledge = 4  # each text a document and one fragment
    for flt in (None, _visible_filter(None), _visible_filter("a2")):
        _, examined = mem._sync.engine.filter_stats(knowledge_only(mem, flt))
        assert examined <= knowledge, flt


@pytest.mark.parametrize("default_scope", [{"namespace": "team"}, {"agent_id": "a2"}])
def test_a_default_scope_is_part_of_what_ingest_writes(
    make_store: StoreFactory, word_embedder: WordHashEmbedder, default_scope: dict[str, str]
) -> None:
    """A store's ``default_scope`` is set on every record ingest writes, and asked of
    every read: its knowledge is still knowledge, and a record of a scope beyond it
    still is not."""
    mem = make_store("defaults", word_embedder, default_scope=default_scope)
    mem.ingest_text(WIFI, source="wifi.txt", shared=True)
    mem.ingest_text(SECRET, source="vault.txt", agent_id="a2")
    meta = {"shared": True, "agent_id": None, "document_id": "d", "position": 0, "total": 1}
    mem.add(PLANTED, table="fragments", type="fragment", metadata=meta, user_id="alice")
    hits = mem.search_knowledge("wifi password vault code", agent_id="a2", threshold=None)
    assert sorted(texts(hits)) == sorted([WIFI, SECRET])
    assert len(mem.list_documents()) == 2
    assert mem.clear_knowledge(shared=None) == 2
    assert texts(mem.list("fragments")) == [PLANTED]
