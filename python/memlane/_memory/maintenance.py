"""Background work of an open store, on one daemon thread per store: linking parked
vectors into the graph, checkpointing the WAL, flushing access counts, writing
snapshots, reading records into the row cache after the open; and the exit hook
that closes stores still open.

The thread holds the store's parts (``Upkeep``), never the ``Memory``, so a
store nobody holds is freed at once: its finalizer stops the thread, waits for the task
it is in, and releases the database and the lock.
"""

from __future__ import annotations

import atexit
import contextlib
import threading
import time
import warnings
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from memlane._memory.access import AccessLog
from memlane._memory.sync import CHECKPOINT_BYTES, IndexSync
from memlane._memory.writer import Writer
from memlane.errors import ClosedError, StorageError
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
# Rows read ahead per batch, and the pause between batches. A batch holds the GIL for all
# but the database's own steps, which give it up too briefly for a waiting thread to take
# it: a search arriving meanwhile waited for the whole batch or for the switch interval
# (5 ms). 64 rows hold it about 0.4 ms, and the pause, a blocking wait, hands it over
# (benches/README.md, "Background work that waits for searches").
WARM_BATCH = 64
WARM_PAUSE = 0.0002
# The longest a due snapshot waits for a pause between searches (see ``run``).
SNAPSHOT_WAIT = 10.0
# Bytes of the engine's buffers moved onto huge pages per step, in the pauses between
# searches once the rows are read ahead (``Engine.settle_pages``): one 2 MiB page, a few
# milliseconds, during which a search reading that page waits. Settled, the engine call
# right after a model run took 0.02-0.09 ms less at 100k, and a search scoped to one
# agent at a million 0.03-0.15 ms less (benches/README.md, "Huge pages under the
# engine's buffers").
SETTLE_STEP = 2 << 20
# How often upkeep runs while nothing wakes the thread.
UPKEEP_EVERY = 1.0


class Maintained(Protocol):
    """What the thread needs of its store (its parts, taken when it starts), and the exit
    hook."""

    location: str
    path: Path | None
    _sync: IndexSync
    _writer: Writer
    _access: AccessLog
    _finalizer: weakref.finalize[..., Any]

    def close(self) -> None: ...


class Upkeep:
    """The parts of a store its background work needs: what the thread and a shared
    store's follower hold instead of the ``Memory``."""

    def __init__(self, memory: Maintained) -> None:
        self.sync, self.writer, self.access = memory._sync, memory._writer, memory._access
        self.path, self.location = memory.path, memory.location
        #: The first failure of a background task (the only one warned of).
        self.error: Exception | None = None

    def failed(self, what: str, e: Exception) -> None:
        """Warns once (the first failure) that a background task failed."""
        if self.error is None:
            warnings.warn(
                f"memlane: {what} of {self.location} failed: {e!r}", RuntimeWarning, stacklevel=2
            )
        self.error = e


def snapshot(sync: IndexSync, writer: Writer) -> None:
    """Writes an index snapshot now (``Memory.snapshot``)."""
    with sync.lock:
        # Checked under the lock close takes to mark the store closing: a snapshot
        # begun first ends before close goes on.
        sync.check_open()
        if sync.index_dir is None:
            return
        writer.flush_access()
        sync.save()
    try:
        sync.db.gc_tombstones(sync.snap_seq)
    except StorageError:
        sync.check_open()  # closed meanwhile: say that
        raise


def run(sync: IndexSync, writer: Writer, access: AccessLog) -> None:
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
        # Only the next open needs the snapshot (the database holds every change), so it
        # waits for a pause between searches, as the reading ahead does, or at most
        # SNAPSHOT_WAIT: at a million memories it reads the whole index for over a
        # second, and searches beside it took several times as long.
        now = time.monotonic()
        if sync.snapshot_wanted is None:
            sync.snapshot_wanted = now
        if now - sync.last_search >= SEARCH_QUIET or overdue(sync):
            # A failed attempt (a full disk) then waits as long again while searches run:
            # its flush of their access counts wakes this thread, which retried at once.
            sync.snapshot_wanted = now
            snapshot(sync, writer)


def overdue(sync: IndexSync) -> bool:
    """Whether a due snapshot has waited ``SNAPSHOT_WAIT`` for a pause between searches."""
    wanted = sync.snapshot_wanted
    return wanted is not None and time.monotonic() - wanted >= SNAPSHOT_WAIT


def start(memory: Maintained, wake: threading.Event) -> threading.Thread:
    """Starts the thread of ``memory`` (and a shared store's follower)."""
    upkeep = Upkeep(memory)
    thread = threading.Thread(target=_loop, args=(upkeep, wake), daemon=True, name="memlane")
    thread.start()
    if upkeep.sync.db.shared:
        upkeep.sync.db.follow(_follower(upkeep))
    _OPEN.add(memory)
    return thread


def _loop(upkeep: Upkeep, wake: threading.Event) -> None:
    sync = upkeep.sync
    # Where reading rows into the row cache goes on (under this rowid); None once done.
    # One batch a turn, between the upkeep that a wake-up asks for.
    warm: int | None = _NEWEST
    # Whether the engine's buffers may have pages to settle: after the reading ahead,
    # and again after each upkeep (linking grows them). One step a turn, as a batch.
    settle = True
    pause = 0.0
    ran = time.monotonic()
    while True:
        stepping = warm is not None or settle
        woken = wake.wait(timeout=max(pause, WARM_PAUSE) if stepping else UPKEEP_EVERY)
        wake.clear()
        if sync.closing:
            return
        try:
            if sync.vanished(upkeep.path):
                return
            due = warm is None and time.monotonic() - ran >= UPKEEP_EVERY
            if woken or due or overdue(sync):
                ran = time.monotonic()
                settle = True
                run(sync, upkeep.writer, upkeep.access)
        except Exception as e:  # keep serving; the next wake-up retries
            if sync.closing or sync.vanished(upkeep.path):
                return
            upkeep.failed("background maintenance", e)
        pause = SEARCH_QUIET - (time.monotonic() - sync.last_search)
        if pause > 0 or sync.closing:
            continue
        if warm is not None:
            try:
                warm = sync.db.warm_cache(warm, WARM_BATCH)
            except Exception as e:  # searches read their hits from the database instead
                warm = None
                # A folder deleted meanwhile is told once, as gone (the read failed for it).
                if not sync.closing and not sync.vanished(upkeep.path):
                    upkeep.failed("reading records into the row cache", e)
        elif settle:
            try:
                settle = sync.engine.settle_pages(SETTLE_STEP) > 0
            except Exception as e:  # searches are as fast as before, on small pages
                settle = False
                upkeep.failed("settling the index on huge pages", e)


# Above every rowid (SQLite's and PostgreSQL's are signed 64-bit).
_NEWEST = 2**63 - 1


def _follower(upkeep: Upkeep) -> Callable[[], None]:
    """What a shared store's thread calls when other processes may have written."""
    sync = upkeep.sync

    def follow() -> None:
        if sync.closing:
            return
        try:
            sync.follow()
        except ClosedError:  # close began (it may close a crowded pool first)
            return
        except Exception as e:  # keep following; the next call retries
            if not sync.closing:
                upkeep.failed("following changes", e)

    return follow


def release(
    lock: StoreLock | None,
    db: Store,
    wake: threading.Event,
    sync: IndexSync | None = None,
    thread: threading.Thread | None = None,
) -> None:
    """The finalizer of a store: stops its ``thread`` and waits for the task it is in
    (its parts stay in use until then), closes the database, frees the lock."""
    if sync is not None:
        sync.closing = True
    try:
        wake.set()
        # Not from the thread itself: the garbage collector may run a finalizer there
        # (the thread then meets the closed database, and stops as the store is closing).
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        db.close()
        if lock is not None:
            lock.release()
        if sync is not None:
            sync.released = True
    finally:
        if sync is not None:
            sync.closed.set()


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
