"""What a third attack on the adapters, the compat layers and ``AsyncMemory`` found: a
LangGraph store reading a narrower scope's items, a semantic search whose filter could
not be pushed down, a ``"$"`` value key, LlamaIndex's NOT and IS_EMPTY, an embeddings
model answering too few vectors, float labels in hnswlib's filter, and ``AsyncMemory``
given both an open memory and options. Each test fails on the code before its fix."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from langchain_core.embeddings import Embeddings
from langgraph.store.memory import InMemoryStore
from llama_index.core.schema import TextNode
from llama_index.core.vector_stores import SimpleVectorStore
from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
)

import memlane.compat.hnswlib as hnswlib
from memlane import AsyncMemory, Memory
from memlane.errors import EmbedderUnavailableError, InvalidArgumentError
from memlane.integrations.langchain import MemlaneVectorStore
from memlane.integrations.langgraph import MemlaneStore
from memlane.integrations.llamaindex import MemlaneVectorStore as LlamaStore

from .adapter_fakes import WordEmbeddings


def items(store: Any, *prefix: str, **kw: Any) -> list[tuple[tuple[str, ...], str, Any]]:
    return sorted((i.namespace, i.key, i.value) for i in store.search(prefix, **kw))


@pytest.mark.parametrize("wide", [{"user_id": "u1"}, {}])
def test_a_langgraph_store_reads_its_own_scope_alone(wide: dict[str, str]) -> None:
    mem = Memory(embedder=None)
    a = MemlaneStore(mem, scope=wide)
    b = MemlaneStore(mem, scope={"user_id": "u1", "agent_id": "bot"})
    b.put(("prefs",), "theme", {"v": "dark"})
    assert items(a, "prefs") == [] and a.list_namespaces() == []
    assert a.get(("prefs",), "theme") is None
    a.put(("prefs",), "theme", {"v": "light"})
    assert items(a, "prefs") == [(("prefs",), "theme", {"v": "light"})]
    assert items(b, "prefs") == [(("prefs",), "theme", {"v": "dark"})]
    a.delete(("prefs",), "theme")
    assert items(a, "prefs") == [] and a.get(("prefs",), "theme") is None
    assert b.get(("prefs",), "theme") is not None
    mem.close()


def test_a_semantic_search_whose_filter_stays_in_python() -> None:
    emb = WordEmbeddings()
    ours = MemlaneStore(index={"dims": emb.size, "embed": emb})
    theirs = InMemoryStore(index={"dims": emb.size, "embed": emb})
    for store in (ours, theirs):
        for n in range(10):
            store.put(("docs",), f"k{n}", {"text": f"note number {n}", "n": n})
    for flt in ({"n": {"$ne": 2}}, {"n": [1]}, {"n": None}):
        got = [i.key for i in ours.search((), query="note", filter=flt, limit=1)]
        want = [i.key for i in theirs.search((), query="note", filter=flt, limit=1)]
        assert len(got) == len(want)
    ours.close()


def test_a_filter_key_starting_with_a_dollar_is_the_values_key() -> None:
    for store in (InMemoryStore(), MemlaneStore()):
        store.put(("docs",), "schema", {"$id": "user.json", "title": "User"})
        store.put(("docs",), "other", {"$id": "order.json", "title": "Order"})
        assert [i.key for i in store.search(("docs",), filter={"$id": "user.json"})] == ["schema"]
        # Below the top, a "$" key is an operator, as in LangGraph's stores.
        found = store.search(("docs",), filter={"title": {"$ne": "User"}})
        assert [i.key for i in found] == ["other"]


class _Fixed:
    name, dimension = "fixed3", 3

    def embed(self, text: str) -> np.ndarray:
        return np.array([1, 0, 0], np.float32)

    def embed_batch(self, texts: list[str]) -> np.ndarray:
        return np.array([[1, 0, 0]] * len(texts), np.float32)


def test_llamaindex_not_and_is_empty_as_llamaindex_reads_them() -> None:
    meta = {"n1": {"user": "alice", "n": 1}, "n2": {"user": "bob", "n": 2}, "n3": {"user": ""}}
    nodes = [
        TextNode(id_=i, text=f"text {i}", metadata=dict(m), embedding=[1.0, 0.1 * k, 0.0])
        for k, (i, m) in enumerate(meta.items())
    ]
    simple = SimpleVectorStore()
    simple.add(nodes)
    ours = LlamaStore(Memory(embedder=_Fixed()))
    ours.add(nodes)
    f = MetadataFilter
    cases = [
        MetadataFilters(
            filters=[f(key="user", value="alice"), f(key="n", value=2)],
            condition=FilterCondition.NOT,
        ),
        MetadataFilters(filters=[f(key="user", value=None, operator=FilterOperator.IS_EMPTY)]),
    ]
    for flt in cases:
        query = VectorStoreQuery(query_embedding=[1.0, 0.0, 0.0], similarity_top_k=10, filters=flt)
        assert sorted(ours.query(query).ids or []) == sorted(simple.query(query).ids or [])
    assert sorted(
        ours.query(
            VectorStoreQuery(query_embedding=[1.0, 0.0, 0.0], similarity_top_k=10, filters=cases[0])
        ).ids
        or []
    ) == ["n3"]


class _DropsOne(Embeddings):
    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [[1.0, 0.0, 0.0, float(i)] for i, _ in enumerate(texts)][:-1]

    def embed_query(self, text: str) -> list[float]:
        return [1.0, 0.0, 0.0, 0.0]


def test_embeddings_answering_too_few_vectors_store_nothing() -> None:
    emb = _DropsOne()
    mem = Memory(embedder=None)
    store = MemlaneVectorStore(emb, memory=mem)
    with pytest.raises(EmbedderUnavailableError, match="returned 1 vectors for 2 texts"):
        store.add_texts(["a", "b"])
    assert mem.count(None) == 0
    mem.close()
    graph = MemlaneStore(index={"dims": 4, "embed": emb, "fields": ["t"]})
    with pytest.raises(EmbedderUnavailableError, match="returned 0 vectors for 1 texts"):
        graph.put(("n",), "k", {"t": "a"})
    assert graph.get(("n",), "k") is None


@pytest.mark.parametrize("allowed", [[1.5], {1.5}, (2.9,), ["a"], [True]])
def test_hnswlib_filter_refuses_labels_that_are_not_integers(allowed: Any) -> None:
    index = hnswlib.Index("l2", 4)
    index.init_index(10)
    index.add_items(np.eye(4, dtype=np.float32), [0, 1, 2, 3])
    with pytest.raises(TypeError, match="allowed labels must be integers"):
        index.knn_query(np.eye(4, dtype=np.float32)[0], k=1, filter=allowed)
    labels, _ = index.knn_query(np.eye(4, dtype=np.float32)[0], k=1, filter=[np.int64(1)])
    assert labels.tolist() == [[1]]


def test_async_memory_refuses_options_beside_an_open_memory(tmp_path: Any) -> None:
    mem = Memory(tmp_path / "store", embedder=None)
    with pytest.raises(InvalidArgumentError, match="not both"):
        AsyncMemory(tmp_path / "other", memory=mem)
    with pytest.raises(InvalidArgumentError, match="not both"):
        AsyncMemory(memory=mem, track_access=False)
    assert AsyncMemory(memory=mem).sync is mem
    mem.close()
