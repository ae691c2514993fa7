"""The memory store: ``Memory``.

``Memory`` opens a store and is its record API,
``MemoryStore`` (records, versions, search, JSONL), plus
the knowledge methods (document ingestion and retrieval, done by
``memlane.knowledge``) and the notes methods (OrcBot's long-term files, done by
``memlane.notes``). Those layers build on the record API and none imports this
module.
"""

from __future__ import annotations

import builtins
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Unpack

from memlane import _core, coerce, notes_files
from memlane._memory import duplicates, health, maintenance, pinning
from memlane._memory.access import AccessLog
from memlane._memory.duplicates import DedupWindow
from memlane._memory.events import Events
from memlane._memory.health import StoreStats
from memlane._memory.querying import Mode, Searcher
from memlane._memory.sync import PRECISIONS, IndexSync
from memlane._memory.writer import Writer
from memlane.embeddings import Embedder, check_embedder
from memlane.embeddings.cache import CachedEmbedder, EmbeddingCache
from memlane.embeddings.lazy import default_embedder
from memlane.errors import InvalidArgumentError, shown
from memlane.knowledge import api as knowledge
from memlane.knowledge.api import Threshold
from memlane.knowledge.chunking import Chunker
from memlane.knowledge.documents import DOCUMENTS, FRAGMENTS, knowledge_documents
from memlane.knowledge.ingest import ingest_path
from memlane.knowledge.loaders import IngestLimits
from memlane.knowledge.pipeline import BATCH_SIZE, IngestOptions, Owner
from memlane.knowledge.progress import ProgressOption
from memlane.knowledge.report import IngestReport
from memlane.knowledge.watch import DEBOUNCE, KnowledgeWatch, watch
from memlane.records import MemoryRecord, SearchHit
from memlane.scoping import Scope, ScopeFields
from memlane.storage import open_store
from memlane.store import MemoryStore

__all__ = ["DEFAULT_EMBEDDER", "Memory", "Mode"]


class _DefaultEmbedder:
    def __repr__(self) -> str:
        return "DEFAULT_EMBEDDER"


#: The ``embedder`` argument's default: ``memlane.OnnxEmbedder``, loaded on first use.
DEFAULT_EMBEDDER: Any = _DefaultEmbedder()


class Memory(MemoryStore):
    """Persistent, searchable memory for agents.

    Args:
        path: the store directory, created if missing; ``None`` keeps the store
            in memory (gone at close); a ``postgresql://`` (or ``postgres://``)
            URL opens a store in PostgreSQL shared by any number of processes
            (``?schema=NAME`` picks its schema, ``memlane`` by default).
        embedder: an [`Embedder`][memlane.Embedder]; by default the offline
            [`OnnxEmbedder`][memlane.OnnxEmbedder], loaded at the first text to
            embed. ``None`` makes a text-only store: searches use BM25 alone.
            A store pins its embedder's name and dimension; opening it with
            another raises [`EmbedderMismatchError`][memlane.errors.EmbedderMismatchError]
            unless ``reembed=True``.
        reembed: embeds every record again if ``embedder`` is not the one the store pinned.
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
        decay: the searches' default decay rate per hour, ages counted to now (Nous's;
            evergreen memories exempt); ``None`` takes the rate from
            ``recency_half_life``, ages counted to the newest candidate.
        weights: the searches' default weights of ``"relevance"``, ``"importance"``
            and ``"recency"``; ``None``: 1, 0.1 and 0.02.
        recency_half_life: the searches' default hours in which recency halves.
        snapshot_every: changes between periodic index snapshots (at least
            half the store's size, so snapshots cost O(1) per change).
        cache_size: query and text embeddings kept in memory.
        language: the BM25 analyzer's language (stopwords and stemmer).
        hnsw_m: links per node of the vector graph, 2 to 200; a store reopened from its
            snapshot keeps the graph it has.
        hnsw_ef_construction: candidates weighed per link as the graph is built.
        hnsw_ef: the search beam (at least 1), applied at every open: a wider beam
            finds more of the true nearest neighbours, and takes longer (the recall
            of this default: ``benches/README.md``).
        hnsw_precision: how the vector index holds vectors in memory (see
            [`HnswIndex`][memlane.HnswIndex]). The default walks the graph on int8
            codes and ranks on f16 copies: about twice the speed of ``"f32"``, cosines
            within about 1e-3. The database keeps vectors in half floats, in full for
            ``"f32"``; a snapshot of another precision is rebuilt at open.
        cache_dir: PostgreSQL only: a local folder for index snapshots, so an
            open loads the newest one and replays only the changes since it
            (without it, every open builds the indexes from the database).
        snapshot_vectors: whether the index snapshot keeps its own copy of the
            vectors. By default it does not where the store's vectors are on this
            disk (a store directory keeps each vector once, in its ``vectors.log``,
            which an open reads in one pass), and does for PostgreSQL, whose vectors
            an open would otherwise read back from the server.
    """

    def __init__(
        self,
        path: str | Path | None = None,
        embedder: Embedder | None = DEFAULT_EMBEDDER,
        *,
        default_scope: Mapping[str, str] | None = None,
        reembed: bool = False,
        dedup_threshold: float = 0.95,
        near_duplicate: Literal["mark", "skip"] = "mark",
        dedup_window: float = 300.0,
        track_access: bool = True,
        decay: float | None = None,
        weights: Mapping[str, float] | None = None,
        recency_half_life: float = _core.DEFAULT_RECENCY_HALF_LIFE_HOURS,
        snapshot_every: int = 10_000,
        cache_size: int = 4096,
        language: str = "english",
        hnsw_m: int = 16,
        hnsw_ef_construction: int = 100,
        hnsw_ef: int = 144,
        hnsw_precision: str = "int8+f16",
        cache_dir: str | Path | None = None,
        snapshot_vectors: bool | None = None,
    ) -> None:
        self._open = False  # until fully open, so close() does nothing
        if default_scope is not None and not isinstance(default_scope, Mapping):
            raise InvalidArgumentError(
                f"default_scope must be a dict of scope fields, got {shown(default_scope)}"
            )
        scope = dict(default_scope or {})
        coerce.scope_keys(scope)
        for f, v in scope.items():
            coerce.text(v, f"default_scope[{f!r}]")
        dedup_threshold = coerce.number(dedup_threshold, "dedup_threshold", -1.0, 1.0)
        if not isinstance(near_duplicate, str) or near_duplicate not in ("mark", "skip"):
            raise InvalidArgumentError(
                f"near_duplicate must be one of {{'mark', 'skip'}}, got {shown(near_duplicate)}"
            )
        track = coerce.flag(track_access, "track_access")
        keep_vectors = (
            None if snapshot_vectors is None else coerce.flag(snapshot_vectors, "snapshot_vectors")
        )
        decay = None if decay is None else coerce.number(decay, "decay", 0.0)
        checked_weights = coerce.weights(weights)
        half_life = coerce.number(recency_half_life, "recency_half_life", 1e-9)
        if isinstance(snapshot_every, bool) or not isinstance(snapshot_every, int):
            raise InvalidArgumentError("snapshot_every must be an int")
        window = DedupWindow(coerce.number(dedup_window, "dedup_window", 0.0))
        if embedder is DEFAULT_EMBEDDER:
            embedder = default_embedder()
        if embedder is not None:
            check_embedder(embedder)
        if not isinstance(hnsw_precision, str) or hnsw_precision not in PRECISIONS:
            raise InvalidArgumentError(
                f"hnsw_precision must be one of {PRECISIONS}, got {shown(hnsw_precision)}"
            )
        language = coerce.text(language, "language")
        cached = None if embedder is None else CachedEmbedder(embedder, EmbeddingCache(cache_size))
        dim = None if embedder is None else int(embedder.dimension)
        engine_args = {
            "m": coerce.count(hnsw_m, "hnsw_m", 2, 200),
            "ef_construction": coerce.count(hnsw_ef_construction, "hnsw_ef_construction", 1),
            "ef": coerce.count(hnsw_ef, "hnsw_ef", 1),
            "precision": hnsw_precision,
            "language": language,
        }
        opened = open_store(path, cache_dir, held=True)
        db, self._lock = opened.db, opened.lock
        #: How messages name the store: its directory, "in memory", or the URL without password.
        self.location = opened.location
        self.path = None if path is None or db.shared else Path(path)
        wake, access = threading.Event(), AccessLog()
        sync, thread = None, None
        try:
            opened.hold.end()  # the code that frees the lock is in force from here
            sync = IndexSync(db, opened.index_dir, self.location, dim, engine_args, access, wake)
            sync.snapshot_every = max(1, snapshot_every)
            sync.snapshot_vectors = db.vector_file is None if keep_vectors is None else keep_vectors
            pinning.pin(sync, embedder, reembed, language)
            sync.open()
            writer = Writer(sync, access, window, cached, scope)
            writer.dedup_threshold = dedup_threshold
            writer.near_duplicate = near_duplicate
            searcher = Searcher(
                sync,
                access,
                cached,
                track_access=track,
                decay=decay,
                weights=checked_weights,
                recency_half_life=half_life,
            )
            searcher.warm()
            if window.seconds > 0:
                duplicates.load_window(window, db, time.time())
            super().__init__(sync, writer, searcher, cached, scope)
            thread = maintenance.start(self, wake)
            # Freed, releasing the store, once nobody holds it (its thread holds only its
            # parts).
            self._finalizer = weakref.finalize(
                self, maintenance.release, self._lock, db, wake, sync, thread
            )
        except BaseException:
            maintenance.release(self._lock, db, wake, sync, thread)
            raise
        self._thread = thread
        # At exit the exit hook closes it once its thread stopped (this one would not wait).
        self._finalizer.atexit = False
        self._open = True
        if sync.engine.pending():
            wake.set()

    # -- settings given to the constructor ---------------------------------------------------

    dedup_threshold = property(lambda self: self._writer.dedup_threshold)
    near_duplicate = property(lambda self: self._writer.near_duplicate)
    track_access = property(lambda self: self._searcher.track_access)
    decay = property(lambda self: self._searcher.decay)
    weights = property(lambda self: self._searcher.weights)
    recency_half_life = property(lambda self: self._searcher.recency_half_life)
    snapshot_every = property(lambda self: self._sync.snapshot_every)

    # -- upkeep and closing ------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True once [`close`][memlane.Memory.close] ran (every call but ``close`` then raises)."""
        return self._sync.closing or self._sync.asked

    @property
    def events(self) -> Events:
        """The store's changes as events (on PostgreSQL, other processes' too):
        ``mem.events.subscribe(callback, user_id="alice")``, or iterate over the
        subscription (``memlane.events``)."""
        return self._writer.events

    def snapshot(self) -> None:
        """Writes an index snapshot now (also done periodically and at close)."""
        maintenance.snapshot(self._sync, self._writer)

    def stats(self) -> StoreStats:
        """How the store stands: its index beside the database's change log (vectors not
        yet linked, changes not yet followed), its snapshot and its size on disk."""
        self._sync.check_open()
        return health.stats(self._sync)

    def close(self) -> None:
        """Flushes access counts, writes a snapshot, releases the store. Idempotent."""
        if not getattr(self, "_open", False):
            return
        sync = self._sync
        if sync.forked:  # the parent's store: its files, connections and locks stay its own
            sync.closing = True
            self._finalizer.detach()
            return
        if sync.deferred(self.close):
            return
        sync.ask_close()  # first: a call holding the lock may wait for a connection
        if not sync.begin_closing(self._thread):
            if sync.closed.is_set() and not sync.released:  # the first was interrupted
                maintenance.release(self._lock, self._db, sync.wake, sync, self._thread)
            return
        try:
            self._db.closing(True)
            sync.wake.set()
            if self._thread is not threading.current_thread():
                self._thread.join()
            self._writer.close()
            if sync.gone is None:  # else nothing is left to flush into
                with sync.lock:  # as every save: never two writing the files at once
                    self._writer.flush_access()
                    sync.save()
                # A shared store without a snapshot cache still lets old tombstones go.
                if sync.index_dir is not None or self._db.shared:
                    self._db.gc_tombstones(sync.seq)
        finally:  # released whatever failed: the next open rebuilds a snapshot not written
            try:
                self._finalizer()
            finally:  # even interrupted (Ctrl-C): later close calls wait for this
                sync.closed.set()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._sync.closing else f"{len(self._sync.engine)} memories"
        name = self._embedder.name if self._embedder is not None else None
        return f"{type(self).__name__}({self.location!r}, embedder={name!r}, {state})"

    # -- knowledge (the work is memlane.knowledge's) -----------------------------------------

    def ingest(
        self,
        path: str | Path,
        *,
        agent_id: str | None = None,
        shared: bool = False,
        chunker: Chunker | None = None,
        metadata: Mapping[str, Any] | None = None,
        progress: ProgressOption = True,
        prune_missing: bool = False,
        root: str | Path | None = None,
        follow_outside: bool = False,
        batch_size: int = BATCH_SIZE,
        limits: IngestLimits | None = None,
    ) -> IngestReport:
        """Ingests a file, or every supported file in a folder and its subfolders.

        Args:
            path: a file or a folder.
            agent_id: the agent whose own knowledge this is (required unless ``shared``).
            shared: knowledge every agent may read (its ids ignore ``agent_id``).
            chunker: by default a [`MarkdownSplitter`][memlane.knowledge.MarkdownSplitter]
                for markdown and Word files, a
                [`RecursiveCharacterSplitter`][memlane.knowledge.RecursiveCharacterSplitter]
                for the rest, sized in the default model's tokens (128, overlap 20).
            metadata: added to every document and fragment (filterable).
            progress: a bar on stderr when it is a terminal; ``"always"`` or ``False``.
            prune_missing: remove this scope's documents under ``path`` whose file is gone.
            root: the knowledge root that ids are relative to; by default ``path``
                itself (a folder) or its folder (a file), but a file some document of
                this owner was made from keeps that document's root (so it replaces it).
            follow_outside: follow symbolic links (and a ``path`` with ``..``) that
                lead outside ``root``; by default they are skipped and reported.
            batch_size: fragments embedded and written together (one transaction);
                larger groups sort better by length, so the model pads less.
            limits: how large one document may be (bytes unpacked, fragments); by
                default [`IngestLimits`][memlane.knowledge.IngestLimits]'s. A document over a
                limit is reported in ``failed`` and ``limited`` and nothing of it stored.

        Unchanged files (same bytes, chunker and metadata) are not touched; a
        changed one replaces its document. Hidden files, unsupported types and
        links out of the root are skipped; unreadable files are reported as
        failed and the rest ingested. Returns an [`IngestReport`][memlane.IngestReport].
        """
        return ingest_path(
            self,
            path,
            Owner.writing(agent_id, shared, self.default_scope),
            IngestOptions(
                chunker, metadata, progress, prune_missing, follow_outside, batch_size, limits
            ),
            root=root,
        )

    def ingest_config(
        self,
        entries: Sequence[Mapping[str, Any] | str],
        *,
        agent_id: str | None = None,
        root: str | Path | None = None,
        chunker: Chunker | None = None,
        metadata: Mapping[str, Any] | None = None,
        progress: ProgressOption = True,
        prune_missing: bool = False,
        follow_outside: bool = False,
        limits: IngestLimits | None = None,
    ) -> IngestReport:
        """Ingests an elizaOS-style knowledge list in one report.

        Each entry is ``{"directory": ..., "shared": bool}``, ``{"path": ...,
        "shared": bool}`` (optionally with its own ``"metadata"``), or a plain
        string of knowledge text. Paths (the report's too) are relative to ``root``
        (by default the current folder) and may not lead outside it unless
        ``follow_outside``; such an entry, or a missing one, is reported as
        failed and the others are ingested. An entry of the wrong shape (an
        unknown key, metadata that is no mapping or that no record may hold) is
        an ``InvalidArgumentError`` naming it, raised before any is ingested.
        """
        options = IngestOptions(
            chunker, metadata, progress, prune_missing, follow_outside, limits=limits
        )
        return knowledge.ingest_config(self, entries, agent_id, root, options)

    def ingest_text(
        self,
        text: str,
        *,
        source: str,
        agent_id: str | None = None,
        shared: bool = False,
        file_type: str = "txt",
        chunker: Chunker | None = None,
        metadata: Mapping[str, Any] | None = None,
        limits: IngestLimits | None = None,
    ) -> IngestReport:
        """Ingests a text as a document named ``source`` (e.g. ``"inline:faq"``).

        ``file_type`` picks the loader (``"txt"``, ``"md"``, ``"json"``, ...);
        the same source again replaces the document, unless the text is unchanged.
        ``limits`` as for [`ingest`][memlane.Memory.ingest].
        """
        options = IngestOptions(chunker, metadata, progress=False, limits=limits)
        return knowledge.ingest_text(self, text, source, agent_id, shared, file_type, options)

    def watch(
        self,
        path: str | Path,
        *,
        agent_id: str | None = None,
        shared: bool = False,
        chunker: Chunker | None = None,
        metadata: Mapping[str, Any] | None = None,
        follow_outside: bool = False,
        limits: IngestLimits | None = None,
        debounce: float = DEBOUNCE,
        on_report: Callable[[IngestReport], object] | None = None,
        on_error: Callable[[BaseException], object] | None = None,
    ) -> KnowledgeWatch:
        """Keeps the knowledge of the folder ``path`` in sync until the watch is stopped.

        First an [`ingest`][memlane.Memory.ingest] of the folder that also removes the documents of
        files gone since (its report is the watch's ``initial``); then, on the
        operating system's file events (watchdog), each batch of changes once the
        folder has been quiet for ``debounce`` seconds: a new or changed file is
        ingested (only its own document is replaced), a deleted file or folder
        takes its documents and fragments with it, and files ``ingest`` skips
        (hidden, unsupported types) are ignored. Each batch's report goes to
        ``on_report``, an error that stops a batch (a closed store, a full disk) or
        that ``on_report`` raises to ``on_error`` (by default, or if it raises too, a
        warning), and the watch goes on. The other options are ``ingest``'s. Use it
        as ``with mem.watch(folder, ...):`` or call ``stop()``, before closing the store.
        """
        options = IngestOptions(
            chunker,
            metadata,
            progress=False,
            prune_missing=True,  # the first sync: files gone meanwhile take their documents
            follow_outside=follow_outside,
            limits=limits,
        )
        scope = Owner.writing(agent_id, shared, self.default_scope)
        return watch(
            self,
            path,
            scope,
            options,
            debounce=debounce,
            on_report=on_report,
            on_error=on_error,
        )

    def search_knowledge(
        self,
        query: str,
        *,
        agent_id: str | None = None,
        k: int = 5,
        threshold: Threshold = "default",
        mode: Literal["hybrid", "vector", "text"] = "hybrid",
        filters: Mapping[str, Any] | None = None,
        conversation_context: str | Sequence[str] | None = None,
        **options: Any,
    ) -> builtins.list[SearchHit]:
        """The ``k`` fragments best matching ``query`` in shared knowledge and ``agent_id``'s own.

        Without ``agent_id``, shared knowledge only. ``threshold`` is a minimum
        cosine similarity (elizaOS's ``match_threshold``); in text mode, a
        minimum relevance (BM25 over the query's ceiling, the score no fragment
        reaches). ``"default"`` is ``memlane.knowledge.FRAGMENT_THRESHOLD`` in
        hybrid and vector modes with the default model (it was measured for that
        model's cosines), and no cut-off in text mode or with another embedder (pass a
        number measured for it); ``None`` is no cut-off. Scores are the relevance
        alone (knowledge neither decays nor weighs importance). ``filters``
        narrows by metadata (e.g. ``{"file_type": "pdf"}``); ``options`` go to
        [`search`][memlane.Memory.search] (``fusion``, ``rrf_k``, ``alpha``,
        ``candidates``, ``explain``, ...) over ``memlane.knowledge.SEARCH_DEFAULTS``.
        ``conversation_context`` (the conversation's recent messages, a str or a
        list of str) is searched with the query, before it (elizaOS's
        ``conversationContext``), so that a follow-up ("and how do I undo it?")
        finds the fragments of what the conversation is about.
        """
        query = knowledge.with_context(query, conversation_context)
        return knowledge.search(
            self, FRAGMENTS, query, agent_id, k, threshold, mode, filters, options
        )

    def search_documents(
        self,
        query: str,
        *,
        agent_id: str | None = None,
        k: int = 5,
        threshold: Threshold = "default",
        mode: Literal["hybrid", "vector", "text"] = "hybrid",
        filters: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> builtins.list[SearchHit]:
        """The ``k`` whole documents best matching ``query``, as
        [`search_knowledge`][memlane.Memory.search_knowledge] finds fragments.

        A hit's record is the document's: its whole extracted text, BM25 over all
        of it, and the normalised mean of its fragments' vectors (the model reads
        256 tokens, so no single vector can stand for a longer document). Use it
        to hand an agent whole documents, or to rank documents before reading
        their fragments. ``"default"`` is ``memlane.knowledge.DOCUMENT_THRESHOLD``.
        """
        return knowledge.search(
            self, DOCUMENTS, query, agent_id, k, threshold, mode, filters, options
        )

    def list_documents(
        self, agent_id: str | None = None, shared: bool | None = None
    ) -> builtins.list[MemoryRecord]:
        """Document records, oldest first.

        ``shared=True``: shared documents; ``shared=False``: private ones (of
        ``agent_id`` if given); ``shared=None``: all, or what ``agent_id`` may
        read (shared and its own).
        """
        return knowledge_documents(self, knowledge.documents_filter(agent_id, shared))

    def get_fragments(
        self, document_id: str, *, include_embedding: bool = False
    ) -> builtins.list[MemoryRecord]:
        """A document's fragments in order; raises ``UnknownIdError`` for an unknown document."""
        return knowledge.fragments(self, document_id, include_embedding)

    def remove_document(self, document_id: str) -> int:
        """Deletes a document and its fragments; returns how many fragments went."""
        return knowledge.remove(self, document_id)

    def clear_knowledge(self, agent_id: str | None = None, *, shared: bool | None = False) -> int:
        """Deletes knowledge; returns how many documents went.

        ``shared=False`` (default): ``agent_id``'s own knowledge (required);
        ``shared=True``: the shared knowledge; ``shared=None``: both (every
        agent's when ``agent_id`` is None).
        """
        return knowledge.clear(self, agent_id, shared)

    # -- OrcBot's long-term files (the work is memlane.notes_files') --------------------------

    def export_notes(
        self,
        dir: str | Path,
        **scope: Unpack[ScopeFields],
    ) -> dict[str, int]:
        """Writes ``JOURNAL.md``, ``LEARNING.md``, ``USER.md``, ``WORLD.md`` and
        ``MEMORY.md`` into ``dir`` (created if missing) from the notes of exactly this
        scope; returns the entries written per file.

        Each entry is a section headed by its date (and `` · title``), in the order
        they were imported; a kind without notes is a file with its title only. Each
        file is written aside, then renamed over the old one, so a reader never sees
        half a file.
        """
        return notes_files.export_notes(self, dir, Scope.of({}, scope).fields)

    def import_notes(
        self,
        dir: str | Path,
        **scope: Unpack[ScopeFields],
    ) -> dict[str, int]:
        """Reads the notes files in ``dir`` into the notes of exactly this scope; returns
        the entries stored per file read (0 where the file matched the stored notes).

        ``dir`` may hold any of the five files and nothing else (but the ``memory/``
        folder of daily logs and what an export stopped midway left aside, not read). A
        file replaces its kind's notes when it differs from them; an entry whose heading
        has no date keeps the date of the same stored entry, or gets now's. A path not a
        directory, a file that is not UTF-8 text or an unknown file raises
        [`InvalidArgumentError`][memlane.errors.InvalidArgumentError] before anything is stored.
        """
        return notes_files.import_notes(self, dir, Scope.of({}, scope).fields)
