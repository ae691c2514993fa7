"""The change log of ``memlane.storage.base`` written once in SQL: ``SQLStore``.

Both backends keep the same tables (``meta``, ``records``, ``recent``,
``tombstones``) and run the same statements on them; a backend is a dialect of
this class that supplies what really differs (``memlane.storage.dialect``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

from memlane.coerce import MAX_COUNT
from memlane.errors import (
    ConflictError,
    CorruptFileError,
    UnknownIdError,
)
from memlane.schema import COLUMNS, SQL_TYPES, Row
from memlane.storage.base import Changes
from memlane.storage.dialect import Columns
from memlane.storage.rowcache import RowCache
from memlane.storage.sql_history import NO_EMBEDDING, SQLHistory, check_texts
from memlane.storage.vector_log import VectorLog, is_marker

__all__ = ["TYPES", "SQLStore"]

#: The SQL type of each of COLUMNS (PostgreSQL's names; SQLite binds values as they are).
TYPES = SQL_TYPES
_RECORDS: Columns = tuple(zip(COLUMNS, TYPES, strict=True))

_ALL = ", ".join(COLUMNS)


class SQLStore(SQLHistory):
    """The ``Store`` protocol over SQL; see the module docstring
    for what a dialect supplies."""

    #: Rows kept in process for reading search hits.
    _cache: RowCache | None = None
    #: The access counts the open transaction writes, with its change: the kept rows they
    #: change are brought up to date when it commits (``RowCache.accessed``).
    _accessed: list[tuple[dict[int, tuple[int, float]], int]]
    #: ``DELETE ... RETURNING`` is available.
    _RETURNING: ClassVar[bool]
    #: The function of the larger of two values.
    _GREATEST: ClassVar[str]
    #: What a tombstone written again for a rowid updates.
    _TOMBSTONE_UPDATE: ClassVar[str]
    #: Drops the tombstones up to a sequence number that may go (``{p}``: the table prefix).
    #: Statements (each given the sequence number) that drop tombstones up to it.
    _GC_TOMBSTONES: ClassVar[tuple[str, ...]]
    #: Identifies the database (made at creation): snapshots record it.
    store_id: str
    #: The indexed expression hash lookups constrain, and how many leading characters
    #: of a hash it holds (None: all of it).
    _HASH_EXPR: ClassVar[str] = "content_hash"
    _HASH_PREFIX: ClassVar[int | None] = None

    #: What the records selects add as a last column: an expression that is 1 when every
    #: value of the row has its column's type (SQLite's; empty where the database
    #: enforces the types itself).
    _TYPES_HOLD: ClassVar[str] = ""

    def _columns(self, embedding: bool) -> str:
        """The select list of a records row (its vector or NULL), then the type check."""
        cols = _ALL if embedding else NO_EMBEDDING
        return f"{cols}, {self._TYPES_HOLD}" if self._TYPES_HOLD else cols

    def _rows(self, conn: Any, sql: str, params: Any) -> list[Row]:
        """The records rows ``sql`` selects (with ``_columns``)."""
        fetched = conn.execute(sql, params).fetchall()
        if not self._TYPES_HOLD:
            return self._given_rows(self._vectors_in(list(map(Row._make, fetched))))
        if not all(r[-1] for r in fetched):
            raise CorruptFileError(
                f"reading records ({self.location}): a row holds a value of another "
                "type than its column's: the database file is damaged"
            )
        rows = [Row._make(r[:-1]) for r in fetched]
        check_texts(rows, "records", self.location)
        return self._given_rows(self._vectors_in(rows))

    # -- the vector file (an embedded store's: storage/vector_log.py) ---------------------

    #: Where the rows' vectors are, when not in the rows (None: in the rows).
    _log: VectorLog | None = None

    @property
    def vector_file(self) -> Path | None:
        return None if self._log is None else self._log.path

    def closing(self, writes_here: bool) -> None:
        """Close begins, then its last writes follow (the access counts, the
        tombstones' sweep)."""

    def held_here(self) -> bool:
        return False

    def unbounded(self, conn: Any) -> None:
        """Lets the transaction of ``conn`` sit idle between statements as long as it
        needs, where the database bounds it (``_UNBOUNDED``)."""
        if self._UNBOUNDED is not None:
            conn.execute(self._UNBOUNDED)

    def vector_file_end(self) -> int:
        return 0 if self._log is None else self._log.end

    def _vectors_in(self, rows: list[Row]) -> list[Row]:
        """``rows`` with the blob each marker names."""
        return rows if self._log is None else self._log.rows_in(rows)

    def _vectors_out(self, rows: Sequence[Row]) -> Sequence[Row]:
        """``rows`` as the database keeps them (see ``VectorLog.rows_out``)."""
        return rows if self._log is None else self._log.rows_out(rows)

    def _before_commit(self, conn: Any) -> None:
        if (log := self._log) is not None and log.staged:
            end, last = log.sync()
            self.set_meta(conn, "vector_log_end", str(end))
            if last is not None:
                self.set_meta(conn, "vector_log_last", f"{last[0]}:{last[1]}")

    def _committed(self) -> None:
        if self._log is not None:
            self._log.committed()
        if self._accessed and self._cache is not None:
            for accesses, seq in self._accessed:
                self._cache.accessed(accesses, seq, MAX_COUNT)
        self._accessed.clear()

    def _rolled_back(self) -> None:
        if self._log is not None:
            self._log.rolled_back()
        if self._accessed and self._cache is not None:
            for accesses, _ in self._accessed:
                self._cache.forget(accesses)
        self._accessed.clear()

    # -- writes --------------------------------------------------------------------------

    def _insert_rows(self, conn: Any, rows: Sequence[Row]) -> None:
        self._many(conn, f"{self._p}records", _RECORDS, rows)

    def insert(self, conn: Any, rows: Sequence[Row]) -> None:
        with self._refusals():
            self._insert_rows(conn, self._stored_rows(self._vectors_out(rows)))
        if self._cache is not None:
            # Safe before the commit: new rowids reach the indexes only after it, and a
            # rolled-back one is never asked for (rowids are not reused).
            self._cache.put(rows)

    def replace(
        self, conn: Any, rows: Sequence[Row], expected: Sequence[tuple[int, bool]] | None = None
    ) -> None:
        """Rewrites rows in place: every field but the rowid and the id (a record keeps
        its id, and its stored form: see ``_stored_id``).

        ``expected`` (one per row): the ``seq`` the row must still have and whether it
        must still be current (``valid_to`` NULL), as conditions of the statement; a row
        that no longer meets them raises ``ConflictError``, so a change never
        rewrites a version another writer changed after it was read."""
        sets = ", ".join(f"{c} = ?" for c in COLUMNS[2:])
        base = f"UPDATE {self._p}records SET {sets} WHERE rowid = ?"
        for i, r in enumerate(self._vectors_out(self._unchanged_vectors(conn, rows))):
            q = base
            params: tuple[Any, ...] = (*r[2:], r[0])
            if expected is not None:
                seq, current = expected[i]
                q += " AND seq = ?" + (" AND valid_to IS NULL" if current else "")
                params = (*params, seq)
            with self._refusals():
                changed = conn.execute(self._q(q), params).rowcount
            if changed == 0 and expected is not None:
                raise ConflictError(
                    f"memory {r[1]!r} was changed by another writer after this change read "
                    "it; nothing was stored"
                )
            if changed == 0:
                by = " (deleted by another process)" if self.shared else ""
                raise UnknownIdError(f"no memory with id {r[1]!r}{by}")
            if self._cache is not None:
                self._cache.invalidate([r.rowid], r.seq)

    def rows_for_write(
        self, conn: Any, ids: Sequence[str], embedding: bool = True
    ) -> dict[str, Row]:
        """The rows of ``ids`` that exist, by id, as the write transaction ``conn`` sees
        them, locked until the commit where the database locks rows: the state every
        change checks, inside its own transaction. The tenant's own form of an id (the
        longer) is taken before one another connection wrote."""
        q = f"SELECT {self._columns(embedding)} FROM {self._p}records WHERE "
        order = "" if self._id_prefix is None else " ORDER BY length(id) DESC"
        found: dict[str, Row] = {}
        for where, params in self._any("id", self._id_forms(ids), "text"):
            for row in self._rows(conn, self._q(q + where + order + self._FOR_UPDATE), params):
                found.setdefault(row.id, row)
        return found

    #: What locks a row a write transaction read (PostgreSQL's row locks; SQLite's one
    #: writer holds the database).
    _FOR_UPDATE: ClassVar[str] = ""
    _UNBOUNDED: ClassVar[str | None] = None

    def delete(
        self, conn: Any, rowids: Sequence[int], seq: int, actor: str | None = None
    ) -> set[int]:
        """Deletes ``rowids`` (those still there: another writer may have deleted some),
        keeping each in the history; returns the rowids this statement deleted."""
        p = self._p
        rowids = list(dict.fromkeys(rowids))
        self.record_history(conn, rowids, "delete", time.time(), actor, seq=seq)
        found: set[int] = set()
        for where, params in self._any("rowid", rowids, "int8"):
            # The dedup-window keys of these records go first (through recent_id), while
            # the records are there: a tenant sees a key only while it sees its record,
            # so a key left behind would be one it could neither delete nor write again.
            keys = f"DELETE FROM {p}recent WHERE id IN (SELECT id FROM {p}records WHERE {where})"
            conn.execute(self._q(keys), params)
            if self._RETURNING:
                q = self._q(f"DELETE FROM {p}records WHERE {where} RETURNING rowid")
                found.update(int(r[0]) for r in conn.execute(q, params))
            else:
                q = self._q(f"SELECT rowid FROM {p}records WHERE {where}")
                found.update(int(r[0]) for r in conn.execute(q, params))
                conn.execute(self._q(f"DELETE FROM {p}records WHERE {where}"), params)
        self._many(
            conn,
            f"{p}tombstones",
            (("rowid", "int8"), ("seq", "int8")),
            [(r, seq) for r in rowids],
            f" ON CONFLICT (rowid) DO UPDATE SET {self._TOMBSTONE_UPDATE}",
        )
        if self._cache is not None:
            self._cache.invalidate(rowids, seq)
        return found

    def record_accesses(self, conn: Any, accesses: dict[int, tuple[int, float]], seq: int) -> None:
        if self._cache is not None:
            # Where this process is the only writer, the rows stay kept, brought up to
            # date at the commit: dropped, the records a search returns most often would
            # each be read from the database again after every flush.
            keep = not self.shared
            self._cache.invalidate(accesses, seq, keep=keep)
            if keep:
                self._accessed.append((accesses, seq))
        j, params = self._relation(
            (("id_", "int8"), ("n", "int8"), ("at", "float8")),
            [(rowid, n, at) for rowid, (n, at) in accesses.items()],
        )
        # One statement: SQLite runs it without taking the GIL back row by row, so
        # a flush does not stall searches in other threads. A count saturates at the
        # column's largest (past it SQLite stored a REAL, PostgreSQL refused every flush).
        p, top = self._p, MAX_COUNT
        conn.execute(
            self._q(
                f"UPDATE {p}records SET access_count = CASE WHEN j.n > {top} - access_count "
                f"THEN {top} ELSE access_count + j.n END, "
                f"last_accessed_at = {self._GREATEST}(last_accessed_at, j.at), seq = ? "
                f"FROM {j} WHERE {p}records.rowid = j.id_"
            ),
            (seq, *params),
        )

    def _unchanged_vectors(self, conn: Any, rows: Sequence[Row]) -> Sequence[Row]:
        """``rows`` whose blob is the one their row's marker names, with that marker
        (a change of other fields appends no vector)."""
        if (log := self._log) is None or not rows:
            return rows
        q = f"SELECT embedding FROM {self._p}records WHERE rowid = ?"
        out = []
        for r in rows:
            stored = conn.execute(q, (r.rowid,)).fetchone()
            m = None if stored is None else stored[0]
            same = r.embedding and is_marker(m) and log.blobs([(r.rowid, m)]) == [r.embedding]
            out.append(r._replace(embedding=m) if same else r)
        return out

    def set_embeddings(self, conn: Any, rows: Sequence[tuple[int, bytes | None]], seq: int) -> None:
        if self._cache is not None:
            self._cache.invalidate([r for r, _ in rows], seq)
        if (log := self._log) is not None:
            given = [(r, b) for r, b in rows if b]
            markers = dict(zip((r for r, _ in given), log.stage(given), strict=True))
            rows = [(r, markers.get(r, b)) for r, b in rows]
        self._each(
            conn,
            self._q(
                f"UPDATE {self._p}records SET embedding = ?, seq = ?, content_seq = ? "
                "WHERE rowid = ?"
            ),
            [(blob, seq, seq, rowid) for rowid, blob in rows],
        )

    def texts(self, conn: Any) -> list[tuple[int, str]]:
        rows = conn.execute(f"SELECT rowid, text FROM {self._p}records ORDER BY rowid")
        return [(int(r[0]), str(r[1])) for r in rows]

    def remember(
        self, conn: Any, entries: Sequence[tuple[str, str, float]], forget_before: float
    ) -> None:
        latest = {key: (rid, at) for key, rid, at in entries}  # one row per key per statement
        self._many(
            conn,
            f"{self._p}recent",
            (("key", "text"), ("id", "text"), ("at", "float8")),
            [(key, self._stored_id(rid), at) for key, (rid, at) in latest.items()],
            " ON CONFLICT (key) DO UPDATE SET id = excluded.id, at = excluded.at",
        )
        conn.execute(self._q(f"DELETE FROM {self._p}recent WHERE at < ?"), (forget_before,))

    def gc_tombstones(self, upto: int) -> None:
        with self.transaction() as conn:
            for statement in self._GC_TOMBSTONES:
                conn.execute(self._q(statement.format(p=self._p)), (upto,))

    def forgotten(self) -> int:
        return self.meta_count("forgotten")

    # -- reads ---------------------------------------------------------------------------

    def rows_by_rowid(
        self, rowids: Sequence[int], embedding: bool = False, *, keep: bool = True
    ) -> dict[int, Row]:
        """The rows of ``rowids`` that exist. Rows read from the database are kept in the
        row cache, or with ``keep=False`` dropped from it (not left in an older state)."""
        if not rowids:
            return {}
        found: dict[int, Row] = {}
        if not embedding and self._cache is not None:
            found, missing = self._cache.get(rowids)
            if not missing:
                return found
            rowids = missing
        q = f"SELECT {self._columns(embedding)} FROM {self._p}records WHERE "

        def run(conn: Any) -> dict[int, Row]:
            out: dict[int, Row] = {}
            for where, params in self._any("rowid", rowids, "int8"):
                for row in self._rows(conn, self._q(q + where), params):
                    out[row.rowid] = row
            return out

        fetched = self._read(run)
        if self._cache is not None:
            if keep:
                self._cache.put(fetched.values())
            else:
                self._cache.forget(fetched)
        found.update(fetched)
        return found

    def row_by_id(self, record_id: str, embedding: bool = False) -> Row | None:
        cols = self._columns(embedding)
        where, params = next(self._any("id", self._id_forms([record_id]), "text"))
        # The tenant's own form (the longer) before one another connection wrote.
        order = "" if self._id_prefix is None else " ORDER BY length(id) DESC"
        q = self._q(f"SELECT {cols} FROM {self._p}records WHERE {where}{order}")
        rows = self._read(lambda c: self._rows(c, q, params))
        return rows[0] if rows else None

    def existing_ids(self, ids: Sequence[str], now: float | None = None) -> set[str]:
        # At ``now``, an expired record's id is free: no read returns it, and the write
        # that takes the id deletes it first (``expired_ids``).
        live = "" if now is None else "(expires_at IS NULL OR expires_at > ?) AND "
        q = f"SELECT id FROM {self._p}records WHERE {live}"
        first = () if now is None else (now,)

        def run(conn: Any) -> set[str]:
            out: set[str] = set()
            for where, params in self._any("id", self._id_forms(ids), "text"):
                found = conn.execute(self._q(q + where), (*first, *params))
                out.update(self._given_id(r[0]) for r in found)
            return out

        return self._read(run) if ids else set()

    def expired_ids(self, conn: Any, ids: Sequence[str], now: float) -> list[int]:
        """Rowids of the records holding ``ids`` that expired at ``now``, read in the
        caller's transaction."""
        q = f"SELECT rowid FROM {self._p}records WHERE expires_at <= ? AND "
        out: list[int] = []
        for where, params in self._any("id", self._id_forms(ids), "text"):
            out += [int(r[0]) for r in conn.execute(self._q(q + where), (now, *params))]
        return out

    def rows_by_hash(self, hashes: Sequence[str], conn: Any = None) -> list[Row]:
        """The rows (without vectors) whose ``content_hash`` is one of ``hashes``, by rowid
        (read in the transaction of ``conn`` when given).

        The query constrains the indexed expression (``_HASH_EXPR``) and nothing else;
        the full hashes are compared here."""
        cols = self._columns(False)
        q = f"SELECT {cols} FROM {self._p}records WHERE "
        wanted = set(hashes)
        keys = sorted({h[: self._HASH_PREFIX] for h in wanted})

        def run(conn: Any) -> list[Row]:
            out: list[Row] = []
            for where, params in self._any(self._HASH_EXPR, keys, "text"):
                # A row sharing only the prefix is not a match.
                rows = self._rows(conn, self._q(q + where), params)
                out.extend(r for r in rows if r.content_hash in wanted)
            return out

        found = (run(conn) if conn is not None else self._read(run)) if keys else []
        found.sort(key=lambda r: int(r[0]))
        return found

    def rows_since(self, seq: int, batch: int = 4096) -> Iterator[list[Row]]:
        """Rows written after change ``seq``, with embeddings, in rowid order, in batches."""
        # The seq index answers this without touching the rows.
        q = self._q(f"SELECT rowid FROM {self._p}records WHERE seq > ?")
        rowids = sorted(self._read(lambda c: [r[0] for r in c.execute(q, (seq,))]))
        # This refreshes the row cache too (as fresh as the indexes), keeping only the last
        # rows it holds: keeping a million to drop most was a tenth of a cold open.
        kept_from = len(rowids) - (self._cache.capacity if self._cache is not None else 0)
        for start in range(0, len(rowids), batch):
            part = rowids[start : start + batch]
            rows = self.rows_by_rowid(part, True, keep=start + len(part) > kept_from)
            yield [rows[r] for r in part if r in rows]

    def changes_since(self, seq: int) -> Changes:
        """What the changes after ``seq`` wrote, as one state of the database shows them:
        the newest change, the history entries those changes made (each with its change,
        in the order they were made) and the rows they wrote last (without vectors)."""
        p = self._p
        newest = self._q(f"SELECT value FROM {p}meta WHERE key = 'seq'")
        # Both are answered by an index on the change number (history_change, records_seq);
        # sorted here, as SQLite would rather walk the whole history in its order.
        entries = self._q(f"{self._history_select(changes=True)} WHERE change_seq > ?")
        rows = self._q(f"SELECT {self._columns(False)} FROM {p}records WHERE seq > ?")

        def run(conn: Any) -> Changes:
            conn.execute(self._SNAPSHOT)
            try:
                upto = int(conn.execute(newest).fetchone()[0])
                fetched = self._checked_history(conn.execute(entries, (seq,)).fetchall())
                made = [
                    (int(r[-1]), self._given_entry(r[:-1]))
                    for r in sorted(fetched, key=lambda r: r[0])
                ]
                written = self._rows(conn, rows, (seq,))
            except BaseException:
                self._rollback(conn)
                raise
            conn.execute("COMMIT")
            return upto, made, written

        return self._read(run)

    def tombstones_since(self, seq: int) -> list[int]:
        q = self._q(f"SELECT rowid FROM {self._p}tombstones WHERE seq > ?")
        gone: list[int] = self._read(lambda c: [r[0] for r in c.execute(q, (seq,))])
        if self._cache is not None:
            self._cache.forget(gone)
        return gone

    def count_tombstones(self) -> int:
        q = f"SELECT count(*) FROM {self._p}tombstones"
        return int(self._read(lambda c: c.execute(q).fetchone()[0]))

    def all_rowids(self) -> set[int]:
        q = f"SELECT rowid FROM {self._p}records"
        return self._read(lambda c: {r[0] for r in c.execute(q)})

    def vectors(self, after: int, limit: int) -> list[tuple[int, bytes]]:
        """``(rowid, embedding)`` of up to ``limit`` rows with a vector beyond rowid
        ``after``, in rowid order (an engine snapshot leaves the vectors out: opening
        reads them here, a chunk at a time)."""
        q = self._q(
            f"SELECT rowid, embedding FROM {self._p}records "
            "WHERE rowid > ? AND embedding IS NOT NULL ORDER BY rowid LIMIT ?"
        )
        rows: list[tuple[int, bytes]] = self._read(
            lambda c: c.execute(q, (after, limit)).fetchall()
        )
        if (log := self._log) is not None:
            found = iter(log.blobs([(r, b) for r, b in rows if is_marker(b)]))
            return [(r, next(found) if is_marker(b) else b) for r, b in rows]
        return rows

    def iter_rows(self, embedding: bool, batch: int = 1024) -> Iterator[Row]:
        """Every row in rowid order."""
        cols = self._columns(embedding)
        q = self._q(f"SELECT {cols} FROM {self._p}records WHERE rowid > ? ORDER BY rowid LIMIT ?")
        last = 0

        def page(conn: Any) -> list[Row]:
            return self._rows(conn, q, (last, batch))

        while True:
            rows = self._read(page)
            if not rows:
                return
            yield from rows
            last = rows[-1][0]

    def warm_cache(self, below: int, batch: int = 512) -> int | None:
        """Reads up to ``batch`` rows under rowid ``below``, newest first, into the row
        cache where it has room (``RowCache.offer``); returns the rowid to go on
        under, or None once the cache is full or every row was read.

        A process that opens a store finds its hits in neither the cache nor the CPU
        caches, and reading them from the database after the embedder's run costs several
        times what the cache does (benches/README.md, "A store opened again"). Batches keep
        each read short, so the calls of other threads never wait long for the GIL."""
        cache = self._cache
        if cache is None or not cache.room():
            return None
        cols = self._columns(False)
        q = self._q(
            f"SELECT {cols} FROM {self._p}records WHERE rowid < ? ORDER BY rowid DESC LIMIT ?"
        )
        rows = self._read(lambda c: self._rows(c, q, (below, batch)))
        cache.offer(rows)
        return rows[-1].rowid if len(rows) == batch and cache.room() else None

    def recent(self, since: float) -> list[tuple[str, str, float]]:
        q = self._q(f"SELECT key, id, at FROM {self._p}recent WHERE at >= ? ORDER BY at")
        rows = self._read(lambda c: c.execute(q, (since,)).fetchall())
        # Checked as records rows are: SQLite keeps whatever type a flipped bit gives a
        # value, and the window compared a key of bytes or a time of text raw (TypeError).
        for key, rid, at in rows:
            if not (isinstance(key, str) and isinstance(rid, str) and type(at) is float):
                raise CorruptFileError(
                    f"reading the dedup window ({self.location}): a row holds a value of "
                    "another type than its column's: the database file is damaged"
                )
        return [(key, self._given_id(rid), at) for key, rid, at in rows]

    def expiring(self) -> bool:
        """Whether any record has an ``expires_at`` (the partial index answers)."""
        q = f"SELECT 1 FROM {self._p}records WHERE expires_at IS NOT NULL LIMIT 1"
        return self._read(lambda c: c.execute(q).fetchone() is not None)

    def expired(self, now: float, limit: int = 1000) -> list[int]:
        """Rowids of up to ``limit`` records expired at ``now``, soonest first."""
        q = self._q(
            f"SELECT rowid FROM {self._p}records WHERE expires_at <= ? ORDER BY expires_at LIMIT ?"
        )
        return self._read(lambda c: [int(r[0]) for r in c.execute(q, (now, limit))])

    def count(self) -> int:
        q = f"SELECT count(*) FROM {self._p}records"
        return int(self._read(lambda c: c.execute(q).fetchone()[0]))
