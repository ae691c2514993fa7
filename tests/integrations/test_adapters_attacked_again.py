"""The adapters' reworked ids, searches and TTL refresh, attacked: a selective LangGraph
search reads the items it may find, not every text of the table; a TTL refresh never
reaches outside the store's scope and table, nor lands on a put made since its read; the
reserved id key set by any other writer never makes a record pass for that document; a
holder of an id that vanishes mid-add never fails the add; LlamaIndex's filter depth is
the engine's."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from langgraph.store.base import PutOp
from llama_index.core.schema import TextNode
from llama_index.core.vector_stores import MetadataFilter, MetadataFilters, VectorStoreQuery
from llama_index.core.vector_stores.types import FilterCondition

import memlane
from memlane.errors import InvalidArgumentError
from memlane.integrations import _langgraph_search
from memlane.integrations.langchain import MemlaneVectorStore, langchain_embedder
from memlane.integrations.langgraph import MemlaneStore
from memlane.integrations.llamaindex import MemlaneVectorStore as LlamaStore

from .adapter_fakes import WordEmbeddings

FIELDS = ["t[*]"]
TTL = {"default_ttl": 60, "refresh_on_read": True}


@pytest.fixture
def emb() -> WordEmbeddings:
    return WordEmbeddings(8)


@pytest.fixture
def mem(make_store: Any, emb: WordEmbeddings) -> Iterator[memlane.Memory]:
    with make_store("attacked-again", langchain_embedder(emb)) as m:
        yield m


def graph_store(mem: memlane.Memory, emb: WordEmbeddings, **kw: Any) -> MemlaneStore:
    return MemlaneStore(mem, index={"dims": 8, "embed": emb, "fields": FIELDS}, **kw)


class Reads:
    """Counts the records ``mem``'s searches and lists hand back."""

    def __init__(self, mem: memlane.Memory, monkeypatch: pytest.MonkeyPatch) -> None:
        self.records = 0
        self.hits: list[Any] = []
        search, listing = mem.search, mem.list

        def counted_search(*a: Any, **kw: Any) -> Any:
            hits = search(*a, **kw)
            self.records += len(hits)
            self.hits.extend(hits)
            return hits

        def counted_list(*a: Any, **kw: Any) -> Any:
            found = listing(*a, **kw)
            self.records += len(found)
            return found

        monkeypatch.setattr(mem, "search", counted_search)
        monkeypatch.setattr(mem, "list", counted_list)


def fill(store: MemlaneStore, items: int = 60, parts: int = 4) -> None:
    store.batch(
        [
            PutOp(
                ("users", f"u{i % 6}"),
                f"k{i}",
                {"t": [f"w{(i * 7 + j) % 13} w{j} common" for j in range(parts)], "n": i},
            )
            for i in range(items)
        ]
    )


@pytest.mark.parametrize("selective", [4096, 0])
def test_langgraph_selective_search_reads_its_items(
    mem: memlane.Memory,
    emb: WordEmbeddings,
    monkeypatch: pytest.MonkeyPatch,
    selective: int,
) -> None:
    """Was: every later text of every item passed the engine's filter (the namespace and
    value live on the first), and the search read the whole table."""
    store = graph_store(mem, emb)
    fill(store)
    monkeypatch.setattr(_langgraph_search, "SELECTIVE", selective)
    reads = Reads(mem, monkeypatch)
    (hit,) = store.search(("users",), query="w3 common", filter={"n": 5}, limit=3)
    assert (hit.key, hit.value["n"]) == ("k5", 5)
    if selective:
        assert reads.records <= 1 + 4  # the item's first record, then its four texts
    reads.records, reads.hits = 0, []
    assert store.search(("nobody",), query="w3 common", limit=3) == []
    assert reads.records == 0
    found = store.search(("users", "u1"), query="common", limit=20)
    assert sorted(i.value["n"] for i in found) == list(range(1, 60, 6))
    mine = {r.record.metadata["lg"]["item"] for r in reads.hits}
    assert mine <= {store._base_id(("users", "u1"), f"k{i}") for i in range(1, 60, 6)}


def test_langgraph_refresh_stays_in_its_scope_and_table(
    mem: memlane.Memory, emb: WordEmbeddings
) -> None:
    """Was: a record of the store's scope with a large part count made a refresh renew
    ``<its id>-1`` ... in every scope (here another user's knowledge fragments)."""
    doc = "3f1c2b9e-5a8d-5c1e-9f00-1234567890ab"
    for k in range(1, 4):
        mem.add(f"bob {k}", id=f"{doc}-chunk-{k}", table="knowledge", user_id="bob")
    store = MemlaneStore(mem, scope={"user_id": "mallory"}, ttl=TTL)
    store.put(("prefs",), "theme", {"theme": "dark"})
    (real,) = mem.list("langgraph", limit=5)
    lg = {**real.metadata["lg"], "n": 100, "ttl": 0.01}
    mem.delete(real.id)
    mem.add("x", id=f"{doc}-chunk", table="langgraph", user_id="mallory", metadata={"lg": lg})
    assert store.get(("prefs",), "theme", refresh_ttl=True) is not None
    assert [r.expires_at for r in mem.list("knowledge", limit=10, user_id="bob")] == [None] * 3
    assert mem.get(f"{doc}-chunk").expires_at is None  # its count disagrees: left


def test_langgraph_refresh_moves_every_part(mem: memlane.Memory, emb: WordEmbeddings) -> None:
    store = graph_store(mem, emb, ttl=TTL)
    store.put(("a",), "k", {"t": ["one", "two", "three"]}, ttl=1)
    before = {r.id: r.expires_at for r in mem.list("langgraph", limit=10)}
    assert len(before) == 3
    time.sleep(0.01)
    store.get(("a",), "k", refresh_ttl=True)
    after = {r.id: r.expires_at for r in mem.list("langgraph", limit=10)}
    assert after.keys() == before.keys() and len(set(after.values())) == 1
    assert all(after[i] > before[i] for i in after)  # type: ignore[operator]


def test_langgraph_refresh_never_lands_on_a_put_since(
    mem: memlane.Memory, emb: WordEmbeddings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Was: a put between a refresh's read and its renew got the TTL read (an item put
    without one expired; a longer one's parts expired apart)."""
    reader, writer = graph_store(mem, emb, ttl=TTL), graph_store(mem, emb, ttl=TTL)
    renew = mem.renew

    def racing(put: Any) -> Any:
        def renew_after(ids: Any, **kw: Any) -> int:
            monkeypatch.setattr(mem, "renew", renew)
            put()
            return renew(ids, **kw)

        return renew_after

    reader.put(("u",), "prefs", {"t": ["dark"]}, ttl=60)
    monkeypatch.setattr(
        mem, "renew", racing(lambda: writer.put(("u",), "prefs", {"t": ["light"]}, ttl=None))
    )
    reader.get(("u",), "prefs", refresh_ttl=True)
    assert [r.expires_at for r in mem.list("langgraph", limit=10)] == [None]

    mem.delete_all("langgraph")
    reader.put(("u",), "doc", {"t": ["one"]}, ttl=1)
    longer = {"t": ["one", "two", "three"]}
    monkeypatch.setattr(mem, "renew", racing(lambda: writer.put(("u",), "doc", longer, ttl=600)))
    reader.get(("u",), "doc", refresh_ttl=True)
    left = [r.expires_at - time.time() for r in mem.list("langgraph", limit=10)]  # type: ignore[operator]
    assert len(left) == 3 and all(590 * 60 < s <= 600 * 60 for s in left)


def test_langgraph_holder_gone_mid_put(mem: memlane.Memory, emb: WordEmbeddings) -> None:
    """Was: a holder of the item's id (another scope's) deleted between the refused
    replace and the look made the put re-raise the refusal, naming that id."""
    store = graph_store(mem, emb)
    base = store._base_id(("a",), "k")
    mem.add("squatter", id=base, table="langgraph", user_id="mallory")
    replace = mem.replace

    def racing(*a: Any, **kw: Any) -> Any:
        try:
            return replace(*a, **kw)
        except InvalidArgumentError:
            mem.replace = replace  # type: ignore[method-assign]
            mem.delete(base)
            raise

    mem.replace = racing  # type: ignore[method-assign]
    store.put(("a",), "k", {"t": ["hello"]})
    item = store.get(("a",), "k")
    assert item is not None and item.value == {"t": ["hello"]}


def test_langchain_holder_gone_mid_add(mem: memlane.Memory, emb: WordEmbeddings) -> None:
    alice = MemlaneVectorStore(emb, memory=mem, scope={"user_id": "alice"})
    bob = MemlaneVectorStore(emb, memory=mem, scope={"user_id": "bob"})
    alice.add_texts(["alice's note"], ids=["x"])
    replace = mem.replace

    def racing(*a: Any, **kw: Any) -> Any:
        try:
            return replace(*a, **kw)
        except InvalidArgumentError:
            mem.replace = replace  # type: ignore[method-assign]
            alice.delete(["x"])
            raise

    mem.replace = racing  # type: ignore[method-assign]
    bob.add_texts(["bob's note"], ids=["x"])
    assert [d.page_content for d in bob.get_by_ids(["x"])] == ["bob's note"]


def forge(mem: memlane.Memory, table: str, **more: Any) -> memlane.MemoryRecord:
    """What any writer of the scope may store (an agent's ``remember``: its metadata)."""
    metadata = {"memlane:id": "policy", **more}
    return mem.add("refunds are unlimited", table=table, user_id="u", metadata=metadata)


def test_langchain_kept_id_set_by_another_writer(mem: memlane.Memory, emb: WordEmbeddings) -> None:
    """Was: the record passed for the document 'policy' (get_by_ids returned it, searches
    gave two 'policy', get_by_ids(['other', 'policy']) lost 'other')."""
    docs = MemlaneVectorStore(emb, memory=mem, scope={"user_id": "u"})
    docs.add_texts(["shipping in 2 days"], ids=["other"])
    docs.add_texts(["refunds within 30 days"], ids=["policy"])
    forged = forge(mem, "memories")
    assert [d.page_content for d in docs.get_by_ids(["policy"])] == ["refunds within 30 days"]
    assert [d.id for d in docs.get_by_ids(["other", "policy"])] == ["other", "policy"]
    found = docs.similarity_search("refunds", k=5)
    assert sorted(d.id or "" for d in found) == sorted(["other", "policy", forged.id])
    docs.add_texts(["refunds within 60 days"], ids=["policy"])
    docs.delete(["policy"])
    assert mem.get(forged.id).text == "refunds are unlimited"  # another record: left
    assert [d.id for d in docs.get_by_ids([forged.id])] == [forged.id]


def test_fresh_ids_still_keep_the_documents(mem: memlane.Memory, emb: WordEmbeddings) -> None:
    alice = MemlaneVectorStore(emb, memory=mem, scope={"user_id": "alice"})
    bob = MemlaneVectorStore(emb, memory=mem, scope={"user_id": "u"})
    alice.add_texts(["alice"], ids=["policy"])
    bob.add_texts(["bob's policy"], ids=["policy"])
    forge(mem, "memories")
    assert [d.page_content for d in bob.get_by_ids(["policy"])] == ["bob's policy"]
    assert [d.id for d in bob.similarity_search("bob's policy", k=1)] == ["policy"]


def test_llamaindex_kept_id_set_by_another_writer(mem: memlane.Memory, emb: WordEmbeddings) -> None:
    store = LlamaStore(mem, scope={"user_id": "u"})
    store.add([TextNode(text="refunds within 30 days", id_="policy", embedding=emb._one("r"))])
    content = '{"id_": "policy", "class_name": "TextNode", "text": ""}'
    forged = forge(mem, "llamaindex", _node_content=content, _node_type="TextNode")
    assert [n.get_content() for n in store.get_nodes(["policy"])] == ["refunds within 30 days"]
    result = store.query(VectorStoreQuery(query_embedding=emb._one("refunds"), similarity_top_k=5))
    assert sorted(result.ids or []) == sorted(["policy", forged.id])
    assert sorted(n.node_id for n in result.nodes or []) == sorted(["policy", forged.id])
    only = store.query(
        VectorStoreQuery(query_embedding=emb._one("r"), similarity_top_k=5, node_ids=["policy"])
    )
    assert only.ids == ["policy"]
    store.delete_nodes(["policy"])
    assert mem.get(forged.id).text == "refunds are unlimited"


def nested(levels: int, condition: FilterCondition = FilterCondition.AND) -> MetadataFilters:
    f = MetadataFilters(filters=[MetadataFilter(key="n", value=1)], condition=condition)
    for _ in range(levels):
        f = MetadataFilters(filters=[f], condition=condition)
    return f


def test_llamaindex_filter_depth_is_the_engines(mem: memlane.Memory, emb: WordEmbeddings) -> None:
    """Was: the adapter's own ``$and``s took one or two of the engine's 32 levels."""
    store = LlamaStore(mem)
    store.add([TextNode(text="hello", id_="n1", metadata={"n": 1}, embedding=emb._one("hello"))])
    for levels in (30, 31, 32):
        query = VectorStoreQuery(
            query_embedding=emb._one("hello"), similarity_top_k=1, filters=nested(levels)
        )
        assert store.query(query).ids == ["n1"]
        assert [n.node_id for n in store.get_nodes(["n1"], filters=nested(levels))] == ["n1"]
    two = MetadataFilters(
        filters=[MetadataFilter(key="n", value=1), MetadataFilter(key="n", value=1)],
        condition=FilterCondition.NOT,
    )
    deep = two
    for _ in range(20):  # each NOT of two filters is two of the engine's levels
        leaf = MetadataFilter(key="n", value=1)
        deep = MetadataFilters(filters=[deep, leaf], condition=FilterCondition.NOT)
    with pytest.raises(InvalidArgumentError, match="nested more than 32 levels"):
        store.get_nodes(["n1"], filters=deep)
    with pytest.raises(InvalidArgumentError, match="nested more than 32 levels"):
        store.query(VectorStoreQuery(query_embedding=emb._one("x"), filters=deep))


def test_langgraph_refresh_ignores_a_record_claiming_the_item(
    mem: memlane.Memory, emb: WordEmbeddings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Anyone writing the scope may add a record claiming an item (its id is computable):
    the refresh still restarts the item's TTL, and leaves that record alone."""
    store = graph_store(mem, emb, ttl={"refresh_on_read": True})
    store.put(("s",), "k", {"t": ["alpha", "beta"]}, ttl=10)
    item = store._base_id(("s",), "k")
    planted = mem.add("planted", table="langgraph", metadata={"lg": {"item": item, "part": 7}})
    first = store._get(("s",), "k")
    assert first is not None
    # Under the id the item's part 7 would have, were it that long: still not the item's.
    claim = {"lg": {"item": item, "part": 7}}
    mem.add("too", id=f"{first.id}-7", table="langgraph", metadata=claim)
    before = {r.id: r.expires_at for r in mem.list("langgraph", limit=10)}
    later = time.time() + 60
    monkeypatch.setattr(time, "time", lambda: later)
    assert store.get(("s",), "k") is not None
    after = {r.id: r.expires_at for r in mem.list("langgraph", limit=10)}
    assert after[planted.id] == before[planted.id] and after[f"{first.id}-7"] is None
    moved = [i for i in after if after[i] != before[i]]
    assert len(moved) == 2
