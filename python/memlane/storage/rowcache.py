"""Records kept in process, so reading the hits of a search does not go to the database.

A PostgreSQL store's search runs in the process's own indexes; the records it
returns would cost a round trip each time. A SQLite store reads them from a mapped
file, but a search after other work (the query's embedding, the caller's own) finds
those pages and SQLite's code out of the CPU caches, so reading the hits there costs
several times what this cache does (benches/README.md has the figures).
``RowCache`` keeps rows (without their vectors), least recently used out first.
Every write puts its rows in, so in a process that wrote them a new question's hits
are found here too; a process that opens a store reads its rows in (newest first, in
the background, in pauses between searches:
``warm_cache``) until the cache is full. It is as
fresh as the indexes: the change log that updates them refreshes it too.

Staleness is ruled out by sequence numbers (every row carries the number of its
last change): a row replaces a cached one only if it is as new, and a write of
this process sets a floor under the rows it touches, so a read that began before
the write cannot put back what the write replaced.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from memlane.records import SCOPE_FIELDS
from memlane.schema import COLUMNS, Row

_new = tuple.__new__
_EMBEDDING = COLUMNS.index("embedding")
_SEQ = COLUMNS.index("seq")
_METADATA = COLUMNS.index("metadata")
#: Columns whose values repeat from row to row (a table, a type, a scope, a speaker).
_SHARED = tuple(COLUMNS.index(c) for c in ("tbl", "type", *SCOPE_FIELDS, "speaker"))
_NO_METADATA = "{}"
_CREATED = COLUMNS.index("created_at")
_LAST_ACCESS = COLUMNS.index("last_accessed_at")
_ACCESSES = COLUMNS.index("access_count")
#: Times that equal the creation time in a record never changed or read since.
_TIMES = tuple(COLUMNS.index(c) for c in ("updated_at", "last_accessed_at", "recorded_at"))

__all__ = ["DEFAULT_CAPACITY", "OFFER_CHARS", "RowCache"]

#: Rows kept by default. With the vectors in the engine, a 100k-record store holds all
#: its rows for about a sixth more memory, and a new question's search stays as fast as
#: at 10k (figures in benches/README.md, "Figures behind the code"); 150,000 leaves
#: such a store room to grow. A full cache of WordNet memories takes 0.9 kB a row
#: (126 MiB), which at a million memories keeps the process under 2 GiB
#: (benches/README.md, "A million memories' RSS with the row cache full").
DEFAULT_CAPACITY = 150_000

#: Text and metadata (characters) that reading ahead brings in at most: short memories
#: fill the cache by rows long before (100k WordNet glosses hold 7.7 M), while 150,000
#: document fragments of 1,500 characters would hold some 300 MB in every process that
#: opens their store; reading ahead stops at about 100 MB of them.
OFFER_CHARS = 64_000_000

# A read in flight takes well under this; older floors protect nothing.
_FLOOR_SECONDS = 60.0
_FLOOR_PRUNE = 10_000


def _kept(row: Row) -> tuple[Any, ...]:
    """``row`` as the cache keeps it: a plain tuple without the vector, each value that
    repeats from row to row held once (every row read from the database brings its own
    copy of its table's name, its type, its scope), and each time equal to the creation
    time held as that one object."""
    values = list(row)
    values[_EMBEDDING] = None
    for i in _SHARED:
        v = values[i]
        if type(v) is str:
            values[i] = sys.intern(v)
    if values[_METADATA] == _NO_METADATA:
        values[_METADATA] = _NO_METADATA
    created = values[_CREATED]
    for i in _TIMES:
        if values[i] == created:
            values[i] = created
    return tuple(values)


class RowCache:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        # Plain tuples, made Rows on the way out: the garbage collector untracks a
        # tuple of atoms but keeps tracking a tuple subclass, and tens of thousands of
        # cached Rows made every collection (and so every bulk write) slower.
        self._rows: OrderedDict[int, tuple[Any, ...]] = OrderedDict()
        # Oldest first (a row written again moves to the end), so that pruning stops at
        # the first floor still young: a burst of writes never rescans them all.
        self._floors: OrderedDict[int, tuple[int, float]] = OrderedDict()
        self._lock = threading.Lock()
        # Characters of text and metadata that offer() has taken in.
        self._offered = 0

    def __len__(self) -> int:
        return len(self._rows)

    def get(self, rowids: Sequence[int]) -> tuple[dict[int, Row], list[int]]:
        """The cached rows among ``rowids``, and the rowids to read from the database."""
        found: dict[int, Row] = {}
        missing: list[int] = []
        rows = self._rows
        with self._lock:
            for r in rowids:
                row = rows.get(r)
                if row is None:
                    missing.append(r)
                else:
                    rows.move_to_end(r)
                    # A Row of the kept tuple, which has its fields (``_kept``), without
                    # ``Row._make``'s Python-level check of the length.
                    found[r] = _new(Row, row)
        return found, missing

    def put(self, rows: Iterable[Row]) -> None:
        """Keeps these rows, read from the database or written to it (vectors are
        dropped), unless a newer state of them is known."""
        if self.capacity <= 0:
            return
        with self._lock:
            for row in rows:
                rowid, seq = row.rowid, row.seq
                floor = self._floors.get(rowid)
                if floor is not None and seq < floor[0]:
                    continue
                cached = self._rows.get(rowid)
                if cached is not None and cached[_SEQ] > seq:
                    continue
                self._rows[rowid] = _kept(row)
                self._rows.move_to_end(rowid)
            while len(self._rows) > self.capacity:
                self._rows.popitem(last=False)

    def room(self) -> bool:
        """Whether rows read ahead may still come in: the cache holds fewer rows than it
        may, and those read ahead hold less than ``OFFER_CHARS`` of text."""
        return len(self._rows) < self.capacity and self._offered < OFFER_CHARS

    def offer(self, rows: Iterable[Row]) -> None:
        """Keeps these rows, read ahead of any search (``SQLStore.warm_cache``),
        where there is room, as the least recently used: a row already kept, or one a
        write of this process changed since, stays as it is, and none is pushed out."""
        with self._lock:
            for row in rows:
                if not self.room():
                    return
                rowid = row.rowid
                floor = self._floors.get(rowid)
                if rowid in self._rows or (floor is not None and row.seq < floor[0]):
                    continue
                self._rows[rowid] = _kept(row)
                self._rows.move_to_end(rowid, last=False)
                self._offered += len(row.text) + len(row.metadata)

    def invalidate(self, rowids: Iterable[int], seq: int, *, keep: bool = False) -> None:
        """Drops rows a write (change ``seq``) touches; older reads of them are refused.
        With ``keep``, the rows stay as they are until the write commits (``accessed``)
        or rolls back (``forget``)."""
        now = time.monotonic()
        with self._lock:
            floors = self._floors
            for r in rowids:
                if not keep:
                    self._rows.pop(r, None)
                floors[r] = (seq, now)
                floors.move_to_end(r)
            while len(floors) > _FLOOR_PRUNE and now - next(iter(floors.values()))[1] >= (
                _FLOOR_SECONDS
            ):
                floors.popitem(last=False)

    def accessed(self, accesses: Mapping[int, tuple[int, float]], seq: int, top: int) -> None:
        """Brings kept rows to what a committed flush of access counts (change ``seq``)
        made of them in the database, as its statement does: the count added (at most
        ``top``), the later access kept. Only for a database no other process writes,
        where nothing else changed them since they were kept."""
        with self._lock:
            rows = self._rows
            for r, (n, at) in accesses.items():
                row = rows.get(r)
                if row is None or row[_SEQ] >= seq:
                    continue
                values = list(row)
                values[_ACCESSES] = min(top, row[_ACCESSES] + n)
                values[_LAST_ACCESS] = max(row[_LAST_ACCESS], at)
                values[_SEQ] = seq
                rows[r] = tuple(values)

    def forget(self, rowids: Iterable[int]) -> None:
        """Drops deleted rows."""
        with self._lock:
            for r in rowids:
                self._rows.pop(r, None)
