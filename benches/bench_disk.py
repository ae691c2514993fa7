"""A store's bytes at rest and its default vector search, beside chromadb and LanceDB
(issue 37), in one run with the same vectors.

Each system stores the first ``--n`` WordNet glosses (default 100,000) with their
vectors under the default embedder (``benches/_data.py``) and the same metadata (an
agent id), each with its defaults: memlane's ``Memory.add_many`` in batches of 10,000
then ``wait_indexed``; chromadb's persistent client (cosine HNSW); LanceDB's table
(no vector index: its default, an exact scan). Then, for each:

- bytes right after the build (the store still open) and at rest (the whole directory
  once the store is closed), and its largest files;
- build: seconds until the store is written and (memlane) every vector linked;
- vector search at k = 10 with a precomputed query vector: p50 over ``--queries``
  glosses that are not in the store (rows ``n`` on), after a warm-up of 20, and
  recall@10 against exact cosine search over the stored vectors. memlane's hits are
  whole records (text, metadata, score); the peers are asked both ways: ids only, and
  with the texts and metadata (chromadb's default ``include``). The queries run twice:
  straight after the open, and again after ``SETTLE`` idle seconds.

``--ef`` gives memlane search beams to measure beside the default (the store reopened
with ``hnsw_ef``), which is how the default was chosen.

    python benches/bench_disk.py [--n 100000] [--queries 1000] [--ef 64 96 128]
        [--only memlane chromadb lancedb] [--dir PATH] [--keep]
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from _data import DataUnavailableError, wordnet_texts, wordnet_vectors
from _timing import percentiles

K = 10
WARMUP = 20
# Seconds each store is left idle before the queries run again ("settled"): memlane reads
# its records into its row cache in a pause between searches (about 3 s at 100k here).
SETTLE = 8.0
BATCH = 10_000
AGENTS = 1000
F32 = npt.NDArray[np.float32]
MIB = 2**20


def tree_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def largest(path: Path, count: int = 3) -> str:
    files = sorted((p for p in path.rglob("*") if p.is_file()), key=lambda p: -p.stat().st_size)
    return ", ".join(f"{p.name} {p.stat().st_size / MIB:.1f}" for p in files[:count])


def exact_top(base: F32, queries: F32) -> npt.NDArray[np.int64]:
    """Each query's K nearest stored rows by cosine similarity."""
    unit = base / np.linalg.norm(base, axis=1, keepdims=True)
    out = np.empty((len(queries), K), dtype=np.int64)
    for start in range(0, len(queries), 100):
        sims = queries[start : start + 100] @ unit.T
        out[start : start + 100] = np.argpartition(-sims, K, axis=1)[:, :K]
    return out


def measure(
    search: Callable[[F32], list[int]], queries: F32, truth: npt.NDArray[np.int64]
) -> dict[str, float]:
    """p50 of ``search`` (rows it found, best first) over the queries after the warm-up,
    and recall@K over them all."""
    for q in queries[:WARMUP]:
        search(q)
    samples, found = [], 0
    for i, q in enumerate(queries):
        t = time.perf_counter()
        rows = search(q)
        samples.append(time.perf_counter() - t)
        found += len(set(rows) & set(truth[i].tolist()))
    p50, _ = percentiles(samples[WARMUP:])
    return {"p50_ms": p50, "recall": found / (K * len(queries))}


def memlane_store(root: Path, texts: list[str], base: F32) -> dict[str, Any]:
    from memlane import Memory

    store = root / "memlane"
    started = time.perf_counter()
    with Memory(store) as mem:
        ids: list[str] = []
        for s in range(0, len(base), BATCH):
            added = mem.add_many(
                [
                    {"text": texts[i], "agent_id": f"agent{i % AGENTS}", "embedding": base[i]}
                    for i in range(s, min(s + BATCH, len(base)))
                ]
            )
            ids.extend(r.id for r in added)
        mem.wait_indexed()
        built = time.perf_counter() - started
        after_build = tree_bytes(store)
    return {
        "path": store,
        "build_s": built,
        "build_bytes": after_build,
        "rows": {rid: row for row, rid in enumerate(ids)},
    }


def memlane_search(built: dict[str, Any], ef: int | None) -> tuple[Any, Callable[[F32], list[int]]]:
    from memlane import Memory

    mem = Memory(built["path"], **({} if ef is None else {"hnsw_ef": ef}))
    rows = built["rows"]

    def search(q: F32) -> list[int]:
        hits = mem.search("", k=K, mode="vector", query_embedding=q, track_access=False)
        return [rows[h.record.id] for h in hits]

    return mem, search


def _named(opened: tuple[Any, Callable[[F32], list[int]]]) -> tuple[Any, dict[str, Any]]:
    """memlane's one search (a hit is the whole record: text, metadata, score)."""
    handle, search = opened
    return handle, {"default (records)": search}


def chroma_store(root: Path, texts: list[str], base: F32) -> dict[str, Any]:
    import chromadb
    from chromadb.config import Settings

    path = root / "chroma"
    started = time.perf_counter()
    client = chromadb.PersistentClient(
        path=str(path), settings=Settings(anonymized_telemetry=False)
    )
    col = client.create_collection("memories", metadata={"hnsw:space": "cosine"})
    step = min(BATCH, client.get_max_batch_size())
    for s in range(0, len(base), step):
        ids = range(s, min(s + step, len(base)))
        col.add(
            ids=[str(i) for i in ids],
            embeddings=base[s : s + len(ids)],
            documents=[texts[i] for i in ids],
            metadatas=[{"agent_id": f"agent{i % AGENTS}"} for i in ids],
        )
    built = time.perf_counter() - started
    after_build = tree_bytes(path)
    del col, client
    gc.collect()
    return {"path": path, "build_s": built, "build_bytes": after_build}


def chroma_search(built: dict[str, Any]) -> tuple[Any, dict[str, Callable[[F32], list[int]]]]:
    import chromadb
    from chromadb.config import Settings

    client = chromadb.PersistentClient(
        path=str(built["path"]), settings=Settings(anonymized_telemetry=False)
    )
    col = client.get_collection("memories")

    def ids_only(q: F32) -> list[int]:
        res = col.query(query_embeddings=[q], n_results=K, include=[])
        return [int(i) for i in res["ids"][0]]

    def records(q: F32) -> list[int]:
        res = col.query(query_embeddings=[q], n_results=K)  # its default include
        return [int(i) for i in res["ids"][0]]

    return client, {"ids only": ids_only, "default (texts, metadata)": records}


def lance_store(root: Path, texts: list[str], base: F32) -> dict[str, Any]:
    import lancedb
    import pyarrow as pa

    path = root / "lance"
    started = time.perf_counter()
    db = lancedb.connect(str(path))
    table = None
    for s in range(0, len(base), BATCH):
        ids = range(s, min(s + BATCH, len(base)))
        batch = pa.table(
            {
                "id": pa.array(list(ids), pa.int64()),
                "text": [texts[i] for i in ids],
                "agent_id": [f"agent{i % AGENTS}" for i in ids],
                "vector": pa.FixedSizeListArray.from_arrays(
                    pa.array(base[s : s + len(ids)].ravel()), base.shape[1]
                ),
            }
        )
        if table is None:
            table = db.create_table("memories", batch)
        else:
            table.add(batch)
    built = time.perf_counter() - started
    after_build = tree_bytes(path)
    del table, db
    gc.collect()
    return {"path": path, "build_s": built, "build_bytes": after_build}


def lance_search(built: dict[str, Any]) -> tuple[Any, dict[str, Callable[[F32], list[int]]]]:
    import lancedb

    table = lancedb.connect(str(built["path"])).open_table("memories")

    def search(q: F32, columns: list[str]) -> list[int]:
        res = table.search(q).metric("cosine").select(columns).limit(K).to_list()
        return [int(r["id"]) for r in res]

    return table, {
        "ids only": lambda q: search(q, ["id"]),
        "texts, metadata": lambda q: search(q, ["id", "text", "agent_id"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=100_000, help="records to store")
    parser.add_argument("--queries", type=int, default=1000, help="queries not in the store")
    parser.add_argument("--ef", type=int, nargs="*", default=[], help="memlane beams to add")
    parser.add_argument(
        "--only", nargs="*", default=["memlane", "chromadb", "lancedb"], help="systems to run"
    )
    parser.add_argument("--dir", type=Path, help="where to build (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the stores afterwards")
    args = parser.parse_args()
    try:
        texts = wordnet_texts()
        vectors = wordnet_vectors()
    except DataUnavailableError as e:
        print(f"skipped: {e}")
        return
    if args.n + args.queries > len(vectors):
        parser.error(f"--n plus --queries must be at most {len(vectors):,}")
    base = np.ascontiguousarray(vectors[: args.n], dtype=np.float32)
    queries = np.ascontiguousarray(vectors[args.n : args.n + args.queries], dtype=np.float32)
    truth = exact_top(base, queries)
    root = args.dir or Path(tempfile.mkdtemp(prefix="memlane-disk-"))
    root.mkdir(parents=True, exist_ok=True)
    systems: dict[str, tuple[Callable[..., dict[str, Any]], Callable[..., Any]]] = {
        "memlane": (memlane_store, lambda b: _named(memlane_search(b, None))),
        "chromadb": (chroma_store, chroma_search),
        "lancedb": (lance_store, lance_search),
    }
    table: list[tuple[str, str, float, float, float, float, float, float, str]] = []
    try:
        for name in args.only:
            store, open_search = systems[name]
            print(f"building {name}", file=sys.stderr)
            built = store(root, texts, base)
            disk = tree_bytes(built["path"])
            files = largest(built["path"])
            handle, searches = open_search(built)
            for how, search in searches.items():
                got = measure(search, queries, truth)
                time.sleep(SETTLE)
                settled = measure(search, queries, truth)["p50_ms"]
                row = (
                    name,
                    how,
                    built["build_bytes"],
                    disk,
                    built["build_s"],
                    got["p50_ms"],
                    settled,
                    got["recall"],
                )
                table.append((*row, files))
                files = ""
            if name == "memlane":
                handle.close()  # one Memory per store: the beams below reopen it
            del handle, searches, search
            gc.collect()
            if name == "memlane":
                for ef in args.ef:
                    mem, search = memlane_search(built, ef)
                    got = measure(search, queries, truth)
                    time.sleep(SETTLE)
                    settled = measure(search, queries, truth)["p50_ms"]
                    mem.close()
                    row = (
                        name,
                        f"ef {ef}",
                        built["build_bytes"],
                        disk,
                        built["build_s"],
                        got["p50_ms"],
                        settled,
                    )
                    table.append((*row, got["recall"], ""))
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    python = sys.version.split()[0]
    print(
        f"\n{args.n:,} WordNet glosses (384-d, the default embedder), k = {K}, "
        f"{args.queries:,} queries not in the store, {os.cpu_count()} cores, Python {python}"
    )
    print(
        "| system | search | after the build (MiB) | at rest (MiB) | build (s) "
        "| vector p50 at open (ms) | settled (ms) | recall@10 | largest files (MiB) |"
    )
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for name, how, after, disk, build, p50, settled, recall, files in table:
        print(
            f"| {name} | {how} | {after / MIB:,.1f} | {disk / MIB:,.1f} | {build:,.1f} "
            f"| {p50:.3f} | {settled:.3f} | {recall:.4f} | {files or '-'} |"
        )


if __name__ == "__main__":
    main()
