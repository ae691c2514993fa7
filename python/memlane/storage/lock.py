"""One open ``memlane.Memory`` per store: an exclusive lock on the store's folder, and on
``<store>/lock``.

On POSIX the lock that counts is ``flock`` on the folder itself, which no one removes
while the store is in it. A lock on ``<store>/lock`` alone did not hold: once the file
was removed (a user clearing a "stale" lock, a cleaner of old files), a second process
created a new one and locked it while the first still held the removed one, and both
wrote the store (found by attacking: one's adds failed as "id(s) already stored", both
appended their vectors at the same offsets, and after a reopen records were found by
another record's vector). The lock file is still taken: memlane releases before this
one lock only it, Windows locks no folder (and there a file held open cannot be
removed), and the holder writes its process id into it, so that the error of a second
open names it. Where the file system cannot lock a folder, the lock file alone keeps a
second open out, and the vector file's own lock (``storage/vector_log.py``) keeps two
processes from writing one store.

The lock file's lock is filelock's ``FileLock``: ``flock`` on POSIX, ``msvcrt`` byte
locking on Windows. Every lock here belongs to the open file, so a second open fails at
once whether it comes from another process or from this one, and the system releases
the lock when its holder exits, even through ``kill -9``. Where the lock forbids reading
the file (Windows locks its bytes), the error says the store is open without naming the
process. A second open in the process that holds the lock says so: an earlier
``memlane.Memory`` of this process is still open (a notebook cell run again meets this).
"""

from __future__ import annotations

import contextlib
import os
import sys
import weakref
from pathlib import Path
from typing import Protocol

import filelock

from memlane.errors import StorageError, StoreLockedError

if sys.platform != "win32":
    import fcntl

__all__ = ["StoreLock", "lock_open_file"]

# The lock files this process holds, with the process that took each: a child forked
# since inherits this table and its parent's locks, which are not its own.
_held: dict[Path, int] = {}


class ForkHolder(Protocol):
    def close_in_child(self) -> None:
        """Closes, in a child forked since, the descriptor that holds the lock."""


# What holds a lock taken by ``lock_open_file``. A forked child shares each locked open
# file with its parent, and with it the lock, which would then outlive the parent's
# release for as long as the child runs (a store closed and opened again refused because
# a worker forked meanwhile holds it): the child closes its descriptors at once, as
# filelock does with its own. Closing is no release: the parent's descriptor keeps it.
_holders: weakref.WeakSet[ForkHolder] = weakref.WeakSet()


def _close_in_child() -> None:
    for holder in list(_holders):
        holder.close_in_child()


if sys.platform != "win32":
    os.register_at_fork(after_in_child=_close_in_child)


def lock_open_file(fd: int, holder: ForkHolder) -> bool:
    """Takes an exclusive ``flock`` on the open file ``fd`` (POSIX) without waiting, for
    ``holder``; False if another open file of it holds one. Released when the last
    descriptor of the open file closes (never unlocked explicitly: in a forked child
    that would unlock the parent's). OSError when the file system cannot lock it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    _holders.add(holder)
    return True


class StoreLock:
    def __init__(self, directory: Path) -> None:
        self.path = directory / "lock"
        # The same store under any name (a relative path, a link).
        self._key = self.path.resolve()
        self._lock: filelock.BaseFileLock | None = None
        #: The folder, open and locked (-1: not locked, on Windows or a file system that
        #: cannot lock a folder).
        self._folder = -1
        if sys.platform != "win32":
            self._folder = self._lock_folder(directory)
        # thread_local=False: a store is closed from whichever thread (or the exit hook)
        # happens to close it, not always the one that opened it.
        lock = filelock.FileLock(self.path, timeout=0, thread_local=False)
        try:
            lock.acquire()
        except filelock.Timeout:
            self._close_folder()
            raise self._locked(directory) from None
        except OSError as e:
            self._close_folder()
            raise StorageError(f"cannot lock {self.path}: {e}") from e
        self._lock = lock
        _held[self._key] = os.getpid()
        # A separate handle: the lock's own is filelock's. Where the lock also bars
        # writing (Windows), the file stays without a process id.
        with contextlib.suppress(OSError):
            self.path.write_text(str(os.getpid()))

    def _lock_folder(self, directory: Path) -> int:
        try:
            fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as e:
            raise StorageError(f"cannot lock {directory}: {e.strerror}") from None
        try:
            held = lock_open_file(fd, self)
        except OSError:
            # This file system cannot lock a folder (some network ones): the lock file
            # alone, as before, and the vector file's lock behind it.
            os.close(fd)
            return -1
        if not held:
            os.close(fd)
            raise self._locked(directory)
        return fd

    def _locked(self, directory: Path) -> StoreLockedError:
        if _held.get(self._key) == os.getpid():
            return StoreLockedError(
                f"the memory store {directory} is already open by an earlier Memory in "
                "this process: close() it first, or open it in a `with` block (one "
                "Memory per store, shared by any number of threads)"
            )
        holder = self._holder()
        return StoreLockedError(
            f"the memory store {directory} is already open"
            + (f" (by process {holder})" if holder else "")
            + "; close that Memory first (one Memory per store, shared by any number "
            "of threads)"
        )

    def _holder(self) -> str:
        try:
            return self.path.read_text().strip()
        except OSError:
            return ""

    def _close_folder(self) -> None:
        fd, self._folder = self._folder, -1
        if fd >= 0:
            _holders.discard(self)
            os.close(fd)

    def close_in_child(self) -> None:
        with contextlib.suppress(OSError):
            self._close_folder()

    def release(self) -> None:
        try:
            if self._lock is not None:
                # Released before it is forgotten: one interrupted here is released by
                # the next call (releasing twice does nothing).
                self._lock.release(force=True)
                self._lock = None
                _held.pop(self._key, None)
        finally:
            self._close_folder()
