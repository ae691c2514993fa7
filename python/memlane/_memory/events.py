"""Change events: what writes did to a store, told to subscribers.

The writer calls ``Events`` after each commit (adds, supersedes, updates, deletes,
expiry sweeps). A write never waits for a subscriber: each has a bounded queue, and an
event that finds it full pushes out the oldest queued, which is counted; the subscriber
then reads one ``{"type": "lost", "count": n}`` event in the place of those dropped,
before what followed them. With no subscriber an emit costs one truth test (no row is
read or converted).

On PostgreSQL other processes write too, and their changes are told as well, in commit
order with this process's own: while someone listens, ``Events`` remembers the change
up to which everything was told, and reads what the others committed after it from the
change log (``Store.changes_since``: the rows they wrote and the history entries they
made, each with its change) when the store follows them (``IndexSync.follow``, at
their notification) and before telling a change of this process that came after
theirs. An embedded store has one process (its lock): there is nothing else to tell.
A renew keeps no history entry, so only its own process tells it.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from memlane import coerce
from memlane._memory.encoding import record
from memlane.errors import ClosedError, InvalidArgumentError, MemlaneError, shown
from memlane.records import SCOPE_FIELDS
from memlane.schema import Row

if TYPE_CHECKING:
    from memlane._memory.sync import IndexSync
    from memlane.storage import Store
    from memlane.storage.base import Changes

__all__ = ["Event", "Events", "Subscription"]

log = logging.getLogger("memlane.events")

#: One change: ``type`` (add, supersede, update, delete, expire, or lost), ``id``,
#: ``record`` (every stored field but the embedding), and for a supersede
#: ``supersedes`` (the id it closed); a delete's ``by`` says who (prune, replace).
Event = dict[str, Any]

#: A subscriber's queue length unless given.
DEFAULT_QUEUE = 1000


class Subscription:
    """Events matching a scope, in commit order: iterate over it (each ``next`` waits
    for one), or read with ``get``; ``close`` ends it. With a callback, a
    thread of its own calls it with each event instead.

    A full queue drops its oldest event, not the one arriving: a reader that fell
    behind gets the newest changes, after one ``lost`` event that counts those it
    missed, and that event is read before anything queued after the loss (one only
    queued ahead of a later event left a reader that stopped at a burst's end without
    the burst's newest changes and without word that any were missed)."""

    def __init__(self, hub: Events, scope: dict[str, str], max_queue: int) -> None:
        self.scope = scope
        #: Events dropped since the subscription began (its queue was full).
        self.lost = 0
        self._hub = hub
        self._max = max_queue
        # Events, oldest first, and ``lost`` events where others' changes could not be
        # read (``missed``: their place is after what is queued).
        self._queue: deque[Event] = deque()
        # The oldest events dropped, told by one ``lost`` event ahead of the queue.
        self._dropped = 0
        self._ready = threading.Condition(threading.Lock())
        self._closed = threading.Event()
        self._wake: Callable[[], object] | None = None

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def matches(self, scope: Mapping[str, str]) -> bool:
        return all(scope.get(f) == v for f, v in self.scope.items())

    def offer(self, event: Event) -> None:
        """Queues ``event`` without waiting: a full queue drops (and counts) its oldest."""
        with self._ready:
            was_empty = self._empty()
            self._push(event)
        if was_empty:
            self._woken()

    def missed(self, count: int) -> None:
        """Counts ``count`` events that could not be read: a ``lost`` event tells them,
        after the events queued before them."""
        with self._ready:
            was_empty = self._empty()
            self.lost += count
            last = self._queue[-1] if self._queue else None
            if last is not None and _is_lost(last):
                last["count"] += count  # a ``lost`` event of this queue's own, not read yet
                self._ready.notify_all()
            else:
                self._push({"type": "lost", "count": count})
        if was_empty:
            self._woken()

    def _push(self, event: Event) -> None:
        """Queues ``event`` (lock held), dropping the oldest queued when full."""
        if len(self._queue) >= self._max:
            oldest = self._queue.popleft()
            if _is_lost(oldest):  # counted in ``lost`` when it was queued
                self._dropped += oldest["count"]
            else:
                self._dropped += 1
                self.lost += 1
        self._queue.append(event)
        self._ready.notify_all()

    def on_ready(self, wake: Callable[[], object] | None) -> None:
        """Calls ``wake`` when an event arrives at an empty queue and when the
        subscription closes (at once if an event is queued already): for a reader on an
        event loop, which awaits its events rather than blocking a thread in ``get``
        or looking again and again. ``wake`` runs on the writer's thread, during its
        write: it must return at once (hand the news to the reader's loop, no more)."""
        with self._ready:
            self._wake = wake
            ready = not self._empty() or self.closed
        if ready:
            self._woken()

    def _empty(self) -> bool:
        return not self._queue and not self._dropped

    def _woken(self) -> None:
        wake = self._wake
        if wake is None:
            return
        try:
            wake()
        except Exception:  # a reader's hook never fails a write
            log.exception("a memlane event subscription's wake-up raised")

    def get(self, timeout: float | None = None) -> Event | None:
        """The next event; ``None`` once closed, or when ``timeout`` seconds passed."""
        with self._ready:
            if self._empty() and not self.closed and (timeout is None or timeout > 0):
                self._ready.wait_for(lambda: not self._empty() or self.closed, timeout)
            return self._next()

    def _next(self) -> Event | None:
        """The next event queued (lock held): the ``lost`` event of the oldest dropped
        first, merged with any ``lost`` event next to it."""
        count, self._dropped = self._dropped, 0
        while self._queue and _is_lost(self._queue[0]):
            count += self._queue.popleft()["count"]
        if count:
            return {"type": "lost", "count": count}
        return self._queue.popleft() if self._queue else None

    def __iter__(self) -> Iterator[Event]:
        while (event := self.get()) is not None:
            yield event

    def close(self) -> None:
        """Stops the events; a reader waiting in ``get`` or a loop returns."""
        with self._ready:
            self._closed.set()
            self._ready.notify_all()
        self._hub.drop(self)
        self._woken()

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Subscription(scope={self.scope!r}, lost={self.lost}, closed={self.closed})"


class Events:
    """A store's subscribers, and what the writer tells them (and, on a store other
    processes write, what the change log says they did)."""

    def __init__(self, db: Store) -> None:
        self._subscribers: tuple[Subscription, ...] = ()
        self._lock = threading.Lock()
        self._db = db
        #: While someone listens to a shared store: every change up to this one was told
        #: (or came before the first subscriber). None otherwise.
        self._told: int | None = None
        self._ended = False

    def __bool__(self) -> bool:
        return bool(self._subscribers)

    def subscribe(
        self,
        callback: Callable[[Event], object] | None = None,
        *,
        max_queue: int = DEFAULT_QUEUE,
        **scope: str,
    ) -> Subscription:
        """A new subscription to the changes of records in ``scope`` (scope fields:
        ``user_id="alice"``; none: every record). ``callback``: called with each event
        on a thread of the subscription's own (an exception it raises is logged)."""
        unknown = sorted(set(scope) - set(SCOPE_FIELDS))
        if unknown:
            raise InvalidArgumentError(
                f"subscribe takes the scope fields {', '.join(SCOPE_FIELDS)}, "
                f"not {', '.join(unknown)}"
            )
        if isinstance(max_queue, bool) or not isinstance(max_queue, int) or max_queue < 1:
            raise InvalidArgumentError(f"max_queue must be an int >= 1, got {shown(max_queue)}")
        if callback is not None and not callable(callback):
            raise InvalidArgumentError(f"callback must be callable, got {shown(callback)}")
        checked = {f: coerce.text(v, f) for f, v in scope.items() if v is not None}
        sub = Subscription(self, checked, max_queue)
        with self._lock:
            if self._ended:  # under the lock close takes: no subscription outlives it
                raise ClosedError("this Memory is closed")
            if self._told is None and self._db.shared:
                self._told = self._db.seq()
            self._subscribers = (*self._subscribers, sub)
        if callback is not None:
            threading.Thread(
                target=_deliver, args=(sub, callback), name="memlane-events", daemon=True
            ).start()
        return sub

    def drop(self, sub: Subscription) -> None:
        with self._lock:
            self._subscribers = tuple(s for s in self._subscribers if s is not sub)
            if not self._subscribers:
                self._told = None

    def close(self) -> None:
        """Ends every subscription (the store closes); none can be made after."""
        with self._lock:
            self._ended = True
            subscribers = self._subscribers
        for sub in subscribers:
            sub.close()

    def _tell(self, kind: str, row: Row, **extra: Any) -> None:
        rec = record(row, None)
        scope = rec.scope
        event: Event | None = None
        for sub in self._subscribers:
            if sub.matches(scope):
                if event is None:
                    event = {
                        "type": kind,
                        "id": rec.id,
                        **extra,
                        "record": rec.to_dict(embedding=False),
                    }
                sub.offer(event)

    # -- other processes' changes ------------------------------------------------------------

    def committed(self, seq: int) -> None:
        """Change ``seq`` of this process committed (write lock held, before its events):
        what other processes committed before it is told first."""
        if self._told is None:
            return
        with self._lock:
            told = self._told
            if told is None or seq <= told:
                return
            if seq > told + 1:
                try:
                    self._tell_others(told, seq - 1)
                except MemlaneError as e:
                    # The write is stored: it does not fail for its events. Subscribers
                    # learn that some were not told (one for each change of the others).
                    log.warning("memlane: cannot read other processes' changes: %s", e)
                    for sub in self._subscribers:
                        sub.missed(seq - 1 - told)
            self._told = seq

    def follow(self) -> None:
        """Tells what other processes committed since the last change told (write lock
        held: every change of this process is told already). A failure leaves them to
        the next call."""
        if self._told is None:
            return
        with self._lock:
            if self._told is not None:
                try:
                    self._tell_others(self._told, None)
                except MemlaneError as e:
                    log.warning("memlane: cannot read other processes' changes: %s", e)

    def _tell_others(self, told: int, upto: int | None) -> None:
        """Tells the changes after ``told`` up to ``upto`` (None: the newest), all of other
        processes, and moves ``_told`` to the last."""
        changes = self._db.changes_since(told)
        last = changes[0] if upto is None else min(upto, changes[0])
        for kind, row, extra in _others(told, last, changes):
            self._tell(kind, row, **extra)
        self._told = last

    # -- told by the writer, after each commit --------------------------------------------

    def added(self, rows: Sequence[Row]) -> None:
        for row in rows if self._subscribers else ():
            self._tell("add", row)

    def superseded(self, closed: Row, new: Row) -> None:
        if self._subscribers:
            self._tell("supersede", new, supersedes=closed.id)

    def updated(self, row: Row) -> None:
        if self._subscribers:
            self._tell("update", row)

    def doomed(self, sync: IndexSync, rowids: Sequence[int]) -> dict[int, Row]:
        """The rows a delete is about to remove, read only when someone listens."""
        return sync.rows(rowids) if self._subscribers else {}

    def deleted(self, rows: Mapping[int, Row], deleted: set[int], by: str | None) -> None:
        kind = "expire" if by == "expire" else "delete"
        for rowid, row in rows.items() if self._subscribers else ():
            if rowid in deleted:
                self._tell(kind, row, **({"by": by} if by and kind == "delete" else {}))


def _others(told: int, upto: int, changes: Changes) -> list[tuple[str, Row, dict[str, Any]]]:
    """The events of the changes after ``told`` up to ``upto`` in commit order, each as
    its writer told it (kind, row, extra fields), from what the changes after ``told``
    wrote (``changes``: later ones too, whose history entries keep the versions that
    the changes told wrote).

    A record's versions since ``told`` are its history entries, in the order they were
    made, then its row. A record whose first version's text was written after ``told``
    was added then (an update of an older one keeps its former version in the history,
    whose text is older); a history entry tells an update (the next version is what it
    wrote), a supersede (of the record added by the same change under the id it names)
    or a delete (of the version it keeps).

    The next version is the one the update wrote but for the access counts a flush since
    added, which the event takes from the replaced version, as its writer tells it (a
    later renew's expiry, which keeps no entry, it still shows)."""
    _, made, rows = changes
    versions: dict[int, list[Row]] = {}
    for _, (row, *_) in made:
        versions.setdefault(row.rowid, []).append(row)
    for row in rows:
        versions.setdefault(row.rowid, []).append(row)
    added: dict[tuple[int, str | None], Row] = {
        (vs[0].content_seq, vs[0].id): vs[0]
        for vs in versions.values()
        if told < vs[0].content_seq <= upto
    }
    # (change, then the order within it: history entries as made, adds after by rowid).
    told_as: list[tuple[tuple[int, int, int], str, Row, dict[str, Any]]] = []
    seen: dict[int, int] = {}
    for n, (change, (row, event, _at, actor, next_id)) in enumerate(made):
        k = seen[row.rowid] = seen.get(row.rowid, -1) + 1
        if not told < change <= upto:
            continue
        order = (change, 0, n)
        if event == "delete":
            kind = "expire" if actor == "expire" else "delete"
            told_as.append((order, kind, row, {"by": actor} if actor and kind == "delete" else {}))
        elif event == "update" and k + 1 < len(versions[row.rowid]):
            wrote = versions[row.rowid][k + 1]._replace(
                access_count=row.access_count, last_accessed_at=row.last_accessed_at
            )
            told_as.append((order, "update", wrote, {}))
        elif event == "supersede" and (new := added.pop((change, next_id), None)) is not None:
            told_as.append((order, "supersede", new, {"supersedes": row.id}))
        # Else the version it wrote is not this connection's to see (a tenant's: the
        # change moved the record out of its scope).
    for (change, _), row in added.items():
        told_as.append(((change, 1, row.rowid), "add", row, {}))
    told_as.sort(key=lambda e: e[0])
    return [(kind, row, extra) for _, kind, row, extra in told_as]


def _is_lost(event: Event) -> bool:
    """Whether a queued event is a subscription's own ``lost`` event (no write tells one)."""
    return bool(event["type"] == "lost")


def _deliver(sub: Subscription, callback: Callable[[Event], object]) -> None:
    for event in sub:
        try:
            callback(event)
        except Exception:
            log.exception("a memlane event subscriber's callback raised; it goes on")
