"""Memory.list(sort=...) pages by importance, uses or last use as sorting every record
in Python does, ties and scopes and filters included, and Memory.scopes counts each
table and scope as counting the records one by one does: on both backends, and after
the changes that move those fields (searches, an update, a delete, a supersede, an
access recorded later than a stored one)."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from conftest import StoreFactory
from memlane import Memory
from memlane.errors import InvalidArgumentError
from memlane.records import SCOPE_FIELDS, MemoryRecord
from memlane.store import ScopeCount

SORTS = ("created_at", "importance", "access_count", "last_accessed_at")
T0 = 1_700_000_000.0


@pytest.fixture
def mem(make_store: StoreFactory) -> Iterator[Memory]:
    m = make_store("sorted")
    yield m
    m.close()


def fill(mem: Memory) -> None:
    """60 records over two users, two tables and a room, with few distinct importances
    and creation times (ties on every field), used by searches unevenly."""
    rng = random.Random(3)
    mem.add_many(
        [
            {
                "text": f"word{i % 7} item{i}",
                "importance": rng.choice([0.0, 0.25, 0.5, 1.0]),
                "created_at": T0 + rng.randrange(8),
                "user_id": ["alice", "bob"][i % 2],
                "table": "notes" if i % 5 == 0 else "memories",
                **({"room_id": "r1"} if i % 3 == 0 else {}),
                "metadata": {"n": i},
            }
            for i in range(60)
        ]
    )
    # A record whose last access (its creation) is later than any search's, searched.
    later = mem.add("word1 from the future", created_at=T0 + 10**9, user_id="alice")
    for word in ("word1", "word1", "word3", "word5", "future"):
        mem.search(word, k=4, mode="text")
    assert mem.get(later.id).access_count > 0


def expected(mem: Memory, sort: str, order: str, **args: Any) -> list[str]:
    """Every record ``args`` admits, sorted in Python: by ``sort``, then creation time,
    then the order stored (``Memory.list``'s order by time, which a stable sort keeps)."""
    every = mem.list(limit=10_000, order=order, **args)  # type: ignore[arg-type]
    key = lambda r: (getattr(r, sort), r.created_at)  # noqa: E731
    return [r.id for r in sorted(every, key=key, reverse=order == "desc")]


def pages(mem: Memory, size: int, **args: Any) -> list[str]:
    ids: list[str] = []
    while page := mem.list(limit=size, offset=len(ids), **args):
        ids += [r.id for r in page]
    return ids


def check_every_order(mem: Memory, **args: Any) -> None:
    for sort in SORTS:
        for order in ("desc", "asc"):
            want = expected(mem, sort, order, **args)
            for size in (1, 7, 100):
                assert pages(mem, size, sort=sort, order=order, **args) == want, (sort, order)
            # A page's records carry the values it was sorted by.
            page = mem.list(limit=5, offset=3, sort=sort, order=order, **args)  # type: ignore[arg-type]
            assert [r.id for r in page] == want[3:8]


def test_pages_sorted_by_a_field_equal_sorting_every_record(mem: Memory) -> None:
    fill(mem)
    bumped = mem.list(limit=1, sort="access_count")[0]
    assert bumped.access_count > 0  # the searches were counted
    for args in (
        {},
        {"user_id": "alice"},
        {"table": "notes"},
        {"room_id": "r1", "user_id": "bob"},
        {"filters": {"importance": {"$gte": 0.5}}, "table": "memories"},
        {"start": T0 + 2, "end": T0 + 6},
        {"user_id": "nobody"},
    ):
        check_every_order(mem, **args)


def test_the_order_follows_updates_deletes_and_supersedes(mem: Memory) -> None:
    fill(mem)
    # Accesses not yet flushed, then a write that stores the record again: its last
    # access is the search's, in the index as in the record.
    hit = mem.search("word2", k=1, mode="text")[0].record
    mem.update(hit.id, importance=0.75)
    gone = mem.list(limit=2, sort="importance")
    for r in gone:
        mem.delete(r.id)
    old = mem.list(limit=1, sort="access_count", user_id="bob")[0]
    mem.supersede(old.id, "word4 changed", importance=1.0)
    assert hit.id in pages(mem, 10, sort="last_accessed_at")[:3]
    check_every_order(mem)
    check_every_order(mem, user_id="bob")


def test_scopes_count_each_table_and_scope(mem: Memory, make_store: StoreFactory) -> None:
    fill(mem)
    mem.delete(mem.list(limit=1)[0].id)
    moved = mem.list(limit=1, user_id="bob")[0]
    mem.supersede(moved.id, "word6 moved")

    def counted(**args: Any) -> Counter[tuple[str | None, ...]]:
        every = mem.list(limit=10_000, **args)
        return Counter((r.table, *(r.scope.get(f) for f in SCOPE_FIELDS)) for r in every)

    for args in ({}, {"user_id": "alice"}, {"table": "notes", "room_id": "r1"}):
        scopes = mem.scopes(**args)
        got = Counter({(s.table, *(getattr(s, f) for f in SCOPE_FIELDS)): s.count for s in scopes})
        assert got == counted(**args)
        # By table, the largest first.
        keys = [(s.table, -s.count) for s in scopes]
        assert keys == sorted(keys)
        assert sum(s.count for s in scopes) == mem.count(**args)
    assert mem.scopes(user_id="nobody") == []
    (notes,) = [s for s in mem.scopes(table="notes", user_id="alice") if s.room_id is None]
    assert notes == ScopeCount("notes", None, "alice", None, None, None, None, notes.count)
    assert notes.to_dict()["count"] == notes.count > 0
    # Opened again (from the snapshot written at close): the same counts.
    before = mem.scopes()
    mem.close()
    again = make_store("sorted")
    assert again.scopes() == before
    again.close()


def test_a_bad_sort_is_refused_by_name(mem: Memory) -> None:
    fill(mem)
    for bad in ("size", "", None, 3, ["importance"]):
        with pytest.raises(InvalidArgumentError, match="sort must be one of created_at"):
            mem.list(sort=bad)  # type: ignore[arg-type]
    first: list[MemoryRecord] = mem.list(limit=3, sort="created_at")
    assert first == mem.list(limit=3)
