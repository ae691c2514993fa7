"""Durable storage behind :class:`memlane.Memory`: the SQLite source of truth and the store lock."""

from __future__ import annotations

from memlane.storage.lock import StoreLock
from memlane.storage.sqlite import COLUMNS, SCHEMA_VERSION, Row, SQLiteStore

__all__ = ["COLUMNS", "SCHEMA_VERSION", "Row", "SQLiteStore", "StoreLock"]
