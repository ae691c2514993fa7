"""Statements waiting on a PostgreSQL server, or a connection, that stopped answering.

A server that stops answering without closing its connections (a stopped postmaster, a
frozen VM), or a connection whose packets the network drops (a firewall or NAT that
lost its state, an address moved by a failover), leaves a statement waiting for good:
the client's kernel still acknowledges what the client sends, so TCP never reports the
peer gone, libpq sets no deadline on an answer, and the server's own timeouts
(``statement_timeout``) either cannot run or cannot reach the client.

``Watch`` follows the connections a store has lent out. One found waiting for an answer
(libpq's transaction status ``ACTIVE``) at every look for ``STALL_SECONDS`` is the cue
to ask the server, on a new connection within ``PROBE_SECONDS``, what the waiting
connections' server processes are doing (``pg_stat_activity``):

- no answer at all (not even an error): the server has stopped, and every waiting
  connection is shut;
- an answer: a connection whose server process is still at work on its statement (a
  long one, or one waiting for a lock, which the server bounds itself) is left to it;
  one whose process has finished (its answer lost on the way), is gone, or is stuck
  writing to a client that reads nothing, is shut. An error for an answer (too many
  connections, a refused login) tells nothing of the processes: none is shut.

A server that gave no answer is taken for silent until a connection to it is answered
(a new one, a question, or an empty query sent on an idle one). Meanwhile a call failed
on a connection shut for the silence is not sent again on another, and an idle
connection is lent only once it answers an empty query within ``PING_SECONDS`` (``ping``;
an error is an answer). One left unanswered, or no new connection made within a call's
wait, shows the server frozen (not slow to accept logins): the store drops its idle
connections, and until a connection is answered calls wait at most a second for a new
one, and ``close`` gives up its writes.

Before a connection is shut it is looked at again: still on the same loan, still
waiting, and (over TCP on Linux) nothing received on it since the wait began; a
connection that has heard from the server meanwhile is left. Shutting its socket makes
the waiting call fail as on any broken connection (a ``StorageError``), and the pool
replaces the connection.

An idle connection the server ended (a restart, ``pg_terminate_backend``) holds its
last words unread: the pool's look at each idle connection before lending it polls
its socket (no round trip), and one with anything unread is closed and the next asked
at once, silent or not.

A live server slower to accept a login than ``PROBE_SECONDS`` (a lock held on the role
catalog) is taken for a stopped one: the waiting statement is shut, but its idle
connections answer the empty query, and the first that does ends the silence.
"""

from __future__ import annotations

import itertools
import os
import select
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus

__all__ = ["PING_SECONDS", "PROBE_SECONDS", "STALL_SECONDS", "Broken", "Frozen", "Watch"]

#: Seconds a connection waits for an answer before the server is asked about it; also
#: the least time between two questions about the same connection.
STALL_SECONDS = 10.0
#: Seconds the server has to answer that question.
PROBE_SECONDS = 10.0
#: Seconds an idle connection has to answer an empty query while the server is silent.
PING_SECONDS = 1.0

_ACTIVITY = "SELECT pid, state, wait_event FROM pg_stat_activity WHERE pid = ANY(%s)"
# struct tcp_info's tcpi_last_data_sent and tcpi_last_data_recv: milliseconds since.
_LAST_DATA_SENT = 44
_LAST_DATA_RECV = 52


class Frozen(BaseException):
    """Raised by the pool's check of a connection the frozen server left unanswered: a
    ``BaseException``, so psycopg_pool gives up lending at once instead of trying the
    next idle connection (which would wait as long)."""


class Broken(BaseException):
    """Raised by the pool's check of a connection it closed (broken, ended by the
    server, or left unanswered while another was answered): the store asks for the next
    at once, where psycopg_pool would back off a second first."""


@dataclass(frozen=True, slots=True)
class _Stall:
    conn: psycopg.Connection[Any]
    loan: int
    since: float  # monotonic time of the first look that found it waiting
    pid: int


class Watch:
    """Connections lent out by one store, and a thread that looks at them."""

    def __init__(self, conninfo: str, connect_kwargs: Mapping[str, Any]) -> None:
        self._conninfo = conninfo
        self._kwargs = dict(connect_kwargs)
        #: Whether the server's last word was no answer to a question (see the module's
        #: text); ``frozen``: and an idle connection's none to an empty query since.
        self.silent = False
        self.frozen = False
        # id(conn) -> its loan, for the connections shut because the server was silent.
        self._silenced: dict[int, int] = {}
        self._lock = threading.Lock()
        self._loans = itertools.count(1)
        # id(conn) -> (conn, times lent and not yet back, its latest loan): a connection
        # handed to a second borrower before the first's ``back`` stays watched.
        self._out: dict[int, tuple[psycopg.Connection[Any], int, int]] = {}
        # id(conn) -> when it was first seen waiting, in the run of looks that saw it so.
        self._waiting: dict[int, float] = {}
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def lend(self, conn: psycopg.Connection[Any]) -> None:
        with self._lock:
            _, count, _ = self._out.get(id(conn), (conn, 0, 0))
            self._out[id(conn)] = (conn, count + 1, next(self._loans))
            self._waiting.pop(id(conn), None)
            if self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(
                    target=self._run, daemon=True, name="memlane-pg-watch"
                )
                self._thread.start()

    def back(self, conn: psycopg.Connection[Any]) -> None:
        with self._lock:
            _, count, loan = self._out.get(id(conn), (conn, 1, 0))
            if count > 1:
                self._out[id(conn)] = (conn, count - 1, loan)
            else:
                self._out.pop(id(conn), None)
                self._waiting.pop(id(conn), None)
                self._silenced.pop(id(conn), None)

    def heard(self) -> None:
        """A connection to the server was answered: it is not silent."""
        with self._lock:
            self.silent = self.frozen = False

    def unreachable(self) -> None:
        """A new connection to the server was left unanswered for the whole connect
        timeout, where a live server answers at once: it is taken for frozen."""
        with self._lock:
            self.silent = self.frozen = True

    def unanswered(self) -> bool:
        """Something the silent server should have answered went unanswered (an empty
        query, or a new connection the pool made): whether it is now taken for frozen."""
        with self._lock:
            self.frozen = self.silent
            return self.frozen

    def check(self, conn: psycopg.Connection[Any], drop_idle: Callable[[], None]) -> None:
        """The pool's look at an idle connection before it lends it: while the server
        is taken for silent, the connection must answer an empty query. One that does
        not shows the server frozen: the other idle ones would wait as long, and are
        dropped (``drop_idle``), and the call fails at once (``Frozen`` leaves the
        pool's loop). A broken one is closed (``Broken``), and so is one the server
        ended (``_ended``), silent or not."""
        if not self.silent:
            if _ended(conn):
                conn.close()
                raise Broken
            return
        try:
            if self.ping(conn):
                return
        except psycopg.Error:
            conn.close()
            raise Broken from None
        conn.close()  # left waiting for the answer: the pool replaces it
        if not self.unanswered():  # answered meanwhile on another: not frozen
            raise Broken
        drop_idle()
        raise Frozen

    def ping(self, conn: psycopg.Connection[Any]) -> bool:
        """Whether ``conn`` (idle, not lent) answers an empty query within
        ``PING_SECONDS``. An error is an answer (the connection is broken, the server
        is not silent): it is raised. A connection left unanswered is waiting still: it
        must be closed, not used again."""
        pg = conn.pgconn
        deadline = time.monotonic() + PING_SECONDS
        try:
            pg.send_query(b"")
            while pg.flush():
                _wait_for(pg.socket, deadline, write=True)
            while True:  # each result, then the end; get_result would block while busy
                pg.consume_input()
                if pg.is_busy():
                    _wait_for(pg.socket, deadline)
                elif pg.get_result() is None:
                    self.heard()
                    return True
        except TimeoutError:
            return False
        except OSError as e:
            raise psycopg.OperationalError(str(e)) from e

    def silenced(self, conn: psycopg.Connection[Any]) -> bool:
        """Whether ``conn``, still lent, was shut because the server gave no answer: a
        call that failed on it is not sent again on another connection."""
        with self._lock:
            held = self._out.get(id(conn))
            return held is not None and self._silenced.get(id(conn)) == held[2]

    def close(self) -> None:
        self._stop.set()  # the thread ends at its next look, or after a question

    def _run(self) -> None:
        while not self._stop.wait(min(1.0, STALL_SECONDS / 4)):
            stalled = self._stalled(time.monotonic())
            if not stalled:
                continue
            answered, activity = _activity(self._conninfo, self._kwargs, [s.pid for s in stalled])
            if answered:
                self.heard()
            else:
                self.silent = True
            for stall in stalled:
                if not answered:
                    self._shut_if_still(stall, answered=False)
                elif activity is not None and _lost(activity, stall.pid):
                    self._shut_if_still(stall, answered=True)

    def _stalled(self, now: float) -> list[_Stall]:
        """The connections waiting for an answer since ``STALL_SECONDS`` ago; their
        clocks start again, so each is asked about at most once in that time."""
        out = []
        with self._lock:
            for key, (conn, _, loan) in self._out.items():
                if conn.closed or conn.pgconn.transaction_status != TransactionStatus.ACTIVE:
                    self._waiting.pop(key, None)
                    continue
                since = self._waiting.setdefault(key, now)
                if now - since >= STALL_SECONDS:
                    out.append(_Stall(conn, loan, since, conn.pgconn.backend_pid))
                    self._waiting[key] = now
        return out

    def _shut_if_still(self, stall: _Stall, answered: bool) -> None:
        """Shuts the connection's socket if it is still on the same loan, still waiting,
        and has received nothing since it began to (nor, when the server ``answered``
        of its process, sent anything lately: a statement slow to upload has its
        process waiting for the rest). The call waiting on it reads its end and fails
        as on any broken connection (the socket stays libpq's)."""
        conn = stall.conn
        with self._lock:
            held = self._out.get(id(conn))
            if held is None or held[2] != stall.loan:
                return
            try:
                if conn.pgconn.transaction_status != TransactionStatus.ACTIVE:
                    return
                with socket.socket(fileno=os.dup(conn.pgconn.socket)) as sock:
                    quiet = _quiet(sock)
                    if quiet is not None:
                        sent, received = quiet
                        if received < time.monotonic() - stall.since:
                            return  # heard from the server meanwhile
                        if answered and sent < STALL_SECONDS:
                            return
                    sock.shutdown(socket.SHUT_RDWR)
                if not answered:
                    self._silenced[id(conn)] = stall.loan
            except (OSError, psycopg.Error):
                pass  # closed meanwhile


_Activity = dict[int, tuple[str | None, str | None]]


def _activity(
    conninfo: str, kwargs: Mapping[str, Any], pids: list[int]
) -> tuple[bool, _Activity | None]:
    """Whether the server answered a new connection within ``PROBE_SECONDS``, and
    what it says its processes ``pids`` are doing (state, wait event): ``None`` if it
    answered with an error (or the connection was refused), which tells nothing."""
    answer: list[_Activity | None] = []
    opened: list[psycopg.Connection[Any]] = []  # the probe's, once connected

    def ask() -> None:
        try:
            timeout = max(2, int(PROBE_SECONDS) + 1)  # libpq's least is 2 s
            with psycopg.connect(conninfo, **{**kwargs, "connect_timeout": timeout}) as conn:
                opened.append(conn)
                rows = conn.execute(_ACTIVITY, (pids,)).fetchall()
                answer.append({pid: (state, event) for pid, state, event in rows})
        except psycopg.Error:  # refused, or an error it sent: nothing to go by
            answer.append(None)

    thread = threading.Thread(target=ask, daemon=True, name="memlane-pg-probe")
    thread.start()
    thread.join(PROBE_SECONDS)
    if thread.is_alive():
        for conn in opened:  # connected, then silent: end the probe too
            _shut(conn)
        return False, None
    return True, answer[0] if answer else None


def _lost(activity: _Activity, pid: int) -> bool:
    """Whether the server process ``pid`` is done with the statement its client waits
    for: gone, no longer active, or stuck sending its answer to a client that reads
    nothing (a state hidden from this role is taken for at work)."""
    if pid not in activity:
        return True
    state, event = activity[pid]
    if state is None:
        return False
    return state != "active" or event == "ClientWrite"


def _ended(conn: psycopg.Connection[Any]) -> bool:
    """Whether the server ended, or is ending, the idle connection ``conn``: a
    restarted server, or a process ended by ``pg_terminate_backend`` or
    ``idle_session_timeout``, sends each idle connection its last words (why, then the
    end of the stream, some milliseconds apart). A pooled connection listens to no
    channel and is sent nothing else unasked, so anything unread on it is its end, told
    by a poll without a round trip. Lent, such a connection failed the call."""
    try:
        fd = conn.pgconn.socket
    except psycopg.Error:  # closed
        return True
    poll = select.poll()
    poll.register(fd, select.POLLIN)
    return bool(poll.poll(0))


def _wait_for(fd: int, deadline: float, write: bool = False) -> None:
    """Waits until ``fd`` is readable (or writable) or ``deadline`` passes (``TimeoutError``)."""
    left = deadline - time.monotonic()
    poll = select.poll()  # not select.select: a descriptor may be past FD_SETSIZE
    poll.register(fd, select.POLLOUT if write else select.POLLIN)
    if left <= 0 or not poll.poll(left * 1000):
        raise TimeoutError


def _quiet(sock: socket.socket) -> tuple[float, float] | None:
    """Seconds since data was last sent and last received on a TCP socket, where
    Linux says; else None."""
    if sys.platform != "linux" or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return None
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
    if len(info) < _LAST_DATA_RECV + 4:
        return None
    sent: int = struct.unpack_from("I", info, _LAST_DATA_SENT)[0]
    received: int = struct.unpack_from("I", info, _LAST_DATA_RECV)[0]
    return sent / 1000.0, received / 1000.0


def _shut(conn: psycopg.Connection[Any]) -> None:
    try:
        with socket.socket(fileno=os.dup(conn.pgconn.socket)) as sock:
            sock.shutdown(socket.SHUT_RDWR)
    except (OSError, psycopg.Error):
        pass
