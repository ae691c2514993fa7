"""Idle pooled connections the server ended: a restart, or ``pg_terminate_backend``
(a failover tool, an administrator, ``idle_session_timeout``). Each such connection
holds the server's last words unread, and the pool lent them as if alive: a call that
met more of them than its retries failed ("terminating connection due to
administrator command"), and the rest waited out its pauses between tries. The pool's
look at an idle connection before lending it now reads what is waiting on its socket,
and one the server ended is closed and the next asked at once."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from conftest import WordHashEmbedder
from memlane import Memory
from memlane.storage import pg_listen
from memlane.storage.postgres import PostgresStore
from pg_server import PgServer

IDLE = 8  # the pool's most


def idle_pids(store: PostgresStore) -> list[int]:
    """Lends ``IDLE`` connections at once, so that the pool keeps them all idle after;
    their server processes' pids."""
    barrier = threading.Barrier(IDLE)
    pids: list[int] = []

    def hold() -> None:
        with store._reader() as conn:
            pids.append(conn.pgconn.backend_pid)
            barrier.wait(60)

    threads = [threading.Thread(target=hold) for _ in range(IDLE)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(set(pids)) == IDLE
    return pids


def test_connections_a_terminated_backend_left_are_not_lent(
    pg_server: PgServer, tmp_path: Path
) -> None:
    with Memory(pg_server.url(schema="ended_terminated"), WordHashEmbedder()) as mem:
        mem.add("a note about foxes")
        pids = idle_pids(mem._sync.db)
        with psycopg.connect(pg_server.url(), autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid", (pids,))
        # Every call succeeds at its first try, reads and writes alike.
        assert mem.add("another note").text == "another note"
        assert mem.search("foxes", k=1)[0].record.text == "a note about foxes"
        assert len(mem.list()) == 2
        mem.export_jsonl(tmp_path / "out.jsonl")  # one read transaction, not tried again
        assert "another note" in (tmp_path / "out.jsonl").read_text()


def test_connections_a_restarted_server_left_are_not_lent(pg_server: PgServer) -> None:
    with Memory(pg_server.url(schema="ended_restart"), WordHashEmbedder()) as mem:
        mem.add("before the restart")
        idle_pids(mem._sync.db)
        pg_server.restart()
        assert mem.add("after the restart").text == "after the restart"
        assert mem.count() == 2


def test_a_call_right_after_the_terminations_is_served(pg_server: PgServer, tmp_path: Path) -> None:
    """The server sends an ended connection why it ends it, then the end of the stream,
    some milliseconds apart. A call in between met a connection that looked alive, and
    an export, whose snapshot's first statement was not sent again on another
    connection, failed (19 of 20 rounds). Anything unread on an idle connection now
    passes it over, and the snapshot's first statement is tried again as a write's is."""
    with Memory(pg_server.url(schema="ended_at_once"), WordHashEmbedder()) as mem:
        mem.add("a note about foxes")
        with psycopg.connect(pg_server.url(), autocommit=True) as admin:
            for n in range(10):
                pids = idle_pids(mem._sync.db)
                admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid", (pids,)
                )
                mem.export_jsonl(tmp_path / f"{n}.jsonl")
                assert "foxes" in (tmp_path / f"{n}.jsonl").read_text()
                pids = idle_pids(mem._sync.db)
                admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid", (pids,)
                )
                mem.add(f"note {n}")
        assert mem.count() == 11


def test_the_followers_connection_ended_after_listening_is_made_again_at_once(
    pg_server: PgServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The follower's connection, ended by the server (``idle_session_timeout``, which
    a listening session meets as any idle one, a restart), was made again only after a
    second's backoff, and other processes' writes waited for the poll meanwhile
    (``idle_session_timeout`` at 1.5 s: p90 806 ms from a write to another process
    seeing it, against 4 ms). One that listened for a while is made again at once."""
    url = pg_server.url(schema="ended_follower")
    with Memory(url, WordHashEmbedder()) as mem, Memory(url, WordHashEmbedder()) as other:
        listener = mem._sync.db._listener
        assert listener is not None
        waits: list[float] = []
        monkeypatch.setattr(listener._stopping, "wait", lambda t: waits.append(t) or False)
        find = "SELECT pid FROM pg_stat_activity WHERE query LIKE %s"
        mark = f"%{listener._wake_channel}%"
        with psycopg.connect(pg_server.url(), autocommit=True) as admin:
            first = wait_for_one(admin, find, mark, None)
            time.sleep(pg_listen.POLL_SECONDS * 1.5)  # listened for a while
            admin.execute("SELECT pg_terminate_backend(%s)", (first,))
            wait_for_one(admin, find, mark, first)
        assert waits == []
        other.add("seen at once")
        deadline = time.monotonic() + 60
        while len(mem) < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(mem) == 1


def wait_for_one(admin: psycopg.Connection[Any], find: str, mark: str, not_pid: int | None) -> int:
    """The pid of the one server process whose last statement matches ``mark``, once it
    is another than ``not_pid``."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pids = [pid for (pid,) in admin.execute(find, (mark,)).fetchall() if pid != not_pid]
        if pids:
            return int(pids[0])
        time.sleep(0.01)
    raise AssertionError("no such process")
