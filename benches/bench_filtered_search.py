"""What a search with a filter costs when the filter admits much of the store: a store
of ``--size`` records where one agent holds every record (the store of a single agent),
two users share it, a room holds 1% and importance runs from 0 to 0.9 by tens, searched
hybrid with a given vector (384-d, clustered like embeddings, in the default embedder's
store: the model never runs) and the question's text, ``k=10``, by each filter in turn;
then text alone. Medians of ``--calls`` searches, in milliseconds, after ``--calls //
10`` unmeasured ones.

Run it again with ``PYTHONPATH`` pointing at another build's ``python/`` folder to time
that build on the same store and searches.

    python benches/bench_filtered_search.py [--size 100000] [--calls 200]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from memlane import Memory

DIM = 384
T0 = 1_600_000_000.0
WORDS = [f"w{i}" for i in range(2_000)]


def vectors(n: int, seed: int) -> np.ndarray:
    """``n`` unit vectors around 50 fixed centres (embeddings cluster)."""
    rng = np.random.default_rng(seed)
    centres = np.random.default_rng(0).standard_normal((50, DIM)).astype(np.float32)
    out = centres[rng.integers(0, 50, n)] + rng.standard_normal((n, DIM)).astype(np.float32)
    return out / np.linalg.norm(out, axis=1, keepdims=True)


def fill(mem: Memory, size: int) -> None:
    rng = np.random.default_rng(1)
    for start in range(0, size, 5_000):
        ids = range(start, min(size, start + 5_000))
        vecs = vectors(len(ids), start + 1)
        mem.add_many(
            {
                "text": " ".join(WORDS[j] for j in rng.integers(0, len(WORDS), 8)),
                "embedding": vec,
                "agent_id": "a",
                "user_id": f"u{i % 2}",
                "room_id": f"r{i % 100}",
                "importance": (i % 10) / 10,
                "created_at": T0 + i,
            }
            for i, vec in zip(ids, vecs, strict=True)
        )
    mem.wait_indexed()


def filters(size: int) -> dict[str, dict[str, Any]]:
    """The filters searched by, as ``Memory.search`` keywords, on a store of ``size``."""
    return {
        "no filter": {},
        "the agent (every record)": {"agent_id": "a"},
        "one user (half)": {"user_id": "u0"},
        "one room (1%)": {"room_id": "r7"},
        "as_of now": {"as_of": T0 + size + 10},
        "the agent, as_of mid-store": {"agent_id": "a", "as_of": T0 + size / 2},
        "importance >= 0.3 (70%)": {"filters": {"importance": {"$gte": 0.3}}},
        "importance >= 0.9 (10%)": {"filters": {"importance": {"$gte": 0.9}}},
    }


def median_ms(call: Callable[[int], Any], calls: int) -> float:
    for i in range(calls // 10):
        call(i)
    times = []
    for i in range(calls):
        t0 = time.perf_counter()
        call(i)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    rng = np.random.default_rng(2)
    texts = [" ".join(WORDS[j] for j in rng.integers(0, len(WORDS), 3)) for _ in range(997)]
    queries = vectors(997, 99)
    print(f"{args.size:,} records; median ms of {args.calls} searches, k=10")
    print("| filter | hybrid, given vector | text alone |")
    print("| --- | ---: | ---: |")
    with tempfile.TemporaryDirectory() as folder:
        # The default embedder's store; every vector is given, so the model never runs.
        mem = Memory(folder)
        try:
            fill(mem, args.size)
            for name, kw in filters(args.size).items():
                row = []
                for mode in ("hybrid", "text"):

                    def call(i: int, mode: str = mode, kw: dict[str, Any] = kw) -> Any:
                        vec = queries[i % 997] if mode == "hybrid" else None
                        return mem.search(
                            texts[i % 997],
                            10,
                            mode=mode,
                            query_embedding=vec,
                            track_access=False,
                            **kw,
                        )

                    row.append(median_ms(call, args.calls))
                print(f"| {name} | " + " | ".join(f"{ms:.3f}" for ms in row) + " |")
        finally:
            mem.close()


if __name__ == "__main__":
    main()
