"""The history of ``SQLStore`` (the versions changes replaced), and the checks every row
read from an embedded database gets, records and history entries alike.

A history entry is a records row (without its vector) and the change that replaced it,
so it is read back as a ``Row`` and checked as records rows are: each value's type (on
SQLite, which keeps whatever type a value was stored with) and its text against the
content hash written beside it. An entry that fails is ``CorruptFileError``: taken as
it is, ``Memory.history`` returned a text as bytes, or another text than the one the
change replaced, and an export raised a raw ``TypeError``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, ClassVar

from memlane.content_hash import content_hash
from memlane.errors import CorruptFileError
from memlane.schema import COLUMNS, HISTORY_COLUMNS, SQL_TYPES, Row
from memlane.storage.base import HistoryEntry
from memlane.storage.dialect import Columns, Dialect

__all__ = ["NO_EMBEDDING", "SQLHistory", "check_texts"]

#: The records columns, the vector's read as NULL.
NO_EMBEDDING = ", ".join("NULL" if c == "embedding" else c for c in COLUMNS)
_HISTORY = ", ".join(HISTORY_COLUMNS)
_HISTORY_TYPES: Columns = (
    *((c, t) for c, t in zip(COLUMNS, SQL_TYPES, strict=True) if c in HISTORY_COLUMNS),
    *(("event", "text"), ("at", "float8"), ("actor", "text"), ("next_id", "text")),
)


def check_texts(rows: Iterable[Row], what: str, location: str) -> None:
    """Refuses ``rows`` when a text does not match the content hash written beside it.

    A flipped bit inside a text leaves a text, of the right type and valid UTF-8: only
    its hash, written from the same text, tells. Taken as it is, a record would disagree
    with the index built from the text as written (a search for its own text missed it:
    benches/reliability.py's damaged-database trial)."""
    for r in rows:
        if content_hash(r.text) != r.content_hash:
            raise CorruptFileError(
                f"reading {what} ({location}): the text of record {r.id!r} does not match "
                "its content hash: the database file is damaged"
            )


def _entry(r: Sequence[Any]) -> HistoryEntry:
    """A history entry of a row of ``SQLHistory._history_select`` (``n`` first)."""
    width = len(COLUMNS) + 1
    event, at, actor, next_id = r[width : width + 4]
    return Row._make(r[1:width]), event, at, actor, next_id


class SQLHistory(Dialect):
    """The history table's statements, over a dialect."""

    #: What the history selects add as a last column: an expression that is 1 when every
    #: value of the entry has its column's type (SQLite's; empty where the database
    #: enforces the types itself).
    _HISTORY_TYPES_HOLD: ClassVar[str] = ""

    def _history_select(self, changes: bool = False) -> str:
        """The select list of history entries (``n`` first; ``changes``: with the change
        that wrote each, after its fields), then the type check, and ``FROM``."""
        cols = f"n, {NO_EMBEDDING}, event, at, actor, next_id"
        if changes:
            cols += ", change_seq"
        if self._HISTORY_TYPES_HOLD:
            cols += f", {self._HISTORY_TYPES_HOLD}"
        return f"SELECT {cols} FROM {self._p}history"

    def _checked_history(self, fetched: list[Any]) -> list[tuple[Any, ...]]:
        """The entries ``fetched`` by ``_history_select``, checked and without the type
        check's column."""
        rows: list[tuple[Any, ...]] = [tuple(r) for r in fetched]
        if self._HISTORY_TYPES_HOLD:
            if not all(r[-1] for r in rows):
                raise CorruptFileError(
                    f"reading the history ({self.location}): an entry holds a value of "
                    "another type than its column's: the database file is damaged"
                )
            rows = [r[:-1] for r in rows]
            check_texts((_entry(r)[0] for r in rows), "the history", self.location)
        return rows

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
        """Keeps the current versions of ``rowids`` in the history, as replaced by
        ``event`` (``update``, ``supersede``, ``delete``) at ``at`` in change ``seq``: one
        statement that copies the rows, so no version passes through Python."""
        p = self._p
        head = (
            f"INSERT INTO {p}history ({_HISTORY}, event, at, actor, next_id, change_seq) "
            f"SELECT {_HISTORY}, ?, ?, ?, ?, ? FROM {p}records WHERE "
        )
        if next_id is not None:
            next_id = self._stored_id(next_id)
        for where, params in self._any("rowid", rowids, "int8"):
            with self._refusals():
                conn.execute(self._q(head + where), (event, at, actor, next_id, seq, *params))

    def history(self, ids: Sequence[str]) -> list[HistoryEntry]:
        """The history entries of ``ids``, oldest first."""
        q = f"{self._history_select()} WHERE "

        def run(conn: Any) -> list[tuple[Any, ...]]:
            out: list[tuple[Any, ...]] = []
            for where, params in self._any("id", self._id_forms(ids), "text"):
                out.extend(self._checked_history(conn.execute(self._q(q + where), params)))
            return out

        found = self._read(run) if ids else []
        found.sort(key=lambda r: r[0])
        return [self._given_entry(r) for r in found]

    def _given_entry(self, r: Sequence[Any]) -> HistoryEntry:
        row, event, at, actor, next_id = _entry(r)
        if self._id_prefix is None:
            return row, event, at, actor, next_id
        given = None if next_id is None else self._given_id(next_id)
        return row._replace(id=self._given_id(row.id)), event, at, actor, given

    def iter_history(self, batch: int = 1024) -> Iterator[HistoryEntry]:
        """Every history entry, oldest first."""
        q = self._q(f"{self._history_select()} WHERE n > ? ORDER BY n LIMIT ?")
        last = 0

        def page(conn: Any) -> list[tuple[Any, ...]]:
            return self._checked_history(conn.execute(q, (last, batch)).fetchall())

        while True:
            rows = self._read(page)
            if not rows:
                return
            yield from map(self._given_entry, rows)
            last = rows[-1][0]

    def insert_history(self, conn: Any, entries: Sequence[HistoryEntry]) -> None:
        """Adds history entries as given (an import's)."""
        rows = []
        for row, event, at, actor, next_id in entries:
            stored = row._replace(id=self._stored_id(row.id))
            successor = None if next_id is None else self._stored_id(next_id)
            columns = (getattr(stored, c) for c in HISTORY_COLUMNS)
            rows.append((*columns, event, at, actor, successor))
        with self._refusals():
            self._many(conn, f"{self._p}history", _HISTORY_TYPES, rows)

    def superseded_by(self, record_id: str) -> str | None:
        """The id of the record that ``record_id`` superseded, if any."""
        where, params = next(self._any("next_id", self._id_forms([record_id]), "text"))
        q = self._q(
            f"SELECT id FROM {self._p}history WHERE {where} AND event = 'supersede' "
            "ORDER BY at LIMIT 1"
        )
        rows = self._read(lambda c: list(c.execute(q, params)))
        if not rows:
            return None
        if not isinstance(found := rows[0][0], str):
            raise CorruptFileError(
                f"reading the history ({self.location}): an entry's id is not a text: "
                "the database file is damaged"
            )
        return self._given_id(found)
