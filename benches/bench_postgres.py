"""memlane.Memory on PostgreSQL against the embedded store (WordNet glosses, 100 agents).

What it measures, with precomputed vectors (the default embedder's, cached by
``benches/_data.py``; no model runs during the benchmark):

- write throughput of 1, 2 and 4 processes, each calling ``add_many`` with batches
  of 1,000: the wall time until every call returned (durable in the database) and
  until every process has applied every other process's writes to its own indexes.
  On PostgreSQL the processes share one store; the embedded store admits one
  process, so there each process writes a store of its own (the aggregate is what
  the machine does, not a shared store).
- search latency p50/p99 (hybrid, k = 10, unscoped and scoped to one agent) on a
  100k store opened on each backend: searches never leave the process, so the two
  should match.
- the time a new process takes to open the 100k store: cold (indexes built from
  PostgreSQL), warm (a ``cache_dir`` snapshot plus the 1,000 changes made since),
  and the embedded store's open for reference.
- change propagation: one process adds a memory every 20 ms to the 100k store, a
  second one notes when each appears in its own indexes; delay p50/p99 from the
  moment the writer's ``add`` returned. Once with a watcher opened from a snapshot
  (steady state), once with one opened cold, which links 100k vectors into its
  graph in the background meanwhile.
- a follower catching up on a bulk load: one process opens the empty store and
  searches without pause while another loads ``--n`` memories; the loader's rate,
  the rate at which the follower held and had linked them all, and the follower's
  search latency p50/p99 throughout.

Without ``--url`` it starts a throwaway PostgreSQL cluster with durable settings
(``fsync`` and ``synchronous_commit`` on, as a production server), from
``tests/pg_server.py``. Run with a release build::

    python benches/bench_postgres.py [--url postgresql://...] [--n 100000] [--write-n 20000]
"""

from __future__ import annotations

import argparse
import gc
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from _data import DataUnavailableError, wordnet_texts, wordnet_vectors
from _timing import percentiles
from memlane import Memory

HERE = Path(__file__).resolve().parent
AGENTS = 100
BATCH = 1000
K = 10
PINGS = 200


def items(texts: list[str], vectors: np.ndarray, start: int, stop: int) -> list[dict[str, Any]]:
    return [
        {"text": texts[i], "agent_id": f"agent{i % AGENTS}", "embedding": vectors[i]}
        for i in range(start, stop)
    ]


def load() -> tuple[list[str], np.ndarray]:
    return wordnet_texts(), np.ascontiguousarray(wordnet_vectors(), dtype=np.float32)


# -- worker processes (this script, run with "_worker ROLE JSON") ---------------------------


def worker(role: str, cfg: dict[str, Any]) -> None:
    texts, vectors = load()
    # The data leaves some 240,000 container objects in this process; a full garbage
    # collection walks them in 0.2 s, which would fall on whichever write crosses the
    # collector's threshold. Frozen, they are never walked: what is timed is memlane's.
    gc.freeze()
    options = {"cache_dir": cfg["cache_dir"]} if cfg.get("cache_dir") else {}
    started = time.perf_counter()
    mem = Memory(cfg["target"], **options)
    opened = time.perf_counter() - started
    print("READY", opened, len(mem), flush=True)
    if role == "open":
        if cfg.get("link"):
            # A snapshot for later opens, with every vector linked into the graph.
            mem.wait_indexed()
        mem.close()
        return
    sys.stdin.readline()
    if role == "write":
        for s in range(cfg["start"], cfg["stop"], BATCH):
            mem.add_many(items(texts, vectors, s, min(s + BATCH, cfg["stop"])))
        print("DONE", time.monotonic(), flush=True)
        while len(mem) < cfg["total"]:
            time.sleep(0.005)
        print("CONVERGED", time.monotonic(), flush=True)
    elif role == "ping":
        for i in range(PINGS):
            j = cfg["start"] + i
            mem.add_many(items(texts, vectors, j, j + 1))
            print("ACK", time.monotonic(), flush=True)
            time.sleep(0.02)
    elif role == "follow":
        # Searches without pause while another process bulk-loads the store, until this
        # process holds every memory and has linked every vector into its graph.
        queries = cfg["queries"]
        i = 0
        while len(mem) < cfg["total"] or mem._sync.engine.pending():  # parked, not linked
            q = queries[i % len(queries)]
            t = time.perf_counter()
            mem.search(texts[q], k=K, query_embedding=vectors[q])
            print("LAT", time.perf_counter() - t, flush=True)
            i += 1
        print("CAUGHT", time.monotonic(), flush=True)
    elif role == "watch":
        base = len(mem)
        print("WATCHING", flush=True)
        seen = 0
        while seen < PINGS:
            n = len(mem) - base
            if n > seen:
                now = time.monotonic()
                for _ in range(n - seen):
                    print("SEEN", now, flush=True)
                seen = n
            time.sleep(0.0002)
    mem.close()


def spawn(role: str, **cfg: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, __file__, "_worker", role, json.dumps(cfg)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def ready(p: subprocess.Popen[str]) -> list[str]:
    assert p.stdout is not None
    line = p.stdout.readline().split()
    assert line and line[0] == "READY", line
    return line


def go(procs: list[subprocess.Popen[str]]) -> None:
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()


def lines(p: subprocess.Popen[str], kind: str) -> list[float]:
    assert p.stdout is not None
    return [float(line.split()[1]) for line in p.stdout if line.startswith(kind)]


# -- the measurements ------------------------------------------------------------------------


def write_throughput(targets: list[str], n: int) -> tuple[float, float]:
    """memories/s until every add returned, and until every process applied every write."""
    shared = len(set(targets)) == 1
    per = n // len(targets)
    procs = [
        spawn(
            "write",
            target=t,
            start=w * per,
            stop=(w + 1) * per,
            total=per * len(targets) if shared else per,
        )
        for w, t in enumerate(targets)
    ]
    for p in procs:
        ready(p)
    started = time.monotonic()
    go(procs)
    done: list[float] = []
    converged: list[float] = []
    for p in procs:
        assert p.stdout is not None
        for line in p.stdout:
            kind, at = line.split()
            (done if kind == "DONE" else converged).append(float(at))
        p.wait()
    total = per * len(targets)
    return total / (max(done) - started), total / (max(converged) - started)


def search_latency(mem: Memory, queries: list[tuple[str, np.ndarray, str]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for label, scoped in (("unscoped", False), ("scoped", True)):
        for text, v, agent in queries[:20]:
            mem.search(text, k=K, query_embedding=v, **({"agent_id": agent} if scoped else {}))
        samples = []
        for text, v, agent in queries[20:]:  # not the warm-up's (a repeat reuses its retrieval)
            kw = {"agent_id": agent} if scoped else {}
            t = time.perf_counter()
            hits = mem.search(text, k=K, query_embedding=v, **kw)
            samples.append(time.perf_counter() - t)
            assert len(hits) == K
        out[f"{label}_p50"], out[f"{label}_p99"] = percentiles(samples)
    return out


def follow_bulk_load(target: str, n: int, queries: np.ndarray) -> dict[str, Any]:
    """A follower catching up on a bulk load: it opens the empty store, another process
    loads ``n`` memories, the follower searches all along."""
    follower = spawn("follow", target=target, total=n, queries=[int(i) for i in queries])
    ready(follower)
    loader = spawn("write", target=target, start=0, stop=n, total=n)
    ready(loader)
    started = time.monotonic()
    go([follower, loader])
    samples, caught = [], 0.0
    assert follower.stdout is not None
    for line in follower.stdout:
        kind, value = line.split()
        if kind == "LAT":
            samples.append(float(value))
        else:
            caught = float(value)
    returned = lines(loader, "DONE")[0]
    follower.wait()
    loader.wait()
    return {
        "loaded": n / (returned - started),
        "caught_up": n / (caught - started),
        "searches": len(samples),
        "latency": percentiles(samples),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", help="a PostgreSQL server to use (a throwaway one otherwise)")
    parser.add_argument("--n", type=int, default=100_000, help="memories in the large store")
    parser.add_argument("--write-n", type=int, default=20_000, help="memories per write run")
    parser.add_argument("--queries", type=int, default=1000)
    args = parser.parse_args()
    try:
        texts, vectors = load()
    except DataUnavailableError as e:
        print(f"skipped: {e}")
        return
    server = None
    if args.url is None:
        sys.path.insert(0, str(HERE.parent / "tests"))
        from pg_server import PgServer, find_pg_bin

        bin_dir = find_pg_bin()
        if bin_dir is None:
            print("skipped: no PostgreSQL binaries (set MEMLANE_PG_BIN or pass --url)")
            return
        server = PgServer(bin_dir, durable=True).start()
    root = Path(tempfile.mkdtemp(prefix="memlane-bench-pg-"))
    base = args.url or server.url()  # type: ignore[union-attr]
    sep = "&" if "?" in base else "?"

    def pg(schema: str) -> str:
        return f"{base}{sep}schema=bench_{schema}"

    n = min(args.n, len(texts) - args.queries - PINGS - 1000)
    rng = np.random.default_rng(0)
    q_idx = rng.choice(np.arange(n + 1000 + PINGS, len(texts)), size=args.queries, replace=False)
    queries = [(texts[i], vectors[i], f"agent{rng.integers(AGENTS)}") for i in q_idx]
    res: dict[str, Any] = {}
    try:
        for procs in (1, 2, 4):
            res[f"pg_write_{procs}"] = write_throughput([pg(f"w{procs}")] * procs, args.write_n)
            dirs = [str(root / f"w{procs}-{i}") for i in range(procs)]
            res[f"emb_write_{procs}"] = write_throughput(dirs, args.write_n)
            print(procs, res[f"pg_write_{procs}"], res[f"emb_write_{procs}"], file=sys.stderr)

        big = pg("big")
        for name, target in (("pg", big), ("emb", str(root / "big"))):
            mem = Memory(target)
            t0 = time.perf_counter()
            for s in range(0, n, BATCH):
                mem.add_many(items(texts, vectors, s, min(s + BATCH, n)))
            res[f"{name}_load"] = n / (time.perf_counter() - t0)
            mem.wait_indexed()
            res[f"{name}_search"] = search_latency(mem, queries)
            mem.close()
            print(name, res[f"{name}_load"], res[f"{name}_search"], file=sys.stderr)

        res["follow"] = follow_bulk_load(pg("follow"), n, q_idx)
        print("follow", res["follow"], file=sys.stderr)

        cache, cache2 = root / "cache", root / "cache2"

        def opened(**cfg: Any) -> float:
            p = spawn("open", **cfg)
            seconds = float(ready(p)[1])
            p.wait()
            return seconds

        res["cold_open"] = opened(target=big)
        opened(target=big, cache_dir=str(cache), link=True)  # fills the cache
        writer = spawn("write", target=big, start=n, stop=n + 1000, total=n + 1000)
        ready(writer)
        go([writer])
        lines(writer, "CONVERGED")
        writer.wait()
        res["warm_open"] = opened(target=big, cache_dir=str(cache), link=True)
        res["emb_open"] = opened(target=str(root / "big"))
        shutil.copytree(cache, cache2)  # the writer's own

        for label, watch_cache in (("steady", str(cache)), ("linking", None)):
            watcher = spawn("watch", target=big, cache_dir=watch_cache)
            ready(watcher)
            pinger = spawn("ping", target=big, start=n + 1000, cache_dir=str(cache2))
            ready(pinger)
            go([watcher])
            assert watcher.stdout is not None
            assert watcher.stdout.readline().startswith("WATCHING")
            go([pinger])
            acks = lines(pinger, "ACK")
            seen = lines(watcher, "SEEN")
            pinger.wait()
            watcher.wait()
            res[f"delay_{label}"] = percentiles([s - a for a, s in zip(acks, seen, strict=True)])
    finally:
        shutil.rmtree(root, ignore_errors=True)
        if server is not None:
            server.stop()

    timed = f"{len(queries) - 20} queries timed after 20 for warm-up"
    print(f"\n{n:,} memories in the large store, {AGENTS} agents, k = {K}, {timed}")
    print("| measure | PostgreSQL | embedded |")
    print("| --- | ---: | ---: |")
    for procs in (1, 2, 4):
        p_acked, p_conv = res[f"pg_write_{procs}"]
        e_acked, _ = res[f"emb_write_{procs}"]
        print(
            f"| write, {procs} process{'es' if procs > 1 else ''}, memories/s "
            f"(returned; applied everywhere) | {p_acked:,.0f}; {p_conv:,.0f} | {e_acked:,.0f} |"
        )
    print(
        f"| load {n:,} from one process, memories/s | {res['pg_load']:,.0f} | "
        f"{res['emb_load']:,.0f} |"
    )
    for label, key in (("unscoped", "unscoped"), ("one agent", "scoped")):
        p, e = res["pg_search"], res["emb_search"]
        print(
            f"| hybrid search p50 / p99, {label} (ms) | {p[key + '_p50']:.3f} / "
            f"{p[key + '_p99']:.3f} | {e[key + '_p50']:.3f} / {e[key + '_p99']:.3f} |"
        )
    print(f"| open, cold: indexes from the database (s) | {res['cold_open']:.2f} | - |")
    print(
        f"| open, warm: snapshot cache + 1,000 changes (s) | {res['warm_open']:.2f} | "
        f"{res['emb_open']:.2f} |"
    )
    f = res["follow"]
    print(
        f"| bulk load of {n:,} by one process while another follows, memories/s "
        f"(loader's add_many returned; follower caught up and linked) | "
        f"{f['loaded']:,.0f}; {f['caught_up']:,.0f} | - |"
    )
    print(
        f"| the follower's hybrid search p50 / p99 while catching up "
        f"({f['searches']:,} searches, ms) | {f['latency'][0]:.2f} / {f['latency'][1]:.2f} | - |"
    )
    for label, what in (("steady", "watcher warm"), ("linking", "watcher linking its graph")):
        d50, d99 = res[f"delay_{label}"]
        print(f"| change propagation p50 / p99, {what} (ms) | {d50:.1f} / {d99:.1f} | - |")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_worker":
        worker(sys.argv[2], json.loads(sys.argv[3]))
    else:
        main()
