"""Choosing ``context_weight`` (contextual BM25 of conversation turns) through the engine.

Each set of ``bench_quality.py`` (its stores, its cached vectors) searched through
``Memory.search`` with ``context_weight`` in ``WEIGHTS`` on the train halves; the
weight kept is the best mean nDCG@10 among those that lose no train set more than
``SAFE`` against ``context_weight=0`` (as ``bench_conversation_options.py`` chooses).
Then the test halves: the defaults (with the engine's ``DEFAULT_CONTEXT_WEIGHT``), the
defaults without context, the chosen weight when it differs, BM25 alone and the vectors
alone. SciFact has no sessions, so every weight leaves it as it is.

    python benches/bench_context_weight.py [--sets scifact,conversations,...]
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np

from bench_ingest import CachedModel, DataUnavailableError, VectorCache
from bench_quality import SETS, Bench, print_table
from memlane import OnnxEmbedder
from memlane._core import DEFAULT_CONTEXT_WEIGHT
from memlane.embeddings import TextTruncatedWarning

WEIGHTS = (0.0, 0.1, 0.2, 0.3)
SAFE = 0.005


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", default="scifact,conversations,chitchat,chitchat-keyword")
    args = parser.parse_args()
    warnings.simplefilter("ignore", TextTruncatedWarning)
    embedder = OnnxEmbedder()
    model = CachedModel(embedder, VectorCache(embedder.name, embedder.dimension))
    names = [n.strip() for n in args.sets.split(",") if n.strip()]

    def build(name: str, split: str) -> Bench | None:
        try:
            return Bench(SETS[name](split), model)
        except (DataUnavailableError, ModuleNotFoundError) as e:
            print(f"{name}: skipped ({e})")
            return None

    train: dict[str, dict[float, tuple[float, float, float]]] = {}
    for name in names:
        b = build(name, "train")
        if b is None:
            continue
        train[name] = {w: b.run({"context_weight": w}) for w in WEIGHTS}
        print_table(
            f"{name} (train: {len(b.qs.docs):,} records, {len(b.qs.queries)} queries)",
            [(f"context_weight={w}", m) for w, m in train[name].items()],
        )
        b.mem.close()
    safe = [w for w in WEIGHTS if all(t[w][2] >= t[0.0][2] - SAFE for t in train.values())]
    chosen = max(safe, key=lambda w: float(np.mean([t[w][2] for t in train.values()])))
    print(f"\nchosen on train: context_weight={chosen} (safe: {safe})")

    configs = [
        (f"defaults (context_weight={DEFAULT_CONTEXT_WEIGHT})", {}),
        ("defaults, context_weight=0", {"context_weight": 0.0}),
        ("BM25 alone (text)", {"mode": "text"}),
        ("BM25 alone, context_weight=0", {"mode": "text", "context_weight": 0.0}),
        ("vectors alone (vector)", {"mode": "vector"}),
    ]
    if chosen != DEFAULT_CONTEXT_WEIGHT:
        configs.insert(2, (f"context_weight={chosen}", {"context_weight": chosen}))
    for name in names:
        b = build(name, "test")
        if b is None:
            continue
        print_table(
            f"{name} (test: {len(b.qs.docs):,} records, {len(b.qs.queries)} queries)",
            [(label, b.run(options)) for label, options in configs],
        )
        b.mem.close()
    model.cache.save()


if __name__ == "__main__":
    main()
