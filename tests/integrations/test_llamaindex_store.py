"""memlane's LlamaIndex vector store, offline, with llama-index-core's own types."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from llama_index.core import VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode
from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
)
from pydantic import PrivateAttr

import memlane
from memlane.integrations.llamaindex import MemlaneVectorStore

from .adapter_fakes import WordEmbeddings

_WORDS = WordEmbeddings(32)


class WordEmbedding(BaseEmbedding):
    """LlamaIndex's side of the deterministic bag-of-words embedder."""

    _inner: WordEmbeddings = PrivateAttr(default_factory=lambda: _WORDS)

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._inner.embed_query(query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._inner.embed_query(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._inner.embed_query(text)


def node(i: str, text: str, doc: str, embed: bool = False, **meta: Any) -> TextNode:
    n = TextNode(text=text, id_=i, metadata=meta)
    n.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=doc)
    if embed:
        n.embedding = _WORDS.embed_query(text)
    return n


NODES = [
    ("n1", "Alice prefers dark mode in every editor", "doc-a", {"user": "alice", "n": 1}),
    ("n2", "Bob prefers light mode", "doc-a", {"user": "bob", "n": 2, "tags": ["ui", "pref"]}),
    ("n3", "The deploy script uses a blue-green rollout", "doc-b", {"user": "ops", "n": 3}),
    ("n4", "Dark chocolate is Alice's favourite dessert", "doc-b", {"user": "alice", "n": 4}),
    ("n5", "Meeting moved to Friday", "doc-c", {"n": 5, "tags": ["ui"]}),
]


@pytest.fixture
def store() -> Iterator[MemlaneVectorStore]:
    s = MemlaneVectorStore(embed_model=WordEmbedding())
    s.add([node(i, t, d, embed=True, **m) for i, t, d, m in NODES])
    yield s
    s.close()


def ask(store: MemlaneVectorStore, text: str = "", **kwargs: Any) -> list[str]:
    q = VectorStoreQuery(
        query_str=text or None,
        query_embedding=_WORDS.embed_query(text) if text else None,
        similarity_top_k=kwargs.pop("k", 10),
        **kwargs,
    )
    result = store.query(q)
    assert result.ids is not None and result.nodes is not None and result.similarities is not None
    assert [n.node_id for n in result.nodes] == result.ids
    assert result.similarities == sorted(result.similarities, reverse=True) or kwargs.get("mode")
    return result.ids


def flt(*filters: MetadataFilter | MetadataFilters, cond: str = "and") -> MetadataFilters:
    return MetadataFilters(filters=list(filters), condition=FilterCondition(cond))


def test_modes(store: MemlaneVectorStore) -> None:
    assert ask(store, "Alice prefers dark mode in every editor", k=1) == ["n1"]
    result = store.query(
        VectorStoreQuery(query_embedding=_WORDS.embed_query("Bob prefers light mode"))
    )
    assert result.ids == ["n2"] and result.similarities is not None
    assert result.similarities[0] == pytest.approx(1.0, abs=1e-3)
    # BM25 alone: only documents sharing a word.
    text = ask(store, "rollout script", mode=VectorStoreQueryMode.TEXT_SEARCH)
    assert text == ["n3"]
    assert ask(store, "rollout script", mode=VectorStoreQueryMode.SPARSE, sparse_top_k=1) == ["n3"]
    hybrid = ask(store, "dark mode", mode=VectorStoreQueryMode.HYBRID, k=3)
    assert hybrid[0] == "n1" and len(hybrid) == 3
    assert ask(store, "dark", mode=VectorStoreQueryMode.HYBRID, alpha=0.0, k=5)[:2] in (
        ["n1", "n4"],
        ["n4", "n1"],
    )
    # Without a query embedding, the store's own embedder embeds the text.
    own = store.query(VectorStoreQuery(query_str="Meeting moved to Friday", similarity_top_k=1))
    assert own.ids == ["n5"]
    mmr = store.query(
        VectorStoreQuery(
            query_embedding=_WORDS.embed_query("dark mode"),
            similarity_top_k=2,
            mode=VectorStoreQueryMode.MMR,
            mmr_threshold=0.2,
        )
    )
    assert mmr.ids is not None and len(mmr.ids) == 2 and mmr.ids[0] == "n1"
    with pytest.raises(ValueError, match="not supported"):
        store.query(VectorStoreQuery(query_str="x", mode=VectorStoreQueryMode.SVM))
    with pytest.raises(ValueError, match="query_str"):
        store.query(VectorStoreQuery(mode=VectorStoreQueryMode.TEXT_SEARCH))


def test_filters(store: MemlaneVectorStore) -> None:
    def found(filters: MetadataFilters) -> set[str]:
        return set(ask(store, "mode", filters=filters))

    eq = MetadataFilter(key="user", value="alice")
    assert found(flt(eq)) == {"n1", "n4"}
    assert found(flt(MetadataFilter(key="n", value=3, operator=FilterOperator.GTE))) == {
        "n3",
        "n4",
        "n5",
    }
    assert found(flt(MetadataFilter(key="n", value=2, operator=FilterOperator.LT))) == {"n1"}
    assert found(flt(MetadataFilter(key="user", value="bob", operator=FilterOperator.NE))) == {
        "n1",
        "n3",
        "n4",
        "n5",
    }
    assert found(
        flt(MetadataFilter(key="user", value=["bob", "ops"], operator=FilterOperator.IN))
    ) == {"n2", "n3"}
    assert found(
        flt(MetadataFilter(key="user", value=["alice", "ops"], operator=FilterOperator.NIN))
    ) == {"n2", "n5"}
    assert found(flt(MetadataFilter(key="tags", value="ui", operator=FilterOperator.CONTAINS))) == {
        "n2",
        "n5",
    }
    assert found(
        flt(MetadataFilter(key="tags", value=["pref", "x"], operator=FilterOperator.ANY))
    ) == {"n2"}
    assert found(
        flt(MetadataFilter(key="tags", value=["ui", "pref"], operator=FilterOperator.ALL))
    ) == {"n2"}
    assert found(flt(MetadataFilter(key="user", value=None, operator=FilterOperator.IS_EMPTY))) == {
        "n5"
    }
    assert found(flt(eq, MetadataFilter(key="n", value=5), cond="or")) == {"n1", "n4", "n5"}
    assert found(flt(eq, cond="not")) == {"n2", "n3", "n5"}
    nested = flt(
        flt(eq, MetadataFilter(key="user", value="bob"), cond="or"),
        MetadataFilter(key="n", value=1, operator=FilterOperator.GT),
    )
    assert found(nested) == {"n2", "n4"}
    assert set(ask(store, "mode", doc_ids=["doc-b"])) == {"n3", "n4"}
    assert set(ask(store, "mode", node_ids=["n1", "n5", "zz"])) == {"n1", "n5"}
    with pytest.raises(ValueError, match="not supported"):
        found(flt(MetadataFilter(key="user", value="al", operator=FilterOperator.TEXT_MATCH)))


def test_nodes_round_trip_and_deletes(store: MemlaneVectorStore) -> None:
    got = store.get_nodes(node_ids=["n4", "missing", "n1"])
    assert [n.node_id for n in got] == ["n4", "n1"]
    assert got[0].get_content() == NODES[3][1]
    assert got[0].metadata == {"user": "alice", "n": 4}
    assert got[0].ref_doc_id == "doc-b"
    alice = store.get_nodes(filters=flt(MetadataFilter(key="user", value="alice")))
    assert {n.node_id for n in alice} == {"n1", "n4"}
    # Adding a node id again replaces it.
    store.add([node("n1", "Alice switched to light mode", "doc-a", embed=True, user="alice")])
    assert store.get_nodes(node_ids=["n1"])[0].get_content() == "Alice switched to light mode"
    assert len(store.client) == len(NODES)
    store.delete("doc-b")
    assert {n.node_id for n in store.get_nodes()} == {"n1", "n2", "n5"}
    store.delete_nodes(node_ids=["n2", "n5"], filters=flt(MetadataFilter(key="n", value=5)))
    assert {n.node_id for n in store.get_nodes()} == {"n1", "n2"}
    store.delete_nodes(node_ids=[])
    store.clear()
    assert store.get_nodes() == []


def test_scopes_are_partitions(tmp_path: Path) -> None:
    with memlane.Memory(tmp_path / "s", embedder=None) as mem:
        alice = MemlaneVectorStore(mem, scope={"user_id": "alice"})
        bob = MemlaneVectorStore(mem, scope={"user_id": "bob"})
        alice.add([node("a1", "alice likes the rollout script", "d")])
        bob.add([node("b1", "bob likes the rollout script", "d"), node("b2", "bob", "e")])
        q = VectorStoreQuery(query_str="rollout script", mode=VectorStoreQueryMode.TEXT_SEARCH)
        assert alice.query(q).ids == ["a1"]
        assert [n.node_id for n in alice.get_nodes()] == ["a1"]
        assert alice.get_nodes(node_ids=["b1"]) == []
        alice.delete("d")
        alice.delete_nodes(node_ids=["b2"])
        alice.clear()
        assert sorted(r.id for r in mem.list(table="llamaindex")) == ["b1", "b2"]


def test_default_embedder_and_vector_store_index() -> None:
    """memlane embeds what comes without vectors; LlamaIndex's index and retriever work over it."""
    with MemlaneVectorStore() as s:  # memlane's offline ONNX model
        s.add([node(i, t, d, **m) for i, t, d, m in NODES])
        result = s.query(VectorStoreQuery(query_str="dark theme in the code editor"))
        assert result.ids == ["n1"]
    with MemlaneVectorStore(embed_model=WordEmbedding()) as s:
        index = VectorStoreIndex.from_vector_store(s, embed_model=WordEmbedding())
        index.insert_nodes([node(i, t, d, **m) for i, t, d, m in NODES])
        retrieved = index.as_retriever(similarity_top_k=2).retrieve("blue-green rollout script")
        assert retrieved[0].node.node_id == "n3"
        assert retrieved[0].node.get_content() == NODES[2][1]
