"""An older embedded store's tables brought to the schema's columns (``SQLiteStore``
runs it in the transaction that opens a store of an older ``SCHEMA_VERSION``)."""

from __future__ import annotations

import sqlite3

__all__ = ["migrate"]


def migrate(conn: sqlite3.Connection) -> None:
    """Brings an older store's tables to the schema's columns (a table created by this
    open, the history of a version-1 store, has them already), and its jobs to
    ``tenant_meta``."""
    later = (("expires_at", "REAL"), ("recorded_at", None), ("speaker", "TEXT"))
    history = (*later, ("change_seq", "INTEGER"))
    for table, columns in (("records", (("valid_to", "REAL"), *later)), ("history", history)):
        have = {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
        for name, kind in columns:
            if name in have:
                continue
            # NOT NULL needs a default for the rows there; each gets its own just below.
            conn.execute(
                f"ALTER TABLE {table} ADD COLUMN {name} " + (kind or "REAL NOT NULL DEFAULT 0.0")
            )
            if name == "recorded_at":
                conn.execute(_RECORDED.format(table=table))
    # Jobs were kept in meta before tenant_meta (made by this open) held them.
    conn.execute(
        "INSERT OR REPLACE INTO tenant_meta (tenant, key, value) "
        "SELECT '', key, value FROM meta WHERE substr(key, 1, 4) = 'job:'"
    )
    conn.execute("DELETE FROM meta WHERE substr(key, 1, 4) = 'job:'")


#: When a store that predates ``recorded_at`` learned each version: when it was first
#: written (its earliest version's ``updated_at``: the history keeps the versions a
#: change replaced), which is the add's time for a record never changed.
_RECORDED = """
UPDATE {table} SET recorded_at = coalesce(
    (SELECT min(h.updated_at) FROM history h WHERE h.id = {table}.id), {table}.updated_at)
"""
