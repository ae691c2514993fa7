"""A PostgreSQL server that stops answering without closing its connections (a stopped
postmaster, a frozen VM, a network dropping packets past a firewall): a statement sent
to it waited for good, since TCP reports nothing and libpq sets no deadline. The store
now asks the server whether it answers at all once a statement has waited
``STALL_SECONDS`` (shortened here), and a server that does not has the waiting
connections shut: the call raises ``StorageError``. A server that answers is left to a
statement however long it takes; but a connection whose server process is no longer
at work on its statement (the answer lost by the network) is shut, as a connection to
a stopped server is."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import psycopg_pool.pool
import pytest

from conftest import WordHashEmbedder
from frozen_proxy import FrozenProxy
from memlane import Memory, StorageError
from memlane.storage import pg_watch, postgres
from memlane.storage.postgres import PostgresStore
from pg_server import PgServer

# A bound for a hang, far beyond the shortened timeouts; not a latency the test asserts.
HANG = 120.0


@pytest.fixture
def proxy(pg_server: PgServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[FrozenProxy]:
    monkeypatch.setattr(pg_watch, "STALL_SECONDS", 1.0)
    monkeypatch.setattr(pg_watch, "PROBE_SECONDS", 1.0)
    monkeypatch.setattr(postgres, "CONNECT_TIMEOUT", 2.0)
    p = FrozenProxy("127.0.0.1", pg_server.port)
    yield p
    p.close()


def outcome(call: Callable[[], Any]) -> BaseException | str:
    """What ``call`` ended with, run on a thread: its exception, or "returned"; "hung"
    if it had not ended within ``HANG``."""
    out: list[BaseException | str] = []

    def run() -> None:
        try:
            call()
            out.append("returned")
        except BaseException as e:  # handed to the test
            out.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(HANG)
    return out[0] if out else "hung"


def inline(call: Callable[[], Any]) -> BaseException | str:
    """What ``call`` ended with, run on this thread."""
    try:
        call()
    except Exception as e:  # handed to the test
        return e
    return "returned"


def lend_at_once(store: PostgresStore, count: int) -> None:
    """Has ``count`` of the store's connections lent at once, so that the pool keeps as
    many idle ones: a call after the freeze takes one, and sends its statement."""
    barrier = threading.Barrier(count)

    def hold() -> None:
        with store._reader():
            barrier.wait(HANG)

    threads = [threading.Thread(target=hold) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(HANG)


def test_a_statement_sent_to_a_frozen_server_fails(pg_server: PgServer, proxy: FrozenProxy) -> None:
    store = PostgresStore(proxy.url(pg_server.url(schema="frozen_read")))
    try:
        assert store._read(lambda c: c.execute("SELECT 1").fetchone()) == (1,)
        proxy.freeze()  # the pooled connection the read used is idle, and is lent next
        got = outcome(lambda: store._read(lambda c: c.execute("SELECT 2").fetchone()))
        assert isinstance(got, StorageError), got
    finally:
        assert outcome(store.close) == "returned"


def test_a_write_to_a_frozen_server_fails_and_stores_nothing(
    pg_server: PgServer, proxy: FrozenProxy, tmp_path: Path
) -> None:
    direct = pg_server.url(schema="frozen_write")
    mem = Memory(proxy.url(direct), WordHashEmbedder(), cache_dir=tmp_path / "a")
    mem.add("a note stored before the freeze")
    lend_at_once(mem._sync.db, 4)
    proxy.freeze()
    got = outcome(lambda: mem.add("a note sent to the frozen server"))
    assert isinstance(got, StorageError), got
    # What close writes (the searches' access counts) cannot reach the server either:
    # it says so, and the store is closed all the same.
    closed = outcome(mem.close)
    assert closed == "returned" or isinstance(closed, StorageError), closed
    assert mem.closed
    proxy.thaw()
    with Memory(direct, WordHashEmbedder(), cache_dir=tmp_path / "b") as again:
        texts = [r.text for r in again.list(limit=10)]
    # The write failed before its commit was sent: nothing of it was stored.
    assert texts == ["a note stored before the freeze"]


def test_a_long_statement_on_a_server_that_answers_runs_to_its_end(
    pg_server: PgServer, proxy: FrozenProxy
) -> None:
    store = PostgresStore(proxy.url(pg_server.url(schema="slow_statement")))
    try:
        # Waits beyond the shortened stall three times over; the probe finds the server
        # answering, so the statement is left to finish.
        got = store._read(lambda c: c.execute("SELECT pg_sleep(3.5), 7").fetchone())
        assert got == ("", 7)
    finally:
        store.close()


def test_a_connection_the_network_lost_is_shut_while_the_server_answers(
    pg_server: PgServer, proxy: FrozenProxy
) -> None:
    store = PostgresStore(proxy.url(pg_server.url(schema="lost_connection")))
    try:
        assert store._read(lambda c: c.execute("SELECT 1").fetchone()) == (1,)
        # Held while the statement runs: its answer never reaches the client, while the
        # server answers new connections. The read, shut, is sent again on a new one.
        threading.Timer(0.2, proxy.hold_open_ones).start()
        got: list[Any] = []
        ended = outcome(
            lambda: got.append(
                store._read(lambda c: c.execute("SELECT pg_sleep(0.5), 2").fetchone())
            )
        )
        assert ended == "returned", ended
        assert got == [("", 2)]
    finally:
        assert outcome(store.close) == "returned"


def test_a_server_that_refuses_the_question_is_left_to_its_statement(
    pg_server: PgServer, proxy: FrozenProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server at its connection limit (or refusing the login) refuses the probe with an
    error: an answer that tells nothing of the statement's process, which is left."""

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise psycopg.OperationalError("FATAL:  sorry, too many clients already")

    store = PostgresStore(proxy.url(pg_server.url(schema="refused_probe")))
    try:
        monkeypatch.setattr(pg_watch.psycopg, "connect", refused)
        got = store._read(lambda c: c.execute("SELECT pg_sleep(3.5), 8").fetchone())
        assert got == ("", 8)
    finally:
        store.close()


def test_a_server_found_silent_is_asked_once_and_close_gives_up_at_once(
    pg_server: PgServer, proxy: FrozenProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, a read failed on one idle connection was sent again on the next, and each
    waited the stall and the question again (an add took 84 s with the defaults); later
    calls and close's writes waited as long. Now the read is not sent again; the next
    call's idle connection must answer an empty query first, and its silence shows the
    server frozen: until a connection is answered, calls fail without waiting for one,
    and close gives up its writes."""
    asked: list[list[int]] = []
    ask = pg_watch._activity

    def counted(conninfo: str, kwargs: Any, pids: list[int]) -> Any:
        asked.append(pids)
        return ask(conninfo, kwargs, pids)

    def read(value: int) -> Callable[[], Any]:
        return lambda: store._read(lambda c: c.execute("SELECT %s", (value,)).fetchone())

    monkeypatch.setattr(pg_watch, "_activity", counted)
    store = PostgresStore(proxy.url(pg_server.url(schema="silent_once")))
    watch = store._watch
    try:
        lend_at_once(store, 4)
        proxy.freeze()
        got = outcome(read(2))
        assert isinstance(got, StorageError), got
        assert len(asked) == 1 and watch.silent and not watch.frozen
        got = outcome(read(2))
        assert isinstance(got, StorageError) and "stopped answering" in str(got), got
        assert len(asked) == 1 and watch.frozen
        got = outcome(read(2))  # no connection to wait for
        assert isinstance(got, StorageError) and "stopped answering" in str(got), got
        # The server back: the pool's connections are answered, and the store no longer
        # takes the server for silent.
        proxy.thaw()
        assert until(lambda: not watch.silent)
        assert read(3)() == (3,)
        proxy.freeze()
        assert isinstance(outcome(read(4)), StorageError)
        assert len(asked) == 2
        ends: list[BaseException | str] = []

        def close_reads() -> None:  # close's: its writes are its thread's
            store.closing(True)  # what close writes gives up once an idle connection is silent
            ends.extend(inline(read(value)) for value in (5, 6))

        assert outcome(close_reads) == "returned"
        assert "stopped answering" in str(ends[0]), ends
        assert "close's writes are given up" in str(ends[1]), ends
        assert len(asked) == 2 and watch.frozen
    finally:
        assert outcome(store.close) == "returned"


def test_a_server_slow_to_accept_logins_keeps_serving_its_idle_connections(
    pg_server: PgServer, proxy: FrozenProxy
) -> None:
    """A live server that accepts no login for a while (a lock held on its role catalog)
    is taken for silent once a statement waits past the stall: that statement is shut
    (documented). Its idle connections answer, and keep serving every other call; the
    first that answers ends the silence."""
    store = PostgresStore(proxy.url(pg_server.url(schema="slow_logins")))
    base = pg_server.url(schema="slow_logins").split("?")[0]
    try:
        lend_at_once(store, 4)
        with psycopg.connect(base) as row, psycopg.connect(base) as logins:
            row.execute("SELECT value FROM slow_logins.meta WHERE key = 'seq' FOR UPDATE")
            logins.execute("LOCK TABLE pg_authid IN ACCESS EXCLUSIVE MODE")
            got = outcome(
                lambda: store._read(
                    lambda c: c.execute(
                        "SELECT value FROM slow_logins.meta WHERE key = 'seq' FOR UPDATE"
                    ).fetchone()
                )
            )
            assert isinstance(got, StorageError), got  # the limit the docs state
            assert store._watch.silent
            for value in range(5):
                query = ("SELECT %s", (value,))
                assert store._read(lambda c, q=query: c.execute(*q).fetchone()) == (value,)
            assert not store._watch.silent and not store._watch.frozen
    finally:
        assert outcome(store.close) == "returned"


def until(condition: Callable[[], bool]) -> bool:
    """Whether ``condition`` holds within ``HANG``, looked at every 50 ms."""
    deadline = time.monotonic() + HANG
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_a_broken_idle_connection_is_an_answer_not_a_frozen_server(
    pg_server: PgServer, proxy: FrozenProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the server is taken for silent, an idle connection the network reset fails
    its empty query at once: an error is an answer. Before, it was taken for a frozen
    server, and every healthy idle connection was dropped with it; and the pool backed
    off a second, then two, before it asked the next (past the connect timeout here)."""
    store = PostgresStore(proxy.url(pg_server.url(schema="broken_idle")))
    try:
        lend_at_once(store, 4)
        store._watch.silent = True  # as after a probe a slow login left unanswered
        idle = list(store._pool._pool)
        assert len(idle) >= 2
        pg_watch._shut(idle[0])  # the first lent next is broken
        assert store._read(lambda c: c.execute("SELECT 7").fetchone()) == (7,)
        assert not store._watch.silent and not store._watch.frozen
        store._watch.silent = True
        for conn in list(store._pool._pool):  # a failover: every idle one reset
            pg_watch._shut(conn)
        backoffs: list[float] = []
        monkeypatch.setattr(psycopg_pool.pool, "sleep", backoffs.append)
        assert store._read(lambda c: c.execute("SELECT 8").fetchone()) == (8,)
        assert not store._watch.frozen
        assert backoffs == []
    finally:
        assert outcome(store.close) == "returned"


def test_a_silent_server_with_no_idle_connection_is_taken_for_frozen(
    pg_server: PgServer, proxy: FrozenProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no idle connection to send an empty query on, a silent server that lets the
    pool make no new connection within the wait is frozen as well: later calls fail
    without waiting. Before, each waited the whole connect timeout."""
    store = PostgresStore(proxy.url(pg_server.url(schema="none_idle")))
    try:
        assert store._read(lambda c: c.execute("SELECT 1").fetchone()) == (1,)
        proxy.freeze()  # the pool's one connection is lent next
        assert isinstance(
            outcome(lambda: store._read(lambda c: c.execute("SELECT 2"))), StorageError
        )
        assert store._watch.silent
        got = outcome(lambda: store._read(lambda c: c.execute("SELECT 3")))
        assert isinstance(got, StorageError) and "stopped answering" in str(got), got
        assert store._watch.frozen
        # Calls queued behind one that just waited in vain do not each wait in turn.
        monkeypatch.setattr(postgres, "_FROZEN_WAIT", 5.0)  # "just": however slow the machine
        waits: list[float | None] = []
        getconn = store._pool.getconn

        def counted(timeout: float | None = None) -> Any:
            waits.append(timeout)
            return getconn(timeout=timeout)

        store._pool.getconn = counted  # type: ignore[method-assign]
        for _ in range(3):
            assert isinstance(
                outcome(lambda: store._read(lambda c: c.execute("SELECT 4"))), StorageError
            )
        assert waits == [0.0, 0.0, 0.0]
    finally:
        assert outcome(store.close) == "returned"


def test_an_idle_connection_left_unanswered_while_another_answered_is_passed_at_once(
    pg_server: PgServer, proxy: FrozenProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An idle connection left unanswered while another connection was answered (the
    server not frozen, only that connection lost) is closed, and the next is asked at
    once. Before, the check raised an error that made psycopg_pool back off a second."""
    store = PostgresStore(proxy.url(pg_server.url(schema="answered_meanwhile")))
    try:
        lend_at_once(store, 3)
        store._watch.silent = True
        real_ping = pg_watch.Watch.ping
        pinged: list[int] = []

        def ping(watch: pg_watch.Watch, conn: psycopg.Connection[Any]) -> bool:
            pinged.append(id(conn))
            if len(pinged) == 1:
                watch.heard()  # another connection answered while this one waited
                return False
            return real_ping(watch, conn)

        monkeypatch.setattr(pg_watch.Watch, "ping", ping)
        backoffs: list[float] = []
        monkeypatch.setattr(psycopg_pool.pool, "sleep", backoffs.append)
        assert store._read(lambda c: c.execute("SELECT 9").fetchone()) == (9,)
        assert len(pinged) == 1  # heard: the next idle connection is lent unasked
        assert backoffs == [] and not store._watch.frozen
    finally:
        assert outcome(store.close) == "returned"


def test_a_spare_connection_left_unanswered_shows_the_server_frozen(
    pg_server: PgServer, proxy: FrozenProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Close's writes take a connection of their own when reads hold the whole pool.
    On a frozen server nothing waited on it, so it was never taken for silent, and each
    of close's writes (and the background threads') waited the whole connect timeout
    for its own (37.6 s with the defaults). One left unanswered now shows the server
    frozen, and the rest are given up at once."""
    store = PostgresStore(proxy.url(pg_server.url(schema="spare_frozen")))
    try:
        proxy.freeze()
        spares: list[float] = []
        real = PostgresStore._spare

        def spare(self: PostgresStore) -> psycopg.Connection[Any]:
            spares.append(time.monotonic())
            return real(self)

        monkeypatch.setattr(PostgresStore, "_spare", spare)
        ends: list[BaseException | str] = []

        def close_writes() -> None:  # close's: its writes are its thread's
            store.closing(True)
            ends.append(inline(store._spare))
            ends.append(inline(lambda: store._read(lambda c: c.execute("SELECT 1"))))

        assert outcome(close_writes) == "returned"
        assert isinstance(ends[0], StorageError) and store._watch.frozen, ends
        assert "given up" in str(ends[1]) and len(spares) == 1, ends
    finally:
        proxy.thaw()
        assert outcome(store.close) == "returned"
