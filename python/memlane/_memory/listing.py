"""The record API's listings, which ``MemoryStore`` inherits: how many records a call
admits (``count``), which ones a page at a time, by creation time or by another column
(``list``), and how many in each table and scope (``scopes``). Each is one engine call
over the columns it keeps current (access counts too, as searches record them), then
the rows of the page alone; none reads every record the call admits."""

from __future__ import annotations

import builtins
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any, Literal, Unpack, get_args

from memlane import coerce
from memlane._core import Admits
from memlane._memory.access import AccessLog
from memlane._memory.encoding import record
from memlane._memory.judged import Version, judged
from memlane._memory.querying import moment
from memlane._memory.sync import IndexSync
from memlane.errors import InvalidArgumentError, shown
from memlane.records import SCOPE_FIELDS, MemoryRecord
from memlane.scoping import Scope, ScopeFields

__all__ = ["SORTS", "Listing", "ScopeCount", "Sort"]

_FIELDS = frozenset(SCOPE_FIELDS)

#: What a page of [`list`][memlane.Memory.list] may be sorted by: a record's field.
Sort = Literal["created_at", "importance", "access_count", "last_accessed_at"]
SORTS: tuple[str, ...] = get_args(Sort)


@dataclass(frozen=True, slots=True)
class ScopeCount:
    """How many records one table and scope hold ([`scopes`][memlane.Memory.scopes]):
    the scope's fields as the records have them (None: not set)."""

    table: str
    agent_id: str | None
    user_id: str | None
    room_id: str | None
    world_id: str | None
    session_id: str | None
    namespace: str | None
    count: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Listing:
    """``count``, ``list`` and ``scopes``, over the store's index (``_sync``) and the
    accesses not yet flushed to its rows (``_access``)."""

    _sync: IndexSync
    _access: AccessLog
    #: Scope fields filled in wherever a call leaves them out.
    default_scope: dict[str, str]

    def count(
        self,
        table: str | None = None,
        *,
        type: str | Sequence[str] | None = None,
        filters: Mapping[str, Any] | None = None,
        start: float | datetime | None = None,
        end: float | datetime | None = None,
        unique: bool | None = None,
        **scope: Unpack[ScopeFields],
    ) -> int:
        """Number of records in the table and scope (and time range, filters and
        ``unique`` flag, as [`list`][memlane.Memory.list])."""
        self._sync.check_open()
        fields = self._scope(scope)
        admits = self._admits(table, type, fields, start, end, filters, unique)
        return int(self._sync.engine.count(admits, expire_at=self._expire_at()))

    def list(
        self,
        table: str | None = None,
        start: float | datetime | None = None,
        end: float | datetime | None = None,
        limit: int = 50,
        order: Literal["asc", "desc"] = "desc",
        *,
        offset: int = 0,
        sort: Sort = "created_at",
        type: str | Sequence[str] | None = None,
        filters: Mapping[str, Any] | None = None,
        include_embedding: bool = False,
        unique: bool | None = None,
        **scope: Unpack[ScopeFields],
    ) -> builtins.list[MemoryRecord]:
        """Records by creation time (newest first by default), e.g. a room's history.

        ``start`` is inclusive, ``end`` exclusive (unix seconds or aware datetimes).
        ``sort`` pages by another field instead: ``"importance"``, ``"access_count"``
        or ``"last_accessed_at"`` (as searches leave them), then by creation time, then
        in the order the records were stored, all in ``order`` (``"desc"``: the most
        important first, and of those equal the newest). Importance compares in single
        precision, as the index holds it.
        ``unique=True`` lists only the unique records (``record.unique``: added with
        ``unique=True`` and no near-duplicate found), as elizaOS's ``getMemories({unique:
        true})``; ``unique=False`` only the others; None (the default) both.
        """
        self._sync.check_open()
        coerce.count(limit, "limit")
        coerce.count(offset, "offset")
        include_embedding = coerce.flag(include_embedding, "include_embedding")
        if not isinstance(sort, str) or sort not in SORTS:
            raise InvalidArgumentError(f"sort must be one of {', '.join(SORTS)}, got {shown(sort)}")
        if not isinstance(order, str) or order not in ("asc", "desc"):
            raise InvalidArgumentError(f"order must be 'asc' or 'desc', got {shown(order)}")
        fields = self._scope(scope)
        admits = self._admits(table, type, fields, start, end, filters, unique)
        engine, expire_at = self._sync.engine, self._expire_at()

        def ask() -> tuple[list[int], list[Version], None]:
            ids, updated, expires = engine.versioned_ids_where(
                admits, order=order, offset=offset, limit=limit, sort=sort, expire_at=expire_at
            )
            versions = zip(updated.tolist(), expires.tolist(), strict=True)
            return ids.tolist(), list(versions), None

        ids, rows, _ = judged(self._sync, ask, include_embedding)
        get = self._access.get
        return [record(rows[i], get(rows[i]), include_embedding) for i in ids if i in rows]

    def scopes(
        self,
        table: str | None = None,
        *,
        type: str | Sequence[str] | None = None,
        filters: Mapping[str, Any] | None = None,
        start: float | datetime | None = None,
        end: float | datetime | None = None,
        unique: bool | None = None,
        **scope: Unpack[ScopeFields],
    ) -> builtins.list[ScopeCount]:
        """How many records each table and scope holds, of those
        [`count`][memlane.Memory.count] counts with the same arguments: by table, the
        largest first, then by the scope's values (not set first)."""
        self._sync.check_open()
        fields = self._scope(scope)
        admits = self._admits(table, type, fields, start, end, filters, unique)
        counts = []
        for name, values, n in self._sync.engine.groups(admits, expire_at=self._expire_at()):
            agent, user, room, world, session, namespace_ = values
            counts.append(ScopeCount(name, agent, user, room, world, session, namespace_, n))
        return counts

    def _admits(
        self,
        table: str | Sequence[str] | None,
        type: str | Sequence[str] | None,
        scope: dict[str, str],
        start: float | datetime | None,
        end: float | datetime | None,
        filters: Mapping[str, Any] | None,
        unique: bool | None,
    ) -> Admits:
        """The records a listing admits, checked and built once by the engine (every
        version; the expired ones are left out at the call's clock)."""
        return Admits(
            filters,
            table=table,
            type=type,
            scope=scope,
            start=moment(start, "start"),
            end=moment(end, "end"),
            unique=unique,
        )

    def _expire_at(self) -> float | None:
        """The time the records expired by are left out at (None: none expires)."""
        return time.time() if self._sync.expiring else None

    def _scope(self, given: ScopeFields) -> dict[str, str]:
        """A call's scope over ``default_scope``, its fields (see ``Scope.of``)."""
        default = self.default_scope
        # Most calls: the default scope's fields (checked when it was set; anything set
        # on it since that is no dict of scope fields goes to Scope.of, as before).
        if not given and type(default) is dict and default.keys() <= _FIELDS:
            return {f: v for f in SCOPE_FIELDS if (v := default.get(f)) is not None}
        return Scope.of(default, given).fields
