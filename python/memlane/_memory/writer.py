"""The write path: validate everything, embed, decide duplicates, commit one
transaction, then apply the change to the engine (which can no longer fail).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

import numpy as np

from memlane import coerce, times
from memlane._core import Admits, blobs, unblobs
from memlane._memory import duplicates
from memlane._memory.access import AccessLog
from memlane._memory.deleting import Deleting
from memlane._memory.duplicates import DedupWindow, window_keys
from memlane._memory.embedding import embed_texts
from memlane._memory.encoding import (
    NewRecord,
    as_indexed,
    blob,
    expiry,
    prepare,
    record,
    unblob,
    validate,
)
from memlane._memory.progress import PROGRESS_PART, progress_bar
from memlane._memory.querying import visible
from memlane._memory.sync import IndexSync
from memlane._memory.write_checks import (
    check_current,
    check_not_consumed,
    check_version,
    consume_targets,
    consumed_rows,
    current_for_write,
)
from memlane.coerce import FloatArray
from memlane.embeddings.cache import CachedEmbedder
from memlane.errors import ConflictError, InvalidArgumentError, UnknownIdError
from memlane.records import SCOPE_FIELDS, MemoryRecord
from memlane.schema import Row

# What a superseding record takes from the one it closes, unless given.
_INHERITED = ("table", "type", *SCOPE_FIELDS, "importance", "evergreen", "metadata")
# No record consumed.
_NONE: Mapping[str, float | None] = MappingProxyType({})
# The last time a record may hold (``times.check``): versions stop there.
_LAST_TIME = math.nextafter(times.END_TIME, 0.0)
# Batches at least this large are analysed by the engine while the database writes them.
_OVERLAP_MIN = 256


@dataclass(frozen=True, slots=True)
class Replacing:
    """What a ``replace`` deletes: the records it admits."""

    admits: Admits


class Writer(Deleting):
    """Adds, changes and (through ``Deleting``) deletes records."""

    def __init__(
        self,
        sync: IndexSync,
        access: AccessLog,
        window: DedupWindow,
        embedder: CachedEmbedder | None,
        default_scope: Mapping[str, str],
    ) -> None:
        self.sync = sync
        self.db = sync.db
        self.access = access
        self.window = window
        self.embedder = embedder
        self.default_scope = default_scope
        self.dedup_threshold = 0.95
        self.near_duplicate: Literal["mark", "skip"] = "mark"
        self._pool: ThreadPoolExecutor | None = None
        self.events = sync.events

    def close(self) -> None:
        self.events.close()
        if self._pool is not None:
            self._pool.shutdown()

    # -- adding ----------------------------------------------------------------------

    def add(
        self,
        items: Iterable[Mapping[str, Any]],
        importing: bool = False,
        replacing: Replacing | None = None,
        *,
        progress: bool = False,
        consume: object = (),
    ) -> Any:
        """``add_many``'s records; with ``replacing``, also deletes its matches in the same
        transaction and returns (deleted, records). ``progress``: a bar on stderr while it
        embeds. ``consume``: ids or records of records deleted in the same transaction,
        each of which must be stored and current then, and a record given still that
        version (``ConflictError``)."""
        if progress is not True and progress is not False:
            progress = coerce.flag(progress, "progress")
        consumed = consume_targets(consume)
        bars: list[Any] | None = [] if progress else None
        try:
            with self.sync.writing():
                self.sync.check_open()
                news = self._validate(items, importing)
                self._check_consumed_stored(consumed)
                return self._add(news, importing, replacing, bars=bars, consumed=consumed)
        finally:
            for bar in bars or ():
                bar.close()

    def _check_consumed_stored(self, consumed: Mapping[str, float | None]) -> None:
        """Refuses, before anything is embedded, a consume of a record not stored now:
        one query, and its state is checked again, authoritatively, in the transaction."""
        if not consumed:
            return
        stored = self.db.existing_ids(list(consumed))
        gone = [i for i in consumed if i not in stored]
        if gone:
            raise ConflictError(
                f"memory {gone[0]!r}, which this add_many consumes, is not stored (another "
                "writer deleted it, or it never was); nothing was stored"
            )

    def add_record(self, new: NewRecord) -> MemoryRecord:
        """``add``'s one record, built by ``encoding.new_record`` from its arguments."""
        with self.sync.writing():
            self.sync.check_open()
            records: list[MemoryRecord] = self._add([new], False, None, single=True)
            return records[0]

    def _validate(self, items: Iterable[Mapping[str, Any]], importing: bool) -> list[NewRecord]:
        if not coerce.items(items):
            raise InvalidArgumentError(
                f"add_many takes a list of dicts, got {type(items).__name__}"
            )
        now, dim = time.time(), self.sync.dim
        # An import keeps every field as exported: an unscoped record stays unscoped.
        scope = {} if importing else self.default_scope
        news = []
        for i, item in enumerate(items):
            try:
                news.append(validate(item, now, scope, dim, importing))
            except InvalidArgumentError as e:
                raise type(e)(f"record {i}: {e}") from None
        return news

    def _add(
        self,
        news: list[NewRecord],
        importing: bool,
        replacing: Replacing | None,
        single: bool = False,
        bars: list[Any] | None = None,
        consumed: Mapping[str, float | None] = _NONE,
    ) -> Any:
        """Stores validated records; ``single``: the one record of ``add`` (its errors
        name no position); ``consumed``: records deleted in the same transaction (see
        ``consumed``)."""
        sync = self.sync
        now = time.time()
        if replacing is not None and any(n.dedup for n in news):
            raise InvalidArgumentError("replace stores items as given: unique=True is refused")
        if not news and replacing is None and not consumed:
            return []
        given = [i for i, n in enumerate(news) if n.embedding is not None]
        if given:
            coerce.check_vectors(
                np.stack([news[i].embedding for i in given]),  # type: ignore[misc]
                None if single else given,
                "embedding",
            )
        seen: set[str] = set()
        for n in news:
            if n.id in seen:
                raise InvalidArgumentError(f"id {n.id!r} appears twice in one add_many")
            seen.add(n.id)
        missing = []
        if self.embedder is not None:
            missing = [i for i, n in enumerate(news) if n.embedding is None]
        bar = None
        if bars is not None:
            bar = progress_bar(len(news))
            bars.append(bar)
            bar.update(len(news) - len(missing))
        # With a bar, the model runs in parts so that the bar moves (each part is still
        # sorted by length and batched by the embedder).
        step = PROGRESS_PART if bar is not None else max(1, len(missing))
        for start in range(0, len(missing), step):
            part = missing[start : start + step]
            vectors = self._embed_texts([news[i].text for i in part])
            for i, v in zip(part, vectors, strict=True):
                news[i].embedding = v
            if bar is not None:
                bar.update(len(part))
        if bar is not None:
            bar.set_postfix_str("storing")
        if not single:
            # Before the commit: an interrupt while it links leaves the write unmade.
            sync.keep_up(len(news))

        with sync.lock:
            sync.check_open()
            if replacing is None and not consumed:  # else in the transaction
                self._check_ids(news, [])
            if importing or replacing is not None:
                decision = duplicates.Decision(store=list(range(len(news))))
            else:
                # The clock read now, not before the embedding: what expired
                # meanwhile is no duplicate.
                decision = duplicates.decide(
                    news,
                    time.time(),
                    db=self.db,
                    engine=sync.engine,
                    window=self.window,
                    threshold=self.dedup_threshold,
                    near_duplicate=self.near_duplicate,
                    expiring=sync.expiring,
                )
                check_not_consumed(news, decision, consumed)
            recent: list[tuple[str, str, float]] = []
            if self.window.seconds > 0 and not importing and replacing is None:
                for i in decision.store:
                    n = news[i]
                    if n.metadata:
                        keys = window_keys(n.scope_key, n.metadata, n.content_hash)
                        recent.extend((k, n.id, now) for k in keys)
            gone = 0
            if decision.store or replacing is not None or consumed:
                order = list(decision.store)
                late = duplicates.stored_meanwhile(self.db, decision, news, order, recent)
                gone = self._insert([news[i] for i in order], recent, replacing, consumed, late)
            for key, record_id, at in recent:
                self.window.remember([key], record_id, at)
            results = duplicates.results(self.db, self.access, news, decision)
        records = [results[i] for i in range(len(news))]
        return records if replacing is None else (gone, records)

    def _check_ids(self, news: list[NewRecord], gone: list[int]) -> None:
        # Ids made here are random UUIDs; only the caller's can collide.
        given_ids = [n.id for n in news if n.id_given]
        taken = self.db.existing_ids(given_ids, time.time()) if given_ids else set()
        if taken and gone:  # a record replaced may pass its id on
            leaving = set(gone)
            rows = (self.db.row_by_id(t) for t in taken)
            taken = {r.id for r in rows if r is not None and r.rowid not in leaving}
        if taken:
            raise InvalidArgumentError(
                f"id(s) already stored: {sorted(taken)[:5]}; use update() to change a record"
            )

    def _embed_texts(self, texts: list[str]) -> FloatArray:
        assert self.embedder is not None
        return embed_texts(self.embedder, self.sync.dim, texts)

    def _insert(
        self,
        news: list[NewRecord],
        recent: list[tuple[str, str, float]],
        replacing: Replacing | None = None,
        consumed: Mapping[str, float | None] = _NONE,
        late: Callable[[Any], set[int]] | None = None,
    ) -> int:
        """Commits and indexes new records (write lock held), but those ``late`` finds in
        the transaction (by position) were stored meanwhile. With ``replacing``, the
        records its filter admits are deleted in the same transaction, found there after
        every other writer's commit is applied, so none added meanwhile survives (those
        expired by ``"expire"``: ``_replaced``); with ``consumed``, the records of those
        ids, each stored, current and the version given then or nothing is stored
        (``ConflictError``). Returns how many were deleted (not counting the expired)."""
        sync, db = self.sync, self.db
        base = db.reserve_rowids(len(news)) if news else 0
        vectors = None
        stored: list[bytes | None] = [None] * len(news)
        if sync.dim is not None and news:
            vectors = np.stack([n.embedding for n in news])  # type: ignore[misc]
            half = blobs(vectors, sync.half)
            stored = list(half)
            if sync.half:  # indexed as stored: see encoding.as_indexed
                vectors = unblobs(half, sync.dim)
        if any(n.expires_at is not None for n in news):
            sync.expiring = True
        gone: list[int] = []
        lapsed: list[int] = []
        with db.transaction() as conn:
            seq = db.next_seq(conn)
            # Built once, stamped with the change's number, for the database and the
            # engine alike. The engine checks and analyses the batch (without the GIL)
            # while the database writes it; the commit waits for that check, so a batch
            # the engine would refuse is rolled back and nothing changes.
            # New rowids have no accesses waiting to be flushed.
            rows = [n.row(base + j, seq, stored[j]) for j, n in enumerate(news)]
            if late is not None and (dropped := late(conn)):
                keep = [j for j in range(len(news)) if j not in dropped]
                news, rows = [news[j] for j in keep], [rows[j] for j in keep]
                vectors = None if vectors is None else vectors[keep]
            if len(news) >= _OVERLAP_MIN:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(1, thread_name_prefix="memlane-prepare")
                future = self._pool.submit(
                    prepare, sync.engine, rows, texts=True, vectors=vectors, pending={}
                )
            else:
                prepared = prepare(sync.engine, rows, texts=True, vectors=vectors, pending={})
            if replacing is not None or consumed:
                # Writers commit one at a time (seq): what others committed is applied now.
                sync.follow()
                if replacing is not None:
                    gone, lapsed = self._replaced(replacing.admits)
                now = time.time()
                gone += consumed_rows(db, conn, consumed, now) if consumed else []
                gone = list(dict.fromkeys(gone))
                self._check_ids(news, gone + lapsed)
            given = [n.id for n in news if n.id_given]
            # An expired record's id is free: it goes first (on PostgreSQL another
            # process's expiring records may not have reached this one's flag yet).
            if given and (sync.expiring or db.shared):
                lapsed += db.expired_ids(conn, given, time.time())
                lapsed = [r for r in dict.fromkeys(lapsed) if r not in gone]
            doomed = self.events.doomed(sync, gone)
            expired = self.events.doomed(sync, lapsed)
            actor = "replace" if replacing is not None else "add_many"
            # First: a new record may take a deleted one's id.
            if lapsed:
                db.delete(conn, lapsed, seq, "expire")
            if gone:
                db.delete(conn, gone, seq, actor)
            db.insert(conn, rows)
            if len(news) >= _OVERLAP_MIN:
                prepared = future.result()
            if recent:
                db.remember(conn, recent, time.time() - self.window.seconds)
            self.access.flush(db, conn, seq)
        if gone or lapsed:
            sync.engine.remove(np.asarray(gone + lapsed, dtype=np.uint64), missing_ok=True)
        sync.engine.apply(prepared)
        sync.committed(seq, len(news) + len(gone) + len(lapsed))
        self.window.forget(consumed)
        self.events.deleted(expired, set(lapsed), "expire")
        self.events.deleted(doomed, set(gone), actor)
        self.events.added(rows)
        return len(gone)

    # -- changing and deleting ---------------------------------------------------------

    def supersede(
        self,
        old_id: str,
        item: dict[str, Any],
        at: object,
        actor: str | None,
        version: float | None = None,
    ) -> MemoryRecord:
        """Closes ``old_id`` at ``at`` and adds ``item`` (which inherits its table, type,
        scope, importance, evergreen and metadata unless given) valid from then, in one
        transaction; returns the new record.

        The version closed is the one the transaction reads, and the statement closing
        it requires it to be current still: of two writers superseding (or updating and
        superseding) one fact, the later raises ``ConflictError``. With ``version`` (the
        ``updated_at`` of the record the caller read), that read must also still be the
        version stored then: one rewritten since (``update``) is not closed
        (``ConflictError``)."""
        sync, db = self.sync, self.db
        sync.check_open()
        now = time.time()
        given = None if at is None else coerce.timestamp(at, "at")
        seen = db.row_by_id(old_id)
        if not visible(seen, now):
            raise UnknownIdError(f"no memory with id {old_id!r}")
        check_version(seen, version, "supersede")  # before the embedding; again in the transaction
        check_current(seen)
        n = self._successor(seen, item, _starting(given, seen, now), now)
        if n.embedding is not None:
            coerce.check_vectors(n.embedding[None, :], None, "embedding")
        elif self.embedder is not None:
            n.embedding = self._embed_texts([n.text])[0]
        vector = n.embedding
        with sync.writing(), sync.lock:
            sync.check_open()
            self._check_ids([n], [])
            rowid = db.reserve_rowids(1)
            with db.transaction() as conn:
                seq = db.next_seq(conn)
                # The engine rewrites the row: it must hold it, though another process
                # added it (writers commit one at a time, so all before are applied).
                sync.follow()
                row = current_for_write(db, conn, old_id, "supersede", version)
                # Inherited fields as they are now (an update may have come between).
                when = _starting(given, row, now)
                n = self._successor(row, {**item, "id": n.id}, when, now)
                if n.expires_at is not None:
                    sync.expiring = True
                n.embedding = vector
                new = n.row(rowid, 0, blob(vector, sync.half))
                closed = row._replace(valid_to=when, updated_at=_later(now, row), seq=seq)
                adding = sync.prepare([new], texts=True, vectors=as_indexed(new.embedding))
                closing = sync.prepare([closed], texts=False, vectors=None)
                db.record_history(conn, [row.rowid], "supersede", when, actor, n.id, seq=seq)
                db.replace(conn, [closed], expected=[(row.seq, True)])
                db.insert(conn, [Row._make((*new[:-2], seq, seq))])
                self.access.flush(db, conn, seq)
            sync.engine.apply(adding)
            sync.engine.apply(closing)
            sync.committed(seq, 2)
            self.events.superseded(closed, new)
        return n.record()

    def _successor(self, old: Row, item: Mapping[str, Any], when: float, now: float) -> NewRecord:
        """The record superseding ``old``: ``item`` over what it inherits, valid from ``when``."""
        inherited = record(old, None).to_dict(embedding=False)
        base = {k: inherited[k] for k in _INHERITED}
        # No default scope: the successor keeps the old record's, unset fields unset.
        n = validate({**base, **item, "created_at": when}, now, {}, self.sync.dim)
        if when < old.created_at:
            raise InvalidArgumentError(
                f"at ({when}) is before {old.id!r} became true (its created_at, {old.created_at})"
            )
        return n

    def update(
        self,
        record_id: str,
        fields: dict[str, Any],
        actor: str | None = None,
        version: float | None = None,
    ) -> MemoryRecord:
        """Rewrites record ``record_id`` with ``fields`` changed (a new text is embedded
        again), keeping the version it replaces in the history.

        A superseded version is history and is not changed (InvalidArgumentError). The
        row rewritten is the one the transaction reads, and the statement requires it
        unchanged since: an update never reopens a version superseded meanwhile
        (``ConflictError``), nor brings back a deleted one. With ``version`` (the
        ``updated_at`` of the record the caller read), that read must also still be the
        version stored then: one rewritten since is not overwritten (``ConflictError``)."""
        sync, db = self.sync, self.db
        sync.check_open()
        if "expires_at" in fields or "ttl" in fields:
            # Checked as add checks it (one already past is refused), once: the rewritten
            # record is then checked as an import is, which keeps the expiry it holds.
            at = expiry(fields.get("expires_at"), fields.get("ttl"), time.time())
            fields = {k: v for k, v in fields.items() if k != "ttl"} | {"expires_at": at}
        seen = db.row_by_id(record_id)
        if not visible(seen, time.time()):
            raise UnknownIdError(f"no memory with id {record_id!r}")
        check_version(seen, version, "update")  # before the embedding; again in the transaction
        check_current(seen, "update")
        n = self._updated(seen, fields)
        new_vector = n.embedding is not None
        if new_vector:
            coerce.check_vectors(n.embedding[None, :], None, "embedding")  # type: ignore[index]
        elif "text" in fields and fields["text"] != seen.text and self.embedder is not None:
            n.embedding = self._embed_texts([n.text])[0]
            new_vector = True
        vector = n.embedding
        with sync.writing(), sync.lock:
            sync.check_open()
            with db.transaction() as conn:
                seq = db.next_seq(conn)
                sync.follow()  # as supersede: the engine must hold the row it rewrites
                row = current_for_write(db, conn, record_id, "update", version)
                n = self._updated(row, fields)
                if n.expires_at is not None:
                    sync.expiring = True
                n.embedding = vector if new_vector else unblob(row.embedding)
                pending = self.access.get(row)
                n.access_count, n.last_accessed_at = row.access_count, row.last_accessed_at
                changed = n.text != row.text or new_vector
                if changed:
                    # What the store knows changed now (searches ``known_at`` before
                    # this do not see the new text; the old one is in the history).
                    n.recorded_at = time.time()
                content_seq = seq if changed else row.content_seq
                full = n.row(row.rowid, seq, blob(n.embedding, sync.half))
                full = full._replace(content_seq=content_seq)
                vectors = as_indexed(full.embedding) if new_vector else None
                # Its change's seq: the accesses a flush before it wrote are in its counts.
                prepared = sync.prepare([full], texts=changed, vectors=vectors)
                db.record_history(conn, [row.rowid], "update", time.time(), actor, seq=seq)
                db.replace(conn, [full], expected=[(row.seq, True)])
                self.access.flush(db, conn, seq)
            sync.engine.apply(prepared)
            sync.committed(seq, 1)
            self.events.updated(full)
        rec = n.record()
        if pending is not None:
            rec.access_count += pending[0]
            rec.last_accessed_at = max(rec.last_accessed_at, pending[1])
        return rec

    def _updated(self, row: Row, fields: Mapping[str, Any]) -> NewRecord:
        """``row``'s record with ``fields`` changed, checked."""
        item = record(row, None).to_dict(embedding=False)
        for key in ("duplicate", "duplicate_of"):
            item.pop(key, None)
        item.update(fields)
        item["updated_at"] = _later(time.time(), row)
        # No default scope: the record keeps its own, unset fields unset.
        return validate(item, time.time(), {}, self.sync.dim, importing=True)

    def renew(self, ids: Mapping[str, float | None], expires_at: float | None) -> int:
        """Sets the expiry of the records ``ids`` that are stored, current, unexpired and
        the version given (their ``updated_at``, where not None) to ``expires_at``, in one
        transaction, keeping no version in the history (an expiry
        says when the store forgets a record, not what it says, and a TTL refreshed on
        every read would keep a copy per read); returns how many. Their ``updated_at``
        stays: a rewrite judged against a record read before stays valid."""
        sync, db = self.sync, self.db
        sync.check_open()
        with sync.writing(), sync.lock:
            sync.check_open()
            with db.transaction() as conn:
                # The change's number before its rows, as every writer takes them: two
                # writers locking them in other orders deadlock on PostgreSQL.
                seq = db.next_seq(conn)
                sync.follow()  # the engine must hold the rows it rewrites
                now = time.time()
                found = db.rows_for_write(conn, list(ids))
                # A superseded version is history, which no change but a delete touches.
                rows = [
                    r
                    for key, r in found.items()
                    if visible(r, now) and r.valid_to is None and ids[key] in (None, r.updated_at)
                ]
                renewed = [r._replace(expires_at=expires_at, seq=seq) for r in rows]
                prepared = sync.prepare(renewed, texts=False, vectors=None) if rows else None
                if rows:
                    db.replace(conn, renewed, expected=[(r.seq, True) for r in rows])
                self.access.flush(db, conn, seq)
                if expires_at is not None and rows:
                    sync.expiring = True
            if prepared is not None:
                sync.engine.apply(prepared)
            sync.committed(seq, len(renewed))
            for row in renewed:
                self.events.updated(row)
        return len(renewed)

    def flush_access(self) -> None:
        """Writes the gathered access counts in a transaction of their own."""
        sync = self.sync
        with sync.lock:
            # Also when nothing was gathered since a write whose commit failed: the counts
            # it tried to save are saved again only by a flush that takes its change.
            if not self.access and not self.access.unsaved():
                return
            with self.db.transaction() as conn:
                seq = self.db.next_seq(conn)
                self.access.flush(self.db, conn, seq)
            sync.committed(seq, 0)


def _starting(given: float | None, old: Row, now: float) -> float:
    """When a superseding record starts: ``at`` as given, else now, or the start of the
    fact it replaces when the clock was set back since (the newest statement still wins;
    a start given before it is refused by ``_successor``)."""
    return max(now, old.created_at) if given is None else given


def _later(now: float, row: Row) -> float:
    """The ``updated_at`` of a rewrite of ``row``: a record's version, which a rewrite
    read earlier is checked against (``check_version``), so it must differ from every
    earlier one though the clock stood still or went back (a coarse, mocked or reset
    clock). It stays a time a datetime holds: a record imported with the last one keeps
    it (no later version can be told from it)."""
    return min(max(now, math.nextafter(row.updated_at, math.inf)), _LAST_TIME)
