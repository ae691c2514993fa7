"""What drawing a PDF page's forms costs its text extraction.

pypdf parses a form XObject again each time a content stream draws it (``Do``), up to
5,000 times a page: a 1 KB deflated form of 100,000 operators, drawn 5,000 times by
35 KB of page content, is half a billion operators parsed, hours of work. So before a
page's text is extracted, the forms its content draws are counted in decoded bytes,
each every time it is drawn, with the forms they draw in turn, against what the page
may still unpack to (``max_unpacked_bytes``).

The draws are read as pypdf reads them: the content's operations, parsed by pypdf, each
``Do`` drawing the XObject its first operand names, every one that is not an image (a
form whatever its ``/Subtype`` says), and each form is parsed once however often drawn.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

__all__ = ["drawn_bytes"]


def drawn_bytes(contents: Any, resources: Any, budget: int, pdf: Any) -> int:
    """The decoded bytes of the forms a page's content stream (pypdf's ``ContentStream``,
    drawing with ``resources``, of the reader ``pdf``) draws, each counted every time it
    is drawn, with the forms they draw; the count stops once past ``budget``, and is then
    only known to be above it. A page with no XObject but images draws no form, and its
    content is not parsed here (most pages: their text extraction parses it next)."""
    xobjects = _get(resources, "/XObject")
    keys = xobjects.keys() if hasattr(xobjects, "keys") else ()
    if contents is None or all(_get(_get(xobjects, k), "/Subtype") == "/Image" for k in keys):
        return 0
    return _Counting(budget, pdf).draws(contents.operations, resources)


class _Counting:
    def __init__(self, budget: int, pdf: Any) -> None:
        self.budget = budget
        self.pdf = pdf
        self.costs: dict[object, int] = {}  # each form's, parsed once
        self.open: set[object] = set()  # forms being counted: a cycle pypdf skips

    def draws(self, operations: Iterable[Any], resources: Any) -> int:
        total = 0
        xobjects = _get(resources, "/XObject")
        names = Counter(str(ops[0]) for ops, op in operations if op == b"Do" and ops)
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
        if key in self.open or _get(form, "/Subtype") == "/Image":
            return 0
        self.open.add(key)
        try:
            from pypdf.generic import ContentStream

            data = form.get_data()
            inner = _get(form, "/Resources")
            operations = ContentStream(form, self.pdf).operations
            cost = len(data) + self.draws(operations, resources if inner is None else inner)
        except Exception:  # a form pypdf cannot read: it skips it too
            cost = 0
        finally:
            self.open.discard(key)
        self.costs[key] = cost
        return cost


def _get(value: Any, key: str) -> Any:
    """``value[key]`` resolved, or None where ``value`` is no dictionary or lacks it."""
    try:
        got = value.get(key) if hasattr(value, "get") else None
        return got.get_object() if got is not None else None
    except Exception:  # a broken reference: nothing is drawn from it
        return None
