"""A vector file of another copy of the store, written apart, is refused even where its
last entry is the one the database recorded: each write ends with a seal that names
every entry before it. A file written before seals opens, and its next write seals it."""

from __future__ import annotations

import os
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

from conftest import WordHashEmbedder
from memlane import CorruptFileError, Memory
from memlane.storage.vector_log import VectorLog

DIM = 32


def store(path: Path) -> Memory:
    return Memory(path, WordHashEmbedder(DIM), dedup_window=0)  # type: ignore[arg-type]


def made(path: Path) -> list[str]:
    with store(path) as mem:
        return [r.id for r in mem.add_many([{"text": f"shared record {i}"} for i in range(100)])]


def written_apart(tmp_path: Path, ids: list[str]) -> tuple[Path, Path]:
    """Copies a and b of the store at ``tmp_path / "s"``: a changes record 5, b record
    7 (entries of the same length at the same offset), then both add the same record
    (the same last record entry in both files)."""
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(tmp_path / "s", a)
    shutil.copytree(tmp_path / "s", b)
    for path, changed, word in ((a, ids[5], "alpha"), (b, ids[7], "beta")):
        with store(path) as mem:
            mem.update(changed, text=f"{word} rewritten")
            mem.add("common tail record")
    return a, b


def rowids(raw: bytes) -> list[int]:
    """The rowid of each entry of the vector file ``raw`` (0: a seal)."""
    out, at = [], 32
    while at < len(raw):
        rowid, length = struct.unpack_from("<QI", raw, at)
        out.append(rowid)
        at += 16 + length
    return out


def nearest(mem: Memory, vector: np.ndarray) -> str:
    return mem.search("", mode="vector", query_embedding=vector, k=1)[0].record.id


def test_a_copy_written_apart_is_refused_with_the_same_last_entry(tmp_path: Path) -> None:
    # Before, b opened a's file without a word and two rows took the other copy's
    # vectors: b's record 5 answered a search for a's "alpha rewritten" at cosine 1.
    ids = made(tmp_path / "s")
    a, b = written_apart(tmp_path, ids)
    assert (a / "vectors.log").stat().st_size == (b / "vectors.log").stat().st_size
    shutil.copy(a / "vectors.log", b / "vectors.log")
    with pytest.raises(CorruptFileError, match="another copy of the store's file"):
        store(b)


def test_a_damaged_seal_is_refused(tmp_path: Path) -> None:
    made(tmp_path / "s")
    log = tmp_path / "s" / "vectors.log"
    data = bytearray(log.read_bytes())
    data[-1] ^= 1  # the chain the last seal holds
    log.write_bytes(data)
    with pytest.raises(CorruptFileError, match="does not check"):
        store(tmp_path / "s")


def unsealed(self: VectorLog) -> tuple[int, tuple[int, int] | None]:
    """``VectorLog.sync`` as memlane wrote before seals: the entries alone, synced."""
    os.fdatasync(self._fd)
    return self._staged, self._staged_last


def test_a_file_written_before_seals_opens_and_its_next_write_seals_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as m:
        m.setattr(VectorLog, "sync", unsealed)
        ids = made(tmp_path / "s")
    log = tmp_path / "s" / "vectors.log"
    assert 0 not in rowids(log.read_bytes())
    embed = WordHashEmbedder(DIM).embed
    with store(tmp_path / "s") as mem:
        assert nearest(mem, embed("shared record 42")) == ids[42]
        added = mem.add("the first sealed write").id
    assert rowids(log.read_bytes())[-2:] == [101, 0]
    with store(tmp_path / "s") as mem:
        assert nearest(mem, embed("the first sealed write")) == added
        assert nearest(mem, embed("shared record 3")) == ids[3]
    # From that write on, copies written apart are told apart.
    a, b = written_apart(tmp_path, ids)
    shutil.copy(a / "vectors.log", b / "vectors.log")
    with pytest.raises(CorruptFileError, match="another copy"):
        store(b)


def test_writes_of_an_older_memlane_between_sealed_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store opened by an older memlane in between (one that writes no seals) goes on:
    the next seal chains from the last entry it wrote."""
    made(tmp_path / "s")
    embed = WordHashEmbedder(DIM).embed
    added = {}
    writes = [("by an older memlane", True), ("sealed again", False)]
    for text, older in [*writes, ("older again", True), ("sealed at last", False)]:
        with monkeypatch.context() as m:
            if older:
                m.setattr(VectorLog, "sync", unsealed)
            with store(tmp_path / "s") as mem:
                added[text] = mem.add(text).id
    assert rowids((tmp_path / "s" / "vectors.log").read_bytes())[-6:] == [101, 102, 0, 103, 104, 0]
    with store(tmp_path / "s") as mem:
        for text, id in added.items():
            assert nearest(mem, embed(text)) == id
