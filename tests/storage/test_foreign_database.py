"""A store folder whose memory.db is another program's SQLite database: ``Memory``
refuses it before writing anything into it or beside it (its schema went into the
database, with a lock file, an index folder and a vector file beside it)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from conftest import WordHashEmbedder
from memlane import Memory
from memlane.errors import CorruptFileError


def files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir()}


@pytest.mark.parametrize("journal", ["delete", "wal"])
def test_another_programs_database_is_left_as_it_is(tmp_path: Path, journal: str) -> None:
    folder = tmp_path / "other"
    folder.mkdir()
    with sqlite3.connect(folder / "memory.db") as db:
        db.execute(f"PRAGMA journal_mode = {journal}")
        db.execute("CREATE TABLE invoices (n INTEGER)")
        db.execute("INSERT INTO invoices VALUES (1)")
    db.close()
    before = files(folder)
    with pytest.raises(CorruptFileError, match=r"not a memlane store.*\(invoices\)"):
        Memory(folder, WordHashEmbedder())
    assert files(folder) == before


def test_an_empty_file_becomes_a_store(tmp_path: Path) -> None:
    (tmp_path / "memory.db").write_bytes(b"")
    with Memory(tmp_path, WordHashEmbedder()) as mem:
        mem.add("kept")
    with Memory(tmp_path, WordHashEmbedder()) as mem:
        assert [r.text for r in mem.list()] == ["kept"]
