"""The tool schemas are JSON Schema, checked by jsonschema: what a model sees is enforced."""

from __future__ import annotations

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
