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

Embeddings are stored as little-endian float32 blobs, so the indexes can
always be rebuilt from the database alone.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from memlane.errors import StorageError
from memlane.storage.base import COLUMNS, Row

__all__ = ["SCHEMA_VERSION", "SQLiteStore"]

SCHEMA_VERSION = 1


_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS records (
    rowid INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    text TEXT NOT NULL,
    tbl TEXT NOT NULL,
    type TEXT NOT NULL,
    agent_id TEXT, user_id TEXT, room_id TEXT, world_id TEXT, session_id TEXT, namespace TEXT,
    importance REAL NOT NULL,
    evergreen INTEGER NOT NULL,
    uniq INTEGER NOT NULL,
    metadata TEXT NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    last_accessed_at REAL NOT NULL,
    access_count INTEGER NOT NULL,
    content_hash TEXT NOT NULL,
    embedding BLOB,
    seq INTEGER NOT NULL,
    content_seq INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS records_seq ON records (seq);
-- A 16-hex-digit prefix of the hash is selective enough and keeps the index small.
-- Queries must constrain this expression alone (see SQLiteStore.rows_by_hash).
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

_ALL = ", ".join(COLUMNS)
_NO_EMBEDDING = ", ".join("NULL" if c == "embedding" else c for c in COLUMNS)
_INSERT = f"INSERT INTO records ({_ALL}) VALUES ({', '.join('?' * len(COLUMNS))})"
_HASH = COLUMNS.index("content_hash")
_MMAP_BYTES = 1 << 30
_CACHE_KIB = 64 * 1024
# SQLite's default limit on bound parameters is 32766; stay far below.
_CHUNK = 500


def _chunks(items: Sequence[Any]) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), _CHUNK):
        yield items[start : start + _CHUNK]


class SQLiteStore:
    """The database of one store; ``path=None`` keeps it in memory.

    Writes go through one connection, one transaction at a time. Reads use a
    connection per thread (WAL lets them run beside a write); an in-memory
    database has a single connection, shared under the lock.
    """

    #: One process at a time (the store lock): nothing to follow.
    shared = False

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._lock = threading.RLock()
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._closed = False
        self._writer = self._connect()
        # executescript commits any open transaction, so the (idempotent)
        # schema goes first, on its own. Large pages suit rows that carry a
        # 1.5 kB vector (they take effect in a new database only).
        self._writer.execute("PRAGMA page_size = 16384")
        self._writer.executescript(_SCHEMA)
        self._checkpointer: sqlite3.Connection | None = None
        with self.transaction() as conn:
            version = self.get_meta("schema_version", conn)
            if version is None:
                self.set_meta(conn, "schema_version", str(SCHEMA_VERSION))
                self.set_meta(conn, "seq", "0")
            elif int(version) > SCHEMA_VERSION:
                raise StorageError(
                    f"{path} has schema version {version}; this memlane reads up to "
                    f"{SCHEMA_VERSION} (upgrade memlane)"
                )

    def _connect(self) -> sqlite3.Connection:
        target = ":memory:" if self.path is None else str(self.path)
        try:
            conn = sqlite3.connect(target, isolation_level=None, check_same_thread=False)
            if self.path is not None:
                conn.execute("PRAGMA busy_timeout = 10000")
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                if str(mode).lower() != "wal":
                    raise StorageError(f"{self.path}: cannot switch to WAL mode (got {mode})")
                # Durable commits: the WAL is synced at every commit.
                conn.execute("PRAGMA synchronous = FULL")
                # Checkpoints run off the write path (see checkpoint()).
                conn.execute("PRAGMA wal_autocheckpoint = 0")
                # Record fetches after a search hit random pages: map the file
                # rather than read() each 16 KiB page into a small cache.
                conn.execute(f"PRAGMA mmap_size = {_MMAP_BYTES}")
                # Inserts land at random places of the id and hash indexes; keep
                # them in cache as the store grows (the default is 2 MB).
                conn.execute(f"PRAGMA cache_size = -{_CACHE_KIB}")
        except sqlite3.Error as e:
            raise StorageError(f"cannot open the database {target}: {e}") from e
        return conn

    def checkpoint(self) -> None:
        """Copies the WAL into the database without blocking writers (a passive checkpoint,
        on a connection of its own; the maintenance thread calls it)."""
        if self.path is None or self._closed:
            return
        if self._checkpointer is None:
            self._checkpointer = self._connect()
        self._checkpointer.execute("PRAGMA wal_checkpoint(PASSIVE)")

    def wal_bytes(self) -> int:
        if self.path is None:
            return 0
        try:
            return (self.path.parent / (self.path.name + "-wal")).stat().st_size
        except OSError:
            return 0

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for conn in self._readers:
                conn.close()
            self._readers.clear()
            if self._checkpointer is not None:
                self._checkpointer.close()
            if self.path is not None:
                # On failure the next open replays the WAL.
                with contextlib.suppress(sqlite3.Error):
                    self._writer.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            self._writer.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction: committed (durably) on exit, rolled back on an exception."""
        with self._lock:
            conn = self._writer
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as e:
                raise StorageError(f"cannot start a transaction: {e}") from e
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            try:
                conn.execute("COMMIT")
            except sqlite3.Error as e:
                conn.execute("ROLLBACK")
                raise StorageError(f"commit failed: {e}") from e

    @contextmanager
    def reader(self) -> Iterator[sqlite3.Connection]:
        if self.path is None:
            with self._lock:
                yield self._writer
            return
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            with self._lock:
                if self._closed:
                    raise StorageError("the store is closed")
                conn = self._connect()
                conn.execute("PRAGMA query_only = ON")
                self._readers.append(conn)
            self._local.conn = conn
        yield conn

    # -- meta ---------------------------------------------------------------

    def get_meta(self, key: str, conn: sqlite3.Connection | None = None) -> str | None:
        if conn is None:
            with self.reader() as c:
                row = c.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        else:
            row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    @staticmethod
    def set_meta(conn: sqlite3.Connection, key: str, value: str) -> None:
        conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

    def next_seq(self, conn: sqlite3.Connection) -> int:
        """The sequence number of the transaction ``conn`` is in (called once per transaction)."""
        seq = int(self.get_meta("seq", conn) or 0) + 1
        self.set_meta(conn, "seq", str(seq))
        return seq

    def seq(self) -> int:
        return int(self.get_meta("seq") or 0)

    def reserve_rowids(self, count: int) -> int:
        """The first rowid never used (AUTOINCREMENT's counter, plus one): the one writer
        process inserts them before it asks again."""
        with self._lock:
            row = self._writer.execute(
                "SELECT seq FROM sqlite_sequence WHERE name = 'records'"
            ).fetchone()
        return (0 if row is None else int(row[0])) + 1

    @staticmethod
    def forgotten() -> int:
        # Tombstones go only once a snapshot reflects them, and only the newest
        # snapshot is ever loaded.
        return 0

    def follow(self, on_change: Callable[[], None]) -> None:
        return None

    # -- writes ---------------------------------------------------------------

    @staticmethod
    def insert(conn: sqlite3.Connection, rows: Sequence[Row]) -> None:
        conn.executemany(_INSERT, rows)

    @staticmethod
    def replace(conn: sqlite3.Connection, rows: Sequence[Row]) -> None:
        """Rewrites whole rows that exist (same rowid)."""
        sets = ", ".join(f"{c} = ?" for c in COLUMNS[1:])
        conn.executemany(
            f"UPDATE records SET {sets} WHERE rowid = ?", [(*r[1:], r[0]) for r in rows]
        )

    @staticmethod
    def delete(conn: sqlite3.Connection, rowids: Sequence[int], seq: int) -> None:
        for chunk in _chunks(rowids):
            marks = ", ".join("?" * len(chunk))
            # The dedup-window keys of exactly these records go (through recent_id), not
            # every key whose record is missing: that walked the whole window each time.
            # (No DELETE ... RETURNING: it needs SQLite 3.35.)
            ids = [
                r[0]
                for r in conn.execute(
                    f"SELECT id FROM records WHERE rowid IN ({marks})", tuple(chunk)
                )
            ]
            conn.execute(f"DELETE FROM records WHERE rowid IN ({marks})", tuple(chunk))
            if ids:
                conn.execute(f"DELETE FROM recent WHERE id IN ({', '.join('?' * len(ids))})", ids)
        conn.executemany(
            "INSERT OR REPLACE INTO tombstones (rowid, seq) VALUES (?, ?)",
            [(r, seq) for r in rowids],
        )

    @staticmethod
    def record_accesses(
        conn: sqlite3.Connection, accesses: dict[int, tuple[int, float]], seq: int
    ) -> None:
        # One statement: SQLite runs it without taking the GIL back row by row, so
        # a flush does not stall searches in other threads.
        conn.execute(
            "UPDATE records SET access_count = access_count + j.n, "
            "last_accessed_at = max(last_accessed_at, j.at), seq = ? "
            "FROM (SELECT json_extract(value, '$[0]') AS id_, json_extract(value, '$[1]') AS n, "
            "json_extract(value, '$[2]') AS at FROM json_each(?)) AS j "
            "WHERE records.rowid = j.id_",
            (seq, json.dumps([[rowid, n, at] for rowid, (n, at) in accesses.items()])),
        )

    @staticmethod
    def set_embeddings(
        conn: sqlite3.Connection, rows: Sequence[tuple[int, bytes | None]], seq: int
    ) -> None:
        conn.executemany(
            "UPDATE records SET embedding = ?, seq = ?, content_seq = ? WHERE rowid = ?",
            [(blob, seq, seq, rowid) for rowid, blob in rows],
        )

    @staticmethod
    def texts(conn: sqlite3.Connection) -> list[tuple[int, str]]:
        return conn.execute("SELECT rowid, text FROM records ORDER BY rowid").fetchall()

    def gc_tombstones(self, upto: int) -> None:
        with self.transaction() as conn:
            conn.execute("DELETE FROM tombstones WHERE seq <= ?", (upto,))

    # -- reads ----------------------------------------------------------------

    def rows_by_rowid(self, rowids: Sequence[int], embedding: bool = False) -> dict[int, Row]:
        cols = _ALL if embedding else _NO_EMBEDDING
        out: dict[int, Row] = {}
        with self.reader() as conn:
            for chunk in _chunks(rowids):
                marks = ", ".join("?" * len(chunk))
                for row in conn.execute(
                    f"SELECT {cols} FROM records WHERE rowid IN ({marks})", tuple(chunk)
                ):
                    out[row[0]] = row
        return out

    def row_by_id(self, record_id: str, embedding: bool = False) -> Row | None:
        cols = _ALL if embedding else _NO_EMBEDDING
        with self.reader() as c:
            row: Row | None = c.execute(
                f"SELECT {cols} FROM records WHERE id = ?", (record_id,)
            ).fetchone()
        return row

    def existing_ids(self, ids: Sequence[str]) -> set[str]:
        out: set[str] = set()
        with self.reader() as conn:
            for chunk in _chunks(ids):
                marks = ", ".join("?" * len(chunk))
                out.update(
                    r[0]
                    for r in conn.execute(f"SELECT id FROM records WHERE id IN ({marks})", chunk)
                )
        return out

    def rows_by_hash(self, hashes: Sequence[str], embedding: bool) -> list[Row]:
        """The rows whose ``content_hash`` is one of ``hashes``, in rowid order.

        The query names the indexed expression (``records_hash``) and nothing else; the
        full hashes are compared here. With ``AND content_hash = ?`` beside it (what a
        one-element IN list becomes), SQLite's constant propagation rewrites
        ``substr(content_hash, 1, 16)`` into ``substr(?, 1, 16)``, which no longer
        matches the index expression, and the lookup became a scan of every row.
        """
        cols = _ALL if embedding else _NO_EMBEDDING
        wanted = set(hashes)
        out: list[Row] = []
        with self.reader() as c:
            for chunk in _chunks(sorted({h[:16] for h in wanted})):
                marks = ", ".join("?" * len(chunk))
                rows = c.execute(
                    f"SELECT {cols} FROM records WHERE substr(content_hash, 1, 16) IN ({marks})",
                    tuple(chunk),
                )
                # A row sharing only the 64-bit prefix is not a match.
                out.extend(r for r in rows if r[_HASH] in wanted)
        out.sort(key=lambda r: int(r[0]))
        return out

    def rows_since(self, seq: int, batch: int = 4096) -> Iterator[list[Row]]:
        """Rows written after change ``seq``, with embeddings, in rowid order, in batches."""
        with self.reader() as conn:
            # The seq index answers this without touching the rows.
            rowids = [r[0] for r in conn.execute("SELECT rowid FROM records WHERE seq > ?", (seq,))]
        rowids.sort()
        for start in range(0, len(rowids), batch):
            rows = self.rows_by_rowid(rowids[start : start + batch], embedding=True)
            yield [rows[r] for r in rowids[start : start + batch] if r in rows]

    def tombstones_since(self, seq: int) -> list[int]:
        with self.reader() as conn:
            rows = conn.execute("SELECT rowid FROM tombstones WHERE seq > ?", (seq,))
            return [r[0] for r in rows]

    def all_rowids(self) -> set[int]:
        with self.reader() as conn:
            return {r[0] for r in conn.execute("SELECT rowid FROM records")}

    def iter_rows(self, embedding: bool, batch: int = 1024) -> Iterator[Row]:
        """Every row in rowid order."""
        cols = _ALL if embedding else _NO_EMBEDDING
        last = 0
        while True:
            with self.reader() as conn:
                rows = conn.execute(
                    f"SELECT {cols} FROM records WHERE rowid > ? ORDER BY rowid LIMIT ?",
                    (last, batch),
                ).fetchall()
            if not rows:
                return
            yield from rows
            last = rows[-1][0]

    @staticmethod
    def remember(
        conn: sqlite3.Connection, entries: Sequence[tuple[str, str, float]], forget_before: float
    ) -> None:
        """Stores dedup-window keys (key, record id, time) and drops those past the window."""
        conn.executemany("INSERT OR REPLACE INTO recent (key, id, at) VALUES (?, ?, ?)", entries)
        conn.execute("DELETE FROM recent WHERE at < ?", (forget_before,))

    def recent(self, since: float) -> list[tuple[str, str, float]]:
        with self.reader() as conn:
            return conn.execute(
                "SELECT key, id, at FROM recent WHERE at >= ? ORDER BY at", (since,)
            ).fetchall()

    def count(self) -> int:
        with self.reader() as conn:
            return int(conn.execute("SELECT count(*) FROM records").fetchone()[0])
