"""``add_many(unique=True)``: a batch checked for exact and near duplicates.

A store of 10,000 WordNet glosses (their vectors precomputed, so only the
duplicate checks are timed) takes a batch of 10,000 items with
``unique=True``: a fifth repeat stored texts exactly, a fifth are stored
vectors nudged slightly (near-duplicates), a tenth repeat another item of the
same batch, the rest are new. Prints the median time of ``--repeat`` runs,
each on a fresh copy of the store, and the outcome counts (which must not
change between versions).

    python benches/bench_add_unique.py
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from _data import DataUnavailableError, wordnet_texts, wordnet_vectors
from memlane import Memory


def _batch(texts: list[str], vectors: np.ndarray, n: int, seed: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    items: list[dict[str, Any]] = []
    for i in range(n):
        kind = rng.random()
        if kind < 0.2:  # exact duplicate of a stored record
            j = int(rng.integers(n))
            items.append({"text": texts[j], "embedding": vectors[j]})
        elif kind < 0.4:  # near-duplicate of a stored record
            j = int(rng.integers(n))
            v = vectors[j] + rng.normal(0, 0.01, vectors.shape[1]).astype(np.float32)
            items.append({"text": texts[j] + " (again)", "embedding": v / np.linalg.norm(v)})
        elif kind < 0.5 and items:  # repeats an item of this batch
            items.append(dict(items[int(rng.integers(len(items)))]))
        else:  # new
            j = n + i
            items.append({"text": texts[j], "embedding": vectors[j]})
    for item in items:
        item["unique"] = True
        item["agent_id"] = "a"
    return items


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    try:
        texts, vectors = wordnet_texts(), np.asarray(wordnet_vectors(), dtype=np.float32)
    except DataUnavailableError as e:
        raise SystemExit(f"skipped: {e}") from None
    n = args.n
    items = _batch(texts, vectors, n, seed=0)
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "base"
        with Memory(base, embedder=_Fixed(vectors.shape[1])) as mem:
            mem.add_many(
                {"text": texts[i], "embedding": vectors[i], "agent_id": "a"} for i in range(n)
            )
            mem.wait_indexed()
        times = []
        outcome: dict[str, int] = {}
        for r in range(args.repeat):
            copy = Path(tmp) / f"run{r}"
            shutil.copytree(base, copy)
            with Memory(copy, embedder=_Fixed(vectors.shape[1])) as mem:
                t = time.perf_counter()
                records = mem.add_many(items)
                times.append(time.perf_counter() - t)
            outcome = {}
            for rec in records:
                key = rec.duplicate or "new"
                outcome[key] = outcome.get(key, 0) + 1
    print(
        f"add_many(unique=True) of {n:,} items into {n:,}: median "
        f"{statistics.median(times):.3f} s over {args.repeat} runs; outcomes {outcome}"
    )


class _Fixed:
    """An embedder that is never called: every item brings its vector."""

    name = "wordnet-precomputed"

    def __init__(self, dimension: int) -> None:
        self.dimension = dimension

    def embed(self, text: str) -> np.ndarray:
        raise AssertionError("every item has its vector")

    def embed_batch(self, texts: list[str]) -> np.ndarray:
        raise AssertionError("every item has its vector")


if __name__ == "__main__":
    main()
