"""The vectors of texts a write stores: from the embedding cache, from a stored record
with the same text, or from the model, each source asked once per text."""

from __future__ import annotations

import numpy as np

from memlane._memory.encoding import unblob
from memlane.coerce import FloatArray
from memlane.content_hash import content_hash
from memlane.embeddings.cache import CachedEmbedder
from memlane.storage import Store


def embed_texts(
    embedder: CachedEmbedder, db: Store, dim: int | None, texts: list[str]
) -> FloatArray:
    """Vectors of ``texts`` (checked already, as records' texts): from the cache, from
    stored records with the same text (found by content hash), or embedded in one batch."""
    assert dim is not None
    out = np.empty((len(texts), dim), dtype=np.float32)
    todo: list[int] = []
    cache = embedder.cache
    for i, t in enumerate(texts):
        hit = cache.get(embedder.name, t)
        if hit is None:
            todo.append(i)
        else:
            out[i] = hit
    if todo:
        stored: dict[str, FloatArray] = {}
        for row in db.rows_by_hash([content_hash(texts[i]) for i in todo], True):
            v = unblob(row.embedding)
            if v is not None and v.shape[0] == dim:
                stored[row.text] = v
        rest = [i for i in todo if texts[i] not in stored]
        for i in todo:
            if texts[i] in stored:
                out[i] = stored[texts[i]]
                cache.put(embedder.name, texts[i], out[i])
        if rest:
            _embed(embedder, rest, texts, out)
    return out


def _embed(embedder: CachedEmbedder, rest: list[int], texts: list[str], out: FloatArray) -> None:
    """Embeds the texts at ``rest``, each distinct one once, into ``out`` and the cache.
    ``CachedEmbedder.fill`` calls the model itself, not ``embed_batch``: the cache was
    asked already, and that would ask it again and check the texts again."""
    at: dict[str, list[int]] = {}
    for i in rest:
        at.setdefault(texts[i], []).append(i)
    embedder.fill(at, out)
