"""Index snapshots are never taken for more than they are: an older one (a backup, or a
copy made while the store was live) is replayed or rebuilt, one of another database is
rebuilt; close() releases the store whatever fails; a full disk is a StorageError that
stores nothing."""

from __future__ import annotations

import shutil
import sqlite3
import time
from pathlib import Path

import pytest

from conftest import WordHashEmbedder
from memlane import Memory, StorageError
from memlane._memory import maintenance


def _fill(path: Path, n: int) -> list[str]:
    with Memory(path, WordHashEmbedder()) as mem:
        return [r.id for r in mem.add_many([{"text": f"note {i}"} for i in range(n)])]


def test_a_restored_older_snapshot_is_rebuilt_not_taken_as_current(tmp_path: Path) -> None:
    store = tmp_path / "store"
    ids = _fill(store, 100)
    shutil.copytree(store / "index", tmp_path / "backup")
    with Memory(store, WordHashEmbedder()) as mem:
        for record_id in ids[:50]:
            mem.delete(record_id)
    # Closing snapshotted, so the tombstones of those deletions are gone.
    shutil.rmtree(store / "index")
    shutil.copytree(tmp_path / "backup", store / "index")
    with pytest.warns(RuntimeWarning, match="older than the deletions"):
        mem = Memory(store, WordHashEmbedder())
    with mem:
        assert len(mem) == mem.count() == 50
        assert {h.record.id for h in mem.search("note", k=100, mode="text")} == set(ids[50:])


def test_an_older_snapshot_whose_deletions_are_still_known_is_replayed(tmp_path: Path) -> None:
    store = tmp_path / "store"
    ids = _fill(store, 20)
    shutil.copytree(store / "index", tmp_path / "backup")
    with Memory(store, WordHashEmbedder(), snapshot_every=10**6) as mem:
        mem.delete(ids[0])
        mem._sync.closing = True  # close without a snapshot: the tombstone stays
        mem._finalizer()
    shutil.rmtree(store / "index")
    shutil.copytree(tmp_path / "backup", store / "index")
    with Memory(store, WordHashEmbedder()) as mem:  # no warning: replayed
        assert len(mem) == mem.count() == 19 and ids[0] not in {r.id for r in mem.list()}


def test_a_snapshot_of_another_database_is_rebuilt(tmp_path: Path) -> None:
    store, other = tmp_path / "store", tmp_path / "other"
    _fill(store, 30)
    _fill(other, 5)
    # The database (memory.db and its vector file) recreated or replaced beside the
    # old index/.
    for name in ("memory.db", "memory.db-wal", "memory.db-shm", "vectors.log"):
        (store / name).unlink(missing_ok=True)
        if (other / name).exists():
            shutil.copy(other / name, store / name)
    with pytest.warns(RuntimeWarning, match="belongs to another database"):
        mem = Memory(store, WordHashEmbedder())
    with mem:
        assert len(mem) == mem.count() == 5


def test_a_failed_close_still_releases_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "store"
    mem = Memory(store, WordHashEmbedder())
    mem.add("kept")

    def full(*args: object) -> None:
        raise StorageError("cannot write the snapshot: the disk is full")

    monkeypatch.setattr(mem._sync, "save", full)
    with pytest.raises(StorageError, match="disk is full"):
        mem.close()
    mem.close()  # idempotent after a failure
    with pytest.warns(RuntimeWarning, match="missing"):  # the snapshot was not written
        again = Memory(store, WordHashEmbedder())  # the lock was released
    with again:
        assert [r.text for r in again.list()] == ["kept"]


def test_a_full_disk_is_a_storage_error_and_stores_nothing(tmp_path: Path) -> None:
    store = tmp_path / "store"
    with Memory(store, WordHashEmbedder()) as mem:
        mem.add("before")
        writer: sqlite3.Connection = mem._db._writer  # type: ignore[attr-defined]
        pages = writer.execute("PRAGMA page_count").fetchone()[0]
        writer.execute(f"PRAGMA max_page_count = {pages + 2}")
        with pytest.raises(StorageError, match="disk is full"):
            mem.add_many([{"text": "x" * 2000 + str(i)} for i in range(200)])
        assert len(mem) == mem.count() == 1
        writer.execute("PRAGMA max_page_count = 1073741823")
        mem.add("after")
    with Memory(store, WordHashEmbedder()) as mem:
        assert sorted(r.text for r in mem.list()) == ["after", "before"]


def test_a_stored_vector_the_engine_refuses_leaves_its_record_found_by_text(
    tmp_path: Path,
) -> None:
    """A store written before vectors were checked for a unit length (all 1e-45 has no
    float32 norm) opens: that record is found by its text, the others as ever."""
    import numpy as np

    store = tmp_path / "store"
    emb = WordHashEmbedder()
    with Memory(store, emb) as mem:
        mem.add_many([{"text": f"ordinary note {i}", "id": f"n{i}"} for i in range(5)])
        mem.add("the poisoned one", id="bad")
    tiny = np.full(emb.dimension, 1e-45, dtype="<f4").tobytes()
    with sqlite3.connect(store / "memory.db") as db:
        db.execute("UPDATE records SET embedding = ? WHERE id = 'bad'", (tiny,))
    shutil.rmtree(store / "index")  # rebuilt from the database, as after a crash
    with pytest.warns(RuntimeWarning) as warned:
        mem = Memory(store, emb)
    messages = " ".join(str(w.message) for w in warned)
    assert "missing" in messages and "cannot be scaled to unit length" in messages
    with mem:
        assert len(mem) == mem.count() == 6
        assert mem.search("poisoned", k=1, mode="text")[0].record.id == "bad"
        assert "bad" not in {h.record.id for h in mem.search("poisoned", k=6, mode="vector")}
        mem.add("still writable")
        mem.update("bad", text="healed now")
        assert mem.search("healed now", k=1, mode="vector")[0].record.id == "bad"


def test_a_due_snapshot_waits_for_a_pause_between_searches_or_its_longest_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the next open needs a snapshot, and writing one reads the whole index (over a
    second at a million memories), which slowed the searches beside it several times: a
    due snapshot waits for a pause between searches, or at most ``SNAPSHOT_WAIT``."""
    quiet = 3600.0
    monkeypatch.setattr("memlane._memory.maintenance.SEARCH_QUIET", quiet)
    with Memory(tmp_path / "store", WordHashEmbedder(), snapshot_every=10) as mem:
        sync = mem._sync

        def upkeep() -> None:
            maintenance.run(sync, mem._writer, mem._access)

        mem.add_many([{"text": f"note {i}"} for i in range(5)])
        upkeep()
        written = sync.snap_seq
        assert len(mem.search("note", k=3)) == 3  # within the hour the quiet asks for
        mem.add_many([{"text": f"more {i}"} for i in range(20)])
        assert sync.changes >= sync.snapshot_due()
        upkeep()
        assert sync.snap_seq == written and sync.snapshot_wanted is not None
        sync.snapshot_wanted -= maintenance.SNAPSHOT_WAIT  # as if waiting that long
        upkeep()
        assert sync.snap_seq == sync.seq > written and sync.snapshot_wanted is None

        mem.add_many([{"text": f"again {i}"} for i in range(50)])
        assert sync.changes >= sync.snapshot_due()
        written = sync.snap_seq
        # The last search longer ago than the quiet, whenever the monotonic clock began.
        sync.last_search = time.monotonic() - 2 * quiet
        upkeep()
        assert sync.snap_seq == sync.seq > written


def test_a_failed_snapshot_waits_as_long_again_while_searches_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A snapshot that fails (a full disk) is not retried at every wake-up while searches
    run: each attempt flushed the searches' access counts, whose commit woke the thread
    again, some 300 attempts a second, each reading the whole index."""
    monkeypatch.setattr("memlane._memory.maintenance.SEARCH_QUIET", 3600.0)
    # The test runs the upkeep passes itself: the store's thread, woken by the writes
    # and searches, would run one of its own between the test's steps (or write the
    # snapshot once it waited SNAPSHOT_WAIT on a slow machine).
    upkeep = maintenance.run
    monkeypatch.setattr(maintenance, "run", lambda *args: None)
    with Memory(tmp_path / "store", WordHashEmbedder(), snapshot_every=10) as mem:
        sync = mem._sync
        mem.add_many([{"text": f"note {i}"} for i in range(5)])
        assert len(mem.search("note", k=3)) == 3  # first: no snapshot is written meanwhile
        mem.add_many([{"text": f"more {i}"} for i in range(30)])
        assert sync.changes >= sync.snapshot_due()
        attempts: list[int] = []

        def full() -> None:
            attempts.append(sync.seq)
            raise StorageError("cannot write the snapshot: the disk is full")

        monkeypatch.setattr(sync, "save", full)
        sync.snapshot_wanted = time.monotonic() - maintenance.SNAPSHOT_WAIT
        with pytest.raises(StorageError, match="disk is full"):
            upkeep(sync, mem._writer, mem._access)
        assert len(mem.search("note 3", k=3)) == 3
        upkeep(sync, mem._writer, mem._access)  # searched just now: it waits
        assert len(attempts) == 1
        assert not maintenance.overdue(sync) and sync.snapshot_wanted is not None
        monkeypatch.undo()  # the disk has room again; close() writes the snapshot
