"""The deleting half of ``Writer``: by id (``delete``), by filter (``delete_all``), by
age (``prune``), past a cap (``evict``) and by expiry.

What a filter, an age or a rank selects depends on the records' state, which other
processes change too (an ``update`` pinning a memory evergreen, an eviction of the same
scope). So each selects inside its own write transaction, once every other writer's
commit is applied (writers commit one at a time, by ``seq``), as ``replace`` selects
what it deletes: a record is judged as it is when it goes, on both backends.
"""

from __future__ import annotations

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
from memlane._memory.sync import IndexSync
from memlane.errors import InvalidArgumentError
from memlane.records import MemoryRecord
from memlane.schema import Row
from memlane.storage import Store


def _rank(chosen: tuple[int, MemoryRecord]) -> tuple[float, int, float, str]:
    """The order eviction takes records in: the least important, then the least used,
    then the longest unused (created or last read), then by id, so that two evictions
    of one scope choose alike."""
    rec = chosen[1]
    return (rec.importance, rec.access_count, max(rec.created_at, rec.last_accessed_at), rec.id)


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
        sync = self.sync
        with sync.writing(), sync.lock:
            sync.check_open()
            found: dict[str, Row] = {}
            for record_id in dict.fromkeys(ids):
                row = self.db.row_by_id(record_id)
                if row is not None:
                    found[record_id] = row
            if found:
                deleted = self.delete_rowids([row.rowid for row in found.values()])
                found = {i: row for i, row in found.items() if row.rowid in deleted}
            for record_id in found:
                self.window.forget(record_id)
        return found

    def delete_where(self, admits: Admits) -> int:
        """Deletes every record ``admits`` admits, in one transaction; returns how many."""
        sync = self.sync

        def choose() -> list[int]:
            return [int(x) for x in sync.engine.ids_where(admits)]

        with sync.writing(), sync.lock:
            sync.check_open()
            return len(self._delete_chosen(choose, None))

    def delete_rowids(self, rowids: list[int], actor: str | None = None) -> set[int]:
        """One transaction deleting ``rowids`` (write lock held); returns those deleted:
        the rows of ids a caller named, whatever their state."""
        sync, db = self.sync, self.db
        doomed = self.events.doomed(sync, rowids)
        with db.transaction() as conn:
            seq = db.next_seq(conn)
            self.access.drop(rowids)
            self.access.flush(db, conn, seq)
            deleted = db.delete(conn, rowids, seq, actor)
        sync.engine.remove(np.asarray(rowids, dtype=np.uint64), missing_ok=True)
        sync.committed(seq, len(rowids))
        self.events.deleted(doomed, deleted, actor)
        return deleted

    def _delete_chosen(self, choose: Callable[[], list[int]], actor: str | None) -> set[int]:
        """Deletes the rowids ``choose`` selects (write lock held), selected inside the
        delete's transaction once every other writer's commit is applied; returns those
        deleted.

        ``choose`` runs once before the transaction too: when it selects nothing then,
        nothing is written (the delete took effect at that instant), which spares a
        change, and its fsync, to every call that finds nothing to delete."""
        sync, db = self.sync, self.db
        sync.follow()
        if not choose():
            return set()
        with db.transaction() as conn:
            seq = db.next_seq(conn)
            # Writers commit one at a time (seq): what others committed is applied now.
            sync.follow()
            rowids = choose()
            doomed = self.events.doomed(sync, rowids)
            self.access.drop(rowids)
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

        def choose() -> list[int]:
            rowids = [int(x) for x in sync.engine.ids_where(admits, order="asc")]
            rows = sync.rows(rowids)
            doomed[:] = [record(rows[r], self.access.get(rows[r])) for r in rowids if r in rows]
            return rowids

        with sync.writing(), sync.lock:
            sync.check_open()
            if dry_run:
                sync.follow()
                choose()
                return doomed
            self._delete_chosen(choose, "prune")
            for rec in doomed:
                self.window.forget(rec.id)
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
        candidates = Admits({"$and": [*conds, {"evergreen": False}]}, table=table, scope=scope)
        sync = self.sync
        chosen: list[tuple[int, MemoryRecord]] = []

        def choose() -> list[int]:
            expire_at = time.time() if sync.expiring else None  # an expired record is gone
            over = int(sync.engine.count(counted, expire_at=expire_at)) - limit
            chosen.clear()
            if over <= 0:
                return []
            rowids = [int(x) for x in sync.engine.ids_where(candidates, expire_at=expire_at)]
            rows = sync.rows(rowids)
            ranked = ((r, record(rows[r], self.access.get(rows[r]))) for r in rowids if r in rows)
            chosen.extend(sorted(ranked, key=_rank)[:over])
            return [r for r, _ in chosen]

        with sync.writing(), sync.lock:
            sync.check_open()
            deleted = self._delete_chosen(choose, "evict")
            evicted = [rec for rowid, rec in chosen if rowid in deleted]
            for rec in evicted:
                self.window.forget(rec.id)
        return evicted

    def expire(self, now: float) -> int:
        """Deletes the records expired at ``now`` (their last version stays in the
        history, deleted by ``"expire"``); returns how many."""
        sync = self.sync
        if not sync.expiring:
            return 0
        total = 0
        batch: list[int] = []

        def choose() -> list[int]:
            # Read in the transaction: an expiry another process moved on meanwhile (a
            # TTL refreshed by a write) keeps its record.
            batch[:] = self.db.expired(now)
            return batch

        while True:
            with sync.writing(), sync.lock:
                sync.check_open()
                total += len(self._delete_chosen(choose, "expire"))
            if len(batch) < 1000:
                return total
