"""Records kept under an id derived from their scope and key (a core memory block, a
contact's profile, a day's log, a notes file's head): the ids such a record may take,
and its store and lookup by them. Anyone can compute a derived id and add a record of
their own scope under it; such a record is never taken for the one it squats on."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from memlane.errors import InvalidArgumentError, UnknownIdError

if TYPE_CHECKING:
    from memlane.memory import Memory
    from memlane.records import MemoryRecord
    from memlane.store import MemoryStore

__all__ = ["SPARE_IDS", "add_derived", "derived_ids", "find_derived", "held"]


#: Ids a record kept under an id derived from its scope and key (a core block, a contact's
#: profile, a day's log) may take past that id, when records that are not it hold the ones
#: before: anyone can compute the derived id and add a record of their own scope under it.
#: Tried in a fixed order, so the store's refusal of an id it holds still decides between
#: writers making the record at once (fresh random ids would make one record each); a
#: planter must take every one to stop the record, which is then refused, naming the clash.
SPARE_IDS = 8


def derived_ids(base: str) -> list[str]:
    """The ids a record whose derived id is ``base`` may be kept under, in the order tried."""
    return [base] + [f"{base}-{n}" for n in range(1, SPARE_IDS + 1)]


def held(mem: MemoryStore, rid: str, embedding: bool = False) -> MemoryRecord | None:
    """The record under ``rid``, read from the database (the index may not show yet what
    another process wrote), or None."""
    try:
        return mem.get(rid, include_embedding=embedding)
    except UnknownIdError:
        return None


def find_derived(
    mem: Memory,
    base: str,
    mine: Callable[[MemoryRecord], MemoryRecord | None],
    embedding: bool = False,
) -> MemoryRecord | None:
    """What ``mine`` takes for the record of the records under ``base``'s ids. They are
    taken in order, so the first id not held ends the walk."""
    for rid in derived_ids(base):
        rec = held(mem, rid, embedding)
        if rec is None:
            return None
        found = mine(rec)
        if found is not None:
            return found
    return None


def add_derived(
    mem: Memory,
    base: str,
    add: Callable[[str], MemoryRecord],
    mine: Callable[[MemoryRecord], MemoryRecord | None],
    what: str,
) -> tuple[MemoryRecord, bool]:
    """Stores a record with ``add(id)`` under the first of ``base``'s ids not held by a
    record ``mine`` rejects: ``(the record stored, True)``; or ``(the record, False)``
    when another writer's is under one of those ids first (what ``mine`` takes of it).
    That an id is free is decided by the store, which refuses an add of an id it holds
    in the transaction that would store it.

    Raises:
        InvalidArgumentError: the add refused for another reason than its id, or every
            id held by a record that is not ``what``.
    """
    for rid in derived_ids(base):
        try:
            return add(rid), True
        except InvalidArgumentError:
            rec = held(mem, rid)
            if rec is None:
                raise  # refused for something else
        found = mine(rec)
        if found is not None:
            return found, False
    raise InvalidArgumentError(
        f"{what} cannot be stored: its ids {base} to {base}-{SPARE_IDS} are all held by "
        "records that are not it (of another scope or kind); delete those records"
    )
