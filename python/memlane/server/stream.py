"""``GET /v1/events``: the store's change events as Server-Sent Events.

Each event is ``event: <type>`` (add, supersede, update, delete, expire, or lost when
this stream fell behind and events were dropped) and ``data: <JSON>``
(``memlane.events``), filtered by the scope fields of the query string and by the
key's scope. A comment line every few seconds keeps proxies from closing a quiet
stream. On a PostgreSQL store other processes' writes are streamed too, in commit order
(``Memory.events`` tells them).

A stream never ends on its own: it ends when the server begins to stop
(``app.state.stopping``, which ``memlane serve`` points at uvicorn's flag). Otherwise
uvicorn waits out its graceful timeout for the stream, then cancels it and logs an
ordinary stop as the application's crash.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable

import anyio
from starlette.requests import Request
from starlette.responses import StreamingResponse

from memlane.errors import InvalidArgumentError
from memlane.records import SCOPE_FIELDS
from memlane.server.records import Route, context

__all__ = ["ROUTES"]

#: Seconds between keep-alive comments on a quiet stream.
KEEP_ALIVE = 5.0
#: Seconds between two looks at a stream's queue when it is empty.
POLL = 0.05
#: Events a stream may fall behind by before it drops some (and says how many).
QUEUE = 10_000


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
    sub = mem.events.subscribe(max_queue=QUEUE, **caller.bound(given))
    stopping: Callable[[], bool] = request.app.state.stopping

    async def lines() -> AsyncIterator[str]:
        try:
            yield ": following\n\n"
            quiet = 0.0
            # Polled anyway: the stream sees the server stopping at its next look.
            while not sub.closed and not stopping():
                # Polled, not waited for in a thread: a thread per stream would take the
                # worker threads the other routes run on.
                event = sub.get(timeout=0)
                if event is None:
                    await anyio.sleep(POLL)
                    quiet += POLL
                    if quiet >= KEEP_ALIVE:
                        quiet = 0.0
                        yield ": keep-alive\n\n"
                    continue
                quiet = 0.0
                data = json.dumps(event, ensure_ascii=False)
                yield f"event: {event['type']}\ndata: {data}\n\n"
        finally:
            sub.close()

    return StreamingResponse(
        lines(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


ROUTES: list[Route] = [("GET", "/v1/events", events, False, None, None)]
