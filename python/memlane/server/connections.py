"""The HTTP connections ``memlane serve`` keeps: each request's head (its request line
and headers, and a chunked body's trailers) must arrive within a time and a size, and so
many connections are open at once at most.

uvicorn bounds none of these. A client that sends half a head and waits holds its
connection, and a file descriptor, for as long as it likes, before any key is checked:
enough of them leave the server no descriptor to open a file or accept a client with a
key. And httptools buffers a header of any length until its end arrives: one client
sending 400 MB of header grew the server by as much. The protocol here is uvicorn's
(httptools') with those bounds; an answer it refuses with is plain text and closes the
connection, like uvicorn's own 400.

A body is not timed: the server itself stops reading one while it answers an earlier
request on the connection or while its worker threads are busy, so a timer could not
tell a stalled client from a waiting server. The connection bound is what keeps slow
bodies from taking every descriptor.
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


class _Refused(Exception):
    """Raised in a parser callback: httptools stops there, and uvicorn's answer to a
    parser error is replaced by the refusal (``send_400_response``)."""


def default_max_connections() -> int:
    """The connections served at once by default: 4,096, or fewer where the process may
    not open two descriptors for each (an upload's socket and its file) beside what the
    store needs."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 4096
    return max(16, min(4096, (soft - _SPARE_FDS) // 2))


def guarded_protocol(
    head_timeout: float, max_head: int, max_connections: int
) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol (``Config(http=...)``) that refuses a request head that
    takes longer than ``head_timeout`` seconds to arrive (408), timed from the connection
    or from the last answer when no request is running, or that holds more than
    ``max_head`` bytes (431), and a connection past ``max_connections`` (503)."""

    class Guarded(HttpToolsProtocol):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._timer: asyncio.TimerHandle | None = None
            self._reading_head = True
            self._head_size = 0  # the current request's line and headers (trailers too)
            self._unparsed = 0  # bytes received that the parser has handed nothing of
            self._refusal: tuple[int, str] | None = None

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
            self._unparsed += len(data)
            super().data_received(data)
            # What the parser keeps without handing it on: a head or a trailer whose end
            # has not come (a body is handed on as it arrives).
            if self._unparsed > max_head and not self.transport.is_closing():
                self._refuse(431, f"the request's head is over {max_head} bytes")

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._head_size = 0

        def on_url(self, url: bytes) -> None:
            self._count(len(url))
            super().on_url(url)

        def on_header(self, name: bytes, value: bytes) -> None:
            self._count(len(name) + len(value))
            super().on_header(name, value)

        def on_headers_complete(self) -> None:
            self._reading_head, self._unparsed = False, 0
            self._disarm()
            super().on_headers_complete()

        def on_body(self, body: bytes) -> None:
            self._unparsed = 0
            super().on_body(body)

        def on_chunk_header(self) -> None:
            self._unparsed = 0

        def on_message_complete(self) -> None:
            self._unparsed = 0
            super().on_message_complete()
            self._reading_head = True
            # Answered before its body had all arrived: the next head is timed from now.
            if self.cycle.response_complete and not self.transport.is_closing():
                self._arm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            # The next head is timed from this answer, unless a request is running (a
            # pipelined one uvicorn started just now, or one whose body is arriving).
            if (
                self._reading_head
                and (self.cycle is None or self.cycle.response_complete)
                and not self.transport.is_closing()
            ):
                self._arm()

        def send_400_response(self, msg: str) -> None:
            if self._refusal is None:
                super().send_400_response(msg)
            else:
                self._refuse(*self._refusal)

        def _count(self, size: int) -> None:
            self._head_size += size
            if self._head_size > max_head:
                self._refusal = (431, f"the request's head is over {max_head} bytes")
                raise _Refused

        def _arm(self) -> None:
            self._disarm()
            self._timer = self.loop.call_later(head_timeout, self._head_late)

        def _disarm(self) -> None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

        def _head_late(self) -> None:
            self._timer = None
            if self._reading_head:
                self._refuse(408, f"the request's head took over {head_timeout:g} s")

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
