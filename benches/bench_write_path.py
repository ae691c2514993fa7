"""Per-add cost of the write path as the store grows: the lookup by content hash.

What it measures, on embedded (SQLite) stores of 10,000 and 100,000 records made
with ``add_many`` (text-only, ``embedder=None``, unless ``--vectors``):

- p50/p99 latency of ``mem.add(text)`` and of ``mem.add(text, unique=True)``, each
  call with a text not stored before (``--adds`` calls of each);
- once with ``SQLiteStore.rows_by_hash`` as it is (a query on the indexed expression
  ``substr(content_hash, 1, 16)`` alone, full hashes compared in Python) and once
  with the version it replaced (kept below as ``_old_rows_by_hash``: ``... IN (...)
  AND content_hash IN (...)``, which SQLite ran as a scan of every row when given one
  hash), swapped on the same store in the same process. The plan of each for one
  hash is printed.

``add(unique=True)`` looks the hash up once (exact duplicates); a text-only ``add``
does not. With an embedder, ``add`` looks it up too (to reuse the stored vector of
the same text): ``--vectors`` opens the stores with a stand-in embedder giving random
384-dimension vectors, so the rows are as large as with the default model and
plain adds take that lookup.

Every add is a durable commit (``synchronous=FULL``): its fsync is most of what is
left, and depends on the disk. Run from the repository root::

    python benches/bench_write_path.py [--sizes 10000 100000] [--adds 200] [--vectors]
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from _timing import percentiles
from memlane import Memory
from memlane.content_hash import content_hash
from memlane.storage import sql as sql_store
from memlane.storage import sqlite as sqlite_store
from memlane.storage.sqlite import SQLiteStore

BATCH = 5000
DIM = 384
WORDS = ["garden", "river", "market", "letter", "window", "engine", "silver", "orange", "paper"]


def _old_rows_by_hash(self: SQLiteStore, hashes: Sequence[str]) -> list[Any]:
    """``SQLiteStore.rows_by_hash`` before the fix (as it read rows without vectors)."""
    cols = sql_store._NO_EMBEDDING
    out: list[Any] = []
    with self.reader() as c:
        for chunk in sqlite_store._chunks(sorted(set(hashes))):
            marks = ", ".join("?" * len(chunk))
            out.extend(
                c.execute(
                    f"SELECT {cols} FROM records WHERE substr(content_hash, 1, 16) "
                    f"IN ({marks}) AND content_hash IN ({marks}) ORDER BY rowid",
                    (*(h[:16] for h in chunk), *chunk),
                )
            )
    return out


class RandomEmbedder:
    """A stand-in for the default model: a fixed random unit vector per text."""

    name = "bench:random-384"
    dimension = DIM

    def _one(self, text: str) -> np.ndarray:
        seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")
        v = np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
        return v / np.linalg.norm(v)

    def embed(self, text: str) -> np.ndarray:
        return self._one(text)

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self._one(t) for t in texts]) if texts else np.zeros((0, DIM), np.float32)


def _text(rng: np.random.Generator, tag: str) -> str:
    return f"{tag}: " + " ".join(rng.choice(WORDS, size=8))


def _build(path: Path, n: int, embedder: RandomEmbedder | None) -> Memory:
    rng = np.random.default_rng(n)
    mem = Memory(path, embedder)
    for start in range(0, n, BATCH):
        items: list[dict[str, Any]] = []
        for i in range(start, min(start + BATCH, n)):
            text = _text(rng, f"record {i}")
            item: dict[str, Any] = {"text": text, "agent_id": f"agent{i % 100}"}
            if embedder is not None:
                item["embedding"] = embedder.embed(text)
            items.append(item)
        mem.add_many(items)
    mem.wait_indexed()
    return mem


def _plan(mem: Memory, fn: Callable[..., Any]) -> str:
    """The plan of the hash lookup ``fn`` runs for one hash."""
    statements: list[str] = []
    db = mem._db
    assert isinstance(db, SQLiteStore)
    with db.reader() as conn:
        conn.set_trace_callback(statements.append)
        try:
            fn(db, [content_hash("no such text")])
        finally:
            conn.set_trace_callback(None)
        rows = conn.execute("EXPLAIN QUERY PLAN " + statements[-1]).fetchall()
    return "; ".join(str(r[3]) for r in rows)


def _time_adds(mem: Memory, count: int, unique: bool, tag: str) -> list[float]:
    rng = np.random.default_rng(abs(hash(tag)) % 2**32)
    samples = []
    for i in range(count):
        text = _text(rng, f"{tag} {i}")
        t0 = time.perf_counter()
        mem.add(text, agent_id="agent1", unique=unique)
        samples.append(time.perf_counter() - t0)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--adds", type=int, default=200, help="timed calls per figure")
    parser.add_argument("--vectors", action="store_true", help="random 384-d vectors")
    args = parser.parse_args()

    print(f"SQLite {sqlite3.sqlite_version}, {'vectors' if args.vectors else 'text-only'}")
    new = SQLiteStore.rows_by_hash
    variants: list[tuple[str, Callable[..., Any]]] = [
        ("before", _old_rows_by_hash),
        ("after", new),
    ]
    root = Path(tempfile.mkdtemp(prefix="memlane-bench-write-"))
    results = []
    try:
        for n in args.sizes:
            t0 = time.perf_counter()
            mem = _build(root / f"store{n}", n, RandomEmbedder() if args.vectors else None)
            print(f"\n{n:,} records (built in {time.perf_counter() - t0:.1f} s)")
            try:
                for label, fn in variants:
                    SQLiteStore.rows_by_hash = fn  # type: ignore[method-assign]
                    print(f"  {label} plan: {_plan(mem, fn)}")
                    plain = percentiles(_time_adds(mem, args.adds, False, f"{label} {n} plain"))
                    uniq = percentiles(_time_adds(mem, args.adds, True, f"{label} {n} unique"))
                    results.append((n, label, plain, uniq))
                    print(
                        f"  {label}: add p50 {plain[0]:.2f} ms (p99 {plain[1]:.2f}), "
                        f"add(unique=True) p50 {uniq[0]:.2f} ms (p99 {uniq[1]:.2f})"
                    )
            finally:
                SQLiteStore.rows_by_hash = new  # type: ignore[method-assign]
                mem.close()
            shutil.rmtree(root / f"store{n}", ignore_errors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    print("\n| records | lookup | add p50 (ms) | add(unique=True) p50 (ms) |")
    print("|--:|---|--:|--:|")
    for n, label, plain, uniq in results:
        print(f"| {n:,} | {label} | {plain[0]:.2f} | {uniq[0]:.2f} |")


if __name__ == "__main__":
    main()
