"""Every failure as one JSON shape, ``{"error": {"type": ..., "message": ...}}``, with a
status that says whose fault it is: 4xx for the request (memlane's errors by their class
name), 5xx only for ``InternalError`` and
``StorageError``, the server's own side."""

from __future__ import annotations

import logging
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse
from starlette.types import Message, Receive, Scope, Send

from memlane import errors

__all__ = ["Handled", "Refused", "Unexpected", "error_body", "handlers", "status_of"]

log = logging.getLogger("memlane.server")

# First match wins: subclasses before their bases.
_STATUS: tuple[tuple[type[errors.MemlaneError], int], ...] = (
    (errors.UnknownIdError, 404),
    (errors.NotFoundError, 404),
    (errors.DuplicateIdError, 409),
    (errors.ConflictError, 409),
    (errors.StoreLockedError, 409),
    (errors.ClosedError, 409),
    (errors.EmbedderUnavailableError, 422),
    (errors.EmbedderMismatchError, 422),
    (errors.InternalError, 500),
    (errors.StorageError, 503),
)


class Refused(Exception):
    """A request the server refuses before memlane sees it: no key, a key without the
    right, a body too large, a route that is not there."""

    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind


def status_of(error: errors.MemlaneError) -> int:
    for cls, status in _STATUS:
        if isinstance(error, cls):
            return status
    return 400


def error_body(kind: str, message: str) -> dict[str, Any]:
    return {"error": {"type": kind, "message": message}}


async def _memlane(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, errors.MemlaneError)
    return JSONResponse(error_body(type(exc).__name__, str(exc)), status_of(exc))


async def _refused(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, Refused)
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
    return JSONResponse(error_body(exc.kind, str(exc)), exc.status, headers=headers)


_HTTP_KINDS = {404: "NotFound", 405: "MethodNotAllowed"}


async def _http(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    kind = _HTTP_KINDS.get(exc.status_code, "HTTPError")
    return JSONResponse(error_body(kind, str(exc.detail)), exc.status_code)


#: The app's exception handlers.
handlers: dict[Any, Any] = {
    errors.MemlaneError: _memlane,
    Refused: _refused,
    HTTPException: _http,
}


class Unexpected:
    """ASGI middleware: an exception no handler took (a bug) is answered 500, said as
    memlane says an ``InternalError`` without the traceback, which goes to the log.
    Starlette's own last handler re-raises it after answering, and uvicorn then closes
    the connection, failing whatever request the client sent next on it."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except ClientDisconnect:
            return  # gone before its body arrived: no one to answer, nothing stored
        except Exception as exc:
            if started or scope["type"] != "http":
                raise  # an answer under way can only be cut short
            log.exception("%s %s", scope["method"], scope["path"])
            body = error_body("InternalError", f"{type(exc).__name__}: {exc}")
            await JSONResponse(body, 500)(scope, receive, send)


class Handled:
    """ASGI middleware: ``handlers`` around an app that raises them, as Starlette's
    exception middleware does, without the request object it makes for every call (for
    the routes ``App`` answers before its router)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self.app(scope, receive, send)
        except Exception as exc:
            handler = next((handlers[c] for c in type(exc).__mro__ if c in handlers), None)
            if handler is None:
                raise
            response = await handler(Request(scope, receive), exc)
            await response(scope, receive, send)
