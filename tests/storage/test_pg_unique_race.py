"""``unique=True`` on a store that several processes write (PostgreSQL): an exact
duplicate another process stored after this one looked, before its write, is found in
the write's transaction and not stored again.

The look for exact duplicates ran before the transaction: three processes adding the
same 20 texts at once stored 25 records in one round of three."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from conftest import TESTS, WordHashEmbedder
from memlane import Memory
from pg_server import PgServer

_n = 0


def url(server: PgServer, name: str) -> str:
    global _n
    _n += 1
    return server.url(schema=f"uq{_n}_{name}")


@contextmanager
def two_handles(server: PgServer, name: str) -> Iterator[tuple[Memory, Memory]]:
    """Two ``Memory`` objects on one new store, as two processes have."""
    u, emb = url(server, name), WordHashEmbedder()
    with Memory(u, emb) as a, Memory(u, emb) as b:
        yield a, b


def another_adds_first(mem: Memory, other: Memory, items: list[dict[str, Any]]) -> None:
    """Has ``other`` store ``items`` when ``mem``'s next write has looked for duplicates
    and is about to begin its transaction."""
    db = mem._db  # type: ignore[attr-defined]
    reserve = db.reserve_rowids

    def first(count: int) -> int:
        db.reserve_rowids = reserve
        other.add_many(items)
        return int(reserve(count))

    db.reserve_rowids = first


def test_a_text_stored_by_another_meanwhile_is_not_stored_again(pg_server: PgServer) -> None:
    with two_handles(pg_server, "one") as (a, b):
        theirs = {"text": "the shared fact", "unique": True, "agent_id": "x"}
        another_adds_first(a, b, [theirs])
        got = a.add("the shared fact", unique=True, agent_id="x")
        stored = b.list(agent_id="x")
        a.refresh()
        assert len(stored) == 1 and a.count() == 1
        assert (got.id, got.duplicate, got.duplicate_of) == (stored[0].id, "exact", stored[0].id)
        # Another scope's record of the same text is no duplicate.
        assert a.add("the shared fact", unique=True, agent_id="y").duplicate is None


def test_a_batch_whose_items_name_one_stored_meanwhile_names_the_stored_one(
    pg_server: PgServer,
) -> None:
    with two_handles(pg_server, "batch") as (a, b):
        another_adds_first(a, b, [{"text": "alpha fact", "unique": True}])
        got = a.add_many(
            [
                {"text": "alpha fact", "unique": True},
                {"text": "beta fact", "unique": True},
                {"text": "alpha fact", "unique": True},  # the first item's duplicate
            ]
        )
        (alpha,) = [r for r in b.list() if r.text == "alpha fact"]
        assert [(r.id, r.duplicate) for r in got] == [
            (alpha.id, "exact"),
            (got[1].id, None),
            (alpha.id, "exact"),
        ]
        a.refresh()
        assert a.count() == 2
        assert [h.record.id for h in a.search("alpha", mode="text")] == [alpha.id]


def test_processes_adding_the_same_texts_at_once_store_each_once(
    pg_server: PgServer, tmp_path: Path
) -> None:
    u = url(pg_server, "race")
    with Memory(u, WordHashEmbedder()):
        pass  # made once, so the processes race on their writes alone
    start = time.time() + 4
    script = textwrap.dedent(
        f"""
        import time
        from conftest import WordHashEmbedder
        from memlane import Memory

        with Memory({u!r}, WordHashEmbedder()) as mem:
            time.sleep(max(0.0, {start!r} - time.time()))
            for i in range(20):
                mem.add(f"fact number {{i}}", unique=True, agent_id="a")
        """
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", script], cwd=TESTS, stderr=subprocess.PIPE)
        for _ in range(3)
    ]
    for p in procs:
        _, err = p.communicate(timeout=180)
        assert p.returncode == 0, err.decode()[-2000:]
    with Memory(u, WordHashEmbedder()) as mem:
        texts = sorted(r.text for r in mem.list(agent_id="a", limit=100))
    assert texts == sorted(f"fact number {i}" for i in range(20))


def test_a_store_of_one_process_looks_once(tmp_path: Path) -> None:
    # An embedded store is written by its one process under its lock: no second look.
    with Memory(tmp_path / "s", WordHashEmbedder()) as mem:
        looked: list[int] = []
        db = mem._db  # type: ignore[attr-defined]
        rows_by_hash = db.rows_by_hash

        def counted(*args: Any) -> Any:
            looked.append(len(args))
            return rows_by_hash(*args)

        db.rows_by_hash = counted
        mem.add("a fact", unique=True)
        assert looked == [1]


def test_a_duplicate_deleted_by_another_before_the_add_returns_is_returned_as_read(
    pg_server: PgServer,
) -> None:
    # The add read its target again after its commit, and raised a bare MemlaneError
    # ("vanished") although the batch's other items were stored.
    with two_handles(pg_server, "vanish") as (a, b):
        theirs = b.add("the shared fact", unique=True)
        db = a._db  # type: ignore[attr-defined]
        row_by_id = db.row_by_id

        def deleted_first(record_id: str) -> Any:
            db.row_by_id = row_by_id
            b.delete(record_id)
            return row_by_id(record_id)

        db.row_by_id = deleted_first
        got = a.add_many(
            [{"text": "the shared fact", "unique": True}, {"text": "another fact", "unique": True}]
        )
        assert [(r.id, r.duplicate) for r in got] == [(theirs.id, "exact"), (got[1].id, None)]
        assert got[0].text == "the shared fact"
        assert a.get(got[1].id).text == "another fact"
