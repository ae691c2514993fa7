"""Choosing a conversation option's weight through the engine: ``context_weight``
(contextual BM25 of conversation turns) or ``speaker_weight`` (the speaker field).

Each set of ``bench_quality.py`` (its stores, its cached vectors) searched through
``Memory.search`` with the option's weight in its grid (``GRIDS``) on the train halves;
the weight kept is the best mean nDCG@10 among those that lose no train set more than
``SAFE`` against the weight 0 (as ``bench_conversation_options.py`` chooses). Then the
test halves: the defaults (with the engine's default weight), the defaults with the
weight 0, the chosen weight when it differs, BM25 alone and the vectors alone. SciFact
has no sessions and no speakers, so every weight leaves it as it is.

    python benches/bench_context_weight.py [--option speaker_weight] [--sets scifact,...]
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np

from bench_ingest import CachedModel, DataUnavailableError, VectorCache
from bench_quality import SETS, Bench, print_table
from memlane import OnnxEmbedder, _core
from memlane.embeddings import TextTruncatedWarning

GRIDS = {
    "context_weight": (0.0, 0.1, 0.2, 0.3),
    "speaker_weight": (0.0, 0.25, 0.5, 0.75, 1.0),
}
SAFE = 0.005


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--option", choices=sorted(GRIDS), default="context_weight")
    parser.add_argument("--sets", default="scifact,conversations,chitchat,chitchat-keyword")
    args = parser.parse_args()
    option, weights = args.option, GRIDS[args.option]
    default = getattr(_core, f"DEFAULT_{option.upper()}")
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
        train[name] = {w: b.run({option: w}) for w in weights}
        print_table(
            f"{name} (train: {len(b.qs.docs):,} records, {len(b.qs.queries)} queries)",
            [(f"{option}={w}", m) for w, m in train[name].items()],
        )
        b.mem.close()
    safe = [w for w in weights if all(t[w][2] >= t[0.0][2] - SAFE for t in train.values())]
    chosen = max(safe, key=lambda w: float(np.mean([t[w][2] for t in train.values()])))
    print(f"\nchosen on train: {option}={chosen} (safe: {safe})")

    configs = [
        (f"defaults ({option}={default})", {}),
        (f"defaults, {option}=0", {option: 0.0}),
        ("BM25 alone (text)", {"mode": "text"}),
        (f"BM25 alone, {option}=0", {"mode": "text", option: 0.0}),
        ("vectors alone (vector)", {"mode": "vector"}),
    ]
    if chosen != default:
        configs.insert(2, (f"{option}={chosen}", {option: chosen}))
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
