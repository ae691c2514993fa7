"""HnswIndex through a store's life: removes, new records and new vectors for live
records, one call each, as ``Memory`` makes them.

What it measures, at the store's settings (M=16, ef_construction=100, int8+f16, cosine):
  - a base of ``--n`` WordNet gloss vectors, added in one call;
  - ``--ops`` operations, one index call each: three in four remove a live id and add a
    new one, one in four gives a live id a new vector. The ids removed are chosen at
    random, or with ``--pattern topic`` a topic at a time: the live ids nearest a random
    gloss, ``--topic`` of them, as a store forgets a subject;
  - each operation's time (median, p99 and max: the max is the call that clears the freed
    slots, or any call while others share the machine);
  - recall@10 over the live set against exact search at ef in {16, 32, 64, 144} (144 is
    the store's beam), beside an index built from the same live set in one call;
  - ``memory_bytes()`` (which counts the buffers' capacity) after the base and after the
    churn, and how much the process's resident set grew over the churn.

Vectors for new records and new versions come from the glosses outside the base and the
queries, in turn (taken again from the first once all are used: a duplicate vector is
fine, recall counts a hit within 1e-5 of the true 10th distance, as ``bench_hnsw.py``).
The figures are of the memlane that ``import memlane`` finds: run the script once per
build to compare builds (``PYTHONPATH=...``).

    python benches/bench_hnsw_churn.py [--n 100000] [--ops 20000] [--pattern random|topic]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

import numpy as np
import numpy.typing as npt

from bench_hnsw import exact, recall, rss_bytes, trim_heap

F32 = npt.NDArray[np.float32]

EFS = (16, 32, 64, 144)
SETTINGS: dict[str, Any] = {
    "metric": "cosine",
    "m": 16,
    "ef_construction": 100,
    "ef": 144,
    "precision": "int8+f16",
}
SEED = 20_240_601


def new_index(dim: int) -> Any:
    from memlane import HnswIndex

    return HnswIndex(dim=dim, **SETTINGS)


def churn(args: argparse.Namespace) -> None:
    import memlane
    from _data import wordnet_vectors

    vectors = wordnet_vectors()
    order = np.random.default_rng(SEED).permutation(len(vectors))
    n, nq = args.n, args.queries
    rows = np.asarray(vectors[np.sort(order[:n])], dtype=np.float32)
    queries = np.asarray(vectors[order[n : n + nq]], dtype=np.float32)
    spare = np.asarray(vectors[order[n + nq :]], dtype=np.float32)
    dim = rows.shape[1]
    print(
        f"memlane {memlane.__version__} from {os.path.dirname(memlane.__file__)}: "
        f"{n:,} WordNet vectors, {args.ops:,} operations ({args.pattern} removes), "
        f"{SETTINGS}; load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    # The model of the index: each live id's vector.
    model: dict[int, F32] = dict(enumerate(rows))
    ids = list(range(n))  # live ids, for O(1) random picks
    at = {i: i for i in ids}  # id -> position in `ids`
    index = new_index(dim)
    started = time.perf_counter()
    index.add(np.arange(n, dtype=np.uint64), rows)
    print(f"  base added in {time.perf_counter() - started:.1f} s", flush=True)
    memory_base = index.memory_bytes()
    trim_heap()
    rss_base = rss_bytes()

    rng = np.random.default_rng(SEED + 1)
    next_id, next_spare = n, 0
    topic: list[int] = []
    times: list[float] = []

    def take_spare() -> F32:
        nonlocal next_spare
        v = spare[next_spare % len(spare)]
        next_spare += 1
        return v

    def pick_removed() -> int:
        if args.pattern == "random":
            return ids[int(rng.integers(len(ids)))]
        while not topic or topic[-1] not in model:
            if not topic:
                live = np.array(ids, dtype=np.int64)
                centre = spare[int(rng.integers(len(spare)))]
                sims = np.stack([model[i] for i in live]) @ centre
                topic.extend(live[np.argsort(sims)[-args.topic :]].tolist())
            else:
                topic.pop()
        return topic.pop()

    for op in range(args.ops):
        if op % 4 == 3:
            i = ids[int(rng.integers(len(ids)))]
            v = take_spare()
            t = time.perf_counter()
            index.add([i], v[None])
            times.append(time.perf_counter() - t)
            model[i] = v
            continue
        gone, new, v = pick_removed(), next_id, take_spare()
        next_id += 1
        t = time.perf_counter()
        index.remove([gone])
        index.add([new], v[None])
        times.append(time.perf_counter() - t)
        del model[gone]
        model[new] = v
        ids[at[gone]] = new
        at[new] = at.pop(gone)

    live = np.array(sorted(model), dtype=np.uint64)
    data = np.stack([model[int(i)] for i in live])
    assert np.array_equal(np.sort(index.ids()), live)
    ms = np.array(times) * 1e3
    print(
        f"  one operation (ms): median {statistics.median(ms):.3f}, "
        f"p99 {np.percentile(ms, 99):.2f}, max {ms.max():.1f}"
    )
    mb = 1024 * 1024
    trim_heap()
    print(
        f"  memory_bytes: {memory_base / mb:.1f} MiB after the base, "
        f"{index.memory_bytes() / mb:.1f} MiB after the churn ({len(index):,} live); "
        f"resident set {(rss_bytes() - rss_base) / mb:+.1f} MiB over the churn"
    )
    fresh = new_index(dim)
    fresh.add(live, data)
    _, kth = exact(data, queries)
    print("  recall@10   ef:  " + "  ".join(f"{ef:>6}" for ef in EFS))
    for name, ix in (("after the churn", index), ("built fresh", fresh)):
        got = []
        for ef in EFS:
            labels, _ = ix.search(queries, k=10, ef=ef)
            # Ids to rows of `data` (a padded result, MISSING, to a row past the end).
            rows_of = np.searchsorted(live, labels).clip(0, len(live) - 1)
            rows_of[live[rows_of] != labels] = len(live)
            got.append(recall(rows_of, data, queries, kth))
        print(f"  {name:<16}" + "  ".join(f"{r:.4f}" for r in got), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=100_000, help="base vectors")
    parser.add_argument("--ops", type=int, default=20_000, help="operations after the base")
    parser.add_argument("--queries", type=int, default=1_000, help="query vectors")
    parser.add_argument("--pattern", choices=["random", "topic"], default="random")
    parser.add_argument("--topic", type=int, default=200, help="ids a topic removes")
    churn(parser.parse_args())


if __name__ == "__main__":
    main()
