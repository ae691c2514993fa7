"""Memory.list by creation time and Memory.count give what sorting and counting every
record in Python gives, wherever a scope's records lie in time: a room that holds most
of the store (its newest page is read from the engine's time order, its count from the
totals per table and scope), a room older than the others, rooms spread thin among
them, with windows, offsets, expired records, deletes, a supersede and a reopened
store, on both backends."""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from conftest import StoreFactory
from memlane import Memory

T0 = 1_700_000_000.0
ROOMS = ("big", "old", "r1", "r4")


def room_of(i: int) -> str:
    if i < 200:
        return "old"
    return "big" if i % 9 else f"r{i % 5}"


def fill(mem: Memory) -> list[tuple[float, int, str, dict[str, Any]]]:
    """1,200 records: the first 200 in room ``old``, then room ``big`` with a few
    small rooms between its records; three to a creation time, some of another
    agent, some expired. Returns (created_at, order stored, id, fields) of each."""
    rng = random.Random(11)
    items = [
        {
            "text": f"message {i}",
            "table": "messages",
            "user_id": "u",
            "room_id": room_of(i),
            "created_at": T0 + i // 3,
            **({"agent_id": "other"} if rng.random() < 0.2 else {}),
            # Passed once the clock moves on (`later`): no read returns these.
            **({"expires_at": time.time() + 3600} if rng.random() < 0.05 else {}),
        }
        for i in range(1200)
    ]
    records = mem.add_many(items)
    return [(r.created_at, n, r.id, items[n]) for n, r in enumerate(records)]


def admitted(
    rows: list[tuple[float, int, str, dict[str, Any]]], **want: Any
) -> list[tuple[float, int, str, dict[str, Any]]]:
    start, end = want.pop("start", None), want.pop("end", None)
    return [
        row
        for row in rows
        if "expires_at" not in row[3]
        and all(row[3].get(k) == v for k, v in want.items())
        and (start is None or row[0] >= start)
        and (end is None or row[0] < end)
    ]


def check(mem: Memory, rows: list[tuple[float, int, str, dict[str, Any]]]) -> None:
    for room in ROOMS:
        for window in ({}, {"start": T0 + 100, "end": T0 + 250}, {"start": T0 + 399}):
            for agent in ({}, {"agent_id": None}):
                args: dict[str, Any] = {"user_id": "u", "room_id": room, **window}
                filters = {"filters": agent} if agent else {}
                every = admitted(rows, **args, **agent)
                assert mem.count("messages", **args, **filters) == len(every), (room, window, agent)
                for order in ("desc", "asc"):
                    ranked = [row[2] for row in sorted(every, reverse=order == "desc")]
                    for limit in (1, 5, 40):
                        for offset in (0, 3, 150):
                            page = mem.list(
                                "messages",
                                limit=limit,
                                offset=offset,
                                order=order,
                                **args,
                                **filters,
                            )  # type: ignore[arg-type]
                            want = ranked[offset : offset + limit]
                            assert [r.id for r in page] == want, (
                                room,
                                window,
                                agent,
                                order,
                                limit,
                                offset,
                            )
        # Per table and scope: the room's records of each agent, and those of none.
        every = admitted(rows, user_id="u", room_id=room)
        want = Counter(row[3].get("agent_id") for row in every)
        got = mem.scopes("messages", user_id="u", room_id=room)
        assert {c.agent_id: c.count for c in got} == want, room
    # The whole store, no scope named.
    every = admitted(rows)
    assert mem.count("messages") == len(every)
    newest = [row[2] for row in sorted(every, reverse=True)]
    assert [r.id for r in mem.list("messages", limit=30, offset=7)] == newest[7:37]


def later(monkeypatch: pytest.MonkeyPatch) -> None:
    """Moves the clock two hours on: the records that expire in one have expired."""
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 7200)


@pytest.fixture
def mem(make_store: StoreFactory) -> Iterator[Memory]:
    m = make_store("by-time")
    yield m
    m.close()


def test_pages_and_counts_equal_sorting_and_counting_every_record(
    mem: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = fill(mem)
    later(monkeypatch)
    check(mem, rows)


def test_after_deletes_a_supersede_and_a_reopen(
    mem: Memory, make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = fill(mem)
    later(monkeypatch)
    rng = random.Random(2)
    gone = set(rng.sample([row[2] for row in admitted(rows)], 150))
    for id in sorted(gone):
        mem.delete(id)
    rows = [row for row in rows if row[2] not in gone]
    # Superseded: the old version is kept, closed, and listed (every version is).
    old = next(row for row in rows if row[3]["room_id"] == "big" and "expires_at" not in row[3])
    new = mem.supersede(old[2], "message changed")
    rows.append(
        (new.created_at, len(rows) + 10_000, new.id, {**old[3], "created_at": new.created_at})
    )
    check(mem, rows)
    mem.close()
    again = make_store("by-time")
    try:
        check(again, rows)
    finally:
        again.close()
