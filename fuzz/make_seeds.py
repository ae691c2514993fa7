"""Writes the fuzz targets' seed inputs (fuzz/seeds/<target>/) from real snapshots made by
the installed memlane: run it after a change to a snapshot format. Deterministic."""

from __future__ import annotations

import json
import struct
import sys
import tempfile
from pathlib import Path

import numpy as np

from memlane import BM25Index, HnswIndex, Memory

HEADER = 28  # magic, kind, version, payload length, CRC-32 (rust/core/src/persist.rs)
SEEDS = Path(__file__).resolve().parent / "seeds"


def payload(path: Path) -> bytes:
    return path.read_bytes()[HEADER:]


def put(target: str, name: str, data: bytes) -> None:
    (SEEDS / target).mkdir(parents=True, exist_ok=True)
    (SEEDS / target / name).write_bytes(data)


class Vectors:
    """A deterministic embedder for the store seed."""

    name = "seed:vectors"
    dimension = 4

    def embed(self, text: str) -> np.ndarray:
        return self.embed_batch([text])[0]

    def embed_batch(self, texts: list[str]) -> np.ndarray:
        out = np.array([[len(t), t.count("a") + 1, t.count("e"), 1.0] for t in texts], np.float32)
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def main() -> None:
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for metric, precision in [("cosine", "f32"), ("l2", "f16"), ("ip", "int8+f16")]:
            index = HnswIndex(4, metric=metric, m=4, precision=precision)
            index.add(np.arange(1, 25, dtype=np.uint64), rng.standard_normal((24, 4), np.float32))
            index.save(str(root / "h.bin"))
            put("hnsw_snapshot", f"{metric}-{precision}", payload(root / "h.bin"))
        bm25 = BM25Index()
        bm25.add(
            np.arange(1, 6, dtype=np.uint64),
            [
                "the quick brown fox",
                "a lazy dog",
                "quick quick dogs",
                "Füße und Straße",
                "東京 tower",
            ],
        )
        bm25.save(str(root / "b.bin"))
        put("bm25_snapshot", "five", payload(root / "b.bin"))
        with Memory(root / "store", Vectors()) as mem:
            mem.add_many(
                [
                    {"text": t, "metadata": {"n": i, "tags": ["a"]}, "agent_id": "a"}
                    for i, t in enumerate(["quick brown fox", "dark mode", "lazy dog"])
                ]
            )
            mem.wait_indexed()
            mem.add("parked vector, not yet linked", table="facts", speaker="user")
            mem.snapshot()
        snap = max((root / "store" / "index").glob("snapshot-*"))
        parts = [payload(snap / "records.bin"), payload(snap / "bm25.bin")]
        data = b"".join(struct.pack("<I", len(p)) + p for p in parts) + payload(snap / "hnsw.bin")
        put("engine_snapshot", "store", data)
    for i, text in enumerate(
        ["The Quick brown foxes", "Füße, Straße; café!", "東京タワー 123", "ﬁne ǅ İstanbul", ""]
    ):
        put("analyzer", f"text-{i}", bytes([i * 37 % 256]) + text.encode())
    filters = [
        {"table": "memories"},
        {"$and": [{"n": {"$gte": 1}}, {"tags": {"$in": ["a"]}}]},
        {"$or": [{"user.plan": "pro"}, {"$not": {"flag": True}}]},
        {"metadata.nested.deep.k": {"$exists": True}},
        {"id": {"$nin": ["id-1"]}},
        {"created_at": {"$lt": 1.0e9 + 1}, "agent_id": {"$ne": "a"}},
    ]
    for i, f in enumerate(filters):
        put("filter", f"filter-{i}", json.dumps(f).encode())
    print(f"seeds written under {SEEDS}", file=sys.stderr)


if __name__ == "__main__":
    main()
