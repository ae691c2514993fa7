"""The ``.docx`` loader: paragraphs in order, headings as markdown, tables as rows."""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from memlane.knowledge.document_limits import (
    DocumentLimitError,
    DocumentLoadError,
    IngestLimits,
    current_limits,
)
from memlane.knowledge.loaded_document import (
    MAX_ZIP_MEMBERS,
    LoadedDocument,
    meta_text,
    zip_members,
)

__all__ = ["load_docx"]

_HEADING_STYLE = re.compile(r"^heading\s*(\d)$", re.IGNORECASE)

# A .docx is read from its XML as it streams out of the zip (lxml's iterparse), not
# through python-docx's object model, for two reasons of cost: python-docx builds the
# whole tree first, and a table row's cells repeat a cell once per column it spans, so a
# file of a few kilobytes can take minutes or all the memory (figures in
# benches/README.md, "Figures behind the code"). Here every element is visited once and
# dropped once read, so memory holds a few elements and the text; the elements counted
# and the text extracted are bounded by the IngestLimits in force. The text is
# python-docx's: the body's paragraphs and tables (not those nested in a cell, nor those
# inside other wrappers), paragraph text from its runs and hyperlinks' runs.
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
            if key not in meta and (clean := meta_text(element.text)) is not None:
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
                        # An entity reference is a child, left unexpanded: the text
                        # after it is its tail.
                        text = (element.text or "") + "".join(c.tail or "" for c in element)
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

    if (members := zip_members(data)) > MAX_ZIP_MEMBERS:
        raise DocumentLimitError(
            f"a zip of {members} members (as its directory declares), more than {MAX_ZIP_MEMBERS}"
        )
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            limits = current_limits()
            # Checked here too, not only by the ingest's unpacked_size before: zipfile opens
            # an archive with bytes before it (as a self-extracting one), which that check,
            # looking for a zip's signature at the start, takes for no zip.
            size = sum(info.file_size for info in archive.infolist())
            if size > (limit := limits.max_unpacked_bytes):
                raise DocumentLimitError(
                    f"unpacks to {size} bytes, above max_unpacked_bytes={limit}"
                )
            reader = _DocxReader(archive, limits)
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
