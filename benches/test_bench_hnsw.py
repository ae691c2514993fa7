"""HnswIndex against hnswlib (pytest-benchmark; ``benches/bench_hnsw.py`` is the full run).

Groups: ``hnsw-add`` (build M = 16, ef_construction = 200, cosine, every core),
``hnsw-search`` (one query per call, ef = 64, k = 10), ``hnsw-search-batch`` (all queries
in one call) and ``hnsw-filtered`` (1% of the ids allowed: memlane's ``allowed=``, hnswlib's
``filter=`` callable). Each checks recall@10 against brute force, untimed.

    pytest benches/test_bench_hnsw.py --benchmark-autosave
"""

from __future__ import annotations

import itertools
import os
from typing import Any

import numpy as np
import pytest

import memlane
from _bench_data import Dataset, exact_top, peer, recall

K = 10
M = 16
EF_CONSTRUCTION = 200
EF = 64
THREADS = os.cpu_count() or 1
# memlane at two precisions (int8+f16 is what Memory uses), and the peer.
LIBRARIES = ("memlane-f32", "memlane-int8+f16", "hnswlib")
MIN_RECALL = 0.9


def build(library: str, base: np.ndarray) -> Any:
    ids = np.arange(len(base), dtype=np.uint64)
    if library == "hnswlib":
        hnswlib = peer("hnswlib")
        index = hnswlib.Index(space="cosine", dim=base.shape[1])
        index.init_index(
            max_elements=len(base), M=M, ef_construction=EF_CONSTRUCTION, random_seed=1
        )
        index.add_items(base, ids, num_threads=THREADS)
        return index
    precision = library.removeprefix("memlane-")
    index = memlane.HnswIndex(
        dim=base.shape[1], m=M, ef_construction=EF_CONSTRUCTION, precision=precision
    )
    index.add(ids, base)
    return index


class Searcher:
    """One library's single-query, batch and filtered search."""

    def __init__(self, library: str, index: Any) -> None:
        self.library, self.index = library, index
        if library == "hnswlib":
            index.set_ef(EF)
            index.set_num_threads(1)
        else:
            index.ef = EF

    def one(self, q: np.ndarray, allowed: Any = None) -> np.ndarray:
        if self.library == "hnswlib":
            labels: np.ndarray = self.index.knn_query(q, k=K, num_threads=1, filter=allowed)[0]
            return labels
        labels = self.index.search(q, k=K, allowed=allowed)[0]
        return labels

    def batch(self, queries: np.ndarray) -> np.ndarray:
        if self.library == "hnswlib":
            labels: np.ndarray = self.index.knn_query(queries, k=K, num_threads=THREADS)[0]
            return labels
        labels = self.index.search(queries, k=K)[0]
        return labels


@pytest.fixture(scope="module", params=LIBRARIES)
def searcher(request: pytest.FixtureRequest, dataset: Dataset) -> Searcher:
    return Searcher(request.param, build(request.param, dataset.base))


def _info(benchmark: Any, dataset: Dataset, group: str) -> None:
    benchmark.group = group
    benchmark.extra_info["data"] = dataset.label


@pytest.mark.parametrize("library", LIBRARIES)
def test_add(benchmark: Any, library: str, dataset: Dataset) -> None:
    _info(benchmark, dataset, "hnsw-add")
    build(library, dataset.base[:10])  # a missing peer skips here, before any timing
    index = benchmark.pedantic(build, args=(library, dataset.base), rounds=3, iterations=1)
    searcher = Searcher(library, index)
    labels = searcher.batch(dataset.queries)
    _, kth = exact_top(dataset.base, dataset.queries, K)
    assert recall(labels, dataset.base, dataset.queries, kth) >= MIN_RECALL


def test_search(benchmark: Any, searcher: Searcher, dataset: Dataset) -> None:
    _info(benchmark, dataset, "hnsw-search")
    queries = itertools.cycle(dataset.queries)
    benchmark(lambda: searcher.one(next(queries)))
    labels = np.vstack([searcher.one(q) for q in dataset.queries])
    _, kth = exact_top(dataset.base, dataset.queries, K)
    assert recall(labels, dataset.base, dataset.queries, kth) >= MIN_RECALL


def test_search_batch(benchmark: Any, searcher: Searcher, dataset: Dataset) -> None:
    _info(benchmark, dataset, "hnsw-search-batch")
    labels = benchmark(searcher.batch, dataset.queries)
    _, kth = exact_top(dataset.base, dataset.queries, K)
    assert recall(labels, dataset.base, dataset.queries, kth) >= MIN_RECALL


def test_search_filtered(benchmark: Any, searcher: Searcher, dataset: Dataset) -> None:
    """1% of the ids allowed: what a search scoped to one agent of a hundred looks like."""
    _info(benchmark, dataset, "hnsw-filtered")
    rng = np.random.default_rng(7)
    rows = np.sort(
        rng.choice(len(dataset.base), size=max(K, len(dataset.base) // 100), replace=False)
    )
    if searcher.library == "hnswlib":
        allowed_set = set(rows.tolist())
        allowed: Any = allowed_set.__contains__
    else:
        allowed = rows.astype(np.uint64)
    queries = dataset.queries[:50]
    cycle = itertools.cycle(queries)
    benchmark(lambda: searcher.one(next(cycle), allowed))
    labels = np.vstack([searcher.one(q, allowed) for q in queries]).astype(np.int64)
    assert np.isin(labels, rows).all()
    top, kth = exact_top(dataset.base[rows], queries, K)
    # Row numbers of the allowed subset, as exact_top's base is that subset.
    local = np.searchsorted(rows, labels)
    assert recall(local, dataset.base[rows], queries, kth) >= MIN_RECALL
    assert top.shape == (len(queries), K)
