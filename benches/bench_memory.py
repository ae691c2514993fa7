"""memlane.Memory against chromadb on 100,000 memories (WordNet glosses, 100 agents).

What it measures, in one run on the same vectors (the default embedder's, cached by
``benches/_data.py``; no model runs during the benchmark):

- ``add_many`` throughput with precomputed vectors, batches of 1,000: the time until
  the calls return (each batch durable in SQLite and searchable). memlane links the
  vectors into its HNSW graph in the background; the time until that is done is
  reported too. chromadb's ``add`` (PersistentClient) returns after indexing.
- query latency p50/p99 at k = 10 given a precomputed query vector, unscoped and
  scoped to one agent: memlane's hybrid ``search`` (BM25 + HNSW, RRF, decay and
  composite scoring, record fetch, access tracking) against chromadb's vector
  ``query`` (with ``where={"agent_id": ...}`` for the scope).
- open time of the 100k store: a fresh process-level open of the directory.

Run with a release build (``maturin develop --release``)::

    python benches/bench_memory.py [--n 100000] [--queries 1000] [--no-chroma]
"""

from __future__ import annotations

import argparse
import gc
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from _data import DataUnavailableError, wordnet_texts, wordnet_vectors
from _timing import percentiles
from memlane import Memory

AGENTS = 100
BATCH = 1000
K = 10


def bench_memlane(
    root: Path, texts: list[str], vectors: np.ndarray, queries: list[tuple[str, np.ndarray, str]]
) -> dict[str, float]:
    out: dict[str, float] = {}
    n = len(texts)
    mem = Memory(root / "memlane")
    t0 = time.perf_counter()
    for s in range(0, n, BATCH):
        mem.add_many(
            [
                {"text": texts[i], "agent_id": f"agent{i % AGENTS}", "embedding": vectors[i]}
                for i in range(s, min(s + BATCH, n))
            ]
        )
    out["add"] = n / (time.perf_counter() - t0)
    mem.wait_indexed()
    out["indexed"] = n / (time.perf_counter() - t0)
    mem.close()

    gc.collect()
    t0 = time.perf_counter()
    mem = Memory(root / "memlane")
    out["open"] = time.perf_counter() - t0
    assert len(mem) == n, len(mem)

    for label, scoped in (("unscoped", False), ("scoped", True)):
        for text, v, agent in queries[:20]:  # warm-up
            mem.search(text, k=K, query_embedding=v, **({"agent_id": agent} if scoped else {}))
        samples = []
        for text, v, agent in queries[20:]:  # not the warm-up's (a repeat reuses its retrieval)
            kw = {"agent_id": agent} if scoped else {}
            t = time.perf_counter()
            hits = mem.search(text, k=K, query_embedding=v, **kw)
            samples.append(time.perf_counter() - t)
            assert len(hits) == K and (not scoped or hits[0].record.agent_id == agent)
        out[f"{label}_p50"], out[f"{label}_p99"] = percentiles(samples)
    mem.close()
    return out


def bench_chroma(
    root: Path, texts: list[str], vectors: np.ndarray, queries: list[tuple[str, np.ndarray, str]]
) -> dict[str, float]:
    import chromadb
    from chromadb.config import Settings

    out: dict[str, float] = {}
    n = len(texts)
    settings = Settings(anonymized_telemetry=False)
    client = chromadb.PersistentClient(path=str(root / "chroma"), settings=settings)
    col = client.create_collection("memories", metadata={"hnsw:space": "cosine"})
    t0 = time.perf_counter()
    for s in range(0, n, BATCH):
        ids = range(s, min(s + BATCH, n))
        col.add(
            ids=[str(i) for i in ids],
            embeddings=vectors[s : s + len(ids)],
            documents=[texts[i] for i in ids],
            metadatas=[{"agent_id": f"agent{i % AGENTS}"} for i in ids],
        )
    out["add"] = out["indexed"] = n / (time.perf_counter() - t0)
    del col, client
    gc.collect()

    t0 = time.perf_counter()
    client = chromadb.PersistentClient(path=str(root / "chroma"), settings=settings)
    col = client.get_collection("memories")
    col.query(query_embeddings=[queries[0][1]], n_results=K)
    out["open"] = time.perf_counter() - t0

    for label, scoped in (("unscoped", False), ("scoped", True)):
        for _, v, agent in queries[:20]:
            col.query(
                query_embeddings=[v],
                n_results=K,
                where={"agent_id": agent} if scoped else None,
            )
        samples = []
        for _, v, agent in queries[20:]:  # not the warm-up's (a repeat reuses its retrieval)
            t = time.perf_counter()
            res = col.query(
                query_embeddings=[v],
                n_results=K,
                where={"agent_id": agent} if scoped else None,
            )
            samples.append(time.perf_counter() - t)
            assert len(res["ids"][0]) == K
        out[f"{label}_p50"], out[f"{label}_p99"] = percentiles(samples)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--no-chroma", action="store_true")
    args = parser.parse_args()
    try:
        texts = wordnet_texts()
        vectors = np.ascontiguousarray(wordnet_vectors(), dtype=np.float32)
    except DataUnavailableError as e:
        print(f"skipped: {e}")
        return
    n = min(args.n, len(texts) - args.queries)
    rng = np.random.default_rng(0)
    # Queries: glosses not in the store, with their vectors.
    q_idx = rng.choice(np.arange(n, len(texts)), size=args.queries, replace=False)
    queries = [(texts[i], vectors[i], f"agent{rng.integers(AGENTS)}") for i in q_idx]
    root = Path(tempfile.mkdtemp(prefix="memlane-bench-"))
    try:
        results = {"memlane": bench_memlane(root, texts[:n], vectors[:n], queries)}
        if not args.no_chroma:
            results["chromadb"] = bench_chroma(root, texts[:n], vectors[:n], queries)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    m = results["memlane"]
    c = results.get("chromadb")
    rows = [
        ("add_many, memories/s (returned)", "add", True, "{:,.0f}"),
        ("add_many, memories/s (fully indexed)", "indexed", True, "{:,.0f}"),
        ("search p50, unscoped (ms)", "unscoped_p50", False, "{:.3f}"),
        ("search p99, unscoped (ms)", "unscoped_p99", False, "{:.3f}"),
        ("search p50, one agent (ms)", "scoped_p50", False, "{:.3f}"),
        ("search p99, one agent (ms)", "scoped_p99", False, "{:.3f}"),
        ("open the store (s)", "open", False, "{:.3f}"),
    ]
    python = sys.version.split()[0]
    timed = f"{len(queries) - 20} queries timed after 20 for warm-up"
    print(f"\n{n:,} memories, {AGENTS} agents, k = {K}, {timed}, Python {python}")
    print("| measure | memlane | chromadb | memlane advantage |")
    print("| --- | ---: | ---: | ---: |")
    for label, key, higher_better, fmt in rows:
        mine = fmt.format(m[key])
        if c is None:
            print(f"| {label} | {mine} | - | - |")
            continue
        ratio = m[key] / c[key] if higher_better else c[key] / m[key]
        print(f"| {label} | {mine} | {fmt.format(c[key])} | {ratio:.1f}x |")


if __name__ == "__main__":
    main()
