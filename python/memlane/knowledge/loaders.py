"""Document loaders: file bytes to text and metadata, one function per type.

Each loader takes the file's bytes (read once, also for its hash) and its
path, and returns a :class:`LoadedDocument`; a file it cannot read raises
:class:`DocumentLoadError` (or the parsing library's own error), which an
ingestion reports as failed for that file alone. Parsing is done by
well-kept libraries: pypdf, python-frontmatter and PyYAML (front matter), lxml
(HTML, and a ``.docx``'s XML as it streams out of the zip), charset-normalizer
(the encoding of a text that is not UTF-8), and the standard library's ``csv``
and ``json``. The loaders keep to the :func:`~memlane.knowledge.limits.current_limits`
(elements visited, text extracted, front matter values) and raise
:class:`DocumentLimitError` past them (see :mod:`memlane.knowledge.limits`).

=================  ===========================================================
``.txt .text``     the text (by BOM, UTF-8, else the encoding detected)
``.md .markdown``  front matter into metadata; headings kept (the markdown
                   splitter puts each chunk's heading path before it)
``.pdf``           text page by page; ``pages`` gives where each page starts;
                   an encrypted PDF that does not open with an empty password fails
``.docx``          paragraphs in order, Title and Heading N as markdown headings of
                   level 1 and N + 1, tables as
                   ``a | b`` rows; title and author into metadata
``.json .jsonl``   every string field as ``key.path[0].name: value``, a line each
``.html .htm``     the visible text (no script, style, head, template or
                   ``hidden`` elements), block elements as paragraphs; ``<title>``
                   into metadata
``.csv .tsv``      a row per line, each value labelled with its column header
=================  ===========================================================

Add a type with :func:`register_loader`.
"""

from __future__ import annotations

import codecs
import csv
import io
import json
import logging
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import date, datetime, time
from pathlib import Path
from typing import Any

from memlane.errors import InvalidArgumentError
from memlane.knowledge.limits import (
    DocumentLimitError,
    DocumentLoadError,
    IngestLimits,
    current_limits,
)

__all__ = [
    "LOADERS",
    "DocumentLimitError",
    "DocumentLoadError",
    "IngestLimits",
    "LoadedDocument",
    "Loader",
    "load_csv",
    "load_docx",
    "load_html",
    "load_json",
    "load_jsonl",
    "load_markdown",
    "load_pdf",
    "load_text",
    "loader_for",
    "register_loader",
    "unpacked_size",
]


def unpacked_size(data: bytes) -> int:
    """What a file unpacks to: for a zip (``.docx``), the sizes its members declare (and
    Python's zipfile never reads past them); otherwise its own size."""
    if data[:4] != b"PK\x03\x04":
        return len(data)
    import zipfile

    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            return max(len(data), sum(info.file_size for info in archive.infolist()))
    except (zipfile.BadZipFile, ValueError, OSError):
        return len(data)  # the loader reports a damaged archive


@dataclass(slots=True)
class LoadedDocument:
    """A document's text and what its file says about it.

    ``metadata`` holds JSON values only (front matter, title, author).
    ``pages`` (PDF) lists the offset in ``text`` where each page starts,
    page 1 first. ``markdown`` says the text has markdown headings, so that
    the markdown splitter is the default chunker.
    """

    text: str
    file_type: str
    metadata: dict[str, Any] = field(default_factory=dict)
    pages: list[int] | None = None
    markdown: bool = False

    def page_at(self, offset: int) -> int | None:
        """The page (from 1) holding the character at ``offset``, if the document has pages."""
        if not self.pages:
            return None
        page = 1
        for i, start in enumerate(self.pages):
            if start > offset:
                break
            page = i + 1
        return page


Loader = Callable[[bytes, Path], LoadedDocument]

# -- text decoding and JSON-safe values --------------------------------------------------

_BOMS = (
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)


def decode_text(data: bytes) -> str:
    """Bytes to text: by BOM, else UTF-8, else the encoding charset-normalizer finds;
    NUL bytes (binary content) fail.

    Windows-1252 wins whenever it reads the bytes as well as the detector's best guess
    (Western text, where cp1250 and cp1257 often tie with it), and is the fallback with
    Latin-1 when the detector finds nothing.
    """
    text: str | None = None
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            try:
                text = data.decode(encoding)
            except UnicodeDecodeError as e:
                raise DocumentLoadError(f"invalid {encoding} text: {e}") from None
            break
    if text is None:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = _detect_decode(data)
        else:
            if "\x00" in text:  # UTF-16 without a BOM is often valid UTF-8, with NULs
                text = _detect_decode(data)
    if "\x00" in text:
        raise DocumentLoadError("binary content (NUL bytes), not text")
    return text


def _detect_decode(data: bytes) -> str:
    from charset_normalizer import from_bytes

    matches = from_bytes(data)
    best = matches.best()
    if best is not None:
        if any(
            # could_be_from_charset: the encodings that read these bytes the same way
            "cp1252" in m.could_be_from_charset
            and m.chaos <= best.chaos
            and m.coherence >= best.coherence
            for m in matches
        ):
            return data.decode("cp1252")
        return str(best)
    try:
        return data.decode("cp1252")
    except UnicodeDecodeError:
        return data.decode("latin-1")  # decodes any bytes


def json_safe(value: Any) -> Any:
    """``value`` with dates as ISO strings and anything else unknown as ``str``."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else str(value)
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [json_safe(v) for v in value]
    return str(value)


def _clean(value: object) -> str | None:
    text = str(value).strip() if value is not None else ""
    return text or None


# -- the loaders ---------------------------------------------------------------------------


def load_text(data: bytes, path: Path) -> LoadedDocument:
    return LoadedDocument(decode_text(data), "txt")


def load_markdown(data: bytes, path: Path) -> LoadedDocument:
    meta, content = _front_matter(decode_text(data), current_limits().max_front_matter_values)
    return LoadedDocument(content, "md", json_safe(meta), markdown=True)


def _front_matter(text: str, limit: int) -> tuple[dict[str, Any], str]:
    """What ``frontmatter.parse`` returns, with YAML's aliases bounded.

    An alias costs a few bytes and stands for its whole anchored value, so nine
    levels of nine aliases name 387 million values; every consumer of the metadata
    (``json_safe``, the JSON each record stores) writes them all out. The YAML is
    therefore composed into nodes first, which shares what an alias names, and its
    values are counted as written out up to ``limit`` before anything is built.
    """
    import frontmatter
    from frontmatter.default_handlers import YAMLHandler

    text = text.strip()
    handler = frontmatter.detect_format(text, frontmatter.handlers)
    if handler is None:
        return {}, text
    try:
        fm, content = handler.split(text)
    except ValueError:  # no closing delimiter: not front matter
        return {}, text
    try:
        if isinstance(handler, YAMLHandler):
            value = _load_yaml(fm, limit)
        else:
            value = handler.load(fm)
            _count_values(value, limit)
    except DocumentLimitError:
        raise
    except Exception as e:  # the YAML (or TOML, JSON) parser's own error types
        raise DocumentLoadError(f"invalid front matter: {e}") from None
    return (dict(value) if isinstance(value, dict) else {}), content.strip()


def _too_many_values(limit: int) -> DocumentLimitError:
    return DocumentLimitError(
        f"front matter holds more than {limit} values (YAML aliases counted as written "
        f"out), above max_front_matter_values={limit}"
    )


def _load_yaml(text: str, limit: int) -> Any:
    """``yaml.safe_load`` of ``text``, refused when its nodes, with every alias expanded,
    number more than ``limit``."""
    import yaml

    # libyaml's parser also refuses nesting deeper than 1,000 levels.
    loader_class = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    loader = loader_class(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return None
        # Counted as a tree, without remembering what was seen: an alias counts again
        # each time it is used (as merge keys copy it), a recursive alias without end,
        # and the walk stops after limit + 1 nodes whatever the graph.
        count = 0
        stack: list[Any] = [root]
        while stack:
            node = stack.pop()
            count += 1
            if count > limit:
                raise _too_many_values(limit)
            if isinstance(node, yaml.MappingNode):
                for key, value in node.value:
                    stack.append(key)
                    stack.append(value)
            elif isinstance(node, yaml.SequenceNode):
                stack.extend(node.value)
        return loader.construct_document(root)
    finally:
        loader.dispose()


def _count_values(value: Any, limit: int) -> None:
    count = 0
    stack = [value]
    while stack:
        item = stack.pop()
        count += 1
        if count > limit:
            raise _too_many_values(limit)
        if isinstance(item, dict):
            for key, inner in item.items():
                stack.append(key)
                stack.append(inner)
        elif isinstance(item, list | tuple):
            stack.extend(item)


def load_pdf(data: bytes, path: Path) -> LoadedDocument:
    from pypdf import PdfReader
    from pypdf.errors import DependencyError, FileNotDecryptedError, PdfReadError

    # pypdf logs what it repairs (a wrong xref offset...); with no handler of its own,
    # Python's last-resort handler printed that on stderr mid-ingestion. It still
    # reaches the application's handlers through the root logger.
    _quiet_logger("pypdf")

    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            try:
                opened = reader.decrypt("")
            except (DependencyError, NotImplementedError) as e:
                raise DocumentLoadError(f"encrypted PDF that cannot be opened here: {e}") from None
            if not opened:
                raise DocumentLoadError("encrypted PDF (it needs a password)")
        parts: list[str] = []
        pages: list[int] = []
        offset = 0
        for page in reader.pages:
            if parts:
                offset += 2  # the "\n\n" between pages
            pages.append(offset)
            page_text = (page.extract_text() or "").strip()
            parts.append(page_text)
            offset += len(page_text)
        meta: dict[str, Any] = {"page_count": len(pages)}
        info = reader.metadata
        if info is not None:
            for key, value in (("title", info.title), ("author", info.author)):
                if (clean := _clean(value)) is not None:
                    meta[key] = clean
    except FileNotDecryptedError:
        raise DocumentLoadError("encrypted PDF (it needs a password)") from None
    except PdfReadError as e:
        raise DocumentLoadError(f"corrupt PDF: {e}") from None
    text = "\n\n".join(parts)
    if pages and not text.strip():
        raise DocumentLoadError(
            f"no extractable text in {len(pages)} page(s) (a scanned PDF needs OCR first)"
        )
    return LoadedDocument(text, "pdf", meta, pages=pages)


def _quiet_logger(name: str) -> None:
    logger = logging.getLogger(name)
    if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
        logger.addHandler(logging.NullHandler())


_HEADING_STYLE = re.compile(r"^heading\s*(\d)$", re.IGNORECASE)

# A .docx is read from its XML as it streams out of the zip (lxml's iterparse), not
# through python-docx's object model, for two reasons of cost. python-docx builds
# the whole tree first (three million empty paragraphs, 60 KB on disk, took 90 s
# and 730 MB to give nothing), and a table row's cells repeat a cell once per
# column it spans (a span of 2**31 - 1 declared in 36 KB ran out of memory). Here
# every element is visited once and dropped once read, so memory holds a few
# elements and the text; the elements counted and the text extracted are bounded
# by the IngestLimits in force. The text is python-docx's: the body's paragraphs
# and tables (not those nested in a cell, nor those inside other wrappers),
# paragraph text from its runs and hyperlinks' runs.
_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_W_VAL = f"{_W}val"
_W_P, _W_R, _W_HYPERLINK, _W_TBL, _W_TR, _W_TC = (
    f"{_W}{n}" for n in ("p", "r", "hyperlink", "tbl", "tr", "tc")
)
_W_PPR, _W_PSTYLE, _W_TCPR, _W_TRPR = (f"{_W}{n}" for n in ("pPr", "pStyle", "tcPr", "trPr"))
_W_GRID_SPAN, _W_GRID_BEFORE, _W_VMERGE = (f"{_W}{n}" for n in ("gridSpan", "gridBefore", "vMerge"))
_W_T, _W_BR = f"{_W}t", f"{_W}br"
# What python-docx reads a run's children as (w:t as its text, w:br by its type).
_RUN_TEXT = {
    _W_T: "",
    _W_BR: "",
    f"{_W}tab": "\t",
    f"{_W}ptab": "\t",
    f"{_W}cr": "\n",
    f"{_W}noBreakHyphen": "-",
}
_RELATIONSHIP = "{http://schemas.openxmlformats.org/package/2006/relationships}Relationship"
_DC = "{http://purl.org/dc/elements/1.1/}"


class _DocxReader:
    """The parts of one .docx as XML events, every element counted against the limits."""

    def __init__(self, archive: Any, limits: IngestLimits) -> None:
        self.archive = archive
        self.max_elements = limits.max_elements
        self.max_chars = limits.max_unpacked_bytes
        self.elements = 0
        self.chars = 0

    def has(self, name: str) -> bool:
        try:
            self.archive.getinfo(name)
        except KeyError:
            return False
        return True

    def events(self, name: str) -> Iterator[tuple[str, Any]]:
        """("start" | "end", element) of part ``name``; an element is emptied and dropped
        from its parent after its "end" (read what is needed then)."""
        from lxml import etree

        limit = self.max_elements
        with self.archive.open(name) as stream:
            # No entity is expanded and nothing is fetched (python-docx's settings).
            parse = etree.iterparse(
                stream,
                events=("start", "end"),
                resolve_entities=False,
                no_network=True,
                remove_comments=True,
                remove_pis=True,
            )
            for event, element in parse:
                if event == "start":
                    self.elements += 1
                    if self.elements > limit:
                        raise DocumentLimitError(
                            f"more than {limit} XML elements (stopped in {name}), "
                            f"above max_elements={limit}"
                        )
                    yield event, element
                    continue
                yield event, element
                element.clear()
                parent = element.getparent()
                if parent is not None:
                    while element.getprevious() is not None:
                        del parent[0]

    def took(self, text: str) -> str:
        """``text``, counted as extracted."""
        self.chars += len(text)
        if self.chars > self.max_chars:
            limit = self.max_chars
            raise DocumentLimitError(
                f"more than {limit} characters of text, above max_unpacked_bytes={limit}"
            )
        return text

    def relationships(self, part: str) -> dict[str, str]:
        """Part ``part``'s relationships: type -> the part it targets (the first of each)."""
        import posixpath

        folder, base = posixpath.split(part)
        rels = posixpath.join(folder, "_rels", base + ".rels")
        out: dict[str, str] = {}
        if not self.has(rels):
            return out
        for event, element in self.events(rels):
            if event != "end" or element.tag != _RELATIONSHIP:
                continue
            kind, target = element.get("Type") or "", element.get("Target") or ""
            if element.get("TargetMode") == "External" or not target or kind in out:
                continue
            if target.startswith("/"):
                out[kind] = posixpath.normpath(target).lstrip("/")
            else:
                out[kind] = posixpath.normpath(posixpath.join(folder, target)).lstrip("/")
        return out


def _related(rels: dict[str, str], suffix: str) -> str | None:
    return next((target for kind, target in rels.items() if kind.endswith(suffix)), None)


def _docx_styles(reader: _DocxReader, part: str | None) -> tuple[dict[str, str | None], str]:
    """Paragraph style names by style id (None for another type of style), and the name
    of the default paragraph style."""
    styles: dict[str, str | None] = {}
    default = ""
    if part is None or not reader.has(part):
        return styles, default
    style_id: str | None = None
    name = ""
    for event, element in reader.events(part):
        tag = element.tag
        if tag == f"{_W}style":
            if event == "start":
                style_id, name = element.get(f"{_W}styleId"), ""
                continue
            paragraph = element.get(f"{_W}type", "paragraph") == "paragraph"
            if style_id is not None and style_id not in styles:
                styles[style_id] = name if paragraph else None
            if paragraph and element.get(f"{_W}default") in ("1", "true", "on"):
                default = name  # the last default, as Word and python-docx take it
        elif tag == f"{_W}name" and event == "end":
            name = element.get(_W_VAL) or ""
    return styles, default


def _docx_properties(reader: _DocxReader, part: str | None) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    if part is None or not reader.has(part):
        return meta
    for event, element in reader.events(part):
        if event == "end" and element.tag in (f"{_DC}title", f"{_DC}creator"):
            key = "title" if element.tag == f"{_DC}title" else "author"
            if key not in meta and (clean := _clean(element.text)) is not None:
                meta[key] = reader.took(clean)
    return meta


def _count_attribute(element: Any, default: int) -> int:
    """A w:gridSpan's or w:gridBefore's count, ``default`` when it is not one."""
    try:
        return max(0, int(element.get(_W_VAL) or default))
    except ValueError:  # not a number, or one of thousands of digits
        return default


def _docx_blocks(
    reader: _DocxReader, part: str, styles: dict[str, str | None], default_style: str
) -> list[str]:
    """The markdown blocks of the document's body: paragraphs (Title and Heading N as
    headings) and table rows as ``a | b``."""
    blocks: list[str] = []
    tags: list[str] = []  # the open elements, the root first
    para: list[str] | None = None  # the runs' text of the paragraph being read
    para_depth = 0  # its depth: 3 in the body, 6 in a cell of a body table
    style_id: str | None = None
    cell: list[str] = []  # the paragraphs of the cell being read
    row: list[str] = []  # the cells of the row being read
    grid = 0  # the grid column where the next cell of the row starts
    span = 1
    merged = False  # the cell continues the one above it (w:vMerge)
    above: dict[int, str] = {}  # by grid column, the text of the last cell starting there
    in_body = False
    for event, element in reader.events(part):
        tag = element.tag
        if event == "start":
            tags.append(tag)
            depth = len(tags)
            if depth == 2:
                in_body = tags[0] == f"{_W}document" and tag == f"{_W}body"
            elif not in_body or depth > 6:
                pass
            elif tag == _W_P and (
                depth == 3 or (depth == 6 and tags[2:5] == [_W_TBL, _W_TR, _W_TC])
            ):
                para, para_depth, style_id = [], depth, None
            elif depth == 3 and tag == _W_TBL:
                above = {}
            elif depth == 4 and tag == _W_TR and tags[2] == _W_TBL:
                row, grid = [], 0
            elif depth == 5 and tag == _W_TC and tags[2:4] == [_W_TBL, _W_TR]:
                cell, span, merged = [], 1, False
            continue
        depth = len(tags)
        tags.pop()
        if para is not None:
            if tag in _RUN_TEXT:
                if tags[-1] == _W_R and (
                    depth == para_depth + 2
                    or (depth == para_depth + 3 and tags[-2] == _W_HYPERLINK)
                ):
                    if tag == _W_T:
                        text = element.text or ""
                    elif tag == _W_BR:
                        text = (
                            "\n"
                            if element.get(f"{_W}type", "textWrapping") == "textWrapping"
                            else ""
                        )
                    else:
                        text = _RUN_TEXT[tag]
                    para.append(reader.took(text))
            elif tag == _W_PSTYLE and depth == para_depth + 2 and tags[-1] == _W_PPR:
                style_id = element.get(_W_VAL)
            elif tag == _W_P and depth == para_depth:
                text = "".join(para)
                para = None
                if depth == 6:
                    cell.append(text)
                elif text := text.strip():
                    style = styles.get(style_id) if style_id is not None else default_style
                    if style is None:  # an unknown id, or a style of another type
                        style = default_style
                    level = 1 if style == "Title" else None
                    if (m := _HEADING_STYLE.match(style)) is not None:
                        level = min(6, int(m.group(1)) + 1)  # below the Title
                    blocks.append(f"{'#' * level} {' '.join(text.split())}" if level else text)
            continue
        if not in_body or depth > 7:
            continue
        if depth == 7 and tags[2:6] == [_W_TBL, _W_TR, _W_TC, _W_TCPR]:
            if tag == _W_GRID_SPAN:
                span = max(1, _count_attribute(element, 1))
            elif tag == _W_VMERGE:
                merged = (element.get(_W_VAL) or "continue") == "continue"
        elif depth == 6 and tag == _W_GRID_BEFORE and tags[2:5] == [_W_TBL, _W_TR, _W_TRPR]:
            grid = _count_attribute(element, 0)
        elif depth == 5 and tag == _W_TC and tags[2:4] == [_W_TBL, _W_TR]:
            # A merged cell shows the text of the cell it continues; a spanning cell
            # counts once (python-docx repeats it per column, then the repeats were
            # dropped as duplicates).
            if merged:
                text = reader.took(above.get(grid, ""))
            else:
                text = above[grid] = "\n".join(cell)
            row.append(text)
            grid += span
        elif depth == 4 and tag == _W_TR and tags[2] == _W_TBL:
            cells: list[str] = []
            for text in row:
                text = " ".join(text.split())
                if text and (not cells or cells[-1] != text):  # merged cells repeat
                    cells.append(text)
            if cells:
                blocks.append(" | ".join(cells))
    return blocks


def load_docx(data: bytes, path: Path) -> LoadedDocument:
    import zipfile
    import zlib

    from lxml import etree

    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            reader = _DocxReader(archive, current_limits())
            package = reader.relationships("")
            main = _related(package, "/officeDocument")
            if main is None or not reader.has(main):
                raise DocumentLoadError("not a .docx: it names no main document part")
            styles, default_style = _docx_styles(
                reader, _related(reader.relationships(main), "/styles")
            )
            blocks = _docx_blocks(reader, main, styles, default_style)
            meta = _docx_properties(reader, _related(package, "/metadata/core-properties"))
    except DocumentLoadError:
        raise
    except etree.XMLSyntaxError as e:
        raise DocumentLoadError(f"not a readable .docx (damaged XML): {e}") from None
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, RuntimeError) as e:
        # RuntimeError: an encrypted zip member; NotImplementedError: a compression
        # method zipfile lacks.
        raise DocumentLoadError(f"not a readable .docx (corrupt or encrypted): {e}") from None
    return LoadedDocument("\n\n".join(blocks), "docx", meta, markdown=True)


def _flatten(value: Any, path: str) -> Iterator[str]:
    if isinstance(value, str):
        if value.strip():
            yield f"{path or '$'}: {value}"
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _flatten(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _flatten(item, f"{path}[{i}]")


def load_json(data: bytes, path: Path) -> LoadedDocument:
    try:
        value = json.loads(decode_text(data))
    except json.JSONDecodeError as e:
        raise DocumentLoadError(f"invalid JSON: {e}") from None
    return LoadedDocument("\n".join(_flatten(value, "")), "json")


def load_jsonl(data: bytes, path: Path) -> LoadedDocument:
    lines: list[str] = []
    for n, line in enumerate(decode_text(data).splitlines()):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as e:
            raise DocumentLoadError(f"line {n + 1}: invalid JSON: {e}") from None
        lines.extend(_flatten(value, f"[{n}]"))
    return LoadedDocument("\n".join(lines), "jsonl")


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
    if target.title and (clean := _clean(" ".join(target.title.take().split()))):
        meta["title"] = clean
    return LoadedDocument(visible, "html", meta)


def load_csv(data: bytes, path: Path) -> LoadedDocument:
    text = decode_text(data)
    if path.suffix.lower() == ".tsv":
        dialect: Any = csv.excel_tab
    else:
        try:
            dialect = csv.Sniffer().sniff(text[:8192], delimiters=",;\t|")
        except csv.Error:
            dialect = csv.excel
    try:
        rows = [
            row for row in csv.reader(io.StringIO(text), dialect) if any(c.strip() for c in row)
        ]
    except csv.Error as e:
        raise DocumentLoadError(f"invalid CSV: {e}") from None
    if not rows:
        return LoadedDocument("", "csv")
    header = [h.strip() or f"column {i + 1}" for i, h in enumerate(rows[0])]
    lines = []
    for row in rows[1:]:
        cells = []
        for i, value in enumerate(row):
            name = header[i] if i < len(header) else f"column {i + 1}"
            if value.strip():
                cells.append(f"{name}: {' '.join(value.split())}")
        lines.append("; ".join(cells))
    return LoadedDocument("\n".join(lines), "csv", {"columns": header, "rows": len(rows) - 1})


#: Loaders by lower-case suffix.
LOADERS: dict[str, Loader] = {
    ".txt": load_text,
    ".text": load_text,
    ".md": load_markdown,
    ".markdown": load_markdown,
    ".pdf": load_pdf,
    ".docx": load_docx,
    ".json": load_json,
    ".jsonl": load_jsonl,
    ".html": load_html,
    ".htm": load_html,
    ".csv": load_csv,
    ".tsv": load_csv,
}


def register_loader(suffix: str, loader: Loader) -> None:
    """Makes ``loader`` read files ending in ``suffix`` (e.g. ``".rst"``), replacing any other."""
    if not isinstance(suffix, str) or not re.fullmatch(r"\.[^./\\]+", suffix):
        raise InvalidArgumentError(f"suffix must look like '.ext', got {suffix!r}")
    if not callable(loader):
        raise InvalidArgumentError("loader must be callable (bytes, Path) -> LoadedDocument")
    LOADERS[suffix.lower()] = loader


def loader_for(path: str | Path) -> Loader | None:
    """The loader of a file, by its suffix; None for an unsupported type."""
    return LOADERS.get(Path(path).suffix.lower())
