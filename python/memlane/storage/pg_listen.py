"""A PostgreSQL store's follower of other processes' commits: a thread on a connection
of its own that listens for the commits' notifications, and looks for changes at least
every ``POLL_SECONDS`` as well, since a notification can be lost (a connection dropped
and made again)."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

from memlane.errors import StorageError

if TYPE_CHECKING:
    from memlane.storage.postgres import PostgresStore

__all__ = ["POLL_SECONDS", "Listener"]

#: Without a notification, a process still looks for other writers' changes this often (s).
POLL_SECONDS = 1.0


class Listener:
    """A thread on a connection of its own: ``LISTEN``, and ``on_change`` at every
    notification and at least every ``POLL_SECONDS``."""

    def __init__(self, store: PostgresStore, on_change: Callable[[], None], join: float) -> None:
        self._store = store
        self._on_change = on_change
        self._join = join
        self._stopping = threading.Event()
        # close() wakes the thread with a notification only it listens to.
        self._wake_channel = f"memlane_stop_{uuid.uuid4().hex}"
        self._thread = threading.Thread(target=self._run, daemon=True, name="memlane-follow")
        self._thread.start()

    def _run(self) -> None:
        store = self._store
        conn: psycopg.Connection[Any] | None = None
        failures, since = 0, 0.0  # since: when the connection began to listen
        while not self._stopping.is_set():
            try:
                if conn is None:
                    conn = psycopg.connect(store.target.conninfo, **store._connect_kwargs)
                    store._watch.lend(conn)  # its statements may wait on a frozen server
                    store._identify(conn)  # a database replaced meanwhile is found here
                    conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(store._channel)))
                    conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self._wake_channel)))
                    store._watch.heard()
                    failures, since = 0, time.monotonic()
                else:
                    for _ in conn.notifies(timeout=POLL_SECONDS, stop_after=1):
                        pass
                if not self._stopping.is_set():
                    self._on_change()
            except psycopg.Error as e:
                # Lost connection: reconnect with backoff; the next round catches up. One
                # that listened for a while (a server ending idle sessions, a restart) is
                # made again at once: the backoff is for connecting again and again in vain.
                lost = conn is not None and failures == 0
                lost = lost and time.monotonic() - since >= POLL_SECONDS
                if conn is not None:
                    self._drop(conn)
                    conn = None
                failures += 1
                if failures == 3:
                    warnings.warn(
                        f"memlane: cannot follow changes of {store.location}: "
                        f"{store.target.scrub(str(e))}; retrying",
                        RuntimeWarning,
                        stacklevel=1,
                    )
                if not lost:
                    self._stopping.wait(min(POLL_SECONDS * failures, 10.0))
        if conn is not None:
            self._drop(conn)

    def _drop(self, conn: psycopg.Connection[Any]) -> None:
        self._store._watch.back(conn)
        with contextlib.suppress(psycopg.Error):
            conn.close()

    def stop(self) -> None:
        """Wakes the thread to end; ``join`` waits for it."""
        self._stopping.set()
        with contextlib.suppress(StorageError):
            self._store._read(
                lambda c: c.execute("SELECT pg_notify(%s, '')", (self._wake_channel,))
            )

    def join(self) -> None:
        """Waits for the thread, which a closed pool has woken if it was waiting for a
        connection (to follow a change while every pooled one was held)."""
        if threading.current_thread() is not self._thread:
            # On a frozen server the thread may be connecting: it ends on its own.
            self._thread.join(timeout=0.5 if self._store._watch.frozen else self._join)
