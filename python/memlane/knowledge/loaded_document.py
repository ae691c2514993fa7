"""What every loader shares: the document it returns (``LoadedDocument``), bytes
to text (``decode_text``), JSON-safe metadata values, and a zip's unpacked size."""

from __future__ import annotations

import codecs
import io
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime, time
from pathlib import Path
from typing import Any

from memlane.knowledge.document_limits import DocumentLoadError, IngestLimits

__all__ = ["LoadedDocument", "Loader", "decode_text", "json_safe", "meta_text", "unpacked_size"]


#: Members a zip may have: a .docx has tens. Python's zipfile holds an object a member
#: once it opens one (a million empty members: 657 MB), so the count is read first.
MAX_ZIP_MEMBERS = 10_000
# The smallest entry of a zip's central directory: 46 bytes and a name of one.
_DIRECTORY_ENTRY = 47


def zip_members(data: bytes) -> int:
    """The members the zip ``data`` ends with may hold (0 when it declares none, or is
    no zip: zipfile says why), read from its end records without opening it: the count
    they declare, or what the size of its directory makes room for if more (zipfile
    reads the directory by its size, whatever the count says)."""
    tail = data[-(22 + 0xFFFF) :]
    at = tail.rfind(b"PK\x05\x06")
    if at < 0 or len(tail) < at + 22:
        return 0
    count = int.from_bytes(tail[at + 10 : at + 12], "little")
    size = int.from_bytes(tail[at + 12 : at + 16], "little")
    if at >= 20 and tail[at - 20 : at - 16] == b"PK\x06\x07":
        # Zip64: the locator before the end record gives where the larger fields are.
        start = int.from_bytes(tail[at - 12 : at - 4], "little")
        record = data[start : start + 48]
        if record[:4] == b"PK\x06\x06" and len(record) == 48:
            count = max(count, int.from_bytes(record[32:40], "little"))
            size = max(size, int.from_bytes(record[40:48], "little"))
    return max(count, size // _DIRECTORY_ENTRY)


def unpacked_size(data: bytes) -> int:
    """What a file unpacks to: for a zip (``.docx``), the sizes its members declare (and
    Python's zipfile never reads past them); otherwise its own size."""
    if data[:4] != b"PK\x03\x04" or zip_members(data) > MAX_ZIP_MEMBERS:
        return len(data)  # the loader reports a zip of too many members
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

    def over(self, limits: IngestLimits) -> str | None:
        """Why the document is over ``limits`` once loaded, if it is: its text, or its
        metadata, which each of its fragments carries (a title of a megabyte made every
        fragment a megabyte)."""
        if len(self.text) > (most := limits.max_unpacked_bytes):
            return f"{len(self.text)} characters of text, above max_unpacked_bytes={most}"
        size = len(json.dumps(json_safe(self.metadata), ensure_ascii=False))
        if size > (most := limits.max_metadata_chars):
            return f"metadata of {size} characters, above max_metadata_chars={most}"
        return None


Loader = Callable[[bytes, Path], LoadedDocument]

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
        except UnicodeDecodeError as e:
            text = _mostly_utf8(data, e)
            if text is None:
                text = _detect_decode(data)
        else:
            if "\x00" in text:  # UTF-16 without a BOM is often valid UTF-8, with NULs
                text = _detect_decode(data)
    if "\x00" in text:
        raise DocumentLoadError("binary content (NUL bytes), not text")
    return text


def _mostly_utf8(data: bytes, error: UnicodeDecodeError) -> str | None:
    """UTF-8 text with a few bytes that are not (``error`` its first), decoded as
    UTF-8: a file cut inside its last character (by ``head -c``, a download, a log
    rotated mid-write) without that character, and one whose valid multi-byte
    characters outnumber its invalid bytes ten to one with each of those replaced by
    U+FFFD; else None. A detector reads such a file as a legacy encoding, and every
    non-ASCII character of it as mojibake; a text of a legacy encoding seldom holds a
    valid multi-byte sequence at all."""
    if error.end == len(data) and error.reason == "unexpected end of data":
        head = data[: error.start].decode("utf-8")  # valid up to the first error
        # Cut UTF-8 only when what comes before shows it: a Latin-1 file may end in "é".
        return None if head.isascii() else head
    text = data.decode("utf-8", errors="replace")
    replaced = text.count("\ufffd") - data.count("\ufffd".encode())
    wide = len(text) - len(text.encode("ascii", "ignore")) - text.count("\ufffd")
    return text if wide >= 10 * replaced else None


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


def meta_text(value: object) -> str | None:
    """A metadata value (a title, an author) as stripped text; None if it is empty."""
    text = str(value).strip() if value is not None else ""
    return text or None
