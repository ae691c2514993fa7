"""How much work one document may cost, and the error a loader raises past it.

A document's size on disk says little of what parsing it costs: a 36 KB ``.docx``
can declare a table cell spanning two billion columns, 60 KB of deflated XML can
hold three million paragraphs, and 300 bytes of YAML can name 387 million values
through nested aliases. So besides the size a file unpacks to, the loaders count
what they visit (XML elements, front matter values as aliases expand them) and
the text they extract, and stop at the first bound passed, with
``DocumentLimitError`` naming it; an ingestion reports that file as over a
limit and goes on with the others.

The loaders keep the signature ``(bytes, Path)``; the limits in force reach them
through ``current_limits``, set by the ingestion around each call
(``applied_limits``). A loader called directly works within the defaults.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from memlane.errors import InvalidArgumentError, MemlaneError, shown

__all__ = [
    "DocumentLimitError",
    "DocumentLoadError",
    "IngestLimits",
    "applied_limits",
    "current_limits",
]


class DocumentLoadError(MemlaneError, ValueError):
    """A file cannot be turned into text: corrupt, encrypted, binary, or of another type."""


class DocumentLimitError(DocumentLoadError):
    """A file would cost more to load than an [`IngestLimits`][memlane.knowledge.IngestLimits]
    bound allows; the message names the bound."""


@dataclass(frozen=True, slots=True)
class IngestLimits:
    """How large one document may be; a larger one is reported and nothing of it stored.

    Attributes:
        max_unpacked_bytes: what a file may unpack to before it is parsed (a ``.docx``
            is a zip: the sizes its members declare, which bound what is read from
            them), and then the characters of its text, also while a loader extracts
            it (a vertically merged ``.docx`` cell repeats its text in every row it
            spans). A small zip bomb thus stops before its XML is read.
        max_fragments: fragments one document may make.
        max_elements: elements a loader may visit: the XML elements of a ``.docx``, in
            all the parts it reads (document, styles, properties; a cell spanning
            columns is visited once, whatever span it declares), the tags of an HTML
            page (with those its parser adds, as ``<html>`` and ``<body>``). Two million
            is about what a document of ``max_unpacked_bytes`` of ordinary markup holds;
            three million empty paragraphs, or ``<p>`` tags, stop here in seconds.
        max_front_matter_values: values (every mapping, list, key and scalar) a markdown
            file's front matter may hold once its YAML aliases are written out, counted
            before anything is built from them; the front matter becomes metadata of
            the document and of each of its fragments.
        max_metadata_chars: characters of a document's metadata (its title, author,
            front matter) as JSON: each of its fragments carries it, so a title of a
            megabyte made every fragment a megabyte.
    """

    max_unpacked_bytes: int = 128 * 2**20
    max_fragments: int = 20_000
    max_elements: int = 2_000_000
    max_front_matter_values: int = 10_000
    max_metadata_chars: int = 16_384

    def __post_init__(self) -> None:
        for name in (
            "max_unpacked_bytes",
            "max_fragments",
            "max_elements",
            "max_front_matter_values",
            "max_metadata_chars",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidArgumentError(f"{name} must be an int >= 1, got {shown(value)}")


_DEFAULT = IngestLimits()
_CURRENT: ContextVar[IngestLimits | None] = ContextVar("memlane_ingest_limits", default=None)


def current_limits() -> IngestLimits:
    """The limits the loader being run must keep to: the ingestion's, else the defaults."""
    return _CURRENT.get() or _DEFAULT


@contextmanager
def applied_limits(limits: IngestLimits) -> Iterator[None]:
    """Runs the block (a loader's call) with ``limits`` as ``current_limits``."""
    token = _CURRENT.set(limits)
    try:
        yield
    finally:
        _CURRENT.reset(token)


# What is left of the fragments the document being cut may make, and its limit: set only
# while ingestion cuts one (``fragment_budget``), so a splitter called directly cuts any
# text whole.
_FRAGMENTS: ContextVar[list[int] | None] = ContextVar("memlane_fragments", default=None)


@contextmanager
def fragment_budget(limit: int, counted: bool = True) -> Iterator[None]:
    """Runs the block (a document's cutting) with at most ``limit`` fragments to make:
    ``fragments_made`` raises ``DocumentLimitError`` past it, so a document that would
    make far more stops there, not after its every fragment was cut. Not ``counted``:
    with no budget (what is cut is not what is stored, the caller counts that)."""
    token = _FRAGMENTS.set([limit, limit] if counted else None)
    try:
        yield
    finally:
        _FRAGMENTS.reset(token)


def fragments_made(count: int) -> None:
    """Counts ``count`` fragments made (negative: dropped again) against the budget."""
    budget = _FRAGMENTS.get()
    if budget is None:
        return
    budget[0] -= count
    if budget[0] < 0:
        raise DocumentLimitError(
            f"more than {budget[1]} fragments, above max_fragments={budget[1]}"
        )
