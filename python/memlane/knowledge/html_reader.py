"""The HTML loader: the visible text, block elements as paragraphs, ``<title>`` into
metadata."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from memlane.knowledge.document_limits import (
    DocumentLimitError,
    IngestLimits,
    current_limits,
)
from memlane.knowledge.loaded_document import LoadedDocument, decode_text, meta_text

__all__ = ["load_html"]

# Visible text from HTML: lxml (libxml2's HTML parser, already installed for python-docx)
# reads the markup, closes what it leaves open (<p>, <li>, a <div hidden> missing its end
# tag) and reads <script> and <style> as raw text. No tree is built: the parser calls a
# target per tag and per text, which keeps only what a reader sees, counts the elements
# and the text against the limits, and stops the parse at the first one passed, so that
# a large page costs about its text, not a tree of its elements.
_HTML_SKIP = frozenset({"script", "style", "noscript", "template", "head", "svg", "object"})
_HTML_BLOCK = frozenset(
    {
        *("address", "article", "aside", "blockquote", "body", "dd", "details", "div"),
        *("dl", "dt", "fieldset", "figcaption", "figure", "footer", "form", "h1", "h2"),
        *("h3", "h4", "h5", "h6", "header", "li", "main", "nav", "ol", "p", "pre"),
        *("section", "summary", "table", "tbody", "td", "tfoot", "th", "thead", "tr", "ul"),
    }
)
_HTML_LINE_BREAK = frozenset({"br", "hr"})
_DISPLAY_NONE = re.compile(r"display\s*:\s*none")
_XML_DECLARATION = re.compile(r"\s*<\?xml[^>]*>")
_HTML_SPACE = re.compile(r"[ \t\n\r\f]+")  # HTML collapses ASCII whitespace only
_HTML_FEED = 1 << 20  # characters given to the parser at a time
_HTML_COMPACT = 4096  # pieces of text kept apart before they are joined


def _html_hidden(attrs: Any) -> bool:
    return (
        "hidden" in attrs
        or attrs.get("aria-hidden") == "true"
        or _DISPLAY_NONE.search(attrs.get("style") or "") is not None
    )


class _Pieces:
    """Text gathered piece by piece: the pieces are joined a few thousand at a time, so
    that millions of small ones cost about their characters, in time linear in them."""

    __slots__ = ("_joined", "_pieces")

    def __init__(self) -> None:
        self._joined: list[str] = []
        self._pieces: list[str] = []

    def add(self, text: str) -> None:
        self._pieces.append(text)
        if len(self._pieces) >= _HTML_COMPACT:
            self._joined.append("".join(self._pieces))
            self._pieces.clear()

    def __bool__(self) -> bool:
        return bool(self._pieces or self._joined)

    def take(self) -> str:
        """The text, and the pieces forgotten."""
        self._joined.append("".join(self._pieces))
        text = "".join(self._joined)
        self._joined.clear()
        self._pieces.clear()
        return text


class _HtmlText:
    """lxml parser target: the visible text of an HTML document and its first <title>.

    Flowing text has its whitespace collapsed, block elements separate paragraphs and
    <br> lines; spaces next to a line break go, and more than two line breaks in a row
    read as two. The text of a <pre> is kept as it is. All of it is done as the text
    comes, so no step costs more than the text it handles.
    """

    def __init__(self, limits: IngestLimits) -> None:
        self.max_elements = limits.max_elements
        self.max_chars = limits.max_unpacked_bytes
        self.elements = 0
        self.chars = 0
        self.open: list[bool] = []  # per open element: whether it hides its content
        self.hiding = 0  # open elements that hide their content
        self.pre = 0  # open, shown <pre> elements
        self.pending: list[str] = []  # text read since the last tag, not yet in out
        self.pending_chars = 0
        self.out = _Pieces()  # the visible text so far
        self.spaced = False  # the text since the last tag ends in whitespace
        self.spaces = 0  # spaces of flowing text not yet in out: a line break drops them
        self.breaks = 0  # line breaks not yet in out: spaces after them are dropped
        self.title: _Pieces | None = None  # the first <title>'s text, once it starts
        self.title_depth = 0  # while inside it, its depth; then 0

    def took(self, text: str) -> str:
        """``text``, counted as read (before its whitespace is collapsed)."""
        self.chars += len(text)
        if self.chars > self.max_chars:
            limit = self.max_chars
            raise DocumentLimitError(
                f"more than {limit} characters of text, above max_unpacked_bytes={limit}"
            )
        return text

    def _settle(self) -> None:
        """Puts the spaces and line breaks held back into out, as they end up."""
        if self.breaks:
            self.out.add("\n" * min(self.breaks, 2))
            self.breaks = 0
        elif self.spaces:
            self.out.add(" " * self.spaces)
        self.spaces = 0

    def _line_break(self, count: int) -> None:
        self.spaces = 0
        self.breaks += count

    def start(self, tag: Any, attrib: Any) -> None:
        if self.pending:
            self._flush()
        self.spaced = False
        self.elements += 1
        if self.elements > self.max_elements:
            limit = self.max_elements
            raise DocumentLimitError(f"more than {limit} HTML elements, above max_elements={limit}")
        if tag == "title" and self.title is None:
            self.title, self.title_depth = _Pieces(), len(self.open) + 1
        # An empty attribute mapping is tested first: it is lxml's, slower to read.
        if self.hiding or tag in _HTML_SKIP or (attrib and _html_hidden(attrib)):
            self.open.append(True)
            self.hiding += 1
            return
        self.open.append(False)
        if tag == "pre":
            self.pre += 1
        if tag in _HTML_LINE_BREAK:
            self._line_break(1)
        elif tag in _HTML_BLOCK:
            self._line_break(2)

    def end(self, tag: Any) -> None:
        if self.pending:
            self._flush()
        self.spaced = False
        if self.title_depth == len(self.open):
            self.title_depth = 0
        if self.open.pop():
            self.hiding -= 1
            return
        if tag == "pre":
            self.pre -= 1
        if tag in _HTML_BLOCK:
            self._line_break(2)

    def data(self, text: str) -> None:
        """A piece of a text node (the parser may split one, at an entity for one)."""
        if self.title_depth and self.title is not None:
            self.title.add(self.took(text))
        if not self.hiding:
            self.pending.append(self.took(text))
            self.pending_chars += len(text)
            if len(self.pending) >= _HTML_COMPACT or self.pending_chars >= _HTML_FEED:
                self._flush()

    def _flush(self) -> None:
        """Adds the text read since the last tag or flush."""
        text = "".join(self.pending)
        self.pending.clear()
        self.pending_chars = 0
        if self.pre:
            self._settle()
            self.out.add(text)
            return
        # Whitespace collapses within a text node, also across flushes.
        text = _HTML_SPACE.sub(" ", text)
        if self.spaced and text.startswith(" "):
            text = text[1:]
        if not text:
            return
        self.spaced = text.endswith(" ")
        if self.breaks:
            text = text.lstrip(" ")
            if not text:
                return
        body = text.rstrip(" ")
        if body:
            self._settle()
            self.out.add(body)
        self.spaces += len(text) - len(body)

    def close(self) -> str:
        if self.pending:
            self._flush()
        self._settle()
        return _trim_lines(self.out.take())


def _trim_lines(text: str) -> str:
    """``text`` without the whitespace before its first line and after its last, and
    without spaces at either end."""
    start = len(text) - len(text.lstrip())
    if start == len(text):
        return text[text.rfind("\n") + 1 :].strip(" ")
    first = text.rfind("\n", 0, start) + 1
    last = text.find("\n", len(text.rstrip()))
    return text[first : last if last >= 0 else len(text)].strip(" ")


def load_html(data: bytes, path: Path) -> LoadedDocument:
    from lxml import etree

    text = decode_text(data)
    # lxml refuses a str that declares its encoding; the text is decoded already.
    declaration = _XML_DECLARATION.match(text)
    begin = declaration.end() if declaration else 0
    if begin == len(text):  # lxml takes no input for an error
        return LoadedDocument("", "html")
    target = _HtmlText(current_limits())
    parser = etree.HTMLParser(target=target, remove_comments=True, remove_pis=True, huge_tree=True)
    for at in range(begin, len(text), _HTML_FEED):
        parser.feed(text[at : at + _HTML_FEED])
    del text  # read: the visible text is built next
    visible: str = parser.close()
    meta: dict[str, Any] = {}
    if target.title and (clean := meta_text(" ".join(target.title.take().split()))):
        meta["title"] = clean
    return LoadedDocument(visible, "html", meta)
