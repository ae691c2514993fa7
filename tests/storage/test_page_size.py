"""A new SQLite store takes 16 KiB pages, and its rows fill them. An older store keeps
the pages it has."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from conftest import WordHashEmbedder
from memlane import Memory

# Enough rows (about 200 bytes each, their vectors in vectors.log) that the last,
# partly filled page is a small share of the table.
ROWS = 3_000


def fill(path: Path) -> None:
    mem = Memory(path, WordHashEmbedder(384))
    try:
        mem.add_many(
            {"text": f"note {i} about topic {i % 37} and item {i * 7919 % 1009}"}
            for i in range(ROWS)
        )
        assert len(mem.search("topic 5", 5)) == 5
    finally:
        mem.close()


def page_size(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        return int(conn.execute("PRAGMA page_size").fetchone()[0])


def empty_share(db: Path) -> float:
    """The share of the records table's pages that holds no data (its slack)."""
    with sqlite3.connect(db) as conn:
        unused, size = conn.execute(
            "SELECT sum(unused), sum(pgsize) FROM dbstat WHERE name = 'records'"
        ).fetchone()
    return float(unused) / float(size)


def test_a_new_store_wastes_little_of_its_pages(tmp_path: Path) -> None:
    fill(tmp_path)
    db = tmp_path / "memory.db"
    assert page_size(db) == 16384
    assert empty_share(db) < 0.1


def test_an_older_store_keeps_its_pages(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA page_size = 4096")
        conn.execute("PRAGMA journal_mode = WAL")
        # A first table fixes the page size (memlane's own: another's is refused).
        conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    fill(tmp_path)
    assert page_size(db) == 4096
    mem = Memory(tmp_path, WordHashEmbedder(384))
    try:
        assert len(mem) == ROWS
        assert mem.search("item 5", 3)
    finally:
        mem.close()
