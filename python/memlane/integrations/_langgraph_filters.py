"""LangGraph's filters over memlane's (``memlane.integrations.langgraph``): an item's value
checked against a filter as LangGraph's stores check it, the memlane conditions a search
hands the engine first, and a namespace against a match condition.

Values compare as memlane's filters compare them (docs/search.md, "Filters"), so the
engine's pre-filter never drops an item the check admits: a bool is never a number
(``InMemoryStore`` compares with Python's ``==``, where ``True == 1``), and the ranges
(``$gt`` ...) match numbers only (``InMemoryStore`` also converts numeric strings)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from langgraph.store.base import MatchCondition

from memlane.errors import InvalidArgumentError
from memlane.integrations._checks import filter_depth
from memlane.integrations._common import escape_key

__all__ = ["matches", "namespace_matches", "number", "prefixes", "pushdown", "under"]

_OPS = {"$eq", "$ne", "$gt", "$gte", "$lt", "$lte"}
_RANGES = ("$gt", "$gte", "$lt", "$lte")


def matches(value: Any, flt: Any, depth: int = 0) -> bool:
    """LangGraph's filter semantics (JSONB-like) on one value."""
    filter_depth(depth)
    if isinstance(flt, dict):
        # The filter's own keys are the value's (LangGraph's stores read "$id" there as
        # a key); below them, a dict with a "$" key holds operators.
        if depth > 0 and any(isinstance(k, str) and k.startswith("$") for k in flt):
            return all(_operator(value, op, arg) for op, arg in flt.items())
        return isinstance(value, dict) and all(
            matches(value.get(k), v, depth + 1) for k, v in flt.items()
        )
    if isinstance(flt, list | tuple):
        return (
            isinstance(value, list | tuple)
            and len(value) == len(flt)
            and all(matches(a, b, depth + 1) for a, b in zip(value, flt, strict=True))
        )
    return _equal(value, flt, depth)


def _equal(a: Any, b: Any, depth: int) -> bool:
    """Python's ``==``, but a bool equals only a bool, at any depth."""
    filter_depth(depth)
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k], depth + 1) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_equal(x, y, depth + 1) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _operator(value: Any, op: str, arg: Any) -> bool:
    if op == "$eq":
        return _equal(value, arg, 0)
    if op == "$ne":
        return not _equal(value, arg, 0)
    if op not in _OPS:
        raise InvalidArgumentError(f"unsupported filter operator {op!r}; use one of {sorted(_OPS)}")
    if not (number(value) and number(arg)):
        return False
    try:  # as floats, as the engine compares them
        a, b = float(value), float(arg)
    except OverflowError:  # an int past float's range
        a, b = value, arg
    return {"$gt": a > b, "$gte": a >= b, "$lt": a < b, "$lte": a <= b}[op]


def number(x: Any) -> bool:
    """Whether ``x`` is an int or a float (not a bool)."""
    return isinstance(x, int | float) and not isinstance(x, bool)


def _scalar(x: Any) -> bool:
    """Whether memlane's grammar reads an equality with ``x`` as ``matches`` does."""
    return isinstance(x, str | bool) or number(x)


def pushdown(flt: Mapping[str, Any], path: str, depth: int = 0) -> list[dict[str, Any]]:
    """memlane conditions that every item ``flt`` matches also matches (a superset).

    Items are checked against ``flt`` itself afterwards, so what memlane's grammar
    reads differently (lists, None, ``$ne`` on lists) is left out here.
    """
    filter_depth(depth)
    conds: list[dict[str, Any]] = []
    for key, arg in flt.items():
        if not isinstance(key, str) or key.startswith("$") or not key:
            continue
        field = f"{path}.{escape_key(key)}"
        if _scalar(arg):
            conds.append({field: arg})
        elif isinstance(arg, dict) and any(isinstance(k, str) and k.startswith("$") for k in arg):
            for op, x in arg.items():
                if op == "$eq" and _scalar(x):
                    conds.append({field: x})
                elif op in _RANGES and number(x):
                    conds.append({field: {op: x}})
        elif isinstance(arg, dict):
            conds.extend(pushdown(arg, field, depth + 1))
    return conds


def prefixes(namespace: Sequence[str]) -> list[str]:
    """A fixed-size digest of each prefix of ``namespace`` (the first label, the first
    two, ...): an item's namespace prefixes as a search's condition can name them, in
    space linear in the labels (the joined prefixes themselves grow as their square)."""
    h = hashlib.sha256()
    out = []
    for label in namespace:
        data = label.encode("utf-8", "surrogatepass")
        h.update(len(data).to_bytes(8, "little") + data)
        out.append(h.copy().hexdigest()[:32])
    return out


def under(prefix: Sequence[str]) -> dict[str, Any]:
    """memlane's condition for the first records of the items whose namespace starts with
    ``prefix``: by their prefixes' digests, or (records of earlier releases) by their
    prefixes joined with dots, which no label holds (LangGraph refuses one that does)."""
    return {
        "$or": [
            {"metadata.lg.pre": prefixes(prefix)[-1]},
            {"metadata.lg.path": ".".join(prefix)},
        ]
    }


def namespace_matches(cond: MatchCondition, ns: tuple[str, ...]) -> bool:
    path = tuple(cond.path)
    if len(ns) < len(path):
        return False
    part = ns[: len(path)] if cond.match_type == "prefix" else ns[len(ns) - len(path) :]
    if cond.match_type not in ("prefix", "suffix"):
        raise InvalidArgumentError(f"unsupported match type {cond.match_type!r}")
    return all(p == "*" or p == n for p, n in zip(path, part, strict=True))
