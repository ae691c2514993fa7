"""A request's arguments to a memlane call, and a call's results to JSON.

A JSON body is the keyword arguments of the method a route calls, by the same names: a
name the method does not take is refused (400 ``InvalidArgumentError``) rather than
ignored, and memlane checks every value as it would a Python caller's. Times may be unix
seconds or ISO 8601 strings with a time zone.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Awaitable, Callable, Collection, Mapping
from datetime import datetime
from typing import Any

import orjson
from starlette.requests import ClientDisconnect, HTTPConnection, Request
from starlette.types import Receive, Scope, Send

from memlane import json_depth
from memlane.errors import InvalidArgumentError, shown
from memlane.records import SCOPE_FIELDS, MemoryRecord, MemoryVersion, SearchHit

__all__ = [
    "TIME_FIELDS",
    "AsgiRoute",
    "arguments",
    "hit_json",
    "json_bytes",
    "json_object",
    "query_arguments",
    "query_once",
    "read_body",
    "read_json",
    "record_json",
    "send_json",
    "version_json",
]

#: Arguments that are times: a string is read as ISO 8601.
TIME_FIELDS = frozenset({"created_at", "expires_at", "start", "end", "as_of", "known_at", "at"})
#: Arguments no request may give: Python objects, or the server's own choices.
NOT_OVER_HTTP = frozenset({"self", "progress", "chunker", "limits"})


def parameters(method: Callable[..., Any]) -> dict[str, inspect.Parameter]:
    """The parameters a request may give to ``method``."""
    return _parameters(getattr(method, "__func__", method))


@functools.cache
def _parameters(function: Callable[..., Any]) -> dict[str, inspect.Parameter]:
    # Read once per function: a signature costs more than the engine's search.
    given = inspect.signature(function).parameters
    out = {
        name: p
        for name, p in given.items()
        if name not in NOT_OVER_HTTP and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    }
    if "scope" in given and given["scope"].kind is inspect.Parameter.VAR_KEYWORD:
        # ``**scope: Unpack[ScopeFields]``: the scope keywords, each a str or unset.
        for field in SCOPE_FIELDS:
            out[field] = inspect.Parameter(
                field, inspect.Parameter.KEYWORD_ONLY, default=None, annotation="str | None"
            )
    return out


@functools.cache
def _required(function: Callable[..., Any]) -> tuple[str, ...]:
    return tuple(n for n, p in _parameters(function).items() if p.default is p.empty)


def _time(name: str, value: Any) -> Any:
    if name not in TIME_FIELDS or not isinstance(value, str):
        return value
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise InvalidArgumentError(f"{name}: not an ISO 8601 time: {value!r}") from None
    if moment.tzinfo is None:
        raise InvalidArgumentError(f"{name}: give a time zone ({value!r} has none)")
    return moment


def arguments(
    method: Callable[..., Any], given: Mapping[str, Any], *, only: set[str] | None = None
) -> dict[str, Any]:
    """``given`` checked against ``method``'s parameters (``only``: a subset of them)."""
    function = getattr(method, "__func__", method)
    allowed, required = _parameters(function), _required(function)
    if only is not None:
        allowed = {k: v for k, v in allowed.items() if k in only}
        required = tuple(n for n in required if n in only)
    unknown = sorted(k for k in given if k not in allowed)
    if unknown:
        raise InvalidArgumentError(
            f"unknown argument {', '.join(map(repr, unknown))}; this call takes "
            f"{', '.join(allowed)}"
        )
    missing = [n for n in required if n not in given]
    if missing:
        raise InvalidArgumentError(f"missing argument {', '.join(map(repr, missing))}")
    return {k: _time(k, v) for k, v in given.items()}


async def read_json(request: Request, *, exact: bool = True) -> dict[str, Any]:
    """The request's body, a JSON object (see ``json_object``)."""
    return json_object(await request.body(), exact=exact)


async def read_body(receive: Receive) -> bytes:
    """A raw ASGI route's whole body, as ``Request.body`` reads it."""
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def json_object(body: bytes, *, exact: bool = True) -> dict[str, Any]:
    """``body``, a JSON object (an empty body: ``{}``). ``exact=False`` reads it with
    orjson, several times faster for a body of numbers (a query vector), which takes an
    integer past 64 bits as the nearest float: for a call that reads its numbers so
    anyway (a search: the engine reads a filter's integers past 64 bits as floats)."""
    if not body.strip():
        return {}
    # JSON between systems is UTF-8 (RFC 8259): both readers take that alone, where
    # json.loads given bytes would also take UTF-16 and UTF-32, and a BOM.
    text = _utf8(body) if exact else None
    try:
        value = json_depth.loads(text) if text is not None else orjson.loads(body)
    except RecursionError:
        raise InvalidArgumentError("the body is not JSON: nested too deep") from None
    except ValueError as e:  # not JSON, or an integer past Python's 4,300 digits
        if not exact:
            _utf8(body)  # orjson's word for it is "str is not valid UTF-8"
        reason = str(e)
        if type(e) is ValueError and "digits" in reason:  # not the interpreter's advice
            reason = "an integer has more than 4,300 digits"
        raise InvalidArgumentError(f"the body is not JSON: {reason}") from None
    if not isinstance(value, dict):
        raise InvalidArgumentError(f"the body must be a JSON object, not {type(value).__name__}")
    return value


def _utf8(body: bytes) -> str:
    if body.startswith(b"\xef\xbb\xbf"):
        raise InvalidArgumentError("the body starts with a byte order mark, which JSON has not")
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as e:
        bad = body[e.start : e.start + 1].hex()
        raise InvalidArgumentError(f"the body is not UTF-8: byte 0x{bad} at {e.start}") from None


def query_arguments(
    request: Request, method: Callable[..., Any], *, own: Collection[str] = (), **path: Any
) -> dict[str, Any]:
    """A GET's query string (and the ``path``'s parameters) as ``method``'s arguments:
    each read by its parameter's default (an int, a number, a flag), ``filters`` as a
    JSON object. ``own``: parameters the route reads itself, left out here."""
    allowed = {k: v for k, v in parameters(method).items() if k not in path}
    out: dict[str, Any] = {}
    for name, value in request.query_params.multi_items():
        if name in own:
            continue
        if name in out:
            raise InvalidArgumentError(f"{name} is given twice")
        p = allowed.get(name)
        if p is None:
            raise InvalidArgumentError(
                f"unknown parameter {name!r}; this call takes {', '.join(allowed)}"
            )
        out[name] = _parse(name, value, p.default)
    return arguments(method, {**out, **path})


def query_once(request: HTTPConnection) -> dict[str, str]:
    """The query string, each name given once: one given twice is refused, as
    ``query_arguments`` refuses it (``?embeddings=false&embeddings=true`` read as its
    last said true for a client that may have meant false)."""
    out: dict[str, str] = {}
    for name, value in request.query_params.multi_items():
        if name in out:
            raise InvalidArgumentError(f"{name} is given twice")
        out[name] = value
    return out


def _parse(name: str, text: str, default: Any) -> Any:
    try:
        if name == "filters":
            return json_depth.loads(text)
        if isinstance(default, bool):
            if text not in ("true", "false"):
                raise ValueError("expected true or false")
            return text == "true"
        if isinstance(default, int):
            return int(text)
        if name in TIME_FIELDS:
            try:
                return float(text)
            except ValueError:
                return text  # ISO 8601, read by arguments()
        return text
    except ValueError as e:
        raise InvalidArgumentError(f"{name}: {e} (got {shown(text)})") from None
    except RecursionError:
        raise InvalidArgumentError(f"{name}: nested too deep (got {shown(text)})") from None


def json_bytes(content: Any) -> bytes:
    """``content`` as JSON, written by orjson (a search's hits several times faster than
    by json); what orjson cannot write (an integer past 64 bits) is written by json."""
    try:
        return orjson.dumps(content)
    except orjson.JSONEncodeError:
        text = json.dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        return text.encode("utf-8")


async def send_json(send: Send, content: Any, status: int = 200) -> None:
    """A raw ASGI route's answer, with the headers Starlette's ``JSONResponse`` sends."""
    body = json_bytes(content)
    headers = [(b"content-length", b"%d" % len(body)), (b"content-type", b"application/json")]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class AsgiRoute:
    """A route answered as an ASGI app, without Starlette's request and response objects
    around it: for the call made most, a search (benches/README.md, "Figures behind the
    code"). Its errors reach the app's handlers as a route's do."""

    def __init__(self, handler: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:
        self.handler = handler
        functools.update_wrapper(self, handler)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.handler(scope, receive, send)


def record_json(record: MemoryRecord) -> dict[str, Any]:
    return record.to_dict(embedding=record.embedding is not None)


def hit_json(hit: SearchHit) -> dict[str, Any]:
    return {"score": hit.score, "explain": hit.explain, "record": record_json(hit.record)}


def version_json(version: MemoryVersion) -> dict[str, Any]:
    return {
        "event": version.event,
        "at": version.at,
        "by": version.by,
        "ended": version.ended,
        "ended_at": version.ended_at,
        "ended_by": version.ended_by,
        "superseded_by": version.superseded_by,
        "record": record_json(version.record),
    }
