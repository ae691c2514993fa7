"""HnswIndex against hnswlib 0.8 on real sentence embeddings, in one run.

What it measures, for both libraries at M=16, ef_construction=200, cosine:
  - build: wall time to add the base on 2 threads, and memory (see below);
  - recall@10 against exact numpy search, and single-query QPS (a Python loop over the
    queries one at a time, one search thread) at ef in {16, 32, 64, 128, 256};
  - batch QPS: all queries in one call on 2 threads, at the same ef values;
  - the QPS of each at the smallest ef whose recall@10 reaches 0.95;
  - filtered search with 10% and 1% of the ids allowed, at ef=64 (memlane ``allowed=``,
    hnswlib its ``filter=`` Python callback, as its API offers), recall against exact
    search over the allowed ids.
Each timing loop runs ``--repeat`` times, alternating the two libraries, and the median
is printed: the machine is shared.

Memory: each library builds in a fresh Python process that loads the same data the same
way (the base as one float32 array in RAM) and imports only its own library; the index's
footprint is that process's resident set size after the build minus before it (from
/proc/self/status). The peak during the build (``ru_maxrss``, less the same baseline) and
memlane's own count (``memory_bytes()``) are printed too. Builds alternate between the two
libraries, ``--build-repeat`` times each, and the median is printed. The last build of
each is saved and the searches run on the loaded indexes, in this process.

Data: the WordNet 3.0 glosses embedded with the default embedder (384 dims, unit length;
``benches/_data.py``, cached in ``benches/.cache/``); a fixed shuffle gives ``--n`` base
vectors and ``--queries`` other glosses as queries. A result counts as a hit when its exact
distance is within 1e-5 of the true 10th nearest, so duplicate glosses (identical vectors)
do not count against either library.

    python benches/bench_hnsw.py [--n 100000] [--queries 1000] [--repeat 5] [--build-repeat 3]

Build memlane with ``maturin develop --release`` first; other profiles give other numbers.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import hashlib
import importlib.util
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]

K = 10
M = 16
EF_CONSTRUCTION = 200
EFS = (16, 32, 64, 128, 256)
FILTER_EF = 64
FILTER_FRACTIONS = (0.10, 0.01)
TARGET_RECALL = 0.95
THREADS = 2
SEED = 20_240_601
LIBRARIES = ("memlane", "hnswlib")


# ---------------------------------------------------------------------------
# The extension under test


def extension_build() -> tuple[str, str]:
    """The installed extension's digest, and which cargo profile under target/ built it."""
    import memlane._core

    so = Path(memlane._core.__file__)
    digest = hashlib.sha256(so.read_bytes()).hexdigest()
    target = Path(__file__).resolve().parents[1] / "target"
    for built in sorted(target.glob("*/lib_core.so")):
        if hashlib.sha256(built.read_bytes()).hexdigest() == digest:
            return digest, built.parent.name
    return digest, "unknown"


def pin_memlane(tmp: Path) -> Path:
    """Copy the memlane package (extension included) into `tmp` and import it from there,
    in this process and in the build workers: on a shared machine someone may rebuild the
    extension mid-run, and every figure must come from the same build."""
    spec = importlib.util.find_spec("memlane")
    if spec is None or spec.origin is None:
        sys.exit("memlane is not installed (maturin develop --release)")
    pinned = tmp / "pinned"
    shutil.copytree(
        Path(spec.origin).parent, pinned / "memlane", ignore=shutil.ignore_patterns("__pycache__")
    )
    sys.path.insert(0, str(pinned))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(pinned), os.environ.get("PYTHONPATH")) if p
    )
    return pinned


# ---------------------------------------------------------------------------
# Data


def load_data(n: int, n_queries: int) -> tuple[F32, F32]:
    """The base and the queries, float32, C-contiguous, in RAM (not memory-mapped)."""
    from _data import wordnet_vectors

    vectors = wordnet_vectors()
    if n + n_queries > len(vectors):
        sys.exit(f"--n + --queries must be at most {len(vectors)}, got {n + n_queries}")
    order = np.random.default_rng(SEED).permutation(len(vectors))
    base = np.ascontiguousarray(vectors[np.sort(order[:n])], dtype=np.float32)
    queries = np.ascontiguousarray(vectors[order[n : n + n_queries]], dtype=np.float32)
    del vectors  # drop the mapping, so its pages leave this process's RSS
    return base, queries


def exact(base: F32, queries: F32, allowed: I64 | None = None) -> tuple[I64, F32]:
    """Exact top-k by cosine distance: row numbers of `base` and the k-th distance."""
    unit = base / np.linalg.norm(base, axis=1, keepdims=True)
    q = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    rows = np.arange(len(base)) if allowed is None else np.sort(allowed)
    top = np.empty((len(q), K), dtype=np.int64)
    kth = np.empty(len(q), dtype=np.float32)
    for start in range(0, len(q), 256):
        d = 1.0 - q[start : start + 256] @ unit[rows].T
        part = np.argpartition(d, K - 1, axis=1)[:, :K]
        pd = np.take_along_axis(d, part, axis=1)
        order = np.argsort(pd, axis=1)
        top[start : start + 256] = rows[np.take_along_axis(part, order, axis=1)]
        kth[start : start + 256] = np.take_along_axis(pd, order, axis=1)[:, -1]
    return top, kth


def recall(labels: npt.NDArray[Any], base: F32, queries: F32, kth: F32) -> float:
    """Share of the k results whose exact distance is within 1e-5 of the true k-th."""
    unit = base / np.linalg.norm(base, axis=1, keepdims=True)
    q = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    hits = 0
    for row, query, bound in zip(labels, q, kth, strict=True):
        real = row[row < len(base)].astype(np.int64)
        d = 1.0 - unit[real] @ query
        hits += int(np.count_nonzero(d <= bound + 1e-5))
    return hits / (K * len(queries))


# ---------------------------------------------------------------------------
# Building, in a fresh process per library


def rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def reset_peak_rss() -> bool:
    """Resets VmHWM to the current RSS (Linux 4.0+); False where that is not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_rss_bytes() -> int:
    """VmHWM (the peak since the last reset), or ru_maxrss where /proc has none."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def trim_heap() -> None:
    """Hand freed heap pages back to the system (glibc), so RSS counts live memory only."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def build_worker(library: str, base_path: Path, out: Path, precision: str = "f32") -> None:
    """Load the base, build, report build time and memory as JSON, save the index."""
    base = np.load(base_path)
    n = len(base)
    ids = np.arange(n, dtype=np.uint64)
    if library == "memlane":
        from memlane import HnswIndex

        # Start the thread pool first: its threads outlive the build, hnswlib's do not.
        warm = np.random.default_rng(0).normal(size=(128, 4)).astype(np.float32)
        HnswIndex(dim=4).add(np.arange(128), warm)
    else:
        import hnswlib
    gc.collect()
    trim_heap()
    before = rss_bytes()
    peak_before = before if reset_peak_rss() else peak_rss_bytes()
    started = time.perf_counter()
    extra: dict[str, Any] = {}
    if library == "memlane":
        index: Any = HnswIndex(
            dim=base.shape[1],
            metric="cosine",
            m=M,
            ef_construction=EF_CONSTRUCTION,
            precision=precision,
        )
        index.add(ids, base)
        seconds = time.perf_counter() - started
        extra["memory_bytes"] = index.memory_bytes()
    else:
        index = hnswlib.Index(space="cosine", dim=base.shape[1])
        index.init_index(max_elements=n, M=M, ef_construction=EF_CONSTRUCTION, random_seed=SEED)
        index.add_items(base, ids, num_threads=THREADS)
        seconds = time.perf_counter() - started
    peak = peak_rss_bytes()
    gc.collect()
    trim_heap()
    after = rss_bytes()
    if library == "memlane":
        index.save(out)
    else:
        index.save_index(str(out))
    report = {
        "build_s": seconds,
        "rss_delta": after - before,
        "peak_delta": max(peak, after) - peak_before,
        **extra,
    }
    print(json.dumps(report), flush=True)


def build(library: str, base_path: Path, out: Path, precision: str) -> dict[str, Any]:
    env = {**os.environ, "RAYON_NUM_THREADS": str(THREADS), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, __file__, "--worker", library, "--base", str(base_path)]
    cmd += ["--out", str(out), "--precision", precision]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"{library} build failed:\n{done.stderr}")
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


# ---------------------------------------------------------------------------
# Searching


class Engine:
    """One library's index behind the calls the benchmark makes."""

    def __init__(self, library: str, path: Path, n: int, dim: int) -> None:
        self.library = library
        if library == "memlane":
            from memlane import HnswIndex

            self.index: Any = HnswIndex.load(path)
        else:
            import hnswlib

            self.index = hnswlib.Index(space="cosine", dim=dim)
            self.index.load_index(str(path), max_elements=n)

    def set_ef(self, ef: int) -> None:
        if self.library == "memlane":
            self.index.ef = ef
        else:
            self.index.set_ef(ef)

    def single(self, queries: F32) -> npt.NDArray[np.uint64]:
        """One query per call from a Python loop, one thread."""
        out = []
        if self.library == "memlane":
            search = self.index.search
            for q in queries:
                out.append(search(q, k=K)[0])
        else:
            self.index.set_num_threads(1)
            knn = self.index.knn_query
            for q in queries:
                out.append(knn(q, k=K)[0])
        return np.concatenate(out)

    def batch(self, queries: F32) -> npt.NDArray[np.uint64]:
        """All queries in one call, on THREADS threads."""
        if self.library == "memlane":
            labels: npt.NDArray[np.uint64] = self.index.search(queries, k=K)[0]
            return labels
        self.index.set_num_threads(THREADS)
        labels = self.index.knn_query(queries, k=K, num_threads=THREADS)[0]
        return labels

    def filtered(self, queries: F32, allowed: I64) -> npt.NDArray[np.uint64]:
        """One query per call, restricted to `allowed`, one thread."""
        out = []
        if self.library == "memlane":
            search = self.index.search
            ids = allowed.astype(np.uint64)
            for q in queries:
                out.append(search(q, k=K, allowed=ids)[0])
        else:
            self.index.set_num_threads(1)
            allowed_set = set(allowed.tolist())
            knn = self.index.knn_query
            for q in queries:
                out.append(knn(q, k=K, num_threads=1, filter=lambda label: label in allowed_set)[0])
        return np.concatenate(out)


def timed(
    engines: dict[str, Engine], run: Callable[[Engine], Any], repeat: int, count: int
) -> tuple[dict[str, float], dict[str, Any]]:
    """Median queries per second of `run` for each engine, alternating, after one untimed
    warm-up run each; and the results."""
    seconds: dict[str, list[float]] = {name: [] for name in engines}
    results: dict[str, Any] = {name: run(engine) for name, engine in engines.items()}
    for _ in range(repeat):
        for name, engine in engines.items():
            started = time.perf_counter()
            results[name] = run(engine)
            seconds[name].append(time.perf_counter() - started)
    return {name: count / statistics.median(s) for name, s in seconds.items()}, results


# ---------------------------------------------------------------------------
# Report


def ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


def verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=100_000, help="base vectors")
    parser.add_argument("--queries", type=int, default=1_000, help="query vectors")
    parser.add_argument("--repeat", type=int, default=5, help="runs per timing (median kept)")
    parser.add_argument("--build-repeat", type=int, default=3, help="builds per library")
    parser.add_argument(
        "--precision",
        choices=["f32", "f16", "int8", "int8+f16"],
        default="f32",
        help="memlane's vector storage (default f32, exact)",
    )
    parser.add_argument("--worker", choices=LIBRARIES, help=argparse.SUPPRESS)
    parser.add_argument("--base", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        build_worker(args.worker, args.base, args.out, args.precision)
        return
    with tempfile.TemporaryDirectory(prefix="bench-hnsw-") as tmp:
        pin_memlane(Path(tmp))
        run(args, Path(tmp))


def run(args: argparse.Namespace, tmp: Path) -> None:
    import memlane

    load_start = os.getloadavg()
    started = time.perf_counter()
    digest, profile = extension_build()
    if profile != "release":
        print(
            f"warning: the memlane extension is a {profile!r} build; run maturin develop --release"
        )
    base, queries = load_data(args.n, args.queries)
    n, dim = base.shape
    print(
        f"HnswIndex (memlane {memlane.__version__}) vs hnswlib {version('hnswlib')}: "
        f"{n:,} WordNet gloss vectors x {dim} dims, {len(queries):,} queries, k={K}, "
        f"M={M}, ef_construction={EF_CONSTRUCTION}, cosine, memlane precision={args.precision}"
    )
    print(
        f"memlane extension: {profile} profile, sha256 {digest[:12]} "
        "(a copy taken at the start, so a rebuild during the run changes nothing)"
    )
    print(
        f"machine: {os.cpu_count()} cores, load average {load_start[0]:.2f} at start; "
        f"timings are medians of {args.repeat} (builds of {args.build_repeat})",
        flush=True,
    )

    paths = {name: tmp / f"{name}.index" for name in LIBRARIES}
    base_path = tmp / "base.npy"
    np.save(base_path, base)
    builds: dict[str, list[dict[str, Any]]] = {name: [] for name in LIBRARIES}
    for _ in range(args.build_repeat):
        for name in LIBRARIES:
            builds[name].append(build(name, base_path, paths[name], args.precision))
            print(f"  built {name}: {builds[name][-1]['build_s']:.1f} s", flush=True)
    engines = {name: Engine(name, paths[name], n, dim) for name in LIBRARIES}

    def med(name: str, key: str) -> float:
        return statistics.median(b[key] for b in builds[name])

    mb = 1024 * 1024
    print(f"\nbuild on {THREADS} threads        memlane     hnswlib   memlane/hnswlib")
    rows = [
        ("time (s)", "build_s", 1.0),
        ("RSS after - before (MiB)", "rss_delta", mb),
        ("peak RSS - before (MiB)", "peak_delta", mb),
    ]
    for label, key, scale in rows:
        a, b = med("memlane", key) / scale, med("hnswlib", key) / scale
        print(f"  {label:<26}{a:>10.1f}  {b:>10.1f}  {ratio(a, b):>10.2f}")
    print(f"  {'memory_bytes() (MiB)':<26}{med('memlane', 'memory_bytes') / mb:>10.1f}")

    truth_top, kth = exact(base, queries)
    del truth_top
    print(
        "\n   ef | recall@10           | single-query QPS (1 thread)   "
        f"| batch QPS ({THREADS} threads)"
    )
    print("      |  memlane  hnswlib   |  memlane  hnswlib   ratio     |  memlane  hnswlib   ratio")
    per_ef: dict[int, dict[str, Any]] = {}
    for ef in EFS:
        for engine in engines.values():
            engine.set_ef(ef)
        single, labels = timed(engines, lambda e: e.single(queries), args.repeat, len(queries))
        batch, _ = timed(engines, lambda e: e.batch(queries), args.repeat, len(queries))
        rec = {name: recall(labels[name], base, queries, kth) for name in LIBRARIES}
        per_ef[ef] = {"recall": rec, "single": single, "batch": batch}
        print(
            f"  {ef:>3} |  {rec['memlane']:.4f}   {rec['hnswlib']:.4f}   "
            f"| {single['memlane']:>8.0f} {single['hnswlib']:>8.0f} "
            f"{ratio(single['memlane'], single['hnswlib']):>7.2f}     "
            f"| {batch['memlane']:>8.0f} {batch['hnswlib']:>8.0f} "
            f"{ratio(batch['memlane'], batch['hnswlib']):>7.2f}",
            flush=True,
        )

    at_target: dict[str, tuple[int, float] | None] = {}
    for name in LIBRARIES:
        ok = [ef for ef in EFS if per_ef[ef]["recall"][name] >= TARGET_RECALL]
        at_target[name] = (ok[0], per_ef[ok[0]]["single"][name]) if ok else None
    print(f"\nsingle-query QPS at the smallest ef with recall@10 >= {TARGET_RECALL}:")
    for name in LIBRARIES:
        hit = at_target[name]
        shown = f"ef={hit[0]}, {hit[1]:.0f} QPS" if hit else f"never (ef up to {EFS[-1]})"
        print(f"  {name:<8} {shown}")
    qps_ratio = float("nan")
    mem_hit, hnsw_hit = at_target["memlane"], at_target["hnswlib"]
    if mem_hit and hnsw_hit:
        qps_ratio = ratio(mem_hit[1], hnsw_hit[1])
        print(f"  ratio memlane/hnswlib: {qps_ratio:.2f}")

    rng = np.random.default_rng(SEED + 1)
    print(f"\nfiltered search at ef={FILTER_EF}, one query per call, 1 thread:")
    print("  allowed | recall@10 memlane  hnswlib | QPS memlane  hnswlib   ratio")
    filtered: dict[float, dict[str, Any]] = {}
    for engine in engines.values():
        engine.set_ef(FILTER_EF)
    for fraction in FILTER_FRACTIONS:
        allowed = rng.choice(n, max(K, round(fraction * n)), replace=False)
        _, fkth = exact(base, queries, allowed)
        qps, labels = timed(
            engines, lambda e, a=allowed: e.filtered(queries, a), args.repeat, len(queries)
        )
        rec = {name: recall(labels[name], base, queries, fkth) for name in LIBRARIES}
        outside = {
            name: int(np.count_nonzero(~np.isin(labels[name], allowed))) for name in LIBRARIES
        }
        if any(outside.values()):
            print(f"  results outside the filter: {outside}")
        filtered[fraction] = {"recall": rec, "qps": qps}
        print(
            f"  {fraction:>6.0%}  |        {rec['memlane']:.4f}   {rec['hnswlib']:.4f} "
            f"| {qps['memlane']:>11.0f} {qps['hnswlib']:>8.0f} "
            f"{ratio(qps['memlane'], qps['hnswlib']):>7.2f}",
            flush=True,
        )

    build_ratio = ratio(med("memlane", "build_s"), med("hnswlib", "build_s"))
    mem_ratio = ratio(med("memlane", "rss_delta"), med("hnswlib", "rss_delta"))
    one = filtered[0.01]
    filt_ratio = ratio(one["qps"]["memlane"], one["qps"]["hnswlib"])
    print("\ntargets (memlane/hnswlib):")
    print(
        f"  single-query QPS at recall >= {TARGET_RECALL}: {qps_ratio:.2f} (>= 1.5)  "
        f"{verdict(qps_ratio >= 1.5)}"
    )
    print(f"  build time: {build_ratio:.2f} (<= 0.8)  {verdict(build_ratio <= 0.8)}")
    print(f"  memory (RSS delta): {mem_ratio:.2f} (<= 1.0)  {verdict(mem_ratio <= 1.0)}")
    filt_ok = filt_ratio >= 5 and one["recall"]["memlane"] >= TARGET_RECALL
    print(
        f"  filtered QPS at 1%: {filt_ratio:.2f} (>= 5) with recall "
        f"{one['recall']['memlane']:.4f} (>= {TARGET_RECALL})  {verdict(filt_ok)}"
    )
    load_end = os.getloadavg()
    print(
        f"\ndone in {time.perf_counter() - started:.0f} s; load average {load_end[0]:.2f} at "
        f"the end (1-minute; {os.cpu_count()} cores)"
    )


if __name__ == "__main__":
    main()
