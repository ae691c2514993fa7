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
keys = st.one_of(
    st.text(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.none(),
)
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
    stored, _ = coerce.metadata({"a": (Level.LOW, Tag("x"), Ratio(1.5)), "b": {1: True}})
    assert stored == {"a": [1, "x", 1.5], "b": {"1": True}}
    assert [type(v) for v in stored["a"]] == [int, str, float]


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
