"""Access counts that searches gather, kept here until a write flushes them.

The engine sees an access at once (its recency restarts); the database gets
the counts in batches (with the next write, every ``FLUSH_SECONDS`` and at
close), so a crash loses the last seconds of counts, never a memory. A record read
meanwhile counts what its row holds and what is gathered here; a flush's counts stay
here too until its change commits, so a count read never goes back. A deleted record's
counts are not forgotten at its delete: a search racing the delete still shows them, a
delete that rolled back leaves them to be saved, and the next flush, which finds no row
to write them to, lets them go.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from memlane.schema import Row
from memlane.storage import Store

FLUSH_SECONDS = 10.0
#: Pending records past which the background thread flushes at once.
FLUSH_COUNT = 50_000
#: How long what a flush wrote stays here: a row read before its change committed
#: (counted as it was read) is used within a call, far inside it.
KEEP_FLUSHED_SECONDS = 5.0


def _merged(a: tuple[int, float] | None, b: tuple[int, float] | None) -> tuple[int, float] | None:
    if a is None or b is None:
        return a or b
    return a[0] + b[0], max(a[1], b[1])


class AccessLog:
    def __init__(self) -> None:
        self._pending: dict[int, tuple[int, float]] = {}
        self._since = 0.0
        # What recent flushes wrote, each with its change and when: a row read before a
        # flush's change committed (its seq below it) counts none of that flush's
        # accesses, as a flush sets the seq of the rows it counts. Writes take turns, so
        # a flush finds the last one committed, or rolled back if it takes the same change.
        self._flushed: deque[tuple[int, float, dict[int, tuple[int, float]]]] = deque()
        # The same by record, oldest first: (change, counts) of each of those flushes that
        # counted it. A read looks up its rows here, not in every flush of the last
        # seconds, which a loop of writes and searches makes thousands.
        self._by_row: dict[int, deque[tuple[int, tuple[int, float]]]] = {}
        # The newest change of this process known to have committed.
        self._committed = 0
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

    def committed(self, seq: int) -> None:
        """Change ``seq`` of this process committed (with the counts its flush wrote)."""
        with self._lock:
            self._committed = max(self._committed, seq)

    def unsaved(self) -> bool:
        """Whether the last flush's change never committed (its transaction rolled back),
        so its counts wait for a flush that takes that change again."""
        with self._lock:
            return bool(self._flushed) and self._flushed[-1][0] > self._committed

    def due(self, now: float) -> bool:
        return bool(self._pending) and (
            now - self._since >= FLUSH_SECONDS or len(self._pending) >= FLUSH_COUNT
        )

    def _uncounted(self, row: Row) -> tuple[int, float] | None:
        out = self._pending.get(row.rowid)
        # Newest first, down to the row's own change: a row read after a flush committed
        # (the row cache's are brought up to it) has none of the older ones to add.
        for seq, counted in reversed(self._by_row.get(row.rowid, ())):
            if seq <= row.seq:
                break
            out = _merged(counted, out)
        return out

    def _keep(self, seq: int, now: float, accesses: dict[int, tuple[int, float]]) -> None:
        self._flushed.append((seq, now, accesses))
        for r, a in accesses.items():
            self._by_row.setdefault(r, deque()).append((seq, a))

    def _let_go(self, accesses: dict[int, tuple[int, float]], newest: bool) -> None:
        """Forgets a flush by record: the oldest kept, or with ``newest`` the newest."""
        for r in accesses:
            entries = self._by_row[r]
            if newest:
                entries.pop()
            else:
                entries.popleft()
            if not entries:
                del self._by_row[r]

    def get(self, row: Row) -> tuple[int, float] | None:
        """(accesses, last access) that ``row``, as it was read, does not count."""
        with self._lock:
            return self._uncounted(row)

    def of(self, rows: Iterable[Row]) -> Mapping[int, tuple[int, float]]:
        """``get`` of each row, for the rows that have some."""
        with self._lock:
            if not self._pending and not self._flushed:
                return {}
            found = ((row.rowid, self._uncounted(row)) for row in rows)
            return {r: a for r, a in found if a is not None}

    def flush(self, db: Store, conn: Any, seq: int) -> None:
        """Writes the gathered counts inside the caller's transaction (change ``seq``),
        with those of the last flush again if its transaction rolled back."""
        now = time.monotonic()
        with self._lock:
            accesses, self._pending = self._pending, {}
            if self._flushed and self._flushed[-1][0] == seq:  # its change never committed
                _, _, again = self._flushed.pop()
                self._let_go(again, newest=True)
                for r, a in again.items():
                    accesses[r] = _merged(a, accesses.get(r))  # type: ignore[assignment]
            # Oldest first: the flushes to let go lead the list.
            while self._flushed and now - self._flushed[0][1] >= KEEP_FLUSHED_SECONDS:
                self._let_go(self._flushed.popleft()[2], newest=False)
            if accesses:
                self._keep(seq, now, accesses)
        if accesses:
            db.record_accesses(conn, accesses, seq)
