"""An embedding cache keyed by (embedder name, sha256 of the text).

``EmbeddingCache`` is a bounded LRU that several embedders may share;
``CachedEmbedder`` wraps any ``Embedder`` so that
identical texts are embedded once (a batch embeds only its misses, in one call).
``memlane.Memory`` puts one in front of its embedder and, for texts
already stored, reuses the vectors in its database as well.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence

import numpy as np
from cachetools import LRUCache

from memlane.embeddings._base import Embedder, FloatArray, check_text, check_texts
from memlane.errors import InvalidArgumentError

__all__ = ["CachedEmbedder", "EmbeddingCache", "text_key"]


def text_key(text: str) -> bytes:
    """sha256 of the exact text (the cache key besides the embedder's name)."""
    return hashlib.sha256(text.encode("utf-8")).digest()


def query_key(embedder: Embedder) -> str:
    """The cache's name for ``embedder``'s question vectors (``embed``): its name, or
    when it is ``asymmetric`` (a question embedded unlike a stored text) a name of
    their own, so that the same words asked never get the vector they were stored with."""
    if getattr(embedder, "asymmetric", False) is True:
        return f"{embedder.name}\0query"
    return embedder.name


class EmbeddingCache:
    """A thread-safe LRU of vectors keyed by ``(embedder name, text_key(text))``.

    The LRU is cachetools' ``LRUCache``, which is not thread-safe by
    itself: every access holds this cache's lock (a read moves the entry to the front).
    """

    def __init__(self, maxsize: int = 4096) -> None:
        if isinstance(maxsize, bool) or not isinstance(maxsize, int) or maxsize < 0:
            raise InvalidArgumentError(f"maxsize must be an int >= 0, got {maxsize!r}")
        self.maxsize = maxsize
        # maxsize 0 stores nothing (put returns first); LRUCache needs maxsize >= 1 to hold one.
        self._data: LRUCache[tuple[str, bytes], FloatArray] = LRUCache(max(maxsize, 1))
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._data)

    def get(self, name: str, text: str) -> FloatArray | None:
        key = (name, text_key(text))
        with self._lock:
            v = self._data.get(key)  # a hit becomes the most recently used
            if v is None:
                self.misses += 1
                return None
            self.hits += 1
            return v

    def put(self, name: str, text: str, vector: FloatArray) -> None:
        if self.maxsize == 0:
            return
        v = np.array(vector, dtype=np.float32, copy=True)
        v.setflags(write=False)
        key = (name, text_key(text))
        with self._lock:
            self._data[key] = v  # the least recently used goes when full

    def clear(self) -> None:
        with self._lock:
            self._data.clear()


class CachedEmbedder:
    """``embedder`` with an ``EmbeddingCache`` in front; same name and dimension."""

    def __init__(
        self, embedder: Embedder, cache: EmbeddingCache | None = None, maxsize: int = 4096
    ) -> None:
        self.inner = embedder
        self.cache = cache if cache is not None else EmbeddingCache(maxsize)

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def dimension(self) -> int:
        return self.inner.dimension

    def embed(self, text: str) -> FloatArray:
        return self.embed_checked(check_text(text))

    def embed_checked(self, text: str) -> FloatArray:
        """``embed`` of a text its caller has checked (a search checks its query once)."""
        key = query_key(self.inner)
        hit = self.cache.get(key, text)
        if hit is not None:
            return hit.copy()
        v = np.asarray(self.inner.embed(text), dtype=np.float32)
        self.cache.put(key, text, v)
        return v

    def embed_batch(self, texts: Sequence[str]) -> FloatArray:
        items = check_texts(texts)
        out = np.empty((len(items), self.dimension), dtype=np.float32)
        missing: dict[str, list[int]] = {}
        for i, text in enumerate(items):
            hit = self.cache.get(self.name, text)
            if hit is None:
                missing.setdefault(text, []).append(i)
            else:
                out[i] = hit
        if missing:
            self.fill(missing, out)
        return out

    def fill(self, missing: dict[str, list[int]], out: FloatArray) -> None:
        """Embeds each text of ``missing`` once with the model itself (the cache was
        asked already), caches its vector and writes it into ``out`` at the text's rows;
        a model answer of the wrong shape is an ``InvalidArgumentError``."""
        unique = list(missing)
        vectors = np.asarray(self.inner.embed_batch(unique), dtype=np.float32)
        if vectors.shape != (len(unique), self.dimension):
            raise InvalidArgumentError(
                f"{self.name} returned shape {vectors.shape} for {len(unique)} texts, "
                f"expected {(len(unique), self.dimension)}"
            )
        for text, v in zip(unique, vectors, strict=True):
            self.cache.put(self.name, text, v)
            out[missing[text]] = v

    def __repr__(self) -> str:
        return f"CachedEmbedder({self.inner!r}, cached={len(self.cache)})"
