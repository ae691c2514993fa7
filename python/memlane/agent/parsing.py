"""Robust JSON extraction from model output: code fences, leading and trailing prose.

A model's answer is untrusted text: it may be empty, huge, nested thousands of
levels deep, or not text at all. ``extract_json`` does work linear in its
length: one pass finds every span that can hold a JSON value (bracket matching
that follows strings and escapes, at most ``MAX_DEPTH`` levels deep), and
``json`` decodes only spans that open with the wanted bracket, skipping those
a failed decode already proved invalid. Every failure is a ``ParseError``.
"""

from __future__ import annotations

import json
import re
from collections import deque
from collections.abc import Iterator
from typing import Any

from memlane import coerce
from memlane.errors import InvalidArgumentError, MemlaneError, shown

__all__ = [
    "CHARS_PER_TOKEN",
    "MAX_ANSWER_CHARS",
    "MAX_DEPTH",
    "MAX_OPERATIONS",
    "ParseError",
    "answer_text",
    "extract_json",
]

#: The deepest nesting of arrays and objects ``extract_json`` accepts.
MAX_DEPTH = 64
#: Operations (a reflection's) or facts (a consolidation's) applied from one answer at most.
MAX_OPERATIONS = 100
#: Characters per token an answer may have: a token of text is about 4, a run of
#: whitespace (indentation) longer. An answer longer than its ``max_tokens`` times this
#: is not one the model was asked for (a server that ignored the budget, a proxy gone
#: wrong) and is refused whole: applied, it would flood the scope with its pieces and
#: hold the check of every later fact back behind them.
CHARS_PER_TOKEN = 16
#: The longest answer applied when the tokens it was asked in are not known: a
#: 4,000-token answer by ``CHARS_PER_TOKEN``, room for ``MAX_OPERATIONS`` short facts.
MAX_ANSWER_CHARS = 64_000

_FENCE = re.compile(r"```[ \t]*(?:json[c5]?|JSON)?[ \t]*\n?(.*?)```", re.DOTALL)
# The only characters that change the matcher's state; the text between them is skipped.
_MARK = re.compile(r'[\[\]{}"\\\x00-\x1f]')
_CLOSE = {"{": "}", "[": "]"}
# What each ``kind`` of ``extract_json`` opens with.
_OPENERS: dict[type, str] = {dict: "{", list: "[", object: "{["}
_DECODER = json.JSONDecoder()
# Lanes live at once (see _Lane); more only arise from quotes and backslashes
# placed to confuse the matcher, so the oldest is dropped to keep the pass linear.
_MAX_LANES = 4


class ParseError(MemlaneError, ValueError):
    """A model's answer that cannot be used: not text, or without the JSON value
    (or the fields) asked for.

    ``raw`` is the answer as the model returned it (whatever its type), so a
    caller can log it or ask again.
    """

    def __init__(self, message: str, raw: object = None) -> None:
        super().__init__(message)
        self.raw = raw


class _Lane:
    """Runs of the bracket matcher that agree on which characters are inside a string.

    A run starts at each ``{`` or ``[`` and ends when its bracket closes (a
    candidate span) or cannot close (a wrong closer, a raw control character in
    a string, the end of the text, or more than MAX_DEPTH levels). Runs that
    agree on strings share a stack. An opener that a lane sees inside one of
    its strings starts a new lane, since a value may well start there when the
    earlier quote was prose.
    """

    __slots__ = ("esc", "ident", "instr", "stack")

    def __init__(self, ident: int, start: int, closer: str) -> None:
        self.ident = ident
        self.instr = False
        self.esc = -2  # the position of a backslash that escapes the next character
        self.stack: deque[tuple[int, str]] = deque([(start, closer)], maxlen=MAX_DEPTH)


class _Scan:
    """One pass over ``text[lo:hi]``, yielding candidate spans in batches."""

    def __init__(self) -> None:
        self.too_deep = False
        self._lanes = 0

    def batches(self, text: str, lo: int, hi: int) -> Iterator[list[tuple[int, int, int]]]:
        """Lists of spans ``(start, end, lane)`` (``end`` inclusive), each list once
        no run that started before its spans is still open."""
        lanes: list[_Lane] = []
        spans: list[tuple[int, int, int]] = []
        for m in _MARK.finditer(text, lo, hi):
            i = m.start()
            c = text[i]
            taken = c not in _CLOSE
            died = False
            for lane in lanes:
                if lane.instr:
                    if lane.esc == i - 1:
                        lane.esc = -2
                        continue
                    lane.esc = -2
                    if c == '"':
                        lane.instr = False
                    elif c == "\\":
                        lane.esc = i
                    elif c < " ":  # json refuses raw control characters in strings
                        lane.stack.clear()
                        died = True
                elif c == '"':
                    lane.instr = True
                elif c in "]}":
                    start, closer = lane.stack.pop()
                    if c == closer:
                        spans.append((start, i, lane.ident))
                    else:  # every open run of the lane holds the wrong bracket
                        lane.stack.clear()
                    died = died or not lane.stack
                elif not taken and c in _CLOSE:
                    # One lane suffices: a run's fate depends on its own stack only.
                    if len(lane.stack) == MAX_DEPTH:
                        self.too_deep = True
                    lane.stack.append((i, _CLOSE[c]))
                    taken = True
            if died:
                lanes = [lane for lane in lanes if lane.stack]
            if not taken:
                if len(lanes) == _MAX_LANES:
                    del lanes[0]
                self._lanes += 1
                lanes.append(_Lane(self._lanes, i, _CLOSE[c]))
            if not lanes and spans:
                yield spans
                spans = []
        if spans:
            yield spans


def _first(text: str, spans: list[tuple[int, int, int]], openers: str) -> tuple[bool, Any]:
    """The value of the first span (by start) that opens with one of ``openers`` and
    decodes."""
    spans.sort()
    # Per lane, the spans enclosing the current one with where their decode failed:
    # a span that starts before that point and ends after it fails there too,
    # because json read its opener as a value inside the failed one.
    enclosing: dict[int, list[tuple[int, int | None]]] = {}
    for start, end, lane in spans:
        if text[start] not in openers:
            continue
        outer = enclosing.setdefault(lane, [])
        while outer and outer[-1][0] < start:
            outer.pop()
        failed = outer[-1][1] if outer else None
        if failed is not None and start < failed <= end:
            outer.append((end, failed))
            continue
        try:
            # The span alone: json's error counts the lines before the failure, which
            # over the whole text would make each failed span cost the text's length.
            value, _ = _DECODER.raw_decode(text[start : end + 1])
        except json.JSONDecodeError as e:
            outer.append((end, start + e.pos))
            continue
        except (ValueError, RecursionError):  # e.g. an integer of too many digits
            outer.append((end, None))
            continue
        return True, value
    return False, None


def extract_json(text: object, kind: type = dict) -> Any:
    """The first JSON object (``kind=dict``), array (``kind=list``) or either
    (``kind=object``: an array inside the first object is not it) in ``text``.

    Looks inside code fences first, then anywhere: each ``{`` (or ``[``) is
    tried as the start of a value and the text after that value is ignored,
    so a reply like ``Sure! {"a": 1} Hope that helps.`` parses. Values nested
    deeper than ``MAX_DEPTH`` are refused. Raises ``ParseError``
    (with the answer as ``raw``) when none is found, or when ``text`` is not a
    ``str``.
    """
    if not isinstance(kind, type) or kind not in _OPENERS:
        raise InvalidArgumentError(f"kind must be dict, list or object, got {shown(kind)}")
    what = {dict: "object", list: "array", object: "object or array"}[kind]
    if not isinstance(text, str):
        raise ParseError(
            f"the model's answer is {type(text).__name__}, not text: {_preview(text)}", raw=text
        )
    openers = _OPENERS[kind]
    scan = _Scan()
    chunks = [m.span(1) for m in _FENCE.finditer(text)]
    chunks.append((0, len(text)))
    for lo, hi in chunks:
        for spans in scan.batches(text, lo, hi):
            found, value = _first(text, spans, openers)
            if found:
                return value
    why = f" (nesting deeper than {MAX_DEPTH} levels is refused)" if scan.too_deep else ""
    raise ParseError(f"no JSON {what} in the model's output{why}: {_preview(text)}", raw=text)


def answer_text(answer: object, what: str) -> str:
    """A model's answer of plain text (``what`` it is, named in the error), stripped:
    not empty, and text both databases can store (no NUL, no lone surrogate); raises
    ``ParseError`` (with the answer as ``raw``) otherwise."""
    if not isinstance(answer, str):
        raise ParseError(
            f"{what} is {type(answer).__name__}, not text: {_preview(answer)}", raw=answer
        )
    text = answer.strip()
    if not text:
        raise ParseError(f"{what} is empty", raw=answer)
    try:
        return coerce.clean(text, what)
    except InvalidArgumentError as e:
        raise ParseError(str(e), raw=answer) from None


def _preview(value: object) -> str:
    try:
        text = value if isinstance(value, str) else repr(value)
    except Exception:  # a hostile __repr__ must not replace the ParseError
        text = f"<{type(value).__name__}>"
    return repr(text[:200]) + (f" ({len(text)} characters)" if len(text) > 200 else "")
