"""``coerce.metadata`` gives back what a later read returns without parsing the text it
wrote: checked against the JSON round trip it replaces."""

from __future__ import annotations

import enum
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memlane import coerce
from memlane.errors import InvalidArgumentError


class Level(enum.IntEnum):
    LOW = 1


class Tag(str):
    pass


class Ratio(float):
    pass


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(),
    st.sampled_from([Level.LOW, Tag("t"), Ratio(0.5)]),
)
keys = st.one_of(st.text(), st.sampled_from([Tag("k")]))
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=4).map(tuple),
        st.dictionaries(keys, inner, max_size=4),
    ),
    max_leaves=20,
)


def round_trip(value):
    text = json.dumps(value, allow_nan=False, separators=(",", ":"), ensure_ascii=False)
    return json.loads(text)


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.text(), values, max_size=5))
def test_as_read_equals_the_json_round_trip(value):
    expected = round_trip(value)
    stored, text = coerce.metadata(value)
    assert stored == expected
    assert json.dumps(stored, sort_keys=True) == json.dumps(expected, sort_keys=True)
    assert json.loads(text) == stored


def test_types_are_the_base_types():
    stored, _ = coerce.metadata({"a": (Level.LOW, Tag("x"), Ratio(1.5)), "b": {Tag("k"): True}})
    assert stored == {"a": [1, "x", 1.5], "b": {"k": True}}
    assert [type(v) for v in stored["a"]] == [int, str, float]
    assert [type(k) for k in stored["b"]] == [str]


@pytest.mark.parametrize(
    ("value", "where"),
    [
        ({"b": {1: True}}, "metadata['b'] has the key 1 (int)"),
        # JSON would merge these two into one key, losing a value.
        ({"m": {1: "a", "1": "b"}}, "metadata['m'] has the key 1 (int)"),
        ({"l": [{"ok": 1}, {None: 2}]}, "metadata['l'][1] has the key None (NoneType)"),
        ({"v": {"x": {True: 1}}}, "metadata['v']['x'] has the key True (bool)"),
        ({"f": {1.5: 1}}, "metadata['f'] has the key 1.5 (float)"),
    ],
)
def test_a_key_not_str_is_refused_at_any_depth_naming_where(value, where):
    with pytest.raises(InvalidArgumentError, match="must be str at every level") as e:
        coerce.metadata(value)
    assert str(e.value).startswith(where)


def test_depth_limit_unchanged():
    deep: dict = {}
    node = deep
    for _ in range(coerce.MAX_METADATA_DEPTH):
        node["k"] = {}
        node = node["k"]
    coerce.metadata(deep)  # 16 levels below the top: accepted
    node["k"] = {}
    with pytest.raises(InvalidArgumentError, match="nested more than 16"):
        coerce.metadata(deep)
    with pytest.raises(InvalidArgumentError, match="nested more than 16"):
        coerce.metadata({"l": [[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]})
