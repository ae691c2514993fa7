"""The store lock (filelock): one open Memory per store, the holder named, released anywhere."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from memlane.errors import StoreLockedError
from memlane.storage import StoreLock


def test_a_second_lock_in_the_holding_process_says_so(tmp_path: Path) -> None:
    lock = StoreLock(tmp_path)
    try:
        with pytest.raises(StoreLockedError, match="by an earlier Memory in this process"):
            StoreLock(tmp_path)
        # The same store under another name.
        with pytest.raises(StoreLockedError, match="in this process"):
            StoreLock(tmp_path / ".." / tmp_path.name)
    finally:
        lock.release()
    StoreLock(tmp_path).release()


def test_another_process_is_refused_and_named(tmp_path: Path) -> None:
    code = (
        "import sys\nfrom pathlib import Path\nfrom memlane.storage import StoreLock\n"
        "from memlane.errors import StoreLockedError\n"
        "try:\n    StoreLock(Path(sys.argv[1]))\n"
        "except StoreLockedError as e:\n    print('locked', e)\n"
        "else:\n    print('acquired')\n"
    )
    lock = StoreLock(tmp_path)
    try:
        out = subprocess.run(
            [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=60
        )
        assert out.stdout.startswith("locked"), out.stderr
        assert f"by process {os.getpid()}" in out.stdout
    finally:
        lock.release()
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert out.stdout.strip() == "acquired", out.stderr


def test_released_from_another_thread(tmp_path: Path) -> None:
    # Memory.close may run on any thread (or the exit hook), not the one that opened it.
    lock = StoreLock(tmp_path)
    held = lock._lock  # kept alive here, so that only release() (not garbage) frees it
    t = threading.Thread(target=lock.release)
    t.start()
    t.join()
    StoreLock(tmp_path).release()
    del held


def test_release_twice_is_harmless(tmp_path: Path) -> None:
    lock = StoreLock(tmp_path)
    lock.release()
    lock.release()
    again = StoreLock(tmp_path)
    with pytest.raises(StoreLockedError):
        StoreLock(tmp_path)
    again.release()


def test_a_killed_holder_frees_the_store(tmp_path: Path) -> None:
    code = (
        "import os, sys\nfrom pathlib import Path\nfrom memlane.storage import StoreLock\n"
        "lock = StoreLock(Path(sys.argv[1]))\nprint('held', flush=True)\nos._exit(0)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert out.stdout.strip() == "held", out.stderr
    StoreLock(tmp_path).release()


def test_an_unlockable_place_is_a_storage_error(tmp_path: Path) -> None:
    from memlane.errors import StorageError

    (tmp_path / "a-file").write_text("not a folder")
    with pytest.raises(StorageError, match="cannot lock"):
        StoreLock(tmp_path / "a-file")
