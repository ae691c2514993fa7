"""What crossing into the engine costs a small write and a search (issue 36).

Measures, in one process, on in-memory stores (no fsync, so the Python and Rust
work is what is timed), in CPU seconds of the process (``time.process_time``: its
threads' work, whatever else the machine runs):

- ``add``: one small record at a time, median per call over ``--adds`` calls, with
  ``embedder=None`` (text only) and with a precomputed vector (``embedding=``, a
  store whose embedder is never called);
- ``add_many``: ``--size`` records with precomputed vectors, in batches of 5,000
  (CPU and wall time; the vectors are linked in the background meanwhile);
- ``search(text)`` (hybrid; the query's vector comes from the embedding cache)
  and a search given the vector (``query_embedding=``), median per call, on that
  store once its vectors are linked.

Prints one JSON line. To compare two builds, run it with each one's interpreter
in turn, several times (``benches/README.md``, "One crossing")::

    python benches/bench_boundary.py [--size 100000] [--adds 2000] [--dim 128]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import time
from typing import Any

import numpy as np

from memlane import Memory

WORDS = ["garden", "river", "market", "letter", "window", "engine", "silver", "orange", "paper"]


class StandIn:
    """A deterministic embedder of ``dim`` dimensions that costs next to nothing."""

    def __init__(self, dim: int) -> None:
        self.name = f"stand-in-{dim}"
        self.dimension = dim

    def embed(self, text: str) -> Any:
        seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")
        return np.random.default_rng(seed).standard_normal(self.dimension).astype(np.float32)

    def embed_batch(self, texts: list[str]) -> Any:
        return np.stack([self.embed(t) for t in texts]) if texts else np.empty((0, self.dimension))


def text(i: int) -> str:
    r = np.random.default_rng(i)
    return " ".join(WORDS[j] for j in r.integers(0, len(WORDS), 8)) + f" item {i}"


def per_call(fn: Any, n: int) -> float:
    """Median CPU microseconds of ``fn(i)`` over ``n`` calls, timed in groups of 50."""
    times = []
    for start in range(0, n, 50):
        calls = range(start, min(start + 50, n))
        t = time.process_time()
        for i in calls:
            fn(i)
        times.append((time.process_time() - t) / len(calls) * 1e6)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=100_000)
    ap.add_argument("--adds", type=int, default=2000)
    ap.add_argument("--searches", type=int, default=400)
    ap.add_argument("--dim", type=int, default=128)
    args = ap.parse_args()
    out: dict[str, float] = {}

    texts = [text(i) for i in range(max(args.adds, args.size))]
    with Memory(None, embedder=None, dedup_window=0) as mem:
        out["add_text_us"] = per_call(lambda i: mem.add(texts[i]), args.adds)
    rng = np.random.default_rng(1)
    vecs = rng.standard_normal((max(args.adds, args.size), args.dim)).astype(np.float32)
    with Memory(None, embedder=StandIn(args.dim), dedup_window=0) as mem:
        out["add_vector_us"] = per_call(lambda i: mem.add(texts[i], embedding=vecs[i]), args.adds)

    with Memory(None, embedder=StandIn(args.dim), dedup_window=0) as mem:
        items = [{"text": texts[i], "embedding": vecs[i]} for i in range(args.size)]
        t, cpu = time.perf_counter(), time.process_time()
        for s in range(0, args.size, 5000):
            mem.add_many(items[s : s + 5000])
        out["add_many_s"] = time.perf_counter() - t
        out["add_many_cpu_s"] = time.process_time() - cpu
        mem.wait_indexed()
        queries = [text(10**7 + i) for i in range(args.searches)]
        qvecs = rng.standard_normal((args.searches, args.dim)).astype(np.float32)
        for q in queries:  # the query vectors into the embedding cache
            mem.search(q, k=5, track_access=False)
        # A question asked again skips retrieval (the engine keeps the last 64): the
        # queries cycle through more than that.
        out["search_text_us"] = per_call(
            lambda i: mem.search(queries[i % len(queries)], k=5, track_access=False),
            args.searches,
        )
        out["search_vector_us"] = per_call(
            lambda i: mem.search(
                queries[i % len(queries)], k=5, query_embedding=qvecs[i], track_access=False
            ),
            args.searches,
        )
    print(json.dumps(out))


if __name__ == "__main__":
    main()
