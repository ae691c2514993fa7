"""memlane.compat against the libraries it stands in for, in one run.

hnswlib (``memlane.compat.hnswlib`` vs hnswlib 0.8), on the WordNet gloss vectors (384
dims, cosine, M=16, ef_construction=200, 2 threads), through the very same calls, so a
program's numbers change by its import line alone:
  - build: ``init_index`` + one ``add_items`` of the base;
  - recall@10 against exact search and QPS at ef in EFS, for all queries in one
    ``knn_query`` call (batch) and one query per call (single); then the QPS of each at the
    smallest ef whose recall reaches 0.95;
  - filtered search at ef=64 with 10% and 1% of the labels allowed: hnswlib's Python
    callable (``num_threads=1``, as hnswlib advises for callables), memlane's with the same
    callable, and memlane given the allowed labels themselves (its fast path).

rank_bm25 (``memlane.compat.rank_bm25`` vs rank-bm25 0.2), on SciFact (5,183 abstracts,
title + text, lowercased ``\\w+`` tokens; the 300 test queries):
  - indexing: ``BM25Okapi(corpus)`` from pre-tokenized documents;
  - ``get_scores`` per query, and ``get_top_n(n=10)``;
  - score parity: the largest relative difference over every score of every query.

Every timing runs ``--repeat`` times, alternating the two libraries; medians are printed
(the machine is shared). Ratios are peer time / memlane time (or memlane QPS / peer QPS):
above 1 means memlane is faster.

    python benches/bench_compat.py [--n 30000] [--queries 500] [--repeat 3]

Data: ``benches/_data.py`` (WordNet vectors, cached in ``benches/.cache/``) and
``../shared/data/scifact`` beside the repository; a missing data set or peer is skipped
with a message.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import numpy.typing as npt

import memlane.compat.hnswlib as memlane_hnswlib
import memlane.compat.rank_bm25 as memlane_rank_bm25

sys.path.insert(0, str(Path(__file__).resolve().parent))

REPO = Path(__file__).resolve().parents[1]
SCIFACT = REPO.parent / "shared" / "data" / "scifact"
K = 10
M = 16
EF_CONSTRUCTION = 200
EFS = (10, 16, 32, 64, 128, 256)
FILTER_EF = 64
FILTER_FRACTIONS = (0.10, 0.01)
TARGET = 0.95
THREADS = 2
SEED = 20_241_123

F32 = npt.NDArray[np.float32]


def peer(name: str) -> ModuleType | None:
    try:
        return __import__(name)
    except ImportError:
        print(
            f"{name} is not installed (pip install '.[dev]'); memlane runs alone", file=sys.stderr
        )
        return None


def package_version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "-"


def median_time(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def ratio(ours: float, theirs: float) -> str:
    return f"{ours / theirs:.2f}x" if theirs else "-"


def row(title: str, ours: str, theirs: str, rel: str = "") -> None:
    print(f"  {title:<44} {ours:>12} {theirs:>12} {rel:>9}")


# ---------------------------------------------------------------------------
# hnswlib


def wordnet(n: int, n_queries: int) -> tuple[F32, F32] | None:
    from _data import DataUnavailableError, wordnet_vectors

    try:
        vectors = wordnet_vectors()
    except DataUnavailableError as e:
        print(f"{e}; skipping the hnswlib comparison", file=sys.stderr)
        return None
    if n + n_queries > len(vectors):
        sys.exit(f"--n + --queries must be at most {len(vectors)}")
    order = np.random.default_rng(SEED).permutation(len(vectors))
    base = np.ascontiguousarray(vectors[np.sort(order[:n])], dtype=np.float32)
    queries = np.ascontiguousarray(vectors[order[n : n + n_queries]], dtype=np.float32)
    return base, queries


def exact(base: F32, queries: F32, allowed: npt.NDArray[np.int64] | None = None) -> F32:
    """The true k-th cosine distance of each query (over ``allowed`` rows when given)."""
    unit = base / np.linalg.norm(base, axis=1, keepdims=True)
    q = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    rows = unit if allowed is None else unit[allowed]
    kth = np.empty(len(q), dtype=np.float32)
    for start in range(0, len(q), 256):
        d = 1.0 - q[start : start + 256] @ rows.T
        kth[start : start + 256] = np.partition(d, K - 1, axis=1)[:, K - 1]
    return kth


def recall(labels: npt.NDArray[np.uint64], base: F32, queries: F32, kth: F32) -> float:
    """Share of results within 1e-5 of the true k-th distance (duplicates count as hits)."""
    unit = base / np.linalg.norm(base, axis=1, keepdims=True)
    q = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    d = 1.0 - np.einsum("qkd,qd->qk", unit[labels.astype(np.int64)], q)
    return float(np.mean(d <= kth[:, None] + 1e-5))


def bench_hnswlib(args: argparse.Namespace) -> None:
    ref = peer("hnswlib")
    data = wordnet(args.n, args.queries)
    if data is None:
        return
    base, queries = data
    libs: dict[str, ModuleType] = {"memlane": memlane_hnswlib}
    if ref is not None:
        libs["hnswlib"] = ref
    print(
        f"\nhnswlib: WordNet vectors, n={len(base):,}, dim={base.shape[1]}, {len(queries)} queries,"
        f" cosine, M={M}, ef_construction={EF_CONSTRUCTION}, {THREADS} threads,"
        f" hnswlib {package_version('hnswlib')}"
    )
    builds: dict[str, list[float]] = {name: [] for name in libs}
    index: dict[str, Any] = {}
    for _ in range(args.build_repeat):
        for name, lib in libs.items():
            start = time.perf_counter()
            p = lib.Index(space="cosine", dim=base.shape[1])
            p.init_index(max_elements=len(base), ef_construction=EF_CONSTRUCTION, M=M)
            p.set_num_threads(THREADS)
            p.add_items(base, np.arange(len(base)))
            builds[name].append(time.perf_counter() - start)
            index[name] = p
    build = {name: statistics.median(t) for name, t in builds.items()}

    kth = exact(base, queries)
    times: dict[tuple[str, int, str], list[float]] = {}
    recalls: dict[tuple[str, int], float] = {}
    for ef in EFS:
        for name in libs:
            index[name].set_ef(ef)
        for _ in range(args.repeat):
            for name in libs:
                p = index[name]
                start = time.perf_counter()
                labels, _ = p.knn_query(queries, k=K, num_threads=THREADS)
                times.setdefault((name, ef, "batch"), []).append(time.perf_counter() - start)
                start = time.perf_counter()
                for q in queries:
                    p.knn_query(q, k=K, num_threads=1)
                times.setdefault((name, ef, "single"), []).append(time.perf_counter() - start)
                recalls[name, ef] = recall(labels, base, queries, kth)
    sweep: dict[str, dict[int, dict[str, float]]] = {
        name: {
            ef: {
                "recall": recalls[name, ef],
                "batch_qps": len(queries) / statistics.median(times[name, ef, "batch"]),
                "single_qps": len(queries) / statistics.median(times[name, ef, "single"]),
            }
            for ef in EFS
        }
        for name in libs
    }

    names = list(libs)
    print(f"  {'':<44} {'memlane':>12} {names[-1] if len(names) > 1 else '-':>12} {'ratio':>9}")
    theirs_build = build.get("hnswlib", 0.0)
    row(
        "build (s, median)",
        f"{build['memlane']:.2f}",
        f"{theirs_build:.2f}" if theirs_build else "-",
        ratio(theirs_build, build["memlane"]),
    )
    for ef in EFS:
        m = sweep["memlane"][ef]
        h = sweep.get("hnswlib", {}).get(ef)
        row(
            f"ef={ef}: recall@10 / batch QPS / single QPS",
            f"{m['recall']:.3f}",
            f"{h['recall']:.3f}" if h else "-",
        )
        row(
            "",
            f"{m['batch_qps']:,.0f}",
            f"{h['batch_qps']:,.0f}" if h else "-",
            ratio(m["batch_qps"], h["batch_qps"]) if h else "",
        )
        row(
            "",
            f"{m['single_qps']:,.0f}",
            f"{h['single_qps']:,.0f}" if h else "-",
            ratio(m["single_qps"], h["single_qps"]) if h else "",
        )
    at_target: dict[str, tuple[int, dict[str, float]] | None] = {}
    for name in libs:
        hits = [(ef, c) for ef, c in sweep[name].items() if c["recall"] >= TARGET]
        at_target[name] = hits[0] if hits else None
    m_t, h_t = at_target["memlane"], at_target.get("hnswlib")
    for kind in ("batch_qps", "single_qps"):
        row(
            f"QPS at recall >= {TARGET} ({kind.split('_')[0]}; ef)",
            f"{m_t[1][kind]:,.0f} ({m_t[0]})" if m_t else "not reached",
            f"{h_t[1][kind]:,.0f} ({h_t[0]})" if h_t else "-",
            ratio(m_t[1][kind], h_t[1][kind]) if m_t and h_t else "",
        )

    rng = np.random.default_rng(SEED + 1)
    fq = queries[: args.filter_queries]
    for fraction in FILTER_FRACTIONS:
        allowed = np.sort(rng.choice(len(base), int(len(base) * fraction), replace=False))
        allowed_set = set(allowed.tolist())

        def keep(label: int, allowed_set: set[int] = allowed_set) -> bool:
            return label in allowed_set

        kth_f = exact(base, fq, allowed)
        runs: dict[str, list[float]] = {}
        found: dict[str, Any] = {}
        for name in libs:
            index[name].set_ef(FILTER_EF)
        ways: dict[str, Callable[[], Any]] = {
            "memlane, callable": lambda: index["memlane"].knn_query(fq, k=K, filter=keep),
            "memlane, allowed labels": lambda allowed=allowed: index["memlane"].knn_query(
                fq, k=K, filter=allowed
            ),
        }
        if "hnswlib" in index:
            ways["hnswlib, callable"] = lambda: index["hnswlib"].knn_query(
                fq, k=K, num_threads=1, filter=keep
            )
        for _ in range(args.repeat):
            for way, fn in ways.items():
                start = time.perf_counter()
                found[way] = fn()[0]
                runs.setdefault(way, []).append(time.perf_counter() - start)
        qps = {way: len(fq) / statistics.median(t) for way, t in runs.items()}
        ref_qps = qps.get("hnswlib, callable", 0.0)
        ref_recall = (
            f"{recall(found['hnswlib, callable'], base, fq, kth_f):.3f}" if ref_qps else "-"
        )
        for way in ("memlane, callable", "memlane, allowed labels"):
            row(
                f"filter {fraction:.0%}, {way}: recall",
                f"{recall(found[way], base, fq, kth_f):.3f}",
                ref_recall,
            )
            row(
                f"filter {fraction:.0%}, {way}: QPS",
                f"{qps[way]:,.0f}",
                f"{ref_qps:,.0f}" if ref_qps else "-",
                ratio(qps[way], ref_qps),
            )


# ---------------------------------------------------------------------------
# rank_bm25


def tokenize(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def bench_rank_bm25(args: argparse.Namespace) -> None:
    ref = peer("rank_bm25")
    if not (SCIFACT / "corpus.jsonl").is_file():
        print(f"SciFact not found at {SCIFACT}; skipping the rank_bm25 comparison", file=sys.stderr)
        return
    with (SCIFACT / "corpus.jsonl").open(encoding="utf-8") as f:
        corpus = [tokenize(f"{d['title']} {d['text']}") for d in map(json.loads, f)]
    texts = {}
    with (SCIFACT / "queries.jsonl").open(encoding="utf-8") as f:
        for q in map(json.loads, f):
            texts[q["_id"]] = q["text"]
    test_ids = dict.fromkeys(
        line.split("\t")[0]
        for line in (SCIFACT / "qrels" / "test.tsv").read_text().splitlines()[1:]
    )
    queries = [tokenize(texts[q]) for q in test_ids]
    libs: dict[str, Any] = {"memlane": memlane_rank_bm25}
    if ref is not None:
        libs["rank-bm25"] = ref
    print(
        f"\nrank_bm25: SciFact, {len(corpus):,} documents, {len(queries)} queries,"
        f" BM25Okapi(k1=1.5, b=0.75, epsilon=0.25), rank-bm25 {package_version('rank-bm25')}"
    )
    index_times: dict[str, list[float]] = {name: [] for name in libs}
    bm: dict[str, Any] = {}
    for _ in range(args.repeat):
        for name, lib in libs.items():
            start = time.perf_counter()
            bm[name] = lib.BM25Okapi(corpus)
            index_times[name].append(time.perf_counter() - start)
    per_query: dict[str, list[float]] = {name: [] for name in libs}
    top_n: dict[str, list[float]] = {name: [] for name in libs}
    scores: dict[str, list[np.ndarray]] = {name: [] for name in libs}
    for name in libs:
        for q in queries:  # warm up, and keep the scores for the parity check
            scores[name].append(bm[name].get_scores(q))
    for _ in range(args.repeat):
        for name in libs:
            for q in queries:
                start = time.perf_counter()
                bm[name].get_scores(q)
                per_query[name].append(time.perf_counter() - start)
            for q in queries[:50]:
                start = time.perf_counter()
                bm[name].get_top_n(q, corpus, n=10)
                top_n[name].append(time.perf_counter() - start)
    ours = "memlane"
    theirs = "rank-bm25" if ref is not None else None
    print(f"  {'':<44} {'memlane':>12} {theirs or '-':>12} {'ratio':>9}")

    def line(title: str, runs: dict[str, list[float]], unit: float, fmt: str) -> None:
        m = statistics.median(runs[ours])
        h = statistics.median(runs[theirs]) if theirs else 0.0
        row(title, format(m * unit, fmt), format(h * unit, fmt) if theirs else "-", ratio(h, m))

    line("indexing (s, median)", index_times, 1, ".3f")
    line("get_scores per query (ms, median)", per_query, 1e3, ".3f")
    line("get_top_n(n=10) per query (ms, median)", top_n, 1e3, ".3f")
    if theirs:
        worst = 0.0
        equal = 0
        agree = []
        for a, b in zip(scores[ours], scores[theirs], strict=True):
            scale = max(float(np.abs(b).max()), 1e-300)
            worst = max(worst, float(np.abs(a - b).max()) / scale)
            equal += int(np.array_equal(a, b))
            agree.append(len(set(np.argsort(a)[-10:]) & set(np.argsort(b)[-10:])) / 10)
        row("score parity: max relative difference", f"{worst:.1e}", "", "")
        row("score parity: queries with identical scores", f"{equal}/{len(queries)}", "", "")
        row("score parity: top-10 overlap", f"{np.mean(agree):.4f}", "", "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=30_000, help="HNSW base vectors")
    parser.add_argument("--queries", type=int, default=500, help="HNSW queries")
    parser.add_argument("--filter-queries", type=int, default=200, help="filtered queries")
    parser.add_argument("--repeat", type=int, default=3, help="runs per timing (median kept)")
    parser.add_argument("--build-repeat", type=int, default=1, help="HNSW builds per library")
    parser.add_argument("--only", choices=("hnswlib", "rank_bm25"), help="run one comparison")
    args = parser.parse_args()
    if args.only != "rank_bm25":
        bench_hnswlib(args)
    if args.only != "hnswlib":
        bench_rank_bm25(args)


if __name__ == "__main__":
    main()
