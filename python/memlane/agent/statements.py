"""The order statements were made in, which decides which of two versions of a fact
is the newer: the one learnt later, when one process learnt both (by its count, which
goes on through a clock step); else the one said later (``created_at``, or
``restated_at`` when it was said again since, then ``recorded_at``). Between processes
(and across a restart) the times decide, as a clock step can then reorder them.

Each fact ``pending`` marks, and each short-term entry, carries the order its process
learnt it in (``metadata["learned"]``: the process's token and a count, no clock); a
fact consolidated from turns, the order and time of the latest turn it came from (one
that runs late does not replace what was said since); a reflection's, the time of the
end of its latest window and an order of its own (``apart``). Facts stated at once are
ordered among themselves as stored (``said_together``), so a later one replaces what an
earlier one changed."""

from __future__ import annotations

import functools
import itertools
import math
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memlane.records import MemoryRecord

__all__ = [
    "LEARNED",
    "RESTATED",
    "apart",
    "latest_learned",
    "learned",
    "newer",
    "order_of",
    "said_at",
    "said_together",
]

#: The metadata key of the order a fact or a short-term entry was learnt in (``learned``).
LEARNED = "learned"
#: The metadata key of when a memory was last stated again (a repeat the check dropped):
#: it is as new as that statement.
RESTATED = "restated_at"


class _Clock:
    """The order this process learns things in: a random token naming the process and a
    count. No wall clock: the count goes on when the clock is stepped back."""

    def __init__(self) -> None:
        self.token = os.urandom(8).hex()
        self.count = itertools.count()


_CLOCK = _Clock()
# A forked child counts on its own: sharing the parent's token would order the two
# processes' facts by two unrelated counts.
os.register_at_fork(after_in_child=lambda: globals().__setitem__("_CLOCK", _Clock()))


def learned() -> list[Any]:
    """A new ``metadata["learned"]`` value: after every one this process made before."""
    clock = _CLOCK
    return [clock.token, next(clock.count)]


def said_together(metadata: Mapping[str, Any], i: int) -> dict[str, Any]:
    """``metadata`` of the ``i``-th of facts stated at once (one consolidation's, one
    reflection's): its ``learned`` order, if it has one, extended by ``i``, so that the
    check compares a later one with what an earlier one changed as with a later
    statement."""
    meta = dict(metadata)
    stamp = meta.get(LEARNED)
    if isinstance(stamp, list) and len(stamp) == 2:
        meta[LEARNED] = [*stamp, i]
    return meta


def apart() -> list[Any]:
    """A ``learned`` order of its own, for facts whose times alone order them against
    every other statement (a reflection's: its windows were said before it ran)."""
    return [os.urandom(8).hex(), 0]


def order_of(rec: MemoryRecord) -> tuple[str, tuple[int, ...]] | None:
    """The order ``rec`` was learnt in (``learned``: a token, a count and, for one of
    facts stated at once, its place among them), if it has a valid one: metadata is data
    from whoever could write the store."""
    value = rec.metadata.get(LEARNED)
    if isinstance(value, list) and len(value) in (2, 3):
        token, *order = value
        if isinstance(token, str) and all(
            isinstance(n, int) and not isinstance(n, bool) for n in order
        ):
            return token, (*order, 0)[:2]
    return None


def newer(a: MemoryRecord, b: MemoryRecord) -> bool:
    """Whether ``a`` was stated after ``b``: learnt later by the process that learnt both
    (whatever its clock did meanwhile); else it became true later, or at the same time
    and the store learnt it later (a version a supersede made is recorded then, after
    the fact whose text it holds was)."""
    sa, sb = order_of(a), order_of(b)
    if sa is not None and sb is not None and sa[0] == sb[0] and sa[1] != sb[1]:
        return sa[1] > sb[1]
    return (said_at(a), a.recorded_at) > (said_at(b), b.recorded_at)


def said_at(rec: MemoryRecord) -> float:
    """When ``rec`` was last stated: it became true, or was said again since (the agent's
    tools keep a model from claiming that time: ``TurnTools`` drops the key)."""
    again = rec.metadata.get(RESTATED)
    if isinstance(again, float) and math.isfinite(again):
        return max(rec.created_at, again)
    return rec.created_at


def latest_learned(records: Sequence[MemoryRecord]) -> MemoryRecord:
    """The one of ``records`` (not empty) stated last, as ``newer`` orders them: a fact
    drawn from them was said then."""
    return functools.reduce(lambda a, b: b if newer(b, a) else a, records)
