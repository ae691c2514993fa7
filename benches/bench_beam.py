"""What the search beam (``hnsw_ef``) buys and costs in a 100k store: recall@10 and p50.

For each ``--ef-construction`` (default 100, the store's), the first ``--n`` WordNet
glosses (default 100,000) go into one in-memory ``Memory`` with their vectors under the
default embedder (``benches/_data.py``). Then, on that one graph, for each beam in
``--ef`` (the engine's beam set between calls, so that every beam walks the same graph
with the same caches):

- recall@10 of a vector search against exact cosine search, the 1,000 glosses after the
  stored ones as queries (none of them in the store);
- p50 of ``Memory.search(text, k=10, query_embedding=v)`` for ``--queries`` SciFact
  claims in each mode (hybrid, the default; vector; text), every beam and mode taking
  turns on each claim; each call's text is new to the engine (trailing spaces, which the
  analyzer drops), so it retrieves anew.

    python benches/bench_beam.py [--n 100000] [--queries 400] [--ef 64,96,128,144]
        [--ef-construction 100,200]
"""

from __future__ import annotations

import argparse
import sys
import time
from functools import partial

import numpy as np

from _data import DataUnavailableError, wordnet_texts, wordnet_vectors
from _timing import percentiles
from bench_disk import WARMUP, K, exact_top, measure
from bench_user_latency import scifact_questions
from memlane import Memory, OnnxEmbedder

RECALL_QUERIES = 1_000
MODES = ("hybrid", "vector", "text")


def build(texts: list[str], vectors: np.ndarray, ef_construction: int) -> tuple[Memory, float]:
    started = time.perf_counter()
    mem = Memory(None, hnsw_ef_construction=ef_construction, track_access=False)
    for s in range(0, len(texts), 10_000):
        mem.add_many(
            {"id": str(i), "text": texts[i], "embedding": vectors[i]}
            for i in range(s, min(s + 10_000, len(texts)))
        )
    mem.wait_indexed()
    return mem, time.perf_counter() - started


def set_beam(mem: Memory, ef: int) -> None:
    # The store's beam is fixed at its open; the engine's setter changes it in place, so
    # every beam is measured on the same graph.
    mem._engine.set_ef(ef)


def vector_rows(mem: Memory, q: np.ndarray) -> list[int]:
    return [int(h.record.id) for h in mem.search("", k=K, query_embedding=q, mode="vector")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=400)
    parser.add_argument("--ef", default="64,96,128,144")
    parser.add_argument("--ef-construction", default="100")
    args = parser.parse_args()
    beams = [int(x) for x in args.ef.split(",")]
    constructions = [int(x) for x in args.ef_construction.split(",")]
    try:
        texts = wordnet_texts()
        vectors = np.ascontiguousarray(wordnet_vectors(), dtype=np.float32)
    except DataUnavailableError as exc:
        sys.exit(str(exc))
    n = args.n
    base, held_out = vectors[:n], vectors[n : n + RECALL_QUERIES]
    truth = exact_top(base, held_out)
    questions = scifact_questions()[: args.queries]
    embedder = OnnxEmbedder()
    question_vectors = [embedder.embed(q) for q in questions]

    print(f"{n:,} WordNet glosses, k = {K}, {len(questions)} SciFact claims timed, ms")
    print("| ef_construction | build (s) | ef | recall@10 | " + " | ".join(MODES) + " |")
    print("| ---: | ---: | ---: | ---: | " + " | ".join("---:" for _ in MODES) + " |")
    for construction in constructions:
        mem, seconds = build(texts[:n], base, construction)
        recalls = {}
        search = partial(vector_rows, mem)
        for ef in beams:
            set_beam(mem, ef)
            recalls[ef] = measure(search, held_out, truth)["recall"]
        runs = [(ef, mode) for ef in beams for mode in MODES]
        times: dict[tuple[int, str], list[float]] = {run: [] for run in runs}
        for i, (text, vec) in enumerate(zip(questions, question_vectors, strict=True)):
            numbered = list(enumerate(runs))
            turn = numbered[i % len(runs) :] + numbered[: i % len(runs)]
            for r, (ef, mode) in turn:
                set_beam(mem, ef)
                spaced = text + " " * (1 + r)
                started = time.perf_counter()
                mem.search(spaced, k=K, query_embedding=vec, mode=mode)
                times[(ef, mode)].append(time.perf_counter() - started)
        for ef in beams:
            p50s = [percentiles(times[(ef, m)][WARMUP:])[0] for m in MODES]
            cells = " | ".join(f"{p:.3f}" for p in p50s)
            print(f"| {construction} | {seconds:.1f} | {ef} | {recalls[ef]:.4f} | {cells} |")
        mem.close()


if __name__ == "__main__":
    main()
