"""Choosing the default similarity cut-off of ``search_knowledge`` and ``search_documents``.

What it does: writes SciFact's 5,183 abstracts as ``.txt`` files, ingests them with
``Memory.ingest`` (default chunker, default model through the vector cache of
``benches/.cache/``), then asks every query through the real API with no cut-off
(``threshold=None``, hybrid, ``explain=True``) and keeps each hit's cosine and
whether its document is judged relevant. A hit is relevant when the abstract it
comes from is in the query's qrels.

A cut-off ``t`` keeps the hits whose cosine is at least ``t``; the engine applies it
before it cuts to ``k`` (5, the default), so it is replayed on a pool of the best
``POOL`` hits: filter, then take the first ``k``. Over the grid 0.00, 0.01, ... the
criterion is: **the highest cut-off that keeps at least 99% of the relevant hits the
top 5 holds without one** (a default should cost an agent almost nothing it would have
found; what it removes is unrelated text that would fill the context). The 95% cut-off
and the F1-best one are shown beside it. They are chosen on the 809 *train* queries and
reported on the 300 *test* ones, there through the real API (not replayed). Off-topic
questions, 500 WordNet glosses (seeded sample), show what a cut-off is for: the share of
them left with no hit at all (exact from each one's best cosine, since the vector
retriever's first is always a candidate).

    python benches/tune_knowledge_threshold.py [--seed 7]
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench_ingest import (
    CachedModel,
    DataUnavailableError,
    write_corpus,
)
from bench_quality import Qrels, embed_all, load_scifact, ndcg_at
from memlane import Memory

K = 5
POOL = 50
# Shares of the relevant hits a default must keep; the first is the one memlane takes.
RECALL_KEPT = (0.99, 0.95)
GRID = [round(0.01 * i, 2) for i in range(0, 91)]
CURVE = [round(0.05 * i, 2) for i in range(4, 13)]
OFF_TOPIC = 500
WORDNET = Path(__file__).resolve().parents[1].parent / "shared/data/wordnet/wordnet30_glosses.jsonl"


@dataclass
class Pool:
    """One query's hits without a cut-off, best first: cosine and judged relevance."""

    cosine: np.ndarray
    relevant: np.ndarray


def doc_of(hit: Any) -> str:
    return Path(hit.record.metadata["source"]).stem


def pools(search: Any, queries: dict[str, str], qrels: Qrels, qvec: dict[str, Any]) -> list[Pool]:
    out = []
    for qid, gains in qrels.items():
        hits = search(queries[qid], k=POOL, threshold=None, explain=True, query_embedding=qvec[qid])
        cos = np.array([h.explain["cosine"] or 0.0 for h in hits], float)
        rel = np.array([gains.get(doc_of(h), 0) > 0 for h in hits], bool)
        out.append(Pool(cos, rel))
    return out


def replay(ps: list[Pool], t: float | None) -> dict[str, float]:
    """Figures of cut-off ``t`` over the top ``K``: relevant hits kept (of those the top K
    holds with no cut-off), irrelevant hits cut, precision, F1, queries with a relevant hit."""
    base_rel = base_irr = kept_rel = kept_irr = found = 0
    for p in ps:
        top_rel = p.relevant[:K]
        base_rel += int(top_rel.sum())
        base_irr += int((~top_rel).sum())
        keep = np.ones(len(p.cosine), bool) if t is None else p.cosine >= t
        kept = p.relevant[keep][:K]
        kept_rel += int(kept.sum())
        kept_irr += int((~kept).sum())
        found += int(kept.any())
    return figures(base_rel, base_irr, kept_rel, kept_irr, found, len(ps))


def figures(
    base_rel: int, base_irr: int, kept_rel: int, kept_irr: int, found: int, n: int
) -> dict[str, float]:
    recall = kept_rel / base_rel if base_rel else 0.0
    precision = kept_rel / (kept_rel + kept_irr) if kept_rel + kept_irr else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {
        "relevant_kept": recall,
        "irrelevant_cut": 1 - kept_irr / base_irr if base_irr else 0.0,
        "precision": precision,
        "f1": f1,
        "found": found / n,
    }


def choose(ps: list[Pool], target: float) -> float:
    """The highest cut-off of the grid keeping at least ``target`` of the relevant hits."""
    return max(t for t in GRID if replay(ps, t)["relevant_kept"] >= target)


def best_f1(ps: list[Pool]) -> float:
    return max(GRID, key=lambda t: replay(ps, t)["f1"])


def measured(
    search: Any,
    queries: dict[str, str],
    qrels: Qrels,
    qvec: dict[str, Any],
    base: list[Pool],
    t: float | None,
) -> dict[str, float]:
    """Cut-off ``t`` on ``qrels`` through the real API (not replayed)."""
    base_rel = sum(int(p.relevant[:K].sum()) for p in base)
    base_irr = sum(int((~p.relevant[:K]).sum()) for p in base)
    kept_rel = kept_irr = found = 0
    ndcg = []
    for qid, gains in qrels.items():
        hits = search(queries[qid], k=K, threshold=t, query_embedding=qvec[qid])
        rel = [gains.get(doc_of(h), 0) > 0 for h in hits]
        kept_rel += sum(rel)
        kept_irr += len(rel) - sum(rel)
        found += int(any(rel))
        ranked = list(dict.fromkeys(doc_of(h) for h in hits))
        ndcg.append(ndcg_at(ranked, gains, K))
    out = figures(base_rel, base_irr, kept_rel, kept_irr, found, len(qrels))
    out["ndcg@5"] = float(np.mean(ndcg))
    return out


def off_topic_best(search: Any, model: CachedModel, seed: int) -> np.ndarray:
    """Each off-topic question's best cosine: it gets no hit under any higher cut-off (the
    vector retriever's first is always a candidate, so this is exact)."""
    with WORDNET.open(encoding="utf-8") as f:
        glosses = [json.loads(line)["text"] for line in f if line.strip()]
    sample = random.Random(seed).sample(glosses, OFF_TOPIC)
    vectors = embed_all(model, sample, "off-topic queries")
    best = []
    for q, v in zip(sample, vectors, strict=True):
        (hit,) = search(q, k=1, mode="vector", threshold=None, explain=True, query_embedding=v)
        best.append(hit.explain["cosine"])
    return np.array(best)


def row(label: str, f: dict[str, float]) -> str:
    cells = [f"{f[c]:.3f}" for c in ("relevant_kept", "irrelevant_cut", "precision", "f1", "found")]
    return (
        f"| {label} | " + " | ".join(cells) + (f" | {f['ndcg@5']:.4f} |" if "ndcg@5" in f else " |")
    )


def tune(name: str, search: Any, data: tuple[Any, ...], model: CachedModel, seed: int) -> None:
    queries, train, test, qvec = data
    train_pools = pools(search, queries, train, qvec)
    test_pools = pools(search, queries, test, qvec)
    chosen = {target: choose(train_pools, target) for target in RECALL_KEPT}
    f1 = best_f1(train_pools)
    off = off_topic_best(search, model, seed) if WORDNET.is_file() else np.zeros(0)

    def no_hit(t: float | None) -> str:
        return "-" if t is None or not len(off) else f"{float((off < t).mean()):.3f}"

    print(f"\n## {name}: cosine cut-off on the top {K}, SciFact")
    for target, t in chosen.items():
        print(f"train: highest cut-off keeping >= {target:.0%} of the relevant hits: {t:.2f}")
    print(f"train: F1-best cut-off: {f1:.2f}")
    print(
        "\n| train (809 queries), replayed | relevant kept | irrelevant cut | precision | F1 "
        f"| with a hit | off-topic with none ({OFF_TOPIC}) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    curve = sorted({*CURVE, *chosen.values(), f1})
    for t in (None, *curve):
        print(row("none" if t is None else f"{t:.2f}", replay(train_pools, t)) + f" {no_hit(t)} |")
    print(
        "\n| test (300 queries), real API | relevant kept | irrelevant cut | precision | F1 "
        "| with a relevant hit | nDCG@5 | off-topic with none |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for t in (None, *sorted({*chosen.values(), f1})):
        figures = measured(search, queries, test, qvec, test_pools, t)
        print(row("none" if t is None else f"{t:.2f}", figures) + f" {no_hit(t)} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=7, help="seed of the off-topic sample")
    args = parser.parse_args()
    try:
        data = load_scifact()
    except DataUnavailableError as e:
        print(f"skipped: {e}")
        return
    docs, queries, train, test, model = data.docs, data.queries, data.train, data.test, data.model
    qids = sorted(set(train) | set(test))
    qvec = dict(zip(qids, embed_all(model, [queries[q] for q in qids], "queries"), strict=True))
    with tempfile.TemporaryDirectory(prefix="memlane-tune-threshold-") as tmp:
        folder = Path(tmp) / "scifact"
        write_corpus(docs, folder)
        mem = Memory(None, model, track_access=False)
        report = mem.ingest(folder, shared=True, progress=True)
        model.cache.save()
        print(report.summary())
        mem.wait_indexed()
        data = (queries, train, test, qvec)
        tune("search_knowledge (fragments)", mem.search_knowledge, data, model, args.seed)
        tune("search_documents (whole abstracts)", mem.search_documents, data, model, args.seed)
        model.cache.save()
        mem.close()


if __name__ == "__main__":
    main()
