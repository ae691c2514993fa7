"""Access counts that searches gather, kept here until a write flushes them.

The engine sees an access at once (its recency restarts); the database gets
the counts in batches (with the next write, every ``FLUSH_SECONDS`` and at
close), so a crash loses the last seconds of counts, never a memory.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from memlane.storage import Store

FLUSH_SECONDS = 10.0
#: Pending records past which the background thread flushes at once.
FLUSH_COUNT = 50_000


class AccessLog:
    def __init__(self) -> None:
        self._pending: dict[int, tuple[int, float]] = {}
        self._since = 0.0
        self._lock = threading.Lock()

    def __bool__(self) -> bool:
        return bool(self._pending)

    def note(self, rowids: Sequence[int], now: float) -> bool:
        """Counts an access of each rowid at ``now``; returns whether a flush is due."""
        with self._lock:
            if not self._pending:
                self._since = now
            for r in rowids:
                # The latest access stays (searches in other threads may note theirs late).
                n, at = self._pending.get(r, (0, now))
                self._pending[r] = (n + 1, max(at, now))
            return len(self._pending) >= FLUSH_COUNT

    def due(self, now: float) -> bool:
        return bool(self._pending) and (
            now - self._since >= FLUSH_SECONDS or len(self._pending) >= FLUSH_COUNT
        )

    def get(self, rowid: int) -> tuple[int, float] | None:
        """(accesses, last access) of ``rowid`` not yet flushed."""
        return self._pending.get(rowid)

    def of(self, rowids: Iterable[int]) -> Mapping[int, tuple[int, float]]:
        """(accesses, last access) not yet flushed, of those rowids that have some."""
        with self._lock:
            p = self._pending
            return {r: p[r] for r in rowids if r in p} if p else {}

    def drop(self, rowids: Iterable[int]) -> None:
        """Forgets the accesses of deleted records."""
        with self._lock:
            for r in rowids:
                self._pending.pop(r, None)

    def flush(self, db: Store, conn: Any, seq: int) -> None:
        """Writes the gathered counts inside the caller's transaction (change ``seq``)."""
        with self._lock:
            if not self._pending:
                return
            accesses, self._pending = self._pending, {}
        db.record_accesses(conn, accesses, seq)
