"""The ASGI app: the routes of records.py, transfer.py and stream.py over one open
``Memory``, the body limit, the error handlers and ``/openapi.json``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse
from starlette.routing import Route as StarletteRoute
from starlette.types import Receive, Scope, Send

from memlane.errors import InvalidArgumentError, shown
from memlane.memory import Memory
from memlane.server import records, stream, transfer
from memlane.server.body_limit import BodyLimit
from memlane.server.calls import AsgiRoute
from memlane.server.errors import Handled, Unexpected, error_body, handlers
from memlane.server.keys import ApiKey
from memlane.server.local import refusal
from memlane.server.openapi import schema

__all__ = ["DEFAULT_MAX_BODY", "DEFAULT_MAX_UPLOAD", "create_app"]

#: The largest JSON body (bytes): a batch of adds with their vectors fits.
DEFAULT_MAX_BODY = 16 << 20
#: The largest upload to /v1/ingest or /v1/import (bytes).
DEFAULT_MAX_UPLOAD = 256 << 20
_UPLOADS = ("/v1/ingest", "/v1/import")

ROUTES = [*records.ROUTES, *transfer.ROUTES, *stream.ROUTES]


async def _health(request: Request) -> JSONResponse:
    return JSONResponse({"ok": True})


#: The inspector: one page, its script and style inline, nothing fetched from elsewhere.
INSPECTOR = Path(__file__).with_name("static") / "inspector.html"


async def _inspector(request: Request) -> HTMLResponse:
    """The page asks the API for everything, with the key its user types in."""
    return HTMLResponse(
        INSPECTOR.read_text(encoding="utf-8"),
        headers={"Content-Security-Policy": _POLICY, "Cache-Control": "no-store"},
    )


# The page may run its own inline script and style and talk to this server only.
_POLICY = (
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
    "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'"
)


def _never() -> bool:
    return False


def create_app(
    memory: Memory,
    *,
    keys: Sequence[ApiKey] = (),
    max_body: int = DEFAULT_MAX_BODY,
    max_upload: int = DEFAULT_MAX_UPLOAD,
    ingest_root: str | Path | None = None,
    max_streams: int = stream.DEFAULT_MAX_STREAMS,
) -> App:
    """The server's app over an open ``memory`` (which the caller closes). ``keys``: the
    API keys a request must give one of (none: every request made to a loopback
    address by no web page of another origin may do everything, see ``local.py``; the
    command refuses that on any address but loopback). ``ingest_root``: the folder
    whose files ``/v1/ingest`` may read by path (none: no server-side path).
    ``max_streams``: the ``/v1/events`` streams served at once (more are refused, 503):
    each is told every write of its scope, during the write."""
    limits = (("max_body", max_body), ("max_upload", max_upload), ("max_streams", max_streams))
    for label, value in limits:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidArgumentError(f"{label} must be a positive int, got {shown(value)}")
    root = None if ingest_root is None else Path(ingest_root).resolve()
    if root is not None and not root.is_dir():
        raise InvalidArgumentError(f"the ingest root {ingest_root} is not a folder")
    document = schema(ROUTES)

    async def openapi(request: Request) -> JSONResponse:
        return JSONResponse(document)

    routes: list[Any] = [
        StarletteRoute(path, handler, methods=[method]) for method, path, handler, *_ in ROUTES
    ]
    routes += [
        StarletteRoute("/openapi.json", openapi, methods=["GET"]),
        StarletteRoute("/health", _health, methods=["GET"]),
        StarletteRoute("/", _inspector, methods=["GET"]),
    ]

    def limit(path: str) -> int:
        return max_upload if path in _UPLOADS else max_body

    app = App(
        limit,
        routes=routes,
        middleware=[Middleware(Unexpected), Middleware(BodyLimit, limit=limit)],
        exception_handlers=handlers,
    )
    app.state.memory = memory
    # Whether the server has begun to stop, which ends the event streams (stream.py):
    # never, unless the server that runs the app says (memlane serve does).
    app.state.stopping = _never
    app.state.followers = stream.Followers(max_streams)
    app.state.keys = tuple(keys)
    app.state.ingest_root = root
    return app


class App(Starlette):
    """Starlette, but a request to a fixed path whose route is an ``AsgiRoute`` (a
    search) goes straight to it through the same checks (the body limit, the error
    handlers, a 500 for a bug) instead of through Starlette's middleware stack and router
    (more searches a second: benches/README.md). Its route stays in the router
    too, which answers its path's other methods (405)."""

    def __init__(self, limit: Callable[[str], int], **options: Any) -> None:
        super().__init__(**options)
        self.direct = {
            (method, path): Unexpected(BodyLimit(Handled(handler), limit=limit))
            for method, path, handler, *_ in ROUTES
            if isinstance(handler, AsgiRoute) and "{" not in path
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not self.state.keys:
            why = refusal(Headers(scope=scope))
            if why is not None:
                await JSONResponse(error_body("Forbidden", why), 403)(scope, receive, send)
                return
        if scope["type"] == "http":
            why = records.undecodable(scope)
            if why is not None:
                body = error_body("InvalidArgumentError", why)
                await JSONResponse(body, 400)(scope, receive, send)
                return
            records.raw_id(scope)
        # Under a root path (a mount, a proxy's prefix) the router strips it first.
        if scope["type"] == "http" and not scope.get("root_path"):
            direct = self.direct.get((scope["method"], scope["path"]))
            if direct is not None:
                scope["app"] = self
                await direct(scope, receive, send)
                return
        await super().__call__(scope, receive, send)
