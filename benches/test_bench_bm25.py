"""BM25 keyword search against rank-bm25 and bm25s (pytest-benchmark; ``bench_bm25.py``
is the full run).

Groups: ``bm25-index`` (raw texts to a searchable index, analysis included) and
``bm25-search`` (one query per call, top 10, analysis included). Systems:

- ``memlane``: ``memlane.BM25Index`` (Lucene's BM25), its results checked against an
  exhaustive Python scoring of the same formula;
- ``memlane-compat-okapi``: ``memlane.compat.rank_bm25.BM25Okapi``, rank-bm25's formula,
  its scores checked equal to rank-bm25's;
- ``rank-bm25``: ``rank_bm25.BM25Okapi`` (the dev extra) over the same terms
  (``memlane.analyze``), top 10 by ``get_scores``;
- ``bm25s``: skipped unless ``bm25s`` and ``PyStemmer`` are installed (not in the dev extra).

    pytest benches/test_bench_bm25.py --benchmark-autosave
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from functools import cache
from typing import Any

import numpy as np
import pytest

import memlane
from _bench_data import Corpus, peer
from memlane.compat.rank_bm25 import BM25Okapi as CompatOkapi

K = 10
K1, B = 1.2, 0.75
SYSTEMS = ("memlane", "memlane-compat-okapi", "rank-bm25", "bm25s")


def top(scores: np.ndarray, k: int = K) -> list[int]:
    part = np.argpartition(-scores, min(k, len(scores) - 1))[:k]
    return [int(i) for i in part[np.argsort(-scores[part], kind="stable")]]


class Memlane:
    def __init__(self, texts: list[str]) -> None:
        self.index = memlane.BM25Index(k1=K1, b=B)
        self.index.add(np.arange(len(texts), dtype=np.uint64), texts)

    def search(self, query: str) -> list[int]:
        return [int(i) for i in self.index.search(query, k=K)[0]]


class Okapi:
    """rank-bm25's BM25Okapi, or memlane's drop-in for it, over memlane's analysis."""

    def __init__(self, texts: list[str], compat: bool) -> None:
        if compat:
            okapi: Any = CompatOkapi
        else:
            okapi = peer("rank_bm25").BM25Okapi
        self.index = okapi([memlane.analyze(t) for t in texts], k1=K1, b=B)

    def scores(self, query: str) -> np.ndarray:
        scores: np.ndarray = np.asarray(self.index.get_scores(memlane.analyze(query)))
        return scores

    def search(self, query: str) -> list[int]:
        return top(self.scores(query))


class Bm25s:
    def __init__(self, texts: list[str]) -> None:
        self.bm25s = pytest.importorskip("bm25s", reason="bm25s is not in the dev extra")
        stemmer = pytest.importorskip("Stemmer", reason="PyStemmer is not in the dev extra")
        self.stemmer = stemmer.Stemmer("english")
        self.retriever = self.bm25s.BM25(k1=K1, b=B, method="lucene")
        self.retriever.index(self.tokenize(texts), show_progress=False)

    def tokenize(self, texts: list[str]) -> Any:
        return self.bm25s.tokenize(texts, stopwords="en", stemmer=self.stemmer, show_progress=False)

    def search(self, query: str) -> list[int]:
        docs, _ = self.retriever.retrieve(self.tokenize([query]), k=K, show_progress=False)
        return [int(i) for i in docs[0]]


def build(system: str, texts: list[str]) -> Any:
    if system == "memlane":
        return Memlane(texts)
    if system == "bm25s":
        return Bm25s(texts)
    return Okapi(texts, compat=system == "memlane-compat-okapi")


@cache
def reference(texts: tuple[str, ...]) -> tuple[dict[str, dict[int, int]], list[int], float]:
    """Postings (term to document to count), document lengths and the mean length."""
    postings: dict[str, dict[int, int]] = {}
    lengths = []
    for doc, text in enumerate(texts):
        counts = Counter(memlane.analyze(text))
        lengths.append(sum(counts.values()))
        for term, tf in counts.items():
            postings.setdefault(term, {})[doc] = tf
    return postings, lengths, sum(lengths) / len(lengths)


def lucene_scores(texts: list[str], query: str) -> np.ndarray:
    """BM25Index's formula, exhaustively: Σ over query terms (repeats count) of
    idf · tf / (tf + k1 · (1 - b + b · len / avgdl)), idf = ln(1 + (N - df + 0.5) / (df + 0.5))."""
    postings, lengths, avgdl = reference(tuple(texts))
    scores = np.zeros(len(texts))
    for term in memlane.analyze(query):
        docs = postings.get(term, {})
        idf = math.log(1 + (len(texts) - len(docs) + 0.5) / (len(docs) + 0.5))
        for doc, tf in docs.items():
            scores[doc] += idf * tf / (tf + K1 * (1 - B + B * lengths[doc] / avgdl))
    return scores


@pytest.fixture(scope="module", params=SYSTEMS)
def system(request: pytest.FixtureRequest, corpus: Corpus) -> tuple[str, Any]:
    return request.param, build(request.param, corpus.texts)


def _info(benchmark: Any, corpus: Corpus, group: str) -> None:
    benchmark.group = group
    benchmark.extra_info["data"] = corpus.label


@pytest.mark.parametrize("name", SYSTEMS)
def test_index(benchmark: Any, name: str, corpus: Corpus) -> None:
    _info(benchmark, corpus, "bm25-index")
    build(name, corpus.texts[:10])  # a missing peer skips here, before any timing
    built = benchmark.pedantic(build, args=(name, corpus.texts), rounds=3, iterations=1)
    hits = built.search(corpus.queries[0])
    assert hits and all(0 <= i < len(corpus.texts) for i in hits)


def test_search(benchmark: Any, system: tuple[str, Any], corpus: Corpus) -> None:
    name, index = system
    _info(benchmark, corpus, "bm25-search")
    queries = itertools.cycle(corpus.queries)
    benchmark(lambda: index.search(next(queries)))

    if name == "memlane":
        for query in corpus.queries:
            ids, scores = index.index.search(query, k=K)
            want = lucene_scores(corpus.texts, query)
            # The scores given are the formula's for those documents, and the best ones.
            np.testing.assert_allclose(scores, want[ids.astype(np.int64)], rtol=1e-4, atol=1e-5)
            best = np.sort(want[want > 0])[::-1][: len(ids)]
            np.testing.assert_allclose(scores, best, rtol=1e-4, atol=1e-5)
    elif name == "memlane-compat-okapi":
        peer = Okapi(corpus.texts[:500], compat=False)
        mine = Okapi(corpus.texts[:500], compat=True)
        for query in corpus.queries:
            np.testing.assert_allclose(mine.scores(query), peer.scores(query), rtol=1e-9)
    elif name == "bm25s":
        mine = Memlane(corpus.texts)
        agree = [
            len(set(index.search(q)) & set(mine.search(q))) / K
            for q in corpus.queries
            if len(mine.search(q)) == K
        ]
        assert np.mean(agree) >= 0.8
