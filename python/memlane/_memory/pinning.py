"""What a store is pinned to: the embedder and analyzer its records were indexed with,
recorded by its first open and checked by every later one (re-embedding every record
when asked to change the embedder)."""

from __future__ import annotations

import shutil

from memlane._core import blobs
from memlane._memory.sync import IndexSync
from memlane.embeddings import Embedder
from memlane.embeddings.cache import model_vectors
from memlane.errors import EmbedderMismatchError, InvalidArgumentError

__all__ = ["pin"]


def pin(sync: IndexSync, embedder: Embedder | None, reembed: bool, language: str) -> None:
    """Records the embedder and analyzer of a new store; checks them on an existing one
    (``reembed`` embeds every record again with a different embedder)."""
    db = sync.db
    name = "" if embedder is None else embedder.name
    dim = 0 if embedder is None else int(embedder.dimension)
    pinned = db.get_meta("embedder")
    if pinned is None and db.tenant:
        raise EmbedderMismatchError(
            f"the store {sync.location} has no embedder yet, and a connection confined "
            f"to the tenant {db.tenant} does not choose the whole store's: open it once "
            "bound to no tenant first"
        )
    if pinned is None:
        with db.transaction() as conn:
            db.set_meta(conn, "embedder", name)
            db.set_meta(conn, "dimension", str(dim))
            db.set_meta(conn, "language", language)
        return
    pinned_dim = db.meta_count("dimension")
    if db.get_meta("language") not in (None, language):
        raise InvalidArgumentError(
            f"the store was created with language={db.get_meta('language')!r}, not {language!r}"
        )
    if (pinned, pinned_dim) == (name, dim):
        return
    if not reembed or db.tenant:

        def describe(n: str, d: int) -> str:
            return f"{n!r} (dimension {d})" if n else "no embedder (text only)"

        # The pin speaks for every record, and a tenant's connection would re-embed
        # only its own: the others' vectors would no longer match it.
        fix = (
            f"re-embed from a connection bound to no tenant (this one is confined to the "
            f"tenant {db.tenant} and sees only its records), every process stopped"
            if db.tenant
            else "pass reembed=True to embed every record again with the new one"
        )
        raise EmbedderMismatchError(
            f"the store {sync.location} was built with {describe(pinned, pinned_dim)} but is "
            f"being opened with {describe(name, dim)}; open it with the same embedder, or "
            f"{fix}"
        )
    _reembed(sync, embedder, name, dim)


def _reembed(sync: IndexSync, embedder: Embedder | None, name: str, dim: int) -> None:
    """Replaces every stored vector with ``embedder``'s (or drops them)."""
    db = sync.db
    with db.transaction() as conn:
        db.unbounded(conn)  # the model runs between its statements
        seq = db.next_seq(conn)
        rows = db.texts(conn)
        for start in range(0, len(rows), 1024):
            chunk = rows[start : start + 1024]
            if embedder is None:
                vectors: list[bytes | None] = [None] * len(chunk)
            else:
                texts = [r[1] for r in chunk]  # a bad answer rolls all of it back
                vs = model_vectors(name, embedder.embed_batch(texts), texts, dim)
                vectors = list(blobs(vs, sync.half))
            pairs = [(r[0], v) for v, r in zip(vectors, chunk, strict=True)]
            db.set_embeddings(conn, pairs, seq)
        db.set_meta(conn, "embedder", name)
        db.set_meta(conn, "dimension", str(dim))
    if sync.index_dir is not None:
        shutil.rmtree(sync.index_dir, ignore_errors=True)
    sync.reembedded = True
