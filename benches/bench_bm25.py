"""BM25 keyword search: memlane.BM25Index against bm25s and rank-bm25.

What it measures, in one run, with every system on the same texts and the same
scoring (Lucene BM25, k1=1.2, b=0.75, English stopwords, Snowball English stemmer):

- indexing time: raw texts to a searchable index, tokenisation included;
- single-query QPS: one query per call, k=10, tokenisation included;
- batch QPS: all queries in one call (memlane's search_batch on every core; bm25s
  with n_threads=-1, also every core);
- nDCG@10 on SciFact's 300 test queries (title + text), and top-10 agreement with bm25s;
- the latency of adding one document to a 100k-document index (memlane's add; bm25s
  has no incremental add, so its figure is re-indexing the 100,001 pre-tokenised
  documents, the cheapest way it has to take one more), and of removing one.

Data: SciFact and the 117,659 WordNet glosses from ``../shared/data/`` beside the repo
(1,000 glosses, drawn with a fixed seed, are the queries; the rest are indexed).
rank-bm25 (BM25Okapi, whose idf differs slightly from Lucene's) runs on SciFact only.
Not part of CI. Build with ``maturin develop --release`` first; then::

    python benches/bench_bm25.py [--repeat 3]

Each timing is the best of ``--repeat`` runs, and ratios compare figures of the same
run, so the shared machine's noise mostly cancels. Ratios are memlane's advantage:
above 1 means memlane is faster.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

import memlane

REPO = Path(__file__).resolve().parents[1]
SCIFACT = REPO.parent / "shared" / "data" / "scifact"
MISSING = 2**64 - 1


def best_of(repeat: int, fn: Callable[[], Any]) -> tuple[float, Any]:
    """The fastest of ``repeat`` runs of ``fn`` (seconds) and the last result."""
    best, out = math.inf, None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def ndcg_at_10(ranked: Sequence[str], relevant: dict[str, int]) -> float:
    dcg = sum(relevant.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranked[:10]))
    ideal = sorted(relevant.values(), reverse=True)[:10]
    return dcg / sum(r / math.log2(i + 2) for i, r in enumerate(ideal))


def overlap(a: list[list[int]], b: list[list[int]]) -> float:
    """Mean share of top-10 ids two systems have in common."""
    return float(
        np.mean([len(set(x) & set(y)) / max(len(x), 1) for x, y in zip(a, b, strict=True)])
    )


class Memlane:
    name = "memlane"

    def __init__(self) -> None:
        self.index = memlane.BM25Index(k1=1.2, b=0.75, language="english", stopwords=True)

    def build(self, texts: list[str]) -> None:
        self.index = memlane.BM25Index(k1=1.2, b=0.75, language="english", stopwords=True)
        self.index.add(np.arange(len(texts), dtype=np.uint64), texts)

    def search(self, query: str) -> list[int]:
        return [int(i) for i in self.index.search(query, k=10)[0]]

    def search_batch(self, queries: list[str]) -> list[list[int]]:
        ids, _ = self.index.search_batch(queries, k=10)
        return [[int(i) for i in row if i != MISSING] for row in ids]


class Bm25s:
    name = "bm25s"

    def __init__(self) -> None:
        import bm25s
        import Stemmer

        self.bm25s = bm25s
        self.stemmer = Stemmer.Stemmer("english")

    def tokenize(self, texts: list[str]) -> Any:
        return self.bm25s.tokenize(texts, stopwords="en", stemmer=self.stemmer, show_progress=False)

    def build(self, texts: list[str]) -> None:
        self.retriever = self.bm25s.BM25(
            k1=1.2, b=0.75, method="lucene", backend="numpy", csc_backend="numpy"
        )
        self.retriever.index(self.tokenize(texts), show_progress=False)

    def _retrieve(self, queries: list[str], n_threads: int) -> list[list[int]]:
        docs, _ = self.retriever.retrieve(
            self.tokenize(queries),
            k=10,
            show_progress=False,
            n_threads=n_threads,
            backend_selection="numpy",
        )
        return [[int(i) for i in row] for row in docs]

    def search(self, query: str) -> list[int]:
        return self._retrieve([query], 0)[0]

    def search_batch(self, queries: list[str]) -> list[list[int]]:
        return self._retrieve(queries, -1)


class RankBm25:
    name = "rank-bm25"

    def __init__(self) -> None:
        from rank_bm25 import BM25Okapi

        self.okapi = BM25Okapi
        self.tokens = Bm25s()

    def words(self, texts: list[str]) -> list[list[str]]:
        return self.tokens.bm25s.tokenize(
            texts,
            stopwords="en",
            stemmer=self.tokens.stemmer,
            show_progress=False,
            return_ids=False,
        )

    def build(self, texts: list[str]) -> None:
        self.index = self.okapi(self.words(texts), k1=1.2, b=0.75)

    def search(self, query: str) -> list[int]:
        scores = self.index.get_scores(self.words([query])[0])
        top = np.argpartition(-scores, 10)[:10]
        return [int(i) for i in top[np.argsort(-scores[top], kind="stable")]]

    def search_batch(self, queries: list[str]) -> list[list[int]]:
        return [self.search(q) for q in queries]


def run_dataset(
    label: str,
    texts: list[str],
    queries: list[str],
    systems: list[Any],
    repeat: int,
    judge: Callable[[list[list[int]]], float] | None,
) -> dict[str, dict[str, float]]:
    rows: dict[str, dict[str, float]] = {}
    results: dict[str, list[list[int]]] = {}
    print(f"\n{label}: {len(texts):,} documents, {len(queries):,} queries", file=sys.stderr)
    for system in systems:
        index_s, _ = best_of(repeat, lambda s=system: s.build(texts))
        single_s, _ = best_of(repeat, lambda s=system: [s.search(q) for q in queries])
        batch_s, ranked = best_of(repeat, lambda s=system: s.search_batch(queries))
        results[system.name] = ranked
        row = {
            "index_s": index_s,
            "qps": len(queries) / single_s,
            "batch_qps": len(queries) / batch_s,
        }
        if judge is not None:
            row["ndcg"] = judge(ranked)
        rows[system.name] = row
        print(f"  {system.name}: {row}", file=sys.stderr)
    for name, ranked in results.items():
        rows[name]["agree"] = overlap(ranked, results["bm25s"])
    return rows


def add_latency(texts: list[str], new: list[str], repeat: int) -> dict[str, float]:
    """Median and p99 seconds to add one document to, and remove one from, a 100k index."""
    index = memlane.BM25Index()
    index.add(np.arange(len(texts), dtype=np.uint64), texts)
    adds, removes = [], []
    for i, text in enumerate(new):
        ids = np.array([len(texts) + i], dtype=np.uint64)
        start = time.perf_counter()
        index.add(ids, [text])
        adds.append(time.perf_counter() - start)
    for i in range(len(new)):
        ids = np.array([i * 7], dtype=np.uint64)
        start = time.perf_counter()
        index.remove(ids)
        removes.append(time.perf_counter() - start)
    out = {
        "memlane_add_median": statistics.median(adds),
        "memlane_add_p99": float(np.percentile(adds, 99)),
        "memlane_remove_median": statistics.median(removes),
    }
    peer = Bm25s()
    tokens = peer.bm25s.tokenize(
        [*texts, new[0]], stopwords="en", stemmer=peer.stemmer, show_progress=False
    )

    def reindex() -> None:
        retriever = peer.bm25s.BM25(k1=1.2, b=0.75, method="lucene", backend="numpy")
        retriever.index(tokens, show_progress=False)

    out["bm25s_reindex"], _ = best_of(repeat, reindex)
    return out


def scifact() -> tuple[list[str], list[str], Callable[[list[list[int]]], float]] | None:
    if not (SCIFACT / "corpus.jsonl").is_file():
        print(f"SciFact not found at {SCIFACT}; skipping it", file=sys.stderr)
        return None
    corpus = [json.loads(line) for line in (SCIFACT / "corpus.jsonl").open(encoding="utf-8")]
    all_queries = {}
    for line in (SCIFACT / "queries.jsonl").open(encoding="utf-8"):
        q = json.loads(line)
        all_queries[q["_id"]] = q["text"]
    qrels: dict[str, dict[str, int]] = {}
    for line in (SCIFACT / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        qid, did, score = line.split("\t")
        qrels.setdefault(qid, {})[did] = int(score)
    doc_ids = [d["_id"] for d in corpus]
    texts = [f"{d['title']} {d['text']}" for d in corpus]
    qids = list(qrels)

    def judge(ranked: list[list[int]]) -> float:
        return float(
            np.mean(
                [
                    ndcg_at_10([doc_ids[j] for j in row], qrels[q])
                    for q, row in zip(qids, ranked, strict=True)
                ]
            )
        )

    return texts, [all_queries[q] for q in qids], judge


def wordnet() -> tuple[list[str], list[str]] | None:
    from _data import DataUnavailableError, wordnet_texts

    try:
        glosses = wordnet_texts()
    except DataUnavailableError as e:
        print(f"{e}; skipping WordNet", file=sys.stderr)
        return None
    held_out = set(np.random.default_rng(0).choice(len(glosses), 1000, replace=False).tolist())
    texts = [t for i, t in enumerate(glosses) if i not in held_out]
    queries = [glosses[i] for i in sorted(held_out)]
    return texts, queries


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "-"


def print_table(results: dict[str, dict[str, dict[str, float]]]) -> None:
    print(
        f"\n{'data set':<9} {'metric':<22} {'memlane':>10} {'bm25s':>10} {'rank-bm25':>10}"
        f" {'memlane vs bm25s':>17}"
    )
    for label, rows in results.items():
        m, p, r = rows["memlane"], rows["bm25s"], rows.get("rank-bm25", {})

        def cell(row: dict[str, float], key: str, fmt: str) -> str:
            return format(row[key], fmt) if key in row else "-"

        lines = [
            ("indexing time (s)", "index_s", ".3f", ratio(p["index_s"], m["index_s"])),
            ("single-query QPS", "qps", ",.0f", ratio(m["qps"], p["qps"])),
            ("batch QPS", "batch_qps", ",.0f", ratio(m["batch_qps"], p["batch_qps"])),
        ]
        if "ndcg" in m:
            lines.append(("nDCG@10", "ndcg", ".4f", f"{m['ndcg'] - p['ndcg']:+.4f}"))
        lines.append(("top-10 overlap w/ bm25s", "agree", ".3f", ""))
        for title, key, fmt, rel in lines:
            print(
                f"{label:<9} {title:<22} {cell(m, key, fmt):>10} {cell(p, key, fmt):>10}"
                f" {cell(r, key, fmt):>10} {rel:>17}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="timings are best of N runs")
    args = parser.parse_args()
    results: dict[str, dict[str, dict[str, float]]] = {}
    sf = scifact()
    wn = wordnet()
    # The loaded data sets are large object graphs; keep the cyclic collector
    # from walking them during the timings (it would tax every system alike).
    gc.collect()
    gc.freeze()
    if sf is not None:
        texts, queries, judge = sf
        systems = [Memlane(), Bm25s(), RankBm25()]
        results["SciFact"] = run_dataset("SciFact", texts, queries, systems, args.repeat, judge)
    if wn is not None:
        texts, queries = wn
        results["WordNet"] = run_dataset(
            "WordNet", texts, queries, [Memlane(), Bm25s()], args.repeat, None
        )
    if results:
        print_table(results)
    if wn is not None:
        texts, queries = wn
        lat = add_latency(texts[:100_000], texts[100_000:101_000], args.repeat)
        print(
            "\nOne document into a 100,000-document WordNet index:\n"
            f"  memlane add   median {lat['memlane_add_median'] * 1e6:8.1f} µs"
            f"   p99 {lat['memlane_add_p99'] * 1e6:8.1f} µs\n"
            f"  memlane remove median {lat['memlane_remove_median'] * 1e6:7.1f} µs\n"
            f"  bm25s re-index (pre-tokenised) {lat['bm25s_reindex'] * 1e3:8.1f} ms"
            f"   ratio {lat['bm25s_reindex'] / lat['memlane_add_median']:,.0f}x"
        )


if __name__ == "__main__":
    main()
