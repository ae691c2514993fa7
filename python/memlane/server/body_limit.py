"""The body size limit, enforced before a body is read: a declared ``Content-Length``
over the limit is answered 413 at once, and a body sent without one is counted as it
arrives and refused (413) as soon as it passes the limit, before a route acts on it."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from memlane.server.errors import Refused, error_body

__all__ = ["BodyLimit"]

Scope = dict[str, Any]
Receive = Callable[[], Any]
Send = Callable[[dict[str, Any]], Any]


class BodyLimit:
    """ASGI middleware: ``limit(path)`` is the largest body a path takes, in bytes."""

    def __init__(self, app: Any, limit: Callable[[str], int]) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit(scope["path"])
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            await _too_large(send, limit)
            return
        received = 0

        async def counted() -> Any:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise Refused(413, "PayloadTooLarge", _message(limit))
            return message

        await self.app(scope, counted, send)


def _message(limit: int) -> str:
    return f"the body is over this server's limit of {limit} bytes"


async def _too_large(send: Send, limit: int) -> None:
    body = json.dumps(error_body("PayloadTooLarge", _message(limit))).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
