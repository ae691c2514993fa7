"""What drawing a PDF page's forms costs its text extraction.

pypdf parses a form XObject again each time a content stream draws it (``Do``), up to
5,000 times a page: a 1 KB deflated form of 100,000 operators, drawn 5,000 times by
35 KB of page content, is half a billion operators parsed, hours of work. So before a
page's text is extracted, the forms its content draws are counted in decoded bytes,
each every time it is drawn, with the forms they draw in turn, against what the page
may still unpack to (``max_unpacked_bytes``).

A draw is found by its bytes, ``/Name Do``, not by parsing the stream (the page's
content may be as large as the limit, and pypdf parses it next): a ``Do`` inside a
string is counted too, which can only count more.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

__all__ = ["drawn_bytes"]

# A name (a token up to the next delimiter), whitespace, then the operator Do.
_DRAW = re.compile(rb"/([^\s()<>\[\]{}/%]+)\s+Do(?![^\s()<>\[\]{}/%])")
_ESCAPE = re.compile(rb"#([0-9A-Fa-f]{2})")


def drawn_bytes(content: bytes, resources: Any, budget: int) -> int:
    """The decoded bytes of the forms ``content`` (a decoded content stream, drawing with
    ``resources``) draws, each counted every time it is drawn, with the forms they draw;
    the count stops once past ``budget``, and is then only known to be above it."""
    return _Counting(budget).draws(content, resources)


class _Counting:
    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.costs: dict[object, int] = {}  # each form's, parsed once
        self.open: set[object] = set()  # forms being counted: a cycle pypdf skips

    def draws(self, content: bytes, resources: Any) -> int:
        total = 0
        xobjects = _get(resources, "/XObject")
        names = Counter(_name(raw) for raw in _DRAW.findall(content))
        for name, times in names.items():
            form = _get(xobjects, name)
            if form is not None:
                total += times * self.form(form, resources)
            if total > self.budget:
                break
        return total

    def form(self, form: Any, resources: Any) -> int:
        ref = getattr(form, "indirect_reference", None)
        key = (ref.idnum, ref.generation) if ref is not None else id(form)
        if (cost := self.costs.get(key)) is not None:
            return cost
        if key in self.open or _get(form, "/Subtype") != "/Form":
            return 0
        self.open.add(key)
        try:
            data = form.get_data()
            inner = _get(form, "/Resources")
            cost = len(data) + self.draws(data, resources if inner is None else inner)
        except Exception:  # a form pypdf cannot read: it skips it too
            cost = 0
        finally:
            self.open.discard(key)
        self.costs[key] = cost
        return cost


def _name(raw: bytes) -> str:
    """A name as pypdf keys it: ``#xx`` escapes decoded, a ``/`` before."""
    decoded = _ESCAPE.sub(lambda m: bytes([int(m.group(1), 16)]), raw)
    return "/" + decoded.decode("utf-8", "replace")


def _get(value: Any, key: str) -> Any:
    """``value[key]`` resolved, or None where ``value`` is no dictionary or lacks it."""
    try:
        got = value.get(key) if hasattr(value, "get") else None
        return got.get_object() if got is not None else None
    except Exception:  # a broken reference: nothing is drawn from it
        return None
