"""What a dialect of ``SQLStore`` supplies, and what the store
builds on it: driver errors mapped, write transactions, a tenant's ids, the meta table
and the tenant's own entries beside it.

A backend supplies what really differs:

- connections: ``Dialect._run_read`` (a read connection, retried where
  that is safe), ``Dialect._reader`` (one held for a block: ``Dialect.one_state``),
  ``Dialect._begin`` and ``Dialect._end`` (the write transaction's connection);
- binding: ``?`` in the statements here becomes the dialect's placeholder
  (``Dialect._q``); a list of values is bound by ``Dialect._any``
  (``IN (?, ?, ...)`` or ``= ANY(?)``), a batch of rows by ``Dialect._many``
  (inserts), ``Dialect._each`` (one statement per row) and
  ``Dialect._relation`` (a batch to join against);
- the change sequence and rowids (``Dialect.next_seq``,
  ``Dialect.reserve_rowids``), and how long tombstones are kept;
- which driver exceptions mean what (``Dialect._kind``).

Every driver exception that leaves a store is a ``MemlaneError``
chained to it: ``StorageError`` naming what failed, the
store and the driver's message; ``CorruptFileError`` for a
damaged database; ``InvalidArgumentError`` for an id stored
meanwhile or a value the database refuses; ``UnknownIdError``
for a row rewritten after another process deleted it.
"""

from __future__ import annotations

import abc
import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, ClassVar, Literal, TypeVar

from memlane.coerce import MAX_COUNT
from memlane.errors import CorruptFileError, InvalidArgumentError, MemlaneError, StorageError
from memlane.schema import Row
from memlane.storage.interrupts import Hold

__all__ = ["Columns", "Dialect", "ErrorKind", "Rows"]

T = TypeVar("T")

#: The connection of the read transaction each thread holds in ``Dialect.one_state``,
#: by the store's id (each thread's own dict).
_HELD = threading.local()

#: What a driver exception means, as far as the store can tell.
ErrorKind = Literal["unique", "refused", "value", "corrupt", "full"] | None

#: The columns of a batch of rows: (name, SQL type) pairs.
Columns = Sequence[tuple[str, str]]
Rows = Sequence[Sequence[Any]]


class Dialect(abc.ABC):
    """A database's connections, binding and errors, with the transactions, tenant ids
    and meta entries built on them; see the module docstring for what a dialect supplies."""

    shared: bool
    #: How messages name the store (never with a password).
    location: str
    #: "SQLite" or "PostgreSQL", for messages.
    ENGINE: ClassVar[str]
    #: The exceptions of the driver.
    _ERRORS: ClassVar[tuple[type[Exception], ...]]
    #: Put before a table's name ("" or a quoted schema and a dot).
    _p = ""
    #: Where a connection is confined to a tenant: what its ids are stored behind, so
    #: that ids are the tenant's own (see ``_stored_id``). None: stored as given.
    _id_prefix: str | None = None
    #: The tenant a connection is confined to (``FIELD:VALUE``), "" for none: the owner
    #: of the ``tenant_meta`` entries it writes.
    tenant = ""
    #: See ``Store.committed_seq``.
    committed_seq = 0

    # -- what a dialect supplies ---------------------------------------------------------

    @abc.abstractmethod
    def close(self) -> None: ...

    @abc.abstractmethod
    def _run_read(self, fn: Callable[[Any], T]) -> T:
        """``fn`` on a connection outside any transaction (driver errors propagate)."""

    @abc.abstractmethod
    def _reader(self, begin: str | None = None) -> AbstractContextManager[Any]:
        """A read connection, this thread's until the block ends: outside any
        transaction, or in the one ``begin`` began (sent again on another connection
        where the first broke, as ``_begin`` does)."""

    @abc.abstractmethod
    def _begin(self) -> Any:
        """A connection in a newly begun write transaction, for this thread alone until
        ``_end`` (driver errors propagate)."""

    @abc.abstractmethod
    def _end(self, conn: Any) -> None:
        """Gives back the connection of a finished transaction."""

    @abc.abstractmethod
    def _kind(self, e: Exception) -> ErrorKind: ...

    @abc.abstractmethod
    def _any(self, column: str, values: Sequence[Any], sql_type: str) -> Iterator[tuple[str, Any]]:
        """Conditions that ``column`` is one of ``values`` (in chunks), with their parameters."""

    @abc.abstractmethod
    def _many(self, conn: Any, table: str, columns: Columns, rows: Rows, tail: str = "") -> None:
        """Inserts ``rows`` into ``table`` (``tail``: an ``ON CONFLICT`` clause)."""

    @abc.abstractmethod
    def _each(self, conn: Any, sql: str, rows: Rows) -> None:
        """Runs ``sql`` once per row of parameters."""

    @abc.abstractmethod
    def _relation(self, columns: Columns, rows: Rows) -> tuple[str, tuple[Any, ...]]:
        """A ``FROM`` item ``j`` of these columns holding ``rows`` (no blobs), and its
        parameters."""

    @abc.abstractmethod
    def next_seq(self, conn: Any) -> int: ...

    @abc.abstractmethod
    def reserve_rowids(self, count: int) -> int: ...

    def _q(self, sql: str) -> str:
        """``sql`` with ``?`` placeholders in the dialect's style."""
        return sql

    def _scrub(self, text: str) -> str:
        """``text`` without secrets (a password)."""
        return text

    def checkpoint(self) -> None:
        return None

    def wal_bytes(self) -> int:
        return 0

    def follow(self, on_change: Callable[[], None]) -> None:
        return None

    # -- a tenant's ids ------------------------------------------------------------------
    # Ids are unique in the database, which row-level security does not hide: were a
    # tenant's ids stored as given, adding an id another tenant holds would fail and
    # so tell that it exists. A tenant's ids are stored behind its prefix instead; it
    # reads them back as it gave them, and other tenants' ids never meet its own.

    def _stored_id(self, record_id: str) -> str:
        return record_id if self._id_prefix is None else self._id_prefix + record_id

    def _given_id(self, stored: str) -> str:
        p = self._id_prefix
        return stored[len(p) :] if p is not None and stored.startswith(p) else stored

    def _id_forms(self, ids: Sequence[str]) -> list[str]:
        """What ``ids`` may be stored as: behind the tenant's prefix, or as given (a row
        that a connection bound to no tenant wrote into the tenant's scope)."""
        p = self._id_prefix
        return list(ids) if p is None else [f for i in ids for f in (p + i, i)]

    def _stored_rows(self, rows: Sequence[Row]) -> Sequence[Row]:
        if self._id_prefix is None:
            return rows
        return [r._replace(id=self._stored_id(r.id)) for r in rows]

    def _given_rows(self, rows: list[Row]) -> list[Row]:
        if self._id_prefix is None:
            return rows
        return [r._replace(id=self._given_id(r.id)) for r in rows]

    # -- errors --------------------------------------------------------------------------

    def _error(self, what: str, e: BaseException) -> MemlaneError:
        detail = self._scrub(str(e).strip()) or type(e).__name__
        where = f"{what} ({self.location})"
        kind = self._kind(e) if isinstance(e, Exception) else None
        if kind == "corrupt":
            return CorruptFileError(f"{where}: the database file is damaged ({detail})")
        if kind == "full":
            return StorageError(f"{where}: the disk is full ({detail})")
        return StorageError(f"{where}: {detail}")

    def _cause(self, e: BaseException) -> BaseException | None:
        """What an error raised for ``e`` is chained to: ``e``, unless its message holds a
        secret (a traceback would print it)."""
        return e if self._scrub(str(e)) == str(e) else None

    @contextmanager
    def _failing(self, what: str) -> Iterator[None]:
        """Raises a driver exception as the error of ``what``."""
        try:
            yield
        except self._ERRORS as e:
            raise self._error(what, e) from self._cause(e)

    def _read(self, fn: Callable[[Any], T]) -> T:
        conn = getattr(_HELD, "conns", {}).get(id(self))
        try:
            return self._run_read(fn) if conn is None else fn(conn)
        except self._ERRORS as e:
            raise self._error(f"{self.ENGINE} query failed", e) from self._cause(e)

    #: Begins a read transaction that sees one state of the database throughout.
    _SNAPSHOT: ClassVar[str] = "BEGIN"

    @contextmanager
    def one_state(self) -> Iterator[None]:
        """The reads of this thread in the block (``_read``) see one state of the
        database: one read transaction on one connection (``_SNAPSHOT``), which does not
        hold writers back (SQLite's WAL; PostgreSQL's REPEATABLE READ, READ ONLY). An
        export reads its pages in it, so a record rewritten meanwhile is met once."""
        held: dict[int, Any] = _HELD.__dict__.setdefault("conns", {})
        if id(self) in held:
            yield
            return
        with contextlib.ExitStack() as stack:
            with self._failing(f"{self.ENGINE} query failed"):
                conn = stack.enter_context(self._reader(self._SNAPSHOT))
            stack.callback(self._rollback, conn)  # a read: nothing to commit
            held[id(self)] = conn
            stack.callback(held.pop, id(self))
            yield

    def _refused(self, e: Exception) -> MemlaneError:
        return self._error(f"{self.ENGINE} refused the write", e)

    @contextmanager
    def _refusals(self) -> Iterator[None]:
        """Raises what a write's rows caused as the caller's error; leaves any other driver
        exception to the transaction."""
        try:
            yield
        except self._ERRORS as e:
            kind = self._kind(e)
            if kind == "unique":
                meanwhile = " (another process wrote them meanwhile)" if self.shared else ""
                raise InvalidArgumentError(
                    f"id(s) already stored{meanwhile}; use update() to change a record"
                ) from self._cause(e)
            if kind == "refused":
                raise self._refused(e) from self._cause(e)
            if kind == "value":
                # PostgreSQL's first line names the problem; its hints are for DBAs.
                said = getattr(getattr(e, "diag", None), "message_primary", None) or str(e)
                raise InvalidArgumentError(
                    f"{self.ENGINE} refused a value: {self._scrub(said.strip())}"
                ) from self._cause(e)
            raise

    # -- transactions --------------------------------------------------------------------

    #: Said of a failed commit.
    _COMMIT_FAILED: ClassVar[str] = "commit failed, nothing was stored"

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        """One write transaction: committed (durably) on exit, rolled back on an exception.
        An embedded store holds a Ctrl-C from its BEGIN until the code that rolls it back
        is in force, and from its COMMIT until the outcome is recorded (``interrupts``;
        a server's BEGIN and COMMIT may wait on the network, and its follower applies
        a commit either way)."""
        with self._failing("cannot start a transaction"):
            conn = self._begin()
        hold = Hold(active=False)
        try:
            try:
                self._begun()  # a Ctrl-C held since the BEGIN is raised here: rolled back
                yield conn
                hold = Hold(self._HOLDS)  # one raised as it begins is rolled back too
            except self._ERRORS as e:
                self._abort(conn)
                raise self._error("write failed, nothing was stored", e) from self._cause(e)
            except BaseException:
                self._abort(conn)
                raise
            try:
                self._before_commit(conn)
                conn.execute("COMMIT")
            except self._ERRORS as e:
                self._abort(conn)
                raise self._error(self._COMMIT_FAILED, e) from self._cause(e)
            except BaseException:
                # Raised once the COMMIT returned (another signal, MemoryError): what it
                # wrote may be stored, and taken for rolled back the files beside it
                # would be reused.
                if self._went_through(conn):
                    self._committed()
                else:
                    self._abort(conn)
                raise
            self._committed()
        finally:
            self._end(conn)
            hold.end()  # a Ctrl-C held since the COMMIT is raised here, its outcome kept

    #: Whether a Ctrl-C is held over the BEGIN and the COMMIT.
    _HOLDS = False
    #: The hold that a dialect's ``_begin`` took, if any (its lock's holder alone reads it).
    _begin_hold: Hold | None = None

    def _begun(self) -> None:
        """Ends the hold ``_begin`` took, if it took one."""
        hold, self._begin_hold = self._begin_hold, None
        if hold is not None:
            hold.end()

    def _went_through(self, conn: Any) -> bool:
        """Whether the transaction of ``conn``, whose commit was interrupted, committed:
        unknown here (PostgreSQL's follower applies it either way, as another's)."""
        return False

    @abc.abstractmethod
    def _before_commit(self, conn: Any) -> None:
        """What must be durable before a transaction commits (the files beside an
        embedded database: ``SQLiteStore``)."""

    @abc.abstractmethod
    def _committed(self) -> None:
        """After a commit."""

    @abc.abstractmethod
    def _rolled_back(self) -> None:
        """After a rollback."""

    def _abort(self, conn: Any) -> None:
        """Rolls back the write transaction."""
        self._rollback(conn)
        self._rolled_back()

    def _rollback(self, conn: Any) -> None:
        # A connection that broke has no transaction left to roll back.
        with contextlib.suppress(*self._ERRORS):
            conn.execute("ROLLBACK")

    # -- meta and counters ---------------------------------------------------------------

    def get_meta(self, key: str, conn: Any = None) -> str | None:
        q = self._q(f"SELECT value FROM {self._p}meta WHERE key = ?")
        if conn is None:
            row = self._read(lambda c: c.execute(q, (key,)).fetchone())
        else:
            row = conn.execute(q, (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, conn: Any, key: str, value: str) -> None:
        conn.execute(
            self._q(
                f"INSERT INTO {self._p}meta (key, value) VALUES (?, ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value"
            ),
            (key, value),
        )

    def seq(self) -> int:
        return self.meta_count("seq")

    def meta_count(self, key: str, conn: Any = None) -> int:
        """The whole number ``meta.key`` holds (0 where there is none), checked: one a
        flipped bit or a bad restore changed is the damaged database's error, not a
        number taken as it is (it reached callers as a raw ``ValueError``, or as a
        refusal of an argument they never gave)."""
        value = self.get_meta(key, conn)
        return 0 if value is None else self.stored_count(f"meta.{key}", value)

    def stored_count(self, what: str, value: object) -> int:
        """``value``, what the database holds as ``what``, as a whole number from 0 to
        2**63 - 1 (what both databases store), or ``CorruptFileError`` naming it."""
        if isinstance(value, int) and not isinstance(value, bool):
            number: int | None = value
        elif isinstance(value, str) and value.isascii() and value.isdigit():
            number = int(value)
        else:
            number = None
        if number is None or not 0 <= number <= MAX_COUNT:
            raise CorruptFileError(
                f"reading {what} ({self.location}): {repr(value)[:80]} is not what memlane wrote: "
                "the database file is damaged"
            )
        return number

    # -- entries of the connection's tenant ----------------------------------------------
    # Kept apart from meta, whose store-wide state every connection reads: the database
    # shows a tenant's connection only its own (row-level security), and every statement
    # names the tenant, so a connection bound to none has entries of its own too.

    def set_tenant_meta(self, conn: Any, key: str, value: str) -> None:
        conn.execute(
            self._q(
                f"INSERT INTO {self._p}tenant_meta (tenant, key, value) VALUES (?, ?, ?) "
                "ON CONFLICT (tenant, key) DO UPDATE SET value = excluded.value"
            ),
            (self.tenant, key, value),
        )

    def tenant_meta_items(self, prefix: str) -> list[tuple[str, str]]:
        """The tenant's entries whose key starts with ``prefix`` (not empty), in key order."""
        # A key range, not LIKE: no escaping, and the primary key's index answers it (the
        # key's collation compares code points, on both databases).
        high = _above(prefix)
        q = self._q(
            f"SELECT key, value FROM {self._p}tenant_meta WHERE tenant = ? AND key >= ?"
            + ("" if high is None else " AND key < ?")
            + " ORDER BY key"
        )
        params = (self.tenant, prefix) if high is None else (self.tenant, prefix, high)
        rows = self._read(lambda c: [(str(r[0]), str(r[1])) for r in c.execute(q, params)])
        return rows if high is not None else [r for r in rows if r[0].startswith(prefix)]

    def add_tenant_meta(self, conn: Any, key: str, value: str) -> bool:
        """Sets ``key`` to ``value`` if it holds nothing now: one statement, so of two
        writers only one adds it."""
        cur = conn.execute(
            self._q(
                f"INSERT INTO {self._p}tenant_meta (tenant, key, value) VALUES (?, ?, ?) "
                "ON CONFLICT (tenant, key) DO NOTHING"
            ),
            (self.tenant, key, value),
        )
        return bool(cur.rowcount == 1)

    def swap_tenant_meta(self, conn: Any, key: str, old: str, new: str) -> bool:
        """Sets ``key`` to ``new`` if it holds ``old`` now: one statement, so of two
        writers that read ``old`` only one swaps (PostgreSQL re-reads the row it waited for)."""
        cur = conn.execute(
            self._q(
                f"UPDATE {self._p}tenant_meta SET value = ? "
                "WHERE tenant = ? AND key = ? AND value = ?"
            ),
            (new, self.tenant, key, old),
        )
        return bool(cur.rowcount == 1)

    def delete_tenant_meta(self, conn: Any, key: str) -> None:
        conn.execute(
            self._q(f"DELETE FROM {self._p}tenant_meta WHERE tenant = ? AND key = ?"),
            (self.tenant, key),
        )

    def trim_tenant_meta(self, conn: Any, prefix: str, keep: int) -> None:
        """Deletes the tenant's entries under ``prefix`` (not empty) but the ``keep`` last
        in key order: one statement in the caller's transaction, reading no value."""
        high = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        in_range = "tenant = ? AND key >= ? AND key < ?"
        conn.execute(
            self._q(
                f"DELETE FROM {self._p}tenant_meta WHERE {in_range} AND key < ("
                f"SELECT key FROM {self._p}tenant_meta WHERE {in_range} "
                "ORDER BY key DESC LIMIT 1 OFFSET ?)"
            ),
            (self.tenant, prefix, high, self.tenant, prefix, high, keep - 1),
        )


def _above(prefix: str) -> str | None:
    """The least key above every key that starts with ``prefix`` (None: there is none,
    the prefix being the last code point over and over): its last code point that is not
    the last one Unicode has, one up, past the surrogates no database stores."""
    head = prefix.rstrip("\U0010ffff")
    if not head:
        return None
    up = ord(head[-1]) + 1
    return head[:-1] + chr(0xE000 if up == 0xD800 else up)
