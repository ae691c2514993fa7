"""The store lock holds when its lock file is removed or replaced under an open store:
a second process is refused (the store's folder is locked, and its vector file), never
let in to write beside the first. Each test runs two real processes."""

from __future__ import annotations

import errno
import os
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import memlane.storage.lock as lock_module
from memlane import Memory, StoreLockedError
from memlane.storage import StoreLock

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX locks")

# The first process: opens the store (a Memory, or the bare lock a PostgreSQL store's
# snapshot folder takes), says so, and holds it until told to close.
_HOLDER = """
import sys
from pathlib import Path
from memlane import Memory
from memlane.storage import StoreLock
if sys.argv[2] == "memory":
    held = Memory(sys.argv[1], None)
    held.add("written by the first process")
    close = held.close
else:
    close = StoreLock(Path(sys.argv[1])).release
print("open", flush=True)
sys.stdin.readline()
close()
print("closed", flush=True)
"""


@contextmanager
def held(path: Path, what: str = "memory") -> Iterator[subprocess.Popen[str]]:
    first = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(path), what],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert first.stdin is not None and first.stdout is not None
    try:
        assert first.stdout.readline().strip() == "open", first.communicate(timeout=60)
        yield first
        first.stdin.write("\n")
        first.stdin.flush()
        assert first.stdout.readline().strip() == "closed", first.communicate(timeout=60)
    finally:
        first.kill()
        first.communicate(timeout=60)


def test_a_removed_lock_file_keeps_a_second_process_out(tmp_path: Path) -> None:
    # The old lock let the second Memory in: both wrote one database and one vector file
    # (an add failed as "id(s) already stored", vectors were appended at the same offsets).
    store = tmp_path / "store"
    with held(store):
        (store / "lock").unlink()
        with pytest.raises(StoreLockedError, match="already open"):
            Memory(store, None)
        # Nor when a new lock file stands in the removed one's place.
        (store / "lock").write_text("")
        with pytest.raises(StoreLockedError, match="already open"):
            Memory(store, None)
    with Memory(store, None) as mem:
        assert [r.text for r in mem.list()] == ["written by the first process"]


def test_a_snapshot_folders_lock_holds_without_its_file(tmp_path: Path) -> None:
    """The lock of a PostgreSQL store's snapshot folder (cache_dir) is the same lock."""
    with held(tmp_path, "lock"):
        (tmp_path / "lock").unlink()
        with pytest.raises(StoreLockedError, match="already open"):
            StoreLock(tmp_path)
    StoreLock(tmp_path).release()


def _no_folder_locks(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process's file system, as one that cannot lock a folder."""
    flock: Callable[[int, int], None] = lock_module.fcntl.flock

    def files_only(fd: int, operation: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError(errno.ENOTSUP, os.strerror(errno.ENOTSUP))
        flock(fd, operation)

    monkeypatch.setattr(lock_module.fcntl, "flock", files_only)


def test_where_a_folder_cannot_be_locked_the_vector_file_keeps_a_second_writer_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the folder's lock, the lock file removed lets a second process past the
    store lock; the vector file's own lock still refuses it before it writes."""
    store = tmp_path / "store"
    with held(store):
        _no_folder_locks(monkeypatch)
        (store / "lock").unlink()
        with pytest.raises(StoreLockedError, match=r"vector file .* is open in another process"):
            Memory(store, None)
    # The lock file alone still keeps a second open of this process out.
    first = StoreLock(store)
    with pytest.raises(StoreLockedError, match="in this process"):
        StoreLock(store)
    first.release()
    with Memory(store, None) as mem:
        mem.add("written by the second process")
        assert len(mem) == 2


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork on this platform")
def test_a_forked_child_does_not_keep_the_store_locked(tmp_path: Path) -> None:
    """A child forked while the store is open shares its locked files; it closes them,
    so that the parent's close frees the store while the child still runs."""
    store = tmp_path / "store"
    mem = Memory(store, None)
    mem.add("written before the fork")
    # The child waits for the end of the pipe: the parent closing its end.
    until, done = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: holds what it inherited until the parent is done
        os.close(done)
        os.read(until, 1)
        os._exit(0)
    os.close(until)
    try:
        mem.close()
        with Memory(store, None) as again:
            assert len(again) == 1
    finally:
        os.close(done)
        os.waitpid(pid, 0)
