"""Metadata filters: the engine against a Python reference on random data and filters,
errors for bad filters, and postings that keep a 1%-selective filter at ~1% of a scan."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memlane import InvalidArgumentError, Memory
from memlane._core import Engine
from memlane.filters import metadata_filter

KEYS = ["source", "n", "tags", "flag", "user.plan"]

# -- the reference -----------------------------------------------------------------


def _values(meta: dict[str, Any], key: str) -> list[Any] | None:
    """The values of a dotted key (a list gives its scalars), or None if absent."""
    node: Any = meta
    parts = key.split(".")
    for i, part in enumerate(parts):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
        if isinstance(node, dict) and i == len(parts) - 1:
            return None
    if isinstance(node, list):
        scalars = [v for v in node if not isinstance(v, dict | list)]
        return scalars or None
    return [node]


def _kind(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int | float):
        return "num"
    return "str"


def _eq(a: Any, b: Any) -> bool:
    return _kind(a) == _kind(b) and a == b


def _cmp(a: Any, op: str, b: Any) -> bool:
    if _kind(a) != _kind(b) or _kind(a) not in ("num", "str"):
        return False
    return {"$gt": a > b, "$gte": a >= b, "$lt": a < b, "$lte": a <= b}[op]


def _field(vals: list[Any] | None, ops: Any) -> bool:
    if not isinstance(ops, dict):
        return vals is not None and any(_eq(v, ops) for v in vals)
    ok = True
    for op, arg in ops.items():
        if op == "$eq":
            r = vals is not None and any(_eq(v, arg) for v in vals)
        elif op == "$ne":
            r = not (vals is not None and any(_eq(v, arg) for v in vals))
        elif op == "$in":
            r = vals is not None and any(_eq(v, a) for v in vals for a in arg)
        elif op == "$nin":
            r = not (vals is not None and any(_eq(v, a) for v in vals for a in arg))
        elif op == "$exists":
            r = (vals is not None) == arg
        elif op == "$not":
            r = not _field(vals, arg)
        else:
            r = vals is not None and any(_cmp(v, op, arg) for v in vals)
        ok = ok and r
    return ok


def reference(flt: dict[str, Any], meta: dict[str, Any]) -> bool:
    for key, value in flt.items():
        if key == "$and":
            ok = all(reference(f, meta) for f in value)
        elif key == "$or":
            ok = any(reference(f, meta) for f in value)
        elif key == "$not":
            ok = not reference(value, meta)
        else:
            ok = _field(_values(meta, key), value)
        if not ok:
            return False
    return True


# -- strategies ------------------------------------------------------------------------

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.sampled_from([0.5, -1.5, 2.0]),
    st.sampled_from(["a", "b", "tg", "B", "é"]),
)
metadata = st.fixed_dictionaries(
    {},
    optional={
        "source": scalars,
        "n": scalars,
        "tags": st.lists(scalars, max_size=3),
        "flag": st.booleans(),
        "user": st.fixed_dictionaries({}, optional={"plan": scalars}),
    },
)
comparable = st.one_of(st.integers(-3, 3), st.sampled_from([0.5, "a", "b", "tg"]))
ops = st.one_of(
    scalars,
    st.fixed_dictionaries(
        {},
        optional={
            "$eq": scalars,
            "$ne": scalars,
            "$in": st.lists(scalars, max_size=3),
            "$nin": st.lists(scalars, max_size=3),
            "$gt": comparable,
            "$gte": comparable,
            "$lt": comparable,
            "$lte": comparable,
            "$exists": st.booleans(),
        },
    ).filter(bool),
)
leaf = st.builds(lambda k, o: {k: o}, st.sampled_from(KEYS), ops) | st.builds(
    lambda k, o: {k: {"$not": o}},
    st.sampled_from(KEYS),
    st.fixed_dictionaries({"$in": st.lists(scalars, max_size=2)}),
)
filters = st.recursive(
    leaf,
    lambda children: st.one_of(
        st.builds(lambda c: {"$and": c}, st.lists(children, min_size=1, max_size=3)),
        st.builds(lambda c: {"$or": c}, st.lists(children, min_size=1, max_size=3)),
        st.builds(lambda c: {"$not": c}, children),
    ),
    max_leaves=6,
)


def _engine_with(metas: list[dict[str, Any]]) -> Engine:
    e = Engine(None)
    n = len(metas)
    e.apply(
        e.prepare(
            np.arange(1, n + 1, dtype=np.uint64),
            ["x"] * n,
            None,
            tables=["t"] * n,
            types=["semantic"] * n,
            scopes=[[None] * n for _ in range(6)],
            importance=[0.5] * n,
            evergreen=[False] * n,
            created_at=[0.0] * n,
            updated_at=[0.0] * n,
            last_accessed_at=[0.0] * n,
            metadata=[json.dumps(m) for m in metas],
        )
    )
    return e


@settings(max_examples=300, deadline=None)
@given(metas=st.lists(metadata, min_size=1, max_size=12), flt=filters)
def test_engine_matches_the_reference(metas: list[dict[str, Any]], flt: dict[str, Any]) -> None:
    e = _engine_with(metas)
    got = sorted(int(i) for i in e.ids_where(json.dumps(metadata_filter(flt))))
    want = [i + 1 for i, m in enumerate(metas) if reference(flt, m)]
    assert got == want, (flt, metas)


def test_memory_applies_filters(tmp_path: Any) -> None:
    metas = [{"source": "tg", "n": i, "tags": ["x", f"t{i % 3}"]} for i in range(30)]
    with Memory(tmp_path / "f", embedder=None) as mem:
        mem.add_many([{"text": f"note {i}", "metadata": m} for i, m in enumerate(metas)])
        flt = {"$or": [{"n": {"$gte": 25}}, {"tags": "t0", "n": {"$lt": 6}}]}
        want = {f"note {i}" for i, m in enumerate(metas) if reference(flt, m)}
        assert {r.text for r in mem.list(filters=flt, limit=100)} == want
        assert mem.count(filters=flt) == len(want)
        assert {h.record.text for h in mem.search("note", k=30, filters=flt)} == want
        assert mem.delete_all(filters={"n": {"$lt": 10}}) == 10
        assert mem.count() == 20


@pytest.mark.parametrize(
    ("flt", "needle"),
    [
        ({"a": {"$regex": "x"}}, "$regex"),
        ({"$nor": [{"a": 1}]}, "$nor"),
        ({"$and": []}, "non-empty"),
        ({"a": {"$in": 3}}, "list"),
        ({"a": {"$gt": True}}, "number or a str"),
        ({"a": {"$exists": 1}}, "True or False"),
        ({"a": [1, 2]}, "$in"),
        ({"a": {"b": 1}}, "dotted"),
        ({"a": math.nan}, "finite"),
        ({"a": object()}, "str, number"),
        ([("a", 1)], "dict"),
        ({1: 2}, "str"),
    ],
)
def test_bad_filters_are_named(flt: Any, needle: str) -> None:
    with pytest.raises(InvalidArgumentError, match="invalid filter") as e:
        metadata_filter(flt)
    assert needle in str(e.value)


def test_one_percent_of_100k_examines_one_percent() -> None:
    n = 100_000
    metas = [{"agent": f"a{i % 100}", "n": i % 7} for i in range(n)]
    e = _engine_with(metas)
    flt = json.dumps(metadata_filter({"agent": "a42", "n": {"$gte": 0}}))
    matched, examined = e.filter_stats(flt)
    assert matched == 1000 and examined == 1000
    flt = json.dumps(metadata_filter({"$or": [{"agent": "a1"}, {"agent": {"$in": ["a2"]}}]}))
    assert e.filter_stats(flt) == (2000, 2000)
    # A lone range has no postings: it scans, as it must.
    assert e.filter_stats(json.dumps(metadata_filter({"n": {"$gt": 5}})))[1] == n
