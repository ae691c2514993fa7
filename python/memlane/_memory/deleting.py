"""The deleting half of ``Writer``: by id (``delete``), by filter (``delete_all``), by
age (``prune``), past a cap (``evict``) and by expiry.

What a filter, an age or a rank selects depends on the records' state, which other
processes change too (an ``update`` pinning a memory evergreen, an eviction of the same
scope). So each selects inside its own write transaction, once every other writer's
commit is applied (writers commit one at a time, by ``seq``), as ``replace`` selects
what it deletes: a record is judged as it is when it goes, on both backends.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from memlane import coerce, times
from memlane._core import Admits
from memlane._memory.access import AccessLog
from memlane._memory.duplicates import DedupWindow
from memlane._memory.encoding import record
from memlane._memory.events import Events
from memlane._memory.querying import visible
from memlane._memory.sync import IndexSync
from memlane.errors import InvalidArgumentError
from memlane.records import MemoryRecord
from memlane.schema import Row
from memlane.storage import Store


def _rank(rowid: int, rec: MemoryRecord) -> tuple[float, int, float, float, int]:
    """The order eviction takes records in: the least important (in single precision, as
    the engine holds it), then the least used, then the longest unused (created or last
    read), then the oldest, then the first stored, so that two evictions of one scope
    choose alike. The last two are the engine's own tie-break (``ids_where``), which
    ``Deleting._lowest`` ranks by."""
    unused = max(rec.created_at, rec.last_accessed_at)
    return (float(np.float32(rec.importance)), rec.access_count, unused, rec.created_at, rowid)


class Deleting:
    """The deletes of ``Writer``, which holds these collaborators."""

    sync: IndexSync
    db: Store
    access: AccessLog
    window: DedupWindow
    events: Events

    def delete_ids(self, ids: Sequence[str]) -> dict[str, Row]:
        """Deletes the records of ``ids`` that exist, in one transaction (one change);
        returns the rows it deleted, by id (another process may have deleted some
        first: they are not reported as deleted here)."""
        db, wanted = self.db, list(dict.fromkeys(ids))
        found: dict[str, Row] = {}

        def present() -> bool:
            return any(visible(db.row_by_id(i), time.time()) for i in wanted)

        def choose(conn: Any) -> list[int]:
            # Resolved in the transaction: another process may have replaced a record
            # under the same id meanwhile (add_many consuming it), and its row goes. One
            # expired is gone for every read already: the sweep deletes it, by "expire".
            now = time.time()
            rows = db.rows_for_write(conn, wanted, embedding=False)
            found.update((i, row) for i, row in rows.items() if visible(row, now))
            return [row.rowid for row in found.values()]

        with self.sync.writing(), self.sync.lock:
            self.sync.check_open()
            deleted = self._delete_chosen(present, choose, None)
            found = {i: row for i, row in found.items() if row.rowid in deleted}
            self.window.forget(found)
        return found

    def delete_where(self, admits: Admits) -> int:
        """Deletes every record ``admits`` admits, in one transaction; returns how many.
        Those expired are not among them (no read shows them: the sweep deletes them)."""
        engine = self.sync.engine

        def present() -> bool:
            return engine.count(admits, expire_at=self._expire_at()) > 0

        def choose(conn: Any) -> list[int]:
            return [int(x) for x in engine.ids_where(admits, expire_at=self._expire_at())]

        with self.sync.writing(), self.sync.lock:
            self.sync.check_open()
            return len(self._delete_chosen(present, choose, None))

    def _replaced(self, admits: Admits) -> tuple[list[int], list[int]]:
        """What a ``replace`` of ``admits`` deletes (in its transaction): the records it
        admits, and apart those of them that expired (no read shows them), which go as
        the sweep would take them, by ``"expire"``, so that an id one held passes on to
        a new record as a replaced record's does."""
        engine, expire_at = self.sync.engine, self._expire_at()
        live = [int(x) for x in engine.ids_where(admits, expire_at=expire_at)]
        if expire_at is None:
            return live, []
        kept = set(live)
        return live, [r for r in map(int, engine.ids_where(admits)) if r not in kept]

    def _delete_chosen(
        self, present: Callable[[], bool], choose: Callable[[Any], list[int]], actor: str | None
    ) -> set[int]:
        """Deletes the rowids ``choose`` selects (write lock held), selected inside the
        delete's transaction (``conn``) once every other writer's commit is applied;
        returns those deleted.

        ``present`` looks first, before the transaction, whether there may be anything
        to delete: when not, nothing is written (the delete took effect at that
        instant), which spares a change, and its fsync, to every call that finds
        nothing. It is cheap (a count, an indexed look): the selection itself, which may
        read rows, is made once, in the transaction."""
        sync, db = self.sync, self.db
        sync.follow()
        if not present():
            return set()
        with db.transaction() as conn:
            seq = db.next_seq(conn)
            # Writers commit one at a time (seq): what others committed is applied now.
            sync.follow()
            rowids = choose(conn)
            doomed = self.events.doomed(sync, rowids)
            self.access.flush(db, conn, seq)
            deleted = db.delete(conn, rowids, seq, actor) if rowids else set()
        sync.engine.remove(np.asarray(rowids, dtype=np.uint64), missing_ok=True)
        sync.committed(seq, len(rowids))
        self.events.deleted(doomed, deleted, actor)
        return deleted

    def prune(
        self,
        table: str | None,
        scope: dict[str, str],
        max_age_days: object,
        keep_importance_at_least: object,
        keep_access_count_above: object,
        now: object,
        dry_run: object = False,
    ) -> list[MemoryRecord]:
        """Deletes, in one transaction, the records of ``table`` and ``scope`` older than
        ``max_age_days`` and kept neither by importance, nor by use, nor by being
        evergreen (see ``Memory.prune``); returns them, oldest first. ``dry_run``:
        only returns them."""
        if not isinstance(dry_run, bool):
            raise InvalidArgumentError(f"dry_run must be a bool, got {type(dry_run).__name__}")
        limits = {
            "max_age_days": max_age_days,
            "keep_importance_at_least": keep_importance_at_least,
            "keep_access_count_above": keep_access_count_above,
        }
        if all(v is None for v in limits.values()):
            raise InvalidArgumentError(f"give at least one of {', '.join(limits)}")
        age, imp, acc = (None if v is None else coerce.number(v, k) for k, v in limits.items())
        if age is not None and age < 0:
            raise InvalidArgumentError(f"max_age_days must be >= 0, got {age}")
        clock = time.time() if now is None else coerce.timestamp(now, "now")
        conds: list[dict[str, Any]] = [{"evergreen": False}]
        if age is not None:
            # An age past every time a record may hold ("older than forever", or one whose
            # seconds overflow to infinity) prunes nothing: no created_at is below MIN_TIME.
            cutoff = max(clock - age * 86400.0, times.MIN_TIME)
            conds.append({"created_at": {"$lt": cutoff}})
        if imp is not None:
            conds.append({"importance": {"$lt": imp}})
        if acc is not None:
            conds.append({"access_count": {"$lte": acc}})
        admits = Admits({"$and": conds}, table=table, scope=scope)
        sync = self.sync
        doomed: list[MemoryRecord] = []

        def present() -> bool:
            return sync.engine.count(admits, expire_at=self._expire_at()) > 0

        def choose(conn: Any = None) -> list[int]:
            found = sync.engine.ids_where(admits, order="asc", expire_at=self._expire_at())
            rowids = [int(x) for x in found]
            rows = sync.rows(rowids)
            doomed[:] = [record(rows[r], self.access.get(rows[r])) for r in rowids if r in rows]
            return rowids

        with sync.writing(), sync.lock:
            sync.check_open()
            if dry_run:
                sync.follow()
                choose()
                return doomed
            self._delete_chosen(present, choose, "prune")
            self.window.forget(rec.id for rec in doomed)
        return doomed

    def evict(
        self,
        cap: object,
        table: str | None,
        scope: dict[str, str],
        filters: Mapping[str, Any] | None,
    ) -> list[MemoryRecord]:
        """Deletes, in one transaction, the lowest-ranked current non-evergreen records of
        ``table`` and ``scope`` (and ``filters``) past ``cap`` current ones (see
        ``Memory.evict``); returns them, the lowest first."""
        limit = coerce.count(cap, "cap")
        conds: list[Mapping[str, Any]] = [{"valid_to": None}]
        if filters is not None:
            conds.append(filters)
        counted = Admits({"$and": conds}, table=table, scope=scope)
        conds.append({"evergreen": False})
        candidates = Admits({"$and": conds}, table=table, scope=scope)
        engine = self.sync.engine
        chosen: list[tuple[int, MemoryRecord]] = []

        def over(expire_at: float | None) -> int:
            return int(engine.count(counted, expire_at=expire_at)) - limit

        def present() -> bool:  # counts alone: the ranking is made in the transaction
            expire_at = self._expire_at()
            return over(expire_at) > 0 and engine.count(candidates, expire_at=expire_at) > 0

        def choose(conn: Any) -> list[int]:
            expire_at = self._expire_at()
            chosen.clear()
            excess = over(expire_at)
            if excess > 0:
                rows = self._lowest(conds, table, scope, excess, expire_at)
                ranked = ((r, record(row, self.access.get(row))) for r, row in rows.items())
                chosen.extend(sorted(ranked, key=lambda c: _rank(*c)))
            return [r for r, _ in chosen]

        with self.sync.writing(), self.sync.lock:
            self.sync.check_open()
            deleted = self._delete_chosen(present, choose, "evict")
            evicted = [rec for rowid, rec in chosen if rowid in deleted]
            self.window.forget(rec.id for rec in evicted)
        return evicted

    def _expire_at(self) -> float | None:
        """The time the records expired by are gone at (None: none expires)."""
        return time.time() if self.sync.expiring else None

    def _lowest(
        self,
        conds: list[Mapping[str, Any]],
        table: str | None,
        scope: dict[str, str],
        k: int,
        expire_at: float | None,
    ) -> dict[int, Row]:
        """The rows of the ``k`` records ranked lowest (``_rank``) of those ``conds``
        admits in ``table`` and ``scope``, by rowid.

        The engine ranks them a column at a time (``ids_where``'s orders, each one pass
        over its columns): the records below the ``k``-th lowest's importance all go,
        the rest come from those of its importance, and so on with the accesses and the
        time unused; rows are read for those chosen and one per column, never for every
        record admitted (a scope of thousands over its cap by one)."""
        engine, sync = self.sync.engine, self.sync
        read: dict[int, Row] = {}

        def ids(more: list[Mapping[str, Any]], sort: str, limit: int | None = None) -> list[int]:
            admits = Admits({"$and": [*conds, *more]}, table=table, scope=scope)
            page = {} if limit is None else {"limit": limit}
            found = engine.ids_where(admits, order="asc", sort=sort, expire_at=expire_at, **page)
            return [int(x) for x in found]

        def fetch(rowids: list[int]) -> None:
            missing = [r for r in rowids if r not in read]
            if missing:
                read.update(sync.rows(missing))

        def rec(rowid: int) -> MemoryRecord:
            fetch([rowid])
            return record(read[rowid], self.access.get(read[rowid]))

        def pick() -> list[int]:
            chosen: list[int] = []
            tier: list[Mapping[str, Any]] = []
            need = k
            for field in ("importance", "access_count"):
                first = ids(tier, field, need)
                if len(first) < need:  # fewer left than wanted: all go
                    return chosen + first
                bound = getattr(rec(first[-1]), field)
                below = ids([*tier, {field: {"$lt": bound}}], field)
                chosen += below
                need -= len(below)
                tier.append({field: bound})
            first = ids(tier, "last_accessed_at", need)
            fetch(first)
            if len(first) < need:
                return chosen + first
            # The need-th lowest time unused is at most the latest of these: the records
            # unused since before it all go, then those of that time in the engine's order.
            at = max(max(r.created_at, r.last_accessed_at) for r in map(rec, first))
            earlier = [*tier, {"created_at": {"$lt": at}}, {"last_accessed_at": {"$lt": at}}]
            before = ids(earlier, "created_at")
            if len(before) < need:
                then = [{"created_at": at, "last_accessed_at": {"$lte": at}}]
                then.append({"last_accessed_at": at, "created_at": {"$lte": at}})
                return (
                    chosen + before + ids([*tier, {"$or": then}], "created_at", need - len(before))
                )
            # Only records last read before they were created (imported so) come before
            # these out of the engine's order: ranked here from their rows.
            fetch(before)
            return chosen + heapq.nsmallest(need, before, key=lambda r: _rank(r, rec(r)))

        chosen = list(dict.fromkeys(pick()))[:k]
        if len(chosen) < k:
            # A search in another thread recorded an access between two of the engine's
            # passes, moving a record out of the tier it was looked for in: the rest are
            # taken by importance alone (rare, and the cap still holds).
            taken = set(chosen)
            more = [r for r in ids([], "importance", k + len(chosen)) if r not in taken]
            chosen += more[: k - len(chosen)]
        fetch(chosen)
        return {r: read[r] for r in chosen if r in read}

    def expire(self, now: float, gone: list[Row] | None = None) -> int:
        """Deletes the records expired at ``now`` (their last version stays in the
        history, deleted by ``"expire"``); returns how many, and puts their rows in
        ``gone`` when given."""
        sync = self.sync
        if not sync.expiring:
            return 0
        total = 0
        batch: list[int] = []
        rows: dict[int, Row] = {}

        def choose(conn: Any = None) -> list[int]:
            # Read in the transaction: an expiry another process moved on meanwhile (a
            # TTL refreshed by a write) keeps its record.
            batch[:] = self.db.expired(now)
            if gone is not None and conn is not None:
                rows.update(sync.rows(batch))
            return batch

        while True:
            with sync.writing(), sync.lock:
                sync.check_open()
                deleted = self._delete_chosen(lambda: bool(choose()), choose, "expire")
                total += len(deleted)
                if gone is not None:
                    gone += [rows[r] for r in batch if r in deleted and r in rows]
            if len(batch) < 1000:
                return total
