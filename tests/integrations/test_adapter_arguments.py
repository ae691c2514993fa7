"""The LangChain and LlamaIndex adapters refuse arguments they cannot use with memlane's
``InvalidArgumentError``, naming the argument, before anything is read, embedded or
written: a str given as ids (never read as one id per character), wrong-typed texts,
metadatas, nodes and counts, and scope keywords outside the adapter's scope. On both
backends."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from llama_index.core.schema import TextNode
from llama_index.core.vector_stores.types import (
    VectorStoreQuery,
    VectorStoreQueryMode,
)

import memlane
from memlane.errors import InvalidArgumentError
from memlane.integrations.langchain import (
    MemlaneRetriever,
    MemlaneVectorStore,
    langchain_embedder,
)
from memlane.integrations.llamaindex import MemlaneVectorStore as LlamaStore

from .adapter_fakes import WordEmbeddings

DOCS = {"a": "alice likes dark mode", "b": "alice likes tea", "ab": "alice likes both"}


@pytest.fixture
def emb() -> WordEmbeddings:
    return WordEmbeddings()


@pytest.fixture
def mem(make_store: Any, emb: WordEmbeddings) -> Iterator[memlane.Memory]:
    """A store on each backend holding another scope's documents, which no call of an
    adapter bound to alice may reach."""
    with make_store("adapter-args", langchain_embedder(emb)) as m:
        m.add_many(
            [
                {"text": "bob likes dark mode", "user_id": "bob", "table": t}
                for t in ("memories", "llamaindex")
            ]
        )
        yield m


@pytest.fixture
def lc(mem: memlane.Memory, emb: WordEmbeddings) -> MemlaneVectorStore:
    store = MemlaneVectorStore(emb, memory=mem, scope={"user_id": "alice"})
    store.add_texts(list(DOCS.values()), ids=list(DOCS))
    return store


@pytest.fixture
def li(mem: memlane.Memory, emb: WordEmbeddings) -> LlamaStore:
    store = LlamaStore(mem, scope={"user_id": "alice"})
    store.add([TextNode(text=t, id_=i, embedding=emb.embed_query(t)) for i, t in DOCS.items()])
    return store


def ids_of(mem: memlane.Memory) -> list[str]:
    return sorted(r.id for r in mem.list(limit=100))


# -- LangChain ------------------------------------------------------------------------------


def test_langchain_ids_must_be_a_list_of_str(lc: MemlaneVectorStore) -> None:
    before = ids_of(lc.memory)
    for bad in ("ab", b"ab", None, 5, [1], ["a", None]):
        if bad is not None:
            with pytest.raises(InvalidArgumentError, match="ids"):
                lc.delete(ids=bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError, match="ids"):
            lc.get_by_ids(bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="ids"):
        lc.add_texts(["one", "two"], ids="ab")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match=r"ids\[0\]"):
        lc.add_texts(["one"], ids=[7])  # type: ignore[list-item]
    with pytest.raises(InvalidArgumentError, match="ids"):
        MemlaneVectorStore.from_texts(["one", "two"], WordEmbeddings(), ids="ab")  # type: ignore[arg-type]
    assert ids_of(lc.memory) == before
    # Lists and tuples of str work as before; a None id gets a new one.
    assert [d.id for d in lc.get_by_ids(("ab", "a"))] == ["ab", "a"]
    assert len(lc.add_texts(["new one"], ids=[None])) == 1  # type: ignore[list-item]
    lc.delete(ids=("ab",))
    assert sorted(d.id or "" for d in lc.get_by_ids(["a", "b", "ab"])) == ["a", "b"]


def test_langchain_adds_check_before_embedding(lc: MemlaneVectorStore) -> None:
    emb = lc.embeddings
    assert isinstance(emb, WordEmbeddings)
    before, calls = ids_of(lc.memory), emb.calls
    cases: list[tuple[dict[str, Any], str]] = [
        ({"texts": ["x"], "metadatas": [None]}, r"metadatas\[0\]"),
        ({"texts": ["x"], "metadatas": {"k": 1}}, "metadatas"),
        ({"texts": ["x"], "metadatas": [{"k": object()}]}, r"metadatas\[0\]"),
        ({"texts": ["x", "y"], "metadatas": [{}]}, "metadatas"),
        ({"texts": ["fine", 5]}, r"texts\[1\]"),
        ({"texts": ["fine", "  "]}, r"texts\[1\]"),
        ({"texts": ["nul\x00"]}, r"texts\[0\]"),
        ({"texts": "abc"}, "texts"),
        ({"texts": None}, "texts"),
        ({"texts": ["x", "y"], "ids": ["only one"]}, "ids"),
    ]
    for kwargs, match in cases:
        with pytest.raises(InvalidArgumentError, match=match):
            lc.add_texts(**kwargs)
        with pytest.raises(InvalidArgumentError, match=match):
            asyncio.run(lc.aadd_texts(**kwargs))
    assert emb.calls == calls  # nothing was embedded
    assert ids_of(lc.memory) == before  # nor stored


def test_langchain_scope_keywords_never_widen(lc: MemlaneVectorStore, emb: WordEmbeddings) -> None:
    alice = sorted(d.id or "" for d in lc.similarity_search("dark mode", k=10))
    assert alice == ["a", "ab", "b"]
    # The bound value is accepted; another is refused, naming the field.
    same = lc.similarity_search("dark mode", k=10, user_id="alice")
    assert sorted(d.id or "" for d in same) == alice
    with pytest.raises(InvalidArgumentError, match="user_id"):
        lc.similarity_search("dark mode", k=10, user_id="bob")
    with pytest.raises(InvalidArgumentError, match="user_id"):
        lc.similarity_search_with_score("dark mode", user_id=None)
    with pytest.raises(InvalidArgumentError, match="user_id"):
        lc.max_marginal_relevance_search("dark mode", user_id="bob")
    with pytest.raises(InvalidArgumentError, match="user_id"):
        asyncio.run(lc.asimilarity_search("dark mode", user_id="bob"))
    with pytest.raises(InvalidArgumentError, match="table"):
        lc.similarity_search("dark mode", table="other")
    with pytest.raises(InvalidArgumentError, match="mode"):
        lc.similarity_search("dark mode", mode="text")
    # A scope field the store is not bound to narrows the search.
    assert lc.similarity_search("dark mode", agent_id="nobody") == []

    retriever = lc.as_hybrid_retriever(k=10)
    assert sorted(d.id or "" for d in retriever.invoke("dark mode", user_id="alice")) == alice
    with pytest.raises(InvalidArgumentError, match="user_id"):
        retriever.invoke("dark mode", user_id="bob")
    loose = MemlaneRetriever(
        memory=lc.memory, scope={"user_id": "alice"}, search_kwargs={"user_id": "bob"}
    )
    with pytest.raises(InvalidArgumentError, match="user_id"):
        loose.invoke("dark mode")


def test_langchain_mmr_checks_its_numbers(lc: MemlaneVectorStore) -> None:
    for kwargs, match in [
        ({"k": "2"}, "k"),
        ({"k": 0}, "k"),
        ({"fetch_k": None}, "fetch_k"),
        ({"lambda_mult": "a"}, "lambda_mult"),
        ({"lambda_mult": 2.0}, "lambda_mult"),
    ]:
        with pytest.raises(InvalidArgumentError, match=match):
            lc.max_marginal_relevance_search("dark mode", **kwargs)
    assert len(lc.max_marginal_relevance_search("dark mode", k=2, lambda_mult=0.2)) == 2


# -- LlamaIndex -----------------------------------------------------------------------------


def test_llamaindex_node_ids_must_be_a_list_of_str(li: LlamaStore) -> None:
    before = ids_of(li.client)
    for bad in ("xy", "ab", b"ab", 5, [1]):
        with pytest.raises(InvalidArgumentError, match="node_ids"):
            li.delete_nodes(bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError, match="node_ids"):
            li.get_nodes(bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError, match="node_ids"):
            li.query(VectorStoreQuery(query_str="alice", node_ids=bad))  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="doc_ids"):
        li.query(VectorStoreQuery(query_str="alice", doc_ids="ab"))  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="ref_doc_id"):
        li.delete(["a", "b"])  # type: ignore[arg-type]
    assert ids_of(li.client) == before
    assert [n.node_id for n in li.get_nodes(("ab", "a"))] == ["ab", "a"]
    li.delete_nodes(["ab"])
    assert sorted(n.node_id for n in li.get_nodes(["a", "b", "ab"])) == ["a", "b"]


def test_llamaindex_refuses_what_is_no_node(li: LlamaStore, emb: WordEmbeddings) -> None:
    before = ids_of(li.client)
    good = TextNode(text="alice likes coffee", id_="c", embedding=emb.embed_query("coffee"))
    for bad, match in [
        (["text"], r"nodes\[0\]"),
        ([good, "text"], r"nodes\[1\]"),
        ([good, {"text": "x"}], r"nodes\[1\]"),
        ("text", "nodes"),
        (good, "nodes must be a list"),
        (None, "nodes"),
    ]:
        with pytest.raises(InvalidArgumentError, match=match):
            li.add(bad)  # type: ignore[arg-type]
    assert ids_of(li.client) == before  # the good node was not stored either


def test_llamaindex_query_fields(li: LlamaStore) -> None:
    text = VectorStoreQueryMode.TEXT_SEARCH
    # None is LlamaIndex's default for the field: one hit.
    one = li.query(VectorStoreQuery(query_str="alice likes", similarity_top_k=None))  # type: ignore[arg-type]
    assert one.ids is not None and len(one.ids) == 1
    assert li.query(VectorStoreQuery(query_str="alice", similarity_top_k=0)).ids == []
    for query, match in [
        (VectorStoreQuery(query_str="alice", similarity_top_k="2"), "similarity_top_k"),  # type: ignore[arg-type]
        (VectorStoreQuery(query_str="alice", similarity_top_k=True), "similarity_top_k"),
        (
            VectorStoreQuery(query_str="alice", mode=VectorStoreQueryMode.HYBRID, hybrid_top_k="3"),  # type: ignore[arg-type]
            "hybrid_top_k",
        ),
        (VectorStoreQuery(query_str="alice", mode=text, sparse_top_k=[1]), "sparse_top_k"),  # type: ignore[arg-type]
        (VectorStoreQuery(query_str="alice", mode="bogus"), "bogus"),  # type: ignore[arg-type]
        (VectorStoreQuery(query_str="alice", filters={"user": "x"}), "filters"),  # type: ignore[arg-type]
        (
            VectorStoreQuery(query_str="alice", mode=VectorStoreQueryMode.MMR, mmr_threshold="x"),  # type: ignore[arg-type]
            "mmr_threshold",
        ),
    ]:
        with pytest.raises(InvalidArgumentError, match=match):
            li.query(query)
    with pytest.raises(InvalidArgumentError, match="filters"):
        li.get_nodes(filters={"user": "x"})  # type: ignore[arg-type]


def test_llamaindex_scope_keywords_never_widen(li: LlamaStore) -> None:
    q = VectorStoreQuery(
        query_str="likes dark mode", mode=VectorStoreQueryMode.TEXT_SEARCH, similarity_top_k=10
    )
    alice = sorted(li.query(q).ids or [])
    assert alice == ["a", "ab", "b"]
    assert sorted(li.query(q, user_id="alice").ids or []) == alice
    for kwargs in ({"user_id": "bob"}, {"user_id": None}, {"table": "memories"}):
        with pytest.raises(InvalidArgumentError, match=next(iter(kwargs))):
            li.query(q, **kwargs)
    with pytest.raises(InvalidArgumentError, match="query_embedding"):
        li.query(q, query_embedding=[1.0])
    assert li.query(q, agent_id="nobody").ids == []  # narrows
    loose = LlamaStore(li.client, scope={"user_id": "alice"}, search_kwargs={"user_id": "bob"})
    with pytest.raises(InvalidArgumentError, match="user_id"):
        loose.query(q)
