"""The vectors of texts a write stores: from the embedding cache or from the model,
each source asked once per text.

A stored record with the same text is no source: its vector may be one a caller
gave (``add(embedding=...)``, ``update``, an import, another scope's key on the
server), and taking it as the model's would let one scope choose the vectors of
another's memories and, through the cache, of every search of that text. The cache
holds only what the model answered."""

from __future__ import annotations

import numpy as np

from memlane.coerce import FloatArray
from memlane.embeddings.cache import CachedEmbedder


def embed_texts(embedder: CachedEmbedder, dim: int | None, texts: list[str]) -> FloatArray:
    """Vectors of ``texts`` (checked already, as records' texts): from the cache, or
    embedded in one batch, each distinct text once."""
    assert dim is not None
    out = np.empty((len(texts), dim), dtype=np.float32)
    todo: dict[str, list[int]] = {}
    cache = embedder.cache
    for i, t in enumerate(texts):
        hit = cache.get(embedder.name, t)
        if hit is None:
            todo.setdefault(t, []).append(i)
        else:
            out[i] = hit
    if todo:
        # ``CachedEmbedder.fill`` calls the model itself, not ``embed_batch``: the cache
        # was asked already, and that would ask it again and check the texts again.
        embedder.fill(todo, out)
    return out
