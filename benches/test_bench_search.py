"""Hybrid search: the engine's fusion and scoring, and ``Memory.search`` with precomputed
vectors (pytest-benchmark; ``bench_memory.py`` and ``bench_user_latency.py`` are the full
runs).

Groups:

- ``fusion-scoring``: one ``Engine.search`` (BM25 + HNSW, 50 candidates each, top 10):
  weighted fusion with the default boost, weighted relevance only, RRF with the boost;
  against the peer pipeline a user would write without the engine (``BM25Index`` and
  ``HnswIndex`` searched apart, fused by RRF in numpy). The formulas are checked from
  ``explain=True``'s signals (docs/search.md, "How scores are computed"), untimed.
- ``memory-search`` and ``memory-search-scoped``: ``Memory.search(text,
  query_embedding=...)`` (fusion, scoring, record fetch, access tracking), unscoped and
  scoped to one agent of 100, against chromadb's ``query`` (with ``where``) when chromadb
  is installed (it is not in the dev extra).

    pytest benches/test_bench_search.py --benchmark-autosave
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import memlane
from _bench_data import Dataset, exact_top
from memlane import Memory
from memlane._core import (
    ADAPTIVE_HIGH,
    ADAPTIVE_LOW,
    DEFAULT_IMPORTANCE_WEIGHT,
    DEFAULT_RECENCY_WEIGHT,
    DEFAULT_RELEVANCE_WEIGHT,
    Engine,
    SearchRequest,
)
from memlane.schema import Row

K = 10
CANDIDATES = 50
RRF_K = 60.0
AGENTS = 100
NOW = 1.8e9
# explain=True's signals, as the columns of a matrix (NaN where absent).
EXPLAIN = (
    "bm25",
    "bm25_rank",
    "cosine",
    "vector_rank",
    "relevance",
    "importance",
    "recency",
    "age_hours",
    "boost",
    "score",
)
BM25, BM25_RANK, COSINE, VECTOR_RANK, RELEVANCE, IMPORTANCE, RECENCY, _, BOOST, SCORE = range(10)
MISSING = 2**64 - 1


def agent(i: int) -> str:
    return f"agent{i % AGENTS}"


# ---------------------------------------------------------------------------
# Fusion and scoring: the engine alone


@pytest.fixture(scope="module")
def engine(dataset: Dataset) -> Engine:
    n = len(dataset.base)
    rng = np.random.default_rng(3)
    created = NOW - rng.uniform(0, 365 * 86400, size=n)
    importance = rng.uniform(0, 1, size=n).tolist()
    rows = [
        Row(
            rowid=i, id=f"m{i}", text=dataset.texts[i], tbl="memories", type="semantic",
            agent_id=agent(i), user_id=None, room_id=None, world_id=None, session_id=None,
            namespace=None, speaker=None, importance=importance[i], evergreen=0, uniq=0,
            metadata="{}", created_at=t, updated_at=t, last_accessed_at=t, access_count=0,
            valid_to=None, expires_at=None, recorded_at=0.0, content_hash="", embedding=None,
            seq=0, content_seq=0,
        )
        for i, t in enumerate(created.tolist())
    ]  # fmt: skip
    e = Engine(dataset.base.shape[1], precision="f32")
    e.apply(e.prepare(rows, True, dataset.base))
    while e.index_pending(4096):
        pass
    return e


class Pipeline:
    """The peer: BM25Index and HnswIndex searched one after the other, RRF in numpy."""

    def __init__(self, dataset: Dataset) -> None:
        ids = np.arange(len(dataset.base), dtype=np.uint64)
        self.bm25 = memlane.BM25Index()
        self.bm25.add(ids, dataset.texts)
        self.hnsw = memlane.HnswIndex(dim=dataset.base.shape[1], ef_construction=100)
        self.hnsw.add(ids, dataset.base)

    def search(self, text: str, vector: np.ndarray) -> list[int]:
        lists = [self.bm25.search(text, k=CANDIDATES)[0]]
        labels = self.hnsw.search(vector, k=CANDIDATES)[0][0]
        lists.append(labels[labels != MISSING])
        scores: dict[int, float] = {}
        for ranked in lists:
            for rank, doc in enumerate(ranked.tolist(), start=1):
                scores[doc] = scores.get(doc, 0.0) + 1.0 / (RRF_K + rank)
        best = sorted(scores.items(), key=lambda item: (-item[1], item[0]))[:K]
        return [doc for doc, _ in best]


VARIANTS: dict[str, dict[str, Any]] = {
    "engine-weighted-boost": {},
    "engine-weighted-relevance-only": {"weights": {"relevance": 1.0}},
    "engine-rrf-boost": {"fusion": "rrf", "rrf_k": RRF_K},
}


def search(
    engine: Engine, request: SearchRequest, text: str, vector: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """ids, scores and the signals as a matrix (NaN where absent), or None."""
    ids, scores, signals, _ = engine.search(request, text, vector, now=NOW)
    matrix = None
    if signals is not None:
        matrix = np.array([[np.nan if s[c] is None else s[c] for c in EXPLAIN] for s in signals])
    return np.asarray(ids, dtype=np.uint64), np.asarray(scores), matrix


def queries(dataset: Dataset) -> Iterator[tuple[str, np.ndarray]]:
    return itertools.cycle(zip(dataset.query_texts, dataset.queries, strict=True))


def check_signals(kind: str, signals: np.ndarray, text_hits: bool) -> None:
    """The documented formulas, from the signals explain=True gives for each hit."""
    cos = np.clip(np.nan_to_num(signals[:, COSINE]), 0, 1)
    if kind == "rrf":
        # L counts the non-empty lists: the vector one, and the text one.
        lists = 1 + int(text_hits)
        ranks = signals[:, [BM25_RANK, VECTOR_RANK]]
        rrf = np.nansum(1.0 / (RRF_K + ranks), axis=1) * (RRF_K + 1) / lists
        np.testing.assert_allclose(signals[:, RELEVANCE], rrf, rtol=1e-9)
    else:
        bm25 = np.nan_to_num(signals[:, BM25])
        if text_hits:
            # alpha * max(cos, 0) + (1 - alpha) * bm25 / ceiling, one alpha (chosen per
            # query, in [ADAPTIVE_LOW, ADAPTIVE_HIGH]) and one ceiling per query: the
            # relevance is a linear function of the cosine and the BM25 score.
            terms = np.stack([cos, bm25], axis=1)
            (alpha, per_bm25), *_ = np.linalg.lstsq(terms, signals[:, RELEVANCE], rcond=None)
            np.testing.assert_allclose(terms @ [alpha, per_bm25], signals[:, RELEVANCE], atol=1e-9)
            assert ADAPTIVE_LOW - 1e-9 <= alpha <= ADAPTIVE_HIGH + 1e-9, alpha
            assert per_bm25 >= 0
        else:
            # No text hit at all: the cosine alone.
            np.testing.assert_allclose(signals[:, RELEVANCE], cos, rtol=1e-6)
    weights = np.array(
        [DEFAULT_RELEVANCE_WEIGHT, DEFAULT_IMPORTANCE_WEIGHT, DEFAULT_RECENCY_WEIGHT]
        if kind != "relevance-only"
        else [DEFAULT_RELEVANCE_WEIGHT, 0.0, 0.0]
    )
    boost = (
        weights[0] + weights[1] * signals[:, IMPORTANCE] + weights[2] * signals[:, RECENCY]
    ) / weights.sum()
    np.testing.assert_allclose(signals[:, BOOST], boost, rtol=1e-9)
    np.testing.assert_allclose(signals[:, SCORE], signals[:, RELEVANCE] * boost, rtol=1e-9)
    assert np.all(np.diff(signals[:, SCORE]) <= 1e-12)


@pytest.mark.parametrize("variant", [*VARIANTS, "indexes-numpy-rrf"])
def test_fusion_scoring(benchmark: Any, variant: str, engine: Engine, dataset: Dataset) -> None:
    benchmark.group = "fusion-scoring"
    benchmark.extra_info["data"] = dataset.label
    cycle = queries(dataset)
    if variant == "indexes-numpy-rrf":
        pipeline = Pipeline(dataset)
        benchmark(lambda: pipeline.search(*next(cycle)))
        # The same fusion as the engine's RRF: the same hits, up to the two graphs'
        # differences (generated clusters hold many near-equal cosines).
        overlap = []
        for text, vector in zip(dataset.query_texts, dataset.queries, strict=True):
            hits = pipeline.search(text, vector)
            rrf = SearchRequest(K, candidates=CANDIDATES, fusion="rrf")
            ids = search(engine, rrf, text, vector)[0]
            assert len(hits) == K
            overlap.append(len(set(hits) & set(ids.tolist())) / K)
        assert np.mean(overlap) >= 0.8, np.mean(overlap)
        return

    knobs = {"candidates": CANDIDATES, **VARIANTS[variant]}
    request = SearchRequest(K, **knobs)
    benchmark(lambda: engine.search(request, *next(cycle), now=NOW))
    kind = "rrf" if "rrf" in variant else "relevance-only" if "only" in variant else "weighted"
    for text, vector in zip(dataset.query_texts, dataset.queries, strict=True):
        ids, scores, signals = search(engine, SearchRequest(K, explain=True, **knobs), text, vector)
        assert len(ids) == K and signals is not None
        np.testing.assert_allclose(signals[:, SCORE], scores, rtol=1e-12)
        # The cosines are the exact ones (f32 engine).
        found = ~np.isnan(signals[:, COSINE])
        exact = dataset.base[ids[found].astype(np.int64)] @ vector
        np.testing.assert_allclose(signals[found, COSINE], exact, atol=1e-4)
        text_hits = len(search(engine, SearchRequest(1, mode="text"), text)[0]) > 0
        check_signals(kind, signals, text_hits)


# ---------------------------------------------------------------------------
# Memory.search with a precomputed query vector, against chromadb


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory, dataset: Dataset) -> Iterator[Memory]:
    mem = Memory(tmp_path_factory.mktemp("memlane") / "store")
    n = len(dataset.base)
    for start in range(0, n, 1000):
        mem.add_many(
            [
                {"text": dataset.texts[i], "agent_id": agent(i), "embedding": dataset.base[i]}
                for i in range(start, min(start + 1000, n))
            ]
        )
    mem.wait_indexed()
    yield mem
    mem.close()


@pytest.fixture(scope="module")
def chroma(tmp_path_factory: pytest.TempPathFactory, dataset: Dataset) -> Any:
    chromadb = pytest.importorskip("chromadb", reason="chromadb is not in the dev extra")
    from chromadb.config import Settings

    path = tmp_path_factory.mktemp("chroma")
    client = chromadb.PersistentClient(
        path=str(path), settings=Settings(anonymized_telemetry=False)
    )
    col = client.create_collection("memories", metadata={"hnsw:space": "cosine"})
    n = len(dataset.base)
    for start in range(0, n, 1000):
        rows = range(start, min(start + 1000, n))
        col.add(
            ids=[str(i) for i in rows],
            embeddings=dataset.base[start : rows.stop],
            documents=[dataset.texts[i] for i in rows],
            metadatas=[{"agent_id": agent(i)} for i in rows],
        )
    return col


def _scope(i: int, scoped: bool) -> str | None:
    return agent(i * 7) if scoped else None


@pytest.mark.parametrize("scoped", [False, True], ids=["unscoped", "scoped"])
def test_memory_search(benchmark: Any, scoped: bool, store: Memory, dataset: Dataset) -> None:
    benchmark.group = "memory-search-scoped" if scoped else "memory-search"
    benchmark.extra_info["data"] = dataset.label
    counter = itertools.count()

    def one() -> Any:
        i = next(counter) % len(dataset.queries)
        return store.search(
            dataset.query_texts[i],
            k=K,
            query_embedding=dataset.queries[i],
            agent_id=_scope(i, scoped),
        )

    benchmark(one)
    top, _ = exact_top(dataset.base, dataset.queries, 1)
    texts = set(dataset.texts)
    nearest = 0
    for i, (text, vector) in enumerate(zip(dataset.query_texts, dataset.queries, strict=True)):
        scope = _scope(i, scoped)
        hits = store.search(text, k=K, query_embedding=vector, agent_id=scope)
        assert len(hits) == K and all(h.record.text in texts for h in hits)
        assert all(a.score >= b.score for a, b in itertools.pairwise(hits))
        if scoped:
            assert all(h.record.agent_id == scope for h in hits)
        else:
            # The stored vectors are the given ones: the vector side finds the nearest.
            best = store.search(text, k=1, query_embedding=vector, mode="vector")
            nearest += best[0].record.text == dataset.texts[int(top[i, 0])]
    assert scoped or nearest >= 0.9 * len(dataset.queries)


@pytest.mark.parametrize("scoped", [False, True], ids=["unscoped", "scoped"])
def test_chroma_query(benchmark: Any, scoped: bool, chroma: Any, dataset: Dataset) -> None:
    benchmark.group = "memory-search-scoped" if scoped else "memory-search"
    benchmark.extra_info["data"] = dataset.label
    counter = itertools.count()

    def one() -> Any:
        i = next(counter) % len(dataset.queries)
        where = {"agent_id": _scope(i, scoped)} if scoped else None
        return chroma.query(query_embeddings=[dataset.queries[i]], n_results=K, where=where)

    result = benchmark(one)
    assert len(result["ids"][0]) == K
