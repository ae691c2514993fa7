"""JSON read from outside is refused past 500 levels before it is parsed
(``memlane.json_depth``), so every reader answers the same whatever the interpreter's
recursion limit: raised, a deep text parsed, answered otherwise, and deep enough it
overflowed the C stack."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from memlane import Memory, MemoryTools, json_depth
from memlane.agent.mcp_stdio import check_line
from memlane.errors import CorruptFileError, InvalidArgumentError
from memlane.knowledge.loaders import DocumentLoadError, load_json, load_jsonl
from memlane.server.calls import json_object

DEEP = "[" * 3000 + "]" * 3000


@pytest.fixture
def raised_limit() -> Iterator[None]:
    """A recursion limit a library may set: ``json.loads`` parses 3,000 levels under it."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(20_000)
    try:
        yield
    finally:
        sys.setrecursionlimit(limit)


@pytest.mark.parametrize(
    ("text", "deep"),
    [
        ("[" * 500 + "]" * 500, False),
        ("[" * 501 + "]" * 501, True),
        ('{"a": ' * 501 + "1" + "}" * 501, True),
        # Brackets inside strings are text, escaped quotes included.
        ('["' + "[" * 3000 + '"]', False),
        ('["\\"' + "[" * 3000 + '"]', False),
        ('["\\\\"' + "[" * 600, True),
        # Many brackets, none deep.
        ("[" + "[], " * 5000 + "[]]", False),
        # Closing brackets inside a string do not lower the depth outside it.
        ('["' + "]" * 3000 + '", ' + "[" * 600 + "]" * 600 + "]", True),
        ("\ud800" + "[" * 501, True),  # a lone surrogate is no obstacle
        ('"' + "[" * 3000, False),  # an unterminated string: not JSON, not deep
    ],
)
def test_depth_is_counted_outside_strings(text: str, deep: bool) -> None:
    assert json_depth.too_deep(text) is deep


def test_a_text_past_a_million_bytes_is_counted_whole() -> None:
    text = "[" + " " * (1 << 21) + "[" * 600 + "]" * 601
    assert json_depth.too_deep(text)
    assert not json_depth.too_deep("[" + " " * (1 << 21) + "[" * 400 + "]" * 401)


def test_loads_refuses_before_parsing(raised_limit: None) -> None:
    with pytest.raises(RecursionError, match="deeper than 500"):
        json_depth.loads(DEEP)
    assert json_depth.loads("[" * 500 + "]" * 500) is not None
    # Bytes are counted as json.loads decodes them: UTF-16 and UTF-32 too, whose bytes
    # of a character such as U+2200 hold a quote's.
    for encoding in ("utf-8", "utf-16", "utf-32"):
        deep = '["\u2200\u2200", "\u2200", ' + DEEP + "]"
        with pytest.raises(RecursionError):
            json_depth.loads(deep.encode(encoding))
        shallow = '{"text": "a 5\\" screen", "b": "' + "[" * 600 + '"}'
        assert json_depth.loads(shallow.encode(encoding))["b"] == "[" * 600


def test_every_reader_refuses_deep_json_whatever_the_limit(
    raised_limit: None, tmp_path: Path
) -> None:
    with pytest.raises(InvalidArgumentError, match="nested too deep"):
        json_object(DEEP.encode())
    message, reply = check_line(DEEP.encode() + b"\n")
    assert message is None and reply is not None and "Parse error" in reply["error"]["message"]
    with pytest.raises(DocumentLoadError, match="nested too deeply"):
        load_json(DEEP.encode(), tmp_path / "x.json")
    with pytest.raises(DocumentLoadError, match="nested too deeply"):
        load_jsonl(DEEP.encode(), tmp_path / "x.jsonl")
    tools = MemoryTools(Memory(None))
    answer = tools.handle_tool_call(sorted(tools.names)[0], DEEP)
    assert answer["error"]["message"] == "arguments are nested too deeply"
    with pytest.raises(DocumentLoadError, match="a number cannot be read"):
        load_json(b"[" + b"1" * 5000 + b"]", tmp_path / "x.json")
    path = tmp_path / "deep.jsonl"
    path.write_text('{"text": "a", "metadata": {"k": ' + DEEP + "}}\n")
    with Memory(tmp_path / "store") as mem:
        with pytest.raises(CorruptFileError, match="nested too deeply"):
            mem.import_jsonl(path)
        assert mem.count() == 0
