"""LangGraph's filters over memlane's (``memlane.integrations.langgraph``): an item's value
checked against a filter as LangGraph's stores check it, the memlane conditions a search
hands the engine first, and a namespace against a match condition."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langgraph.store.base import MatchCondition

from memlane.errors import InvalidArgumentError

__all__ = ["matches", "namespace_matches", "number", "pushdown"]

_OPS = {"$eq", "$ne", "$gt", "$gte", "$lt", "$lte"}


def matches(value: Any, flt: Any) -> bool:
    """LangGraph's filter semantics (JSONB-like) on one value."""
    if isinstance(flt, dict):
        if any(isinstance(k, str) and k.startswith("$") for k in flt):
            return all(_operator(value, op, arg) for op, arg in flt.items())
        return isinstance(value, dict) and all(matches(value.get(k), v) for k, v in flt.items())
    if isinstance(flt, list | tuple):
        return (
            isinstance(value, list | tuple)
            and len(value) == len(flt)
            and all(matches(a, b) for a, b in zip(value, flt, strict=True))
        )
    return bool(value == flt)


def _operator(value: Any, op: str, arg: Any) -> bool:
    if op == "$eq":
        return bool(value == arg)
    if op == "$ne":
        return bool(value != arg)
    if op not in _OPS:
        raise InvalidArgumentError(f"unsupported filter operator {op!r}; use one of {sorted(_OPS)}")
    try:
        a, b = float(value), float(arg)
    except (TypeError, ValueError):
        return False
    return {"$gt": a > b, "$gte": a >= b, "$lt": a < b, "$lte": a <= b}[op]


def number(x: Any) -> bool:
    """Whether ``x`` is an int or a float (not a bool)."""
    return isinstance(x, int | float) and not isinstance(x, bool)


def pushdown(flt: Mapping[str, Any], path: str) -> list[dict[str, Any]]:
    """memlane conditions that every item ``flt`` matches also matches (a superset).

    Items are checked against ``flt`` itself afterwards, so what memlane's grammar
    reads differently (lists, None, ``$ne`` on lists, booleans) is left out here.
    """
    conds: list[dict[str, Any]] = []
    for key, arg in flt.items():
        if not isinstance(key, str) or "." in key or key.startswith("$") or not key:
            continue
        field = f"{path}.{key}"
        if isinstance(arg, str) or number(arg):
            conds.append({field: arg})
        elif isinstance(arg, dict) and any(isinstance(k, str) and k.startswith("$") for k in arg):
            for op, x in arg.items():
                if op == "$eq" and (isinstance(x, str) or number(x)):
                    conds.append({field: x})
                elif op in ("$gt", "$gte", "$lt", "$lte") and number(x):
                    conds.append({field: {op: x}})
        elif isinstance(arg, dict):
            conds.extend(pushdown(arg, field))
    return conds


def namespace_matches(cond: MatchCondition, ns: tuple[str, ...]) -> bool:
    path = tuple(cond.path)
    if len(ns) < len(path):
        return False
    part = ns[: len(path)] if cond.match_type == "prefix" else ns[len(ns) - len(path) :]
    if cond.match_type not in ("prefix", "suffix"):
        raise InvalidArgumentError(f"unsupported match type {cond.match_type!r}")
    return all(p == "*" or p == n for p, n in zip(path, part, strict=True))
