"""The tool schemas are JSON Schema, checked by jsonschema: what a model sees is enforced."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

import pytest
from jsonschema import Draft202012Validator

from memlane.agent.memory_tools import TOOL_SCHEMAS, ToolArgumentError, validate_arguments


@pytest.mark.parametrize("name", sorted(TOOL_SCHEMAS))
def test_every_tool_schema_is_valid_json_schema(name: str) -> None:
    Draft202012Validator.check_schema(TOOL_SCHEMAS[name][1])


def test_any_keyword_of_a_schema_is_enforced() -> None:
    # Keywords the tools do not use today are checked all the same.
    schema = {
        "type": "object",
        "properties": {
            "tag": {"type": "string", "maxLength": 3, "pattern": "^[a-z]+$"},
            "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
        },
        "additionalProperties": False,
    }
    assert validate_arguments(schema, {"tag": "abc", "tags": ["x"]}) == {
        "tag": "abc",
        "tags": ["x"],
    }
    for bad in ({"tag": "abcd"}, {"tag": "AB"}, {"tags": ["a", "b", "c"]}, {"tags": [1]}):
        with pytest.raises(ToolArgumentError, match="tag"):
            validate_arguments(schema, bad)


def test_nulls_are_not_given_and_integral_floats_are_integers() -> None:
    schema = TOOL_SCHEMAS["recall"][1]
    assert validate_arguments(schema, {"query": "q", "type": None, "limit": 3.0}) == {
        "query": "q",
        "limit": 3,
    }
    assert isinstance(validate_arguments(schema, {"query": "q", "limit": 3.0})["limit"], int)


def test_messages_are_short_whatever_the_value() -> None:
    schema = TOOL_SCHEMAS["remember"][1]
    with pytest.raises(ToolArgumentError) as e:
        validate_arguments(schema, {"content": ["x" * 100_000]})
    assert len(str(e.value)) < 200 and "'content' must be a string, got list" in str(e.value)
    with pytest.raises(ToolArgumentError) as e:
        validate_arguments(schema, {"content": "x", "type": "y" * 100_000})
    assert len(str(e.value)) < 300 and "'type' must be one of" in str(e.value)


@pytest.mark.parametrize(
    ("name", "key", "value"),
    [
        ("remember", "importance", complex(1, 2)),
        ("remember", "importance", Decimal("NaN")),
        ("remember", "importance", Decimal("sNaN")),
        ("recall", "limit", complex(1, 1)),
        ("recall", "limit", Decimal("NaN")),
        ("recall", "limit", Fraction(1, 3)),
    ],
)
def test_numbers_json_cannot_carry_are_refused_by_name(name: str, key: str, value: object) -> None:
    """A dict given in-process can hold numbers no JSON text can; the schema's bounds
    compared them and raised (TypeError; InvalidOperation for a Decimal NaN), which the
    dispatcher reported as an internal error."""
    schema = TOOL_SCHEMAS[name][1]
    args = {"content" if name == "remember" else "query": "x", key: value}
    with pytest.raises(ToolArgumentError, match=f"'{key}' must be a JSON number"):
        validate_arguments(schema, args)


def test_type_errors_read_as_english() -> None:
    with pytest.raises(ToolArgumentError, match="'limit' must be an integer, got str"):
        validate_arguments(TOOL_SCHEMAS["recall"][1], {"query": "q", "limit": "3"})
