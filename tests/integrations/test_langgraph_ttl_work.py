"""The LangGraph store's TTL housekeeping does work by what it has to do: made over a
memory, or sweeping, it examines no item (a sweep reads the expired records alone).
Counted as the records the engine examines for the adapter's ``count``, ``list`` and
``delete_all`` calls (``Engine.filter_stats`` on their arguments, as each call is
made), on both backends."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from langgraph.store.base import PutOp

from memlane import Memory
from memlane.integrations.langgraph import MemlaneStore
from memlane.records import SCOPE_FIELDS

CALLS = ("count", "list", "delete_all")


def examined(mem: Memory, run: Callable[[], object]) -> int:
    """Records the engine examines for the listing and deleting calls ``run`` makes."""
    total = 0

    def wrap(fn: Any) -> Any:
        def inner(table: Any = None, *args: Any, **kw: Any) -> Any:
            nonlocal total
            parts: list[dict[str, Any]] = [] if table is None else [{"table": table}]
            parts += [{f: kw[f]} for f in SCOPE_FIELDS if kw.get(f) is not None]
            if kw.get("filters") is not None:
                parts.append(kw["filters"])
            total += mem._sync.engine.filter_stats({"$and": parts} if parts else {})[1]
            return fn(table, *args, **kw)

        return inner

    originals = {name: getattr(mem, name) for name in CALLS}
    for name, fn in originals.items():
        setattr(mem, name, wrap(fn))
    try:
        run()
    finally:
        for name in CALLS:
            delattr(mem, name)
    return total


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The wall clock memlane's expiry reads, stopped, moved by the test."""
    now = [1_893_456_000.0]
    monkeypatch.setattr(time, "time", lambda: now[0])
    return now


def test_with_nothing_to_adopt_or_sweep_no_item_is_examined(
    make_store: Any, clock: list[float]
) -> None:
    with make_store("lg-work") as mem:
        store = MemlaneStore(mem, ttl={"default_ttl": 60})
        store.batch(
            [PutOp(("users", f"u{i % 7}"), f"k{i}", {"text": f"item {i}"}) for i in range(300)]
            + [PutOp(("keep",), f"k{i}", {"text": f"kept {i}"}, ttl=None) for i in range(50)]
        )
        assert examined(mem, lambda: MemlaneStore(mem)) == 0
        swept: list[int] = []
        assert examined(mem, lambda: swept.append(store.sweep_ttl())) == 0
        store.put(("short",), "a", {"text": "gone soon"}, ttl=1)
        store.put(("short",), "b", {"text": "gone soon too"}, ttl=1)
        clock[0] += 61
        # The expired items go by the database's expiry index (Memory.expire): the
        # engine examines no item for either sweep.
        assert examined(mem, lambda: swept.append(store.sweep_ttl())) == 0
        assert examined(mem, lambda: swept.append(store.sweep_ttl())) == 0
        assert swept == [0, 2, 0]
        assert mem.count("langgraph") == 350
