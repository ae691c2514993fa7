"""Benchmark data: the WordNet 3.0 glosses and their vectors under the default embedder.

The glosses (117,659 short texts, median 11 words) live in ``../shared/data/`` beside
the repository. Embedding them takes a few minutes on two cores, so the vectors are
computed once and kept in ``benches/.cache/`` as a ``.npy`` that later calls
memory-map. Make the cache ahead of a benchmark run with::

    python benches/_data.py

A benchmark that needs this data and cannot find it should catch
:class:`DataUnavailableError` and skip with its message.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import time
from functools import cache
from pathlib import Path

import numpy as np
import numpy.typing as npt

from memlane.embeddings import Embedder, OnnxEmbedder

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
WORDNET = SHARED_DATA / "wordnet" / "wordnet30_glosses.jsonl"
CACHE = Path(__file__).resolve().parent / ".cache"

# Texts per embed_batch call: large enough for the embedder's length sort to pay off,
# small enough for a progress line every few seconds.
_CHUNK = 4096


class DataUnavailableError(FileNotFoundError):
    """A shared data set is not where the benchmarks expect it."""


def wordnet_texts() -> list[str]:
    """The 117,659 gloss texts, in file order (row ``i`` of :func:`wordnet_vectors`)."""
    return list(_wordnet_texts())


# Only the texts are kept: the parsed records (a dict and a list of lemmas each, some
# 240,000 objects the garbage collector tracks) made every full collection in a
# benchmark's process scan them: a 100k load spent 1.4 s collecting instead of 0.35 s.
@cache
def _wordnet_texts() -> tuple[str, ...]:
    if not WORDNET.is_file():
        raise DataUnavailableError(
            f"WordNet glosses not found at {WORDNET} (expected ../shared/data/ beside the repo)"
        )
    with WORDNET.open(encoding="utf-8") as f:
        return tuple(json.loads(line)["text"] for line in f if line.strip())


def wordnet_vectors(embedder: Embedder | None = None) -> npt.NDArray[np.float32]:
    """The glosses' vectors, shape ``(n, dimension)``, float32, memory-mapped read-only.

    Computed on the first call (with a progress line on stderr) and cached under a
    key made of the embedder's name, the number of texts and a digest of them.
    """
    texts = wordnet_texts()
    embedder = embedder if embedder is not None else OnnxEmbedder()
    path = cache_path(embedder, texts)
    if not path.exists():
        _embed_to(path, embedder, texts)
    vectors: npt.NDArray[np.float32] = np.load(path, mmap_mode="r")
    return vectors


def cache_path(embedder: Embedder, texts: list[str]) -> Path:
    digest = hashlib.sha256("\n".join(texts).encode()).hexdigest()[:12]
    name = re.sub(r"[^A-Za-z0-9.-]+", "_", embedder.name)
    return CACHE / f"wordnet-{len(texts)}-{digest}-{name}-{embedder.dimension}.npy"


def _embed_to(path: Path, embedder: Embedder, texts: list[str]) -> None:
    """Write the vectors to a temporary file, renamed into place only when complete."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.stem + ".partial.npy")
    out = np.lib.format.open_memmap(
        partial, mode="w+", dtype=np.float32, shape=(len(texts), embedder.dimension)
    )
    started = time.perf_counter()
    for start in range(0, len(texts), _CHUNK):
        stop = min(start + _CHUNK, len(texts))
        out[start:stop] = embedder.embed_batch(texts[start:stop])
        elapsed = time.perf_counter() - started
        rate = stop / elapsed
        print(
            f"\rembedding WordNet glosses with {embedder.name}: {stop}/{len(texts)} "
            f"({rate:.0f} texts/s, {(len(texts) - stop) / rate:.0f} s left)",
            end="",
            file=sys.stderr,
            flush=True,
        )
    print(f"\ndone in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    out.flush()
    del out
    os.replace(partial, path)


def main() -> None:
    started = time.perf_counter()
    vectors = wordnet_vectors()
    path = Path(vectors.filename) if isinstance(vectors, np.memmap) else None
    size = path.stat().st_size / 1e6 if path else 0.0
    print(
        f"{vectors.shape[0]} x {vectors.shape[1]} vectors at {path} ({size:.0f} MB), "
        f"ready in {time.perf_counter() - started:.1f} s"
    )


if __name__ == "__main__":
    main()
