"""The store's write lock (``IndexSync.lock``): a reentrant lock that runs what its
holder deferred once that holder lets go of it.

A signal handler runs on whatever the main thread was doing, a write included, and a
handler that closes the store must not release it under that write: ``close`` joins the
store's thread, which may be waiting for this very lock (a SIGTERM handler closing the
store during a bulk load would wait for good). Called on the thread holding the lock,
``close`` defers itself here, and runs as the write ends.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable

from memlane.storage.base import held_here

__all__ = ["DeferringLock"]


class DeferringLock:
    """A ``threading.RLock`` with ``defer``."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._depth = 0  # changed by the holder alone
        self._then: tuple[int, Callable[[], None]] | None = None  # its thread, and what

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        got = self._lock.acquire(blocking, timeout)
        if got:
            self._depth += 1
        return got

    def release(self) -> None:
        self._depth -= 1
        last = self._depth == 0
        self._lock.release()
        # Read once the lock is let go: a handler run before, still holding it,
        # deferred; one run after holds it no more and does its work itself.
        then = self._then
        if last and then is not None and then[0] == threading.get_ident():
            self._then = None
            try:
                then[1]()
            except Exception as e:  # the call that held the lock succeeded: told apart
                warnings.warn(f"memlane: {e}", RuntimeWarning, stacklevel=2)

    __enter__ = acquire

    def __exit__(self, *exc: object) -> None:
        self.release()

    def _is_owned(self) -> bool:
        """Whether this thread holds the lock (as ``threading.Condition`` asks an RLock)."""
        return held_here(self._lock)

    def defer(self, then: Callable[[], None]) -> None:
        """Runs ``then`` once this thread, which holds the lock, has let go of it."""
        self._then = (threading.get_ident(), then)
