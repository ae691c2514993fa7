"""`memlane demo`: the README's main job, end to end on the default model.

It embeds the short memory-like texts the package ships, indexes them, and
prints the nearest neighbours of a few questions with the time each step took.
"""

from __future__ import annotations

import statistics
import time
from importlib import resources

import numpy as np

from memlane._core import HnswIndex
from memlane.embeddings import OnnxEmbedder

QUESTIONS = (
    "What display theme does Alice like?",
    "How do we ship a new release?",
    "Who cannot eat nuts?",
    "Was anything wrong with the backups?",
)


def demo_texts() -> list[str]:
    data = resources.files("memlane") / "data" / "demo_memories.txt"
    return [line for line in data.read_text(encoding="utf-8").splitlines() if line.strip()]


def run(k: int = 3) -> None:
    texts = demo_texts()
    t0 = time.perf_counter()
    embedder = OnnxEmbedder()
    vectors = embedder.embed_batch(texts)
    embed_s = time.perf_counter() - t0
    print(
        f"embedded {len(texts)} texts with {embedder.name} in {embed_s:.2f} s "
        f"({len(texts) / embed_s:.0f} texts/s, model load included)"
    )

    t0 = time.perf_counter()
    index = HnswIndex(dim=embedder.dimension, metric="cosine")
    index.add(np.arange(len(texts), dtype=np.uint64), vectors)
    print(f"built {index!r} in {(time.perf_counter() - t0) * 1e3:.1f} ms\n")

    for question in QUESTIONS:
        labels, distances = index.search(embedder.embed(question), k=k)
        print(f"? {question}")
        for label, distance in zip(labels[0], distances[0], strict=True):
            print(f"  {1.0 - float(distance):.3f}  {texts[int(label)]}")
        print()

    query = embedder.embed(QUESTIONS[0])
    timings = []
    for _ in range(2000):
        t0 = time.perf_counter()
        index.search(query, k=k)
        timings.append(time.perf_counter() - t0)
    print(
        f"search latency (k={k}, from Python): median {statistics.median(timings) * 1e6:.1f} us, "
        f"p99 {sorted(timings)[int(len(timings) * 0.99)] * 1e6:.1f} us"
    )
