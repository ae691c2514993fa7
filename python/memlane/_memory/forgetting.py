"""The record API's ways records leave a store, which ``MemoryStore`` inherits: by age
and disuse (``prune``), past a cap (``evict``), and when their expiry comes, which
``renew`` moves (LangGraph's TTL refreshed on read) and ``expire`` brings forward."""

from __future__ import annotations

import builtins
import time
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, Unpack

from memlane import coerce
from memlane._memory.encoding import expiry, record
from memlane._memory.sync import IndexSync
from memlane._memory.writer import Writer
from memlane.errors import InvalidArgumentError, shown
from memlane.records import MemoryRecord
from memlane.scoping import Scope, ScopeFields

__all__ = ["Forgetting"]


class Forgetting:
    """``prune``, ``evict``, ``renew`` and ``expire``, over the store's writer."""

    _sync: IndexSync
    _writer: Writer
    default_scope: dict[str, str]

    def prune(
        self,
        *,
        max_age_days: float | None = None,
        keep_importance_at_least: float | None = None,
        keep_access_count_above: int | None = None,
        table: str | None = "memories",
        now: float | None = None,
        dry_run: bool = False,
        **scope: Unpack[ScopeFields],
    ) -> builtins.list[MemoryRecord]:
        """Deletes old memories that are not important, used or evergreen; returns them,
        oldest first. One filtered delete in one transaction, which selects them as
        [`delete_all`][memlane.Memory.delete_all] does (a memory made evergreen meanwhile
        by another process stays).

        A memory is pruned when it was created more than ``max_age_days`` ago
        (any age if None), and it is not kept by importance (``importance >=
        keep_importance_at_least``) or by use (``access_count >
        keep_access_count_above``). Evergreen memories are never pruned. At least
        one criterion must be given. ``table=None`` prunes every table (knowledge
        fragments and messages included). ``now`` (unix seconds) is the clock
        ages are measured on. ``dry_run=True`` returns what would go and deletes
        nothing (``memlane prune --dry-run``).
        """
        self._sync.check_open()
        fields = Scope.of(self.default_scope, scope).fields
        criteria = (max_age_days, keep_importance_at_least, keep_access_count_above)
        return self._writer.prune(table, fields, *criteria, now=now, dry_run=dry_run)

    def evict(
        self,
        cap: int,
        table: str | None = "memories",
        *,
        filters: Mapping[str, Any] | None = None,
        **scope: Unpack[ScopeFields],
    ) -> builtins.list[MemoryRecord]:
        """Keeps at most ``cap`` current records in the table and scope (and ``filters``):
        past it, deletes the lowest-ranked current ones that are not evergreen, and
        returns them, the lowest first.

        The rank: the least important first, then the fewest accesses, then the
        longest unused (the later of creation and last access), then the oldest, then
        the first stored. Evergreen
        records are never evicted, so they may keep the count above ``cap``;
        superseded versions (a fact's history) neither count nor are evicted.
        ``table=None`` counts every table together.

        Counting, choosing and deleting are one transaction, after every other writer's
        commit is applied: a record pinned evergreen meanwhile stays, and two evictions
        of one scope at once leave ``cap`` records, not fewer.
        """
        self._sync.check_open()
        return self._writer.evict(cap, table, Scope.of(self.default_scope, scope).fields, filters)

    def renew(
        self,
        ids: Iterable[str | MemoryRecord],
        *,
        expires_at: float | datetime | None = None,
        ttl: float | None = None,
    ) -> int:
        """Moves the expiry of the records ``ids`` to ``expires_at`` (or ``ttl`` seconds
        from now; neither: they never expire) in one transaction, and returns how many
        it moved: records not stored, expired or superseded are left out.

        ``ids`` holds records' ids, or records as read (``get``, ``list``, a search hit's
        ``record``): such a record is renewed only while it is still the version read (its
        ``updated_at``, checked inside the transaction), so an expiry worked out from what
        was read never lands on a rewrite made since (it is left out).

        No version is kept in the [`history`][memlane.Memory.history] and ``updated_at``
        stays (an expiry says when the store forgets a record, not what it says), so a
        TTL refreshed at every read does not grow the store, and a change judged against
        a record read before still applies; ``update(expires_at=...)`` keeps a version.
        Each record renewed is an ``update`` event to this process's subscribers only:
        other processes tell events from the history, and an entry per renew would grow
        it at every read.
        """
        self._sync.check_open()
        if not coerce.items(ids):
            raise InvalidArgumentError(f"ids must be a list of ids or records, got {shown(ids)}")
        wanted: dict[str, float | None] = {}
        for k, item in enumerate(ids):
            if isinstance(item, MemoryRecord):
                key = coerce.text(item.id, f"ids[{k}].id")
                version = coerce.timestamp(item.updated_at, f"ids[{k}].updated_at")
                if wanted.get(key, version) not in (None, version):
                    raise InvalidArgumentError(f"ids names two versions of {key!r}")
                wanted[key] = version
            else:
                wanted.setdefault(coerce.text(item, f"ids[{k}]"), None)
        at = expiry(expires_at, ttl, time.time())
        return self._writer.renew(wanted, at) if wanted else 0

    def expire(
        self, table: str | None = "memories", **scope: Unpack[ScopeFields]
    ) -> builtins.list[MemoryRecord]:
        """Deletes every record of the store whose expiry has passed, now, as the
        store's maintenance does in the background (each one's versions end with
        ``"expire"``), and returns those of ``table`` (None: every table) and scope.

        No read returns an expired record, and none of ``delete_all``, ``prune``,
        ``evict`` or ``replace`` selects one: this only frees their room at once
        (LangGraph's ``sweep_ttl``).
        """
        self._sync.check_open()
        if table is not None:
            table = coerce.text(table, "table")
        fields = Scope.of(self.default_scope, scope).fields
        gone: builtins.list[Any] = []
        self._writer.expire(time.time(), gone)
        return [
            record(row, None)
            for row in gone
            if (table is None or row.tbl == table)
            and all(getattr(row, f) == v for f, v in fields.items())
        ]
