"""An embedded store keeps each vector once: in ``vectors.log`` beside its database,
each row holding a marker that names its entry, and snapshots without the live vectors.
An open fills them from the file in one pass; an older store's vectors move there at
its first open; a damaged, short, foreign or missing file is refused, never taken as
current; bytes a write left past the recorded end are never read."""

from __future__ import annotations

import os
import shutil
import sqlite3
import struct
import uuid
import warnings
import zlib
from pathlib import Path

import numpy as np
import pytest

from conftest import WordHashEmbedder
from conftest import unit_rows as shared_unit_rows
from memlane import CorruptFileError, InvalidArgumentError, Memory, StorageError
from memlane._core import log_entries, log_entry_head, log_header, log_header_store
from memlane.storage.vector_log import HEADER, VectorLog, is_marker

DIM = 32
N = 600
#: Bytes of the seal that ends each write's entries.
SEAL = 24


def unit_rows(n: int, seed: int) -> np.ndarray:
    return shared_unit_rows(n, DIM, seed)


def store(path: Path, **kwargs: object) -> Memory:
    return Memory(path, WordHashEmbedder(DIM), **kwargs)  # type: ignore[arg-type]


def filled(path: Path) -> tuple[list[str], np.ndarray]:
    vectors = unit_rows(N, 1)
    with store(path) as mem:
        added = mem.add_many([{"text": f"note {i}", "embedding": v} for i, v in enumerate(vectors)])
        mem.wait_indexed()
        stored = np.stack([mem.get(r.id, include_embedding=True).embedding for r in added])
    return [r.id for r in added], stored


def nearest(mem: Memory, queries: np.ndarray) -> list[str]:
    return [mem.search("", mode="vector", query_embedding=q, k=1)[0].record.id for q in queries]


def embeddings(path: Path) -> list[bytes | None]:
    with sqlite3.connect(path / "memory.db") as conn:
        return [r[0] for r in conn.execute("SELECT embedding FROM records ORDER BY rowid")]


def test_each_vector_is_kept_once_and_an_open_reads_it_back(tmp_path: Path) -> None:
    ids, stored = filled(tmp_path / "s")
    assert all(is_marker(e) for e in embeddings(tmp_path / "s"))
    log = (tmp_path / "s" / "vectors.log").stat().st_size
    # Each entry: a 16-byte head and the half-float blob (5 + 2 * DIM bytes); then the
    # write's seal (a head and the 8-byte chain).
    assert log == HEADER + N * (16 + 5 + 2 * DIM) + SEAL
    graphs = list((tmp_path / "s" / "index").rglob("hnsw.bin"))
    assert len(graphs) == 1
    without = graphs[0].stat().st_size
    with store(tmp_path / "s", snapshot_vectors=True) as mem:
        mem.add("one more note", embedding=unit_rows(1, 3)[0])
        mem.snapshot()
    graphs = sorted((tmp_path / "s" / "index").rglob("hnsw.bin"))
    # The snapshot leaves out the half-float copy of every vector.
    assert graphs[-1].stat().st_size - without >= N * 2 * DIM
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a snapshot it could not use warns and rebuilds
        mem = store(tmp_path / "s")
    with mem:
        assert nearest(mem, stored[:50]) == ids[:50]
        again = mem.get(ids[7], include_embedding=True).embedding
        assert np.array_equal(again, stored[7])


def test_a_snapshot_with_vectors_still_opens_and_keeps_them(tmp_path: Path) -> None:
    ids, stored = filled(tmp_path / "s")
    with store(tmp_path / "s", snapshot_vectors=True) as mem:
        mem.add("one more note", embedding=unit_rows(1, 3)[0])
        mem.snapshot()
        assert nearest(mem, stored[:20]) == ids[:20]
    with store(tmp_path / "s") as mem:
        assert nearest(mem, stored[:20]) == ids[:20]


def test_a_new_vector_is_a_new_entry_and_a_change_of_other_fields_none(tmp_path: Path) -> None:
    ids, stored = filled(tmp_path / "s")
    path = tmp_path / "s" / "vectors.log"
    with store(tmp_path / "s") as mem:
        size = path.stat().st_size
        mem.update(ids[0], metadata={"k": 1})
        assert path.stat().st_size == size
        mem.update(ids[0], text="another note entirely", embedding=stored[1])
        assert path.stat().st_size > size
    with store(tmp_path / "s") as mem:
        got = mem.get(ids[0], include_embedding=True)
        assert got.text == "another note entirely" and got.metadata == {"k": 1}
        assert np.array_equal(got.embedding, stored[1])
        hits = mem.search("", mode="vector", query_embedding=stored[1], k=2)
        assert {h.record.id for h in hits} == {ids[0], ids[1]}


def make_older(path: Path, ids: list[str]) -> None:
    """The store as schema 6 wrote it: the blobs in the rows, no vector file, no index."""
    with store(path) as mem:
        blobs = {i: mem._db.row_by_id(i, embedding=True).embedding for i in ids}  # type: ignore[attr-defined]
    with sqlite3.connect(path / "memory.db") as conn:
        conn.executemany(
            "UPDATE records SET embedding = ? WHERE id = ?", [(b, i) for i, b in blobs.items()]
        )
        conn.execute("DELETE FROM meta WHERE key IN ('vector_log', 'vector_log_end')")
        conn.execute("UPDATE meta SET value = '6' WHERE key = 'schema_version'")
    (path / "vectors.log").unlink()
    shutil.rmtree(path / "index")


def test_an_older_store_moves_its_vectors_at_its_first_open(tmp_path: Path) -> None:
    ids, stored = filled(tmp_path / "s")
    make_older(tmp_path / "s", ids)
    with pytest.warns(RuntimeWarning, match="rebuilding"), store(tmp_path / "s") as mem:
        assert nearest(mem, stored[:30]) == ids[:30]
    assert all(is_marker(e) for e in embeddings(tmp_path / "s"))
    with sqlite3.connect(tmp_path / "s" / "memory.db") as conn:
        # The pages the blobs held went back to the disk.
        assert conn.execute("PRAGMA freelist_count").fetchone()[0] == 0
    with store(tmp_path / "s") as mem:
        assert nearest(mem, stored[-30:]) == ids[-30:]
        assert np.array_equal(mem.get(ids[3], include_embedding=True).embedding, stored[3])


def test_a_move_that_failed_halfway_goes_on_at_the_next_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chunk per transaction: the chunks moved stay moved, the rest move next time."""
    ids, stored = filled(tmp_path / "s")
    make_older(tmp_path / "s", ids)
    monkeypatch.setattr("memlane.storage.sqlite._MOVE_CHUNK", 100)
    synced = VectorLog.sync
    calls = []

    def fails_third(self: VectorLog) -> tuple[int, tuple[int, int] | None]:
        calls.append(1)
        if len(calls) == 3:
            raise StorageError(f"cannot sync the vector file {self.path}: I/O error")
        return synced(self)

    with monkeypatch.context() as m:
        m.setattr(VectorLog, "sync", fails_third)
        with pytest.raises(StorageError, match="cannot sync"):
            store(tmp_path / "s")
    moved = embeddings(tmp_path / "s")
    assert sum(map(is_marker, moved)) == 200 and len(moved) == N
    with pytest.warns(RuntimeWarning, match="rebuilding"), store(tmp_path / "s") as mem:
        assert nearest(mem, stored[::20]) == ids[::20]
    assert all(is_marker(e) for e in embeddings(tmp_path / "s"))


def flip(path: Path, at: int) -> None:
    with path.open("r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x10]))


@pytest.mark.parametrize("snapshot", [True, False], ids=["from the snapshot", "rebuilt"])
def test_a_damaged_entry_is_refused(tmp_path: Path, snapshot: bool) -> None:
    filled(tmp_path / "s")
    log = tmp_path / "s" / "vectors.log"
    flip(log, log.stat().st_size - SEAL - 3)  # the last record's entry
    if not snapshot:
        shutil.rmtree(tmp_path / "s" / "index")
    with (
        warnings.catch_warnings(),
        pytest.raises(CorruptFileError, match=r"vector file .* is damaged"),
    ):
        warnings.simplefilter("ignore")
        store(tmp_path / "s")


@pytest.mark.parametrize(
    "harm",
    ["cut short", "missing", "another store's", "an older copy"],
)
def test_a_file_that_is_not_the_current_one_is_refused(tmp_path: Path, harm: str) -> None:
    filled(tmp_path / "s")
    log = tmp_path / "s" / "vectors.log"
    if harm == "cut short":
        os.truncate(log, log.stat().st_size - 1)
    elif harm == "missing":
        log.unlink()
    elif harm == "another store's":
        filled(tmp_path / "t")
        shutil.copy(tmp_path / "t" / "vectors.log", log)
    else:
        old = log.read_bytes()
        with store(tmp_path / "s") as mem:
            mem.add("one more note", embedding=unit_rows(1, 9)[0])
        log.write_bytes(old)
    with pytest.raises(CorruptFileError, match="vector file"):
        store(tmp_path / "s")


def test_another_copy_of_the_stores_file_is_refused(tmp_path: Path) -> None:
    """Two copies of one store (one id) written apart: each file is its copy's."""
    filled(tmp_path / "a")
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    for name, seed in (("a", 3), ("b", 4)):
        with store(tmp_path / name) as mem:
            mem.add_many(
                [{"text": f"{name} {i}", "embedding": v} for i, v in enumerate(unit_rows(5, seed))]
            )
    shutil.copy(tmp_path / "b" / "vectors.log", tmp_path / "a" / "vectors.log")
    with pytest.raises(CorruptFileError, match="another copy"):
        store(tmp_path / "a")


def test_an_older_copy_that_a_failed_write_left_longer_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file copied while it held a write that never committed, put back after the
    place that write took was written again: as long as the database says, but not its."""
    filled(tmp_path / "s")
    log = tmp_path / "s" / "vectors.log"

    synced = VectorLog.sync

    def broken(self: VectorLog) -> tuple[int, tuple[int, int] | None]:
        synced(self)  # the write's entries and seal on disk, and then its commit fails
        raise StorageError(f"cannot sync the vector file {self.path}: I/O error")

    with store(tmp_path / "s") as mem:
        with monkeypatch.context() as m:
            m.setattr(VectorLog, "sync", broken)
            with pytest.raises(StorageError):
                mem.add("never committed", embedding=unit_rows(1, 5)[0])
        stale = log.read_bytes()
        mem.add("committed in its place", embedding=unit_rows(1, 6)[0])
    log.write_bytes(stale)
    with pytest.raises(CorruptFileError, match="another copy"):
        store(tmp_path / "s")


def test_opening_an_older_database_leaves_the_newer_vectors(tmp_path: Path) -> None:
    """The wrong memory.db opened by mistake (an older backup) does not cut the file:
    with the right one back, every vector is there."""
    filled(tmp_path / "s")
    older = tmp_path / "older"
    older.mkdir()
    shutil.copy(tmp_path / "s" / "memory.db", older / "memory.db")
    new = unit_rows(20, 8)
    with store(tmp_path / "s") as mem:
        added = [
            r.id
            for r in mem.add_many([{"text": f"new {i}", "embedding": v} for i, v in enumerate(new)])
        ]
    shutil.copy(tmp_path / "s" / "memory.db", tmp_path / "newer.db")
    for name in ("memory.db", "memory.db-wal", "memory.db-shm"):
        (tmp_path / "s" / name).unlink(missing_ok=True)
    shutil.copy(older / "memory.db", tmp_path / "s" / "memory.db")
    shutil.rmtree(tmp_path / "s" / "index")
    with pytest.warns(RuntimeWarning), store(tmp_path / "s") as mem:
        assert len(mem) == N
    for name in ("memory.db", "memory.db-wal", "memory.db-shm"):
        (tmp_path / "s" / name).unlink(missing_ok=True)
    shutil.copy(tmp_path / "newer.db", tmp_path / "s" / "memory.db")
    shutil.rmtree(tmp_path / "s" / "index")
    with pytest.warns(RuntimeWarning), store(tmp_path / "s") as mem:
        assert len(mem) == N + len(new)
        assert nearest(mem, new) == added


def test_bytes_past_the_recorded_end_are_never_read(tmp_path: Path) -> None:
    """What a write killed before its commit left: read by nothing, written over next."""
    ids, stored = filled(tmp_path / "s")
    log = tmp_path / "s" / "vectors.log"
    with log.open("ab") as f:
        f.write(os.urandom(1000))
    with store(tmp_path / "s") as mem:
        assert nearest(mem, stored[:10]) == ids[:10]
        mem.add("after the garbage", embedding=unit_rows(1, 5)[0])
    with store(tmp_path / "s") as mem:
        assert (
            mem.search("", mode="vector", query_embedding=unit_rows(1, 5)[0], k=1)[0].record.text
            == "after the garbage"
        )


def test_a_write_whose_file_cannot_sync_stores_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids, stored = filled(tmp_path / "s")
    new = unit_rows(2, 7)

    def broken(self: VectorLog) -> tuple[int, tuple[int, int] | None]:
        raise StorageError(f"cannot sync the vector file {self.path}: No space left on device")

    with store(tmp_path / "s") as mem:
        with monkeypatch.context() as m:
            m.setattr(VectorLog, "sync", broken)
            with pytest.raises(StorageError, match="cannot sync"):
                mem.add("lost", embedding=new[0])
            with pytest.raises(StorageError, match="cannot sync"):
                mem.update(ids[0], text="changed", embedding=new[0])
        assert len(mem) == N
        kept = mem.add("kept", embedding=new[1])
    with store(tmp_path / "s") as mem:
        assert len(mem) == N + 1
        assert mem.get(ids[0]).text == "note 0"
        assert np.array_equal(mem.get(ids[0], include_embedding=True).embedding, stored[0])
        assert mem.search("", mode="vector", query_embedding=new[1], k=1)[0].record.id == kept.id


def test_a_read_while_open_checks_the_entry_it_finds(tmp_path: Path) -> None:
    """A row read with its vector takes the entry its marker names only if the entry is
    that row's and checks; a file gone under an open store is a StorageError."""
    ids, stored = filled(tmp_path / "s")
    log = tmp_path / "s" / "vectors.log"
    with store(tmp_path / "s") as mem:
        assert np.array_equal(mem.get(ids[5], include_embedding=True).embedding, stored[5])
        flip(log, log.stat().st_size - SEAL - 3)  # the last record's entry
        with pytest.raises(CorruptFileError, match=r"vector file .* is damaged \(record"):
            mem.get(ids[-1], include_embedding=True)
        assert np.array_equal(mem.get(ids[5], include_embedding=True).embedding, stored[5])
        log.unlink()
        with pytest.raises(StorageError, match=r"vector file .* is gone"):
            mem.get(ids[5], include_embedding=True)


def test_the_file_is_written_in_the_format_stores_already_hold(tmp_path: Path) -> None:
    """The format is declared in the core alone; what it writes is, byte for byte, what
    stores written before hold (a header and entries as ``struct`` and ``zlib`` encode
    them), so they open and go on growing; each write's entries then end with a seal, an
    entry of rowid 0 (which those stores' readers never look for) holding the chain of
    the entries before it."""
    ids, stored = filled(tmp_path / "s")
    raw = (tmp_path / "s" / "vectors.log").read_bytes()
    with sqlite3.connect(tmp_path / "s" / "memory.db") as conn:
        (store_id,) = conn.execute("SELECT value FROM meta WHERE key = 'store_id'").fetchone()
        (last,) = conn.execute("SELECT value FROM meta WHERE key = 'vector_log_last'").fetchone()
    assert raw[:HEADER] == struct.pack("<8sI4x16s", b"MLVECLOG", 1, uuid.UUID(store_id).bytes)
    at, rowid = HEADER, 0
    markers = embeddings(tmp_path / "s")
    chain = 0xCBF29CE484222325  # FNV-1a over each entry's checksum
    while at < len(raw):
        got, n, crc = struct.unpack_from("<QII", raw, at)
        blob = raw[at + 16 : at + 16 + n]
        assert crc == zlib.crc32(blob, zlib.crc32(struct.pack("<QI", got, n)))
        if got == 0:
            assert (blob, at + 16 + n) == (struct.pack("<Q", chain), len(raw))
            assert last == f"{at}:{crc}"
        else:
            rowid += 1
            assert got == rowid
            assert markers[rowid - 1] == struct.pack("<BQ", 2, at)
        for b in struct.pack("<I", crc):
            chain = ((chain ^ b) * 0x100000001B3) % 2**64
        at += 16 + n
    assert rowid == N
    with store(tmp_path / "s") as mem:
        again = np.stack([mem.get(i, include_embedding=True).embedding for i in ids])
        np.testing.assert_array_equal(again, stored)


def test_entries_that_cannot_be_written_are_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="as many rowids as blobs"):
        log_entries(HEADER, None, [1, 2], [b"a"])
    # Offsets that would wrap past 2**64 into the header are refused, not written.
    with pytest.raises(InvalidArgumentError, match="offsets past 2"):
        log_entries(2**64 - 20, None, [1, 2], [b"abc", b"def"])
    assert log_entries(2**64 - 39, None, [1, 2], [b"abc", b"def"])[2] == (
        2**64 - 20,
        zlib.crc32(b"def", zlib.crc32(struct.pack("<QI", 2, 3))),
    )
    with pytest.raises(InvalidArgumentError, match="offsets past 2"):
        log_entries(2**64 - 39, None, [1, 2], [b"abc", b"def"], seal=True)
    with pytest.raises(InvalidArgumentError, match="chain"):
        log_entries(HEADER, -1, [1], [b"a"])
    with pytest.raises(InvalidArgumentError, match="16 bytes"):
        log_header(b"x" * 15)
    assert log_entry_head(b"\0" * 15) is None
    assert log_header_store(b"MLVECLOG") is None
