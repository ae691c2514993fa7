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
from collections.abc import Callable, Collection, Mapping
from datetime import datetime
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from memlane.errors import InvalidArgumentError
from memlane.records import SCOPE_FIELDS, MemoryRecord, MemoryVersion, SearchHit

__all__ = [
    "TIME_FIELDS",
    "Answer",
    "arguments",
    "hit_json",
    "query_arguments",
    "read_json",
    "record_json",
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
    allowed = parameters(method)
    if only is not None:
        allowed = {k: v for k, v in allowed.items() if k in only}
    unknown = sorted(set(given) - set(allowed))
    if unknown:
        raise InvalidArgumentError(
            f"unknown argument {', '.join(map(repr, unknown))}; this call takes "
            f"{', '.join(allowed)}"
        )
    missing = [n for n, p in allowed.items() if p.default is p.empty and n not in given]
    if missing:
        raise InvalidArgumentError(f"missing argument {', '.join(map(repr, missing))}")
    return {k: _time(k, v) for k, v in given.items()}


async def read_json(request: Request, *, exact: bool = True) -> dict[str, Any]:
    """The request's body, a JSON object (an empty body: ``{}``). ``exact=False`` reads it
    with orjson, several times faster for a body of numbers (a query vector), which takes
    an integer past 64 bits as the nearest float: for a call that reads its numbers so
    anyway (a search: the engine reads a filter's integers past 64 bits as floats)."""
    body = await request.body()
    if not body.strip():
        return {}
    try:
        value = json.loads(body) if exact else orjson.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InvalidArgumentError(f"the body is not JSON: {e}") from None
    if not isinstance(value, dict):
        raise InvalidArgumentError(f"the body must be a JSON object, not {type(value).__name__}")
    return value


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


def _parse(name: str, text: str, default: Any) -> Any:
    try:
        if name == "filters":
            return json.loads(text)
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
        raise InvalidArgumentError(f"{name}: {e} (got {text!r})") from None


class Answer(Response):
    """A JSON response, written by orjson (a search's hits several times faster than by
    json); what orjson cannot write (an integer past 64 bits) is written by json."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        try:
            return orjson.dumps(content)
        except orjson.JSONEncodeError:
            text = json.dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
            return text.encode("utf-8")


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
