"""The memory store: :class:`Memory`.

:class:`Memory` is :class:`~memlane._memory.store.MemoryStore` (records, search,
persistence) with the knowledge methods of
:class:`~memlane.knowledge.api.KnowledgeMixin` (document ingestion and
retrieval) and the notes methods of :class:`~memlane.notes.NotesMixin`
(OrcBot's long-term files). These layers sit below this module: they build on
the store's public API, and none imports :class:`Memory`.
"""

from __future__ import annotations

from memlane._memory.querying import Mode
from memlane._memory.store import DEFAULT_EMBEDDER, MemoryStore
from memlane.knowledge.api import KnowledgeMixin
from memlane.notes import NotesMixin

__all__ = ["DEFAULT_EMBEDDER", "Memory", "Mode"]


class Memory(KnowledgeMixin, NotesMixin, MemoryStore):
    """Persistent, searchable memory for agents.

    Args:
        path: the store directory, created if missing; ``None`` keeps the store
            in memory (gone at close); a ``postgresql://`` (or ``postgres://``)
            URL opens a store in PostgreSQL shared by any number of processes
            (``?schema=NAME`` picks its schema, ``memlane`` by default).
        embedder: an :class:`~memlane.embeddings.Embedder`; by default the
            offline :class:`~memlane.OnnxEmbedder`, loaded at the first text to
            embed. ``None`` makes a text-only store: searches use BM25 alone.
            A store pins its embedder's name and dimension; opening it with
            another raises :class:`~memlane.errors.EmbedderMismatchError`
            unless ``reembed=True``, which embeds every record again.
        default_scope: scope fields filled in wherever a call leaves them out.
        dedup_threshold: cosine similarity at which ``add(unique=True)`` sees a
            near-duplicate.
        near_duplicate: ``"mark"`` stores a near-duplicate with ``unique=False``
            (as elizaOS does); ``"skip"`` stores nothing and returns the
            existing record.
        dedup_window: seconds during which the same event delivered again is
            skipped, as OrcBot does (0 turns it off): a repeated
            ``metadata["messageId"]`` (or ``message_id``), ``["eventId"]`` or
            ``["statusMessageId"]``, or the same ``source`` and contact
            (``sourceId`` or ``contact``) with the same text. A contact's other
            messages are always stored.
        track_access: whether searches update ``access_count`` and
            ``last_accessed_at`` of what they return (a search may override it).
            The engine sees an access at once (decay restarts); the database
            gets the counts in batches (with the next write, every 10 s, and at
            close), so a crash can lose the last seconds of counts, never a memory.
        decay, weights, recency_half_life: search defaults (see :meth:`search`);
            ``decay=None`` (the default) takes the rate from ``recency_half_life``
            and counts ages to the newest candidate; a ``decay`` rate (per hour)
            counts them to now, as Nous does, evergreen memories exempt.
        snapshot_every: changes between periodic index snapshots (at least
            half the store's size, so snapshots cost O(1) per change).
        cache_size: query and text embeddings kept in memory.
        language: the BM25 analyzer's language (stopwords and stemmer).
        hnsw_m, hnsw_ef_construction: how the graph is built (links per node, 2 to
            200; candidates weighed per link); a store reopened from its snapshot
            keeps the graph it has.
        hnsw_ef: the search beam (at least 1), applied at every open.
        hnsw_precision: how the vector index holds vectors in memory (see
            :class:`~memlane.HnswIndex`). The default walks the graph on int8
            codes and ranks on f16 copies: about twice the speed of "f32" with
            cosines within about 1e-3. The database always keeps vectors in
            full; a snapshot of another precision is rebuilt at open.
        cache_dir: PostgreSQL only: a local folder for index snapshots, so an
            open loads the newest one and replays only the changes since it
            (without it, every open builds the indexes from the database).
    """

    def __enter__(self) -> Memory:
        return self
