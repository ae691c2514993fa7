"""How a record is stored, derived from its one declaration, ``MemoryRecord``.

A record's stored fields (``records.STORED``) are the columns of the ``records``
table, in their order, between the store's own columns: the row's key first (the
engine's id of the record) and the change numbers last. A field's type gives its
column's: a bool is a flag (0 or 1), the metadata dict is JSON text, the vector is a
blob, ``X | None`` is nullable. Two fields take another column name, because SQL
took theirs (``COLUMN_NAMES``). From these rules come ``COLUMNS``, the SQL types and
the ``CREATE TABLE`` of each dialect, and ``Row``: the typed tuple a store reads and
writes, which the engine reads by field name (``rust/py/src/rows.rs``).

``Row`` is a generated source file, ``memlane/row.py`` (``row_source``), because
mypy and IDEs read class bodies, not what runs at import; ``write_row`` rewrites it,
and a test fails when it is not current.
"""

from __future__ import annotations

import types
import typing
from pathlib import Path
from typing import Any, Literal, NamedTuple

import numpy as np

from memlane.records import STORED, MemoryRecord
from memlane.row import Row

__all__ = [
    "COLUMNS",
    "COLUMN_NAMES",
    "FLAGS",
    "HISTORY_COLUMNS",
    "PUBLIC_NAMES",
    "RECORD_COLUMNS",
    "SQL_TYPES",
    "Row",
    "history_table",
    "records_table",
    "row_source",
    "write_row",
]

#: A field's column where SQL took the field's name.
COLUMN_NAMES: dict[str, str] = {"table": "tbl", "unique": "uniq"}
#: Fields no two rows share.
_UNIQUE = frozenset({"id"})
#: The store's own columns: the row's key, a u64 the engine uses as the record's id,
#: then the change that last wrote the row and the one that last changed its text or
#: vector (the write path stamps a batch's change number by replacing the last two).
KEY = "rowid"
CHANGES = ("seq", "content_seq")

Dialect = Literal["sqlite", "postgres"]


class Column(NamedTuple):
    """A column of the records or the history table, as both dialects declare it."""

    name: str
    #: The column's Python type in ``Row``, as source text.
    python: str
    sqlite: str
    postgres: str
    nullable: bool = False
    flag: bool = False


# A field's Python type -> (Row's type, SQLite's, PostgreSQL's).
_KINDS: dict[Any, tuple[str, str, str]] = {
    str: ("str", "TEXT", "text"),
    float: ("float", "REAL", "float8"),
    int: ("int", "INTEGER", "int8"),
    bool: ("int", "INTEGER", "int2"),  # a flag: 0 or 1
    dict: ("str", "TEXT", "text"),  # the metadata as JSON text
    np.ndarray: ("bytes", "BLOB", "bytea"),  # the vector's blob
}


def _column(name: str, hint: Any) -> Column:
    nullable = isinstance(hint, types.UnionType)
    if nullable:
        (hint,) = [a for a in typing.get_args(hint) if a is not type(None)]
    python, sqlite, postgres = _KINDS[typing.get_origin(hint) or hint]
    if nullable:
        python += " | None"
    return Column(name, python, sqlite, postgres, nullable, hint is bool)


def _columns() -> tuple[Column, ...]:
    hints = typing.get_type_hints(MemoryRecord)
    stored = [_column(COLUMN_NAMES.get(f, f), hints[f]) for f in STORED]
    own = [_column(c, int) for c in (KEY, *CHANGES)]
    return (own[0], *stored, *own[1:])


_COLUMNS = _columns()
COLUMNS: tuple[str, ...] = tuple(c.name for c in _COLUMNS)
#: The columns that hold a bool as 0 or 1.
FLAGS: frozenset[str] = frozenset(c.name for c in _COLUMNS if c.flag)
#: The column of each of a record's stored fields, in ``STORED``'s order.
RECORD_COLUMNS: tuple[str, ...] = tuple(COLUMN_NAMES.get(f, f) for f in STORED)
#: A column's name in ``MemoryRecord`` (and in filters and add() items) where it differs.
PUBLIC_NAMES: dict[str, str] = {c: f for f, c in COLUMN_NAMES.items()}
#: PostgreSQL's type of each column (SQLite binds values as they are).
SQL_TYPES: tuple[str, ...] = tuple(c.postgres for c in _COLUMNS)


def row_source() -> str:
    """The text of ``memlane/row.py``: ``Row``, declared from the columns."""
    fields = "\n".join(f"    {c.name}: {c.python}" for c in _COLUMNS)
    return (
        '"""``Row``: one row of the ``records`` table.\n\n'
        "Generated from ``MemoryRecord`` by ``memlane.schema.row_source``: do not edit;\n"
        "``memlane.schema.write_row()`` rewrites it.\n"
        '"""\n\n'
        "from __future__ import annotations\n\n"
        "from typing import NamedTuple\n\n\n"
        "class Row(NamedTuple):\n"
        '    """One stored record as the database holds it: ``MemoryRecord``\'s stored\n'
        "    fields (a flag as 0 or 1, the metadata as JSON text, the vector as a blob)\n"
        '    between the store\'s own columns, the row\'s key and its change numbers."""\n\n'
        f"{fields}\n"
    )


def sqlite_types_hold(history: bool = False) -> str:
    """An SQLite expression over a records row (or, with ``history``, a history entry):
    1 when every value has its column's type.

    SQLite keeps whatever type a value was stored with, and a damaged file can give a
    value another one (a flipped bit in a row's header turns text into a blob): without
    this check such a row would reach the caller as a record whose id is bytes. ``typeof``
    reads only the row's header, not a long value."""
    checks = []
    # Not the records' rowid: an integer by construction (the history's is a column).
    of = (
        (*(c for c in _COLUMNS if c.name != "embedding"), *HISTORY_EXTRA)
        if history
        else _COLUMNS[1:]
    )
    for c in of:
        kinds = [c.sqlite.lower()] + (["null"] if c.nullable else [])
        quoted = ", ".join(f"'{k}'" for k in kinds)
        checks.append(f"typeof({c.name}) IN ({quoted})")
    return "(" + " AND ".join(checks) + ")"


def records_table(dialect: Dialect, table: str = "records") -> str:
    """The ``CREATE TABLE`` statement of the records table in ``dialect``."""
    sqlite = dialect == "sqlite"
    # SQLite: AUTOINCREMENT, so a rowid is never handed out twice.
    key = "INTEGER PRIMARY KEY AUTOINCREMENT" if sqlite else "bigint PRIMARY KEY"
    lines = [f"    {KEY} {key}"]
    for c in _COLUMNS[1:]:
        parts = [c.name, c.sqlite if sqlite else c.postgres]
        if not c.nullable:
            parts.append("NOT NULL")
        if PUBLIC_NAMES.get(c.name, c.name) in _UNIQUE:
            parts.append("UNIQUE")
        lines.append("    " + " ".join(parts))
    exists = "IF NOT EXISTS " if sqlite else ""
    return f"CREATE TABLE {exists}{table} (\n" + ",\n".join(lines) + "\n)"


#: The columns a history entry keeps of the version it replaced (all but the vector).
HISTORY_COLUMNS: tuple[str, ...] = tuple(c for c in COLUMNS if c != "embedding")

#: What a history entry adds: the change (``update``, ``supersede``, ``delete``), when
#: and by whom it was made, the record that superseded the version, and the sequence
#: number of the change that wrote the entry (which orders other processes' changes as
#: events; none for an imported entry, which no change of this store made).
HISTORY_EXTRA: tuple[Column, ...] = (
    Column("event", "str", "TEXT", "text"),
    Column("at", "float", "REAL", "float8"),
    Column("actor", "str | None", "TEXT", "text", nullable=True),
    Column("next_id", "str | None", "TEXT", "text", nullable=True),
    Column("change_seq", "int | None", "INTEGER", "int8", nullable=True),
)


def history_table(dialect: Dialect, table: str = "history") -> str:
    """The ``CREATE TABLE`` of the history: one entry per version a change replaced.

    The records table's columns (without constraints or the vector), so an entry is
    read back as a ``Row``, then ``HISTORY_EXTRA``; ``n`` orders entries."""
    sqlite = dialect == "sqlite"
    lines = [
        "    n INTEGER PRIMARY KEY AUTOINCREMENT"
        if sqlite
        else "    n bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY"
    ]
    for c in (*_COLUMNS, *HISTORY_EXTRA):
        if c.name != "embedding":
            kind = c.sqlite if sqlite else c.postgres
            lines.append(f"    {c.name} {kind}" + ("" if c.nullable else " NOT NULL"))
    exists = "IF NOT EXISTS " if sqlite else ""
    return f"CREATE TABLE {exists}{table} (\n" + ",\n".join(lines) + "\n)"


def write_row() -> None:
    """Rewrites ``row.py`` after a change of ``MemoryRecord``'s stored fields."""
    Path(__file__).with_name("row.py").write_text(row_source())
