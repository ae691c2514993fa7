"""What the inspector's views cost as a store grows: a page of 20 records sorted by
importance (unscoped, and within one user's scope of a tenth of the records) and by
time, and ``GET /v1/stats`` (with an unscoped key, and with a key limited to that
user), through the server's app in process (Starlette's test client: no socket), and
the ``Memory`` calls behind them alone, on text-only stores of 10,000 and 100,000
records.

    python benches/bench_views.py [--sizes 10000,100000] [--repeats 7] [--workdir DIR]

Beside each, the same answer made as the server made it before the engine sorted by a
column and counted by scope (``former``: every record the request admits read a page of
1,000 at a time through ``Memory.list``, and the best 20 kept or each counted), in the
same run. Medians of ``--repeats`` requests, in milliseconds. ``--workdir`` keeps the
built stores there for the next run.
"""

from __future__ import annotations

import argparse
import heapq
import random
import shutil
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from starlette.testclient import TestClient

from memlane import Memory
from memlane.records import MemoryRecord
from memlane.server import create_app
from memlane.server.keys import ApiKey

USERS = 10
PAGE = 20
ADMIN = "bench-admin-key-0123456789"
USER = "bench-user3-key-0123456789"


def build(path: Path, n: int) -> Memory:
    """A store of ``n`` text-only records over ``USERS`` users, importance in hundredths
    (ties aplenty), a fifth of them searched for once or more (access counts)."""
    if path.exists():
        return Memory(path, embedder=None)
    mem = Memory(path, embedder=None)
    rng = random.Random(5)
    batch = 5_000
    for start in range(0, n, batch):
        mem.add_many(
            [
                {
                    "text": f"note {i} about topic{i % 997} and thing{i % 89}",
                    "importance": round(rng.random(), 2),
                    "created_at": 1_600_000_000 + i,
                    "user_id": f"user{i % USERS}",
                }
                for i in range(start, min(n, start + batch))
            ]
        )
    for t in range(0, 997, 5):
        mem.search(f"topic{t}", k=20, mode="text")
    mem.close()
    return Memory(path, embedder=None)


def every(mem: Memory, **args: Any) -> Iterator[MemoryRecord]:
    offset = 0
    while True:
        page = mem.list(limit=1000, offset=offset, order="asc", **args)
        yield from page
        offset += len(page)
        if len(page) < 1000:
            return


def former(mem: Memory, sort: str, **args: Any) -> list[MemoryRecord]:
    """The page as the server made it before: every record admitted, the best kept."""
    return heapq.nlargest(PAGE, every(mem, **args), key=lambda r: (getattr(r, sort), r.created_at))


def former_counts(mem: Memory, **args: Any) -> Counter[tuple[str, ...]]:
    """The counts by table and scope as the server made them before: each record read."""
    return Counter((r.table, *r.scope.values()) for r in every(mem, **args))


def medians_ms(calls: list[Callable[[], Any]], repeats: int) -> list[float]:
    """Each call's median time, the calls taking turns (so a machine's load, which
    drifts, weighs on each alike)."""
    for call in calls:
        call()  # warm: the row cache, the first request's setup
    times: list[list[float]] = [[] for _ in calls]
    for _ in range(repeats):
        for call, took in zip(calls, times, strict=True):
            t0 = time.perf_counter()
            call()
            took.append(time.perf_counter() - t0)
    return [statistics.median(t) * 1e3 for t in times]


def run(n: int, workdir: Path, repeats: int) -> None:
    mem = build(workdir / f"views-{n}", n)
    try:
        keys = [ApiKey(ADMIN), ApiKey(USER, {"user_id": "user3"})]
        with TestClient(create_app(mem, keys=keys)) as client:

            def get(path: str, key: str = ADMIN, **params: Any) -> Callable[[], Any]:
                headers = {"Authorization": f"Bearer {key}"}

                def call() -> Any:
                    answer = client.get(path, params=params, headers=headers)
                    assert answer.status_code == 200, answer.text
                    return answer.json()

                return call

            cases: list[tuple[str, Callable[[], Any]]] = [
                ("page by time", get("/v1/memories", limit=PAGE)),
                ("page by importance", get("/v1/memories", limit=PAGE, sort="importance")),
                (
                    "page by importance, former",
                    lambda: former(mem, "importance"),
                ),
                (
                    "page by importance, one scope",
                    get("/v1/memories", limit=PAGE, sort="importance", user_id="user3"),
                ),
                (
                    "page by importance, one scope, former",
                    lambda: former(mem, "importance", user_id="user3"),
                ),
                (
                    "page by importance at offset n/2",
                    get("/v1/memories", limit=PAGE, sort="importance", offset=n // 2),
                ),
                ("page by access_count", get("/v1/memories", limit=PAGE, sort="access_count")),
                ("/v1/stats", get("/v1/stats")),
                ("/v1/stats, former counts", lambda: former_counts(mem)),
                ("/v1/stats, a key for one scope", get("/v1/stats", USER)),
                (
                    "/v1/stats, a key for one scope, former counts",
                    lambda: former_counts(mem, user_id="user3"),
                ),
                # The calls alone, without HTTP.
                ("Memory.list(limit=20)", lambda: mem.list(limit=PAGE)),
                (
                    "Memory.list(limit=20, sort='importance')",
                    lambda: mem.list(limit=PAGE, sort="importance"),
                ),
                (
                    "... user_id='user3'",
                    lambda: mem.list(limit=PAGE, sort="importance", user_id="user3"),
                ),
                ("Memory.scopes()", lambda: mem.scopes()),
                ("Memory.scopes(user_id='user3')", lambda: mem.scopes(user_id="user3")),
            ]
            print(f"\n{n:,} records, {mem.count(user_id='user3'):,} in one scope")
            medians = medians_ms([call for _, call in cases], repeats)
            for (label, _), ms in zip(cases, medians, strict=True):
                print(f"  {label:<48} {ms:9.2f} ms")
    finally:
        mem.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--workdir", type=Path)
    args = ap.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench-views-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        for n in (int(s) for s in args.sizes.split(",")):
            run(n, workdir, args.repeats)
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
