"""Change events: what this process's writes did to a store, told to subscribers.

The writer calls ``Events`` after each commit (adds, supersedes, updates, deletes,
expiry sweeps). A write never waits for a subscriber: each has a bounded queue, and an
event that finds it full is dropped and counted; the subscriber then reads one
``{"type": "lost", "count": n}`` event in its place before the next one that fits. With
no subscriber an emit costs one truth test (no row is read or converted).

Only this process's writes are told: on PostgreSQL another process's writes reach its
own subscribers, not these.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from memlane import coerce
from memlane._memory.encoding import record
from memlane.errors import InvalidArgumentError
from memlane.records import SCOPE_FIELDS
from memlane.schema import Row

if TYPE_CHECKING:
    from memlane._memory.sync import IndexSync

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
    thread of its own calls it with each event instead."""

    def __init__(self, hub: Events, scope: dict[str, str], max_queue: int) -> None:
        self.scope = scope
        #: Events dropped since the subscription began (its queue was full).
        self.lost = 0
        self._hub = hub
        self._queue: queue.Queue[Event] = queue.Queue(max_queue)
        self._unreported = 0
        self._lock = threading.Lock()
        self._closed = threading.Event()

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def matches(self, scope: Mapping[str, str]) -> bool:
        return all(scope.get(f) == v for f, v in self.scope.items())

    def offer(self, event: Event) -> None:
        """Queues ``event`` without waiting: dropped (and counted) when the queue is full."""
        with self._lock:
            if self._unreported:
                try:
                    self._queue.put_nowait({"type": "lost", "count": self._unreported})
                except queue.Full:
                    self._unreported += 1
                    self.lost += 1
                    return
                self._unreported = 0
            try:
                self._queue.put_nowait(event)
            except queue.Full:
                self._unreported += 1
                self.lost += 1

    def get(self, timeout: float | None = None) -> Event | None:
        """The next event; ``None`` once closed, or when ``timeout`` seconds passed."""
        try:
            return self._queue.get_nowait()
        except queue.Empty:
            pass
        if timeout is not None and timeout <= 0:
            return None
        waited = 0.0
        # Short waits, so a close from another thread ends a waiting reader.
        while not self.closed and (timeout is None or waited < timeout):
            step = 0.1 if timeout is None else min(0.1, timeout - waited)
            try:
                return self._queue.get(timeout=step)
            except queue.Empty:
                waited += step
        return None

    def __iter__(self) -> Iterator[Event]:
        while (event := self.get()) is not None:
            yield event

    def close(self) -> None:
        """Stops the events; a reader waiting in ``get`` or a loop returns."""
        self._closed.set()
        self._hub.drop(self)

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Subscription(scope={self.scope!r}, lost={self.lost}, closed={self.closed})"


class Events:
    """A store's subscribers, and what the writer tells them."""

    def __init__(self) -> None:
        self._subscribers: tuple[Subscription, ...] = ()
        self._lock = threading.Lock()

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
            raise InvalidArgumentError(f"max_queue must be an int >= 1, got {max_queue!r}")
        if callback is not None and not callable(callback):
            raise InvalidArgumentError(f"callback must be callable, got {callback!r}")
        checked = {f: coerce.text(v, f) for f, v in scope.items() if v is not None}
        sub = Subscription(self, checked, max_queue)
        with self._lock:
            self._subscribers = (*self._subscribers, sub)
        if callback is not None:
            threading.Thread(
                target=_deliver, args=(sub, callback), name="memlane-events", daemon=True
            ).start()
        return sub

    def drop(self, sub: Subscription) -> None:
        with self._lock:
            self._subscribers = tuple(s for s in self._subscribers if s is not sub)

    def close(self) -> None:
        """Ends every subscription (the store closes)."""
        for sub in self._subscribers:
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


def _deliver(sub: Subscription, callback: Callable[[Event], object]) -> None:
    for event in sub:
        try:
            callback(event)
        except Exception:
            log.exception("a memlane event subscriber's callback raised; it goes on")
