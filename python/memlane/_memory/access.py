"""Access counts that searches gather, kept here until a write flushes them.

The engine sees an access at once (its recency restarts); the database gets
the counts in batches (with the next write, every ``FLUSH_SECONDS`` and at
close), so a crash loses the last seconds of counts, never a memory. A record read
meanwhile counts what its row holds and what is gathered here; a flush's counts stay
here too until its change commits, so a count read never goes back.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from memlane.schema import Row
from memlane.storage import Store

FLUSH_SECONDS = 10.0
#: Pending records past which the background thread flushes at once.
FLUSH_COUNT = 50_000


def _merged(a: tuple[int, float] | None, b: tuple[int, float] | None) -> tuple[int, float] | None:
    if a is None or b is None:
        return a or b
    return a[0] + b[0], max(a[1], b[1])


class AccessLog:
    def __init__(self) -> None:
        self._pending: dict[int, tuple[int, float]] = {}
        self._since = 0.0
        # What the last flush wrote and its change: a row read before that change
        # committed (its seq below it) counts none of them yet. Writes take turns, so
        # the next flush finds it committed, or rolled back when it takes the same change.
        self._flushed: dict[int, tuple[int, float]] = {}
        self._flushed_seq = 0
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

    def get(self, row: Row) -> tuple[int, float] | None:
        """(accesses, last access) that ``row``, as it was read, does not count."""
        with self._lock:
            pending = self._pending.get(row.rowid)
            if row.seq >= self._flushed_seq or not self._flushed:
                return pending
            return _merged(self._flushed.get(row.rowid), pending)

    def of(self, rows: Iterable[Row]) -> Mapping[int, tuple[int, float]]:
        """``get`` of each row, for the rows that have some."""
        with self._lock:
            if not self._pending and not self._flushed:
                return {}
            out = {}
            for row in rows:
                flushed = self._flushed.get(row.rowid) if row.seq < self._flushed_seq else None
                if (got := _merged(flushed, self._pending.get(row.rowid))) is not None:
                    out[row.rowid] = got
            return out

    def drop(self, rowids: Iterable[int]) -> None:
        """Forgets the accesses of deleted records."""
        with self._lock:
            for r in rowids:
                self._pending.pop(r, None)
                self._flushed.pop(r, None)

    def flush(self, db: Store, conn: Any, seq: int) -> None:
        """Writes the gathered counts inside the caller's transaction (change ``seq``),
        with those of the last flush again if its transaction rolled back."""
        with self._lock:
            accesses, self._pending = self._pending, {}
            if seq == self._flushed_seq:  # the change the last flush took, never committed
                for r, a in self._flushed.items():
                    accesses[r] = _merged(a, accesses.get(r))  # type: ignore[assignment]
            self._flushed, self._flushed_seq = accesses, seq
        if accesses:
            db.record_accesses(conn, accesses, seq)
