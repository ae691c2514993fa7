"""memlane's LangChain adapter beyond the standard suites: filters, scores, MMR, the hybrid
retriever, scopes as partitions, errors, a durable store."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from langchain_core.documents import Document

import memlane
from memlane.embeddings.lazy import LazyEmbedder
from memlane.integrations.langchain import (
    MemlaneEmbeddings,
    MemlaneRetriever,
    MemlaneVectorStore,
    langchain_embedder,
    metadata_filter,
)

from .adapter_fakes import WordEmbeddings

TEXTS = [
    "Alice prefers dark mode in every editor",
    "Bob prefers light mode",
    "The deploy script uses a blue-green rollout",
    "Dark chocolate is Alice's favourite dessert",
    "Meeting moved to Friday",
]
METAS = [
    {"user": "alice", "n": 1, "type": "pref"},
    {"user": "bob", "n": 2, "type": "pref"},
    {"user": "ops", "n": 3, "type": "howto", "tags": ["deploy", "ci"]},
    {"user": "alice", "n": 4, "type": "food"},
    {"user": "bob", "n": 5},
]


@pytest.fixture
def store() -> Iterator[MemlaneVectorStore]:
    s = MemlaneVectorStore.from_texts(
        TEXTS, WordEmbeddings(), METAS, ids=[f"d{i}" for i in range(len(TEXTS))]
    )
    yield s
    s.close()


def ids(docs: list[Document]) -> list[str | None]:
    return [d.id for d in docs]


def test_scores_are_cosines_best_first(store: MemlaneVectorStore) -> None:
    pairs = store.similarity_search_with_score("Alice prefers dark mode in every editor", k=5)
    assert pairs[0][0].id == "d0" and pairs[0][1] == pytest.approx(1.0, abs=1e-3)
    scores = [s for _, s in pairs]
    assert scores == sorted(scores, reverse=True)
    assert all(0.0 <= s <= 1.0 for s in scores)
    relevance = store.similarity_search_with_relevance_scores("dark mode", k=2)
    assert [round(s, 6) for _, s in relevance] == [
        round(s, 6) for _, s in store.similarity_search_with_score("dark mode", k=2)
    ]
    vector = WordEmbeddings().embed_query("Bob prefers light mode")
    assert ids(store.similarity_search_by_vector(vector, k=1)) == ["d1"]


def test_metadata_filters(store: MemlaneVectorStore) -> None:
    def found(flt: dict[str, object]) -> set[str | None]:
        return set(ids(store.similarity_search("mode", k=10, filter=flt)))

    assert found({"user": "alice"}) == {"d0", "d3"}
    assert found({"n": {"$gte": 3}}) == {"d2", "d3", "d4"}
    assert found({"$or": [{"user": "bob"}, {"n": 1}]}) == {"d0", "d1", "d4"}
    assert found({"tags": {"$in": ["ci"]}}) == {"d2"}
    # "type" is a metadata key here, not memlane's record field.
    assert found({"type": "pref"}) == {"d0", "d1"}
    assert found({"type": {"$exists": False}}) == {"d4"}
    assert found({"$not": {"user": "alice"}}) == {"d1", "d2", "d4"}
    assert metadata_filter({"a": 1, "$and": [{"id": "x"}]}) == {
        "metadata.a": 1,
        "$and": [{"metadata.id": "x"}],
    }
    with pytest.raises(ValueError, match="operator"):
        store.similarity_search("mode", filter={"n": {"$regex": "x"}})
    with pytest.raises(ValueError, match="callable"):
        store.similarity_search("mode", filter=lambda d: True)  # type: ignore[arg-type]


def test_mmr_prefers_diverse_documents() -> None:
    emb = WordEmbeddings()
    texts = ["dark mode theme", "dark mode theme editor", "dark mode theme settings", "green tea"]
    with MemlaneVectorStore.from_texts(texts, emb, ids=["a", "b", "c", "d"]) as s:
        plain = ids(s.similarity_search("dark mode theme", k=2))
        diverse = ids(s.max_marginal_relevance_search("dark mode theme", k=2, lambda_mult=0.1))
        assert plain[0] == diverse[0] == "a"
        assert plain[1] in ("b", "c") and diverse[1] == "d"
        assert ids(s.max_marginal_relevance_search("dark", k=2, filter={"x": 1})) == []


def test_upsert_delete_and_get_by_ids(store: MemlaneVectorStore) -> None:
    store.add_texts(["Bob switched to dark mode"], [{"user": "bob"}], ids=["d1"])
    got = store.get_by_ids(["d1", "nope", "d0"])
    assert [(d.id, d.page_content) for d in got] == [
        ("d1", "Bob switched to dark mode"),
        ("d0", TEXTS[0]),
    ]
    assert len(store.memory) == len(TEXTS)
    # The last of several items with one id wins.
    store.add_texts(["first", "second"], ids=["dup", "dup"])
    assert [d.page_content for d in store.get_by_ids(["dup"])] == ["second"]
    store.delete(["d0", "missing"])
    assert store.get_by_ids(["d0"]) == []
    store.delete()
    assert len(store.memory) == 0
    with pytest.raises(ValueError, match="metadatas"):
        store.add_texts(["a", "b"], [{}])


def test_async_methods(store: MemlaneVectorStore) -> None:
    async def run() -> tuple[list[str | None], list[str | None], list[str | None]]:
        await store.aadd_texts(["Carol likes dark roast coffee"], [{"user": "carol"}], ids=["c"])
        hits = await store.asimilarity_search("dark roast coffee", k=1)
        mmr = await store.amax_marginal_relevance_search("dark", k=2)
        await store.adelete(["c"])
        gone = await store.aget_by_ids(["c"])
        return ids(hits), ids(mmr), ids(gone)

    hits, mmr, gone = asyncio.run(run())
    assert hits == ["c"] and len(mmr) == 2 and gone == []


def test_a_hybrid_retriever_with_an_embedding_searches_a_text_only_store_by_words() -> None:
    """The retriever embeds its query for every hybrid search; a store without vectors
    searches the words (the vector is checked, and not used)."""
    with memlane.Memory(embedder=None) as text_only:
        text_only.add("alice likes dark mode")
        retriever = MemlaneRetriever(memory=text_only, embedding=WordEmbeddings())
        assert [d.page_content for d in retriever.invoke("dark mode")] == ["alice likes dark mode"]


def test_hybrid_retriever_ranks_by_words_and_meaning() -> None:
    with memlane.Memory(embedder=None) as text_only:
        text_only.add("The blue-green rollout script lives in ops/deploy.sh", agent_id="a")
        text_only.add("Lunch is at noon", agent_id="a")
        retriever = MemlaneRetriever(memory=text_only, scope={"agent_id": "a"}, mode="text")
        assert [d.page_content for d in retriever.invoke("rollout script", k=1)] == [
            "The blue-green rollout script lives in ops/deploy.sh"
        ]
    emb = WordEmbeddings()
    with MemlaneVectorStore.from_texts(TEXTS, emb, METAS, search_mode="hybrid") as s:
        retriever = s.as_hybrid_retriever(k=2, score_key="score")
        docs = retriever.invoke("blue-green rollout")
        assert docs[0].page_content == TEXTS[2]
        assert docs[0].metadata["score"] >= docs[1].metadata["score"] > 0
        assert "score" not in s.get_by_ids([docs[0].id or ""])[0].metadata
        only_bob = retriever.invoke("mode", filter={"user": "bob"})
        assert {d.metadata["user"] for d in only_bob} == {"bob"}


def test_scopes_are_partitions(tmp_path: Path) -> None:
    emb = WordEmbeddings()
    with memlane.Memory(tmp_path / "s", embedder=MemlaneVectorStore(emb).memory.embedder) as mem:
        alice = MemlaneVectorStore(emb, memory=mem, scope={"user_id": "alice"})
        bob = MemlaneVectorStore(emb, memory=mem, scope={"user_id": "bob", "agent_id": "x"})
        alice.add_texts(["alice likes dark mode"], ids=["a1"])
        bob.add_texts(["bob likes dark mode", "bob's secret"], ids=["b1", "b2"])
        assert ids(alice.similarity_search("dark mode", k=10)) == ["a1"]
        assert ids(alice.max_marginal_relevance_search("secret", k=10)) == ["a1"]
        assert alice.get_by_ids(["b1", "b2", "a1"])[0].id == "a1"
        assert len(alice.get_by_ids(["b1", "b2"])) == 0
        alice.delete(["b1", "b2"])  # not hers: nothing happens
        alice.delete()  # every one of hers
        assert sorted(r.id for r in mem.list()) == ["b1", "b2"]
        hybrid = MemlaneRetriever(memory=mem, scope={"user_id": "alice"}, embedding=emb)
        assert hybrid.invoke("bob secret dark mode") == []
        # An id another scope holds is hers too (her record gets a fresh id), never
        # overwritten.
        assert alice.add_texts(["mine now"], ids=["b1"]) == ["b1"]
        assert [d.page_content for d in alice.get_by_ids(["b1"])] == ["mine now"]
        assert bob.get_by_ids(["b1"])[0].page_content == "bob likes dark mode"
    with pytest.raises(ValueError, match="scope key"):
        MemlaneVectorStore(emb, scope={"tenant": "x"})


def test_default_embedder_and_durable_store(tmp_path: Path) -> None:
    embeddings = MemlaneEmbeddings()
    # memlane's default embedder, as a store gets it: the model loads at the first embed.
    assert isinstance(embeddings.embedder, LazyEmbedder) and not embeddings.embedder.loaded
    assert embeddings.dimension == 384 and not embeddings.embedder.loaded
    vectors = embeddings.embed_documents(["dark mode", "light mode"])
    assert len(vectors) == 2 and len(vectors[0]) == 384
    assert embeddings.embed_documents([]) == []
    path = tmp_path / "store"
    with MemlaneVectorStore(path=path) as s:  # memlane's own embedder, on disk
        assert isinstance(s.embeddings, MemlaneEmbeddings)
        s.add_texts(["The user prefers dark mode", "Deploys happen on Fridays"], ids=["1", "2"])
    with MemlaneVectorStore(path=path, search_mode="hybrid") as again:
        assert ids(again.similarity_search("which theme does the user like?", k=1)) == ["1"]


class AsyncOnlyEmbeddings(WordEmbeddings):
    """Embeddings whose client is async: the sync methods must not be called."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        raise AssertionError("the sync API was called")

    def embed_query(self, text: str) -> list[float]:
        raise AssertionError("the sync API was called")

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._one(t) for t in texts]

    async def aembed_query(self, text: str) -> list[float]:
        return self._one(text)


def test_async_paths_use_the_async_embeddings_api() -> None:
    with memlane.Memory(embedder=langchain_embedder(WordEmbeddings())) as mem:
        store = MemlaneVectorStore(AsyncOnlyEmbeddings(), memory=mem)

        async def run() -> list[tuple[Document, float]]:
            await store.aadd_documents([Document("green tea"), Document("black coffee")])
            return await store.asimilarity_search_with_score("green tea", k=1)

        [(doc, score)] = asyncio.run(run())
        assert doc.page_content == "green tea" and score == pytest.approx(1.0, abs=1e-3)
        with pytest.raises(AssertionError, match="sync API"):
            store.similarity_search("green tea")
