"""Whose SQLite database a file is: a store's, another program's (refused before
anything is written into it or made beside it), or one that cannot be read."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

from memlane.errors import CorruptFileError

__all__ = ["check_ours", "sqlite_tables"]

#: The tables every store has had: a database holding tables, none of them these, is
#: another program's.
_OURS = frozenset({"meta", "records"})


def check_ours(db: Path) -> None:
    """Refuses the database file ``db`` when it is another program's (tables, none of
    them a store's), before anything is written into it or made beside it; an empty one
    (a new file) may be made a store, and one that cannot be read is left to the open to
    name why."""
    tables = sqlite_tables(db)
    if tables and not tables & _OURS:
        names = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
        raise CorruptFileError(
            f"{db} is not a memlane store: a SQLite database of other tables ({names}); "
            "memlane leaves it as it is"
        )


def sqlite_tables(db: Path) -> set[str] | None:
    """The names of the tables of the SQLite database file ``db``, read without writing
    anything; ``None`` when it cannot be read (not SQLite, locked, not readable)."""
    # As the file lies on disk (immutable: no -shm or -wal file made beside it), unless a
    # journal beside it may hold changes the file does not have yet.
    journal = any(db.with_name(db.name + end).exists() for end in ("-wal", "-journal"))
    uri = db.resolve().as_uri() + ("?mode=ro" if journal else "?immutable=1")
    try:
        with contextlib.closing(sqlite3.connect(uri, uri=True)) as conn:
            rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            return {str(name) for (name,) in rows}
    except (sqlite3.Error, UnicodeDecodeError):  # a name that is not UTF-8: damage
        return None
