"""``Memory.search(..., diversity=λ)`` on the quality sets: what maximal marginal
relevance does to the ranking.

The sets, stores and queries are ``bench_quality.py``'s (its ``Bench``: the vectors of
``benches/.cache/``, each query searched in its own room with its vector given, ``k=10``,
LoCoMo ``k=20``); each is searched with the defaults and ``diversity`` 0.1, 0.3 and 0.5,
and reported as ``bench_quality.py`` reports (recall@5, recall@10, nDCG@10, recall@20;
LoCoMo also by question category), with how alike the hits are: the cosines between
the stored vectors of the first ``k`` hits of each query at the defaults (10th, 50th and
90th percentile over all pairs), what the penalty of MMR reads, and what MMR costs: the
median time of a search at λ 0 and 0.3, the two interleaved after a search of the same
query, whose candidates the engine then holds (so the difference is MMR's own). The
conversation sets by default; ``--sets`` takes any of ``bench_quality.py``'s.

    python benches/bench_diversity.py [--sets conversations,chitchat,...] [--split test]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import warnings
from pathlib import Path

import numpy as np

from bench_ingest import CachedModel, DataUnavailableError, VectorCache
from bench_quality import SETS, Bench, Metrics, print_table
from memlane import OnnxEmbedder
from memlane.embeddings import TextTruncatedWarning

DIVERSITY = (0.0, 0.1, 0.3, 0.5)


def alike(b: Bench) -> list[float]:
    """The 10th, 50th and 90th percentiles of the cosines between the first hits of
    each query (defaults), over all pairs."""
    pairs: list[np.ndarray] = []
    for q in b.qs.queries:
        hits = b.search(q, include_embedding=True)
        if len(hits) < 2:
            continue
        m = np.array([h.record.embedding for h in hits], dtype=np.float64)
        m /= np.linalg.norm(m, axis=1, keepdims=True)
        pairs.append((m @ m.T)[np.triu_indices(len(hits), 1)])
    return [float(x) for x in np.percentile(np.concatenate(pairs), [10, 50, 90])]


def cost(b: Bench, lam: float = 0.3, rounds: int = 3) -> tuple[float, float]:
    """Median milliseconds of a search without and with diversity ``lam``."""
    took: dict[float, list[float]] = {0.0: [], lam: []}
    for r in range(rounds):
        for i, q in enumerate(b.qs.queries):
            b.search(q)
            for x in (0.0, lam) if (i + r) % 2 else (lam, 0.0):
                started = time.perf_counter()
                b.search(q, diversity=x)
                took[x].append(time.perf_counter() - started)
    return statistics.median(took[0.0]) * 1e3, statistics.median(took[lam]) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sets", default="conversations,chitchat,chitchat-keyword,locomo,locomo-plain"
    )
    parser.add_argument("--split", default="test", choices=("train", "test"))
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    warnings.simplefilter("ignore", TextTruncatedWarning)
    embedder = OnnxEmbedder()
    model = CachedModel(embedder, VectorCache(embedder.name, embedder.dimension))
    results: dict[str, dict[str, Metrics]] = {}
    for name in (n.strip() for n in args.sets.split(",")):
        try:
            b = Bench(SETS[name](args.split), model)
        except (DataUnavailableError, ModuleNotFoundError) as e:
            print(f"{name}: skipped ({e})")
            continue
        rows = []
        for lam in DIVERSITY:
            label = "defaults (diversity 0)" if lam == 0 else f"diversity {lam}"
            rows.append((label, b.run({"diversity": lam} if lam else {}, label)))
        qs = b.qs
        print_table(
            f"{name} ({qs.split}: {len(qs.docs):,} records, {len(qs.queries)} queries)", rows
        )
        b.by_category()
        p10, p50, p90 = alike(b)
        print(f"cosine between the first {qs.k} hits: {p50:.2f} ({p10:.2f}-{p90:.2f})")
        off, on = cost(b)
        print(f"search, candidates held: {off:.3f} ms, at 0.3 {on:.3f} ms (+{on - off:.3f})")
        results[name] = dict(rows)
        b.mem.close()
    model.cache.save()
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
