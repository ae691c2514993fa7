"""What ``memlane.Memory`` needs from a database: the ``Store`` protocol.

Two backends implement it: ``SQLiteStore`` (the
embedded store, one process) and ``PostgresStore``
(shared by many processes), both dialects of ``SQLStore``,
which holds the statements. Both keep the same rows (``COLUMNS``) and the
same change log (``memlane.schema`` declares the rows): every write
transaction takes the next change sequence number and stamps the rows it
writes with it (``seq``, and ``content_seq`` when the text or vector
changed); a deletion leaves a tombstone with its number. Commit order equals
sequence order, so a reader that has applied every change up to ``n`` needs
only the rows and tombstones above ``n``.

``conn`` arguments are the connection of an open ``Store.transaction``;
reads without one see every committed write.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

from memlane.schema import COLUMNS, Row

__all__ = ["COLUMNS", "Changes", "HistoryEntry", "Row", "Store", "held_here"]

#: A history entry: the version a change replaced, the change (``update``, ``supersede``,
#: ``delete``), when, by whom, and the record that superseded the version.
HistoryEntry = tuple[Row, str, float, str | None, str | None]
#: What the changes after a sequence number wrote (``Store.changes_since``): the newest
#: change, the history entries they made with the change of each, and their rows.
Changes = tuple[int, list[tuple[int, HistoryEntry]], list[Row]]


def held_here(lock: object) -> bool:
    """Whether this thread holds ``lock``, a ``threading.RLock`` (asked as
    ``threading.Condition`` asks it)."""
    owned: Callable[[], bool] = getattr(lock, "_is_owned")  # noqa: B009 (not in the stubs)
    return owned()


class Store(Protocol):
    #: True when other processes write the same database (their changes must be followed).
    shared: bool
    #: Identifies the database, made when it was created: a snapshot records it.
    store_id: str
    #: The tenant the connection is confined to (``FIELD:VALUE``, row-level security),
    #: "" for none. A tenant sees only some of the records: store-wide state is not its
    #: to change.
    tenant: str
    #: The change this process committed last (0 for none; PostgreSQL's stays 0: its
    #: follower applies any change, this process's own too, that the engine lacks).
    committed_seq: int

    @property
    def vector_file(self) -> Path | None:
        """The file beside the database that holds the records' vectors, which an open
        reads in one pass (``Engine.fill_log``); None where the rows hold them."""
        ...

    def vector_file_end(self) -> int:
        """How far the vector file holds committed entries."""
        ...

    def closing(self, writes_here: bool) -> None:
        """Close begins (``writes_here`` False), then its last writes follow on this
        thread (True). On PostgreSQL the calls waiting for a pooled connection then
        fail at once, and close's writes take a connection of their own when every
        pooled one is held (by reads such as exports)."""
        ...

    def held_here(self) -> bool:
        """Whether this thread holds the database's lock, which ``close`` takes."""
        ...

    def close(self) -> None: ...

    def transaction(self) -> AbstractContextManager[Any]:
        """One write transaction: committed (durably) on exit, rolled back on an exception."""
        ...

    def unbounded(self, conn: Any) -> None:
        """Lets the transaction of ``conn`` sit idle between statements as long as it
        needs (PostgreSQL ends a session idle in its transaction after a bound)."""
        ...

    # -- meta and counters
    def get_meta(self, key: str, conn: Any = None) -> str | None: ...
    def set_meta(self, conn: Any, key: str, value: str) -> None: ...
    def meta_count(self, key: str, conn: Any = None) -> int:
        """The whole number ``key`` holds (0 where none), or ``CorruptFileError``."""
        ...

    # -- entries of the connection's tenant (another tenant's are neither seen nor touched)
    def set_tenant_meta(self, conn: Any, key: str, value: str) -> None: ...
    def tenant_meta_items(self, prefix: str) -> list[tuple[str, str]]:
        """The tenant's entries whose key starts with ``prefix``, in key order."""
        ...

    def add_tenant_meta(self, conn: Any, key: str, value: str) -> bool:
        """Sets ``key`` to ``value`` if it holds nothing now; whether it did."""
        ...

    def swap_tenant_meta(self, conn: Any, key: str, old: str, new: str) -> bool:
        """Sets ``key`` to ``new`` if it holds ``old`` now; whether it did."""
        ...

    def delete_tenant_meta(self, conn: Any, key: str) -> None: ...
    def trim_tenant_meta(self, conn: Any, prefix: str, keep: int) -> None:
        """Deletes the tenant's entries under ``prefix`` but the ``keep`` last in key order."""
        ...

    def next_seq(self, conn: Any) -> int:
        """The sequence number of the transaction ``conn`` is in (called once per transaction)."""
        ...

    def seq(self) -> int:
        """The newest committed sequence number."""
        ...

    def reserve_rowids(self, count: int) -> int:
        """The first of ``count`` consecutive rowids never used (nor handed out) before."""
        ...

    def forgotten(self) -> int:
        """Tombstones up to this sequence number are gone: replaying from an older one
        would miss deletions."""
        ...

    # -- writes (inside a transaction)
    def insert(self, conn: Any, rows: Sequence[Row]) -> None: ...
    def replace(
        self, conn: Any, rows: Sequence[Row], expected: Sequence[tuple[int, bool]] | None = None
    ) -> None:
        """Rewrites whole rows that exist (same rowid); with ``expected``, only rows that
        still have that ``seq`` (and are current, where asked), else ConflictError."""
        ...

    def rows_for_write(
        self, conn: Any, ids: Sequence[str], embedding: bool = True
    ) -> dict[str, Row]:
        """The rows of ``ids`` that exist, by id, as the write transaction sees them,
        locked."""
        ...

    def delete(
        self, conn: Any, rowids: Sequence[int], seq: int, actor: str | None = None
    ) -> set[int]:
        """Deletes rows, keeping each in the history (``actor``: who deleted them);
        returns the rowids deleted."""
        ...

    def record_history(
        self,
        conn: Any,
        rowids: Sequence[int],
        event: str,
        at: float,
        actor: str | None = None,
        next_id: str | None = None,
        *,
        seq: int,
    ) -> None:
        """Keeps the current versions of ``rowids`` in the history, as replaced by ``event``
        in change ``seq``."""
        ...

    def changes_since(self, seq: int) -> Changes:
        """What the changes after ``seq`` wrote, as one state of the database shows them:
        the newest change, the history entries they made (each with its change, in the
        order they were made) and the rows they wrote last (without vectors)."""
        ...

    def history(self, ids: Sequence[str]) -> list[HistoryEntry]:
        """The history entries of ``ids`` (version, event, at, actor, next id), oldest first."""
        ...

    def iter_history(self) -> Iterator[HistoryEntry]:
        """Every history entry, oldest first."""
        ...

    def insert_history(self, conn: Any, entries: Sequence[HistoryEntry]) -> None:
        """Adds history entries as given (an import's)."""
        ...

    def superseded_by(self, record_id: str) -> str | None:
        """The id of the record that ``record_id`` superseded, if any."""
        ...

    def record_accesses(
        self, conn: Any, accesses: dict[int, tuple[int, float]], seq: int
    ) -> None: ...
    def set_embeddings(self, conn: Any, rows: Sequence[tuple[int, bytes | None]], seq: int) -> None:
        """Replaces the vectors of these rowids (a re-embedding)."""
        ...

    def texts(self, conn: Any) -> list[tuple[int, str]]:
        """(rowid, text) of every record, in rowid order."""
        ...

    def remember(
        self, conn: Any, entries: Sequence[tuple[str, str, float]], forget_before: float
    ) -> None:
        """Stores dedup-window keys (key, record id, time) and drops those past the window."""
        ...

    def gc_tombstones(self, upto: int) -> None:
        """Tombstones up to ``upto`` may go (an index snapshot reflects them)."""
        ...

    # -- reads
    def rows_by_rowid(self, rowids: Sequence[int], embedding: bool = False) -> dict[int, Row]: ...
    def row_by_id(self, record_id: str, embedding: bool = False) -> Row | None: ...
    def existing_ids(self, ids: Sequence[str], now: float | None = None) -> set[str]:
        """The ``ids`` records hold (at ``now``: those not expired then)."""
        ...

    def expired_ids(self, conn: Any, ids: Sequence[str], now: float) -> list[int]: ...
    def rows_by_hash(self, hashes: Sequence[str], conn: Any = None) -> list[Row]: ...
    def rows_since(self, seq: int, batch: int = 4096) -> Iterator[list[Row]]:
        """Rows written after change ``seq``, with embeddings, in rowid order, in batches."""
        ...

    def tombstones_since(self, seq: int) -> list[int]: ...
    def count_tombstones(self) -> int:
        """How many deletions are kept for followers (read by count, not row by row)."""
        ...

    def all_rowids(self) -> set[int]: ...
    def iter_rows(self, embedding: bool, batch: int = 1024) -> Iterator[Row]:
        """Every row in rowid order."""
        ...

    def vectors(self, after: int, limit: int) -> list[tuple[int, bytes]]:
        """``(rowid, embedding)`` of up to ``limit`` rows with a vector beyond rowid
        ``after``, in rowid order."""
        ...

    def recent(self, since: float) -> list[tuple[str, str, float]]: ...
    def count(self) -> int: ...
    def expiring(self) -> bool:
        """Whether any record has an ``expires_at``."""
        ...

    def expired(self, now: float, limit: int = 1000) -> list[int]:
        """Rowids of records expired at ``now``, soonest first."""
        ...

    # -- upkeep
    def warm_cache(self, below: int, batch: int = 512) -> int | None:
        """Reads a batch of rows under rowid ``below``, newest first, into the row cache;
        the rowid to go on under, or None when done."""
        ...

    def checkpoint(self) -> None: ...
    def wal_bytes(self) -> int: ...
    def follow(self, on_change: Callable[[], None]) -> None:
        """Calls ``on_change`` (from a thread of the store's) whenever another process may
        have committed; a store that is not shared never calls it."""
        ...
