"""JSON read from outside the process, its depth bounded before it is parsed.

``json.loads`` recurses once a level. At the interpreter's default recursion limit a
text nested past it raises ``RecursionError``, which each reader turns into an error of
its own; but in a process whose limit was raised (a library or a test framework may
raise it) the same text parses, the answer changes, and some tens of thousands of
levels overflow the C stack and kill the process. ``loads`` refuses a text whose
brackets nest past ``MAX_DEPTH`` before parsing, with the same ``RecursionError``, so
every reader answers alike whatever the limit.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["MAX_DEPTH", "loads", "too_deep"]

#: Levels of arrays and objects a text may nest: far past any record, filter or
#: message memlane reads (metadata holds 16, a filter 32), far below the C stack's.
MAX_DEPTH = 500

# A JSON string (skipped: brackets inside it are text; written unrolled, so that a long
# run of plain characters is one step of the matcher), or a bracket.
_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{}]', re.DOTALL)


def too_deep(text: str, limit: int = MAX_DEPTH) -> bool:
    """Whether ``text``'s brackets, outside JSON strings, nest past ``limit``."""
    # No text nests deeper than it has opening brackets, in strings or not.
    if text.count("[") + text.count("{") <= limit:
        return False
    depth = 0
    for m in _TOKEN.finditer(text):
        c = text[m.start()]
        if c == "[" or c == "{":
            depth += 1
            if depth > limit:
                return True
        elif c == "]" or c == "}":
            depth -= 1
    return False


def loads(text: str | bytes | bytearray, **kwargs: Any) -> Any:
    """``json.loads(text, **kwargs)``, raising ``RecursionError`` without parsing for a
    text nested past ``MAX_DEPTH``. Bytes are decoded as ``json.loads`` decodes them
    (UTF-8, UTF-16 or UTF-32, told from the first bytes), so the depth counted is the
    depth parsed."""
    if isinstance(text, bytes | bytearray):
        text = text.decode(json.detect_encoding(text), "surrogatepass")
    if too_deep(text):
        raise RecursionError(f"JSON nested deeper than {MAX_DEPTH} levels")
    return json.loads(text, **kwargs)
