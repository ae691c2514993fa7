"""``bench_listing.py``'s shapes and calls, once and small, untimed: each call answers
what the messages its store was filled with say (``python benches/bench_listing.py``
times them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench_listing import SHAPES, calls, fill, room
from memlane import Memory

SIZE = 1_800


def expected(shape: str) -> dict[str, Any]:
    """Each call's answer, from the fill's rule: message ``i`` is created at 1000 + i, in
    ``room(shape, i)``, of agent ``a`` when ``i`` is odd."""
    mine = [i for i in range(SIZE) if room(shape, i, SIZE) == "r0"]
    newest = mine[::-1]
    mid = 1_000.0 + SIZE / 4
    window = [i for i in newest if mid <= 1_000.0 + i < mid + 100]
    return {
        "list 20 newest": newest[:20],
        "list 20 oldest": mine[:20],
        "list 20, agent_id None": [i for i in newest if i % 2 == 0][:20],
        "list 20 after 100": newest[100:120],
        "list 20 of a window": window[:20],
        "count": len(mine),
        "count of a window": len(window),
        "list 20 of the store": list(range(SIZE - 1, SIZE - 21, -1)),
        "count of the store's agent a": SIZE // 2,
    }


@pytest.mark.parametrize("shape", SHAPES)
def test_each_call_answers_what_the_fill_says(tmp_path: Path, shape: str) -> None:
    mem = Memory(tmp_path / "store", None)
    try:
        fill(mem, shape, SIZE)
        want = expected(shape)
        for name, call in calls(SIZE).items():
            got = call(mem)
            if isinstance(got, list):
                got = [int(r.text.split()[1]) for r in got]
            assert got == want[name], name
    finally:
        mem.close()
