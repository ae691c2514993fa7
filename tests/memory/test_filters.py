"""Filters: the engine against a Python reference on random metadata and filters, every
record field and operator through Memory on both backends, errors for bad filters (from
the engine, which validates the dict once), and postings that keep a 1%-selective
filter at ~1% of a scan."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import StoreFactory
from memlane import InvalidArgumentError, Memory
from memlane._core import Admits, Engine
from memlane.schema import Row

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
    rows = [
        Row(
            i + 1,
            f"r{i}",
            "x",
            "t",
            "semantic",
            *[None] * 7,  # the scope fields and the speaker
            0.5,
            0,
            0,
            json.dumps(m),
            0.0,
            0.0,
            0.0,
            0,
            None,
            None,
            0.0,
            "",
            None,
            0,
            0,
        )
        for i, m in enumerate(metas)
    ]
    e.apply(e.prepare(rows, True))
    return e


@settings(max_examples=300, deadline=None)
@given(metas=st.lists(metadata, min_size=1, max_size=12), flt=filters)
def test_engine_matches_the_reference(metas: list[dict[str, Any]], flt: dict[str, Any]) -> None:
    e = _engine_with(metas)
    got = sorted(int(i) for i in e.ids_where(Admits(flt)))
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


def _three(mem: Memory) -> list[str]:
    """Three records with distinct record fields; returns their ids."""
    a = mem.add("alpha note", agent_id="a", user_id="u1", importance=0.9, type="semantic")
    b = mem.add(
        "beta note",
        agent_id="b",
        importance=0.2,
        evergreen=True,
        type="procedural",
        metadata={"shared": True},
    )
    c = mem.add(
        "gamma note",
        table="facts",
        room_id="r",
        world_id="w",
        session_id="s",
        namespace="n",
        importance=0.5,
        type="episodic",
        metadata={"importance": "high", "user": {"plan": "pro"}},
    )
    return [a.id, b.id, c.id]


def _texts(mem: Memory, flt: dict[str, Any]) -> list[str]:
    recs = mem.list(table=["memories", "facts"], filters=flt, limit=100)
    return sorted(r.text.split()[0] for r in recs)


def test_record_fields(make_store: StoreFactory) -> None:
    with make_store("fields", embedder=None) as mem:
        a, b, c = _three(mem)
        assert _texts(mem, {"id": a}) == ["alpha"]
        assert _texts(mem, {"id": {"$in": [b, c, "missing"]}}) == ["beta", "gamma"]
        assert _texts(mem, {"id": {"$nin": [a, b]}}) == ["gamma"]
        assert _texts(mem, {"id": {"$ne": a}}) == ["beta", "gamma"]
        assert _texts(mem, {"table": "facts"}) == ["gamma"]
        assert _texts(mem, {"table": {"$nin": ["facts"]}}) == ["alpha", "beta"]
        assert _texts(mem, {"type": "episodic"}) == ["gamma"]
        assert _texts(mem, {"type": {"$in": ["semantic", "x"]}}) == ["alpha"]
        assert _texts(mem, {"agent_id": "a"}) == ["alpha"]
        assert _texts(mem, {"agent_id": None}) == ["gamma"]
        assert _texts(mem, {"agent_id": {"$exists": True}}) == ["alpha", "beta"]
        assert _texts(mem, {"user_id": "u1"}) == ["alpha"]
        for field, value in [("room_id", "r"), ("world_id", "w"), ("session_id", "s")]:
            assert _texts(mem, {field: value}) == ["gamma"]
        assert _texts(mem, {"namespace": {"$ne": "n"}}) == ["alpha", "beta"]
        assert _texts(mem, {"importance": {"$gte": 0.8}}) == ["alpha"]
        assert _texts(mem, {"importance": {"$gt": 0.2, "$lte": 0.5}}) == ["gamma"]
        assert _texts(mem, {"importance": {"$lt": 0.5}}) == ["beta"]
        assert _texts(mem, {"importance": {"$not": {"$gte": 0.5}}}) == ["beta"]
        assert _texts(mem, {"evergreen": True}) == ["beta"]
        # A metadata key named like a record field is reached with metadata.<key>.
        assert _texts(mem, {"metadata.importance": "high"}) == ["gamma"]
        assert _texts(mem, {"user.plan": "pro"}) == ["gamma"]
        created = {r.text.split()[0]: r.created_at for r in mem.list(table=["memories", "facts"])}
        assert _texts(mem, {"created_at": {"$gte": created["beta"]}}) == ["beta", "gamma"]
        assert _texts(mem, {"created_at": created["alpha"]}) == ["alpha"]
        assert _texts(mem, {"updated_at": {"$lt": created["beta"]}}) == ["alpha"]
        assert _texts(mem, {"last_accessed_at": {"$gte": 0}}) == ["alpha", "beta", "gamma"]
        assert _texts(mem, {"access_count": 0}) == ["alpha", "beta", "gamma"]
        hits = mem.search("alpha", k=1, mode="text", agent_id="a", track_access=True)
        assert [h.record.id for h in hits] == [a]
        assert _texts(mem, {"access_count": {"$gte": 1}}) == ["alpha"]
        assert mem.count(filters={"access_count": {"$gt": 0}}) == 1
        after = mem.get(a).last_accessed_at
        assert _texts(mem, {"last_accessed_at": {"$gte": after}}) == ["alpha"]
        # The same filters reach search, count and delete_all.
        flt = {"id": {"$nin": [a]}, "importance": {"$lt": 0.6}}
        assert {h.record.id for h in mem.search("note", k=5, mode="text", filters=flt)} == {b, c}
        assert mem.delete_all(filters={"id": {"$in": [b]}}) == 1
        assert _texts(mem, {}) == ["alpha", "gamma"]


def test_mine_or_shared(make_store: StoreFactory) -> None:
    with make_store("mine", embedder=None) as mem:
        mem.add("mine", agent_id="a")
        mem.add("theirs", agent_id="b")
        mem.add("shared", agent_id="b", metadata={"shared": True})
        mem.add("nobody's", metadata={"shared": False})
        flt = {"$or": [{"agent_id": "a"}, {"shared": True}]}
        assert sorted(r.text for r in mem.list(filters=flt)) == ["mine", "shared"]
        hits = mem.search("mine theirs shared nobody", mode="text", filters=flt)
        assert sorted(h.record.text for h in hits) == ["mine", "shared"]
        assert mem.count(filters=flt) == 2


def test_access_counts_survive_a_reopen(tmp_path: Any) -> None:
    with Memory(tmp_path / "s", embedder=None) as mem:
        rec = mem.add("remember me")
        mem.add("other words")
        for _ in range(3):
            mem.search("remember", k=1, mode="text", track_access=True)
        assert mem.count(filters={"access_count": 3}) == 1
        # An update keeps the count (it flushes the pending accesses).
        mem.update(rec.id, metadata={"k": 1})
        assert mem.count(filters={"access_count": 3, "k": 1}) == 1
    with Memory(tmp_path / "s", embedder=None) as mem:
        assert [r.id for r in mem.list(filters={"access_count": {"$gte": 3}})] == [rec.id]
        assert mem.count(filters={"id": rec.id}) == 1


@pytest.mark.parametrize(
    ("flt", "needle"),
    [
        ({"a": {"$regex": "x"}}, 'unknown operator "$regex" on "a"'),
        ({"a": {"$regex": "x"}}, "$eq, $ne, $in, $nin, $gt, $gte, $lt, $lte, $exists, $not"),
        ({"$nor": [{"a": 1}]}, "$nor"),
        ({"$and": []}, "non-empty"),
        ({"a": {"$in": 3}}, "list"),
        ({"a": {"$gt": True}}, "number or a string"),
        ({"a": {"$exists": 1}}, "true or false"),
        ({"a": [1, 2]}, "$in"),
        ({"a": {"b": 1}}, "dotted"),
        ({"a": math.nan}, "finite"),
        ({"a": {"$in": [math.inf]}}, "finite"),
        ({"a": object()}, "got object"),
        ({"a": b"x"}, "got bytes"),
        ([("a", 1)], "must be an object"),
        ({1: 2}, "keys must be str"),
        ({"text": "x"}, 'unknown field "text"'),
        ({"embedding": {"$exists": True}}, "access_count"),
        ({"metadata": {"$exists": True}}, "unknown field"),
        ({"speaker": "Caroline"}, 'unknown field "speaker"'),
        ({"": 1}, "unknown field"),
        ({"importance": "high"}, '"importance" takes a number, got a string'),
        ({"importance": True}, "takes a number, got a boolean"),
        ({"access_count": {"$gte": "1"}}, "takes a number"),
        ({"id": {"$nin": [1]}}, '"id" takes a string'),
        ({"agent_id": 3}, "a string (or null"),
        ({"evergreen": 1}, "true or false"),
        ({"created_at": {"$lt": None}}, "number or a string"),
    ],
)
def test_bad_filters_are_named(flt: Any, needle: str) -> None:
    with Memory(None, embedder=None) as mem:
        mem.add("x")
        for call in (
            lambda: mem.list(filters=flt),
            lambda: mem.count(filters=flt),
            lambda: mem.search("x", filters=flt),
        ):
            with pytest.raises(InvalidArgumentError, match="invalid filter") as e:
                call()
            assert needle in str(e.value)


def test_bad_filters_raise_on_both_backends(make_store: StoreFactory) -> None:
    with make_store("bad", embedder=None) as mem:
        mem.add("x", metadata={"n": 1})
        for flt in ({"n": {"$foo": 1}}, {"text": "x"}, {"importance": "high"}):
            with pytest.raises(InvalidArgumentError, match="invalid filter"):
                mem.list(filters=flt)
            with pytest.raises(InvalidArgumentError, match="invalid filter"):
                mem.delete_all(filters=flt)
        assert mem.count() == 1


def test_nesting_is_bounded() -> None:
    e = _engine_with([{"a": 1}])
    flt: dict[str, Any] = {"a": 1}
    for _ in range(40):
        flt = {"$not": flt}
    with pytest.raises(InvalidArgumentError, match="levels deep"):
        e.count(Admits(flt))
    loop: dict[str, Any] = {}
    loop["$and"] = [loop]
    with pytest.raises(InvalidArgumentError, match="deep"):
        e.count(Admits(loop))
    deep: Any = 1
    for _ in range(200):
        deep = [deep]
    # The parse reads no deeper than the grammar goes: the first nested list is refused.
    with pytest.raises(InvalidArgumentError, match=r"\$in takes .* got a list"):
        e.count(Admits({"a": {"$in": deep}}))


def test_a_filter_changed_while_it_is_read_is_read_as_it_was() -> None:
    # A list subclass's __iter__ runs while the filter is read and empties the dict around
    # it: the dict is read from a copy of its items (reading it in place panicked).
    e = _engine_with([{"a": 1, "b": 1}, {"a": 2}])
    outer: dict[str, Any] = {}

    class Emptying(list[int]):
        def __iter__(self) -> Any:
            outer.clear()
            outer.update({f"k{i}": i for i in range(20)})
            return iter([1, 2])

    outer.update({"a": {"$in": Emptying()}, "b": 1})
    assert e.count(Admits(outer)) == 1


def test_an_int_subclass_is_read_as_its_value() -> None:
    # Its own __float__ is never asked (it may raise, or say another number).
    class Odd(int):
        def __float__(self) -> float:
            raise RuntimeError("not asked")

    class Other(int):
        def __float__(self) -> float:
            return 2.0

    e = _engine_with([{"a": 1}, {"a": 2}, {"a": 2**70}])
    assert e.count(Admits({"a": Odd(1)})) == 1
    assert e.count(Admits({"a": {"$in": [Other(1), Other(2**70)]}})) == 2
    with pytest.raises(InvalidArgumentError, match="an integer too large for a float"):
        Admits({"a": 10**400})


def test_a_key_that_is_no_operator_is_named_wherever_it_stands() -> None:
    unknown = r'unknown operator "b" on "a"'
    for flt in ({"a": {"$eq": 1, "b": 2}}, {"a": {"b": 2, "$eq": 1}}):
        with pytest.raises(InvalidArgumentError, match=unknown):
            Admits(flt)
    with pytest.raises(InvalidArgumentError, match="must hold operators"):
        Admits({"a": {"b": 2}})


def test_a_mapping_that_gives_no_pairs_is_refused_by_name() -> None:
    class Items(Mapping[str, Any]):
        def __init__(self, items: Any) -> None:
            self._items = items

        def __getitem__(self, key: str) -> Any:
            raise KeyError(key)

        def __len__(self) -> int:
            return 1

        def __iter__(self) -> Iterator[str]:
            return iter(["a"])

        def items(self) -> Any:
            return self._items

    for items in ([["a", 1]], ["ab"], [("a", 1, 2)], [1]):
        with pytest.raises(InvalidArgumentError, match=r"must give \(key, value\) pairs"):
            Admits(Items(items))
    with pytest.raises(InvalidArgumentError, match="Items cannot be read"):
        Admits(Items(5))
    assert _engine_with([{"a": 1}]).count(Admits(Items([("a", 1)]))) == 1


def test_python_values_convert_without_surprises() -> None:
    e = _engine_with([{"n": 1, "b": True, "s": "x", "big": 2**70}, {"n": 1.5, "b": 1}])
    assert e.count(Admits({"b": True})) == 1  # booleans are not numbers
    assert e.count(Admits({"b": 1})) == 1
    assert e.count(Admits({"n": {"$in": (1, 1.5)}})) == 2  # tuples and sets are lists
    assert e.count(Admits({"n": {"$in": {1}}})) == 1
    assert e.count(Admits({"n": np.float64(1.5)})) == 1
    assert e.count(Admits({"big": 2**70})) == 1
    assert e.count(Admits({"s": {"$gte": "x"}})) == 1


def test_one_percent_of_100k_examines_one_percent() -> None:
    n = 100_000
    metas = [{"agent": f"a{i % 100}", "n": i % 7} for i in range(n)]
    e = _engine_with(metas)
    matched, examined = e.filter_stats({"agent": "a42", "n": {"$gte": 0}})
    assert matched == 1000 and examined == 1000
    assert e.filter_stats({"$or": [{"agent": "a1"}, {"agent": {"$in": ["a2"]}}]}) == (2000, 2000)
    # A lone range has no postings: it scans, as it must.
    assert e.filter_stats({"n": {"$gt": 5}})[1] == n


def test_a_dotted_metadata_key_and_a_nested_path_stay_apart(make_store: StoreFactory) -> None:
    with make_store("dots", None) as mem:
        mem.add("literal", metadata={"user.plan": "pro"})
        mem.add("nested", metadata={"user": {"plan": "pro"}})
        assert [r.text for r in mem.list(filters={"user.plan": "pro"})] == ["nested"]
        assert [r.text for r in mem.list(filters={"user\\.plan": "pro"})] == ["literal"]


def test_a_key_ending_in_a_dot_is_filtered_on_escaped(make_store: StoreFactory) -> None:
    with make_store("trailing-dots", None) as mem:
        mem.add("notes", metadata={"v1.": "stable", ".": 1, "misc": {"etc.": 2}})
        mem.add("other", metadata={"v1": "stable", "misc": {"etc": 2}})
        for name, value in [("v1\\.", "stable"), ("\\.", 1), ("misc.etc\\.", 2)]:
            assert [r.text for r in mem.list(filters={name: value})] == ["notes"], name
        with pytest.raises(InvalidArgumentError, match="empty part"):
            mem.list(filters={"v1.": "stable"})
