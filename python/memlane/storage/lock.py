"""One open :class:`memlane.Memory` per store: an exclusive ``flock`` on ``<store>/lock``.

The lock belongs to an open file description, so a second open fails at once
whether it comes from another process or from this one, and the kernel
releases it when the holder exits, even through ``kill -9``.
"""

from __future__ import annotations

import os
from pathlib import Path

from memlane.errors import StorageError, StoreLockedError

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no advisory locks, no protection
    fcntl = None  # type: ignore[assignment]

__all__ = ["StoreLock"]


class StoreLock:
    def __init__(self, directory: Path) -> None:
        self.path = directory / "lock"
        try:
            self._fd: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise StorageError(f"cannot open the lock file {self.path}: {e}") from e
        if fcntl is None:  # pragma: no cover
            return
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = self._holder()
            os.close(self._fd)
            self._fd = None
            raise StoreLockedError(
                f"the memory store {directory} is already open"
                + (f" (by process {holder})" if holder else "")
                + "; close that Memory first (one Memory per store, shared by any number "
                "of threads)"
            ) from None
        os.ftruncate(self._fd, 0)
        os.write(self._fd, str(os.getpid()).encode())

    def _holder(self) -> str:
        try:
            return self.path.read_text().strip()
        except OSError:
            return ""

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
