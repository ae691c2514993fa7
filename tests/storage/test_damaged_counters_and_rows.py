"""Values a damaged embedded database holds outside the records rows are refused as a
damaged database (``CorruptFileError``), as the records rows are: the counters of
``meta`` and the rowid counter, the dedup window's rows, the history's entries. Each
reached the caller as a raw ``ValueError``, ``OverflowError`` or ``TypeError``, as a
refusal of an argument the caller never gave, or as a version whose text was bytes or
another text. A rowid a damaged counter took far past the others no longer aborts every
later open. The damage is written with SQL, as the damaged file reads."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from conftest import WordHashEmbedder
from memlane import CorruptFileError, Memory

# The background reading-in of a reopened store may meet the damaged row first: it
# warns and stops, and the call still raises.
pytestmark = pytest.mark.filterwarnings(
    "ignore:memlane. reading records into the row cache:RuntimeWarning"
)


def _run(folder: Path, sql: str, *params: object) -> None:
    db = sqlite3.connect(folder / "memory.db")
    db.execute(sql, params)
    db.commit()
    db.close()


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """A closed store with records, a deletion collected into ``forgotten``, an update
    (a history entry) and a dedup-window key."""
    folder = tmp_path / "store"
    with Memory(folder, WordHashEmbedder(16)) as mem:
        mem.add_many([{"text": f"note {i}"} for i in range(5)])
        mem.update(mem.add("first fact about cats").id, text="second fact about cats")
        mem.add("a message", metadata={"message_id": "m1"})
        mem.delete(mem.add("gone").id)
        mem.snapshot()
    return folder


def _open_add_close(folder: Path) -> None:
    with Memory(folder, WordHashEmbedder(16)) as mem:
        mem.add("after")


@pytest.mark.parametrize(
    ("key", "value"),
    [
        # One flipped bit makes a digit a letter ('5' -> 'u').
        ("schema_version", "w"),
        ("seq", "q"),
        ("dimension", "q6"),
        ("forgotten", "q"),
        ("store_id", "s1724aeb-216d-4470-90d6-99edd96e814b"),
        # Past what the database stores, and below 0: add() raised a raw OverflowError,
        # close() an InvalidArgumentError of an argument nobody gave.
        ("seq", "9" * 23),
        ("seq", "-3"),
    ],
)
def test_a_damaged_meta_value_is_a_damaged_database(store: Path, key: str, value: str) -> None:
    _run(store, "UPDATE meta SET value = ? WHERE key = ?", value, key)
    with pytest.raises(CorruptFileError, match=f"meta.{key}.*the database file is damaged"):
        _open_add_close(store)


def test_a_change_counter_at_its_largest_is_a_damaged_database(store: Path) -> None:
    _run(store, "UPDATE meta SET value = ? WHERE key = 'seq'", str(2**63 - 1))
    with pytest.raises(CorruptFileError, match=r"meta\.seq is 9223372036854775807"):
        _open_add_close(store)


def test_a_rowid_counter_at_its_largest_is_a_damaged_database(store: Path) -> None:
    _run(store, "UPDATE sqlite_sequence SET seq = ? WHERE name = 'records'", 2**63 - 1)
    with pytest.raises(CorruptFileError, match="rowid counter is 9223372036854775807"):
        _open_add_close(store)


def test_a_rowid_far_past_the_others_opens(store: Path) -> None:
    # Bit 40 of the rowid counter flipped: the next add takes rowid 2**40 + n, and every
    # later open aborted the process (an allocation of 4 TiB, a table indexed by rowid,
    # in Engine.fill_log). In a child, so the old code's abort does not take pytest.
    _run(store, "UPDATE sqlite_sequence SET seq = seq + ? WHERE name = 'records'", 1 << 40)
    with Memory(store, WordHashEmbedder(16)) as mem:
        far = mem.add("a record past 2**40")
    assert far.id
    child = (
        "import sys, warnings; warnings.simplefilter('ignore')\n"
        "from conftest import WordHashEmbedder\n"
        "from memlane import Memory\n"
        "with Memory(sys.argv[1], WordHashEmbedder(16)) as m:\n"
        "    hits = m.search('a record past', k=1, mode='vector')\n"
        "    print(hits[0].record.id, len(m.get(hits[0].record.id, include_embedding=True)"
        ".embedding))\n"
    )
    tests = Path(__file__).resolve().parents[1]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tests), os.environ.get("PYTHONPATH", "")]),
    }
    run = subprocess.run(
        [sys.executable, "-c", child, str(store)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == [far.id, "16"]


@pytest.mark.parametrize(
    "damage",
    [
        "key = CAST(key AS BLOB)",
        "at = CAST(at AS BLOB)",
        "at = 'x'",
        "id = CAST(id AS BLOB)",
    ],
)
def test_a_damaged_dedup_window_row_is_a_damaged_database(store: Path, damage: str) -> None:
    # Memory() compared a key of bytes or a time of text raw (TypeError).
    _run(store, f"UPDATE recent SET {damage}")
    with pytest.raises(CorruptFileError, match=r"dedup window.*damaged"):
        _open_add_close(store)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("text = CAST(text AS BLOB)", "another type"),
        ("created_at = 'x'", "another type"),
        ("at = 'x'", "another type"),
        ("text = 'first fact about bats'", "does not match its content hash"),
    ],
)
def test_a_damaged_history_entry_is_a_damaged_database(
    store: Path, tmp_path: Path, damage: str, message: str
) -> None:
    # history() returned a text as bytes, or another text than the one replaced, and
    # export_jsonl() raised a raw TypeError.
    _run(store, f"UPDATE history SET {damage}")
    with Memory(store, WordHashEmbedder(16)) as mem:
        (current,) = [r for r in mem.list(limit=100) if "cats" in r.text]
        with pytest.raises(CorruptFileError, match=message):
            mem.history(current.id)
        with pytest.raises(CorruptFileError, match=message):
            mem.export_jsonl(tmp_path / "out.jsonl")


def test_an_undamaged_history_reads_as_written(store: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with Memory(store, WordHashEmbedder(16)) as mem:
            (current,) = [r for r in mem.list(limit=100) if "cats" in r.text]
            texts = [v.record.text for v in mem.history(current.id)]
    assert texts == ["first fact about cats", "second fact about cats"]


def test_a_row_read_twice_by_a_damaged_index_is_damage(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store copied while it was written (its WAL before its database) held an index
    whose damage read one row twice at the open's replay: the engine's refusal of the
    batch reached the caller as an argument it never gave."""
    from memlane.storage.sqlite import SQLiteStore

    for snapshot in (store / "index").iterdir():
        os.rename(snapshot, store / f"old-{snapshot.name}")  # the open replays every row
    rows_since = SQLiteStore.rows_since

    def twice(self: SQLiteStore, seq: int, batch: int = 4096):  # type: ignore[no-untyped-def]
        for rows in rows_since(self, seq, batch):
            yield [*rows, rows[0]]

    monkeypatch.setattr(SQLiteStore, "rows_since", twice)
    with pytest.raises(CorruptFileError, match=r"is damaged.*appears twice"):
        Memory(store, WordHashEmbedder(16))
