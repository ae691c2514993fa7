"""One open ``memlane.Memory`` per store: an exclusive lock on ``<store>/lock``.

The lock is filelock's ``FileLock``: ``flock`` on POSIX, ``msvcrt``
byte locking on Windows. Both belong to the open file, so a second open fails at
once whether it comes from another process or from this one, and the system
releases the lock when its holder exits, even through ``kill -9``.

The holder writes its process id into the file, so that the error of a second
open names it. Where the lock forbids reading the file (Windows locks its bytes),
the error says the store is open without naming the process. A second open in the
process that holds the lock says so: an earlier ``memlane.Memory`` of this process
is still open (a notebook cell run again meets this).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import filelock

from memlane.errors import StorageError, StoreLockedError

__all__ = ["StoreLock"]

# The lock files this process holds, with the process that took each: a child forked
# since inherits this table and its parent's locks, which are not its own.
_held: dict[Path, int] = {}


class StoreLock:
    def __init__(self, directory: Path) -> None:
        self.path = directory / "lock"
        # The same store under any name (a relative path, a link).
        self._key = self.path.resolve()
        # thread_local=False: a store is closed from whichever thread (or the exit hook)
        # happens to close it, not always the one that opened it.
        self._lock: filelock.BaseFileLock | None = filelock.FileLock(
            self.path, timeout=0, thread_local=False
        )
        try:
            self._lock.acquire()
        except filelock.Timeout:
            self._lock = None
            if _held.get(self._key) == os.getpid():
                raise StoreLockedError(
                    f"the memory store {directory} is already open by an earlier Memory in "
                    "this process: close() it first, or open it in a `with` block (one "
                    "Memory per store, shared by any number of threads)"
                ) from None
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
        _held[self._key] = os.getpid()
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
            _held.pop(self._key, None)
            lock.release(force=True)
