"""The rows of what the engine judged, each the version it judged.

A search or a listing asks the engine which records match, then reads their rows. A
writer that rewrites one of them in between (an ``update`` of its type, its metadata,
its text; a ``renew`` of its expiry) would have the caller handed the new version under
a filter only the old one met. The engine answers each id with the version it judged:
its ``updated_at``, which every rewrite changes, and its ``expires_at``, which a renewal
changes alone. A row of another version sends the read round again, once the engine
has caught up: on an embedded store after this process's write in flight has reached
it (``IndexSync.follow``, which takes the store's lock only while such a write is in
flight); on PostgreSQL after a moment, in which the process's follower applies what
other processes committed. A record rewritten again in every round is left out, as one
deleted meanwhile is. The caller records the accesses of the hits it returns, after the
last round.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from memlane._memory.sync import IndexSync
from memlane.schema import Row

#: Rounds at most; a clash needs a rewrite of one of the few records read, in the
#: instant between the engine's answer and the read of its row.
TRIES = 3
#: PostgreSQL: seconds before a round sent again, times the rounds so far (another
#: process's commit reaches this one's engine in a few milliseconds).
PAUSE = 0.001

T = TypeVar("T")

#: A record's version as the engine judged it: (``updated_at``, ``expires_at``, infinite
#: for none).
Version = tuple[float, float]


def judged(
    sync: IndexSync,
    ask: Callable[[], tuple[list[int], Sequence[Version], T]],
    embedding: bool,
) -> tuple[list[int], dict[int, Row], T]:
    """``ask()``'s ids (the last round's, in order), with the version the engine judged
    of each and what else it answers, and their rows as judged: a record rewritten in
    every round has none, and is left out by the caller as one deleted meanwhile is."""
    for attempt in range(TRIES):
        ids, versions, extra = ask()
        rows = sync.rows(ids, embedding=embedding)
        stale = _stale(ids, versions, rows)
        if not stale:
            break
        if attempt < TRIES - 1:
            if sync.db.shared:
                time.sleep(PAUSE * (attempt + 1))
            else:
                sync.follow()
    for i in stale:
        del rows[i]
    return ids, rows, extra


def _stale(ids: list[int], versions: Sequence[Version], rows: dict[int, Row]) -> list[int]:
    """The ids whose row is there and of another version than the one judged."""
    out = []
    for i, (updated, expires) in zip(ids, versions, strict=True):
        row = rows.get(i)
        if row is None:
            continue
        at = math.inf if row.expires_at is None else row.expires_at
        if row.updated_at != updated or at != expires:
            out.append(i)
    return out
