"""A PostgreSQL database shared by many processes: the source of truth of a fleet's store.

Every table lives in one schema (``?schema=NAME`` in the URL, ``memlane`` by
default), created and migrated by memlane: versioned scripts applied under an
advisory lock, each recorded in ``migrations``, so concurrent first opens and
reopens are safe.

The change log is the same as the embedded store's (see
:mod:`memlane.storage.base`), with one more guarantee needed across
processes: a write transaction takes its sequence number by updating the
``seq`` row of ``meta`` first, and that row lock is held until commit, so
writers commit in sequence order. A reader that reads the counter and then the
rows above its last number can never skip a change that commits late with a
lower number. Each commit sends a ``NOTIFY``; :meth:`PostgresStore.follow`
listens, and polls as a fallback when notifications are lost.

Rowids come from a counter row as contiguous blocks taken in autocommit (one
short statement), so they are unique across processes and never reused;
a rolled-back write leaves a gap, nothing more.

Connections come from a pool; connecting and reads retry transient failures;
an unreachable database raises :class:`~memlane.errors.StorageError`. The
password never appears in a message, a log line or a repr.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
import urllib.parse
import uuid
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import psycopg
from psycopg import sql
from psycopg_pool import ConnectionPool, PoolClosed, PoolTimeout

from memlane.errors import InvalidArgumentError, MemlaneError, StorageError, UnknownIdError
from memlane.records import SCOPE_FIELDS
from memlane.storage.base import COLUMNS, Row
from memlane.storage.rowcache import RowCache

__all__ = ["POLL_SECONDS", "PostgresStore", "PostgresTarget"]

T = TypeVar("T")

_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,47}")
DEFAULT_SCHEMA = "memlane"
#: Records kept in process for reading search hits (``?row_cache=N`` in the URL; 0: none).
DEFAULT_ROW_CACHE = 200_000
#: Seconds to wait for a connection (also libpq's ``connect_timeout`` unless the URL sets it).
CONNECT_TIMEOUT = 10.0
_POOL_MAX = 8
# Reads and connects are retried this many times, backing off from 0.1 s.
_ATTEMPTS = 4
#: Without a notification, a process still looks for other writers' changes this often (s).
POLL_SECONDS = 1.0
# Tombstones are kept this long after an index snapshot reflects them, so a process
# that was away (or a snapshot cache that old) can still replay the deletions.
_TOMBSTONE_DAYS = 7
# Rowids per query when reading rows by rowid.
_CHUNK = 4096

_ALL = ", ".join(COLUMNS)
_SEQ = COLUMNS.index("seq")
_NO_EMBEDDING = ", ".join("NULL" if c == "embedding" else c for c in COLUMNS)
# The PostgreSQL type of each of COLUMNS (binary COPY and array inserts name them).
_TYPES = [
    "int8",
    *["text"] * 10,
    "float8",
    "int2",
    "int2",
    "text",
    "float8",
    "float8",
    "float8",
    "int8",
    "text",
    "bytea",
    "int8",
    "int8",
]
assert len(_TYPES) == len(COLUMNS)
_INSERT_ARRAYS = (
    f"INSERT INTO {{s}}.records ({_ALL}) SELECT * FROM unnest("
    + ", ".join(f"%s::{t}[]" for t in _TYPES)
    + ")"
)

# Each entry migrates the schema from version i to i + 1; "{s}" is the schema.
_MIGRATIONS = (
    """
    CREATE TABLE {s}.meta (key text PRIMARY KEY, value text NOT NULL);
    INSERT INTO {s}.meta (key, value) VALUES
        ('seq', '0'), ('next_rowid', '1'), ('forgotten', '0'),
        ('store_id', gen_random_uuid()::text);
    CREATE TABLE {s}.records (
        rowid bigint PRIMARY KEY,
        id text NOT NULL UNIQUE,
        text text NOT NULL,
        tbl text NOT NULL,
        type text NOT NULL,
        agent_id text, user_id text, room_id text, world_id text, session_id text,
        namespace text,
        importance float8 NOT NULL,
        evergreen int2 NOT NULL,
        uniq int2 NOT NULL,
        metadata text NOT NULL,
        created_at float8 NOT NULL,
        updated_at float8 NOT NULL,
        last_accessed_at float8 NOT NULL,
        access_count int8 NOT NULL,
        content_hash text NOT NULL,
        embedding bytea,
        seq int8 NOT NULL,
        content_seq int8 NOT NULL
    );
    CREATE INDEX records_seq ON {s}.records (seq);
    CREATE INDEX records_hash ON {s}.records (content_hash);
    CREATE TABLE {s}.recent (key text PRIMARY KEY, id text NOT NULL, at float8 NOT NULL);
    CREATE INDEX recent_at ON {s}.recent (at);
    CREATE INDEX recent_id ON {s}.recent (id);
    CREATE TABLE {s}.tombstones (
        rowid bigint PRIMARY KEY,
        seq int8 NOT NULL,
        at timestamptz NOT NULL DEFAULT now()
    );
    CREATE INDEX tombstones_seq ON {s}.tombstones (seq);
    """,
    # Row-level security: a connection that sets memlane.tenant (see ?tenant=) sees and
    # writes only the records whose scope field memlane.tenant_field equals it; one
    # that does not set it sees everything. It binds every role but the tables' owner
    # and superusers, so workers confined to a tenant log in as a role of their own.
    """
    ALTER TABLE {s}.records ENABLE ROW LEVEL SECURITY;
    CREATE POLICY tenant ON {s}.records USING (
        coalesce(current_setting('memlane.tenant', true), '') = ''
        OR CASE current_setting('memlane.tenant_field', true)
            WHEN 'agent_id' THEN agent_id
            WHEN 'user_id' THEN user_id
            WHEN 'room_id' THEN room_id
            WHEN 'world_id' THEN world_id
            WHEN 'session_id' THEN session_id
            WHEN 'namespace' THEN namespace
        END = current_setting('memlane.tenant', true)
    );
    """,
)
SCHEMA_VERSION = len(_MIGRATIONS)


@dataclass(frozen=True, slots=True)
class PostgresTarget:
    """A parsed store URL: what libpq gets, the schema, and a printable form."""

    conninfo: str
    schema: str
    row_cache: int
    #: (scope field, value) the database confines this connection to, or None.
    tenant: tuple[str, str] | None
    redacted: str
    secrets: tuple[str, ...]

    @classmethod
    def parse(cls, url: str) -> PostgresTarget:
        try:
            parts = urllib.parse.urlsplit(url)
            parts.port  # noqa: B018 - raises on a malformed port
        except ValueError as e:
            raise InvalidArgumentError(f"not a valid PostgreSQL URL: {e}") from None
        secrets = [] if parts.password is None else [urllib.parse.unquote(parts.password)]
        schema = DEFAULT_SCHEMA
        row_cache = str(DEFAULT_ROW_CACHE)
        tenant: tuple[str, str] | None = None
        keep: list[tuple[str, str]] = []
        # schema, row_cache and tenant are memlane's; everything else is libpq's.
        for key, value in urllib.parse.parse_qsl(parts.query, keep_blank_values=True):
            if key == "schema":
                schema = value
            elif key == "row_cache":
                row_cache = value
            elif key == "tenant":
                field, sep, who = value.partition(":")
                if not sep or field not in SCOPE_FIELDS or not who:
                    raise InvalidArgumentError(
                        f"tenant must be FIELD:VALUE with FIELD one of {list(SCOPE_FIELDS)}, "
                        f"got {value!r}"
                    )
                tenant = (field, who)
            else:
                if key == "password":
                    secrets.append(value)
                keep.append((key, value))
        if not _SCHEMA_NAME.fullmatch(schema):
            raise InvalidArgumentError(
                f"schema must be a lowercase identifier of at most 48 characters "
                f"([a-z_][a-z0-9_]*), got {schema!r}"
            )
        if not row_cache.isdigit():
            raise InvalidArgumentError(f"row_cache must be an int >= 0, got {row_cache!r}")
        # Rebuilt by hand: urlunsplit would turn "postgresql:///db" into "postgresql:/db".
        base = f"{parts.scheme}://{parts.netloc}{parts.path}"
        conninfo = base + ("?" + urllib.parse.urlencode(keep) if keep else "")
        netloc = parts.netloc.rpartition("@")[2]
        if parts.username is not None:
            netloc = f"{parts.username}{':***' if parts.password is not None else ''}@{netloc}"
        shown = [(k, "***" if k == "password" else v) for k, v in keep]
        if tenant is not None:
            shown.append(("tenant", ":".join(tenant)))
        query = urllib.parse.urlencode([*shown, ("schema", schema)], safe="*/:")
        redacted = f"postgresql://{netloc}{parts.path}?{query}"
        return cls(
            conninfo, schema, int(row_cache), tenant, redacted, tuple(s for s in secrets if s)
        )

    def scrub(self, text: str) -> str:
        """``text`` with the passwords (plain or URL-quoted) masked."""
        for secret in self.secrets:
            for form in {secret, urllib.parse.quote(secret, safe="")}:
                text = text.replace(form, "***")
        return text

    def __repr__(self) -> str:
        return f"PostgresTarget({self.redacted!r})"


class PostgresStore:
    """The database of a store in PostgreSQL, shared by any number of processes."""

    shared = True

    def __init__(self, url: str) -> None:
        self.target = PostgresTarget.parse(url)
        self.location = self.target.redacted
        s = self.target.schema
        # Quoted, so a name that is also a keyword ("user") works; it is lowercase
        # already, so quoting does not change which schema it names.
        self._s = f'"{s}"'
        self._channel = f"{s}_changes"
        self._connect_kwargs: dict[str, Any] = {"autocommit": True, "application_name": "memlane"}
        if "connect_timeout" not in url:
            self._connect_kwargs["connect_timeout"] = int(CONNECT_TIMEOUT)
        self._listener: _Listener | None = None
        self._closed = False
        self._cache = RowCache(self.target.row_cache)
        self._migrate()
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
        )
        try:
            self._pool.open(wait=True, timeout=CONNECT_TIMEOUT)
        except PoolTimeout:
            self._pool.close()
            raise StorageError(
                f"cannot reach the PostgreSQL database {self.location} "
                f"(no connection within {CONNECT_TIMEOUT:.0f} s)"
            ) from None
        self.store_id = str(self.get_meta("store_id"))
        # COPY is the fast way in, but PostgreSQL refuses it where row-level security
        # applies (any role but the owner): such roles insert from arrays instead.
        q = "SELECT row_security_active(%s::regclass)"
        self._copy = not self._retrying(lambda c: c.execute(q, (f"{self._s}.records",)).fetchone())[
            0
        ]  # type: ignore[index]

    def __repr__(self) -> str:
        return f"PostgresStore({self.location!r})"

    # -- connections -------------------------------------------------------------------

    def _error(self, what: str, e: BaseException) -> StorageError:
        detail = self.target.scrub(str(e).strip()) or type(e).__name__
        return StorageError(f"{what} ({self.location}): {detail}")

    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        """Confines a new connection to the tenant, if any (row-level security)."""
        if self.target.tenant is not None:
            field, who = self.target.tenant
            conn.execute(
                "SELECT set_config('memlane.tenant_field', %s, false), "
                "set_config('memlane.tenant', %s, false)",
                (field, who),
            )

    def _connect(self) -> psycopg.Connection[Any]:
        """A connection of its own (not pooled), retried while the server is unreachable."""
        for attempt in range(_ATTEMPTS):
            try:
                conn = psycopg.connect(self.target.conninfo, **self._connect_kwargs)
                self._configure(conn)
                return conn
            except psycopg.OperationalError as e:
                if attempt == _ATTEMPTS - 1:
                    raise self._error("cannot connect to PostgreSQL", e) from None
                time.sleep(0.1 * 2**attempt)
            except psycopg.Error as e:
                raise self._error("cannot connect to PostgreSQL", e) from None
        raise AssertionError  # pragma: no cover

    def _version(self, conn: psycopg.Connection[Any]) -> int:
        if conn.execute("SELECT to_regclass(%s)", (f"{self._s}.migrations",)).fetchone() == (None,):
            return 0
        row = conn.execute(f"SELECT coalesce(max(version), 0) FROM {self._s}.migrations")
        return int(row.fetchone()[0])  # type: ignore[index]

    def _migrate(self) -> None:
        s = self._s
        conn = self._connect()
        try:
            # Every open but the first finds the schema current: nothing to lock or
            # create, so a role that may not create schemas can open the store.
            done = self._version(conn)
            if done < SCHEMA_VERSION:
                with conn.transaction():
                    conn.execute(
                        "SELECT pg_advisory_xact_lock(hashtext(%s))",
                        (f"memlane:{self.target.schema}",),
                    )
                    conn.execute(f"CREATE SCHEMA IF NOT EXISTS {s}")
                    conn.execute(
                        f"CREATE TABLE IF NOT EXISTS {s}.migrations (version int PRIMARY KEY, "
                        "applied_at timestamptz NOT NULL DEFAULT now())"
                    )
                    done = self._version(conn)
                    for version in range(done + 1, SCHEMA_VERSION + 1):
                        conn.execute(_MIGRATIONS[version - 1].format(s=s).encode())
                        conn.execute(
                            f"INSERT INTO {s}.migrations (version) VALUES (%s)", (version,)
                        )
        except psycopg.Error as e:
            raise self._error("cannot prepare the memlane schema", e) from None
        finally:
            conn.close()
        if done > SCHEMA_VERSION:
            raise StorageError(
                f"{self.location} has schema version {done}; this memlane reads up "
                f"to {SCHEMA_VERSION} (upgrade memlane)"
            )

    def _refused(self, e: psycopg.Error) -> MemlaneError:
        if self.target.tenant is None:
            return self._error("PostgreSQL refused the write", e)
        field, who = self.target.tenant
        return InvalidArgumentError(
            f"this store is confined to the tenant {field}={who!r} (row-level security): "
            f"every record written must have {field}={who!r} (set it, or pass "
            f"default_scope={{{field!r}: {who!r}}})"
        )

    def _getconn(self) -> psycopg.Connection[Any]:
        try:
            return self._pool.getconn()
        except PoolTimeout:
            raise StorageError(
                f"cannot reach the PostgreSQL database {self.location} "
                f"(no connection within {CONNECT_TIMEOUT:.0f} s)"
            ) from None
        except PoolClosed:
            raise StorageError("the store is closed") from None

    def _retrying(self, fn: Callable[[psycopg.Connection[Any]], T]) -> T:
        """Runs ``fn`` on a pooled connection outside any transaction (a read, or a
        statement safe to repeat), again on another connection when the first broke."""
        for attempt in range(_ATTEMPTS):
            conn = self._getconn()
            try:
                return fn(conn)
            except psycopg.OperationalError as e:
                if attempt == _ATTEMPTS - 1:
                    raise self._error("PostgreSQL query failed", e) from None
            except psycopg.Error as e:
                raise self._error("PostgreSQL query failed", e) from None
            finally:
                self._pool.putconn(conn)
            time.sleep(0.1 * 2**attempt)
        raise AssertionError  # pragma: no cover

    def _begin(self) -> psycopg.Connection[Any]:
        for attempt in range(_ATTEMPTS):
            conn = self._getconn()
            try:
                conn.execute("BEGIN")
                return conn
            except psycopg.OperationalError as e:
                # The connection broke while idle: nothing was sent, so a fresh one is safe.
                self._pool.putconn(conn)
                if attempt == _ATTEMPTS - 1:
                    raise self._error("cannot start a transaction", e) from None
            time.sleep(0.1 * 2**attempt)
        raise AssertionError  # pragma: no cover

    @contextmanager
    def transaction(self) -> Iterator[psycopg.Connection[Any]]:
        conn = self._begin()
        try:
            try:
                yield conn
            except psycopg.Error as e:
                with contextlib.suppress(psycopg.Error):
                    conn.execute("ROLLBACK")
                raise self._error("write failed, nothing was stored", e) from None
            except BaseException:
                with contextlib.suppress(psycopg.Error):
                    conn.execute("ROLLBACK")
                raise
            try:
                conn.execute("COMMIT")
            except psycopg.Error as e:
                raise self._error(
                    "commit failed (if the connection was lost, the write may or may not "
                    "have been stored)",
                    e,
                ) from None
        finally:
            self._pool.putconn(conn)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._listener is not None:
            self._listener.stop()
        self._pool.close()

    # -- meta and counters ---------------------------------------------------------------

    def get_meta(self, key: str, conn: Any = None) -> str | None:
        q = f"SELECT value FROM {self._s}.meta WHERE key = %s"
        if conn is not None:
            row = conn.execute(q, (key,)).fetchone()
        else:
            row = self._retrying(lambda c: c.execute(q, (key,)).fetchone())
        return None if row is None else str(row[0])

    def set_meta(self, conn: Any, key: str, value: str) -> None:
        conn.execute(
            f"INSERT INTO {self._s}.meta (key, value) VALUES (%s, %s) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (key, value),
        )

    def next_seq(self, conn: Any) -> int:
        # The row lock taken here is held until commit: writers commit in seq order.
        row = conn.execute(
            f"UPDATE {self._s}.meta SET value = (value::int8 + 1)::text WHERE key = 'seq' "
            "RETURNING value::int8"
        ).fetchone()
        seq = int(row[0])
        conn.execute("SELECT pg_notify(%s, %s)", (self._channel, str(seq)))
        return seq

    def seq(self) -> int:
        return int(self.get_meta("seq") or 0)

    def reserve_rowids(self, count: int) -> int:
        q = (
            f"UPDATE {self._s}.meta SET value = (value::int8 + %s)::text "
            "WHERE key = 'next_rowid' RETURNING value::int8 - %s"
        )
        return int(self._retrying(lambda c: c.execute(q, (count, count)).fetchone())[0])  # type: ignore[index]

    def forgotten(self) -> int:
        return int(self.get_meta("forgotten") or 0)

    # -- writes --------------------------------------------------------------------------

    def insert(self, conn: Any, rows: Sequence[Row]) -> None:
        try:
            if self._copy:
                with conn.cursor().copy(
                    f"COPY {self._s}.records ({_ALL}) FROM STDIN (FORMAT BINARY)"
                ) as copy:
                    copy.set_types(_TYPES)
                    for row in rows:
                        copy.write_row(row)
            else:
                columns = [list(c) for c in zip(*rows, strict=True)]
                conn.execute(_INSERT_ARRAYS.format(s=self._s), columns)
        except psycopg.errors.UniqueViolation:
            raise InvalidArgumentError(
                "id(s) already stored (another process wrote them meanwhile); "
                "use update() to change a record"
            ) from None
        except psycopg.errors.InsufficientPrivilege as e:
            raise self._refused(e) from None
        except psycopg.DataError as e:
            raise InvalidArgumentError(f"PostgreSQL refused a value: {e}") from None
        # Safe before the commit: new rowids reach the indexes only after it, and a
        # rolled-back one is never asked for (rowids are not reused).
        self._cache.put(rows)

    def replace(self, conn: Any, rows: Sequence[Row]) -> None:
        sets = ", ".join(f"{c} = %s" for c in COLUMNS[1:])
        for r in rows:
            try:
                cur = conn.execute(
                    f"UPDATE {self._s}.records SET {sets} WHERE rowid = %s", (*r[1:], r[0])
                )
            except psycopg.errors.InsufficientPrivilege as e:
                raise self._refused(e) from None
            except psycopg.DataError as e:
                raise InvalidArgumentError(f"PostgreSQL refused a value: {e}") from None
            if cur.rowcount == 0:
                raise UnknownIdError(f"no memory with id {r[1]!r} (deleted by another process)")
            self._cache.invalidate([r[0]], r[_SEQ])

    def delete(self, conn: Any, rowids: Sequence[int], seq: int) -> None:
        s = self._s
        gone = conn.execute(
            f"DELETE FROM {s}.records WHERE rowid = ANY(%s::int8[]) RETURNING id", (list(rowids),)
        ).fetchall()
        conn.execute(
            f"INSERT INTO {s}.tombstones (rowid, seq) SELECT unnest(%s::int8[]), %s "
            "ON CONFLICT (rowid) DO UPDATE SET seq = excluded.seq, at = now()",
            (list(rowids), seq),
        )
        if gone:
            conn.execute(
                f"DELETE FROM {s}.recent WHERE id = ANY(%s::text[])", ([g[0] for g in gone],)
            )
        self._cache.invalidate(rowids, seq)

    def record_accesses(self, conn: Any, accesses: dict[int, tuple[int, float]], seq: int) -> None:
        self._cache.invalidate(accesses, seq)
        conn.execute(
            f"UPDATE {self._s}.records SET access_count = access_count + j.n, "
            "last_accessed_at = greatest(last_accessed_at, j.at), seq = %s "
            "FROM unnest(%s::int8[], %s::int8[], %s::float8[]) AS j (rowid, n, at) "
            f"WHERE {self._s}.records.rowid = j.rowid",
            (
                seq,
                list(accesses),
                [n for n, _ in accesses.values()],
                [at for _, at in accesses.values()],
            ),
        )

    def set_embeddings(self, conn: Any, rows: Sequence[tuple[int, bytes | None]], seq: int) -> None:
        self._cache.invalidate([r for r, _ in rows], seq)
        conn.execute(
            f"UPDATE {self._s}.records SET embedding = j.e, seq = %s, content_seq = %s "
            "FROM unnest(%s::int8[], %s::bytea[]) AS j (rowid, e) "
            f"WHERE {self._s}.records.rowid = j.rowid",
            (seq, seq, [r for r, _ in rows], [b for _, b in rows]),
        )

    def texts(self, conn: Any) -> list[tuple[int, str]]:
        rows = conn.execute(f"SELECT rowid, text FROM {self._s}.records ORDER BY rowid")
        return [(int(r[0]), str(r[1])) for r in rows]

    def remember(
        self, conn: Any, entries: Sequence[tuple[str, str, float]], forget_before: float
    ) -> None:
        latest = {key: (rid, at) for key, rid, at in entries}  # one row per key per statement
        conn.execute(
            f"INSERT INTO {self._s}.recent (key, id, at) "
            "SELECT * FROM unnest(%s::text[], %s::text[], %s::float8[]) "
            "ON CONFLICT (key) DO UPDATE SET id = excluded.id, at = excluded.at",
            (list(latest), [v[0] for v in latest.values()], [v[1] for v in latest.values()]),
        )
        conn.execute(f"DELETE FROM {self._s}.recent WHERE at < %s", (forget_before,))

    def gc_tombstones(self, upto: int) -> None:
        # Other processes may not have seen a deletion yet: only old tombstones go, and
        # ``forgotten`` tells a snapshot older than them to rebuild instead of replaying.
        s = self._s
        with self.transaction() as conn:
            conn.execute(
                f"WITH gone AS (DELETE FROM {s}.tombstones WHERE seq <= %s "
                f"AND at < now() - interval '{_TOMBSTONE_DAYS} days' RETURNING seq) "
                f"UPDATE {s}.meta SET value = greatest(value::int8, "
                "(SELECT coalesce(max(seq), 0) FROM gone))::text WHERE key = 'forgotten'",
                (upto,),
            )

    # -- reads ---------------------------------------------------------------------------

    def rows_by_rowid(self, rowids: Sequence[int], embedding: bool = False) -> dict[int, Row]:
        if not rowids:
            return {}
        found: dict[int, Row] = {}
        if not embedding:
            found, missing = self._cache.get(rowids)
            if not missing:
                return found
            rowids = missing
        q = f"SELECT {_ALL if embedding else _NO_EMBEDDING} FROM {self._s}.records "
        q += "WHERE rowid = ANY(%s::int8[])"

        def run(conn: psycopg.Connection[Any]) -> dict[int, Row]:
            out: dict[int, Row] = {}
            with conn.cursor(binary=True) as cur:
                for start in range(0, len(rowids), _CHUNK):
                    cur.execute(q, (list(rowids[start : start + _CHUNK]),))
                    for row in cur:
                        out[row[0]] = row
            return out

        fetched = self._retrying(run)
        self._cache.put(fetched.values())
        found.update(fetched)
        return found

    def row_by_id(self, record_id: str, embedding: bool = False) -> Row | None:
        q = f"SELECT {_ALL if embedding else _NO_EMBEDDING} FROM {self._s}.records WHERE id = %s"

        def run(conn: psycopg.Connection[Any]) -> Row | None:
            with conn.cursor(binary=True) as cur:
                row: Row | None = cur.execute(q, (record_id,)).fetchone()
                return row

        return self._retrying(run)

    def existing_ids(self, ids: Sequence[str]) -> set[str]:
        if not ids:
            return set()
        q = f"SELECT id FROM {self._s}.records WHERE id = ANY(%s::text[])"
        return self._retrying(lambda c: {r[0] for r in c.execute(q, (list(ids),))})

    def rows_by_hash(self, hashes: Sequence[str], embedding: bool) -> list[Row]:
        if not hashes:
            return []
        q = f"SELECT {_ALL if embedding else _NO_EMBEDDING} FROM {self._s}.records "
        q += "WHERE content_hash = ANY(%s::text[]) ORDER BY rowid"

        def run(conn: psycopg.Connection[Any]) -> list[Row]:
            with conn.cursor(binary=True) as cur:
                return cur.execute(q, (sorted(set(hashes)),)).fetchall()

        return self._retrying(run)

    def rows_since(self, seq: int, batch: int = _CHUNK) -> Iterator[list[Row]]:
        q = f"SELECT rowid FROM {self._s}.records WHERE seq > %s ORDER BY rowid"
        rowids = self._retrying(lambda c: [r[0] for r in c.execute(q, (seq,))])
        for start in range(0, len(rowids), batch):
            part = rowids[start : start + batch]
            # (This also refreshes the row cache: it stays as fresh as the indexes.)
            rows = self.rows_by_rowid(part, embedding=True)
            yield [rows[r] for r in part if r in rows]

    def tombstones_since(self, seq: int) -> list[int]:
        q = f"SELECT rowid FROM {self._s}.tombstones WHERE seq > %s"
        gone = self._retrying(lambda c: [r[0] for r in c.execute(q, (seq,))])
        self._cache.forget(gone)
        return gone

    def all_rowids(self) -> set[int]:
        q = f"SELECT rowid FROM {self._s}.records"
        return self._retrying(lambda c: {r[0] for r in c.execute(q)})

    def iter_rows(self, embedding: bool, batch: int = 1024) -> Iterator[Row]:
        q = f"SELECT {_ALL if embedding else _NO_EMBEDDING} FROM {self._s}.records "
        q += "WHERE rowid > %s ORDER BY rowid LIMIT %s"
        last = 0
        while True:

            def page(conn: psycopg.Connection[Any], after: int = last) -> list[Row]:
                with conn.cursor(binary=True) as cur:
                    return cur.execute(q, (after, batch)).fetchall()

            rows = self._retrying(page)
            if not rows:
                return
            yield from rows
            last = rows[-1][0]

    def recent(self, since: float) -> list[tuple[str, str, float]]:
        q = f"SELECT key, id, at FROM {self._s}.recent WHERE at >= %s ORDER BY at"
        return self._retrying(lambda c: [(r[0], r[1], r[2]) for r in c.execute(q, (since,))])

    def count(self) -> int:
        q = f"SELECT count(*) FROM {self._s}.records"
        return int(self._retrying(lambda c: c.execute(q).fetchone())[0])  # type: ignore[index]

    # -- upkeep --------------------------------------------------------------------------

    def checkpoint(self) -> None:
        return None

    def wal_bytes(self) -> int:
        return 0

    def follow(self, on_change: Callable[[], None]) -> None:
        if self._listener is None:
            self._listener = _Listener(self, on_change)


class _Listener:
    """A thread on a connection of its own: ``LISTEN``, and ``on_change`` at every
    notification and at least every :data:`POLL_SECONDS`."""

    def __init__(self, store: PostgresStore, on_change: Callable[[], None]) -> None:
        self._store = store
        self._on_change = on_change
        self._stopping = threading.Event()
        # close() wakes the thread with a notification only it listens to.
        self._wake_channel = f"memlane_stop_{uuid.uuid4().hex}"
        self._thread = threading.Thread(target=self._run, daemon=True, name="memlane-follow")
        self._thread.start()

    def _run(self) -> None:
        store = self._store
        conn: psycopg.Connection[Any] | None = None
        failures = 0
        while not self._stopping.is_set():
            try:
                if conn is None:
                    conn = psycopg.connect(store.target.conninfo, **store._connect_kwargs)
                    conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(store._channel)))
                    conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self._wake_channel)))
                    failures = 0
                else:
                    for _ in conn.notifies(timeout=POLL_SECONDS, stop_after=1):
                        pass
                if not self._stopping.is_set():
                    self._on_change()
            except psycopg.Error as e:
                # Lost connection: reconnect with backoff; the next round catches up.
                if conn is not None:
                    with contextlib.suppress(psycopg.Error):
                        conn.close()
                    conn = None
                failures += 1
                if failures == 3:
                    warnings.warn(
                        f"memlane: cannot follow changes of {store.location}: "
                        f"{store.target.scrub(str(e))}; retrying",
                        RuntimeWarning,
                        stacklevel=1,
                    )
                self._stopping.wait(min(POLL_SECONDS * failures, 10.0))
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()

    def stop(self) -> None:
        self._stopping.set()
        with contextlib.suppress(StorageError, psycopg.Error):
            self._store._retrying(
                lambda c: c.execute("SELECT pg_notify(%s, '')", (self._wake_channel,))
            )
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=2 * POLL_SECONDS + CONNECT_TIMEOUT)
