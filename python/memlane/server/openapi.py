"""The OpenAPI 3.1 schema, built from the code: each route's summary is its handler's
docstring, and its parameters (query string or JSON body) are those of the
``Memory`` method it calls, read from that method's signature, so the
schema cannot drift from what the server accepts."""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections import abc
from collections.abc import Sequence
from typing import Any

from memlane import __version__
from memlane.memory import Memory
from memlane.records import SCOPE_FIELDS
from memlane.server.calls import TIME_FIELDS, parameters
from memlane.server.records import OWN_QUERY, Route

__all__ = ["schema"]

_ERROR = {
    "type": "object",
    "properties": {
        "error": {
            "type": "object",
            "properties": {"type": {"type": "string"}, "message": {"type": "string"}},
            "required": ["type", "message"],
        }
    },
}


def _type(name: str, annotation: Any, where: dict[str, Any]) -> dict[str, Any]:
    """A JSON schema for a parameter, from its annotation (a string: the modules use
    postponed annotations, resolved in the method's module)."""
    text = annotation if isinstance(annotation, str) else repr(annotation)
    if name in TIME_FIELDS:
        return {"oneOf": [{"type": "number"}, {"type": "string", "format": "date-time"}]}
    if "ArrayLike" in text:  # a vector
        return {"type": "array", "items": {"type": "number"}}
    try:
        hint = eval(text, where) if isinstance(annotation, str) else annotation
    except Exception:
        return {"type": "string"}
    return _schema(hint)


def _schema(hint: Any) -> dict[str, Any]:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Literal:
        return {"enum": list(args)}
    if origin in (types.UnionType, typing.Union):
        parts = [_schema(a) for a in args if a is not type(None)]
        return parts[0] if len(parts) == 1 else {"anyOf": parts}
    if hint in _SIMPLE:
        return {"type": _SIMPLE[hint]}
    if origin is not None and issubclass(origin, abc.Mapping):
        return {"type": "object"}
    if origin is not None and issubclass(origin, abc.Iterable):
        return {"type": "array", "items": _schema(args[0]) if args else {}}
    return {"type": "string"}


_SIMPLE = {bool: "boolean", int: "integer", float: "number", str: "string"}


def _fields(method_name: str) -> tuple[dict[str, Any], list[str]]:
    method = getattr(Memory, method_name)
    props: dict[str, Any] = {}
    required = []
    for name, p in parameters(method).items():
        prop = _type(name, p.annotation, method.__globals__)
        if p.default is not p.empty and isinstance(p.default, str | int | float | bool):
            prop["default"] = p.default
        props[name] = prop
        if p.default is p.empty:
            required.append(name)
    return props, required


def _operation(route: Route) -> dict[str, Any]:
    _, path, handler, writes, calls, where = route
    doc = inspect.cleandoc(handler.__doc__ or "")
    summary, _, rest = doc.partition("\n\n")
    op: dict[str, Any] = {
        "operationId": handler.__name__.strip("_"),
        "summary": " ".join(summary.split()),
        "responses": {
            "200": {"description": "done"},
            "default": {
                "description": "a memlane error (4xx) or a server fault (5xx)",
                "content": {"application/json": {"schema": _ERROR}},
            },
        },
    }
    if rest:
        op["description"] = rest
    if writes:
        op["x-memlane-writes"] = True
    params: list[dict[str, Any]] = [
        {"name": n, "in": "path", "required": True, "schema": {"type": "string"}}
        for n in re.findall(r"{(\w+)}", path)
    ]
    if calls is not None:
        props, required = _fields(calls)
        props = {k: v for k, v in props.items() if k not in {p["name"] for p in params}}
        if where == "query":
            params += [
                {"name": n, "in": "query", "required": n in required, "schema": s}
                for n, s in props.items()
            ]
        else:
            body = {"type": "object", "properties": props, "additionalProperties": False}
            if required := [r for r in required if r in props]:
                body["required"] = required
            op["requestBody"] = {
                "required": bool(required),
                "content": {"application/json": {"schema": body}},
            }
    params += [
        {"name": n, "in": "query", "required": False, "schema": s}
        for n, s in OWN_QUERY.get(handler.__name__, {}).items()
    ]
    if path == "/v1/events":
        params += [
            {"name": f, "in": "query", "required": False, "schema": {"type": "string"}}
            for f in SCOPE_FIELDS
        ]
    if params:
        op["parameters"] = params
    return op


def schema(routes: Sequence[Route]) -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        paths.setdefault(route[1], {})[route[0].lower()] = _operation(route)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "memlane",
            "version": __version__,
            "description": "The record API of a memlane store (docs/server.md).",
        },
        "paths": paths,
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "security": [{"bearer": []}, {}],
    }
