"""SQLite's memory in each connection of an embedded store: the writer keeps a large page
cache for inserts at random places of its indexes; a reader (one per thread that reads)
a small one, since a search's rows are random pages a cache seldom holds again; and the
map of the file covers its first 128 MB, so searches over a large store do not map it
all (benches/README.md, "The open and the memory at a million")."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from memlane.storage.sqlite import SQLiteStore


def pragma(conn: sqlite3.Connection, name: str) -> int:
    return int(conn.execute(f"PRAGMA {name}").fetchone()[0])


def test_readers_keep_a_small_cache_and_the_writer_a_large_one(tmp_path: Path) -> None:
    db = SQLiteStore(tmp_path / "memory.db")
    try:
        assert pragma(db._writer, "cache_size") == -64 * 1024
        seen: list[tuple[int, int]] = []

        def read() -> None:
            with db.reader() as conn:
                seen.append((pragma(conn, "cache_size"), pragma(conn, "mmap_size")))

        read()
        other = threading.Thread(target=read)
        other.start()
        other.join()
        assert seen == [(-8 * 1024, 128 << 20)] * 2
        assert pragma(db._writer, "mmap_size") == 128 << 20
    finally:
        db.close()
