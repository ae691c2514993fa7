"""Robust JSON extraction from model output: code fences, leading and trailing prose."""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["ParseError", "extract_json"]

_FENCE = re.compile(r"```[ \t]*(?:json[c5]?|JSON)?[ \t]*\n?(.*?)```", re.DOTALL)


class ParseError(ValueError):
    """No JSON value of the expected kind in a model's output."""


def _candidates(text: str) -> list[str]:
    out = [m.group(1) for m in _FENCE.finditer(text)]
    out.append(text)
    return out


def extract_json(text: str, kind: type = dict) -> Any:
    """The first JSON object (``kind=dict``) or array (``kind=list``) in ``text``.

    Looks inside code fences first, then anywhere: each ``{`` (or ``[``) is
    tried as the start of a value and the text after that value is ignored,
    so a reply like ``Sure! {"a": 1} Hope that helps.`` parses. Raises
    :class:`ParseError` when none is found.
    """
    if not isinstance(text, str):
        raise ParseError(f"expected text, got {type(text).__name__}")
    opener = "{" if kind is dict else "["
    decoder = json.JSONDecoder()
    for chunk in _candidates(text):
        start = chunk.find(opener)
        while start != -1:
            try:
                value, _ = decoder.raw_decode(chunk, start)
            except ValueError:
                pass
            else:
                if isinstance(value, kind):
                    return value
            start = chunk.find(opener, start + 1)
    what = "object" if kind is dict else "array"
    raise ParseError(f"no JSON {what} in the model's output: {text[:200]!r}")
