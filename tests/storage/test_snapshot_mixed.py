"""A snapshot is taken as current only when it is one save's files and of the database's
own history: a file of an older save copied into the newest snapshot, or the snapshot of
a copy of the store that went on apart (a backup and the store, both written since,
reach the same change numbers with other records), is rebuilt from the database with a
warning. What that check adds stays cheap and safe: a snapshot the release before
wrote still opens, read-only opens write nothing, the list of epochs stays bounded,
a kill -9 leaves a snapshot that is still used, and a refused snapshot is replaced at
the next close instead of being refused again at every open."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sqlite3
import struct
import subprocess
import sys
import textwrap
import warnings
import zlib
from pathlib import Path

import pytest

from conftest import TESTS, WordHashEmbedder
from memlane import InvalidArgumentError, Memory
from memlane._core import Engine
from memlane.storage import sqlite as sqlite_store

# A snapshot file's header (rust/core/src/persist.rs): magic, kind, format version,
# payload length, CRC-32 of the payload.
HEADER = struct.Struct("<8s4sIQI")


def _open(store: Path) -> Memory:
    """The store, opened with no warning (a rebuild warns)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return Memory(store, WordHashEmbedder(), dedup_window=0)


def _add(store: Path, texts: list[str]) -> list[str]:
    with _open(store) as mem:
        ids = [r.id for r in mem.add_many([{"text": t} for t in texts])]
        mem.wait_indexed()  # the graph holds them: its file differs from the last save's
        return ids


def _snapshot(store: Path) -> Path:
    (newest,) = (store / "index").glob("snapshot-*")
    return newest


def _found_by_text(mem: Memory, word: str) -> set[str]:
    return {h.record.text for h in mem.search(word, k=10, mode="text", track_access=False)}


def _meta(store: Path, key: str) -> str | None:
    with contextlib.closing(sqlite3.connect(store / "memory.db")) as db:
        row = db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    return None if row is None else str(row[0])


def _epochs(store: Path) -> str | None:
    return _meta(store, "epochs")


def test_an_older_bm25_file_in_the_newest_snapshot_is_refused(tmp_path: Path) -> None:
    store = tmp_path / "store"
    ids = _add(store, [f"first text w{i}old" for i in range(60)])
    older = (_snapshot(store) / "bm25.bin").read_bytes()
    # The same ids, texts changed since: the ids of the two files agree.
    with _open(store) as mem:
        for i, record_id in enumerate(ids[:20]):
            mem.update(record_id, text=f"second text w{i}new")
    (_snapshot(store) / "bm25.bin").write_bytes(older)
    with pytest.warns(RuntimeWarning, match=r"bm25\.bin: is not the file saved with records"):
        mem = Memory(store, WordHashEmbedder(), dedup_window=0)
    with mem:
        assert _found_by_text(mem, "w3new") == {"second text w3new"}
        assert _found_by_text(mem, "w3old") == set()


def test_an_older_graph_file_in_the_newest_snapshot_is_refused(tmp_path: Path) -> None:
    store = tmp_path / "store"
    _add(store, [f"first text w{i}a" for i in range(200)])
    older = (_snapshot(store) / "hnsw.bin").read_bytes()
    later = _add(store, [f"later text w{i}b" for i in range(100)])
    assert (_snapshot(store) / "hnsw.bin").read_bytes() != older
    (_snapshot(store) / "hnsw.bin").write_bytes(older)
    with pytest.warns(RuntimeWarning, match=r"hnsw\.bin: is not the file saved with records"):
        mem = Memory(store, WordHashEmbedder(), dedup_window=0)
    with mem:
        for i, record_id in enumerate(later):
            hits = mem.search(f"later text w{i}b", k=5, mode="vector", track_access=False)
            assert record_id in {h.record.id for h in hits}


def _two_copies_written_apart(tmp_path: Path) -> tuple[Path, Path]:
    """A store copied while closed (a backup), then both written to the same change."""
    a, b = tmp_path / "a", tmp_path / "b"
    _add(a, [f"shared text w{i}s" for i in range(100)])
    shutil.copytree(a, b)
    for store, side in ((a, "alpha"), (b, "beta")):
        _add(store, [f"{side} text w{i}{side}" for i in range(30)])
    assert _snapshot(a).name == _snapshot(b).name  # the same change number
    return a, b


@pytest.mark.parametrize("what", ["index", "snapshot"])
def test_the_snapshot_of_a_copy_written_apart_is_refused(tmp_path: Path, what: str) -> None:
    a, b = _two_copies_written_apart(tmp_path)
    if what == "index":  # the whole folder, with its notes (the database's id, ...)
        shutil.rmtree(b / "index")
        shutil.copytree(a / "index", b / "index")
    else:  # the snapshot alone, beside b's own notes
        shutil.rmtree(_snapshot(b))
        shutil.copytree(_snapshot(a), b / "index" / _snapshot(a).name)
    with pytest.warns(RuntimeWarning, match="another copy of this database"):
        mem = Memory(b, WordHashEmbedder(), dedup_window=0)
    with mem:
        assert _found_by_text(mem, "w7alpha") == set()
        assert _found_by_text(mem, "w7beta") == {"beta text w7beta"}
        assert len(mem) == mem.count() == 130
    # The snapshot written at that close replaced the refused one.
    with _open(b) as mem:
        assert _found_by_text(mem, "w7beta") == {"beta text w7beta"}


def test_a_copy_that_went_on_later_is_refused_past_where_they_parted(tmp_path: Path) -> None:
    """Copied while A was open: A's epoch is in B's list, and A wrote past the copy."""
    a, b = tmp_path / "a", tmp_path / "b"
    _add(a, [f"shared text w{i}s" for i in range(50)])
    with _open(a) as mem:
        mem.add_many([{"text": f"more text w{i}m"} for i in range(10)])
        # The lock and SQLite's shared-memory index are the open store's, not the copy's.
        shutil.copytree(a, b, ignore=shutil.ignore_patterns("lock", "*-shm"))
        mem.add_many([{"text": f"alpha text w{i}alpha"} for i in range(10)])
    _add(b, [f"beta text w{i}beta" for i in range(10)])
    assert _snapshot(a).name == _snapshot(b).name  # as far as A got, with as many rows
    shutil.rmtree(b / "index")
    shutil.copytree(a / "index", b / "index")
    with pytest.warns(RuntimeWarning, match="wrote it after the two went on apart"):
        mem = Memory(b, WordHashEmbedder(), dedup_window=0)
    with mem:
        assert _found_by_text(mem, "w3alpha") == set()
        assert _found_by_text(mem, "w3beta") == {"beta text w3beta"}
        assert len(mem) == mem.count() == 70


def test_a_backups_own_snapshot_is_replayed_in_the_store_that_went_on(tmp_path: Path) -> None:
    """The history they share is the store's: no rebuild, no false alarm."""
    store, backup = tmp_path / "store", tmp_path / "backup"
    _add(store, [f"shared text w{i}s" for i in range(50)])
    shutil.copytree(store, backup)
    _add(store, [f"later text w{i}later" for i in range(20)])
    shutil.rmtree(store / "index")
    shutil.copytree(backup / "index", store / "index")
    with _open(store) as mem:
        assert len(mem) == mem.count() == 70
        assert _found_by_text(mem, "w3later") == {"later text w3later"}
    with _open(backup) as mem:
        assert len(mem) == mem.count() == 50


def test_a_snapshot_of_another_database_at_the_same_change_is_rebuilt_once(
    tmp_path: Path,
) -> None:
    """Saving at a change a snapshot is at keeps it: the refused one must not stay, to be
    taken at the next open once the notes beside it were written again."""
    store, other = tmp_path / "store", tmp_path / "other"
    _add(store, [f"store text w{i}mine" for i in range(20)])
    _add(other, [f"other text w{i}theirs" for i in range(20)])
    shutil.rmtree(store / "index")
    shutil.copytree(other / "index", store / "index")
    with pytest.warns(RuntimeWarning, match="another database"):
        Memory(store, WordHashEmbedder(), dedup_window=0).close()
    with _open(store) as mem:
        assert _found_by_text(mem, "w3mine") == {"store text w3mine"}
        assert _found_by_text(mem, "w3theirs") == set()


def _naming_no_epoch(records: Path) -> None:
    """Rewrites a records.bin as one saved before the database listed an epoch: its
    history (after seq and dim) 0."""
    raw = bytearray(records.read_bytes())
    magic, kind, version, _, _ = HEADER.unpack_from(raw)
    payload = raw[HEADER.size :]
    struct.pack_into("<Q", payload, 16, 0)
    header = HEADER.pack(magic, kind, version, len(payload), zlib.crc32(payload))
    records.write_bytes(header + payload)


def _as_version(records: Path, version: int) -> None:
    raw = records.read_bytes()
    magic, kind, _, length, crc = HEADER.unpack_from(raw)
    records.write_bytes(HEADER.pack(magic, kind, version, length, crc) + raw[HEADER.size :])


@pytest.mark.parametrize("vectors", [True, False])
def test_a_snapshot_the_release_before_wrote_is_rebuilt_once(tmp_path: Path, vectors: bool) -> None:
    """Version 8 lacks whether each text holds a question mark, which only the texts
    tell: the store rebuilds its engine from the database, once."""
    store = tmp_path / "store"
    embedder = WordHashEmbedder() if vectors else None
    with Memory(store, embedder, dedup_window=0) as mem:
        mem.add_many([{"text": f"old text w{i}old"} for i in range(40)])
    records = _snapshot(store) / "records.bin"
    current = HEADER.unpack_from(records.read_bytes())[2]
    _as_version(records, current - 1)
    with pytest.warns(RuntimeWarning, match="older than this build"):
        mem = Memory(store, embedder, dedup_window=0)
    with mem:
        assert _found_by_text(mem, "w5old") == {"old text w5old"}
        mem.add("new text w1new")
    assert HEADER.unpack_from((_snapshot(store) / "records.bin").read_bytes())[2] == current
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mem = Memory(store, embedder, dedup_window=0)
    with mem:
        assert mem._sync.snap_seq > 0  # loaded, not rebuilt
        assert _found_by_text(mem, "w1new") == {"new text w1new"}


def test_a_snapshot_naming_no_epoch_newer_than_the_first_is_rebuilt(tmp_path: Path) -> None:
    """Written before the database listed an epoch, then newer than its first epoch: a
    copy's, or an older memlane's after this one wrote (a downgrade and back)."""
    store = tmp_path / "store"
    _add(store, [f"text w{i}x" for i in range(20)])
    _add(store, [f"text w{i}y" for i in range(20)])
    _naming_no_epoch(_snapshot(store) / "records.bin")
    with pytest.warns(RuntimeWarning, match="names no epoch"):
        mem = Memory(store, WordHashEmbedder(), dedup_window=0)
    with mem:
        assert len(mem) == mem.count() == 40


def test_opens_that_write_nothing_start_no_epoch(tmp_path: Path) -> None:
    store = tmp_path / "store"
    _add(store, ["a text"])
    listed, seq = _epochs(store), _meta(store, "seq")
    assert listed is not None and len(listed.split()) == 1
    for _ in range(3):
        with _open(store) as mem:
            mem.search("text", k=1, mode="text", track_access=False)
    assert (_epochs(store), _meta(store, "seq")) == (listed, seq)


def test_the_epochs_kept_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_store, "_EPOCHS_KEPT", 3)
    store = tmp_path / "store"
    _add(store, ["first"])
    shutil.copytree(store / "index", tmp_path / "first-index")
    for i in range(4):
        _add(store, [f"text {i}"])  # opens without a rebuild: its snapshot's epoch is kept
    listed = _epochs(store)
    assert listed is not None and len(listed.split()) == 3
    # A snapshot of an epoch no longer listed cannot be placed: rebuilt, never guessed.
    shutil.rmtree(store / "index")
    shutil.copytree(tmp_path / "first-index", store / "index")
    with pytest.warns(RuntimeWarning, match="older than the database lists"):
        mem = Memory(store, WordHashEmbedder(), dedup_window=0)
    with mem:
        assert len(mem) == mem.count() == 5


WRITER = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, sys.argv[2])
    from conftest import WordHashEmbedder
    from memlane import Memory

    mem = Memory(sys.argv[1], WordHashEmbedder(), dedup_window=0, snapshot_every=10**6)
    for i in range(10**6):
        mem.add(f"killed text w{i}k")
        print(i, flush=True)
    """
)


@pytest.mark.skipif(sys.platform == "win32", reason="needs kill -9")
def test_a_writer_killed_leaves_a_snapshot_still_used(tmp_path: Path) -> None:
    """The epoch the killed writer started is listed: the snapshot before it is of an
    older epoch, no newer than where the killed one started, so it is replayed."""
    store = tmp_path / "store"
    _add(store, [f"text w{i}s" for i in range(50)])
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    proc = subprocess.Popen(
        [sys.executable, str(script), str(store), str(TESTS)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    acknowledged = [proc.stdout.readline() for _ in range(20)]
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    proc.stdout.close()
    assert acknowledged[-1].strip() == "19"
    with _open(store) as mem:
        assert mem._sync.snap_seq > 0  # the snapshot before the kill, replayed
        assert _found_by_text(mem, "w19k") == {"killed text w19k"}
        assert len(mem) == mem.count() >= 70


@pytest.mark.parametrize("history", [-1, 2**64])
def test_a_history_out_of_range_names_it(tmp_path: Path, history: int) -> None:
    with pytest.raises(InvalidArgumentError, match=f"^history must .*{history}"):
        Engine().save(tmp_path, 1, history=history)
