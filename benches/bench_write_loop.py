"""An agent's loop of writes and searches: what a search costs once it has run a while.

Each write saves the access counts the searches before it gathered, and the store keeps
what those saves counted for a few seconds (a record read before a save committed must
still count it). This fills a text-only embedded store with ``--n`` short memories, then
for ``--seconds`` adds one memory and searches (``k=10``, tracked) in turn, as an agent's
turns do, and reports how many turns that was and the p50 / p99 of ``--queries``
searches made right after (untracked, so they change nothing), against the same
searches on the store before the loop.

    python benches/bench_write_loop.py [--n 2000] [--seconds 4] [--queries 300]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from _timing import percentiles
from memlane import Memory


def searches(mem: Memory, count: int) -> tuple[float, float]:
    samples = []
    for i in range(count):
        started = time.perf_counter()
        mem.search(f"note {i} hills", k=10, mode="text", track_access=False)
        samples.append(time.perf_counter() - started)
    return percentiles(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=2000, help="memories before the loop")
    parser.add_argument("--seconds", type=float, default=4.0, help="how long the loop runs")
    parser.add_argument("--queries", type=int, default=300, help="searches timed")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root, Memory(Path(root) / "store", None) as mem:
        mem.add_many({"text": f"note {i} about kites and hills"} for i in range(args.n))
        before = searches(mem, args.queries)
        turns = 0
        started = time.monotonic()
        while time.monotonic() - started < args.seconds:
            mem.add(f"turn {turns} of the loop")
            mem.search(f"note {turns % args.n} kites", k=10, mode="text")
            turns += 1
        after = searches(mem, args.queries)
    print(f"{turns:,} turns (an add and a search) in {args.seconds:g} s")
    print("| search (ms) | p50 | p99 |")
    print("| --- | ---: | ---: |")
    print(f"| before the loop | {before[0]:.3f} | {before[1]:.3f} |")
    print(f"| right after it | {after[0]:.3f} | {after[1]:.3f} |")


if __name__ == "__main__":
    main()
