"""The rows of what the engine judged, each the version it judged.

A search or a listing asks the engine which records match, then reads their rows. A
writer that rewrites one of them in between (an ``update`` that changes its type, its
metadata, its text) would have the caller handed the new version under a filter only
the old one met. The engine answers each id with the ``updated_at`` it judged (every
rewrite changes it), and a row of another version sends the read round again: after
this process's write in flight has reached the engine and other processes' commits
are applied (``IndexSync.follow``), and the last time holding the lock this process's
writes hold from their commit until the engine has them, so that no write of this
process comes between. On PostgreSQL another process may still rewrite a record in
between; its hit is then left out, as one deleted meanwhile is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from memlane._memory.sync import IndexSync
from memlane.schema import Row

#: Reads before the last, which holds the lock; a clash needs a rewrite of one of the
#: few records read, in the instant between the two reads.
TRIES = 3

T = TypeVar("T")


def judged(
    sync: IndexSync,
    ask: Callable[[bool], tuple[list[int], Sequence[float], T]],
    embedding: bool,
) -> tuple[list[int], dict[int, Row], T]:
    """``ask(first)``'s ids (with the ``updated_at`` the engine judged of each, and what
    else it answers), and their rows as judged; ``first`` is False on a read sent round
    again (which records no access: the first did). An id whose row is gone is left
    out by the caller, as before; one whose row is of another version on the last read
    is left out here."""
    for attempt in range(TRIES):
        if attempt:
            sync.follow()
        ids, versions, extra = ask(attempt == 0)
        rows = sync.rows(ids, embedding=embedding)
        if not _stale(ids, versions, rows):
            return ids, rows, extra
    with sync.lock:
        sync.follow()
        ids, versions, extra = ask(False)
        rows = sync.rows(ids, embedding=embedding)
    for i in _stale(ids, versions, rows):
        del rows[i]
    return ids, rows, extra


def _stale(ids: list[int], versions: Sequence[float], rows: dict[int, Row]) -> list[int]:
    """The ids whose row is there and of another version than the one judged."""
    return [
        i
        for i, v in zip(ids, versions, strict=True)
        if (row := rows.get(i)) is not None and row.updated_at != v
    ]
