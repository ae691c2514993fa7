"""``bench_filtered_search.py``'s store and filters, once and small, untimed: every
search returns ten hits, each admitted by its filter as the fill's rule says
(``python benches/bench_filtered_search.py`` times them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench_filtered_search import T0, fill, filters, vectors
from memlane import Memory, MemoryRecord

SIZE = 2_000


def admitted(rec: MemoryRecord, name: str) -> bool:
    """Whether the fill's record ``rec`` meets filter ``name`` (record ``i`` was created
    at ``T0 + i``, of user ``u{i % 2}``, in room ``r{i % 100}``, importance ``i % 10 /
    10``, all of agent ``a``)."""
    i = round(rec.created_at - T0)
    rules = {
        "no filter": True,
        "the agent (every record)": rec.scope.get("agent_id") == "a",
        "one user (half)": i % 2 == 0,
        "one room (1%)": i % 100 == 7,
        "as_of now": True,
        "the agent, as_of mid-store": i <= SIZE / 2,
        "importance >= 0.3 (70%)": i % 10 >= 3,
        "importance >= 0.9 (10%)": i % 10 == 9,
    }
    return rules[name] and rec.scope.get("agent_id") == "a"


@pytest.mark.parametrize("mode", ["hybrid", "text"])
def test_each_search_returns_records_its_filter_admits(tmp_path: Path, mode: str) -> None:
    mem = Memory(tmp_path / "store")
    try:
        fill(mem, SIZE)
        query = vectors(1, 99)[0] if mode == "hybrid" else None
        words = {"w7", "w11", "w13"}
        every = mem.list(limit=SIZE)
        for name, kw in filters(SIZE).items():
            hits = mem.search(" ".join(words), 10, mode=mode, query_embedding=query, **kw)
            # Text alone finds the admitted records that hold a word of the question.
            held = [r for r in every if admitted(r, name) and words & set(r.text.split())]
            assert len(hits) == (10 if mode == "hybrid" else min(10, len(held))), name
            assert all(admitted(h.record, name) for h in hits), name
    finally:
        mem.close()
