"""Background work of an open store, on one daemon thread per store: linking parked
vectors into the graph, checkpointing the WAL, flushing access counts, writing
snapshots, reading records into the row cache after the open; and the exit hook
that closes stores still open.

The thread holds only a weak reference to its store, so a store nobody holds is
collected (its finalizer releases the database and the lock).
"""

from __future__ import annotations

import atexit
import contextlib
import threading
import time
import warnings
import weakref
from collections.abc import Callable
from typing import Any, Protocol

from memlane._memory.access import AccessLog
from memlane._memory.sync import CHECKPOINT_BYTES, IndexSync
from memlane._memory.writer import Writer
from memlane.storage import Store, StoreLock

# Parked vectors are linked in batches of this size. Searches run while a batch links;
# writes wait for it. Figures for this and the three below: benches/README.md, "Figures
# behind the code".
INDEX_BATCH = 1024
# With PostgreSQL, graph linking waits this long after a write, unless this many
# vectors are parked: every process that follows the store links the same vectors, and
# a loader that links its own writes meanwhile halves its rate. An embedded store has one
# process: it links during a stream of writes in smaller batches, so a write waits less
# for one.
_WRITE_QUIET = 0.2
_BUSY_BATCH = 512
_MAX_PARKED = 100_000
# One call links batches for this long before coming back for the GIL, which a writer
# running Python code hands over only every switch interval (5 ms), with a core idle
# meanwhile. Closing waits for the call to end.
LINK_BUDGET = 0.1
# Rows are read ahead into the row cache only after this long without a search: on two
# cores a search beside the reading took about twice as long (benches/README.md, "Reading
# ahead waits for a pause"), more than reading its ten hits from the database costs.
SEARCH_QUIET = 0.05


class Maintained(Protocol):
    """What the thread needs of its store."""

    location: str
    _sync: IndexSync
    _background_error: Exception | None
    _finalizer: weakref.finalize[..., Any]

    def _vanished(self) -> bool: ...
    def _maintenance(self) -> None: ...
    def close(self) -> None: ...


def run(sync: IndexSync, writer: Writer, access: AccessLog, snapshot: Callable[[], None]) -> None:
    """One pass of upkeep."""
    db = sync.db
    if db.wal_bytes() > CHECKPOINT_BYTES:
        db.checkpoint()
    while not sync.closing and (pending := sync.engine.pending()):
        # Parked vectors are searched exactly meanwhile. The linking pool runs below
        # the writers' priority, but a batch holds their engine lock while it links.
        busy = sync.busy(_WRITE_QUIET) and pending < _MAX_PARKED
        if busy and db.shared:
            time.sleep(_WRITE_QUIET / 4)
        else:
            sync.engine.index_pending(_BUSY_BATCH if busy else INDEX_BATCH, LINK_BUDGET)
        if db.wal_bytes() > CHECKPOINT_BYTES:
            db.checkpoint()
    if sync.closing:
        return
    db.checkpoint()
    writer.expire(time.time())
    if access.due(time.time()):
        writer.flush_access()
    if sync.index_dir is not None and sync.changes >= sync.snapshot_due():
        snapshot()


def start(memory: Maintained, wake: threading.Event) -> threading.Thread:
    thread = threading.Thread(
        target=_loop, args=(weakref.ref(memory), wake), daemon=True, name="memlane"
    )
    thread.start()
    _OPEN.add(memory)
    return thread


def _loop(ref: weakref.ref[Maintained], wake: threading.Event) -> None:
    # Where reading rows into the row cache goes on (under this rowid); None once done.
    # One batch a turn, between the upkeep that a wake-up asks for.
    warm: int | None = _NEWEST
    pause = 0.0
    while True:
        woken = wake.wait(timeout=1.0 if warm is None else max(pause, 0.0))
        wake.clear()
        memory = ref()
        if memory is None or memory._sync.closing:
            return
        try:
            if memory._vanished():
                return
            if woken or warm is None:
                memory._maintenance()
        except Exception as e:  # keep serving; the next wake-up retries
            if memory._vanished():
                return
            failed(memory, "background maintenance", e)
        pause = SEARCH_QUIET - (time.monotonic() - memory._sync.last_search)
        if warm is not None and pause <= 0:
            try:
                warm = memory._sync.db.warm_cache(warm)
            except Exception as e:  # searches read their hits from the database instead
                warm = None
                failed(memory, "reading records into the row cache", e)
        del memory


# Above every rowid (SQLite's and PostgreSQL's are signed 64-bit).
_NEWEST = 2**63 - 1


def failed(memory: Maintained, what: str, e: Exception) -> None:
    """Warns once (the first failure) that a background task of ``memory`` failed."""
    if memory._background_error is None:
        warnings.warn(
            f"memlane: {what} of {memory.location} failed: {e!r}", RuntimeWarning, stacklevel=2
        )
    memory._background_error = e


def follower(memory: Maintained) -> Callable[[], None]:
    """What a shared store's thread calls when other processes may have written."""
    ref = weakref.ref(memory)

    def follow() -> None:
        m = ref()
        if m is None or m._sync.closing:
            return
        try:
            m._sync.follow()
        except Exception as e:  # keep following; the next call retries
            failed(m, "following changes", e)

    return follow


def release(lock: StoreLock | None, db: Store, wake: threading.Event) -> None:
    """The finalizer of a store: stops its thread, closes the database, frees the lock."""
    wake.set()
    db.close()
    if lock is not None:
        lock.release()


# Open stores, closed at interpreter exit: their background thread may be inside the
# engine then, and a thread that comes back from native code into a finalizing
# interpreter is killed mid-frame.
_OPEN: weakref.WeakSet[Maintained] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for memory in list(_OPEN):
        with contextlib.suppress(Exception):
            memory.close()
        with contextlib.suppress(Exception):
            memory._finalizer()  # released even if close failed (a no-op after close)
