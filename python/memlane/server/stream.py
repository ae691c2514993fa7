"""``GET /v1/events``: the store's change events as Server-Sent Events.

Each event is ``event: <type>`` (add, supersede, update, delete, expire, or lost when
this stream fell behind and events were dropped) and ``data: <JSON>``
(``memlane.events``), filtered by the scope fields of the query string and by the
key's scope. A comment line every few seconds keeps proxies from closing a quiet
stream. On a PostgreSQL store other processes' writes are streamed too, in commit order
(``Memory.events`` tells them).

A stream waits for its events: the writer's thread, on queueing one for a stream whose
queue was empty, has the stream's event loop wake it. A quiet stream does nothing but
its keep-alive; one that looked at its queue on a timer (every 50 ms) made 4,000 idle
followers take a core from the loop every other request waits on. An app serves at
most ``max_streams`` at once (``create_app``), as each is told every write in its
scope, during the write: more are refused (503).

A stream never ends on its own: it ends when the server begins to stop
(``app.state.stopping``, which ``memlane serve`` points at uvicorn's flag). Otherwise
uvicorn waits out its graceful timeout for the stream, then cancels it and logs an
ordinary stop as the application's crash. The flag is a value, not something to await:
one task per event loop looks at it for all the streams (``Followers``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import AsyncIterator, Callable

import anyio
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from memlane.errors import InvalidArgumentError
from memlane.records import SCOPE_FIELDS
from memlane.server.errors import Refused
from memlane.server.records import Route, context

__all__ = ["DEFAULT_MAX_STREAMS", "ROUTES", "Followers"]

#: Seconds between keep-alive comments on a quiet stream.
KEEP_ALIVE = 5.0
#: Seconds between two looks whether the server stops (one look for all the streams).
POLL = 0.05
#: Events a stream may fall behind by before it drops some (and says how many).
QUEUE = 10_000
#: Streams an app serves at once unless ``create_app`` says otherwise.
DEFAULT_MAX_STREAMS = 1000


class _Loop:
    """The streams of one event loop: the wake-ups the writer's thread hands them, one
    call onto the loop for all that a write wakes (a call each costs the writer a
    write to the loop's wake-up pipe per stream), and the task that looks whether the
    server stops."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.streams: set[asyncio.Event] = set()
        self.watcher: asyncio.Task[None] | None = None
        self._due: list[asyncio.Event] = []
        self._lock = threading.Lock()

    def wake(self, ready: asyncio.Event) -> None:
        """Wakes the stream waiting on ``ready``: called from any thread."""
        with self._lock:
            self._due.append(ready)
            if len(self._due) > 1:
                return  # a call that wakes them all is on its way
        with contextlib.suppress(RuntimeError):  # the loop closed: its streams are gone
            self.loop.call_soon_threadsafe(self._run)

    def _run(self) -> None:
        with self._lock:
            due, self._due = self._due, []
        for ready in due:
            ready.set()


class Followers:
    """An app's event streams: how many (at most ``limit``), and those of each loop."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.count = 0
        self._loops: dict[asyncio.AbstractEventLoop, _Loop] = {}
        self._lock = threading.Lock()

    def take(self) -> None:
        """Counts a stream in, or refuses it (503) when there are ``limit``."""
        with self._lock:
            if self.count >= self.limit:
                raise Refused(
                    503,
                    "ServiceUnavailable",
                    f"this server serves at most {self.limit} event "
                    f"{'stream' if self.limit == 1 else 'streams'} at once, and all are "
                    "taken; try again later",
                )
            self.count += 1

    def give_back(self) -> None:
        with self._lock:
            self.count -= 1

    def join(self, ready: asyncio.Event, stopping: Callable[[], bool]) -> _Loop:
        """Adds the stream waiting on ``ready`` to its loop's (the running one)."""
        loop = asyncio.get_running_loop()
        with self._lock:
            mine = self._loops.setdefault(loop, _Loop(loop))
            mine.streams.add(ready)
        if mine.watcher is None or mine.watcher.done():
            mine.watcher = loop.create_task(_watch(mine, stopping))
        return mine

    def leave(self, mine: _Loop, ready: asyncio.Event) -> None:
        with self._lock:
            mine.streams.discard(ready)
            if mine.streams:
                return
            del self._loops[mine.loop]
        if mine.watcher is not None:
            mine.watcher.cancel()


async def _watch(mine: _Loop, stopping: Callable[[], bool]) -> None:
    """Wakes every stream of ``mine`` once the server begins to stop."""
    while mine.streams:
        if stopping():
            for ready in list(mine.streams):
                ready.set()
        await asyncio.sleep(POLL)


class _Stream(StreamingResponse):
    """A stream whose ``end`` runs however its answer ends: a client gone before the
    body began leaves no subscription behind, nor a place among the ``max_streams``."""

    def __init__(self, lines: AsyncIterator[str], end: Callable[[], None]) -> None:
        super().__init__(
            lines,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )
        self._end = end

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._end()


async def events(request: Request) -> StreamingResponse:
    """Follow the store's changes (Server-Sent Events), filtered by scope
    (?user_id=alice ...)."""
    mem, caller = context(request)
    given = dict(request.query_params)
    unknown = sorted(set(given) - set(SCOPE_FIELDS))
    if unknown or len(given) != len(request.query_params.multi_items()):
        raise InvalidArgumentError(
            f"events takes each of the scope fields {', '.join(SCOPE_FIELDS)} once"
        )
    state = request.app.state
    followers: Followers = state.followers
    scope = caller.bound(given)
    followers.take()
    try:
        sub = mem.events.subscribe(max_queue=QUEUE, **scope)
    except BaseException:
        followers.give_back()
        raise

    # Read at each look: ``memlane serve`` sets it after the app is made.
    def stopping() -> bool:
        return bool(state.stopping())

    ready = asyncio.Event()
    mine = followers.join(ready, stopping)
    sub.on_ready(lambda: mine.wake(ready))
    ended = False

    def end() -> None:
        nonlocal ended
        if not ended:
            ended = True
            sub.close()
            followers.leave(mine, ready)
            followers.give_back()

    async def lines() -> AsyncIterator[str]:
        try:
            yield ": following\n\n"
            while not sub.closed and not stopping():
                ready.clear()  # before the look: an event queued after it sets it again
                event = sub.get(timeout=0)
                if event is None:
                    with anyio.move_on_after(KEEP_ALIVE) as quiet:
                        await ready.wait()
                    if quiet.cancelled_caught:
                        yield ": keep-alive\n\n"
                    continue
                data = json.dumps(event, ensure_ascii=False)
                yield f"event: {event['type']}\ndata: {data}\n\n"
        finally:
            end()

    return _Stream(lines(), end)


ROUTES: list[Route] = [("GET", "/v1/events", events, False, None, None)]
