"""The engine kept in step with the database: the change-log protocol's reader.

Every change up to ``IndexSync.seq`` is in the engine, and so are this
process's own later changes (``IndexSync.own``, when another process
committed in between). Opening loads the newest snapshot and replays the
changes beyond it; a shared store's thread calls ``IndexSync.follow``
when other processes may have written.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence, Set
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from memlane._core import Engine, unblobs
from memlane._memory import collector
from memlane._memory.access import AccessLog
from memlane._memory.deferring_lock import DeferringLock
from memlane._memory.encoding import prepare
from memlane._memory.events import Events
from memlane._memory.snapshot_notes import (
    GENERATION,
    INDEXED,
    INDEXES,
    other_history,
    read_note,
    write_note,
)
from memlane._memory.vector_fill import (
    NAMED,
    damage_error,
    decodes,
    fill,
    read_ahead,
    refused_as_damage,
    refused_vectors,
)
from memlane.coerce import FloatArray, usable_vectors
from memlane.errors import (
    ClosedError,
    CorruptFileError,
    MemlaneError,
    StorageError,
)
from memlane.schema import Row
from memlane.storage import Store
from memlane.storage.base import held_here
from memlane.storage.sqlite import EPOCHS, read_epochs

#: Vector precisions of the in-memory index (see ``HnswIndex``).
PRECISIONS = ("f32", "f16", "int8", "int8+f16")
# Batches up to this size are linked into the graph by the writer itself.
_INLINE_INDEX = 64
#: Parked vectors past which a bulk write to an embedded store first links as many as it
#: adds (``IndexSync.keep_up``), since every search scans what is parked
#: (benches/README.md, "Searches while a bulk load runs" and "The bound on parked vectors").
MAX_PARKED = 4096
_KEEP_UP_BATCH = 1024
# Rows a replay applies before it pauses the garbage collector (see collector.paused).
_PAUSE_COLLECTOR_ROWS = 50_000
# The WAL is checkpointed (off the write path) past this size.
CHECKPOINT_BYTES = 32 << 20

# Forks this process descends from: a store opened before one belongs to the parent
# (its connections, locks and threads), and the child must open its own.
_forks = 0


def _forked() -> None:
    global _forks
    _forks += 1


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(after_in_child=_forked)


class IndexSync:
    """The engine of one store, and where it stands in the database's change log."""

    #: When a search last started (monotonic seconds; -inf: none yet): reading rows
    #: ahead into the row cache waits for a pause between searches. The monotonic clock
    #: starts anywhere (at boot on Linux), so no finite time stands for "never".
    last_search = -math.inf

    def __init__(
        self,
        db: Store,
        index_dir: Path | None,
        location: str,
        dim: int | None,
        engine_args: dict[str, Any],
        access: AccessLog,
        wake: threading.Event,
    ) -> None:
        self.db = db
        self.index_dir = index_dir
        self.location = location
        self.dim = dim
        self.engine_args = engine_args
        #: Whether vectors are stored in half floats (see ``encoding.blobs``): unless the
        #: index holds them in full, the database keeps no more than the index uses.
        self.half = engine_args["precision"] != "f32"
        self.access = access
        self.wake = wake
        #: Held by every write: one writer at a time applies its commit to the engine.
        self.lock = DeferringLock()
        #: Set (under the lock) when the store closes; background work then stops.
        self.closing = False
        #: Set as a ``close`` begins, before it waits for the write in flight.
        self.asked = False
        #: Set once the first ``close`` has released the store: a later one waits for it.
        self.closed = threading.Event()
        #: The thread of that first ``close``, and whether its release went to its end.
        self.closer: threading.Thread | None = None
        self.released = False
        #: Why the store is unusable (its folder vanished), if it is.
        self.gone: str | None = None
        self.forks = _forks
        self.changes = 0  # since the last snapshot
        #: Since when a snapshot has been due (monotonic seconds), None when none is.
        self.snapshot_wanted: float | None = None
        self.snapshot_every = 10_000
        # Whether snapshots keep the live vectors (see Memory's snapshot_vectors).
        self.snapshot_vectors = True
        #: Whether the open refused the snapshot there (see save).
        self.refused = False
        self.own: set[int] = set()
        #: The newest change of this process the engine holds (see ``check_open``).
        self.applied = 0
        #: Whether the open re-embedded every record (``pinning``): the index is rebuilt.
        self.reembedded = False
        self._in_flight = 0
        self._flight_lock = threading.Lock()
        self.last_write = -math.inf  # none yet (see last_search)
        #: Whether a record of the store may expire: reads then leave expired ones out,
        #: and maintenance removes them (a store without one pays for neither).
        self.expiring = False
        self.engine, self.snap_seq, self.seq = Engine(dim, **engine_args), 0, 0
        #: The store's change events (the writer tells its own; following tells others').
        self.events = Events(db)

    # -- opening ------------------------------------------------------------------

    def open(self) -> None:
        """Loads the newest usable snapshot and replays the database's changes beyond it."""
        engine: Engine | None = None
        seq = 0
        if self.index_dir is not None:
            reason = None
            # Read before the load, whose errors make the snapshot unusable: a damaged
            # counter is the database's damage (CorruptFileError), not the snapshot's.
            counters = self.db.seq(), self.db.forgotten()
            # The snapshot loads on a thread of its own (without the GIL) while this one
            # reads the vectors it may leave out (see vector_fill.read_ahead); the engine then
            # fills a chunk on that thread while the next is read here (see _fill).
            with ThreadPoolExecutor(1, thread_name_prefix="memlane-open") as pool:
                loading = pool.submit(Engine.load, self.index_dir)
                ahead = read_ahead(self.db, self.dim, self.snapshot_vectors, loading)
                try:
                    engine, seq, history = loading.result()
                    reason = self._unusable(engine, seq, history, *counters)
                except FileNotFoundError:
                    # A new cache folder of a shared store is no loss: it is built from
                    # the database.
                    if self.db.count() and not self.db.shared and not self.reembedded:
                        reason = "it is missing"
                except MemlaneError as e:
                    reason = str(e)
                finally:
                    # A failed load's future holds its error, whose traceback holds this
                    # frame and the Memory opening the store: a reference cycle that
                    # would keep a store nobody holds locked until the garbage collector
                    # runs.
                    del loading
                if reason is not None:
                    self._rebuilding(reason)
                    engine, seq = None, 0
                if engine is not None:
                    # The search beam is the caller's to choose at every open; the
                    # graph's build parameters are those it was built with.
                    engine.set_ef(self.engine_args["ef"])
                    # Outside the try above: a damaged vector blob is a damaged database,
                    # not an unusable snapshot.
                    fill(self.db, self.dim, self.location, engine, ahead, pool)
        self.engine = engine or Engine(self.dim, **self.engine_args)
        self.expiring = self.db.expiring()
        # A large replay (a crash, or a lost snapshot) earns a snapshot soon.
        self.changes, self.seq = self._replay(seq)
        if engine is not None and (missing := len(engine.awaiting())):
            # Ids the snapshot holds whose vectors the database no longer has, nor
            # did the replay remove or replace them: searches would raise.
            self._rebuilding(f"the database holds no vector for {missing} of its records")
            self.engine, seq = Engine(self.dim, **self.engine_args), 0
            self.changes, self.seq = self._replay(seq)
        self.snap_seq = seq
        self.applied = self.db.committed_seq  # a re-embedding's, read by the replay

    def _rebuilding(self, reason: str) -> None:
        warnings.warn(
            f"memlane: the index snapshot of {self.location} cannot be used ({reason}); "
            "rebuilding it from the database",
            RuntimeWarning,
            stacklevel=6,
        )
        self.refused = True

    def _unusable(
        self, engine: Engine, seq: int, history: int, newest: int, forgotten: int
    ) -> str | None:
        if engine.dim != self.dim:
            return f"its dimension {engine.dim} is not the store's {self.dim}"
        if engine.dim is not None and engine.precision != self.engine_args["precision"]:
            return (
                f"its precision {engine.precision} is not the requested "
                f"{self.engine_args['precision']}"
            )
        if seq > newest:
            return "it is newer than the database"
        if seq < forgotten:
            return "it is older than the deletions the database remembers"
        assert self.index_dir is not None
        owner = read_note(self.index_dir / GENERATION)
        if owner is None:
            return (
                "it does not say which database it belongs to (an older memlane wrote it, "
                "or a process stopped before writing that note)"
            )
        if owner != self.db.store_id:
            return "it belongs to another database (a copy, or a recreated database)"
        indexes = read_note(self.index_dir / INDEXES)
        if indexes is None:
            return (
                "it does not say it indexes the records' unique flag (an older memlane wrote "
                "it, or a process stopped before writing that note)"
            )
        if indexes != f"{INDEXED} {seq}":
            return (
                "its note that it indexes the records' unique flag is another snapshot's (a "
                "process stopped between writing the two, or an older memlane replaced it)"
            )
        return other_history(self.db.get_meta(EPOCHS), seq, history)

    def prepare(self, rows: Sequence[Row], *, texts: bool, vectors: FloatArray | None) -> Any:
        """The engine's check and analysis of ``rows``, with their accesses not yet flushed."""
        return prepare(
            self.engine,
            rows,
            texts=texts,
            vectors=vectors,
            pending=self.access.of(rows),
        )

    def _replay(self, since: int, skip: Set[int] = frozenset()) -> tuple[int, int]:
        """Applies what the database holds beyond change ``since``; returns how many changes
        that was and the sequence number every change up to is now applied. Text and
        vectors written by a change in ``skip`` (this process's own, already in the
        engine) are not indexed again; their attributes are, as another process may have
        changed them in between."""
        engine = self.engine
        # Read first: commits happen in sequence order, so all changes up to it are
        # visible below; a newer one read too is applied again by the next replay.
        upto = self.db.seq()
        gone = self.db.tombstones_since(since)
        if gone:
            engine.remove(np.asarray(gone, dtype=np.uint64), missing_ok=True)
        count = len(gone)
        damaged: list[Row] = []
        with contextlib.ExitStack() as stack:
            paused = False
            for rows in self.db.rows_since(since):
                count += len(rows)
                if count >= _PAUSE_COLLECTOR_ROWS and not paused:
                    stack.enter_context(collector.paused())
                    paused = True
                with refused_as_damage(self.location):
                    self._apply_rows(rows, since, skip, damaged)
        if damaged:
            raise damage_error(self.location, len(damaged), [r.id for r in damaged[:NAMED]])
        return count, upto

    def _apply_rows(self, rows: list[Row], since: int, skip: Set[int], damaged: list[Row]) -> None:
        """Applies one batch of ``_replay`` (see there); past a damaged blob, only adds the
        batch's damaged rows to ``damaged``."""
        if damaged:
            # Nothing more is applied: the rest is read to name every damaged blob.
            damaged += [r for r in rows if self.dim and not decodes(r.embedding, self.dim)]
            return
        engine = self.engine
        if not self.expiring and any(r.expires_at is not None for r in rows):
            self.expiring = True
        new = [
            (r.content_seq > since and r.content_seq not in skip) or r.rowid not in engine
            for r in rows
        ]
        # Text or vector changed: index it all again; else the attributes only.
        attrs = [r for r, n in zip(rows, new, strict=True) if not n]
        full = [r for r, n in zip(rows, new, strict=True) if n]
        with_vec = [r for r in full if self.dim and r.embedding is not None]
        without = [r for r in full if not (self.dim and r.embedding is not None)]
        if with_vec:
            assert self.dim
            try:
                vectors = unblobs([r.embedding for r in with_vec], self.dim)  # type: ignore[misc]
            except CorruptFileError:
                damaged += [r for r in with_vec if not decodes(r.embedding, self.dim)]
                return
            ok = usable_vectors(vectors)
            if not ok.all():
                # Stored before vectors were checked for a unit length: found by
                # their text, not by a vector the engine cannot hold.
                bad = [r for r, good in zip(with_vec, ok, strict=True) if not good]
                refused_vectors(self.location, bad)
                without += bad
                with_vec = [r for r, good in zip(with_vec, ok, strict=True) if good]
                vectors = vectors[ok]
            if with_vec:
                engine.apply(self.prepare(with_vec, texts=True, vectors=vectors))
        if without:
            engine.apply(self.prepare(without, texts=True, vectors=None))
        if attrs:
            engine.apply(self.prepare(attrs, texts=False, vectors=None))

    # -- following and writing -------------------------------------------------------

    def vanished(self, folder: Path | None) -> bool:
        """Whether the store's ``folder`` was deleted under it (then warns, once, and every
        later call raises ``StorageError``)."""
        if self.gone is not None:
            return True
        if folder is None or folder.is_dir():
            return False
        self.gone = f"the store folder {folder} is gone (deleted while the store was open)"
        warnings.warn(
            f"memlane: {self.gone}; background maintenance stopped, and every later call "
            "raises StorageError",
            RuntimeWarning,
            stacklevel=4,
        )
        return True

    @property
    def forked(self) -> bool:
        """Whether this process is a child forked after the store was opened."""
        return self.forks != _forks

    def deferred(self, close: Callable[[], None]) -> bool:
        """Whether ``close`` waits for the end of a write of this thread (a signal handler
        run inside it): it runs as the write lets go of the lock, not under it, since
        it joins the store's thread, which may be waiting for that lock."""
        if self.closing or not held_here(self.lock):
            return False
        self.lock.defer(close)
        return True

    def ask_close(self) -> None:
        """A ``close`` begins: the store reads closed from now, and on PostgreSQL the calls
        waiting for a pooled connection fail at once (one may hold the lock that
        ``begin_closing`` takes)."""
        self.asked = True
        self.db.closing(False)

    def begin_closing(self, own: threading.Thread) -> bool:
        """Marks the store closing; True for the first ``close``, which releases it.

        A later one returns once that has, or at once where waiting could wait for
        itself: inside that close (a signal handler or a finalizer run on its thread),
        on the store's ``own`` thread (which it joins), and on a thread that holds a
        lock it takes (a signal handler run inside a call on the store)."""
        if not self.closing:
            with self.lock:  # a write in flight ends first
                if not self.closing:
                    self.closing, self.closer = True, threading.current_thread()
                    return True
        here = threading.current_thread()
        if here not in (self.closer, own) and not held_here(self.lock) and not self.db.held_here():
            self.closed.wait()
        return False

    def check_open(self) -> None:
        if self.closing:
            raise ClosedError("this Memory is closed")
        if self.forked:
            raise MemlaneError(
                "this Memory was opened before os.fork() and belongs to the parent "
                "process: open the store again in the child (memlane.Memory(path))"
            )
        if self.gone is not None:
            raise StorageError(self.gone)
        if self.db.committed_seq > self.applied and not self._in_flight:
            # Every write gives its commit to the engine before it ends (one in flight
            # is left to it: a search does not wait for a bulk load); one a Ctrl-C
            # stopped between the two is read back, as another process's change is.
            with self.lock:
                self.follow()
                self.applied = max(self.applied, self.db.committed_seq)

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        """Marks a write in flight: graph linking in the background waits meanwhile."""
        with self._flight_lock:
            self._in_flight += 1
        try:
            yield
        finally:
            with self._flight_lock:
                self._in_flight -= 1
            self.last_write = time.monotonic()

    def busy(self, quiet: float) -> bool:
        """Whether a write is in flight or ended less than ``quiet`` seconds ago."""
        return bool(self._in_flight) or time.monotonic() - self.last_write < quiet

    def follow(self) -> None:
        """Applies what other processes committed since this one last looked."""
        if self.db.seq() <= self.seq:
            return
        # Other processes' writes, like this one's, make graph linking step aside.
        with self.writing(), self.lock:
            if self.closing:
                return
            if self.seq < self.db.forgotten():
                # Away longer than tombstones are kept: compare every id instead.
                present = self.db.all_rowids()
                gone = [int(i) for i in self.engine.ids_where(None) if int(i) not in present]
                self.engine.remove(np.asarray(gone, dtype=np.uint64), missing_ok=True)
            changes, upto = self._replay(self.seq, self.own)
            # Own commits happen under the write lock, so all of them are <= upto.
            self.seq, self.own = upto, set()
            self.applied = max(self.applied, upto)
            self.changes += changes
            self.events.follow()
        if self.engine.pending() or self.changes >= self.snapshot_due():
            self.wake.set()

    def rows(self, rowids: Sequence[int], embedding: bool = False) -> dict[int, Row]:
        """The rows of ``rowids`` that exist. On an embedded store a rowid the engine
        holds and the database cannot find is a damaged file (a flipped bit in a table
        page's key hides its row from lookups by rowid): ``CorruptFileError``, not a
        record silently left out. Only this process deletes there, and it takes
        ``lock`` from the commit until the engine has dropped the rows, so under it
        the two agree. On PostgreSQL another process may have deleted the row."""
        rows = self.db.rows_by_rowid(rowids, embedding=embedding)
        if len(rows) < len(rowids) and not self.db.shared:
            with self.lock:
                held = [r for r in rowids if r not in rows and r in self.engine]
                again = self.db.rows_by_rowid(held, embedding=embedding) if held else {}
                lost = [r for r in held if r not in again]
                if lost:
                    raise CorruptFileError(
                        f"record rowid {lost[0]} is in the index but the database cannot "
                        "find it: the database file is damaged"
                    )
                rows.update(again)
        return rows

    def committed(self, seq: int, changes: int) -> None:
        """Records a change of this process, applied to the engine (lock held), and links
        a small batch's vectors at once (a large one in the background)."""
        self.applied = max(self.applied, seq)
        self.last_write = time.monotonic()
        if seq == self.seq + 1:
            self.seq = seq
        else:
            self.own.add(seq)
            if not self.db.shared:
                # No other process writes here: the change between is this one's, cut
                # off by a Ctrl-C from the engine (see check_open). Read back now.
                self.follow()
        self.events.committed(seq)
        self.access.committed(seq)
        self.changes += changes
        pending = self.engine.pending()
        if 0 < pending <= _INLINE_INDEX:
            self.engine.index_pending(_INLINE_INDEX)
        elif pending or self.changes >= self.snapshot_due():
            self.wake.set()
        if self.db.wal_bytes() > CHECKPOINT_BYTES:
            self.wake.set()

    def keep_up(self, adding: int) -> None:
        """Links parked vectors on the caller's thread, up to the ``adding`` vectors its
        write is about to park, while more than ``MAX_PARKED`` are parked: a bulk load then
        leaves at most that plus its last write's, and a write after a rebuild (everything
        parked) links no more than its own. Not on a shared store, whose followers link
        every write again in their own processes: there a loader that linked its own
        writes slowed without bringing the followers' searches back sooner
        (benches/README.md, "Loading and linking, in the limits' terms")."""
        if self.db.shared:
            return
        while adding > 0 and not self.closing:
            over = self.engine.pending() - MAX_PARKED
            if over <= 0:
                return
            batch = min(adding, over, _KEEP_UP_BATCH)
            self.engine.index_pending(batch)
            adding -= batch

    def snapshot_due(self) -> int:
        """Changes after which a snapshot is written: at least half the store, so
        snapshots cost O(1) per change."""
        return max(self.snapshot_every, len(self.engine) // 2)

    def save(self) -> None:
        """Writes the engine's snapshot at the current sequence number (lock held)."""
        if self.index_dir is None:
            return
        if self.refused:
            # Saving at the change a snapshot is at keeps that one (Engine.save): after a
            # rebuild that ends at its change, the refused one would stay, refused again
            # at every open (or taken, once the notes beside it were written again).
            shutil.rmtree(self.index_dir, ignore_errors=True)
            self.refused = False
        # The epoch of the change it reflects: this process's if it wrote, else the one
        # the database's last change is of (see snapshot_notes.other_history).
        epochs = read_epochs(self.db.get_meta(EPOCHS))
        history = epochs[-1][0] if epochs else 0
        self.engine.save(self.index_dir, self.seq, self.snapshot_vectors, history)
        owner = self.index_dir / GENERATION
        try:
            if read_note(owner) != self.db.store_id:
                write_note(owner, self.db.store_id)  # once: the id never changes
        except OSError as e:
            raise StorageError(f"cannot write the snapshot's owner file {owner}: {e}") from e
        indexes = self.index_dir / INDEXES
        try:
            write_note(indexes, f"{INDEXED} {self.seq}")
        except OSError as e:
            raise StorageError(f"cannot write the snapshot's file {indexes}: {e}") from e
        self.snap_seq = self.seq
        self.changes = 0
        self.snapshot_wanted = None
