"""Facts that change: :meth:`update` rewrites a record, :meth:`supersede` closes one and
opens its successor, and :meth:`history` returns every version of a memory.

A record is true from its ``created_at`` until its ``valid_to`` (None while it is).
Superseding keeps the old version in the store, closed, so a search ``as_of`` a past
time finds what was true then; searches leave closed versions out by default. Every
change (update, supersede, delete) keeps the version it replaced in the ``history``
table, written in the change's own transaction, so the history is exactly what the
store went through.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy.typing as npt

from memlane import coerce
from memlane._memory.encoding import record
from memlane._memory.sync import IndexSync
from memlane._memory.writer import Writer
from memlane.records import MemoryRecord, MemoryVersion
from memlane.storage.base import HistoryEntry, Store

__all__ = ["VersionsMixin"]


class VersionsMixin:
    """:class:`~memlane.Memory`'s changes to records, supersession and history."""

    _sync: IndexSync
    _db: Store
    _writer: Writer

    if TYPE_CHECKING:

        def get(self, id: str, *, include_embedding: bool = False) -> MemoryRecord: ...

    def update(
        self,
        id: str,
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
        :meth:`add` (LangGraph's TTL refresh on write).

        A new text is embedded again (unless ``embedding`` is given). The version it
        replaces stays in :meth:`history`, with ``by`` as who changed it. A superseded
        version is history: updating it raises
        :class:`~memlane.errors.InvalidArgumentError` (update the version that
        replaced it); :class:`~memlane.errors.ConflictError` (storing nothing) when
        another writer superseded or deleted the record while this call ran.
        """
        self._sync.check_open()
        record_id = coerce.text(id, "id")
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
        return self._writer.update(record_id, fields, None if by is None else coerce.text(by, "by"))

    def supersede(
        self,
        id: str,
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
        closed (its ``valid_to`` set to ``at``, default now) and a new one, valid from
        ``at``, is added in the same transaction. The new record keeps the old one's
        table, type, scope, importance, evergreen flag and metadata unless given
        (not an expiry: ``expires_at`` or ``ttl`` sets the new record's);
        ``by`` names who made the change (kept in the history). Returns the new record.

        Raises :class:`~memlane.errors.UnknownIdError` for an unknown id,
        :class:`~memlane.errors.InvalidArgumentError` for a record superseded already
        or an ``at`` before it became true, and :class:`~memlane.errors.ConflictError`
        when another writer superseded, changed or deleted it while this call ran
        (then nothing is stored).
        """
        self._sync.check_open()
        old = coerce.text(id, "id")
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
        actor = None if by is None else coerce.text(by, "by")
        return self._writer.supersede(old, item, at, actor)

    def history(self, id: str) -> list[MemoryVersion]:
        """Every version of memory ``id``, oldest first, following supersession both
        ways: the records it superseded and those that superseded it are part of its
        history. A deleted memory keeps its history (its last version ends with
        ``"delete"``). Unknown ids have an empty history."""
        self._sync.check_open()
        first = coerce.text(id, "id")
        db = self._db
        chain, seen = [first], {first}
        while (prev := db.superseded_by(chain[0])) is not None and prev not in seen:
            chain.insert(0, prev)
            seen.add(prev)
        out: list[MemoryVersion] = []
        opened: tuple[str, float | None, str | None] = ("add", None, None)
        i = 0
        while i < len(chain):
            entries = db.history([chain[i]])
            versions, successor = _versions(entries, db.row_by_id(chain[i]), opened)
            out.extend(versions)
            opened = ("add", None, None)
            if successor is not None:
                opened = ("supersede", successor[1], successor[2])
                if successor[0] not in seen:  # else: the chain walked back holds it
                    seen.add(successor[0])
                    chain.append(successor[0])
            i += 1
        return out


def _versions(
    entries: list[HistoryEntry],
    current: Any,
    opened: tuple[str, float | None, str | None],
) -> tuple[list[MemoryVersion], tuple[str, float, str | None] | None]:
    """One id's versions from its history entries and current row, and the record that
    superseded it (id, when, by whom)."""
    out: list[MemoryVersion] = []
    made = opened
    # A supersede entry holds the open version; the closed one that follows it is the
    # same fact, so the two make one version that ended in the supersede.
    ending: tuple[str, float, str | None, str | None] | None = None
    successor = None
    for row, event, at, actor, next_id in entries:
        if event == "supersede":
            ending = (event, at, actor, next_id)
            successor = (str(next_id), at, actor) if next_id else None
            continue
        end = ending or (event, at, actor, None)
        out.append(_version(row, made, end))
        ending = None
        made = ("add", None, None) if event == "delete" else (event, at, actor)
    if current is not None:
        out.append(_version(current, made, ending))
    return out, successor


def _version(
    row: Any,
    made: tuple[str, float | None, str | None],
    end: tuple[str, float, str | None, str | None] | None,
) -> MemoryVersion:
    event, at, by = made
    rec = record(row, None)
    return MemoryVersion(
        record=rec,
        event=event,
        at=rec.created_at if at is None else at,
        by=by,
        ended=None if end is None else end[0],
        ended_at=None if end is None else end[1],
        ended_by=None if end is None else end[2],
        superseded_by=None if end is None else end[3],
    )
