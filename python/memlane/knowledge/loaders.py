"""Document loaders: file bytes to text and metadata, one function per type.

Each loader takes the file's bytes (read once, also for its hash) and its
path, and returns a :class:`LoadedDocument`; a file it cannot read raises
:class:`DocumentLoadError` (or the parsing library's own error), which an
ingestion reports as failed for that file alone. Parsing is done by
well-kept libraries: pypdf, python-docx, python-frontmatter (YAML front
matter), and the standard library's ``html.parser``, ``csv`` and ``json``.

=================  ===========================================================
``.txt .text``     the text (UTF-8, UTF-16 with a BOM, else Windows-1252)
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
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import date, datetime, time
from html.parser import HTMLParser
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
    """Bytes to text: by BOM, else UTF-8, else Windows-1252, else Latin-1; NUL bytes fail."""
    text: str | None = None
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            try:
                text = data.decode(encoding)
            except UnicodeDecodeError as e:
                raise DocumentLoadError(f"invalid {encoding} text: {e}") from None
            break
    if text is None:
        for encoding in ("utf-8", "cp1252", "latin-1"):
            try:
                text = data.decode(encoding)
                break
            except UnicodeDecodeError:
                continue
    assert text is not None  # latin-1 decodes any bytes
    if "\x00" in text:
        raise DocumentLoadError("binary content (NUL bytes), not text")
    return text


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


class _VisibleText(HTMLParser):
    """Collects the text a browser would show, with block elements as paragraphs."""

    SKIP = frozenset({"script", "style", "noscript", "template", "head", "svg", "object"})
    BLOCK = frozenset(
        {
            *("address", "article", "aside", "blockquote", "body", "br", "dd", "details"),
            *("div", "dl", "dt", "fieldset", "figcaption", "figure", "footer", "form"),
            *("h1", "h2", "h3", "h4", "h5", "h6", "header", "hr", "li", "main", "nav", "ol"),
            *("p", "pre", "section", "summary", "table", "tbody", "td", "tfoot", "th"),
            *("thead", "tr", "ul"),
        }
    )
    VOID = frozenset(
        {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param"}
        | {"source", "track", "wbr"}
    )

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[tuple[str, bool]] = []  # (text, inside <pre>)
        self.title: list[str] = []
        self._skip: list[str] = []  # open elements whose content is hidden
        self._pre = 0
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self._in_title = True
        if tag in self.VOID:
            if tag in ("br", "hr") and not self._skip:
                self.parts.append(("\n", False))
            return
        hidden = any(
            k == "hidden"
            or (k == "aria-hidden" and v == "true")
            or (k == "style" and v is not None and re.search(r"display\s*:\s*none", v))
            for k, v in attrs
        )
        if self._skip or tag in self.SKIP or hidden:
            self._skip.append(tag)
            return
        if tag == "pre":
            self._pre += 1
        if tag in self.BLOCK:
            self.parts.append(("\n\n", False))

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        if self._skip:
            if tag in self._skip:
                while self._skip and self._skip.pop() != tag:
                    pass
            return
        if tag == "pre":
            self._pre = max(0, self._pre - 1)
        if tag in self.BLOCK:
            self.parts.append(("\n\n", False))

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title.append(data)
        if self._skip:
            return
        if self._pre:
            self.parts.append((data, True))
        else:  # HTML collapses ASCII whitespace only (a no-break space stays)
            self.parts.append((re.sub(r"[ \t\n\r\f]+", " ", data), False))

    def text(self) -> str:
        out: list[str] = []
        run: list[str] = []

        def flush() -> None:
            joined = re.sub(r" *\n *", "\n", "".join(run))
            out.append(re.sub(r"\n{3,}", "\n\n", joined))
            run.clear()

        for text, pre in self.parts:
            if pre:
                flush()
                out.append(text)
            else:
                run.append(text)
        flush()
        return re.sub(r"^\s*\n|\n\s*$", "", "".join(out)).strip(" ")


def load_html(data: bytes, path: Path) -> LoadedDocument:
    parser = _VisibleText()
    parser.feed(decode_text(data))
    parser.close()
    meta: dict[str, Any] = {}
    if (title := _clean(" ".join("".join(parser.title).split()))) is not None:
        meta["title"] = title
    return LoadedDocument(parser.text(), "html", meta)


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
