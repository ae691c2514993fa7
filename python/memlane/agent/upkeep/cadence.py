"""A room's reflection cadence, kept in the store: each reflection due at the cadence
marks its turn's time (``Memory.jobs.set_mark``) once it is recorded (inline, once it is
due: its failed windows are the object's own), and each turn counts the room's turns
since that mark, whichever objects and processes took them. Counted by each object in
memory, the cadence began again with each process (an agent run a process a turn never
reflected) and two objects taking turns in one room left turns to no reflection. A
count is one engine count of the room's turns after the mark; a clock that stands at or
before the mark counts in memory instead."""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

from memlane.agent.history import MESSAGES, TURN
from memlane.agent.upkeep.jobs import MAX_SPAN
from memlane.errors import MemlaneError
from memlane.scoping import exact_scope

if TYPE_CHECKING:
    from memlane.memory import Memory

__all__ = ["read", "reflected", "turns_after", "windows"]

log = logging.getLogger("memlane.agent")


def _key(memory: Memory, table: str, history: Mapping[str, str]) -> str:
    """The mark's key: the agent's table and the room's exact scope (the store's
    ``default_scope`` under it), hashed (a key has a bounded length; a scope may not)."""
    fields, _ = exact_scope(memory, history)
    text = json.dumps([table, sorted(fields.items())])
    return "reflected:" + hashlib.sha256(text.encode()).hexdigest()[:40]


def read(memory: Memory, table: str, history: Mapping[str, str]) -> tuple[bool, float | None]:
    """Whether the room's mark could be read, and the turn time it holds (None: the room
    never reflected)."""
    try:
        kept = memory.jobs.mark(_key(memory, table, history))
        at = None if kept is None else json.loads(kept).get("at")
    except (MemlaneError, ValueError, AttributeError, RecursionError) as e:
        log.warning("memlane: the room's reflection cadence is counted here alone: %s", e)
        return False, None
    return True, at if isinstance(at, float) and math.isfinite(at) else None


def turns_after(
    memory: Memory, history: Mapping[str, str], at: float | None, now: float
) -> int | None:
    """The room's turns (their first messages) after turn time ``at``, this one's included;
    None when the clock stands at or before ``at`` (set back: times cannot tell) or the
    store cannot tell (logged)."""
    if at is not None and at >= now:
        return None
    try:
        fields, only = exact_scope(memory, history)
        # A turn's first message; a turn stored by a version before the mark, by its
        # user message (the first piece of one split for its length).
        first = {"$or": [{"part": {"$exists": False}}, {"part": 1}]}
        older = [{"role": "user"}, {TURN: {"$exists": False}}, first]
        turns = {"$or": [{TURN: True}, {"$and": older}]}
        after = None if at is None else math.nextafter(at, math.inf)  # a range: its index
        # Up to now: a message dated ahead of the clock would be counted after every mark.
        until = math.nextafter(now, math.inf)
        return memory.count(
            MESSAGES, filters={"$and": [only, turns]}, start=after, end=until, **fields
        )
    except MemlaneError as e:
        log.warning("memlane: the room's reflection cadence is counted here alone: %s", e)
        return None


def windows(turns: int, every: int) -> int:
    """The windows of a reflection due after ``turns`` turns of the room (0: not due):
    more than one when the turns since the mark outnumber one window's (a reflection
    whose record a crash or a store error lost, objects that reflected at once), so that
    none of them goes unshown (up to ``MAX_SPAN``)."""
    return 0 if turns < every else min(MAX_SPAN, -(-turns // every))


def reflected(memory: Memory, table: str, history: Mapping[str, str], now: float) -> None:
    """Marks the room's reflection due at the cadence at turn time ``now``."""
    try:
        memory.jobs.set_mark(_key(memory, table, history), json.dumps({"at": float(now)}))
    except MemlaneError as e:  # the next process counts from the mark before
        log.warning("memlane: the room's reflection cadence was not kept: %s", e)
