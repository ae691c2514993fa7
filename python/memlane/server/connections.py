"""The HTTP connections ``memlane serve`` keeps: each request's head (its request line
and headers) must arrive within a time and a size, its body must not stall for longer
than a time, and so many connections are open at once at most.

uvicorn bounds none of these. A client that sends half a head and waits holds its
connection, and a file descriptor, for as long as it likes, before any key is checked:
enough of them leave the server no descriptor to open a file or accept a client with a
key. And httptools buffers a header of any length until its end arrives: one client
sending 400 MB of header grew the server by as much. The protocol here is uvicorn's
(httptools') with those bounds; an answer it refuses with is plain text and closes the
connection, like uvicorn's own 400 (a stalled body's connection is closed, which the
request's handler sees as the client gone).
"""

from __future__ import annotations

import asyncio
import resource
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["default_max_connections", "guarded_protocol"]

#: File descriptors kept for the store, its logs and the listening socket.
_SPARE_FDS = 128

_REASONS = {
    408: "Request Timeout",
    431: "Request Header Fields Too Large",
    503: "Service Unavailable",
}


def default_max_connections() -> int:
    """The connections served at once by default: 4,096, or fewer where the process
    may not open that many descriptors beside what the store needs."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 4096
    return max(16, min(4096, soft - _SPARE_FDS))


def guarded_protocol(
    head_timeout: float, max_head: int, body_idle: float, max_connections: int
) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol (``Config(http=...)``) that closes a connection whose
    request head takes longer than ``head_timeout`` seconds (408) or more than
    ``max_head`` bytes (431), or whose body stalls for ``body_idle`` seconds, and refuses
    a connection past ``max_connections`` (503)."""

    class Guarded(HttpToolsProtocol):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._timer: asyncio.TimerHandle | None = None
            self._reading_head = True
            self._head_bytes = 0

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > max_connections:
                self._refuse(503, "too many connections: try again later")
                return
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self._reading_head:
                self._head_bytes += len(data)
            elif self._timer is not None:  # a body that is arriving
                self._arm(body_idle, self._body_stalled)
            super().data_received(data)
            # Checked once the parser has read the data: the same bytes may end the
            # head and start a body, which is not the head's.
            if self._reading_head and self._head_bytes > max_head:
                self._refuse(431, f"the request's head is over {max_head} bytes")

        def on_headers_complete(self) -> None:
            self._reading_head = False
            # Until the body has arrived (at once, for a request without one).
            self._arm(body_idle, self._body_stalled)
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            self._disarm()
            super().on_message_complete()
            self._reading_head, self._head_bytes = True, 0

        def on_response_complete(self) -> None:
            super().on_response_complete()
            # The next head is timed from this answer (a pipelined one has arrived; an
            # answer given before its request's body arrived leaves the body's timer).
            if self._reading_head and not self.pipeline and not self.transport.is_closing():
                self._arm()

        def _arm(self, seconds: float = head_timeout, then: Any = None) -> None:
            self._disarm()
            self._timer = self.loop.call_later(seconds, then or self._head_late)

        def _disarm(self) -> None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

        def _head_late(self) -> None:
            self._timer = None
            self._refuse(408, f"the request's head took over {head_timeout:g} s")

        def _body_stalled(self) -> None:
            self._timer = None
            self.transport.close()

        def _refuse(self, status: int, message: str) -> None:
            self._disarm()
            if self.transport.is_closing():
                return
            body = message.encode("ascii")
            self.transport.write(
                b"HTTP/1.1 %d %s\r\ncontent-type: text/plain; charset=utf-8\r\n"
                b"content-length: %d\r\nconnection: close\r\n\r\n%s"
                % (status, _REASONS[status].encode("ascii"), len(body), body)
            )
            self.transport.close()

    return Guarded
