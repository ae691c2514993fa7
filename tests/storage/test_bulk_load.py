"""Bulk loads (issue 17): what a search returns while vectors are parked, while they link
on all cores, and after a large store goes through a snapshot and a reopen.

Data: the WordNet gloss vectors of the default model, as the benchmarks use them
(``benches/_data.py`` caches them in ``benches/.cache/``; ``python benches/_data.py``
makes the cache). Where the cache or the glosses are missing (a fresh CI machine has
neither, and embedding 117k glosses takes minutes), seeded vectors clustered around 300
random centres stand in, with texts drawn from a small vocabulary, so the tests run
everywhere and on real embeddings wherever they exist.

Scores are compared with ``weights={"relevance": 1}`` in vector mode, so a hit's score
is its cosine similarity, which the reference computes with numpy from the vectors as
the store keeps them: unit length, in half floats (the default precision, int8+f16,
ranks on the f16 copy, and parked vectors are rounded the same way, see
``Engine::apply``).
"""

from __future__ import annotations

import json
import threading
import warnings
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from conftest import REPO, WordHashEmbedder
from memlane import Memory
from memlane._core import DEFAULT_ALPHA

F32 = npt.NDArray[np.float32]
# Where benches/_data.py keeps them.
GLOSSES = REPO.parent / "shared" / "data" / "wordnet" / "wordnet30_glosses.jsonl"
CACHE = REPO / "benches" / ".cache"
DIM = 384
K = 10
RELEVANCE_ONLY = {"relevance": 1.0}
# The same f16 vectors against the same f32 query: the order of the sums differs
# between the parked scan, the graph's kernels and numpy (under 5e-6), and the engine's
# normalising and numpy's may round a component to neighbouring half floats, each such
# step moving a cosine by some 6e-6 (measured: 1.2e-5 once in 200 queries).
COSINE_TOL = 5e-5


@cache
def corpus() -> tuple[list[str], F32]:
    """Texts and unit vectors (row ``i`` is text ``i``), real where the data is here."""
    if GLOSSES.is_file():
        with GLOSSES.open(encoding="utf-8") as f:
            texts = [json.loads(line)["text"] for line in f if line.strip()]
        # The default model's cache file (benches/_data.py names it by the texts' count).
        for path in sorted(CACHE.glob(f"wordnet-{len(texts)}-*-onnx_all-MiniLM-L6-v2*-{DIM}.npy")):
            vectors = np.load(path, mmap_mode="r")
            if vectors.shape == (len(texts), DIM):
                return texts, unit(np.asarray(vectors, dtype=np.float32))
    return synthetic(60_000)


def synthetic(n: int) -> tuple[list[str], F32]:
    rng = np.random.default_rng(17)
    centres = rng.standard_normal((300, DIM)).astype(np.float32)
    which = rng.integers(300, size=n)
    vectors = centres[which] + 0.6 * rng.standard_normal((n, DIM)).astype(np.float32)
    words = rng.integers(2000, size=(n, 8))
    texts = [
        " ".join(f"w{w}" for w in row) + f" topic{c}" for row, c in zip(words, which, strict=True)
    ]
    return texts, unit(vectors)


def unit(v: F32) -> F32:
    out: F32 = (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)
    return out


def perturbed(vectors: F32, seed: int, noise: float = 0.01) -> F32:
    """Each vector moved by seeded Gaussian noise and renormalised (a near neighbour)."""
    rng = np.random.default_rng(seed)
    return unit(vectors + rng.normal(0.0, noise, size=vectors.shape).astype(np.float32))


def as_stored(vectors: F32) -> F32:
    """The vectors as int8+f16 ranks them: unit length, rounded to half floats."""
    out: F32 = unit(vectors).astype(np.float16).astype(np.float32)
    return out


def exact_top(stored: F32, queries: F32, k: int) -> npt.NDArray[np.int64]:
    """Rows of the ``k`` exact nearest stored vectors of each query, best first."""
    sims = queries @ stored.T
    top = np.argpartition(-sims, k, axis=1)[:, :k]
    order = np.argsort(-np.take_along_axis(sims, top, axis=1), axis=1, kind="stable")
    out: npt.NDArray[np.int64] = np.take_along_axis(top, order, axis=1)
    return out


def vector_hits(m: Memory, queries: F32, **scope: Any) -> list[list[tuple[str, float]]]:
    """(id, score) of the top ``K`` of each query, by cosine alone."""
    out = []
    for q in queries:
        hits = m.search("", k=K, mode="vector", query_embedding=q, weights=RELEVANCE_ONLY, **scope)
        out.append([(h.record.id, h.score) for h in hits])
    return out


def recall(found: list[list[tuple[str, float]]], want: list[list[str]]) -> float:
    got = [len({i for i, _ in f} & set(w)) / len(w) for f, w in zip(found, want, strict=True)]
    return float(np.mean(got))


def check_scores(
    found: list[list[tuple[str, float]]], row_of: dict[str, int], stored: F32, queries: F32
) -> None:
    """Every hit's score is its exact cosine (its vector as stored), best first."""
    for hits, q in zip(found, queries, strict=True):
        assert len(hits) == K
        scores = [s for _, s in hits]
        assert scores == sorted(scores, reverse=True)
        for id, score in hits:
            assert score == pytest.approx(float(stored[row_of[id]] @ q), abs=COSINE_TOL)


def load(m: Memory, texts: list[str], vectors: F32, rows: npt.NDArray[np.int64]) -> list[str]:
    """One ``add_many`` of the given corpus rows; returns the ids in row order."""
    items = [
        {"text": texts[r], "embedding": vectors[i], "agent_id": f"agent{i % 100}"}
        for i, r in enumerate(rows)
    ]
    return [r.id for r in m.add_many(items)]


def store(path: Path) -> Memory:
    # Vectors are given, so the embedder is never called; only its dimension counts.
    # Accesses are not tracked, so a search changes nothing another search sees.
    return Memory(
        path,
        WordHashEmbedder(DIM, name="test:bulk"),
        dedup_window=0,
        track_access=False,
        snapshot_every=10**7,
    )


@pytest.fixture(scope="module")
def bulk() -> dict[str, Any]:
    return bulk_data()


def bulk_data() -> dict[str, Any]:
    """30,000 stored vectors (near copies of glosses), 50 queries (other glosses)."""
    texts, vectors = corpus()
    rng = np.random.default_rng(2024)
    rows = rng.permutation(len(texts))
    stored_rows, query_rows = rows[:30_000], rows[30_000:30_050]
    data = perturbed(vectors[stored_rows], seed=1)
    queries = perturbed(vectors[query_rows], seed=2)
    return {
        "texts": texts,
        "query_texts": [texts[r] for r in query_rows],
        "rows": stored_rows,
        "vectors": data,
        "stored": as_stored(data),
        "queries": queries,
        "exact": exact_top(as_stored(data), queries, K),
    }


def hybrid_hits(
    m: Memory, texts: list[str], queries: F32, **options: Any
) -> list[list[tuple[str, float]]]:
    """(id, score) of the top ``K`` of each query text and vector, fused (the defaults)."""
    out = []
    for text, q in zip(texts, queries, strict=True):
        hits = m.search(text, k=K, query_embedding=q, **options)
        out.append([(h.record.id, h.score) for h in hits])
    return out


def agreement(a: list[list[tuple[str, float]]], b: list[list[tuple[str, float]]]) -> float:
    """The share of hits both lists hold; each one held by both has the same score."""
    same = 0
    for x, y in zip(a, b, strict=True):
        other = dict(y)
        for id, score in x:
            if id in other:
                same += 1
                assert other[id] == pytest.approx(score, abs=COSINE_TOL), id
    return same / sum(len(x) for x in a)


def overlap(a: list[list[tuple[str, float]]], b: list[list[tuple[str, float]]]) -> float:
    """The share of hits both lists hold."""
    both = sum(len({i for i, _ in x} & {i for i, _ in y}) for x, y in zip(a, b, strict=True))
    return both / sum(len(x) for x in a)


def test_searches_during_a_bulk_load_equal_those_after_wait_indexed(
    tmp_path: Path, bulk: dict[str, Any]
) -> None:
    queries, query_texts = bulk["queries"], bulk["query_texts"]
    scoped = {"agent_id": "agent3"}  # 1% of the store

    def searches(m: Memory) -> list[list[list[tuple[str, float]]]]:
        return [
            vector_hits(m, queries),
            vector_hits(m, queries, **scoped),
            # At a fixed weight, a hit's score is its own signals'; the default weighs
            # each query by its candidates' spreads, which the sketches' and the graph's
            # candidates move by about 1e-4 (its hits are compared by id below).
            hybrid_hits(m, query_texts, queries, alpha=DEFAULT_ALPHA),
            hybrid_hits(m, query_texts, queries),
        ]

    with store(tmp_path / "s") as m:
        ids = load(m, bulk["texts"], bulk["vectors"], bulk["rows"])
        # Far more than the exact-scan limit are parked, so the scan reads sketches.
        assert m._engine.pending() > 20_000
        during = searches(m)
        # Still parked after the last search: every search above saw parked vectors
        # (the background pass may have linked a batch or two meanwhile).
        assert m._engine.pending() > 0
        m.wait_indexed()
        assert m._engine.pending() == 0
        after = searches(m)

    row_of = {id: i for i, id in enumerate(ids)}
    want = [[ids[r] for r in top] for top in bulk["exact"]]
    in_scope = np.flatnonzero(np.arange(len(ids)) % 100 == 3)
    scoped_top = exact_top(bulk["stored"][in_scope], queries, K)
    want_scoped = [[ids[in_scope[r]] for r in top] for top in scoped_top]
    # Both are the graph's or the sketches' choice of candidates, so the ids may
    # differ where the two approximations miss different neighbours: each is compared
    # with brute force (measured on the WordNet vectors: 1.0 parked, 0.992-0.994
    # linked, the graph built in parallel and so not the same twice; 1.0 and 1.0 on
    # the stand-in vectors; scoped, 1.0 both).
    assert recall(during[0], want) >= 0.98
    assert recall(after[0], want) >= 0.97
    assert recall(during[1], want_scoped) >= 0.98
    assert recall(after[1], want_scoped) >= 0.97
    for found in (*during[:2], *after[:2]):
        check_scores(found, row_of, bulk["stored"], queries)
    # Where both found a memory, they give it the same score; and they mostly agree,
    # fused with BM25 too (measured: 0.99 or more of the hits of each kind).
    for a, b in zip(during[:3], after[:3], strict=True):
        assert agreement(a, b) >= 0.97
    assert overlap(during[3], after[3]) >= 0.97


def test_searches_keep_recall_while_parked_vectors_link_on_all_cores(
    tmp_path: Path, bulk: dict[str, Any]
) -> None:
    # wait_indexed links batches as the background thread does (the engine's shared
    # path: each batch linked in parallel under a read lock, searches running); a
    # search at any moment sees part of the store in the graph and the rest parked.
    with store(tmp_path / "s") as m:
        ids = load(m, bulk["texts"], bulk["vectors"], bulk["rows"])
        want = [[ids[r] for r in top] for top in bulk["exact"]]
        queries = bulk["queries"]
        linker = threading.Thread(target=m.wait_indexed)
        moments: list[tuple[int, float]] = []  # (parked before the search, recall)
        linker.start()
        try:
            i = 0
            while linker.is_alive() or i < len(queries):
                at = slice(i % len(queries), i % len(queries) + 1)
                parked = m._engine.pending()
                moments.append((parked, recall(vector_hits(m, queries[at]), want[at])))
                i += 1
        finally:
            linker.join()
        assert m._engine.pending() == 0
        linked = vector_hits(m, queries)
    mixed = [r for parked, r in moments if 0 < parked < len(ids)]
    # The searches did run with part of the store linked and part parked (measured:
    # some 2,100 searches, mean recall 0.997 on WordNet, 1.0 on the stand-in).
    assert len(mixed) >= 20
    assert float(np.mean(mixed)) >= 0.97
    assert recall(linked, want) >= 0.97


def test_a_store_closed_mid_load_reopens_with_its_vectors_parked(
    tmp_path: Path, bulk: dict[str, Any]
) -> None:
    # Closing stops the background pass between batches and snapshots what is still
    # parked; the reopened store scans those vectors (their sketches rebuilt from the
    # snapshot) and finds what brute force finds, then links them.
    queries = bulk["queries"]
    with store(tmp_path / "s") as m:
        ids = load(m, bulk["texts"], bulk["vectors"], bulk["rows"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a snapshot that cannot be used warns, then rebuilds
        m = store(tmp_path / "s")
    with m:
        assert m._sync.changes == 0  # loaded from the snapshot, nothing replayed
        assert m._engine.pending() > 20_000
        parked = vector_hits(m, queries)
        assert m._engine.pending() > 0
        m.wait_indexed()
        linked = vector_hits(m, queries)
    row_of = {id: i for i, id in enumerate(ids)}
    want = [[ids[r] for r in top] for top in bulk["exact"]]
    assert recall(parked, want) >= 0.98
    assert recall(linked, want) >= 0.97
    check_scores(parked, row_of, bulk["stored"], queries)
    check_scores(linked, row_of, bulk["stored"], queries)


def tiled(n: int, batch: int) -> tuple[list[str], list[F32]]:
    """``n`` memories over the corpus in batches: memory ``i`` is corpus row ``i mod
    len``, its vector perturbed (a seed per batch), so repeats are near, not equal."""
    texts, vectors = corpus()
    out_texts: list[str] = []
    out_vectors: list[F32] = []
    for first in range(0, n, batch):
        rows = np.arange(first, min(first + batch, n)) % len(texts)
        out_vectors.append(perturbed(vectors[rows], seed=first))
        out_texts.extend(texts[i] for i in rows)
    return out_texts, out_vectors


@pytest.mark.slow
def test_a_store_of_200k_memories_round_trips_through_snapshot_and_reopen(
    tmp_path: Path,
) -> None:
    n, batch, agents = 200_000, 20_000, 100
    texts, batches = tiled(n, batch)
    corpus_texts, corpus_vectors = corpus()
    rng = np.random.default_rng(7)
    # 200 queries: the recall below is a share of them, and one query in a hundred
    # or so may miss its neighbours altogether (see there), too few to judge by 40.
    picks = rng.choice(len(corpus_texts), size=200, replace=False)
    queries = perturbed(corpus_vectors[picks], seed=8)
    query_texts = [corpus_texts[i] for i in picks]
    scoped = {"agent_id": "agent7"}

    def searches(m: Memory) -> list[Any]:
        out: list[Any] = [vector_hits(m, queries), vector_hits(m, queries, **scoped)]
        for text, q in zip(query_texts[:40], queries[:40], strict=True):
            for scope in ({}, scoped):
                hits = m.search(text, k=K, query_embedding=q, **scope)
                out.append([(h.record.id, h.score) for h in hits])
        return out

    def counts(m: Memory) -> list[int]:
        return [len(m), m.count(), *(m.count(agent_id=f"agent{a}") for a in (0, 7, 99))]

    path = tmp_path / "s"
    with store(path) as m:
        ids: list[str] = []
        for i, vectors in enumerate(batches):
            items = [
                {"text": texts[j], "embedding": v, "agent_id": f"agent{j % agents}"}
                for j, v in enumerate(vectors, start=i * batch)
            ]
            ids.extend(r.id for r in m.add_many(items))
        m.wait_indexed()
        m.snapshot()
        seq = m._sync.snap_seq
        before, before_counts = searches(m), counts(m)

    assert before_counts == [n, n, n // agents, n // agents, n // agents]
    # The graph built on all cores finds the exact nearest of 200k (the vectors as
    # stored, in half floats) nearly as well as at 30k (measured: 0.98-0.998 on WordNet).
    # On the stand-in vectors (300 tight clusters, far apart) a search with the default
    # beam (64) sometimes stays in the wrong cluster and finds none of the ten; hnswlib
    # does the same with the same settings (measured over 400 queries, 2 runs each:
    # 3-4 such queries, recall 0.989-0.992; hnswlib 3-5, 0.986-0.990). Of 40 queries,
    # two such misses made 0.9475, under the bound in one CI run.
    stored = as_stored(np.concatenate(batches))
    want = [[ids[r] for r in top] for top in exact_top(stored, queries, K)]
    assert recall(before[0], want) >= 0.95
    check_scores(before[0], {id: i for i, id in enumerate(ids)}, stored, queries)
    del stored

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a snapshot that cannot be used warns, then rebuilds
        m = store(path)
    with m:
        # Loaded from the snapshot: nothing replayed, nothing parked (a rebuild from
        # the database parks every vector again).
        assert m._sync.snap_seq == seq and m._sync.changes == 0
        assert m._engine.pending() == 0
        assert counts(m) == before_counts
        # The same graph and index: the same hits, the same scores, to the bit.
        assert searches(m) == before
        # And it takes writes: a new memory is its own nearest neighbour. Each is
        # searched for at once, parked or linked; on the stand-in clusters about one
        # search in a hundred stays in the wrong cluster at the default beam (see
        # above; measured: 2 of 291 new memories, 0 of 51 once linked), so 18 of 20.
        found = 0
        for i, v in enumerate(perturbed(queries[:20], seed=9)):
            new = m.add(f"a memory added after the reopen {i}", embedding=v).id
            found += m.search("", k=1, mode="vector", query_embedding=v)[0].record.id == new
        assert found >= 18


@pytest.mark.parametrize("budget", [-1.0, float("nan"), float("inf")])
def test_a_linking_budget_that_is_no_duration_is_refused(tmp_path: Path, budget: float) -> None:
    from memlane.errors import InvalidArgumentError

    with Memory(tmp_path / "s", embedder=WordHashEmbedder()) as m:
        m.add_many([{"text": f"note {i}"} for i in range(100)])
        with pytest.raises(InvalidArgumentError, match="budget"):
            m._engine.index_pending(10, budget)
        m.wait_indexed()
        assert m._engine.pending() == 0
