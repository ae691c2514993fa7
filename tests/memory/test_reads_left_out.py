"""Reads that leave records out without reading the others: a
store with an expiring record leaves out those expired at the read's clock, and one
with many superseded versions leaves those out of a search, each by the few it leaves
out. Every read answers as the same read restricted by postings to the same records
does (every record here holds ``{"all": 1}``: the path these reads took before), on
both backends, through every write path, the expiry sweep and a reopen; and the
expiry condition examines only the records expired (``Engine.filter_stats``)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import StoreFactory, WordHashEmbedder
from memlane import Memory
from memlane._memory.writer import Writer

ALL = {"all": 1}
WORDS = ["dark", "mode", "cake", "light", "tea", "blue", "north", "song", "river", "stone"]
QUERIES = ["dark mode", "tea song", "blue river stone", "north"]


def text(i: int) -> str:
    return " ".join(WORDS[(i * k + k) % len(WORDS)] for k in range(1, 4 + i % 3))


def hold_sweep(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Holds maintenance's removal of expired records off; returns the sweep itself."""
    expire = Writer.expire
    monkeypatch.setattr(Writer, "expire", lambda self, now: 0)
    return expire


def wait_past(at: float) -> None:
    while time.time() <= at:
        time.sleep(0.01)


def examined(mem: Memory) -> tuple[int, int]:
    """(records admitted, records examined) by the condition that leaves out those
    expired now."""
    found: tuple[int, int] = mem._sync.engine.filter_stats(
        {"expires_at": {"$not": {"$lte": time.time()}}}
    )
    return found


def hits(mem: Memory, query: str, **kw: Any) -> list[tuple[str, float]]:
    return [(h.record.id, h.score) for h in mem.search(query, 8, track_access=False, **kw)]


def same_as_selected(mem: Memory) -> None:
    """Each read answers as it does restricted to ``{"all": 1}`` (every record)."""
    assert len(mem) == mem.count() == mem.count(filters=ALL)
    assert mem.count(agent_id="a1") == mem.count(agent_id="a1", filters=ALL)
    for order in ("asc", "desc"):
        page = [r.id for r in mem.list(limit=1000, order=order)]
        assert page == [r.id for r in mem.list(limit=1000, order=order, filters=ALL)]
    assert mem.scopes() == mem.scopes(filters=ALL)
    for query in QUERIES:
        for mode in ("hybrid", "text", "vector"):
            for every in (False, True):
                kw: dict[str, Any] = {"mode": mode, "include_superseded": every}
                assert hits(mem, query, **kw) == hits(mem, query, filters=ALL, **kw)


def test_an_expiring_store_reads_as_a_selection_and_examines_only_the_expired(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    sweep = hold_sweep(monkeypatch)
    mem = make_store("expiring", WordHashEmbedder())
    soon = time.time() + 0.5
    later = time.time() + 86400
    added = mem.add_many(
        [
            {
                "text": text(i),
                "agent_id": f"a{i % 3}",
                "metadata": {**ALL, "n": i},
                "expires_at": [soon, later, None, None][i % 4],
            }
            for i in range(80)
        ]
    )
    ids = [r.id for r in added]
    # Every write path moves expiries: an update, a renewal (to none, and to soon),
    # a supersede (its new version expiring soon), deletes.
    mem.update(ids[1], expires_at=soon)
    mem.renew([ids[5], ids[9]])
    mem.renew([ids[2]], expires_at=soon)
    mem.supersede(ids[3], "tea song changed", metadata=ALL, expires_at=soon)
    mem.supersede(ids[6], "north river changed", metadata=ALL)
    mem.delete(ids[0])
    mem.delete(ids[7])
    expired = {ids[i] for i in range(0, 80, 4)} - {ids[0]} | {ids[1], ids[2]}
    wait_past(soon)
    # The superseded version of ids[3] never expired; its new version did.
    assert examined(mem) == (len(mem), len(expired) + 1)
    assert len(mem) == 80 - 2 + 2 - len(expired) - 1
    same_as_selected(mem)

    assert sweep(mem._writer, time.time()) == len(expired) + 1
    assert examined(mem) == (len(mem), 0)
    same_as_selected(mem)

    # The order of expiries is rebuilt by an open, from the snapshot or the log.
    mem.add("a note that expires soon", metadata=ALL, expires_at=time.time() + 0.5)
    mem.close()
    mem = make_store("expiring", WordHashEmbedder())
    assert examined(mem) == (len(mem), 0)
    wait_past(time.time() + 0.6)
    assert examined(mem) == (len(mem), 1)
    same_as_selected(mem)


def test_many_superseded_are_left_out_of_a_search_as_a_selection_would(
    make_store: StoreFactory, tmp_path: Path
) -> None:
    """Past 2,048 superseded versions, an unscoped search skips them as it meets them."""
    mem = make_store("superseded", WordHashEmbedder())
    lines = [
        {
            "id": f"r{i}",
            "text": text(i),
            "agent_id": f"a{i % 3}",
            "metadata": ALL,
            "created_at": 1000.0 + i,
            "valid_to": 5000.0 + i if i < 2100 else None,
        }
        for i in range(2400)
    ]
    path = tmp_path / "superseded.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert mem.import_jsonl(path) == 2400
    mem.wait_indexed()
    for query in QUERIES:
        for mode in ("hybrid", "text", "vector"):
            found = hits(mem, query, mode=mode)
            assert found and all(int(i[1:]) >= 2100 for i, _ in found)
            assert found == hits(mem, query, mode=mode, filters=ALL)
    # With an expiring record too, both are left out.
    mem.add("dark mode tea", metadata=ALL, ttl=3600)
    same_as_selected(mem)
