"""An edit of a stored record while other writers may change it: the edit is applied to
the version it finds current, and applied again to the version another writer left
when that writer got there first, so no edit overwrites another.

The model's edits of core memory blocks (``memlane.agent.CoreMemory``) go through
here: a block is one record, so the store's refusal to supersede a version no longer
current makes the check of its limit part of the transaction that stores the edit. A
notes file is many records, and its edits are made under its head instead
(``memlane.notes_files.write_entries``), tried up to ``ATTEMPTS`` times.

An edit's new text is embedded between its read and its commit, and the embedding is
most of its time: when several writers edit a record at once, one commits and the others
have embedded for nothing. An edit that lost started again behind the writer that beat
it, which was by then at work on its next edit, and could lose every time. So, in one
process, edits that lost take turns (``rewrite``):
one at a time, each on the version the last left, and edits begun while some are queued
queue behind them rather than race them. Writers in other processes can only be waited
out: an edit is applied again, with a short random pause after each loss, for
``PATIENCE`` seconds and at least ``ATTEMPTS`` times.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from memlane.errors import ConflictError, InvalidArgumentError, UnknownIdError

if TYPE_CHECKING:
    from memlane.records import MemoryRecord
    from memlane.store import MemoryStore

__all__ = ["ATTEMPTS", "PATIENCE", "latest", "rewrite"]

#: Tries of an edit whose record other writers keep changing under it (``rewrite``
#: makes at least these, for ``PATIENCE`` seconds).
ATTEMPTS = 32
#: Seconds ``rewrite`` keeps applying an edit again while other writers change its
#: record: writers in other processes take turns with it only by chance, and a writer
#: that edits in a loop wins most of them, so a count of tries alone ran out while the
#: others' edits still came one after another.
PATIENCE = 30.0
#: Bounds of the random pause after an edit lost again (seconds): writers of several
#: processes that lost to one commit do not all come back at once, and a pause stays
#: short next to an embedding, so the edit is not left behind the next one.
_PAUSE_FIRST, _PAUSE_MAX = 0.001, 0.05
#: The longest an edit waits for its turn (seconds) before it goes on without it: an
#: edit holding the turn may be stuck (an embedder that hangs), and taking turns only
#: spares work.
_TURN_WAIT = 2.0


def latest(mem: MemoryStore, rec: MemoryRecord) -> MemoryRecord | None:
    """The current version of ``rec`` (following its supersessions), None if deleted.

    Read from the database, not the index (which shows another process's writes only
    once it has followed them). A history read while another writer supersedes the
    record may end at a version that writer just closed: it is read again."""
    for _ in range(ATTEMPTS):
        try:
            now = mem.get(rec.id)
        except UnknownIdError:
            return None
        if now.current:
            return now
        versions = mem.history(rec.id)
        last = versions[-1] if versions else None
        if last is None or last.ended == "delete":
            return None
        if last.ended is None:
            try:
                found = mem.get(last.record.id)
            except UnknownIdError:
                continue  # deleted meanwhile: the next read says so
            if found.current:
                return found
    return None


class _Writers:
    """This process's edits of the records of one store, table, type and scope, and the
    turn that those which contend take one at a time (``queued`` of them wait for it or
    hold it)."""

    def __init__(self) -> None:
        self.users = 0  # edits holding this entry, which goes when none does
        self.queued = 0
        self.count = threading.Lock()
        # Reentrant: an edit made within another (an event handler, an embedder calling
        # back) by the thread holding the turn must not wait for itself.
        self.turn = threading.RLock()

    @contextmanager
    def taking_turns(self, deadline: float) -> Iterator[None]:
        """Queues an edit for the turn and gives it the turn. Edits that begin while one
        is queued queue behind it (``rewrite``). If the turn is not free by ``deadline``
        (an edit holding it does not end), the edit goes on without it: taking turns
        only spares work, the store keeps edits from overwriting each other."""
        with self.count:
            self.queued += 1
        turn = False
        try:
            turn = self.turn.acquire(timeout=max(0.0, deadline - time.monotonic()))
            yield
        finally:
            if turn:
                self.turn.release()
            with self.count:
                self.queued -= 1


_registry = threading.Lock()
_writers: dict[Hashable, _Writers] = {}


def _forked() -> None:
    """A child forked while another thread edited would hold that edit's turn (or the
    registry's lock) for ever, with no thread to release it: it starts with none."""
    global _registry
    _registry = threading.Lock()
    _writers.clear()


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(after_in_child=_forked)


@contextmanager
def _contending(mem: MemoryStore, rec: MemoryRecord, slot: Hashable) -> Iterator[_Writers]:
    """The ``_Writers`` of ``rec``'s store, table, type, scope and ``slot`` (what names
    the record across its versions, whose ids change at each edit: a core block's label),
    while an edit uses them. Keyed by the store's location, so two ``Memory`` objects of
    one store in one process take turns too."""
    where = getattr(mem, "location", None)
    store = where if isinstance(where, str) else id(mem)
    key = (store, rec.table, rec.type, *sorted(rec.scope.items()), slot)
    with _registry:
        writers = _writers.get(key)
        if writers is None:
            writers = _writers[key] = _Writers()
        writers.users += 1
    try:
        yield writers
    finally:
        with _registry:
            writers.users -= 1
            if not writers.users:
                del _writers[key]


def rewrite(
    mem: MemoryStore,
    rec: MemoryRecord,
    change: Callable[[MemoryRecord], tuple[str, dict[str, Any] | None] | None],
    *,
    keep_date: bool = False,
    by: str | None = None,
    gone: str | None = None,
    find: Callable[[], MemoryRecord | None] | None = None,
    slot: Hashable = None,
) -> MemoryRecord:
    """Supersedes ``rec`` with ``change(rec)`` (its new text and metadata, None: no change),
    and when another writer changed the record first, applies ``change`` again to the
    version that writer left: the store refuses to supersede a version that is no longer
    current, or that was rewritten in place since it was read (``ConflictError``), so no
    edit overwrites another. Edits of this process that lost take turns, and edits begun
    meanwhile queue behind them (see the module's description); an edit is given up
    (``ConflictError``) only when other writers changed the record ``ATTEMPTS`` times
    and for ``PATIENCE`` seconds.
    ``keep_date``: the new version keeps the record's ``created_at``; ``find``: reads
    the current version again after a conflict (default: following the history);
    ``slot``: what the record's edits that take turns share beyond its table, type and
    scope (None: every record of those). Raises ``UnknownIdError`` (saying ``gone``) if
    the record was deleted meanwhile."""
    began = time.monotonic()
    deadline = began + PATIENCE

    def attempt(rec: MemoryRecord) -> MemoryRecord | None:
        """The new version, or None when another writer changed the record first."""
        new = change(rec)
        if new is None:
            return rec
        text, metadata = new
        try:
            at = rec.created_at if keep_date else None
            # The record read, not its id: one rewritten in place since is refused
            # (ConflictError), and the change is made again on what it holds now.
            return mem.supersede(rec, text, at=at, by=by, metadata=metadata)
        except ConflictError:
            pass
        except InvalidArgumentError:
            now = latest(mem, rec)
            if now is not None and now.id == rec.id:
                raise  # the edit itself is refused, not a race
        except UnknownIdError:
            pass
        return None

    def current() -> MemoryRecord:
        found = find() if find is not None else latest(mem, rec)
        if found is None:
            raise UnknownIdError(
                gone or f"{rec.id!r} was deleted by another writer during the edit"
            )
        return found

    lost = 0
    with _contending(mem, rec, slot) as writers:
        # Alone, the edit is made at once. With edits queued, it would most likely
        # commit before one of them and make it lose again: it queues behind them.
        if not writers.queued:
            done = attempt(rec)
            if done is not None:
                return done
            lost = 1
        with writers.taking_turns(min(deadline, time.monotonic() + _TURN_WAIT)):
            while True:
                rec = current()
                done = attempt(rec)
                if done is not None:
                    return done
                lost += 1
                if lost >= ATTEMPTS and time.monotonic() >= deadline:
                    break
                # Lost with the turn: to a writer of another process (or an edit begun
                # before this one lost). A random pause, so such writers that lost
                # together do not all come back at once.
                pause = min(_PAUSE_MAX, _PAUSE_FIRST * 2 ** min(lost, 16))
                time.sleep(random.uniform(0, pause))
    raise ConflictError(
        f"{rec.id!r} was changed by other writers {lost} times in "
        f"{time.monotonic() - began:.0f} seconds during one edit; nothing of this edit "
        "was stored"
    )
