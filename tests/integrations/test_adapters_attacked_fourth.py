"""What a fourth attack on the adapters found: a LangGraph batch mixing a put with
something to index and one with nothing, and the LangChain and LlamaIndex stores ranking
documents whose cosine is at or below 0 (relevance 0 all) by id, not by cosine. Each
test fails on the code before its fix."""

from __future__ import annotations

import asyncio

import numpy as np
from langchain_core.embeddings import Embeddings
from langgraph.store.base import PutOp
from langgraph.store.memory import InMemoryStore
from llama_index.core.schema import TextNode
from llama_index.core.vector_stores.types import VectorStoreQuery

from memlane import Memory
from memlane.integrations.langchain import MemlaneVectorStore, langchain_embedder
from memlane.integrations.langgraph import MemlaneStore
from memlane.integrations.llamaindex import MemlaneVectorStore as LlamaStore

from .adapter_fakes import WordEmbeddings


def test_a_langgraph_batch_may_mix_puts_with_and_without_text_to_index() -> None:
    emb = WordEmbeddings()
    index = {"dims": emb.size, "embed": emb, "fields": ["text"]}
    ops = [
        PutOp(("docs",), "a", {"text": "indexed"}),
        PutOp(("docs",), "b", {"text": "not indexed"}, index=False),
        PutOp(("docs",), "c", {"other": 1}),  # nothing at the indexed field
    ]
    ours, theirs = MemlaneStore(index=index), InMemoryStore(index=index)
    theirs.batch(ops)
    ours.batch(ops)
    asyncio.run(ours.abatch(ops))
    for store in (ours, theirs):
        assert sorted(i.key for i in store.search(("docs",))) == ["a", "b", "c"]
        hits = store.search(("docs",), query="indexed")
        assert hits[0].key == "a" and [h.score for h in hits[1:]] == [None, None]


class Angles(Embeddings):
    """2-d unit vectors: a text ending in a number is its cosine to any other text."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.embed_query(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        try:
            c = float(text.split()[-1])
        except ValueError:  # the query, or the adapter's probe of the dimension
            c = 1.0
        return [c, float(np.sqrt(1.0 - c * c))]


TEXTS = ["far -0.995", "mid -0.5", "near -0.1"]  # stored in this order: ids rise


def test_langchain_ranks_documents_below_every_cosine_above_0_by_their_cosine() -> None:
    store = MemlaneVectorStore(Angles())
    store.add_texts(TEXTS)
    got = [d.page_content for d in store.similarity_search("q", k=3)]
    assert got == ["near -0.1", "mid -0.5", "far -0.995"]
    mmr = store.max_marginal_relevance_search("q", k=1, fetch_k=1)
    assert [d.page_content for d in mmr] == ["near -0.1"]


def test_llamaindex_ranks_nodes_below_every_cosine_above_0_by_their_cosine() -> None:
    store = LlamaStore(memory=Memory(embedder=langchain_embedder(Angles())))
    store.add([TextNode(text=t, embedding=Angles().embed_query(t)) for t in TEXTS])
    found = store.query(VectorStoreQuery(query_embedding=[1.0, 0.0], similarity_top_k=2))
    assert [n.get_content() for n in found.nodes or []] == ["near -0.1", "mid -0.5"]
