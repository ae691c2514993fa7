"""Retrieval quality on BEIR SciFact through memlane's public API.

What it measures: nDCG@10 and Recall@100 over SciFact's 300 test queries, with
each abstract (title, blank line, text) stored as one record by ``Memory.add_many``
and searched by ``Memory.search`` in modes text (BM25), vector (all-MiniLM-L6-v2
int8, cosine) and hybrid (the two fused), scores being relevance alone. Fusion
settings are chosen on the 809 *train* queries (never on the test ones), then
reported on test. Then ``Memory.search`` exactly as a user calls it (default
settings, text in) on the same abstracts stored undated and dated: ``created_at``
spread uniformly over the past 730 days (seeded), so age and importance take part
in the score. With ``--knowledge`` it also ingests the abstracts as ``.txt``
files (default chunker) and ranks documents by their best fragment from
``Memory.search_knowledge``.

Reference (bm25s and this same model, measured on SciFact test): BM25 0.686,
dense 0.647, RRF of the two 0.715. Vectors are cached under ``benches/.cache/``
(shared with ``bench_ingest.py``); the first run embeds the 5,183 abstracts
(a few minutes on two cores).

    python benches/bench_quality.py [--knowledge] [--no-tuning] [--dated-only]
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import tempfile
import time
import warnings
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench_ingest import (
    SCIFACT,
    CachedModel,
    DataUnavailableError,
    VectorCache,
    document_text,
    scifact_corpus,
    write_corpus,
)
from memlane import Memory, OnnxEmbedder
from memlane.embeddings import TextTruncatedWarning
from memlane.knowledge import SEARCH_DEFAULTS

Qrels = dict[str, dict[str, int]]


def load_queries() -> dict[str, str]:
    with (SCIFACT / "queries.jsonl").open(encoding="utf-8") as f:
        return {q["_id"]: q["text"] for q in map(json.loads, f) if q}


def load_qrels(split: str) -> Qrels:
    qrels: Qrels = defaultdict(dict)
    with (SCIFACT / "qrels" / f"{split}.tsv").open(encoding="utf-8") as f:
        rows = csv.reader(f, delimiter="\t")
        next(rows)  # header
        for qid, did, score in rows:
            qrels[qid][did] = int(score)
    return dict(qrels)


@dataclass(frozen=True)
class SciFact:
    """SciFact as the quality benchmarks read it, and the default model behind the
    vector cache of ``benches/.cache/``."""

    docs: list[dict[str, str]]
    queries: dict[str, str]
    train: Qrels
    test: Qrels
    model: CachedModel


def load_scifact() -> SciFact:
    """The corpus, queries and both qrels splits (raises DataUnavailableError without
    ``../shared``). Abstracts longer than the model's 256 tokens are embedded from
    their start, as in the reference figures, so the truncation warning is off."""
    warnings.simplefilter("ignore", TextTruncatedWarning)
    docs = scifact_corpus()
    embedder = OnnxEmbedder()
    model = CachedModel(embedder, VectorCache(embedder.name, embedder.dimension))
    return SciFact(docs, load_queries(), load_qrels("train"), load_qrels("test"), model)


def ndcg_at(ranked: list[str], gains: dict[str, int], k: int = 10) -> float:
    dcg = sum(gains.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranked[:k]))
    ideal = sorted(gains.values(), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg else 0.0


def recall_at(ranked: list[str], gains: dict[str, int], k: int = 100) -> float:
    relevant = {d for d, g in gains.items() if g > 0}
    return len(relevant & set(ranked[:k])) / len(relevant) if relevant else 0.0


def embed_all(model: CachedModel, texts: list[str], what: str) -> np.ndarray:
    out = np.empty((len(texts), model.dimension), dtype=np.float32)
    started = time.perf_counter()
    for start in range(0, len(texts), 512):
        out[start : start + 512] = model.embed_batch(texts[start : start + 512])
        model.cache.save()
        done = min(start + 512, len(texts))
        print(
            f"\r  {what}: {done}/{len(texts)} ({time.perf_counter() - started:.0f} s)",
            end="",
            flush=True,
        )
    print()
    return out


def evaluate(
    search: Any, queries: dict[str, str], qrels: Qrels, qvec: dict[str, np.ndarray]
) -> tuple[float, float]:
    ndcg, recall = [], []
    for qid, gains in qrels.items():
        ranked = search(queries[qid], qvec[qid])
        ndcg.append(ndcg_at(ranked, gains))
        recall.append(recall_at(ranked, gains))
    return float(np.mean(ndcg)), float(np.mean(recall))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--knowledge", action="store_true", help="also via ingest + fragments")
    parser.add_argument(
        "--no-tuning", action="store_true", help="skip the sweep over fusion settings on train"
    )
    parser.add_argument(
        "--dated-only",
        action="store_true",
        help="only the default-settings runs, undated and dated",
    )
    parser.add_argument("--seed", type=int, default=7, help="seed of the dates")
    args = parser.parse_args()
    try:
        data = load_scifact()
    except DataUnavailableError as e:
        print(f"skipped: {e}")
        return
    docs, queries, train, test, model = data.docs, data.queries, data.train, data.test, data.model

    texts = [document_text(d) for d in docs]
    print(f"{len(docs)} documents, {len(test)} test and {len(train)} train queries")
    dvec = embed_all(model, texts, "documents")
    qids = sorted(set(test) | set(train))
    qmat = embed_all(model, [queries[q] for q in qids], "queries")
    qvec = dict(zip(qids, qmat, strict=True))

    defaults(model, docs, texts, dvec, queries, test, qvec, args.seed)
    if args.dated_only:
        model.cache.save()
        return

    mem = Memory(None, model, track_access=False)
    for start in range(0, len(docs), 1000):
        mem.add_many(
            {"id": d["_id"], "text": t, "embedding": v, "evergreen": True}
            for d, t, v in zip(
                docs[start : start + 1000],
                texts[start : start + 1000],
                dvec[start : start + 1000],
                strict=True,
            )
        )
    mem.wait_indexed()

    def searcher(mode: str, **options: Any) -> Any:
        def search(text: str, vector: np.ndarray) -> list[str]:
            hits = mem.search(
                text,
                100,
                mode=mode,  # type: ignore[arg-type]
                query_embedding=vector,
                weights={"relevance": 1.0},
                track_access=False,
                **options,
            )
            return [h.record.id for h in hits]

        return search

    configs: list[tuple[str, str, dict[str, Any]]] = [
        ("text (BM25)", "text", {}),
        ("vector (cosine)", "vector", {}),
        ("hybrid, RRF k=60 (Memory.search default)", "hybrid", {}),
    ]
    sweep: list[tuple[str, str, dict[str, Any]]] = []
    for candidates in (100, 200, 400):
        for k in (10, 20, 40, 60, 100):
            sweep.append(
                (
                    f"hybrid, RRF k={k}, {candidates} candidates",
                    "hybrid",
                    {"fusion": "rrf", "rrf_k": float(k), "candidates": candidates},
                )
            )
        for alpha in (0.3, 0.4, 0.5, 0.6, 0.7, 0.8):
            sweep.append(
                (
                    f"hybrid, weighted alpha={alpha}, {candidates} candidates",
                    "hybrid",
                    {"fusion": "weighted", "alpha": alpha, "candidates": candidates},
                )
            )

    print("\ntuning on train queries (nDCG@10):")
    best: tuple[float, str, str, dict[str, Any]] | None = None
    if args.no_tuning:
        sweep = [("search_knowledge defaults", "hybrid", dict(SEARCH_DEFAULTS))]
    for label, mode, options in sweep:
        score, _ = evaluate(searcher(mode, **options), queries, train, qvec)
        print(f"  {label}: {score:.4f}")
        if best is None or score > best[0]:
            best = (score, label, mode, options)
    assert best is not None
    print(f"best on train: {best[1]} ({best[0]:.4f})")

    rows = [*configs, (f"{best[1]} (tuned on train)", best[2], best[3])]
    rows.append((f"search_knowledge defaults {SEARCH_DEFAULTS}", "hybrid", dict(SEARCH_DEFAULTS)))
    print("\nSciFact test, 300 queries, one record per abstract:")
    print("| mode | nDCG@10 | Recall@100 |")
    print("|---|---:|---:|")
    for label, mode, options in rows:
        ndcg, recall = evaluate(searcher(mode, **options), queries, test, qvec)
        print(f"| {label} | {ndcg:.4f} | {recall:.4f} |", flush=True)
    mem.close()

    if args.knowledge:
        knowledge(model, docs, queries, test, qvec)
    model.cache.save()


def defaults(
    model: CachedModel,
    docs: list[dict[str, str]],
    texts: list[str],
    dvec: np.ndarray,
    queries: dict[str, str],
    test: Qrels,
    qvec: dict[str, np.ndarray],
    seed: int,
) -> None:
    """``Memory.search`` with its default settings on an undated and a dated store.

    The query text goes in as a user's would; its vector comes from the same model
    (precomputed, so the run takes seconds). Access tracking stays on, as by default:
    every search refreshes what it returns, as it would in use.
    """
    now = time.time()
    dates = now - np.random.default_rng(seed).uniform(0, 730 * 86400.0, size=len(docs))
    print("\nMemory.search as a user calls it (SciFact test, 300 queries):")
    print("| store | settings | nDCG@10 | Recall@100 |")
    print("|---|---|---:|---:|")
    runs: list[tuple[str, str, dict[str, Any]]] = [
        ("undated", "defaults", {}),
        ("dated (730 days)", "defaults", {}),
        ("dated (730 days)", "decay=0.001", {"decay": 0.001}),
        ("dated (730 days)", "relevance only", {"weights": {"relevance": 1.0}}),
        (
            "dated (730 days)",
            "relevance only, RRF k=60",
            {"weights": {"relevance": 1.0}, "fusion": "rrf"},
        ),
    ]
    for store, label, options in runs:
        mem = Memory(None, model)
        dated = store != "undated"
        mem.add_many(
            {
                "id": d["_id"],
                "text": t,
                "embedding": v,
                **({"created_at": float(c)} if dated else {}),
            }
            for d, t, v, c in zip(docs, texts, dvec, dates, strict=True)
        )
        mem.wait_indexed()

        def search(text: str, vector: np.ndarray, mem: Memory = mem, o: Any = options) -> list[str]:
            return [h.record.id for h in mem.search(text, 100, query_embedding=vector, **o)]

        ndcg, recall = evaluate(search, queries, test, qvec)
        print(f"| {store} | {label} | {ndcg:.4f} | {recall:.4f} |", flush=True)
        mem.close()


def knowledge(
    model: CachedModel,
    docs: list[dict[str, str]],
    queries: dict[str, str],
    test: Qrels,
    qvec: dict[str, np.ndarray],
) -> None:
    """The same through ingest + search_knowledge: a document ranks by its best fragment."""
    with tempfile.TemporaryDirectory(prefix="memlane-bench-quality-") as tmp:
        folder = Path(tmp) / "scifact"
        write_corpus(docs, folder)
        mem = Memory(None, model, track_access=False)
        report = mem.ingest(folder, shared=True, progress=True)
        print(report.summary())
        mem.wait_indexed()
        model.cache.save()

        def searcher(mode: str) -> Any:
            def search(text: str, vector: np.ndarray) -> list[str]:
                hits = mem.search_knowledge(
                    text,
                    k=400,
                    mode=mode,  # type: ignore[arg-type]
                    threshold=None,  # a ranking measure: no cut-off
                    query_embedding=vector,
                )
                ranked: list[str] = []
                for h in hits:
                    doc = Path(h.record.metadata["source"]).stem
                    if doc not in ranked:
                        ranked.append(doc)
                return ranked

            return search

        print("\nSciFact test via ingest + search_knowledge (fragments, best per document):")
        print("| mode | nDCG@10 | Recall@100 |")
        print("|---|---:|---:|")
        for mode in ("text", "vector", "hybrid"):
            ndcg, recall = evaluate(searcher(mode), queries, test, qvec)
            print(f"| {mode} | {ndcg:.4f} | {recall:.4f} |", flush=True)
        mem.close()


if __name__ == "__main__":
    main()
