"""Facts that change: ``Versions`` does the work of ``memlane.Memory.update``
(rewrites a record), ``supersede`` (closes one and opens its
successor) and ``history`` (every version of a memory).

A record is true from its ``created_at`` until its ``valid_to`` (None while it is).
Superseding keeps the old version in the store, closed, so a search ``as_of`` a past
time finds what was true then; searches leave closed versions out by default. Every
change (update, supersede, delete) keeps the version it replaced in the ``history``
table, written in the change's own transaction, so the history is exactly what the
store went through.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from memlane import coerce
from memlane._memory.encoding import record
from memlane._memory.querying import visible
from memlane._memory.sync import IndexSync
from memlane._memory.writer import Writer
from memlane.records import MemoryRecord, MemoryVersion
from memlane.storage.base import HistoryEntry

__all__ = ["Versions"]


class Versions:
    """A store's changes to records, supersession and history, over its writer and its
    database (through ``sync``)."""

    def __init__(self, sync: IndexSync, writer: Writer) -> None:
        self._sync = sync
        self._writer = writer

    def update(
        self, id: str | MemoryRecord, fields: dict[str, Any], by: str | None
    ) -> MemoryRecord:
        """Rewrites record ``id`` (an id, or the record read: then only while it is still
        that version) with ``fields`` (the keyword arguments of ``memlane.Memory.update``
        that were given, and ``embedding``)."""
        self._sync.check_open()
        record_id, version = _target(id)
        actor = None if by is None else coerce.text(by, "by")
        return self._writer.update(record_id, fields, actor, version)

    def supersede(
        self,
        id: str | MemoryRecord,
        item: dict[str, Any],
        at: float | datetime | None,
        by: str | None,
    ) -> MemoryRecord:
        """Closes record ``id`` (an id, or the record read: then only while it is still
        that version) at ``at`` and adds ``item`` (an ``memlane.Memory.add`` item of the
        fields given) as its successor, in one transaction."""
        self._sync.check_open()
        old, version = _target(id)
        actor = None if by is None else coerce.text(by, "by")
        return self._writer.supersede(old, item, at, actor, version)

    def history(self, id: str) -> list[MemoryVersion]:
        """Every version of memory ``id``, oldest first, following supersession both ways."""
        self._sync.check_open()
        first = coerce.text(id, "id")
        db = self._sync.db
        chain, seen = [first], {first}
        while (prev := db.superseded_by(chain[0])) is not None and prev not in seen:
            chain.insert(0, prev)
            seen.add(prev)
        out: list[MemoryVersion] = []
        opened: tuple[str, float | None, str | None] = ("add", None, None)
        i, now = 0, time.time()
        while i < len(chain):
            entries = db.history([chain[i]])
            versions, successor = _versions(entries, db.row_by_id(chain[i]), opened, now)
            out.extend(versions)
            opened = ("add", None, None)
            if successor is not None:
                opened = ("supersede", successor[1], successor[2])
                if successor[0] not in seen:  # else: the chain walked back holds it
                    seen.add(successor[0])
                    chain.append(successor[0])
            i += 1
        return out


def _target(given: object) -> tuple[str, float | None]:
    """The record ``update`` or ``supersede`` changes: its id, and the version it must
    still be (a record given: its ``updated_at``, which every rewrite changes and an
    access count's flush does not), or None (an id given: the current version, whatever
    it is), as ``add_many(consume=)`` reads its records."""
    if isinstance(given, MemoryRecord):
        return coerce.text(given.id, "id.id"), coerce.timestamp(given.updated_at, "id.updated_at")
    return coerce.text(given, "id"), None


def _versions(
    entries: list[HistoryEntry],
    current: Any,
    opened: tuple[str, float | None, str | None],
    now: float,
) -> tuple[list[MemoryVersion], tuple[str, float, str | None] | None]:
    """One id's versions from its history entries and current row, and the record that
    superseded it (id, when, by whom). A current row expired at ``now`` ended then,
    deleted by ``"expire"``, as the sweep that removes it keeps it."""
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
        if ending is None and not visible(current, now):
            ending = ("delete", current.expires_at, "expire", None)
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
