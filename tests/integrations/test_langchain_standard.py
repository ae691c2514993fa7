"""LangChain's own standard suites (``langchain-tests``) on memlane's adapters."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.embeddings import Embeddings
from langchain_core.retrievers import BaseRetriever
from langchain_core.vectorstores import VectorStore
from langchain_tests.integration_tests import (
    EmbeddingsIntegrationTests,
    RetrieversIntegrationTests,
    VectorStoreIntegrationTests,
)
from langchain_tests.unit_tests import EmbeddingsUnitTests

import memlane
from memlane.integrations.langchain import (
    MemlaneEmbeddings,
    MemlaneRetriever,
    MemlaneVectorStore,
    langchain_embedder,
)


class TestMemlaneVectorStore(VectorStoreIntegrationTests):
    @pytest.fixture
    def vectorstore(self) -> Iterator[VectorStore]:
        store = MemlaneVectorStore(embedding=self.get_embeddings())
        try:
            yield store
        finally:
            store.close()


class TestMemlaneVectorStoreOverMemory(VectorStoreIntegrationTests):
    """The same suite on a scoped store over a durable ``Memory`` that another scope shares,
    on both backends (a directory, and PostgreSQL)."""

    @pytest.fixture
    def vectorstore(self, make_store: Any) -> Iterator[VectorStore]:
        embeddings = self.get_embeddings()
        embedder = langchain_embedder(embeddings)
        with make_store("langchain", embedder) as mem:
            # Another scope's documents, which the store under test must never see.
            other = MemlaneVectorStore(embeddings, memory=mem, scope={"user_id": "bob"})
            other.add_texts(["foo", "bar", "baz"], ids=["b1", "b2", "b3"])
            yield MemlaneVectorStore(embeddings, memory=mem, scope={"user_id": "alice"})


class TestMemlaneEmbeddingsUnit(EmbeddingsUnitTests):
    @property
    def embeddings_class(self) -> type[Embeddings]:
        return MemlaneEmbeddings


class TestMemlaneEmbeddingsIntegration(EmbeddingsIntegrationTests):
    @property
    def embeddings_class(self) -> type[Embeddings]:
        return MemlaneEmbeddings


_DOCS = [
    "The deploy script uses a blue-green rollout",
    "Alice prefers dark mode in every editor",
    "Bob moved the weekly meeting to Friday",
    "Dark chocolate is Alice's favourite dessert",
    "The rollout of version two starts on Monday",
]


@pytest.fixture(scope="module")
def _shared_memory() -> Iterator[memlane.Memory]:
    with memlane.Memory() as mem:
        mem.add_many([{"text": t, "agent_id": "assistant"} for t in _DOCS])
        mem.add_many([{"text": t, "agent_id": "intruder"} for t in _DOCS])
        yield mem


class TestMemlaneRetriever(RetrieversIntegrationTests):
    memory: memlane.Memory | None = None

    @pytest.fixture(autouse=True)
    def _memory(self, _shared_memory: memlane.Memory) -> None:
        type(self).memory = _shared_memory

    @property
    def retriever_constructor(self) -> type[BaseRetriever]:
        return MemlaneRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"memory": self.memory, "scope": {"agent_id": "assistant"}}

    @property
    def retriever_query_example(self) -> str:
        return "dark mode rollout"
