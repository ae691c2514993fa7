"""Document loaders: file bytes to text and metadata, one function per type.

Each loader takes the file's bytes (read once, also for its hash) and its
path, and returns a :class:`LoadedDocument`; a file it cannot read raises
:class:`DocumentLoadError` (or the parsing library's own error), which an
ingestion reports as failed for that file alone. Parsing is done by
well-kept libraries: pypdf, python-docx, python-frontmatter (YAML front
matter), lxml (HTML), charset-normalizer (the encoding of a text that is not
UTF-8), and the standard library's ``csv`` and ``json``.

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

from memlane.errors import InvalidArgumentError, MemlaneError

__all__ = [
    "LOADERS",
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


class DocumentLoadError(MemlaneError, ValueError):
    """A file cannot be turned into text: corrupt, encrypted, binary, or of another type."""


@dataclass(frozen=True, slots=True)
class IngestLimits:
    """How large one document may be; a larger one is reported and nothing of it stored.

    Attributes:
        max_unpacked_bytes: what a file may unpack to before it is parsed (a ``.docx``
            is a zip: the sizes its members declare, which bound what is read from
            them), and then the characters of its text. A small zip bomb thus stops
            before python-docx opens it.
        max_fragments: fragments one document may make.
    """

    max_unpacked_bytes: int = 128 * 2**20
    max_fragments: int = 20_000

    def __post_init__(self) -> None:
        for name in ("max_unpacked_bytes", "max_fragments"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidArgumentError(f"{name} must be an int >= 1, got {value!r}")


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
    import frontmatter

    text = decode_text(data)
    try:
        meta, content = frontmatter.parse(text)
    except Exception as e:  # the YAML (or TOML) parser's own error types
        raise DocumentLoadError(f"invalid front matter: {e}") from None
    return LoadedDocument(content, "md", json_safe(dict(meta)), markdown=True)


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


def load_docx(data: bytes, path: Path) -> LoadedDocument:
    import zipfile

    import docx
    from docx.opc.exceptions import PackageNotFoundError
    from docx.table import Table

    try:
        document = docx.Document(io.BytesIO(data))
    except (PackageNotFoundError, zipfile.BadZipFile, KeyError) as e:
        raise DocumentLoadError(f"not a readable .docx (corrupt or encrypted): {e}") from None
    blocks: list[str] = []
    for item in document.iter_inner_content():
        if isinstance(item, Table):
            for row in item.rows:
                cells: list[str] = []
                for cell in row.cells:
                    text = " ".join(cell.text.split())
                    if text and (not cells or cells[-1] != text):  # merged cells repeat
                        cells.append(text)
                if cells:
                    blocks.append(" | ".join(cells))
            continue
        text = item.text.strip()
        if not text:
            continue
        style = item.style.name if item.style is not None else ""
        level = 1 if style == "Title" else None
        if (m := _HEADING_STYLE.match(style or "")) is not None:
            level = min(6, int(m.group(1)) + 1)  # below the Title
        blocks.append(f"{'#' * level} {' '.join(text.split())}" if level else text)
    meta: dict[str, Any] = {}
    props = document.core_properties
    for key, value in (("title", props.title), ("author", props.author)):
        if (clean := _clean(value)) is not None:
            meta[key] = clean
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


# Visible text from HTML: the document is parsed into a tree by lxml (libxml2's HTML
# parser, already installed for python-docx), which closes what the markup leaves open
# (<p>, <li>, a <div hidden> missing its end tag) and reads <script> and <style> as raw
# text. The walk below only decides what a reader sees.
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
_XML_DECLARATION = re.compile(r"^\s*<\?xml[^>]*>")


def _html_hidden(element: Any) -> bool:
    attrs = element.attrib
    return (
        "hidden" in attrs
        or attrs.get("aria-hidden") == "true"
        or _DISPLAY_NONE.search(attrs.get("style") or "") is not None
    )


def _html_parts(root: Any) -> list[tuple[str, bool]]:
    """The visible text of ``root`` as (text, inside <pre>) runs, with block boundaries."""
    from lxml import etree

    parts: list[tuple[str, bool]] = []
    pre = 0

    def add(text: str | None) -> None:
        if not text:
            return
        if pre:
            parts.append((text, True))
        else:  # HTML collapses ASCII whitespace only (a no-break space stays)
            parts.append((re.sub(r"[ \t\n\r\f]+", " ", text), False))

    walker = etree.iterwalk(root, events=("start", "end"))  # iterative: any depth
    for event, element in walker:
        tag = element.tag if isinstance(element.tag, str) else ""
        shown = tag not in _HTML_SKIP and not _html_hidden(element)
        if event == "start":
            if not shown:
                walker.skip_subtree()  # its "end" still comes, for its tail
                continue
            if tag == "pre":
                pre += 1
            if tag in _HTML_LINE_BREAK:
                parts.append(("\n", False))
            elif tag in _HTML_BLOCK:
                parts.append(("\n\n", False))
            add(element.text)
            continue
        if shown:
            if tag == "pre":
                pre -= 1
            if tag in _HTML_BLOCK:
                parts.append(("\n\n", False))
        add(element.tail)  # the text after the element belongs to its parent
    return parts


def _join_visible(parts: list[tuple[str, bool]]) -> str:
    out: list[str] = []
    run: list[str] = []

    def flush() -> None:
        joined = re.sub(r" *\n *", "\n", "".join(run))
        out.append(re.sub(r"\n{3,}", "\n\n", joined))
        run.clear()

    for text, pre in parts:
        if pre:
            flush()
            out.append(text)
        else:
            run.append(text)
    flush()
    return re.sub(r"^\s*\n|\n\s*$", "", "".join(out)).strip(" ")


def load_html(data: bytes, path: Path) -> LoadedDocument:
    import lxml.html
    from lxml import etree

    # lxml refuses a str that declares its encoding; the text is decoded already.
    text = _XML_DECLARATION.sub("", decode_text(data), count=1)
    parser = lxml.html.HTMLParser(remove_comments=True, remove_pis=True, huge_tree=True)
    try:
        root = lxml.html.document_fromstring(text, parser=parser)
    except etree.ParserError:  # nothing but whitespace
        return LoadedDocument("", "html")
    meta: dict[str, Any] = {}
    title = root.find(".//title")
    if title is not None and (clean := _clean(" ".join(title.text_content().split()))):
        meta["title"] = clean
    return LoadedDocument(_join_visible(_html_parts(root)), "html", meta)


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
