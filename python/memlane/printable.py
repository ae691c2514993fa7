"""Text as a line on a terminal shows it: stored texts, scopes, ids and file names come
from others (an import, an agent, a file's name), and a control character in them would
be acted on by the terminal instead of shown (an escape sequence that clears the screen,
sets the window's title or the clipboard; a carriage return that writes over the line; a
bidirectional override that shows the line's characters in another order)."""

from __future__ import annotations

import json
import math
import re

__all__ = ["json_text", "printable"]

# C0 and C1 controls (a newline and a tab among them: one value is one line), DEL, the
# line and paragraph separators, the bidirectional marks, embeddings, overrides and
# isolates, and lone surrogates (which an encoder writing to a terminal refuses).
_HIDDEN = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]"
)


_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(value: object) -> str:
    """``str(value)`` with each character a terminal would act on, or would not show,
    written as its Python escape (``\\x1b``, ``\\n``, ``\\u202e``); other text,
    backslashes included, stays as it is."""
    return _HIDDEN.sub(_escape, str(value))


# Lone surrogates (what Python makes of a byte of a name that is not UTF-8, which no
# UTF-8 document may hold), and what a terminal acts on that json.dumps leaves raw.
_RAW = re.compile("[\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]")


def json_text(value: object, indent: int | None = None) -> str:
    """``value`` as JSON text that encodes to valid UTF-8.

    Text stays as it is (not escaped to ASCII), except lone surrogates: a file or store
    name that is not UTF-8 reaches Python with them, and written to stdout they would
    become the raw bytes again. They are written as JSON escapes (``\\udcff``), which
    a reader decodes back to the same string (``os.fsencode`` gives the name's bytes).
    So are the characters a terminal acts on that JSON leaves as they are (C1 controls,
    DEL, bidi marks): a reader gets the same text, a terminal shows the escape. A float
    JSON has no number for (NaN, an infinity) is written as a string.
    """
    try:
        text = json.dumps(value, ensure_ascii=False, indent=indent, allow_nan=False)
    except ValueError:  # NaN or an infinity (a model's answer echoed): no JSON number
        text = json.dumps(_finite(value), ensure_ascii=False, indent=indent, allow_nan=False)
    # json.dumps leaves them raw only inside strings, where an escape means the same; so
    # too C1 controls and bidi marks, which a terminal showing the document would act on
    # (json.dumps escapes C0 alone).
    return _RAW.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _finite(value: object) -> object:
    """``value`` with each float that JSON cannot write (NaN, an infinity) as the string
    Python's json would have written bare, which strict readers refuse."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value
