"""The record schema, declared once: ``Row``.

Each field of ``Row`` is a column of the ``records`` table, in order.
Everything else is derived from it: ``COLUMNS``, the SQL types and the
``CREATE TABLE`` of each dialect (``records_table``), the fields the
engine reads (by name, from ``Row._fields``: ``rust/py/src/rows.rs``; and
``Engine.prepare`` takes rows) and which columns are ``MemoryRecord``'s
fields, under which names (``RECORD_COLUMNS``, ``PUBLIC_NAMES``). A field's Python
type gives its SQL type; ``X | None`` makes it nullable; ``Annotated`` adds a
constraint, marks the store's own columns or gives the public name.
"""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass
from typing import Annotated, Any, Literal, NamedTuple

__all__ = [
    "COLUMNS",
    "FLAGS",
    "HISTORY_COLUMNS",
    "PUBLIC_NAMES",
    "RECORD_COLUMNS",
    "SQL_TYPES",
    "Public",
    "Row",
    "history_table",
    "records_table",
]

#: The table's key: a u64 the engine uses as the record's id.
PRIMARY_KEY = "primary key"
UNIQUE = "unique"
#: A bool stored as a small integer (0 or 1).
FLAG = "flag"
#: The store's bookkeeping, not a field of ``MemoryRecord``.
STORE_ONLY = "store only"


@dataclass(frozen=True, slots=True)
class Public:
    """A column's name in ``MemoryRecord`` (and in filters and add() items) where it
    differs from the column's: ``table`` and ``unique`` are SQL keywords."""

    name: str


class Row(NamedTuple):
    """One stored record, as the database holds it (the ``records`` table's columns)."""

    rowid: Annotated[int, PRIMARY_KEY, STORE_ONLY]
    id: Annotated[str, UNIQUE]
    text: str
    tbl: Annotated[str, Public("table")]
    type: str
    agent_id: str | None
    user_id: str | None
    room_id: str | None
    world_id: str | None
    session_id: str | None
    namespace: str | None
    #: Who said it, for a conversation turn: "user" for the store's own person, the
    #: agent's or the other party's name otherwise; None for a record that is no turn.
    speaker: str | None
    importance: float
    evergreen: Annotated[int, FLAG]
    uniq: Annotated[int, FLAG, Public("unique")]
    metadata: str
    created_at: float
    updated_at: float
    last_accessed_at: float
    access_count: int
    #: When the record stopped being true (superseded); None while it is.
    valid_to: float | None
    #: When the record expires (no read returns it from then on); None: never.
    expires_at: float | None
    #: When the store learned the record (set by the store, never by a caller).
    recorded_at: float
    content_hash: str
    embedding: bytes | None
    #: The change that last wrote the row, and the one that last changed its text or vector.
    seq: Annotated[int, STORE_ONLY]
    content_seq: Annotated[int, STORE_ONLY]


COLUMNS: tuple[str, ...] = Row._fields
# The write path stamps a batch's change number by replacing the last two fields.
if COLUMNS[-2:] != ("seq", "content_seq"):  # pragma: no cover - a schema edit out of step
    raise ImportError("Row must end with seq and content_seq")

Dialect = Literal["sqlite", "postgres"]

# SQL type per Python type (and per FLAG), per dialect.
_TYPES: dict[Any, tuple[str, str]] = {
    int: ("INTEGER", "int8"),
    float: ("REAL", "float8"),
    str: ("TEXT", "text"),
    bytes: ("BLOB", "bytea"),
    FLAG: ("INTEGER", "int2"),
}


def _columns() -> tuple[tuple[str, tuple[str, str], bool, tuple[Any, ...]], ...]:
    """(name, (sqlite type, postgres type), nullable, markers) per field."""
    hints = typing.get_type_hints(Row, include_extras=True)
    out = []
    for name in COLUMNS:
        hint = hints[name]
        markers: tuple[Any, ...] = ()
        if typing.get_origin(hint) is Annotated:
            hint, *extra = typing.get_args(hint)
            markers = tuple(extra)
        nullable = False
        if isinstance(hint, types.UnionType):
            args = [a for a in typing.get_args(hint) if a is not type(None)]
            (hint,) = args
            nullable = True
        sql = _TYPES[FLAG if FLAG in markers else hint]
        out.append((name, sql, nullable, markers))
    return tuple(out)


_FIELDS = _columns()

#: The columns that hold a bool as 0 or 1.
FLAGS: frozenset[str] = frozenset(name for name, _, _, markers in _FIELDS if FLAG in markers)

#: The columns a ``MemoryRecord`` holds: all but the store's bookkeeping (the rowid,
#: the engine's key, and the change numbers). A record's field is found by name.
RECORD_COLUMNS: tuple[str, ...] = tuple(
    name for name, _, _, markers in _FIELDS if STORE_ONLY not in markers
)
#: A column's name in ``MemoryRecord`` where it differs (its ``Public`` marker).
PUBLIC_NAMES: dict[str, str] = {
    name: m.name for name, _, _, markers in _FIELDS for m in markers if isinstance(m, Public)
}

#: PostgreSQL's type of each column (SQLite binds values as they are).
SQL_TYPES: tuple[str, ...] = tuple(sql[1] for _, sql, _, _ in _FIELDS)


def sqlite_types_hold() -> str:
    """An SQLite expression over a records row: 1 when every value has its column's type.

    SQLite keeps whatever type a value was stored with, and a damaged file can give a
    value another one (a flipped bit in a row's header turns text into a blob): without
    this check such a row would reach the caller as a record whose id is bytes. ``typeof``
    reads only the row's header, not a long value."""
    checks = []
    for name, sql, nullable, markers in _FIELDS:
        if PRIMARY_KEY in markers:
            continue  # the rowid: an integer by construction
        kinds = [sql[0].lower()] + (["null"] if nullable else [])
        quoted = ", ".join(f"'{k}'" for k in kinds)
        checks.append(f"typeof({name}) IN ({quoted})")
    return "(" + " AND ".join(checks) + ")"


def records_table(dialect: Dialect, table: str = "records") -> str:
    """The ``CREATE TABLE`` statement of the records table in ``dialect``."""
    lines = []
    for name, sql, nullable, markers in _FIELDS:
        kind = sql[0] if dialect == "sqlite" else sql[1]
        parts = [name, kind]
        if PRIMARY_KEY in markers:
            # SQLite: AUTOINCREMENT, so a rowid is never handed out twice.
            parts = [
                name,
                "INTEGER PRIMARY KEY AUTOINCREMENT"
                if dialect == "sqlite"
                else "bigint PRIMARY KEY",
            ]
        elif not nullable:
            parts.append("NOT NULL")
        if UNIQUE in markers:
            parts.append("UNIQUE")
        lines.append("    " + " ".join(parts))
    exists = "IF NOT EXISTS " if dialect == "sqlite" else ""
    return f"CREATE TABLE {exists}{table} (\n" + ",\n".join(lines) + "\n)"


#: The columns a history entry keeps of the version it replaced (all but the vector).
HISTORY_COLUMNS: tuple[str, ...] = tuple(c for c in COLUMNS if c != "embedding")

#: What a history entry adds: the change (``update``, ``supersede``, ``delete``), when
#: and by whom it was made, the record that superseded the version, and the sequence
#: number of the change that wrote the entry (which orders other processes' changes as
#: events; none for an imported entry, which no change of this store made).
HISTORY_EXTRA: tuple[tuple[str, tuple[str, str], bool], ...] = (
    ("event", ("TEXT", "text"), False),
    ("at", ("REAL", "float8"), False),
    ("actor", ("TEXT", "text"), True),
    ("next_id", ("TEXT", "text"), True),
    ("change_seq", ("INTEGER", "int8"), True),
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
    fields = [(name, sql, nullable) for name, sql, nullable, _ in _FIELDS]
    for name, sql, nullable in [*fields, *HISTORY_EXTRA]:
        if name == "embedding":
            continue
        kind = sql[0] if sqlite else sql[1]
        lines.append(f"    {name} {kind}" + ("" if nullable else " NOT NULL"))
    exists = "IF NOT EXISTS " if sqlite else ""
    return f"CREATE TABLE {exists}{table} (\n" + ",\n".join(lines) + "\n)"
