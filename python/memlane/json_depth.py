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

import numpy as np

__all__ = ["MAX_DEPTH", "loads", "too_deep"]

#: Levels of arrays and objects a text may nest: far past any record, filter or
#: message memlane reads (metadata holds 16, a filter 32), far below the C stack's.
MAX_DEPTH = 500

# A JSON string (to skip: brackets inside it are text) or a bracket.
_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"?|[\[\]{}]', re.DOTALL)
_CHUNK = 1 << 20
_OPEN = (ord("["), ord("{"))
_CLOSE = (ord("]"), ord("}"))


def too_deep(text: str | bytes, limit: int = MAX_DEPTH) -> bool:
    """Whether ``text``'s brackets, outside JSON strings, nest past ``limit``."""
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else bytes(text)
    if data.count(b"[") + data.count(b"{") <= limit:
        return False
    # Counting the brackets inside strings too can only overstate the depth: a text
    # within the limit so is within it.
    depth = peak = 0
    for start in range(0, len(data), _CHUNK):
        b = np.frombuffer(data, np.uint8, min(_CHUNK, len(data) - start), start)
        step = np.isin(b, _OPEN).astype(np.int32) - np.isin(b, _CLOSE).astype(np.int32)
        running = np.cumsum(step, dtype=np.int64) + depth
        if len(running):
            peak = max(peak, int(running.max()))
            depth = int(running[-1])
    if peak <= limit:
        return False
    depth = 0
    for m in _TOKEN.finditer(data):
        c = data[m.start()]
        if c in _OPEN:
            depth += 1
            if depth > limit:
                return True
        elif c in _CLOSE:
            depth -= 1
    return False


def loads(text: str | bytes, **kwargs: Any) -> Any:
    """``json.loads(text, **kwargs)``, raising ``RecursionError`` without parsing for a
    text nested past ``MAX_DEPTH``."""
    if too_deep(text):
        raise RecursionError(f"JSON nested deeper than {MAX_DEPTH} levels")
    return json.loads(text, **kwargs)
