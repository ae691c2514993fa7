"""Data for the pytest-benchmark tests in ``benches/`` (``test_bench_*.py``), and the
reference results they check against.

Each data set is small: 10,000 real or 3,000 generated vectors and texts, or
``MEMLANE_BENCH_N``; with ``--benchmark-disable`` (CI's run: nothing is timed, each test
runs once as a check) at most 2,000, so that the whole directory runs in seconds. Which
data a run uses is chosen by ``MEMLANE_BENCH_DATA``:

- ``auto`` (the default): real data where it is present, generated data otherwise.
  Vectors are the WordNet glosses' (``benches/_data.py``) when their cache in
  ``benches/.cache/`` exists (it is never computed here), texts the glosses when
  ``../shared/data/`` is beside the repository;
- ``synthetic``: always generated (seeded clustered vectors, a seeded corpus);
- ``real``: the real data, skipping the tests that need what is missing.

The data set's name is in each benchmark's ``extra_info`` and in the saved run's machine
info: compare runs made on the same data (``--benchmark-compare``).
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

F32 = npt.NDArray[np.float32]

SEED = 20_241_123
DIM = 384
# Records (vectors, texts) per data set: real (rows of a fixed shuffle of the WordNet
# glosses), generated, and either when the benchmarks are disabled.
REAL_N, SYNTHETIC_N, CHECK_N = 10_000, 3_000, 2_000
QUERIES, TEXT_QUERIES = 200, 100
SYNTHETIC_CLUSTERS = 64
VOCABULARY = 4_000


def size(config: pytest.Config, real: bool) -> int:
    given = os.environ.get("MEMLANE_BENCH_N")
    if given:
        return int(given)
    n = REAL_N if real else SYNTHETIC_N
    return min(n, CHECK_N) if config.getoption("benchmark_disable", False) else n


def peer(module: str) -> Any:
    """A peer of the dev extra: skipped where it is missing, unless CI requires it
    (``MEMLANE_REQUIRE_PEERS``)."""
    if os.environ.get("MEMLANE_REQUIRE_PEERS"):
        return importlib.import_module(module)
    return pytest.importorskip(module, reason=f"{module} (the dev extra) is not installed")


def data_choice() -> str:
    choice = os.environ.get("MEMLANE_BENCH_DATA", "auto")
    if choice not in ("auto", "synthetic", "real"):
        raise pytest.UsageError(f"MEMLANE_BENCH_DATA must be auto, synthetic or real: {choice!r}")
    return choice


@dataclass(frozen=True)
class Dataset:
    """Unit-length vectors and their texts: ``base[i]`` is ``texts[i]``'s vector."""

    name: str
    base: F32
    queries: F32
    texts: list[str]
    query_texts: list[str]

    @property
    def label(self) -> str:
        return f"{self.name} ({len(self.base):,} x {self.base.shape[1]})"


@dataclass(frozen=True)
class Corpus:
    name: str
    texts: list[str]
    queries: list[str]

    @property
    def label(self) -> str:
        return f"{self.name} ({len(self.texts):,} texts)"


# ---------------------------------------------------------------------------
# Generated data


def _words(rng: np.random.Generator) -> list[str]:
    """Pronounceable made-up words (so the stemmer leaves most of them whole)."""
    syllables = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]
    out: set[str] = set()
    while len(out) < VOCABULARY:
        n = int(rng.integers(2, 4))
        out.add("".join(syllables[i] for i in rng.integers(len(syllables), size=n)))
    return sorted(out)


def _text(rng: np.random.Generator, words: list[str], topic: int, length: int) -> str:
    """Zipf-distributed words, shifted by topic so that each topic has its own words."""
    ranks = np.minimum(rng.zipf(1.3, size=length) - 1, len(words) - 1)
    return " ".join(words[(r + topic * 61) % len(words)] for r in ranks)


def _unit(v: F32) -> F32:
    out: F32 = (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)
    return out


def synthetic_dataset(n: int, n_queries: int = QUERIES) -> Dataset:
    """Clustered unit vectors (one topic per cluster) and texts on the same topics."""
    rng = np.random.default_rng(SEED)
    centers = rng.standard_normal((SYNTHETIC_CLUSTERS, DIM)).astype(np.float32)
    words = _words(rng)

    def draw(count: int, length: tuple[int, int]) -> tuple[F32, list[str]]:
        topics = rng.integers(SYNTHETIC_CLUSTERS, size=count)
        noise = rng.standard_normal((count, DIM)).astype(np.float32)
        vectors = _unit(centers[topics] + 0.9 * noise)
        lengths = rng.integers(*length, size=count)
        texts = [_text(rng, words, int(t), int(m)) for t, m in zip(topics, lengths, strict=True)]
        return vectors, texts

    base, texts = draw(n, (5, 20))
    queries, query_texts = draw(n_queries, (2, 6))
    return Dataset("synthetic", base, queries, texts, query_texts)


def synthetic_corpus(n: int, n_queries: int = TEXT_QUERIES) -> Corpus:
    data = synthetic_dataset(n, n_queries)
    return Corpus("synthetic", data.texts, data.query_texts)


# ---------------------------------------------------------------------------
# Real data


def _wordnet_order(total: int) -> npt.NDArray[np.int64]:
    return np.random.default_rng(SEED).permutation(total)


def real_dataset(n: int) -> Dataset | str:
    """WordNet gloss vectors from the cache, or why they are not available."""
    from _data import CACHE, DataUnavailableError, cache_path, wordnet_texts, wordnet_vectors

    if not any(CACHE.glob("wordnet-*.npy")):
        return f"no WordNet vector cache in {CACHE.name}/ (python benches/_data.py makes it)"
    try:
        texts = wordnet_texts()
    except DataUnavailableError as e:
        return str(e)
    from memlane import OnnxEmbedder

    embedder = OnnxEmbedder()
    if not cache_path(embedder, texts).exists():
        return "the WordNet vector cache was made by another embedder or data set"
    vectors = wordnet_vectors(embedder)
    order = _wordnet_order(len(texts))
    rows, queries = np.sort(order[:n]), order[n : n + QUERIES]
    return Dataset(
        "wordnet",
        _unit(np.ascontiguousarray(vectors[rows], dtype=np.float32)),
        _unit(np.ascontiguousarray(vectors[queries], dtype=np.float32)),
        [texts[i] for i in rows],
        [texts[i] for i in queries],
    )


def real_corpus(n: int) -> Corpus | str:
    from _data import DataUnavailableError, wordnet_texts

    try:
        texts = wordnet_texts()
    except DataUnavailableError as e:
        return str(e)
    order = _wordnet_order(len(texts))
    rows, queries = np.sort(order[:n]), order[n : n + TEXT_QUERIES]
    return Corpus("wordnet", [texts[i] for i in rows], [texts[i] for i in queries])


# ---------------------------------------------------------------------------
# Reference results


def exact_top(base: F32, queries: F32, k: int) -> tuple[npt.NDArray[np.int64], F32]:
    """Exact nearest rows by cosine (unit vectors) and the k-th distance per query."""
    d = 1.0 - queries @ base.T
    part = np.argpartition(d, k - 1, axis=1)[:, :k]
    order = np.argsort(np.take_along_axis(d, part, axis=1), axis=1)
    top = np.take_along_axis(part, order, axis=1)
    return top, np.take_along_axis(d, top, axis=1)[:, -1]


def recall(labels: npt.NDArray[Any], base: F32, queries: F32, kth: F32) -> float:
    """Share of results whose exact distance is within 1e-5 of the true k-th (so that
    duplicate vectors do not count against an index)."""
    k = labels.shape[1]
    hits = 0
    for row, q, bound in zip(labels, queries, kth, strict=True):
        real = row[row < len(base)].astype(np.int64)
        hits += int(np.count_nonzero(1.0 - base[real] @ q <= bound + 1e-5))
    return hits / (k * len(queries))
