"""The background thread moves the engine's buffers onto huge pages in the pauses between
searches (``Engine.settle_pages``), on both backends, and nothing a search answers
changes; a store that grows has its new buffers settled in turn."""

from __future__ import annotations

import os
import time
from pathlib import Path

from tests.conftest import StoreFactory, WordHashEmbedder, unit_rows

from memlane import Memory

DIM = 384
# Enough records that the walk's codes alone (a byte a dimension) span whole 2 MiB pages.
N = 8_000


def _settled(mem: Memory) -> bool:
    """Waits (at most a minute, searching nothing meanwhile) for the thread to settle
    every page; whether it did."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if mem._sync.engine.settle_pages(0) == 0:
            return True
        time.sleep(0.05)
    return False


def _huge_page_bytes() -> int:
    """Bytes of this process's memory on huge pages (0 where the kernel says nothing)."""
    try:
        lines = Path("/proc/self/smaps_rollup").read_text().splitlines()
    except OSError:
        return 0
    kib = [int(line.split()[1]) for line in lines if line.startswith("AnonHugePages:")]
    return sum(kib) * 1024


def _collapses() -> bool:
    """Whether this kernel collapses pages on request (Linux 6.1 with huge pages on)."""
    try:
        enabled = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
        release = tuple(int(x) for x in os.uname().release.split(".")[:2])
    except (OSError, ValueError):
        return False
    return "[never]" not in enabled and release >= (6, 1)


def _add(mem: Memory, start: int, n: int) -> None:
    vectors = unit_rows(n, DIM, seed=start)
    mem.add_many(
        {"text": f"note {i % 97} about topic {i % 13}", "embedding": vectors[i - start]}
        for i in range(start, start + n)
    )
    mem.wait_indexed()


def test_the_thread_settles_the_pages_and_searches_answer_the_same(
    make_store: StoreFactory,
) -> None:
    mem = make_store("store", WordHashEmbedder(DIM))
    _add(mem, 0, N)
    engine = mem._sync.engine
    queries = unit_rows(6, DIM, seed=99)

    def answers() -> list[list[tuple[str, float]]]:
        return [
            [
                (h.record.id, h.score)
                for h in mem.search(
                    "note 5 about topic 7", k=10, query_embedding=q, track_access=False
                )
            ]
            for q in queries
        ]

    before = answers()
    assert _settled(mem)
    if _collapses():
        assert _huge_page_bytes() >= N * DIM // 2
    assert answers() == before
    # Linking more grows the buffers into new allocations: settled in the next pauses.
    _add(mem, N, 2 * N)
    assert _settled(mem)
    assert engine.settle_pages(1 << 40) == 0
    assert len(mem.search("note 5", k=10, query_embedding=queries[0])) == 10
