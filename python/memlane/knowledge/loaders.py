"""Document loaders: file bytes to text and metadata, one function per type.

Each loader takes the file's bytes (read once, also for its hash) and its
path, and returns a ``LoadedDocument``; a file it cannot read raises
``DocumentLoadError`` (or the parsing library's own error), which an
ingestion reports as failed for that file alone. Parsing is done by
well-kept libraries: pypdf, python-frontmatter and PyYAML (front matter), lxml
(HTML, and a ``.docx``'s XML as it streams out of the zip), charset-normalizer
(the encoding of a text that is not UTF-8), and the standard library's ``csv``
and ``json``. The loaders keep to the ``current_limits``
(elements visited, text extracted, front matter values) and raise
``DocumentLimitError`` past them (see ``memlane.knowledge.document_limits``).

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

Add a type with ``register_loader``.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import logging
import re
from pathlib import Path
from typing import Any

from memlane import json_depth
from memlane.errors import InvalidArgumentError, shown
from memlane.knowledge.document_limits import (
    DocumentLimitError,
    DocumentLoadError,
    IngestLimits,
    current_limits,
)
from memlane.knowledge.docx_reader import load_docx
from memlane.knowledge.html_reader import load_html
from memlane.knowledge.loaded_document import (
    LoadedDocument,
    Loader,
    decode_text,
    json_safe,
    meta_text,
    unpacked_size,
)
from memlane.knowledge.pdf_forms import drawn_bytes

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
    number more than ``limit``: counted on the parser's events, before any node is
    built, so a refused text costs the events up to the limit, not its whole graph."""
    import yaml

    # libyaml's parser also refuses nesting deeper than 1,000 levels.
    loader_class = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    counter = loader_class(text)
    try:
        # Counted as a tree: an alias counts its anchor's nodes again each time it is
        # used (as merge keys copy it), and one inside its own anchor's node (a
        # recursive alias) without end.
        sizes: dict[str, int] = {}
        opened: list[tuple[int, str | None]] = []  # (nodes before it, its anchor)
        count = 0
        while counter.check_event():
            event = counter.get_event()
            if isinstance(event, yaml.AliasEvent):
                if any(anchor == event.anchor for _, anchor in opened):
                    raise _too_many_values(limit)
                count += sizes.get(event.anchor, 1)  # an unknown one: composing refuses it
            elif isinstance(event, yaml.ScalarEvent):
                count += 1
                if event.anchor is not None:
                    sizes[event.anchor] = 1
            elif isinstance(event, yaml.SequenceStartEvent | yaml.MappingStartEvent):
                opened.append((count, event.anchor))
                count += 1
            elif isinstance(event, yaml.SequenceEndEvent | yaml.MappingEndEvent):
                before, anchor = opened.pop()
                if anchor is not None:
                    sizes[anchor] = count - before
            if count > limit:
                raise _too_many_values(limit)
    finally:
        counter.dispose()
    loader = loader_class(text)
    try:
        return loader.get_single_data()
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
    from pypdf.errors import (
        DependencyError,
        FileNotDecryptedError,
        LimitReachedError,
        PdfReadError,
        PyPdfError,
    )

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
        limit = current_limits().max_unpacked_bytes
        # A page tree may name one page object 90,000 times, and page objects may share
        # one content stream: the text of a page object, and of a content stream drawn
        # with the same resources, is extracted once (40 pages of one 12 KB file sharing
        # a stream of 1.9M operators were parsed for 6 minutes).
        texts: dict[tuple[int, int], str] = {}
        drawn: dict[tuple[bytes, str], str] = {}
        unpacked = 0
        for page in reader.pages:
            if parts:
                offset += 2  # the "\n\n" between pages
            pages.append(offset)
            ref = page.indirect_reference
            page_key = (ref.idnum, ref.generation) if ref is not None else None
            if page_key is None or (page_text := texts.get(page_key)) is None:
                # What extracting a page costs is its content stream: a million
                # operators that show no text take seconds; decoded content counts
                # against max_unpacked_bytes, as a zip's members do, before it is parsed.
                contents = page.get_contents()
                content = b"" if contents is None else contents.get_data()
                resources = page.get("/Resources")
                stream = (hashlib.blake2b(content).digest(), repr(resources))
                if (page_text := drawn.get(stream)) is None:
                    unpacked += len(content)
                    if unpacked <= limit:  # with the forms drawn, as often as drawn
                        unpacked += drawn_bytes(contents, resources, limit - unpacked, reader)
                    if unpacked > limit:
                        raise DocumentLimitError(
                            f"page content streams, with the forms they draw each time drawn, "
                            f"unpack to more than {limit} bytes (stopped at page {len(pages)}), "
                            f"above max_unpacked_bytes={limit}"
                        )
                    page_text = drawn[stream] = (page.extract_text() or "").strip()
                if page_key is not None:
                    texts[page_key] = page_text
            parts.append(page_text)
            offset += len(page_text)
            # Pages may share one content stream: a small file can hold far more text.
            if offset > limit:
                raise DocumentLimitError(
                    f"more than {limit} characters of text (stopped at page {len(pages)}), "
                    f"above max_unpacked_bytes={limit}"
                )
        meta: dict[str, Any] = {"page_count": len(pages)}
        info = reader.metadata
        if info is not None:
            for key, value in (("title", info.title), ("author", info.author)):
                if (clean := meta_text(value)) is not None:
                    meta[key] = clean
    except FileNotDecryptedError:
        raise DocumentLoadError("encrypted PDF (it needs a password)") from None
    except LimitReachedError as e:  # pypdf's own bound on what a stream unpacks to
        raise DocumentLimitError(f"the PDF exceeds pypdf's limits: {e}") from None
    except (PdfReadError, PyPdfError) as e:
        raise DocumentLoadError(f"corrupt PDF: {e}") from None
    except (AttributeError, RecursionError) as e:
        # How pypdf fails on a loop of references, or objects nested thousands deep.
        raise DocumentLoadError(f"corrupt PDF: pypdf failed on its objects ({e!r:.200})") from None
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


class _TextBudget:
    """Counts the characters a loader produces against ``max_unpacked_bytes``, before
    it builds them: a JSON key path or a CSV header is written again before every value,
    so a 1 MB file can spell out a gigabyte of text, which must stop at the limit rather
    than be built first and measured after."""

    def __init__(self) -> None:
        self.limit = current_limits().max_unpacked_bytes
        self.chars = 0

    def take(self, count: int) -> None:
        """Counts ``count`` characters more."""
        self.chars += count
        if self.chars > self.limit:
            raise DocumentLimitError(
                f"more than {self.limit} characters of text, above max_unpacked_bytes={self.limit}"
            )


def _flatten(value: Any, prefix: str, budget: _TextBudget) -> list[str]:
    """Every non-blank string in ``value`` as ``key.path[0].name: value``, a line each.

    The path is kept as a list of parts and joined only for a line written (counted
    first): an item holding no text costs no copy of a long key path.
    """
    lines: list[str] = []
    parts: list[str] = [prefix]

    def visit(item: Any, size: int) -> None:
        if isinstance(item, str):
            if item.strip():
                # "path: value", after the "\n" ending the line before (of any value
                # of the document: a JSONL file's lines share the budget).
                budget.take((size or 1) + 2 + len(item) + (1 if budget.chars else 0))
                lines.append(f"{''.join(parts) or '$'}: {item}")
            return
        if isinstance(item, dict):
            named = ((("." if size else "") + str(k), v) for k, v in item.items())
        elif isinstance(item, list):
            named = ((f"[{i}]", v) for i, v in enumerate(item))
        else:
            return
        for part, inner in named:
            parts.append(part)
            visit(inner, size + len(part))
            parts.pop()

    visit(value, len(prefix))
    return lines


def load_json(data: bytes, path: Path) -> LoadedDocument:
    try:
        value = json_depth.loads(decode_text(data))
    except json.JSONDecodeError as e:
        raise DocumentLoadError(f"invalid JSON: {e}") from None
    except RecursionError:
        raise DocumentLoadError("its JSON is nested too deeply") from None
    except ValueError as e:  # an integer of more digits than Python reads
        raise DocumentLoadError(f"a number cannot be read: {e}") from None
    return LoadedDocument("\n".join(_flatten(value, "", _TextBudget())), "json")


def load_jsonl(data: bytes, path: Path) -> LoadedDocument:
    lines: list[str] = []
    budget = _TextBudget()
    for n, line in enumerate(decode_text(data).splitlines()):
        if not line.strip():
            continue
        try:
            value = json_depth.loads(line)
        except json.JSONDecodeError as e:
            raise DocumentLoadError(f"line {n + 1}: invalid JSON: {e}") from None
        except RecursionError:
            raise DocumentLoadError(f"line {n + 1}: its JSON is nested too deeply") from None
        except ValueError as e:
            raise DocumentLoadError(f"line {n + 1}: a number cannot be read: {e}") from None
        lines.extend(_flatten(value, f"[{n}]", budget))
    return LoadedDocument("\n".join(lines), "jsonl")


def load_csv(data: bytes, path: Path) -> LoadedDocument:
    text = decode_text(data)
    if path.suffix.lower() == ".tsv":
        dialect: Any = csv.excel_tab
    else:
        try:
            dialect = csv.Sniffer().sniff(text[:8192], delimiters=",;\t|")
        except csv.Error:
            dialect = csv.excel
    # The module's cell bound (128 KiB) is below what a document may hold: raised, never
    # lowered, as it is the process's.
    wanted = min(current_limits().max_unpacked_bytes, 2**31 - 1)  # a C long, even on Windows
    if csv.field_size_limit() < wanted:
        csv.field_size_limit(wanted)
    try:
        rows = [
            row for row in csv.reader(io.StringIO(text), dialect) if any(c.strip() for c in row)
        ]
    except csv.Error as e:
        raise DocumentLoadError(f"invalid CSV: {e}") from None
    if not rows:
        return LoadedDocument("", "csv")
    header = [h.strip() or f"column {i + 1}" for i, h in enumerate(rows[0])]
    budget = _TextBudget()
    lines: list[str] = []
    for row in rows[1:]:
        budget.take(1 if lines else 0)  # the "\n" before this row's line
        cells: list[str] = []
        for i, value in enumerate(row):
            name = header[i] if i < len(header) else f"column {i + 1}"
            if value := " ".join(value.split()):
                # Counted before the cell is built: the header is repeated in every row.
                budget.take(len(name) + 2 + len(value) + (2 if cells else 0))  # "; name: value"
                cells.append(f"{name}: {value}")
        lines.append("; ".join(cells))
    metadata: dict[str, Any] = {"columns": _named(header), "rows": len(rows) - 1}
    if len(metadata["columns"]) < len(header):
        metadata["columns_total"] = len(header)
    return LoadedDocument("\n".join(lines), "csv", metadata)


#: The most column names, and characters of them, a CSV's metadata carries: every
#: fragment of the file carries them and the engine indexes each for filters, so all
#: of a wide header would cost its columns times the file's fragments.
_NAMED_COLUMNS = 100
_NAMED_CHARS = 4096


def _named(header: list[str]) -> list[str]:
    """The first names of ``header`` within ``_NAMED_COLUMNS`` and ``_NAMED_CHARS``."""
    named: list[str] = []
    chars = 0
    for name in header[:_NAMED_COLUMNS]:
        chars += len(name)
        if chars > _NAMED_CHARS:
            break
        named.append(name)
    return named


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
        raise InvalidArgumentError(f"suffix must look like '.ext', got {shown(suffix)}")
    if not callable(loader):
        raise InvalidArgumentError("loader must be callable (bytes, Path) -> LoadedDocument")
    LOADERS[suffix.lower()] = loader


def loader_for(path: str | Path) -> Loader | None:
    """The loader of a file, by its suffix; None for an unsupported type."""
    return LOADERS.get(Path(path).suffix.lower())
