"""The record API of ``memlane.Memory``: ``MemoryStore``, over the
collaborators of this package (see its ``__init__``). ``memlane.Memory`` opens
the store and adds knowledge and notes.

A store directory holds ``memory.db`` (SQLite, the source of truth), ``index/``
(snapshots of the engine: BM25, HNSW and the records' attributes) and ``lock``.
A ``postgresql://`` URL opens a store in PostgreSQL instead, shared by many
processes: each keeps its own engine and follows the others' changes.
Each write validates everything (in Python, then in the engine's ``prepare``),
commits one transaction, and only then updates the engine, which can no
longer fail. Opening loads the newest snapshot and replays the changes the
database holds beyond it; a missing or damaged snapshot is rebuilt from the
database with a warning.
"""

from __future__ import annotations

import builtins
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, Unpack

import numpy.typing as npt

from memlane import _core, coerce
from memlane._core import Engine
from memlane._memory import jsonl, maintenance
from memlane._memory.encoding import new_record, record
from memlane._memory.forgetting import Forgetting
from memlane._memory.job_book import JobBook
from memlane._memory.listing import Listing
from memlane._memory.querying import Mode, Rerank, Searcher, moment, visible
from memlane._memory.sync import IndexSync
from memlane._memory.versions import Versions
from memlane._memory.writer import Replacing, Writer
from memlane.embeddings import Embedder
from memlane.embeddings.cache import CachedEmbedder
from memlane.errors import InvalidArgumentError, UnknownIdError
from memlane.records import MemoryRecord, MemoryVersion, SearchHit
from memlane.scoping import ScopeFields, scope_kwargs

__all__ = ["MemoryStore"]


class MemoryStore(Listing, Forgetting):
    """The record API of an open store (records, versions, search, JSONL) over its
    collaborators; ``memlane.Memory`` opens the store and adds knowledge and notes.
    Knowledge and notes build on this class, which knows nothing of them."""

    def __init__(
        self,
        sync: IndexSync,
        writer: Writer,
        searcher: Searcher,
        embedder: CachedEmbedder | None,
        default_scope: dict[str, str],
    ) -> None:
        self._sync = sync
        self._db = sync.db
        self._access = sync.access
        self._writer = writer
        self._searcher = searcher
        self._versions = Versions(sync, writer)
        self._embedder = embedder
        #: Scope fields filled in wherever a call leaves them out.
        self.default_scope = default_scope

    # -- settings read by callers --------------------------------------------------------

    @property
    def embedder(self) -> Embedder | None:
        """The embedder this store was opened with (``None`` for a text-only store)."""
        return None if self._embedder is None else self._embedder.inner

    @property
    def jobs(self) -> JobBook:
        """Durable jobs kept with the store: work accepted and not yet done (the agent
        layer's background upkeep keeps its pending jobs here, so a process killed
        mid-upkeep resumes them at the next open)."""
        return JobBook(self._db, self._sync.check_open)

    @property
    def _engine(self) -> Engine:
        return self._sync.engine

    # -- writes ---------------------------------------------------------------------------

    def add(
        self,
        text: str,
        *,
        table: str = "memories",
        type: str = "semantic",
        speaker: str | None = None,
        importance: float = 0.5,
        evergreen: bool = False,
        metadata: Mapping[str, Any] | None = None,
        embedding: npt.ArrayLike | None = None,
        id: str | None = None,
        created_at: float | datetime | None = None,
        unique: bool = False,
        expires_at: float | datetime | None = None,
        ttl: float | None = None,
        **scope: Unpack[ScopeFields],
    ) -> MemoryRecord:
        """Stores one memory and returns it (durable once this returns).

        ``unique=True`` checks for duplicates in the same table and scope: the
        same content returns the existing record (``duplicate="exact"``); a
        similar one (cosine >= ``dedup_threshold``) is handled per
        ``near_duplicate``. Independently, the ``dedup_window`` skips repeated
        messages (``duplicate="window"``).

        ``id`` is made for it unless given (a str of at most 1,024 bytes in UTF-8).
        ``created_at`` is when the fact became true (default now; it may be
        backdated); the store sets ``recorded_at``, when it learned it.
        ``expires_at`` (or ``ttl``, seconds from now) is when it expires: from then
        on no read returns it, and maintenance removes it, keeping its last version
        in the history.
        """
        self._sync.check_open()
        new = new_record(
            time.time(),
            self._writer.default_scope,
            self._sync.dim,
            text=text,
            table=table,
            type=type,
            **scope_kwargs(self._scope(scope)),
            speaker=speaker,
            importance=importance,
            evergreen=evergreen,
            metadata=metadata,
            embedding=embedding,
            id=id,
            created_at=created_at,
            unique=unique,
            expires_at=expires_at,
            ttl=ttl,
        )
        return self._writer.add_record(new)

    def add_many(
        self,
        items: Iterable[Mapping[str, Any]],
        *,
        progress: bool = False,
        consume: Sequence[str | MemoryRecord] = (),
    ) -> list[MemoryRecord]:
        """Stores many memories in one transaction with one embedding batch.

        Each item takes the keyword arguments of [`add`][memlane.Memory.add] (``text``
        required). All are validated first: one bad item raises and stores nothing.
        ``progress=True`` shows a progress bar (tqdm, on stderr) while the texts are
        embedded, the long part of a large load.

        ``consume`` lists the records the items take the place of (the entries a
        summary sums up), by id or as the records read (``list``, ``get``): they are
        deleted in the same transaction, and each must still be stored and current when
        it commits, so of two writers turning the same records into new ones, one stores
        and the other stores nothing. A record given must also still be the version
        read (its ``updated_at``): one rewritten meanwhile (``update``), whose new text
        the items never saw, is not deleted. A record not stored at all is refused
        before the items are embedded.

        Raises:
            ConflictError: when a record of ``consume`` is no longer stored (another
                writer deleted it, or it never was), was superseded, or (given as a
                record) was rewritten since it was read; nothing is stored.
            InvalidArgumentError: for a bad item, ``consume`` not a list of ids and
                records, or an item found a duplicate of a record it consumes; nothing
                is stored.
        """
        records: list[MemoryRecord] = self._writer.add(items, progress=progress, consume=consume)
        return records

    def replace(
        self,
        items: Iterable[Mapping[str, Any]],
        table: str | Sequence[str] | None = None,
        *,
        type: str | Sequence[str] | None = None,
        filters: Mapping[str, Any] | None = None,
        **scope: Unpack[ScopeFields],
    ) -> tuple[int, list[MemoryRecord]]:
        """Deletes the records [`delete_all`][memlane.Memory.delete_all] would and stores
        ``items`` as [`add_many`][memlane.Memory.add_many] does, in one transaction: a
        crash leaves the old records or the new ones, never neither. Returns how many
        went and the new records.

        The items are stored as given: ``unique`` (deduplication) is refused,
        since the records they would match are the ones being replaced.
        """
        self._sync.check_open()
        fields = self._scope(scope)
        admits = _core.Admits(filters, table=table, type=type, scope=fields)
        result: tuple[int, list[MemoryRecord]] = self._writer.add(
            items, replacing=Replacing(admits)
        )
        return result

    def get(self, id: str, *, include_embedding: bool = False) -> MemoryRecord:
        """The record with this id ([`UnknownIdError`][memlane.errors.UnknownIdError]
        if none)."""
        self._sync.check_open()
        include_embedding = coerce.flag(include_embedding, "include_embedding")
        row = self._db.row_by_id(coerce.text(id, "id"), embedding=include_embedding)
        if not visible(row, time.time()):
            raise UnknownIdError(f"no memory with id {id!r}")
        return record(row, self._access.get(row), include_embedding)

    def delete(self, id: str) -> None:
        """Deletes a record ([`UnknownIdError`][memlane.errors.UnknownIdError] if there
        is none)."""
        self._sync.check_open()
        if not self._writer.delete_ids([coerce.text(id, "id")]):
            raise UnknownIdError(f"no memory with id {id!r}")

    def delete_all(
        self,
        table: str | None = None,
        *,
        type: str | Sequence[str] | None = None,
        filters: Mapping[str, Any] | None = None,
        **scope: Unpack[ScopeFields],
    ) -> int:
        """Deletes every record of the table and scope (and filters) in one transaction;
        returns how many.

        The records are selected inside that transaction, once every other writer's
        commit is applied: a record another process changed meanwhile goes only if it
        still matches.
        """
        self._sync.check_open()
        fields = self._scope(scope)
        return self._writer.delete_where(
            _core.Admits(filters, table=table, type=type, scope=fields)
        )

    # -- facts that change (the work is done by versions.Versions) ----------------------------

    def update(
        self,
        id: str | MemoryRecord,
        *,
        text: str | None = None,
        importance: float | None = None,
        metadata: Mapping[str, Any] | None = None,
        evergreen: bool | None = None,
        type: str | None = None,
        embedding: npt.ArrayLike | None = None,
        by: str | None = None,
        expires_at: float | datetime | None = None,
        ttl: float | None = None,
    ) -> MemoryRecord:
        """Changes fields of a record (metadata is replaced whole) and returns it.

        ``expires_at`` (or ``ttl``, seconds from now) sets when it expires, as in
        [`add`][memlane.Memory.add] (LangGraph's TTL refresh on write).

        A new text is embedded again (unless ``embedding`` is given). The version it
        replaces stays in [`history`][memlane.Memory.history], ``by`` as who changed it.

        ``id`` is the record's id, or the record as read (``get``, ``list``, a search
        hit's ``record``): then it must still be the version read (its ``updated_at``)
        when the update commits, checked inside its transaction, so a change computed
        from a text another writer has rewritten since is refused instead of
        overwriting the rewrite.

        Raises:
            UnknownIdError: for an unknown id.
            InvalidArgumentError: for a superseded version, which is history (update
                the version that replaced it).
            ConflictError: when another writer superseded or deleted the record while
                this call ran, or (given as a record) rewrote or superseded it since it
                was read; nothing is stored.
        """
        given = {
            "text": text,
            "importance": importance,
            "metadata": metadata,
            "evergreen": evergreen,
            "type": type,
            "expires_at": expires_at,
            "ttl": ttl,
        }
        fields: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
        fields["embedding"] = embedding
        return self._versions.update(id, fields, by)

    def supersede(
        self,
        id: str | MemoryRecord,
        text: str,
        *,
        at: float | datetime | None = None,
        by: str | None = None,
        importance: float | None = None,
        metadata: Mapping[str, Any] | None = None,
        type: str | None = None,
        embedding: npt.ArrayLike | None = None,
        expires_at: float | datetime | None = None,
        ttl: float | None = None,
    ) -> MemoryRecord:
        """Replaces the fact ``id`` with ``text`` without losing it: the old record is
        closed (its ``valid_to`` set to ``at``, default now, or its start if the clock was
        set back since) and a new one, valid from then, is added in the same transaction.
        The new record keeps the old one's table, type, scope, importance, evergreen
        flag and metadata unless given (not an expiry: ``expires_at`` or ``ttl`` sets it);
        ``by`` names who made the change (kept in the history). Returns the new record.

        ``id`` is the record's id, or the record as read (``get``, ``list``, a search
        hit's ``record``): then it must still be the version read (its ``updated_at``)
        when the supersede commits, checked inside its transaction, so a fact judged
        against a text another writer has rewritten since (``update``) does not send
        the rewrite to the history.

        Raises:
            UnknownIdError: for an unknown id.
            InvalidArgumentError: for a record superseded already or an ``at`` before it
                became true.
            ConflictError: when another writer superseded, changed or deleted it while
                this call ran, or (given as a record) rewrote or superseded it since it
                was read (then nothing is stored).
        """
        item: dict[str, Any] = {"text": text}
        given = {
            "importance": importance,
            "metadata": metadata,
            "type": type,
            "expires_at": expires_at,
            "ttl": ttl,
        }
        item.update({k: v for k, v in given.items() if v is not None})
        if embedding is not None:
            item["embedding"] = embedding
        return self._versions.supersede(id, item, at, by)

    def history(self, id: str) -> builtins.list[MemoryVersion]:
        """Every version of memory ``id``, oldest first, following supersession both
        ways: the records it superseded and those that superseded it are part of its
        history. A deleted memory keeps its history (its last version ends with
        ``"delete"``). Unknown ids have an empty history."""
        return self._versions.history(id)

    # -- reads ------------------------------------------------------------------------------

    def __len__(self) -> int:
        self._sync.check_open()
        return int(self._sync.engine.count(expire_at=self._expire_at()))

    def __contains__(self, id: object) -> bool:
        self._sync.check_open()
        if not isinstance(id, str):
            return False
        try:
            coerce.clean(id, "id")
        except InvalidArgumentError:
            return False  # no record can have an id the databases cannot store
        return visible(self._db.row_by_id(id), time.time())

    def search(
        self,
        query: str,
        k: int = 5,
        *,
        mode: Mode = "hybrid",
        table: str | None = None,
        type: str | Sequence[str] | None = None,
        filters: Mapping[str, Any] | None = None,
        threshold: float | None = None,
        min_similarity: float | None = None,
        weights: Mapping[str, float] | None = None,
        decay: float | None = None,
        recency_half_life: float | None = None,
        fusion: Literal["rrf", "weighted"] = "weighted",
        rrf_k: float = _core.DEFAULT_RRF_K,
        alpha: float | None = None,
        context_weight: float = _core.DEFAULT_CONTEXT_WEIGHT,
        answer_weight: float = _core.DEFAULT_ANSWER_WEIGHT,
        question_weight: float = _core.DEFAULT_QUESTION_WEIGHT,
        speaker_weight: float = _core.DEFAULT_SPEAKER_WEIGHT,
        date_weight: float = _core.DEFAULT_DATE_WEIGHT,
        when_weight: float = _core.DEFAULT_WHEN_WEIGHT,
        diversity: float = 0.0,
        candidates: int | None = None,
        start: float | datetime | None = None,
        end: float | datetime | None = None,
        explain: bool = False,
        query_embedding: npt.ArrayLike | None = None,
        track_access: bool | None = None,
        include_embedding: bool = False,
        as_of: float | datetime | None = None,
        include_superseded: bool = False,
        known_at: float | datetime | None = None,
        unique: bool | None = None,
        rerank: Rerank | None = None,
        **scope: Unpack[ScopeFields],
    ) -> builtins.list[SearchHit]:
        """The ``k`` best memories for ``query``, best first, in one call into the engine.

        Superseded versions ([`supersede`][memlane.Memory.supersede]) and expired records
        are left out. A score is a relevance in [0, 1] times a bounded boost for
        importance and recency; what it means, how it is computed and how to choose a
        cut-off: [Search and scores][search-and-scores].

        Args:
            query: the text to search for.
            k: how many hits at most.
            mode: ``"hybrid"`` (BM25 and vectors fused), ``"vector"`` or ``"text"``; a
                store without an embedder searches text.
            table: the table searched; every table when None.
            type: the record type, or types, searched.
            filters: conditions on the records' fields and metadata ([Filters][filters]).
            threshold: drops hits whose score is below it; in vector mode, whose cosine
                similarity is (elizaOS's ``match_threshold``).
            min_similarity: drops hits whose cosine similarity is below it, in hybrid
                and vector mode: the cut-off that means the same for every query and store.
            weights: the score's weights of ``"relevance"``, ``"importance"`` and
                ``"recency"`` (a key left out weighs 0); the store's when None.
            decay: a recency decay rate per hour, ages counted to now (Nous's); the
                store's when None.
            recency_half_life: the hours in which recency halves, ages counted to the
                newest candidate; the store's when None.
            fusion: how hybrid mode combines its two lists: ``"weighted"`` (an absolute
                relevance) or ``"rrf"`` (reciprocal rank fusion: where a hit ranks).
            rrf_k: the constant of reciprocal rank fusion.
            alpha: the cosine's weight in weighted fusion (BM25's is ``1 - alpha``);
                None: chosen per query, more to the list whose best hits stand out.
            context_weight: the share of a conversation turn's BM25 scored over the turn
                joined with its session's previous and next turn, and in weighted fusion
                of its cosine taken from the better of theirs (0 turns it off).
            answer_weight: in weighted fusion, the share of the gap to the cosine of the
                turn before that a turn answering it takes: one that asks nothing after
                one that asks ("Yes, every Sunday." after "Do you go hiking?"; 0 turns
                it off).
            question_weight: in weighted fusion, the share of its relevance a memory
                made of questions loses, in proportion to how much of its text asks (a
                question seldom holds its answer; 0 turns it off).
            speaker_weight: what a query naming a turn's speaker ("I", "my" or a name)
                adds, as a share of the BM25 ceiling (0 turns it off). While it counts, the
                names of the store's speakers the query holds are left out of the text
                embedded; a message (``table="messages"``) stored without a speaker and
                written as a transcript line, ``"Caroline: ..."``, is weighed as her turn.
            date_weight: what a date the query names ("on 7 May 2023", "in June 2023")
                adds to the relevance of the memories created in or near it, as a share
                of the relevance (0 turns it off; [Search and scores][search-and-scores]).
            when_weight: what a memory whose text tells a time ("yesterday", "last
                week", "on June 21") adds to its relevance when the query asks when
                ("When did ...?", "How long ...?"), as a share of the relevance (English;
                0 turns it off).
            diversity: λ in [0, 1] of maximal marginal relevance (0, the default: off): a
                hit much like one above it gives its place to one that says something else
                ([Search and scores][search-and-scores]).
            candidates: hits each retriever contributes before fusion; by default
                ``max(50, 4 * k)``, ``max(100, 4 * k)`` in a store of conversation turns.
            start: the earliest creation time searched (included).
            end: the creation time searched up to (not included).
            explain: gives each hit its signals in ``hit.explain`` (``bm25``, ``cosine``, ...).
            query_embedding: the query's vector, so that the query is not embedded.
            track_access: whether the hits' access counts are updated (the store's when None).
            include_embedding: whether the hits' records carry their vectors.
            as_of: searches the records true at that time, as known now.
            include_superseded: searches every version, superseded ones too.
            known_at: searches what the store knew at that time; with ``as_of``, what was
                true then as the store knew it at ``known_at``.
            unique: only the unique records (True) or only the others (False), as
                [`list`][memlane.Memory.list].
            rerank: a callable ``(query, hits) -> hits`` handed the best ``max(k, 20)``
                hits; the first ``k`` it returns are the answer (an ONNX cross-encoder:
                ``memlane.embeddings.rerank.CrossEncoder("model.onnx")``).

        The scope arguments (``agent_id`` to ``namespace``) narrow it, over ``default_scope``.

        Returns:
            The hits, best first ([`SearchHit`][memlane.SearchHit]: a record and its score).
        """
        self._sync.check_open()
        fields = self._scope(scope)
        request = _core.SearchRequest(
            Searcher.depth(k, rerank),  # type: ignore[arg-type]
            mode=mode,
            threshold=threshold,
            min_similarity=min_similarity,
            weights=weights,
            decay=decay,
            recency_half_life=recency_half_life,
            fusion=fusion,
            rrf_k=rrf_k,
            alpha=alpha,
            context_weight=context_weight,
            answer_weight=answer_weight,
            question_weight=question_weight,
            speaker_weight=speaker_weight,
            date_weight=date_weight,
            when_weight=when_weight,
            diversity=diversity,
            candidates=candidates,
            explain=explain,
            track_access=track_access,
            table=table,
            type=type,
            scope=fields,
            start=moment(start, "start"),
            end=moment(end, "end"),
            unique=unique,
            filters=filters,
            as_of=moment(as_of, "as_of"),
            known_at=moment(known_at, "known_at"),
            include_superseded=include_superseded,
        )
        return self._searcher.search(
            query,
            request,
            query_embedding=query_embedding,
            include_embedding=coerce.flag(include_embedding, "include_embedding"),
            rerank=rerank,
            k=k,
        )

    # -- upkeep -----------------------------------------------------------------------------

    def refresh(self) -> None:
        """Applies now what other processes committed to a shared (PostgreSQL) store, so
        that the calls made next see every write that returned before this one began,
        in any process. Without it they see them once this process follows them, in
        milliseconds, or seconds while its listening connection is made again after
        the server restarted. An embedded store has no other writer: nothing to do."""
        self._sync.check_open()
        if self._db.shared:
            self._sync.follow()

    def wait_indexed(self) -> None:
        """Links every parked vector into the graph now (searches find them either way)."""
        self._sync.check_open()
        while self._sync.engine.pending():
            self._sync.engine.index_pending(maintenance.INDEX_BATCH, maintenance.LINK_BUDGET)

    # -- export and import ------------------------------------------------------------------

    def export_jsonl(self, path: str | Path, *, embeddings: bool = True) -> int:
        """Writes every record as one JSON object per line, then the history (one
        ``{"history": ...}`` line per replaced version); returns how many records.

        The lines go to a new file beside ``path``, flushed to disk and then renamed
        over ``path``, so a failed export ([`StorageError`][memlane.errors.StorageError]
        for a full disk) leaves ``path`` as it was and nothing else behind.
        """
        self._sync.check_open()
        return jsonl.export(self._db, self._access, coerce.path(path, "path"), embeddings)

    def import_jsonl(
        self, path: str | Path, *, on_conflict: Literal["error", "skip"] = "error"
    ) -> int:
        """Adds the records of an [`export_jsonl`][memlane.Memory.export_jsonl] file with
        every field as exported.

        Records without an embedding are embedded (when the store has an
        embedder). ``on_conflict="skip"`` skips ids already stored. Of the history, only
        the entries the store does not hold yet are added, so importing a file again, or
        retrying an import stopped before its history was written, neither repeats nor
        loses one. Returns how many records were added.

        Every line is checked before the first is stored, so a file with a bad line stores
        nothing: [`CorruptFileError`][memlane.errors.CorruptFileError] for a line that is not
        a JSON object in UTF-8, [`InvalidArgumentError`][memlane.errors.InvalidArgumentError]
        for a record the store refuses, an id given twice or (``on_conflict="error"``) already
        stored, each naming the line. The records then go in 1,000 lines per transaction, and
        the history last, in one. The check embeds the records without an embedding, so a
        text the embedder refuses, or an embedder that stops answering, stores nothing; an
        import failing later (another writer stores one of its ids, a kill) keeps what it
        committed, and ``on_conflict="skip"`` finishes it.
        """
        self._sync.check_open()
        return jsonl.load(self._writer, coerce.path(path, "path"), on_conflict)
