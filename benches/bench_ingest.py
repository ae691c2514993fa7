"""Knowledge ingestion against the model alone: how much does the pipeline add?

What it measures, on the SciFact abstracts written as one ``.txt`` file each
(title, blank line, text) with the default chunker (1000 characters, overlap 200):
  - model: ``OnnxEmbedder.embed_batch`` over exactly the fragments ingestion makes,
    in one call (sorted by length over all of them: the best batching there is);
  - pipeline: ``Memory.ingest`` of the folder into a new on-disk store (walk, hash,
    load, chunk in a thread, embed, write, index), then ``wait_indexed`` (graph
    linking that ingest leaves to the background thread);
  - the parts alone, serially: load + chunk, and ``add_many`` of the fragments with
    their vectors given.
Overhead = pipeline / model - 1, on wall time and on process CPU time (all
threads; robust when other work shares the cores). Target: at most 10%.

The model's vectors are cached under ``benches/.cache/`` keyed by model name (see
:class:`VectorCache`), for ``bench_quality.py``.

    python benches/bench_ingest.py [--limit N] [--batch-size 512]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from memlane import Memory, OnnxEmbedder
from memlane.embeddings import Embedder
from memlane.knowledge import RecursiveCharacterSplitter
from memlane.knowledge.loaders import load_text
from memlane.knowledge.pipeline import BATCH_SIZE

REPO = Path(__file__).resolve().parents[1]
SCIFACT = REPO.parent / "shared" / "data" / "scifact"
CACHE = Path(__file__).resolve().parent / ".cache"

Vectors = npt.NDArray[np.float32]


class DataUnavailableError(FileNotFoundError):
    pass


def scifact_corpus(limit: int | None = None) -> list[dict[str, str]]:
    """SciFact's documents as {_id, title, text}, in file order."""
    path = SCIFACT / "corpus.jsonl"
    if not path.is_file():
        raise DataUnavailableError(
            f"SciFact not found at {path} (expected ../shared/data/scifact beside the repo)"
        )
    with path.open(encoding="utf-8") as f:
        docs = [json.loads(line) for line in f if line.strip()]
    return docs[:limit] if limit else docs


def document_text(doc: dict[str, str]) -> str:
    return f"{doc['title']}\n\n{doc['text']}"


def write_corpus(docs: list[dict[str, str]], folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for doc in docs:
        (folder / f"{doc['_id']}.txt").write_text(document_text(doc), encoding="utf-8")


class VectorCache:
    """Vectors by sha256 of the text, one ``.npz`` per embedder name, under benches/.cache/."""

    def __init__(self, name: str, dimension: int) -> None:
        safe = re.sub(r"[^A-Za-z0-9.-]+", "_", name)
        self.path = CACHE / f"vectors-{safe}-{dimension}.npz"
        self.dimension = dimension
        self.data: dict[bytes, Vectors] = {}
        self.dirty = False
        if self.path.exists():
            with np.load(self.path) as z:
                for key, vector in zip(z["keys"], z["vectors"], strict=True):
                    self.data[bytes(key)] = vector

    @staticmethod
    def key(text: str) -> bytes:
        return hashlib.sha256(text.encode("utf-8")).digest()[:16]

    def get(self, text: str) -> Vectors | None:
        return self.data.get(self.key(text))

    def put_many(self, texts: Sequence[str], vectors: Vectors) -> None:
        for text, vector in zip(texts, vectors, strict=True):
            self.data[self.key(text)] = np.asarray(vector, dtype=np.float32)
        self.dirty = True

    def save(self) -> None:
        if not self.dirty:
            return
        CACHE.mkdir(parents=True, exist_ok=True)
        keys = np.array(list(self.data), dtype="S16")
        vectors = np.stack(list(self.data.values())).astype(np.float32)
        # A name of this process's own: two benches saving at once must not write one file.
        tmp = self.path.with_suffix(f".{os.getpid()}.tmp.npz")
        np.savez(tmp, keys=keys, vectors=vectors)
        tmp.replace(self.path)
        self.dirty = False


class CachedModel:
    """An Embedder answering from a :class:`VectorCache` and embedding (and caching) misses."""

    def __init__(self, inner: Embedder, cache: VectorCache) -> None:
        self.inner = inner
        self.cache = cache

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def dimension(self) -> int:
        return self.inner.dimension

    def embed(self, text: str) -> Vectors:
        return self.embed_batch([text])[0]

    def embed_batch(self, texts: Sequence[str]) -> Vectors:
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        missing = []
        for i, text in enumerate(texts):
            v = self.cache.get(text)
            if v is None:
                missing.append(i)
            else:
                out[i] = v
        if missing:
            vectors = self.inner.embed_batch([texts[i] for i in missing])
            out[missing] = vectors
            self.cache.put_many([texts[i] for i in missing], vectors)
        return out


def fragments_of(folder: Path) -> list[str]:
    """The fragment texts ingestion makes of the folder's files (same loader and chunker)."""
    chunker = RecursiveCharacterSplitter()
    texts = []
    for path in sorted(folder.iterdir()):
        doc = load_text(path.read_bytes(), path)
        texts.extend(c.content for c in chunker.split(doc.text))
    return texts


def timed(fn: object, *args: object, **kwargs: object) -> tuple[object, float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn(*args, **kwargs)  # type: ignore[operator]
    return result, time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=None, help="first N documents only")
    parser.add_argument("--batch-size", type=int, default=BATCH_SIZE)
    args = parser.parse_args()
    try:
        docs = scifact_corpus(args.limit)
    except DataUnavailableError as e:
        print(f"skipped: {e}")
        return
    embedder = OnnxEmbedder()
    cache = VectorCache(embedder.name, embedder.dimension)
    with tempfile.TemporaryDirectory(prefix="memlane-bench-ingest-") as tmp:
        folder = Path(tmp) / "scifact"
        write_corpus(docs, folder)
        texts, chunk_wall, chunk_cpu = timed(fragments_of, folder)
        assert isinstance(texts, list)
        print(f"{len(docs)} SciFact abstracts -> {len(texts)} fragments", flush=True)
        embedder.embed_batch(texts[:64])  # warm-up

        result, model_wall, model_cpu = timed(embedder.embed_batch, texts, return_truncated=True)
        vectors, truncated = result  # type: ignore[misc]
        cache.put_many(texts, vectors)
        cache.save()
        print(
            f"model:    {model_wall:7.1f} s wall {model_cpu:7.1f} s cpu "
            f"({len(truncated)} fragments longer than the model's 256 tokens)",
            flush=True,
        )

        store = Path(tmp) / "store"
        with Memory(store, embedder) as mem:
            report, ingest_wall, ingest_cpu = timed(
                mem.ingest, folder, shared=True, batch_size=args.batch_size, progress=True
            )
            _, index_wall, index_cpu = timed(mem.wait_indexed)
            print(report)
            assert mem.count("fragments") == len(texts), "the pipeline made other fragments"
        pipe_wall, pipe_cpu = ingest_wall + index_wall, ingest_cpu + index_cpu
        print(
            f"pipeline: {pipe_wall:7.1f} s wall {pipe_cpu:7.1f} s cpu "
            f"(ingest {ingest_wall:.1f} s + linking left over {index_wall:.1f} s)",
            flush=True,
        )

        # Everything but the model: the same ingestion with the vectors cached.
        with Memory(Path(tmp) / "store2", CachedModel(embedder, cache)) as mem:
            _, write_wall, write_cpu = timed(
                mem.ingest, folder, shared=True, batch_size=args.batch_size, progress=False
            )
            mem.wait_indexed()

    print()
    print("| step | wall s | cpu s | wall vs model | cpu vs model |")
    print("|---|---:|---:|---:|---:|")
    rows = [
        ("model: embed_batch over all fragments", model_wall, model_cpu),
        ("pipeline: ingest + wait_indexed", pipe_wall, pipe_cpu),
        ("  of which load + chunk (serial, alone)", chunk_wall, chunk_cpu),
        ("  of which everything but the model (cached vectors)", write_wall, write_cpu),
    ]
    for label, wall, cpu in rows:
        print(
            f"| {label} | {wall:.1f} | {cpu:.1f} | {100 * wall / model_wall:.1f}% "
            f"| {100 * cpu / model_cpu:.1f}% |"
        )
    print(
        f"\noverhead: {100 * (pipe_wall / model_wall - 1):+.1f}% wall, "
        f"{100 * (pipe_cpu / model_cpu - 1):+.1f}% cpu (target <= 10%); "
        f"{len(texts) / pipe_wall:.1f} fragments/s, {len(docs) / pipe_wall:.1f} abstracts/s"
    )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
