"""A room's reflection cadence, kept in the store: each reflection due at the cadence
marks its turn's time (``Memory.jobs.set_mark``), and an ``AgentMemory`` that meets a
room for the first time counts the room's turns since that mark. Counted in memory
alone, the cadence began again with each process: an agent run a turn a process (a
CLI, a serverless function) never reached it, and one restarted after an odd turn left
that turn to no reflection."""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

from memlane.agent.history import MESSAGES
from memlane.errors import MemlaneError
from memlane.scoping import exact_scope

if TYPE_CHECKING:
    from memlane.memory import Memory

__all__ = ["reflected", "turns_since"]

log = logging.getLogger("memlane.agent")


def _key(table: str, history: Mapping[str, str]) -> str:
    """The mark's key: the agent's table and the room's exact scope, hashed (a key has a
    bounded length; the scope may not)."""
    text = json.dumps([table, sorted(history.items())])
    return "reflected:" + hashlib.sha256(text.encode()).hexdigest()[:40]


def turns_since(memory: Memory, table: str, history: Mapping[str, str]) -> int | None:
    """The room's turns (its user messages) after the last reflection due at the
    cadence, this one's included; None when the store cannot tell (logged)."""
    try:
        kept = memory.jobs.mark(_key(table, history))
        last = None if kept is None else json.loads(kept).get("at")
        fields, only = exact_scope(memory, history)
        # A turn's user message, or the first piece of one split for its length.
        first: dict[str, object] = {"$or": [{"part": {"$exists": False}}, {"part": 1}]}
        said: list[dict[str, object]] = [only, {"role": "user"}, first]
        if isinstance(last, float) and math.isfinite(last):
            said.append({"created_at": {"$gt": last}})
        return memory.count(MESSAGES, filters={"$and": said}, **fields)
    except (MemlaneError, ValueError, AttributeError, RecursionError) as e:
        log.warning("memlane: the room's reflection cadence starts again here: %s", e)
        return None


def reflected(memory: Memory, table: str, history: Mapping[str, str], now: float) -> None:
    """Marks the room's reflection due at the cadence at turn time ``now``."""
    try:
        memory.jobs.set_mark(_key(table, history), json.dumps({"at": float(now)}))
    except MemlaneError as e:  # the next process counts from the mark before
        log.warning("memlane: the room's reflection cadence was not kept: %s", e)
