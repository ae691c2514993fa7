"""An embedded store's files as the system may leave them: replaced while the store is
open, a FIFO or a link that loops where a file belongs, a path the system cannot take.
Each is refused with a memlane error naming it, or taken as the damage it is (a
snapshot rebuilt), never answered from another file, waited on forever, or raised raw."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from conftest import WordHashEmbedder
from memlane import CorruptFileError, InvalidArgumentError, MemlaneError, Memory, StorageError

_REPLACED = "was replaced while this store was open"


def test_a_database_replaced_while_open_is_refused(tmp_path: Path) -> None:
    # A backup moved into place (its journal files removed): a thread that opened its
    # reader after the swap read the backup while the engine held this store's texts,
    # and an add went to the file moved away, gone at the next open.
    folder = tmp_path / "store"
    with Memory(folder, WordHashEmbedder(16)) as mem:
        recs = mem.add_many([{"text": f"original {i} apples"} for i in range(5)])
    shutil.copy(folder / "memory.db", tmp_path / "backup.db")
    mem = Memory(folder, WordHashEmbedder(16))
    try:
        mem.update(recs[0].id, text="rewritten bananas")
        for name in ("memory.db-wal", "memory.db-shm"):
            (folder / name).unlink(missing_ok=True)
        os.replace(tmp_path / "backup.db", folder / "memory.db")
        got: dict[str, object] = {}

        def read() -> None:  # a thread reading for the first time after the swap
            try:
                got["text"] = mem.get(recs[0].id).text
            except MemlaneError as e:
                got["error"] = e

        t = threading.Thread(target=read)
        t.start()
        t.join()
        assert isinstance(got.get("error"), StorageError), got
        assert _REPLACED in str(got["error"])
        with pytest.raises(StorageError, match=_REPLACED):
            mem.add("written after the swap")
    finally:
        # Its snapshot is not written either (released all the same, as PostgreSQL's).
        with contextlib.suppress(StorageError):
            mem.close()


def test_a_database_removed_while_open_is_refused_at_the_next_write(tmp_path: Path) -> None:
    folder = tmp_path / "store"
    mem = Memory(folder, WordHashEmbedder(16))
    try:
        mem.add("kept")
        (folder / "memory.db").rename(tmp_path / "moved.db")
        with pytest.raises(StorageError, match=_REPLACED):
            mem.add("lost")
    finally:
        with contextlib.suppress(StorageError):
            mem.close()


def _two_stores_alike(tmp_path: Path) -> tuple[Path, Path]:
    """Two stores of the same records embedded by two models of one dimension: their
    vector files hold entries at the same offsets under the same rowids."""
    items = [{"text": f"note {i} about apples"} for i in range(10)]
    for name in ("a", "b"):
        with Memory(tmp_path / name, WordHashEmbedder(16, name=f"model-{name}")) as m:
            m.add_many(items)
    return tmp_path / "a", tmp_path / "b"


def test_a_vector_file_replaced_while_open_is_refused(tmp_path: Path) -> None:
    # get(include_embedding=True) and export_jsonl() returned the other store's vectors.
    a, b = _two_stores_alike(tmp_path)
    with Memory(a, WordHashEmbedder(16, name="model-a")) as mem:
        rec = mem.list(limit=1)[0]
        own = mem.get(rec.id, include_embedding=True).embedding
        shutil.copy(b / "vectors.log", tmp_path / "swap.log")
        os.replace(tmp_path / "swap.log", a / "vectors.log")
        with pytest.raises(StorageError, match=_REPLACED):
            mem.get(rec.id, include_embedding=True)
        with pytest.raises(StorageError, match=_REPLACED):
            mem.export_jsonl(tmp_path / "out.jsonl")
        with pytest.raises(StorageError, match=_REPLACED):
            mem.add("a write after the swap")
        # What it read before the swap was its own.
        assert own is not None
        assert np.allclose(own, WordHashEmbedder(16, name="model-a").embed(rec.text), atol=1e-2)


def test_a_vector_file_overwritten_in_place_is_refused(tmp_path: Path) -> None:
    # Copied over in place, the file keeps its inode: its header tells.
    a, b = _two_stores_alike(tmp_path)
    with Memory(a, WordHashEmbedder(16, name="model-a")) as mem:
        rec = mem.list(limit=1)[0]
        (a / "vectors.log").write_bytes((b / "vectors.log").read_bytes())
        with pytest.raises(CorruptFileError, match="no longer this store's"):
            mem.get(rec.id, include_embedding=True)


@pytest.mark.parametrize(
    ("path", "error", "message"),
    [
        (b"/tmp/a store", InvalidArgumentError, "got bytes"),
        (12, InvalidArgumentError, "got int"),
        ("a\0b", InvalidArgumentError, "NUL byte"),
    ],
)
def test_a_path_that_names_no_folder_is_refused(
    path: object, error: type[Exception], message: str
) -> None:
    # Raw TypeError (bytes, an int) and ValueError (a NUL byte) before.
    with pytest.raises(error, match=message):
        Memory(path, None)  # type: ignore[arg-type]


def test_a_name_longer_than_the_system_takes_is_a_storage_error(tmp_path: Path) -> None:
    # A raw OSError (ENAMETOOLONG) before.
    with pytest.raises(StorageError, match=r"a{300}.*too long"):
        Memory(tmp_path / ("a" * 300), None)


@pytest.mark.parametrize("where", ["memory.db-loop", "index/loop"])
def test_stats_skips_a_link_that_loops(tmp_path: Path, where: str) -> None:
    # stats() raised a raw OSError (ELOOP) summing the store's files.
    folder = tmp_path / "store"
    with Memory(folder, WordHashEmbedder(16)) as mem:
        mem.add("a fact")
        mem.snapshot()
        loop = folder / where
        os.symlink(loop.name, loop)
        stats = mem.stats()
    assert stats.database_bytes and stats.index_bytes


_OPEN = """
import sys, warnings
from conftest import WordHashEmbedder
from memlane import Memory
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    with Memory(sys.argv[1], WordHashEmbedder(16)) as m:
        print(len(m), any("rebuilding" in str(w.message) for w in seen))
"""


@pytest.mark.parametrize("name", ["records.bin", "bm25.bin", "hnsw.bin", "store_id", "indexes"])
def test_a_fifo_beside_a_snapshot_is_a_damaged_snapshot(tmp_path: Path, name: str) -> None:
    # The open read the FIFO and waited for a writer forever. In a child with a time
    # limit, so the old code's wait fails the test instead of holding it.
    folder = tmp_path / "store"
    with Memory(folder, WordHashEmbedder(16)) as mem:
        mem.add_many([{"text": f"note {i}"} for i in range(5)])
        mem.snapshot()
    index = folder / "index"
    (target,) = [p for p in index.rglob(name) if p.is_file()]
    target.unlink()
    os.mkfifo(target)
    tests = Path(__file__).resolve().parents[1]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tests), os.environ.get("PYTHONPATH", "")]),
    }
    run = subprocess.run(
        [sys.executable, "-c", _OPEN, str(folder)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == ["5", "True"]
