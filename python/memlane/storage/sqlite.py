"""The SQLite database of a memory store: the source of truth.

WAL mode with ``synchronous=FULL``: a transaction that returned is on disk and
survives a killed process and a power cut. Every write transaction takes the
next change sequence number (``meta.seq``) and stamps the rows it writes
(``records.seq``, and ``content_seq`` when the text or vector changed);
deletions leave a tombstone with their sequence number. An index snapshot
records the sequence number it reflects, so opening a store replays only
what the database holds beyond it. Rowids are ``AUTOINCREMENT``: never
reused, so a tombstone always means the same record. They are the engine's
ids; the public ids are the ``id`` strings.

Embeddings are stored as little-endian blobs (scaled float16 unless the index holds
float32: ``rust/core/src/blob.rs``) in ``vectors.log`` beside the database, each row
holding a marker that names its entry (``vector_log.py``); an in-memory database keeps
them in its rows. The indexes can always be rebuilt from the two.

The statements are ``SQLStore``'s; this module holds
the connections (one writer, a reader per thread), the pragmas and checkpoints,
and what SQLite's errors mean.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from memlane.coerce import MAX_COUNT
from memlane.errors import CorruptFileError, StorageError, StoreClosedError
from memlane.schema import history_table, records_table, sqlite_types_hold
from memlane.storage.base import held_here
from memlane.storage.dialect import Columns, ErrorKind, Rows
from memlane.storage.interrupts import Hold
from memlane.storage.rowcache import DEFAULT_CAPACITY, RowCache
from memlane.storage.sql import SQLStore
from memlane.storage.sqlite_migrate import migrate
from memlane.storage.vector_log import MARKER_BYTES, MARKER_TAG, VectorLog

__all__ = [
    "EPOCHS",
    "SCHEMA_VERSION",
    "VECTOR_FILE",
    "SQLiteStore",
    "read_epochs",
]

#: The vector file's name, beside the database.
VECTOR_FILE = "vectors.log"
# Rows an older store's move to the vector file takes per transaction.
_MOVE_CHUNK = 5_000

T = TypeVar("T")

# 2: records.valid_to and the history table.
# 3: expires_at and recorded_at, in the records and the history.
# 4: speaker, in the records and the history.
# 5: tenant_meta, where jobs are kept (PostgreSQL's tenants own theirs; here: no tenant).
# 6: history.change_seq, the change that wrote an entry.
# 7: the vectors in vectors.log beside the database, a marker in each row
#    (storage/vector_log.py; an older store's are moved there at its first open).
SCHEMA_VERSION = 7


_SCHEMA = (
    """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
-- The entries a tenant owns (the jobs of Memory.jobs): "" here, where there are none.
CREATE TABLE IF NOT EXISTS tenant_meta (
    tenant TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, PRIMARY KEY (tenant, key)
);
"""
    + records_table("sqlite")
    + """;
CREATE INDEX IF NOT EXISTS records_seq ON records (seq);
-- A 16-hex-digit prefix of the hash is selective enough and keeps the index small.
-- Queries must constrain this expression alone (see SQLiteStore._HASH_EXPR).
CREATE INDEX IF NOT EXISTS records_hash ON records (substr(content_hash, 1, 16));
-- Keys of the dedup window (message ids, source + contact + text) of recent adds.
CREATE TABLE IF NOT EXISTS recent (key TEXT PRIMARY KEY, id TEXT NOT NULL, at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS recent_at ON recent (at);
-- Deleting records drops their keys through this (added after schema version 1 shipped:
-- the first open of an older store builds it, over the few rows of the window).
CREATE INDEX IF NOT EXISTS recent_id ON recent (id);
CREATE TABLE IF NOT EXISTS tombstones (rowid INTEGER PRIMARY KEY, seq INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS tombstones_seq ON tombstones (seq);
"""
    + history_table("sqlite")
    + """;
CREATE INDEX IF NOT EXISTS history_id ON history (id);
CREATE INDEX IF NOT EXISTS history_next ON history (next_id);
"""
)

# Record fetches read mapped pages. The kernel maps some 64 kB around each page a
# search touches (fault-around), so a map of the whole file grows a large store's
# resident set with every search; past the first 128 MB (all of a 100k store's
# database), pages are read into SQLite's cache instead, at no measured cost to
# searches (figures in benches/README.md, "Figures behind the code").
_MMAP_BYTES = 128 << 20
# The writer's cache: inserts land at random places of the id and hash indexes.
_CACHE_KIB = 64 * 1024
# A reader's (one per thread that reads): a search's rows are random pages that a
# cache seldom holds again, while the trees' inner pages, which it does, fit in a few
# MB at a million records.
_READ_CACHE_KIB = 8 * 1024
# A row is some 200 bytes, its vector in vectors.log: 16 KiB pages waste no more of the
# file than 4 KiB ones, and hold a text of several kilobytes without overflow pages.
# Only a new database takes it; an older one keeps its pages.
_PAGE_BYTES = 16384
# SQLite's default limit on bound parameters is 32766; stay far below.
_CHUNK = 500

# How the sqlite3 module words a text value it cannot decode (CPython's _sqlite/cursor.c).
_UNDECODABLE = "Could not decode to UTF-8"

# Result codes (https://sqlite.org/rescode.html): primary ones, then extended ones.
_KINDS: dict[int, ErrorKind] = {
    11: "corrupt",  # SQLITE_CORRUPT: "database disk image is malformed"
    26: "corrupt",  # SQLITE_NOTADB: "file is not a database"
    13: "full",  # SQLITE_FULL: "database or disk is full"
    20: "value",  # SQLITE_MISMATCH: "datatype mismatch"
    2067: "unique",  # SQLITE_CONSTRAINT_UNIQUE
    1555: "unique",  # SQLITE_CONSTRAINT_PRIMARYKEY
}


def _chunks(items: Sequence[Any]) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), _CHUNK):
        yield items[start : start + _CHUNK]


def _meta_ints(value: str, path: Path, count: int) -> list[int]:
    """The ``count`` whole numbers of a meta value memlane wrote (``meta.vector_log_end``,
    or ``vector_log_last``: "OFFSET:CRC")."""
    parts = value.split(":")
    if len(parts) != count or not all(p.isascii() and p.isdigit() for p in parts):
        raise CorruptFileError(
            f"reading the vector file's end ({path}): {value!r} is not what memlane wrote: "
            "the database file is damaged"
        )
    return [int(p) for p in parts]


#: The meta key of the database's epochs: "EPOCH:START" each (hex, decimal), oldest
#: first. A change number says where a snapshot stands in a history, not which: two
#: copies of a store (a backup and the store, both written since) reach the same
#: numbers with other records. The first write of each open starts an epoch, a random
#: number, after change START (``SQLiteStore.next_seq``), and a snapshot records the
#: epoch of the change it reflects, so one copy's snapshot names an epoch the other
#: never listed, or one the other went on from at an earlier change
#: (``memlane._memory.sync``). PostgreSQL keeps none: see ``docs/reliability.md``.
EPOCHS = "epochs"
# Epochs kept: a snapshot of an older one, no longer listed, is rebuilt. An open that
# wrote writes a snapshot when it closes, so the newest snapshot is of one of the last.
_EPOCHS_KEPT = 64
_HEX = frozenset("0123456789abcdef")


def read_epochs(value: str | None) -> list[tuple[int, int]] | None:
    """The (epoch, start) pairs of ``meta.epochs`` (see ``EPOCHS``), oldest first; none
    where it holds none; None where it is not what memlane wrote (damaged)."""
    out: list[tuple[int, int]] = []
    for item in (value or "").split():
        epoch, _, start = item.partition(":")
        if not (epoch and set(epoch) <= _HEX and start.isascii() and start.isdigit()):
            return None
        out.append((int(epoch, 16), int(start)))
    return out


class SQLiteStore(SQLStore):
    """The database of one store; ``path=None`` keeps it in memory.

    Writes go through one connection, one transaction at a time. Reads use a
    connection per thread (WAL lets them run beside a write); an in-memory
    database has a single connection, shared under the lock.
    """

    #: One process at a time (the store lock): nothing to follow.
    shared = False
    ENGINE = "SQLite"
    # The module decodes SQLite's messages and text as UTF-8, and memlane stores only
    # valid UTF-8: bytes that do not decode come from a damaged file (seen: the message
    # of a schema a flipped bit garbled, raised by the first PRAGMA).
    _ERRORS = (sqlite3.Error, UnicodeDecodeError)
    _HOLDS = True
    _TYPES_HOLD = sqlite_types_hold()
    _HISTORY_TYPES_HOLD = sqlite_types_hold(history=True)
    # (It needs SQLite 3.35.)
    _RETURNING = False
    _GREATEST = "max"
    _TOMBSTONE_UPDATE = "seq = excluded.seq"
    # Tombstones go once a snapshot reflects them: only the newest snapshot is loaded.
    # ``forgotten`` remembers the newest tombstone that went: a snapshot older than it
    # (restored from a backup, or copied before the database) rebuilds.
    _GC_TOMBSTONES = (
        "INSERT INTO {p}meta (key, value) VALUES ('forgotten', "
        "(SELECT coalesce(max(seq), 0) FROM {p}tombstones WHERE seq <= ?)) "
        "ON CONFLICT (key) DO UPDATE SET value = "
        "max(CAST(value AS INTEGER), CAST(excluded.value AS INTEGER))",
        "DELETE FROM {p}tombstones WHERE seq <= ?",
    )
    # With ``AND content_hash = ?`` beside the indexed expression (what a one-element IN
    # list becomes), SQLite's constant propagation rewrites ``substr(content_hash, 1, 16)``
    # into ``substr(?, 1, 16)``, which no longer matches the index expression, and the
    # lookup became a scan of every row: full hashes are compared in Python.
    _HASH_EXPR = "substr(content_hash, 1, 16)"
    _HASH_PREFIX = 16

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.location = "in memory" if path is None else str(path)
        self._lock = threading.RLock()
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._accessed = []
        self._closed = False
        # Reads in flight, by connection: close leaves a connection in use to its read,
        # which closes it as it ends (closing it mid-read crashes the sqlite3 module;
        # waiting would hold close as long as an export to a stalled pipe takes).
        self._reading = threading.Lock()
        self._busy: dict[int, int] = {}
        self._checkpointer: sqlite3.Connection | None = None
        #: This open's epoch (see EPOCHS) once it wrote, and whether the transaction that
        #: starts it is still open.
        self._epoch: int | None = None
        self._epoch_pending = False
        #: The change number of the transaction open, once it took one.
        self._seq_pending: int | None = None
        #: The database file this store opened (device, inode), and whether the path was
        #: found to name another since (see ``_current``).
        self._identity: tuple[int, int] | None = None
        self._replaced = False
        self._writer = self._connect(_CACHE_KIB)
        try:
            if path is not None:
                self._identity = self._file_identity()
                if self._identity is None:
                    raise StorageError(f"cannot open the database ({path}): it is gone")
            # executescript commits any open transaction, so the (idempotent)
            # schema goes first, on its own. Pages stay at SQLite's 4 KiB: 16 KiB
            # pages (set before WAL mode, the only time they can be) made a 100k
            # store 5% smaller and moved neither loads, adds nor searches beyond
            # this machine's noise.
            with self._failing("cannot open the database"):
                self._writer.executescript(_SCHEMA)
            with self.transaction() as conn:
                version = (
                    None
                    if self.get_meta("schema_version", conn) is None
                    else self.meta_count("schema_version", conn)
                )
                if version is None:
                    self.set_meta(conn, "schema_version", str(SCHEMA_VERSION))
                    self.set_meta(conn, "seq", "0")
                elif version > SCHEMA_VERSION:
                    raise StorageError(
                        f"{path} has schema version {version}; this memlane reads up to "
                        f"{SCHEMA_VERSION} (upgrade memlane)"
                    )
                elif version < SCHEMA_VERSION:
                    migrate(conn)
                    self.set_meta(conn, "schema_version", str(SCHEMA_VERSION))
                # Made after the columns exist (a new table, or the migration above).
                conn.execute(
                    "CREATE INDEX IF NOT EXISTS records_expires ON records (expires_at) "
                    "WHERE expires_at IS NOT NULL"
                )
                conn.execute("CREATE INDEX IF NOT EXISTS history_change ON history (change_seq)")
                if self.get_meta("store_id", conn) is None:
                    # Which database a snapshot belongs to (a store made before ids
                    # existed gets one now, and rebuilds its snapshot once).
                    self.set_meta(conn, "store_id", str(uuid.uuid4()))
            self.store_id = self._store_id()
            self._cache = RowCache(DEFAULT_CAPACITY)
            if path is not None:
                end, last = self.get_meta("vector_log_end"), self.get_meta("vector_log_last")
                at_crc = None if last is None else _meta_ints(last, path, 2)
                self._log = VectorLog(
                    path.parent / VECTOR_FILE,
                    self.store_id,
                    None if end is None else _meta_ints(end, path, 1)[0],
                    None if at_crc is None else (at_crc[0], at_crc[1]),
                )
                if self.get_meta("vector_log") != "all":
                    self._move_vectors()
        except BaseException:
            self.close()
            raise

    def _store_id(self) -> str:
        """``meta.store_id``, a UUID as this class writes it (the vector file's header
        holds its bytes), or ``CorruptFileError`` naming it."""
        value = str(self.get_meta("store_id"))
        try:
            uuid.UUID(value)
        except ValueError:
            raise CorruptFileError(
                f"reading meta.store_id ({self.location}): {value[:80]!r} is not what memlane "
                "wrote: the database file is damaged"
            ) from None
        return value

    def _move_vectors(self) -> None:
        """Moves the blobs an older store kept in its rows into the vector file, a chunk
        per transaction (a killed move goes on at the next open), then gives the
        database's freed pages back to the disk."""
        log = self._log
        assert log is not None
        q = (
            "SELECT rowid, embedding FROM records WHERE rowid > ? AND embedding IS NOT NULL "
            f"AND NOT (length(embedding) = {MARKER_BYTES} "
            f"AND substr(embedding, 1, 1) = X'{MARKER_TAG:02x}') "
            "ORDER BY rowid LIMIT ?"
        )
        after, moved = 0, False
        while True:
            with self.transaction() as conn:
                rows = [(int(r), bytes(b)) for r, b in conn.execute(q, (after, _MOVE_CHUNK))]
                if not rows:
                    self.set_meta(conn, "vector_log", "all")
                    break
                markers = log.stage(rows)
                conn.executemany(
                    "UPDATE records SET embedding = ? WHERE rowid = ?",
                    [(m, r) for m, (r, _) in zip(markers, rows, strict=True)],
                )
                after, moved = rows[-1][0], True
        if moved:
            with self._lock, self._failing("cannot compact the database"):
                self._writer.execute("VACUUM")

    def _connect(self, cache_kib: int = _READ_CACHE_KIB) -> sqlite3.Connection:
        target = ":memory:" if self.path is None else str(self.path)
        with self._failing("cannot open the database"):
            conn = sqlite3.connect(target, isolation_level=None, check_same_thread=False)
            if self.path is not None:
                conn.execute("PRAGMA busy_timeout = 10000")
                conn.execute(f"PRAGMA page_size = {_PAGE_BYTES}")
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                if str(mode).lower() != "wal":
                    raise StorageError(f"{self.path}: cannot switch to WAL mode (got {mode})")
                # Durable commits: the WAL is synced at every commit.
                conn.execute("PRAGMA synchronous = FULL")
                # Checkpoints run off the write path (see checkpoint()).
                conn.execute("PRAGMA wal_autocheckpoint = 0")
                # Record fetches after a search hit random pages (see _MMAP_BYTES).
                conn.execute(f"PRAGMA mmap_size = {_MMAP_BYTES}")
                # The default is 2 MB (see _CACHE_KIB and _READ_CACHE_KIB).
                conn.execute(f"PRAGMA cache_size = -{cache_kib}")
        return conn

    def _file_identity(self) -> tuple[int, int] | None:
        """The device and inode of the file the path names (None: none it can stat)."""
        assert self.path is not None
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return st.st_dev, st.st_ino

    def _current(self) -> None:
        """Refuses to go on once the path names another database file than the one this
        store opened (a backup moved into its place, the file deleted): a connection
        opened by path would read the other file while the engine and the writer hold
        this one's records, and a write would go to a file no later open reads. Checked
        where a connection is opened and where a write begins: one ``stat`` each, never
        per read."""
        if self._identity is None:
            return
        if not self._replaced and self._file_identity() != self._identity:
            self._replaced = True
        if self._replaced:
            raise StorageError(
                f"the SQLite database {self.location} was replaced while this store was "
                "open (another file moved into its place, or the file removed): open the "
                "store again"
            )

    def checkpoint(self) -> None:
        """Copies the WAL into the database without blocking writers (a passive checkpoint,
        on a connection of its own; the maintenance thread calls it)."""
        if self.path is None or self._closed:
            return
        if self._checkpointer is None:
            self._checkpointer = self._connect()
            self._current()
        with self._failing("checkpoint failed"):
            self._checkpointer.execute("PRAGMA wal_checkpoint(PASSIVE)")

    def wal_bytes(self) -> int:
        if self.path is None:
            return 0
        try:
            return (self.path.parent / (self.path.name + "-wal")).stat().st_size
        except OSError:
            return 0

    def held_here(self) -> bool:
        # A write holds it, and an in-memory store's read (close takes it).
        return held_here(self._lock)

    def close(self) -> None:
        # Every step again at each call (each does nothing the second time): one close
        # interrupted (Ctrl-C) is finished by the next, which leaves the checkpoint out.
        with self._lock:
            first = not self._closed
            with self._reading:
                self._closed = True
                busy = set(self._busy)
            for conn in self._readers:
                if id(conn) not in busy:
                    conn.close()
            self._readers.clear()
            if self._checkpointer is not None:
                self._checkpointer.close()
            if self.path is not None and first:
                # On failure the next open replays the WAL.
                with contextlib.suppress(sqlite3.Error):
                    self._writer.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            self._writer.close()
            if self._log is not None:
                self._log.close()

    # -- connections -----------------------------------------------------------------------

    def _begin(self) -> sqlite3.Connection:
        self._lock.acquire()
        # Taken once the lock is: a Ctrl-C while another thread's write holds it is not.
        hold = Hold()
        try:
            if self._closed:
                raise StoreClosedError("the store is closed")
            self._current()
            self._writer.execute("BEGIN IMMEDIATE")
        except BaseException:
            if self._writer.in_transaction:  # raised after the BEGIN went through
                with contextlib.suppress(sqlite3.Error):
                    self._writer.execute("ROLLBACK")
            self._lock.release()
            hold.end()
            raise
        self._begin_hold = hold
        return self._writer

    def _end(self, conn: Any) -> None:
        self._lock.release()

    def _went_through(self, conn: Any) -> bool:
        # sqlite3 runs the COMMIT to its end before Python handles a signal.
        return not conn.in_transaction

    @contextmanager
    def reader(self) -> Iterator[sqlite3.Connection]:
        if self.path is None:
            with self._lock:
                if self._closed:
                    raise StoreClosedError("the store is closed")
                yield self._writer
            return
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        fresh = conn is None
        if conn is None:
            with self._lock:
                if self._closed:
                    raise StoreClosedError("the store is closed")
                conn = self._connect()
                self._readers.append(conn)  # closed with the store, checked or not
                self._current()
                conn.execute("PRAGMA query_only = ON")
            self._local.conn = conn
        with self._reading:
            if self._closed:
                raise StoreClosedError("the store is closed")
            self._busy[id(conn)] = self._busy.get(id(conn), 0) + 1
        try:
            if not fresh and self._replaced:
                self._current()
            yield conn
        finally:
            with self._reading:
                left = self._busy.pop(id(conn)) - 1
                if left:
                    self._busy[id(conn)] = left
            if not left and self._closed:  # close left it to this read
                conn.close()

    @contextmanager
    def _reader(self, begin: str | None = None) -> Iterator[sqlite3.Connection]:
        with self.reader() as conn:
            if begin is not None:
                conn.execute(begin)
            yield conn

    def _run_read(self, fn: Callable[[Any], T]) -> T:
        with self.reader() as conn:
            return fn(conn)

    def _kind(self, e: Exception) -> ErrorKind:
        if isinstance(e, UnicodeDecodeError):
            return "corrupt"
        code = getattr(e, "sqlite_errorcode", None)
        # Text stored as bytes that are not UTF-8 (a flipped bit in a row): the sqlite3
        # module, not SQLite, refuses it while fetching, with no error code of SQLite's.
        if code is None and str(e).startswith(_UNDECODABLE):
            return "corrupt"
        if code is None:
            return None
        return _KINDS.get(code) or _KINDS.get(code & 0xFF)

    # -- binding -----------------------------------------------------------------------------

    def _any(self, column: str, values: Sequence[Any], sql_type: str) -> Iterator[tuple[str, Any]]:
        for chunk in _chunks(values):
            yield f"{column} IN ({', '.join('?' * len(chunk))})", tuple(chunk)

    def _many(self, conn: Any, table: str, columns: Columns, rows: Rows, tail: str = "") -> None:
        names = ", ".join(name for name, _ in columns)
        marks = ", ".join("?" * len(columns))
        conn.executemany(f"INSERT INTO {table} ({names}) VALUES ({marks}){tail}", rows)

    def _each(self, conn: Any, sql: str, rows: Rows) -> None:
        conn.executemany(sql, rows)

    def _relation(self, columns: Columns, rows: Rows) -> tuple[str, tuple[Any, ...]]:
        cols = ", ".join(
            f"json_extract(value, '$[{i}]') AS {name}" for i, (name, _) in enumerate(columns)
        )
        return f"(SELECT {cols} FROM json_each(?)) AS j", (json.dumps(rows),)

    # -- counters ----------------------------------------------------------------------------

    def next_seq(self, conn: Any) -> int:
        # The one writer holds the write lock (BEGIN IMMEDIATE) until commit.
        seq = self.meta_count("seq", conn) + 1
        if seq > MAX_COUNT:
            raise CorruptFileError(
                f"writing ({self.location}): meta.seq is {seq - 1}, the largest change number "
                "a database stores: the database file is damaged"
            )
        self.set_meta(conn, "seq", str(seq))
        self._seq_pending = seq
        if self._epoch is None and self.path is not None:
            # The first write of this open starts its epoch (see EPOCHS), in the same
            # transaction: one meta write per open that writes, none per change.
            # Read-only opens start none, so they do not push out the snapshot's.
            self._epoch = secrets.randbits(64) or 1
            kept = (read_epochs(self.get_meta(EPOCHS, conn)) or [])[1 - _EPOCHS_KEPT :]
            listed = [*kept, (self._epoch, seq - 1)]
            self.set_meta(conn, EPOCHS, " ".join(f"{e:x}:{s}" for e, s in listed))
            self._epoch_pending = True
        return seq

    def _committed(self) -> None:
        super()._committed()
        self._epoch_pending = False
        if self._seq_pending is not None:
            self.committed_seq, self._seq_pending = self._seq_pending, None

    def _rolled_back(self) -> None:
        super()._rolled_back()
        self._seq_pending = None
        if self._epoch_pending:
            # Its epoch was rolled back with it: the next write starts one.
            self._epoch, self._epoch_pending = None, False

    def reserve_rowids(self, count: int) -> int:
        """The first rowid never used (AUTOINCREMENT's counter, plus one): the one writer
        process inserts them before it asks again."""
        with self._lock, self._failing("cannot reserve rowids"):
            if self._closed:
                raise StoreClosedError("the store is closed")
            row = self._writer.execute(
                "SELECT seq FROM sqlite_sequence WHERE name = 'records'"
            ).fetchone()
        used = 0 if row is None else self.stored_count("records' rowid counter", row[0])
        if used > MAX_COUNT - count:
            # Rowids count up from 1: a counter this near the largest is damage, and the
            # insert would fail with a raw OverflowError in the sqlite3 module.
            raise CorruptFileError(
                f"reserving rowids ({self.location}): records' rowid counter is {used}, "
                f"too near the largest rowid for {count} more: the database file is damaged"
            )
        return used + 1
