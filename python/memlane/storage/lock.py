"""One open :class:`memlane.Memory` per store: an exclusive lock on ``<store>/lock``.

The lock is filelock's :class:`~filelock.FileLock`: ``flock`` on POSIX, ``msvcrt``
byte locking on Windows. Both belong to the open file, so a second open fails at
once whether it comes from another process or from this one, and the system
releases the lock when its holder exits, even through ``kill -9``.

The holder writes its process id into the file, so that the error of a second
open names it. Where the lock forbids reading the file (Windows locks its bytes),
the error says the store is open without naming the process.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import filelock

from memlane.errors import StorageError, StoreLockedError

__all__ = ["StoreLock"]


class StoreLock:
    def __init__(self, directory: Path) -> None:
        self.path = directory / "lock"
        # thread_local=False: a store is closed from whichever thread (or the exit hook)
        # happens to close it, not always the one that opened it.
        self._lock: filelock.BaseFileLock | None = filelock.FileLock(
            self.path, timeout=0, thread_local=False
        )
        try:
            self._lock.acquire()
        except filelock.Timeout:
            self._lock = None
            holder = self._holder()
            raise StoreLockedError(
                f"the memory store {directory} is already open"
                + (f" (by process {holder})" if holder else "")
                + "; close that Memory first (one Memory per store, shared by any number "
                "of threads)"
            ) from None
        except OSError as e:
            self._lock = None
            raise StorageError(f"cannot lock {self.path}: {e}") from e
        # A separate handle: the lock's own is filelock's. Where the lock also bars
        # writing (Windows), the file stays without a process id.
        with contextlib.suppress(OSError):
            self.path.write_text(str(os.getpid()))

    def _holder(self) -> str:
        try:
            return self.path.read_text().strip()
        except OSError:
            return ""

    def release(self) -> None:
        if self._lock is not None:
            lock, self._lock = self._lock, None
            lock.release(force=True)
