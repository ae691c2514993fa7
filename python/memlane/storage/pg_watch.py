"""Statements waiting on a PostgreSQL server that stopped answering.

A server that stops answering without closing its connections (a stopped postmaster, a
frozen VM, a network that drops packets past a stateful firewall) leaves a statement
waiting for good: the client's kernel still acknowledges what the client sends, so TCP
never reports the server gone, libpq sets no deadline on an answer, and the server's
own timeouts (``statement_timeout``) cannot run on a server that does not run.

``Watch`` follows the connections a store has lent out. One found waiting for an answer
(libpq's transaction status ``ACTIVE``) at every look for ``STALL_SECONDS`` is the cue
to ask whether the server answers at all: a new connection's ``SELECT 1``, given
``PROBE_SECONDS``. A server that answers, even with an error, is working on the
statement (a long one, or one waiting for a lock, which the server bounds itself), and
is left to it. One that does not answer has the waiting connections' sockets shut down:
each waiting call then fails as on a broken connection (a ``StorageError``), and the
pool replaces the connection.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Mapping
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus

__all__ = ["PROBE_SECONDS", "STALL_SECONDS", "Watch"]

#: Seconds a connection waits for an answer before the server is asked whether it
#: answers at all; also the least time between two such questions.
STALL_SECONDS = 10.0
#: Seconds the server has to answer that question.
PROBE_SECONDS = 5.0


class Watch:
    """Connections lent out by one store, and a thread that looks at them while any
    is out."""

    def __init__(self, conninfo: str, connect_kwargs: Mapping[str, Any]) -> None:
        self._conninfo = conninfo
        self._kwargs = dict(connect_kwargs)
        self._lock = threading.Lock()
        # id(conn) -> (conn, times lent and not yet back): a connection handed to a
        # second borrower before the first's ``back`` stays watched.
        self._out: dict[int, tuple[psycopg.Connection[Any], int]] = {}
        # id(conn) -> when it was first seen waiting, in the run of looks that saw it so.
        self._waiting: dict[int, float] = {}
        self._probe: threading.Thread | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def lend(self, conn: psycopg.Connection[Any]) -> None:
        with self._lock:
            _, count = self._out.get(id(conn), (conn, 0))
            self._out[id(conn)] = (conn, count + 1)
            if self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(
                    target=self._run, daemon=True, name="memlane-pg-watch"
                )
                self._thread.start()

    def back(self, conn: psycopg.Connection[Any]) -> None:
        with self._lock:
            _, count = self._out.get(id(conn), (conn, 1))
            if count > 1:
                self._out[id(conn)] = (conn, count - 1)
            else:
                self._out.pop(id(conn), None)
                self._waiting.pop(id(conn), None)

    def close(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(min(1.0, STALL_SECONDS / 4)):
            stalled = self._stalled(time.monotonic())
            if stalled and not self._answers():
                for conn in stalled:
                    _shut(conn)

    def _stalled(self, now: float) -> list[psycopg.Connection[Any]]:
        """The connections waiting for an answer since ``STALL_SECONDS`` ago; their
        clocks start again, so the server is asked at most once in that time."""
        out = []
        with self._lock:
            for key, (conn, _) in self._out.items():
                if conn.closed or conn.pgconn.transaction_status != TransactionStatus.ACTIVE:
                    self._waiting.pop(key, None)
                    continue
                since = self._waiting.setdefault(key, now)
                if now - since >= STALL_SECONDS:
                    out.append(conn)
                    self._waiting[key] = now
        return out

    def _answers(self) -> bool:
        """Whether the server answers a new connection within ``PROBE_SECONDS``; an
        error it sends (too many connections, a refused login) is an answer. A probe
        still waiting from before is a server that does not."""
        if self._probe is not None and self._probe.is_alive():
            return False
        answered = threading.Event()

        def probe() -> None:
            kwargs = {**self._kwargs, "connect_timeout": max(2, int(PROBE_SECONDS) + 1)}
            try:
                with psycopg.connect(self._conninfo, **kwargs) as conn:
                    conn.execute("SELECT 1")
                answered.set()
            except psycopg.Error as e:
                if e.sqlstate is not None:  # the server's own error
                    answered.set()

        self._probe = threading.Thread(target=probe, daemon=True, name="memlane-pg-probe")
        self._probe.start()
        self._probe.join(PROBE_SECONDS)
        return answered.is_set()


def _shut(conn: psycopg.Connection[Any]) -> None:
    """Shuts the connection's socket down: the call waiting on it reads its end, and
    fails as on any broken connection. The socket stays open (libpq owns it)."""
    try:
        if conn.pgconn.transaction_status != TransactionStatus.ACTIVE:
            return  # answered meanwhile, or closed (its descriptor may be another's now)
        with socket.socket(fileno=os.dup(conn.pgconn.socket)) as sock:
            sock.shutdown(socket.SHUT_RDWR)
    except (OSError, psycopg.Error):
        pass  # closed meanwhile
