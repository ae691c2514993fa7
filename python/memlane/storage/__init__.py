"""Durable storage behind ``memlane.Memory``: the ``Store`` protocol, its
embedded (SQLite) and shared (PostgreSQL) backends, and the store lock."""

from __future__ import annotations

from memlane.storage.base import COLUMNS, Row, Store
from memlane.storage.lock import StoreLock
from memlane.storage.opening import Opened, is_postgres_url, open_store
from memlane.storage.sqlite import SCHEMA_VERSION, SQLiteStore

__all__ = [
    "COLUMNS",
    "SCHEMA_VERSION",
    "Opened",
    "Row",
    "SQLiteStore",
    "Store",
    "StoreLock",
    "is_postgres_url",
    "open_store",
]
