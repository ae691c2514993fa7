"""What a page by time and a count cost as one scope grows: ``Memory.list`` and
``Memory.count`` of one room (as an agent's history reads it each turn) on a text-only
store of ``--size`` messages, in three shapes: every message in the room (``one``), the
messages spread over 100 rooms (``spread``), and half of them in a room older than
every other message (``old``, where a walk from the newest end finds none of the room's).
Medians of ``--calls`` calls, in milliseconds.

Run it again with ``PYTHONPATH`` pointing at another build's ``python/`` folder to
time that build on the same shapes.

    python benches/bench_listing.py [--size 100000] [--calls 200]
"""

from __future__ import annotations

import argparse
import functools
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

from memlane import Memory

SHAPES = ("one", "spread", "old")


def room(shape: str, i: int, size: int) -> str:
    if shape == "one":
        return "r0"
    if shape == "spread":
        return f"r{i % 100}"
    return "r0" if i < size // 2 else f"r{1 + i % 100}"


def fill(mem: Memory, shape: str, size: int) -> None:
    for start in range(0, size, 5000):
        mem.add_many(
            {
                "text": f"message {i} about things",
                "table": "messages",
                "user_id": "u",
                "room_id": room(shape, i, size),
                **({"agent_id": "a"} if i % 2 else {}),
                "created_at": 1_000.0 + i,
            }
            for i in range(start, min(size, start + 5000))
        )
    mem.wait_indexed()


def median_ms(call: Callable[[], Any], calls: int) -> float:
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


ROOM = {"user_id": "u", "room_id": "r0"}


def calls(size: int) -> dict[str, Callable[[Memory], Any]]:
    """The calls timed, on a store of ``size`` messages."""
    mid = 1_000.0 + size / 4
    room: Any = ROOM
    return {
        "list 20 newest": lambda m: m.list("messages", limit=20, **room),
        "list 20 oldest": lambda m: m.list("messages", limit=20, order="asc", **room),
        "list 20, agent_id None": lambda m: m.list(
            "messages", limit=20, filters={"agent_id": None}, **room
        ),
        "list 20 after 100": lambda m: m.list("messages", limit=20, offset=100, **room),
        "list 20 of a window": lambda m: m.list("messages", mid, mid + 100, 20, **room),
        "count": lambda m: m.count("messages", **room),
        "count of a window": lambda m: m.count("messages", start=mid, end=mid + 100, **room),
        "list 20 of the store": lambda m: m.list("messages", limit=20),
        "count of the store's agent a": lambda m: m.count("messages", agent_id="a"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    timed = calls(args.size)
    print(f"{args.size:,} messages; median ms of {args.calls} calls")
    print("| call | " + " | ".join(SHAPES) + " |")
    print("| --- |" + " ---: |" * len(SHAPES))
    results: dict[str, list[float]] = {name: [] for name in timed}
    for shape in SHAPES:
        with tempfile.TemporaryDirectory() as folder:
            mem = Memory(folder, None)
            try:
                fill(mem, shape, args.size)
                for name, call in timed.items():
                    results[name].append(median_ms(functools.partial(call, mem), args.calls))
            finally:
                mem.close()
    for name, row in results.items():
        print(f"| {name} | " + " | ".join(f"{ms:.3f}" for ms in row) + " |")


if __name__ == "__main__":
    main()
