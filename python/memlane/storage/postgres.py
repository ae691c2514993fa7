"""A PostgreSQL database shared by many processes: the source of truth of a fleet's store.

Every table lives in one schema (``?schema=NAME`` in the URL, ``memlane`` by
default), created and migrated by memlane: versioned scripts
(``memlane.storage.pg_schema``) applied under an advisory lock, each recorded in
``migrations``, so concurrent first opens and reopens are safe. A connection bound to a
tenant (``?tenant=``) is refused unless row-level security binds its role, and never
migrates: the owner does.

The change log is the same as the embedded store's (see
``memlane.storage.base``; its statements are
``SQLStore``'s), with one more guarantee needed across
processes: a write transaction takes its sequence number by updating the
``seq`` row of ``meta`` first, and that row lock is held until commit, so
writers commit in sequence order. A reader that reads the counter and then the
rows above its last number can never skip a change that commits late with a
lower number. Each commit sends a ``NOTIFY``; ``PostgresStore.follow``
listens, and polls as a fallback when notifications are lost.

Rowids come from a counter row as contiguous blocks taken in autocommit (one
short statement), so they are unique across processes and never reused;
a rolled-back write leaves a gap, nothing more.

Connections come from a pool; connecting and reads retry transient failures;
an unreachable database raises ``StorageError``. The
password never appears in a message, a log line or a repr.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import psycopg
from psycopg_pool import ConnectionPool, PoolClosed, PoolTimeout

from memlane.errors import InvalidArgumentError, MemlaneError, StorageError, StoreClosedError
from memlane.schema import COLUMNS, Row
from memlane.storage import pg_schema
from memlane.storage.dialect import Columns, ErrorKind, Rows
from memlane.storage.pg_listen import POLL_SECONDS, Listener
from memlane.storage.pg_schema import SCHEMA_VERSION, database_identity, same_database
from memlane.storage.pg_target import PostgresTarget
from memlane.storage.pg_watch import Broken, Frozen, Watch
from memlane.storage.rowcache import RowCache
from memlane.storage.sql import TYPES, SQLStore

__all__ = ["POLL_SECONDS", "PostgresStore", "PostgresTarget"]

T = TypeVar("T")

#: Seconds to wait for a connection (also libpq's ``connect_timeout`` unless the URL sets it).
CONNECT_TIMEOUT = 10.0
_POOL_MAX = 8
#: How long close's writes wait for a pooled connection before they open their own.
_LAST_WAIT = 1.0
#: A call's wait for a connection while the server is frozen (one the pool makes then).
_FROZEN_WAIT = 1.0
# Reads and connects are retried this many times (reads: ``_backoff``; connects back off
# from 0.1 s).
_ATTEMPTS = 4
# Tombstones are kept this long after an index snapshot reflects them, so a process
# that was away (or a snapshot cache that old) can still replay the deletions.
_TOMBSTONE_DAYS = 7
# Rowids per query when reading rows by rowid.
_CHUNK = 4096

_ALL = ", ".join(COLUMNS)
# What the store makes of PostgreSQL's errors (by class; see psycopg.errors).
_KINDS: tuple[tuple[type[psycopg.Error], ErrorKind], ...] = (
    (psycopg.errors.UniqueViolation, "unique"),
    (psycopg.errors.InsufficientPrivilege, "refused"),
    (psycopg.DataError, "value"),
    # An index entry past about 2.7 kB: a long id behind a tenant's prefix, or imported.
    (psycopg.errors.ProgramLimitExceeded, "value"),
    (psycopg.errors.DiskFull, "full"),
    (psycopg.errors.DataCorrupted, "corrupt"),
    (psycopg.errors.IndexCorrupted, "corrupt"),
)


def _backoff(attempt: int) -> float:
    """Seconds before the try after ``attempt`` failed: none after the first, whose
    connection the server most likely ended after the pool's look (the next is looked
    at again), then from 0.2 s."""
    return 0.1 * 2**attempt if attempt else 0.0


class PostgresStore(SQLStore):
    """The database of a store in PostgreSQL, shared by any number of processes."""

    shared = True
    ENGINE = "PostgreSQL"
    _ERRORS = (psycopg.Error,)
    _RETURNING = True
    _FOR_UPDATE = " FOR UPDATE"
    _UNBOUNDED = "SET LOCAL idle_in_transaction_session_timeout = 0"
    # Other processes commit between the statements of a read; this one sees one state.
    _SNAPSHOT = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
    _GREATEST = "greatest"
    _TOMBSTONE_UPDATE = "seq = excluded.seq, at = now()"
    # Other processes may not have seen a deletion yet: only old tombstones go, and
    # ``forgotten`` tells a snapshot older than them to rebuild instead of replaying.
    _GC_TOMBSTONES = (
        (
            "WITH gone AS (DELETE FROM {p}tombstones WHERE seq <= ? "
            f"AND at < now() - interval '{_TOMBSTONE_DAYS} days' RETURNING seq) "
            "UPDATE {p}meta SET value = greatest(value::int8, "
            "(SELECT coalesce(max(seq), 0) FROM gone))::text WHERE key = 'forgotten'"
        ),
    )
    _COMMIT_FAILED = (
        "commit failed (if the connection was lost, the write may or may not have been stored)"
    )

    def __init__(self, url: str) -> None:
        self.target = PostgresTarget.parse(url)
        self.location = self.target.redacted
        self._accessed = []
        s = self.target.schema
        # Quoted, so a keyword ("user") works: lowercase already, it names the same schema.
        self._s = f'"{s}"'
        self._p = f"{self._s}."
        self._channel = f"{s}_changes"
        self._connect_kwargs: dict[str, Any] = {"autocommit": True, "application_name": "memlane"}
        if "connect_timeout" not in url:
            self._connect_kwargs["connect_timeout"] = int(CONNECT_TIMEOUT)
        self._listener: Listener | None = None
        self._closed = False
        self._last = False  # close's writes: a connection of their own if none is free
        self._crowded = False  # and one of them found none
        self._closer: int | None = None  # the thread whose close's writes those are
        self._spares: list[psycopg.Connection[Any]] = []
        self._missed = 0.0  # when a call last waited for a connection in vain, frozen
        self._identity: tuple[int | None, int, int] | None = None
        self._replaced = False
        self._cache = RowCache(self.target.row_cache)
        self._watch = Watch(self.target.conninfo, self._connect_kwargs)
        self._id_prefix = self.target.id_prefix
        if self.target.tenant is not None:
            self.tenant = ":".join(self.target.tenant)
        try:
            self._migrate()
        except BaseException:
            self._watch.close()
            raise
        self._pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
            self.target.conninfo,
            kwargs=self._connect_kwargs,
            min_size=1,
            max_size=_POOL_MAX,
            open=False,
            timeout=CONNECT_TIMEOUT,
            num_workers=1,
            name=f"memlane-{s}",
            configure=self._configure,
            check=lambda conn: self._watch.check(conn, self._pool.drain),
            # The pool's attempts to connect back off up to this; past it they start
            # again at once, so a server back after a long outage is found soon.
            reconnect_timeout=3 * CONNECT_TIMEOUT,
        )
        try:
            self._pool.open(wait=True, timeout=CONNECT_TIMEOUT)
        except PoolTimeout:
            self._pool.close()
            self._watch.close()
            raise StorageError(
                f"cannot reach the PostgreSQL database {self.location} "
                f"(no connection within {CONNECT_TIMEOUT:.0f} s)"
            ) from None
        try:
            # The snapshot cache's folder and owner: a copy of the database, or one
            # restored from a dump, has the same id in meta but is not the same database.
            assert self._identity is not None  # the pool's first connection noted it
            digest = hashlib.sha256(repr(self._identity).encode()).hexdigest()[:16]
            self.store_id = f"{self.get_meta('store_id')}-{digest}"
            # COPY is the fast way in, but PostgreSQL refuses it where row-level security
            # applies (any role but the owner): such roles insert from arrays instead.
            q = "SELECT row_security_active(%s::regclass)"
            self._copy: bool = not self._read(
                lambda c: c.execute(q, (f"{self._p}records",)).fetchone()[0]
            )
        except BaseException:
            self.close()
            raise

    def __repr__(self) -> str:
        return f"PostgresStore({self.location!r})"

    @property
    def snapshot_folder(self) -> str:
        """The folder of a cache_dir that holds this connection's index snapshots."""
        if self._id_prefix is None:
            return self.store_id
        return f"{self.store_id}-tenant-{hashlib.sha256(self._id_prefix.encode()).hexdigest()[:16]}"

    # -- connections -------------------------------------------------------------------

    def _scrub(self, text: str) -> str:
        return self.target.scrub(text)

    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        """Bounds a new connection's idle time in a transaction, confines it to the tenant,
        if any (row-level security), and checks it reached the store's database."""
        self._watch.lend(conn)  # a server frozen since the connect holds these statements
        try:
            pg_schema.bound_idle(conn)
            if self.target.tenant is not None:
                field, who = self.target.tenant
                conn.execute(
                    "SELECT set_config('memlane.tenant_field', %s, false), "
                    "set_config('memlane.tenant', %s, false)",
                    (field, who),
                )
            self._identify(conn)
            self._watch.heard()
        finally:
            self._watch.back(conn)

    def _identify(self, conn: psycopg.Connection[Any]) -> None:
        """Notes the database of the store's first connection; a later connection to
        another (the database dropped and created again, or restored, under the same
        name while the store was open) marks the store replaced: what it holds, its
        engine, row cache and change number, is another database's, so every later
        call raises (``_current``) instead of answering from it."""
        identity = database_identity(conn, f"{self._p}records")
        if identity is None:  # the migration's own connection, before it made the table
            return
        if self._identity is None:
            self._identity = identity
        elif not same_database(identity, self._identity):
            self._replaced = True

    def _current(self) -> None:
        if self._replaced:
            raise StorageError(
                f"the PostgreSQL database {self.location} was replaced while this store was "
                "open (dropped and created again, or restored from a dump): open the store "
                "again"
            )

    def rows_by_rowid(
        self, rowids: Sequence[int], embedding: bool = False, *, keep: bool = True
    ) -> dict[int, Row]:
        self._current()  # the row cache holds the replaced database's rows
        return super().rows_by_rowid(rowids, embedding, keep=keep)

    def _connect(self) -> psycopg.Connection[Any]:
        """A connection of its own (not pooled), retried while the server is unreachable."""
        for attempt in range(_ATTEMPTS):
            try:
                conn = psycopg.connect(self.target.conninfo, **self._connect_kwargs)
                self._configure(conn)
                return conn
            except psycopg.Error as e:
                if not isinstance(e, psycopg.OperationalError) or attempt == _ATTEMPTS - 1:
                    raise self._error("cannot connect to PostgreSQL", e) from self._cause(e)
            time.sleep(0.1 * 2**attempt)
        raise AssertionError  # pragma: no cover

    def _migrate(self) -> None:
        conn = self._connect()
        self._watch.lend(conn)
        try:
            # Every open but the first finds the schema current: nothing to lock or
            # create, so a role that may not create schemas can open the store.
            with self._failing("cannot prepare the memlane schema"):
                done = pg_schema.version(conn, self._s)
                if self.target.tenant is not None:
                    self._check_bound(conn, done)
                if done < SCHEMA_VERSION:
                    tenant = self.target.tenant is not None
                    pg_schema.migrate(conn, self._s, self.target.schema, tenant, self.location)
                    done = pg_schema.version(conn, self._s)
        finally:
            self._watch.back(conn)
            conn.close()
        if done > SCHEMA_VERSION:
            raise StorageError(
                f"{self.location} has schema version {done}; this memlane reads up "
                f"to {SCHEMA_VERSION} (upgrade memlane)"
            )

    def _check_bound(self, conn: psycopg.Connection[Any], done: int) -> None:
        """Refuses a tenant where row-level security does not bind the connection's role
        (the tables' owner, a superuser, a role with BYPASSRLS): it would read, index and
        cache every tenant's records, and see every tenant's entries. A store not made yet
        would be made by, and so belong to, this role."""
        q = "SELECT row_security_active(%s::regclass)"
        if done and conn.execute(q, (f"{self._s}.records",)).fetchone() == (True,):
            return
        role = conn.execute("SELECT current_user").fetchone()[0]  # type: ignore[index]
        why = "the store does not exist yet, and " if not done else ""
        raise InvalidArgumentError(
            f"?tenant={self.tenant} needs row-level security in force, but {why}it does not "
            f"bind the role {role!r} ({self.location}): the tables' owner, superusers and "
            "roles with BYPASSRLS see every tenant's records. Connect as a role of the "
            "tenants' own (docs/postgres.md), or without ?tenant="
        )

    def _refused(self, e: Exception) -> MemlaneError:
        if self.target.tenant is None:
            return super()._refused(e)
        field, who = self.target.tenant
        return InvalidArgumentError(
            f"this store is confined to the tenant {field}={who!r} (row-level security): "
            f"every record written must have {field}={who!r} (set it, or pass "
            f"default_scope={{{field!r}: {who!r}}})"
        )

    def _kind(self, e: Exception) -> ErrorKind:
        return next((kind for cls, kind in _KINDS if isinstance(e, cls)), None)

    def _getconn(self) -> psycopg.Connection[Any]:
        if self._closed:  # on close's own thread too, which may otherwise open its own
            raise StoreClosedError("the store is closed")
        self._current()
        # A frozen server gets a short wait for a new connection: the pool's own attempts
        # to connect go on, and the first it makes ends the silence.
        frozen = self._watch.frozen
        last = self._last and self._closer == threading.get_ident()  # close's own
        if last and frozen:
            raise StorageError(f"{self._silence}: close's writes are given up")
        wait = _FROZEN_WAIT if frozen else _LAST_WAIT if last else None
        if frozen and time.monotonic() - self._missed < _FROZEN_WAIT:
            wait = 0.0  # another call waited for one just now: queued calls fail in turn
        elif last and self._crowded:
            wait = 0.0  # a call of close's waited in vain: the rest take theirs at once
        try:
            conn = self._getconn_checked(wait)
        except Frozen:
            raise StorageError(self._silence) from None
        except Broken:
            raise StorageError(f"the connections to {self.location} keep breaking") from None
        except PoolTimeout as e:
            # No connection made within the wait either: a silent server is frozen.
            if frozen or self._watch.unanswered():
                self._missed = time.monotonic()
                raise StorageError(self._silence) from e
            if last:
                self._crowded = True
                return self._spare()
            raise StorageError(
                f"no connection to the PostgreSQL database {self.location} within "
                f"{CONNECT_TIMEOUT:.0f} s: it cannot be reached, or all {_POOL_MAX} of "
                "this store's connections are held (a read such as an export holds one)"
            ) from e
        except PoolClosed as e:
            if last:  # closed early, calls waiting on it failed: close's take their own
                return self._spare()
            raise StoreClosedError("the store is closed") from e
        self._watch.lend(conn)
        if self._replaced:  # found out by this very connection
            self._put(conn)
            self._current()
        return conn

    def _getconn_checked(self, wait: float | None) -> psycopg.Connection[Any]:
        """A connection from the pool, past those its check closed as broken."""
        for _ in range(2 * _POOL_MAX):
            try:
                return self._pool.getconn(timeout=wait)
            except Broken:
                continue  # closed, and replaced by the pool: the next is asked at once
        raise Broken

    @property
    def _silence(self) -> str:
        return (
            f"the PostgreSQL server of {self.location} stopped answering, and no connection "
            "to it has been answered since"
        )

    def closing(self, writes_here: bool) -> None:
        if writes_here:  # the one close that releases the store (Memory.close)
            self._closer, self._last = threading.get_ident(), True
        elif self._pool.get_stats().get("requests_waiting"):
            # Every connection is held (by long reads such as exports): the calls waiting
            # for one fail now instead of holding close up (one may hold the store's
            # lock), and close's writes take connections of their own.
            self._pool.close(timeout=1.0)

    def _spare(self) -> psycopg.Connection[Any]:
        """A connection outside the pool, for close's writes while reads hold the pool."""
        try:
            conn = psycopg.connect(self.target.conninfo, **self._connect_kwargs)
            self._configure(conn)
        except psycopg.OperationalError as e:
            if isinstance(e, psycopg.errors.ConnectionTimeout):
                self._watch.unreachable()  # close's other writes then give up at once
            raise StorageError(f"cannot reach the PostgreSQL database {self.location}") from e
        if self._replaced:  # found out by this very connection: never written to
            conn.close()
            self._current()
        self._spares.append(conn)
        self._watch.lend(conn)
        return conn

    def _put(self, conn: psycopg.Connection[Any]) -> None:
        try:  # putting back may roll back: watched until done
            if any(conn is c for c in self._spares):
                self._spares.remove(conn)
                conn.close()
            else:
                self._pool.putconn(conn)
        finally:
            self._watch.back(conn)

    @contextmanager
    def _reader(self, begin: str | None = None) -> Iterator[psycopg.Connection[Any]]:
        conn = self._getconn() if begin is None else self._begin(begin)
        try:
            yield conn
        finally:
            self._put(conn)

    def _run_read(self, fn: Callable[[Any], T]) -> T:
        """Runs ``fn`` on a pooled connection outside any transaction (a read, or a
        statement safe to repeat), again on another connection when the first broke."""
        for attempt in range(_ATTEMPTS):
            conn = self._getconn()
            try:
                return fn(conn)
            except psycopg.OperationalError:
                if attempt == _ATTEMPTS - 1 or self._watch.silenced(conn):
                    raise
            finally:
                self._put(conn)
            time.sleep(_backoff(attempt))
        raise AssertionError  # pragma: no cover

    def _begin(self, statement: str = "BEGIN") -> psycopg.Connection[Any]:
        for attempt in range(_ATTEMPTS):
            conn = self._getconn()
            try:
                conn.execute(statement)
                return conn
            except psycopg.Error as e:
                silenced = self._watch.silenced(conn)
                self._put(conn)
                # A connection that broke while idle sent nothing: a fresh one is safe.
                last = attempt == _ATTEMPTS - 1 or silenced
                if not isinstance(e, psycopg.OperationalError) or last:
                    raise
            time.sleep(_backoff(attempt))
        raise AssertionError  # pragma: no cover

    def _end(self, conn: Any) -> None:
        self._put(conn)

    def close(self) -> None:
        # Every step again at each call (each does nothing the second time): one close
        # interrupted (Ctrl-C) is finished by the next.
        if self._listener is not None:
            self._listener.stop()  # its wake-up is sent on a pooled connection
        self._closed = True
        # A worker connecting to a server that stopped answering is not waited for.
        self._pool.close(timeout=0.5 if self._watch.frozen else 5.0)
        if self._listener is not None:
            self._listener.join()
        self._watch.close()

    # -- binding -------------------------------------------------------------------------

    def _q(self, sql: str) -> str:
        return sql.replace("?", "%s")

    def _rows(self, conn: Any, sql: str, params: Any) -> list[Row]:
        with conn.cursor(binary=True) as cur:
            return self._given_rows(list(map(Row._make, cur.execute(sql, params).fetchall())))

    def _any(self, column: str, values: Sequence[Any], sql_type: str) -> Iterator[tuple[str, Any]]:
        for start in range(0, len(values), _CHUNK):
            yield f"{column} = ANY(?::{sql_type}[])", (list(values[start : start + _CHUNK]),)

    def _relation(self, columns: Columns, rows: Rows) -> tuple[str, tuple[Any, ...]]:
        arrays = ", ".join(f"?::{sql_type}[]" for _, sql_type in columns)
        names = ", ".join(name for name, _ in columns)
        return f"unnest({arrays}) AS j ({names})", tuple(
            [r[i] for r in rows] for i in range(len(columns))
        )

    def _many(self, conn: Any, table: str, columns: Columns, rows: Rows, tail: str = "") -> None:
        j, params = self._relation(columns, rows)
        names = ", ".join(name for name, _ in columns)
        conn.execute(self._q(f"INSERT INTO {table} ({names}) SELECT * FROM {j}{tail}"), params)

    def _each(self, conn: Any, sql: str, rows: Rows) -> None:
        with conn.cursor() as cur:
            cur.executemany(sql, rows)

    def _insert_rows(self, conn: Any, rows: Sequence[Row]) -> None:
        if not self._copy:
            super()._insert_rows(conn, rows)
            return
        with conn.cursor().copy(
            f"COPY {self._p}records ({_ALL}) FROM STDIN (FORMAT BINARY)"
        ) as copy:
            copy.set_types(TYPES)
            for row in rows:
                copy.write_row(row)

    # -- counters ------------------------------------------------------------------------

    def next_seq(self, conn: Any) -> int:
        # The row lock taken here is held until commit: writers commit in seq order.
        row = conn.execute(
            f"UPDATE {self._p}meta SET value = (value::int8 + 1)::text WHERE key = 'seq' "
            "RETURNING value::int8"
        ).fetchone()
        seq = int(row[0])
        conn.execute("SELECT pg_notify(%s, %s)", (self._channel, str(seq)))
        return seq

    def reserve_rowids(self, count: int) -> int:
        q = (
            f"UPDATE {self._p}meta SET value = (value::int8 + %s)::text "
            "WHERE key = 'next_rowid' RETURNING value::int8 - %s"
        )
        return int(self._read(lambda c: c.execute(q, (count, count)).fetchone()[0]))

    # -- upkeep --------------------------------------------------------------------------

    def follow(self, on_change: Callable[[], None]) -> None:
        if self._listener is None:
            self._listener = Listener(self, on_change, 2 * POLL_SECONDS + CONNECT_TIMEOUT)
