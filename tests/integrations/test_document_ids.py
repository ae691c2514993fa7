"""The LangChain and LlamaIndex stores' ids are their own: an id another scope's (or
table's) record holds is usable, never revealed nor touched; several documents with one id
in an add keep the last; records of earlier releases (under their document's id) still
read, update and delete."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.indexing import InMemoryRecordManager, index
from llama_index.core.schema import TextNode
from llama_index.core.vector_stores.types import VectorStoreQuery

import memlane
from memlane.errors import InvalidArgumentError
from memlane.integrations.langchain import MemlaneVectorStore, langchain_embedder
from memlane.integrations.llamaindex import MemlaneVectorStore as LlamaStore

from .adapter_fakes import WordEmbeddings


@pytest.fixture
def emb() -> WordEmbeddings:
    return WordEmbeddings()


@pytest.fixture
def mem(make_store: Any, emb: WordEmbeddings) -> Iterator[memlane.Memory]:
    with make_store("doc-ids", langchain_embedder(emb)) as m:
        yield m


def texts(docs: list[Document]) -> list[str]:
    return [d.page_content for d in docs]


def test_langchain_ids_are_the_stores_own(mem: memlane.Memory, emb: WordEmbeddings) -> None:
    alice = MemlaneVectorStore(emb, memory=mem, scope={"user_id": "alice"})
    bob = MemlaneVectorStore(emb, memory=mem, scope={"user_id": "bob"})
    other_table = MemlaneVectorStore(emb, memory=mem, scope={"user_id": "bob"}, table="t2")
    alice.add_texts(["alice private note"], ids=["doc-1"], metadatas=[{"n": 1}])
    # Was: "id(s) already stored: ['doc-1']", naming another scope's id.
    assert bob.add_texts(["bob own note"], ids=["doc-1"], metadatas=[{"n": 2}]) == ["doc-1"]
    assert other_table.add_texts(["other table"], ids=["doc-1"]) == ["doc-1"]
    assert texts(alice.get_by_ids(["doc-1"])) == ["alice private note"]
    (doc,) = bob.get_by_ids(["doc-1"])
    assert (doc.id, doc.page_content, doc.metadata) == ("doc-1", "bob own note", {"n": 2})
    found = bob.similarity_search("note", k=5)
    assert [(d.id, d.page_content, d.metadata) for d in found] == [
        ("doc-1", "bob own note", {"n": 2})
    ]
    assert [d.id for d in bob.max_marginal_relevance_search("note", k=5)] == ["doc-1"]
    assert [d.id for d in bob.as_hybrid_retriever().invoke("note")] == ["doc-1"]
    # An upsert replaces bob's document alone, and so does a delete.
    bob.add_texts(["bob's second version"], ids=["doc-1"])
    assert texts(bob.get_by_ids(["doc-1"])) == ["bob's second version"]
    assert mem.count(user_id="bob", table="memories") == 1
    bob.delete(["doc-1"])
    assert bob.get_by_ids(["doc-1"]) == []
    assert texts(alice.get_by_ids(["doc-1"])) == ["alice private note"]
    assert texts(other_table.get_by_ids(["doc-1"])) == ["other table"]
    # The id freed, alice's record keeps it; her store never meets bob's.
    alice.add_texts(["alice again"], ids=["doc-1"])
    assert texts(alice.get_by_ids(["doc-1"])) == ["alice again"]


def test_langchain_index_api_for_two_users(mem: memlane.Memory, emb: WordEmbeddings) -> None:
    handbook = [Document("Company handbook: vacation policy", metadata={"source": "hb.md"})]
    for user in ("alice", "bob"):
        store = MemlaneVectorStore(emb, memory=mem, scope={"user_id": user})
        manager = InMemoryRecordManager(namespace=f"rm/{user}")
        manager.create_schema()
        result = index(handbook, manager, store, cleanup="full", key_encoder="sha256")
        assert result["num_added"] == 1
        assert texts(store.similarity_search("vacation", k=3)) == [handbook[0].page_content]


def test_langchain_one_document_under_anothers_fresh_id(
    mem: memlane.Memory, emb: WordEmbeddings
) -> None:
    """A document whose id is the fresh record id of another document of the store is
    a document of its own."""
    alice = MemlaneVectorStore(emb, memory=mem, scope={"user_id": "alice"})
    bob = MemlaneVectorStore(emb, memory=mem, scope={"user_id": "bob"})
    alice.add_texts(["alice"], ids=["d"])
    bob.add_texts(["bob d"], ids=["d"])
    (fresh,) = [r.id for r in mem.list(user_id="bob")]
    bob.add_texts(["bob fresh"], ids=[fresh])
    assert texts(bob.get_by_ids(["d", fresh])) == ["bob d", "bob fresh"]
    bob.delete([fresh])
    assert texts(bob.get_by_ids(["d", fresh])) == ["bob d"]


def test_langchain_records_of_earlier_releases(mem: memlane.Memory, emb: WordEmbeddings) -> None:
    """Records under their document's id, as every earlier release wrote them."""
    mem.add_many(
        [
            {"text": "old one", "id": "o1", "user_id": "alice", "metadata": {"k": 1}},
            {"text": "old two", "id": "o2", "user_id": "alice"},
        ]
    )
    store = MemlaneVectorStore(emb, memory=mem, scope={"user_id": "alice"})
    assert [(d.id, d.metadata) for d in store.get_by_ids(["o2", "o1"])] == [
        ("o2", {}),
        ("o1", {"k": 1}),
    ]
    store.add_texts(["new one"], ids=["o1"])
    assert texts(store.get_by_ids(["o1"])) == ["new one"]
    assert sorted(r.id for r in mem.list()) == ["o1", "o2"]
    store.delete(["o2"])
    assert sorted(r.id for r in mem.list()) == ["o1"]


def test_langchain_reserves_the_id_key(mem: memlane.Memory, emb: WordEmbeddings) -> None:
    store = MemlaneVectorStore(emb, memory=mem)
    calls = emb.calls
    with pytest.raises(InvalidArgumentError, match="memlane:id"):
        store.add_texts(["x"], metadatas=[{"memlane:id": "y"}])
    assert emb.calls == calls and mem.count() == 0


def test_llamaindex_node_ids_are_the_stores_own(mem: memlane.Memory, emb: WordEmbeddings) -> None:
    alice = LlamaStore(mem, scope={"user_id": "alice"})
    bob = LlamaStore(mem, scope={"user_id": "bob"})
    vec = emb.embed_query("readme")
    alice.add([TextNode(text="alice readme", id_="readme_0", embedding=vec)])
    # Was: "id(s) already stored: ['readme_0']".
    assert bob.add([TextNode(text="bob readme", id_="readme_0", metadata={"m": 1})]) == ["readme_0"]
    (node,) = bob.get_nodes(["readme_0"])
    assert (node.node_id, node.get_content(), node.metadata) == ("readme_0", "bob readme", {"m": 1})
    result = bob.query(VectorStoreQuery(query_embedding=vec, similarity_top_k=5))
    assert result.ids == ["readme_0"] and [n.node_id for n in result.nodes or []] == ["readme_0"]
    ids_only = VectorStoreQuery(query_embedding=vec, similarity_top_k=5, node_ids=["readme_0"])
    assert bob.query(ids_only).ids == ["readme_0"]
    bob.delete_nodes(["readme_0"])
    assert bob.get_nodes(["readme_0"]) == []
    assert [n.get_content() for n in alice.get_nodes(["readme_0"])] == ["alice readme"]


def test_llamaindex_records_of_earlier_releases(mem: memlane.Memory) -> None:
    mem.add_many([{"text": "old", "id": "n1", "table": "llamaindex", "metadata": {"k": 1}}])
    store = LlamaStore(mem)
    (node,) = store.get_nodes(["n1"])
    assert (node.node_id, node.metadata) == ("n1", {"k": 1})
    store.delete_nodes(["n1"])
    assert mem.count() == 0


def test_llamaindex_last_node_of_an_id_wins(mem: memlane.Memory, emb: WordEmbeddings) -> None:
    store = LlamaStore(mem)
    nodes = [
        TextNode(text="first", id_="d", embedding=emb.embed_query("first")),
        TextNode(text="other", id_="e", embedding=emb.embed_query("other")),
        TextNode(text="second", id_="d", embedding=emb.embed_query("second")),
    ]
    # Was: "id 'd' appears twice in one add_many", naming an internal call.
    assert store.add(nodes) == ["d", "e", "d"]
    assert [n.get_content() for n in store.get_nodes(["d", "e"])] == ["second", "other"]


def test_llamaindex_reserves_the_id_key(mem: memlane.Memory) -> None:
    with pytest.raises(InvalidArgumentError, match=r"nodes\[0\].metadata has the key"):
        LlamaStore(mem).add([TextNode(text="x", metadata={"memlane:id": "y"})])
    assert mem.count() == 0
