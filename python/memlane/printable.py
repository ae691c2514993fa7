"""Text as a line on a terminal shows it: stored texts, scopes, ids and file names come
from others (an import, an agent, a file's name), and a control character in them would
be acted on by the terminal instead of shown (an escape sequence that clears the screen,
sets the window's title or the clipboard; a carriage return that writes over the line; a
bidirectional override that shows the line's characters in another order)."""

from __future__ import annotations

import re

__all__ = ["printable"]

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
