"""Metadata filters: checked here with clear errors, then evaluated by the engine.

A filter is a dict in the MongoDB style::

    {"source": "telegram"}                                 # equality
    {"source": {"$in": ["telegram", "discord"]}}           # membership
    {"priority": {"$gte": 2, "$lt": 5}}                    # ranges (numbers or strings)
    {"$or": [{"source": "telegram"}, {"pinned": True}]}    # logic: $and, $or, $not
    {"topic": {"$exists": True}}, {"lang": {"$ne": "en"}}, {"tag": {"$nin": ["x"]}}
    {"user.plan": "pro"}                                   # nested metadata, dotted

Operators: ``$eq $ne $in $nin $gt $gte $lt $lte $exists $not`` on a key;
``$and $or $not`` on filters. Numbers compare as floats, strings by code
point; booleans and None only by equality; values of different types are
never equal nor ordered. A key holding a list matches if any element does;
``$ne``, ``$nin`` and ``$not`` are the negations of ``$eq``, ``$in`` and their
operand, so they also match records without the key.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from memlane.errors import InvalidArgumentError

__all__ = ["FIELD_OPERATORS", "LOGICAL_OPERATORS", "metadata_filter"]

FIELD_OPERATORS = frozenset(
    {"$eq", "$ne", "$in", "$nin", "$gt", "$gte", "$lt", "$lte", "$exists", "$not"}
)
LOGICAL_OPERATORS = frozenset({"$and", "$or", "$not"})
_MAX_DEPTH = 32


def _bad(msg: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"invalid filter: {msg}")


def _scalar(value: object, where: str) -> object:
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int | float):
        if isinstance(value, float) and not math.isfinite(value):
            raise _bad(f"{where}: {value!r} is not a finite number")
        return value
    raise _bad(f"{where} takes a str, number, bool or None, got {type(value).__name__}")


def _operators(key: str, ops: Mapping[str, Any], depth: int) -> dict[str, Any]:
    if depth > _MAX_DEPTH:
        raise _bad(f"nested more than {_MAX_DEPTH} levels deep")
    if not ops:
        raise _bad(f"{key!r}: empty operator dict")
    out: dict[str, Any] = {}
    for op, arg in ops.items():
        where = f"{key!r} {op}"
        if op not in FIELD_OPERATORS:
            raise _bad(
                f"unknown operator {op!r} on {key!r}; expected one of "
                + ", ".join(sorted(FIELD_OPERATORS))
            )
        if op in ("$in", "$nin"):
            if not isinstance(arg, list | tuple | set | frozenset):
                raise _bad(f"{where} takes a list, got {type(arg).__name__}")
            out[op] = [_scalar(v, where) for v in arg]
        elif op in ("$gt", "$gte", "$lt", "$lte"):
            if isinstance(arg, bool) or not isinstance(arg, int | float | str):
                raise _bad(f"{where} takes a number or a str, got {type(arg).__name__}")
            out[op] = _scalar(arg, where)
        elif op == "$exists":
            if not isinstance(arg, bool):
                raise _bad(f"{where} takes True or False, got {type(arg).__name__}")
            out[op] = arg
        elif op == "$not":
            if not isinstance(arg, Mapping):
                raise _bad(f"{where} takes a dict of operators, got {type(arg).__name__}")
            out[op] = _operators(key, arg, depth + 1)
        else:
            out[op] = _scalar(arg, where)
    return out


def _translate(flt: object, depth: int) -> dict[str, Any]:
    if depth > _MAX_DEPTH:
        raise _bad(f"nested more than {_MAX_DEPTH} levels deep")
    if not isinstance(flt, Mapping):
        raise _bad(f"a filter must be a dict, got {type(flt).__name__}")
    out: dict[str, Any] = {}
    for key, value in flt.items():
        if not isinstance(key, str):
            raise _bad(f"keys must be str, got {type(key).__name__}")
        if key in ("$and", "$or"):
            if not isinstance(value, list | tuple) or not value:
                raise _bad(f"{key} takes a non-empty list of filters")
            out[key] = [_translate(v, depth + 1) for v in value]
        elif key == "$not":
            out[key] = _translate(value, depth + 1)
        elif key.startswith("$"):
            raise _bad(f"unknown operator {key!r} at the top level; expected $and, $or or $not")
        elif not key:
            raise _bad("empty metadata key")
        elif isinstance(value, Mapping):
            if not value or not all(isinstance(k, str) and k.startswith("$") for k in value):
                raise _bad(
                    f"{key!r}: a dict value must hold operators ($eq, $in, ...); "
                    "match nested metadata with dotted keys"
                )
            out[f"metadata.{key}"] = _operators(key, value, depth + 1)
        elif isinstance(value, list | tuple):
            raise _bad(f"{key!r}: a list is ambiguous here; use {{'$in': [...]}}")
        else:
            out[f"metadata.{key}"] = _scalar(value, repr(key))
    return out


def metadata_filter(flt: Mapping[str, Any]) -> dict[str, Any]:
    """Check a metadata filter and return it in the engine's terms (keys become ``metadata.<key>``).

    Raises :class:`~memlane.errors.InvalidArgumentError` naming the first problem.
    """
    return _translate(flt, 0)
