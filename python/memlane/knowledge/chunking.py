"""Splitting documents into chunks with exact offsets.

Every chunker returns ``Chunk`` objects whose ``text`` is an exact slice of
the input, ``text[chunk.start:chunk.end] == chunk.text``, in order, never empty
nor whitespace-only. Consecutive chunks overlap by at most the configured
overlap. Offsets count code points (Python ``str`` indices), and no splitter
cuts inside a grapheme (a base character with its combining marks, a ZWJ
emoji sequence, a CRLF), so a chunk is longer than ``chunk_size`` only when
it is a single grapheme that long.

- ``RecursiveCharacterSplitter``: splits on paragraphs, then lines, then
  sentences, then words, then characters, and packs the pieces into chunks of
  at most ``chunk_size`` characters (1000) overlapping by up to
  ``chunk_overlap`` (200), as LangChain's splitter of that name does.
- ``TokenSplitter``: windows of ``chunk_size`` tokens (512) of a
  tokenizer, by default the default embedder's, overlapping by
  ``chunk_overlap`` tokens (20), as elizaOS splits knowledge. The default model
  reads only its first 256 tokens ([CLS] and [SEP] included): the vector of a
  512-token chunk stands for its first 254 tokens, while text search sees all
  of it. ``TokenSplitter(chunk_size=254)`` makes the vector cover the chunk.
- ``MarkdownSplitter``: splits at headings first (parsed by markdown-it,
  so a ``#`` in a code block is no heading), then each section recursively;
  a chunk's ``prefix`` holds its heading path (``"Guide > Deploy"``)
  and ``content`` is what to store and embed: prefix and text.

Ingestion given no chunker uses ``default_chunkers``: the recursive and markdown
splitters measuring in the default model's tokens, 128 (heading path included)
overlapping by 20, so no fragment is longer than the model reads (256 tokens, [CLS]
and [SEP] included). A chunker is anything with a ``split(text) -> list[Chunk]`` method
(the ``Chunker`` protocol).
"""

from __future__ import annotations

import functools
import re
import sys
import unicodedata
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from os import PathLike
from typing import Any, Protocol, runtime_checkable

from memlane.errors import InvalidArgumentError
from memlane.knowledge.document_limits import fragments_made

__all__ = [
    "CHUNK_OVERLAP",
    "CHUNK_TOKENS",
    "DEFAULT_SEPARATORS",
    "Chunk",
    "Chunker",
    "MarkdownSplitter",
    "RecursiveCharacterSplitter",
    "TokenSplitter",
    "default_chunkers",
    "grapheme_spans",
]

#: Paragraphs, lines, sentences, words; then characters.
DEFAULT_SEPARATORS = ("\n\n", "\n", ". ", " ")


@dataclass(frozen=True, slots=True)
class Chunk:
    """A piece of a text: ``text == source[start:end]``.

    ``prefix`` is context to put before the text when storing or embedding it
    (a heading path); ``metadata`` holds what the chunker knows about the
    chunk (headings, token positions).
    """

    text: str
    start: int
    end: int
    metadata: Mapping[str, Any] = field(default_factory=dict)
    prefix: str = ""

    @property
    def content(self) -> str:
        """What to store and embed: the prefix, then the text."""
        return self.prefix + self.text


@runtime_checkable
class Chunker(Protocol):
    """Splits a text into [`Chunk`][memlane.knowledge.Chunk] objects with exact offsets,
    in order."""

    def split(self, text: str) -> list[Chunk]: ...


# -- shared helpers -----------------------------------------------------------------


def _size(value: object, label: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentError(f"{label} must be an int, got {type(value).__name__}")
    if value < low:
        raise InvalidArgumentError(f"{label} must be at least {low}, got {value}")
    return value


def _sizes(chunk_size: object, chunk_overlap: object) -> tuple[int, int]:
    size = _size(chunk_size, "chunk_size", 1)
    overlap = _size(chunk_overlap, "chunk_overlap", 0)
    if overlap >= size:
        raise InvalidArgumentError(
            f"chunk_overlap must be smaller than chunk_size, got {overlap} >= {size}"
        )
    return size, overlap


def _extends(ch: str) -> bool:
    """Whether ``ch`` (a character, or none) belongs to the grapheme before it."""
    if not ch:
        return False
    if ch == "\u200d" or "\ufe00" <= ch <= "\ufe0f" or "\U000e0100" <= ch <= "\U000e01ef":
        return True  # zero-width joiner, variation selectors
    if "\U0001f3fb" <= ch <= "\U0001f3ff" or "\U000e0020" <= ch <= "\U000e007f":
        return True  # emoji skin tones, tag characters (flag sequences)
    return unicodedata.category(ch) in ("Mn", "Mc", "Me")


def _regional(ch: str) -> bool:
    return "\U0001f1e6" <= ch <= "\U0001f1ff"


def _pair(a: str, b: str) -> bool:
    """CRLF, or two regional indicators (a flag)."""
    return (a == "\r" and b == "\n") or (_regional(a) and _regional(b))


def grapheme_spans(text: str, start: int = 0, end: int | None = None) -> list[tuple[int, int]]:
    """``text[start:end]`` cut into graphemes, as ``(start, end)`` spans.

    An approximation of Unicode's extended grapheme clusters that needs no
    tables: combining marks, joiners, variation selectors, skin tones and tag
    characters stay with what precedes them, a character after a ZWJ joins
    the cluster, regional indicators pair up into flags, and CRLF stays whole.
    """
    return list(_graphemes(text, start, len(text) if end is None else end))


def _graphemes(text: str, start: int, stop: int) -> Iterator[tuple[int, int]]:
    """``grapheme_spans`` one at a time: a word of millions of characters is cut as
    its chunks are packed, not held as a span a character first."""
    i = start
    while i < stop:
        j = i + 1
        if j < stop and _pair(text[i], text[j]):
            j += 1
        while j < stop and (_extends(text[j]) or text[j - 1] == "\u200d"):
            j += 1
        yield (i, j)
        i = j


def _trimmed(text: str, start: int, end: int) -> tuple[int, int]:
    # A space that carries a combining mark (how a lone accent is written) is the base
    # of its grapheme: stripped, the chunk would start with the bare mark.
    while start < end and text[start].isspace() and not _extends(text[start + 1 : start + 2]):
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


class _Emitter:
    """Collects chunk spans: trims whitespace, drops empty ones and ones inside another.

    Starts never decrease (a window starts where the last one did or later),
    so a new span inside the last is dropped, and a last span inside the new
    one is replaced by it.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        self.spans: list[tuple[int, int]] = []

    def emit(self, start: int, end: int) -> None:
        start, end = _trimmed(self.text, start, end)
        if start >= end:
            return
        if self.spans:
            last_start, last_end = self.spans[-1]
            if end <= last_end:
                return
            if last_start == start:
                self.spans.pop()
                fragments_made(-1)
        fragments_made(1)
        self.spans.append((start, end))


# -- recursive character splitter ------------------------------------------------


class RecursiveCharacterSplitter:
    """Chunks of at most ``chunk_size`` characters overlapping by up to ``chunk_overlap``.

    ``length`` measures a piece instead of its characters (LangChain's
    ``length_function``): ``length=TokenSplitter().count_tokens`` sizes chunks in the
    default model's tokens, so that no chunk is longer than the model reads.

    The text is cut after each occurrence of the first separator it contains
    (a separator ends the piece before it); a piece still longer than
    ``chunk_size`` is cut with the next separator, and past the last one into
    graphemes. The pieces are then packed in order into chunks; each chunk
    after the first starts with the last pieces of the one before, as many as
    fit in ``chunk_overlap`` characters. Chunks are trimmed of surrounding
    whitespace.
    """

    def __init__(
        self,
        chunk_size: int = 1000,
        chunk_overlap: int = 200,
        separators: Sequence[str] = DEFAULT_SEPARATORS,
        *,
        length: Callable[[str], int] | None = None,
    ) -> None:
        self.chunk_size, self.chunk_overlap = _sizes(chunk_size, chunk_overlap)
        if length is not None and not callable(length):
            raise InvalidArgumentError(f"length must be callable, got {type(length).__name__}")
        self.length = length
        if isinstance(separators, str):
            raise InvalidArgumentError("separators must be a list of str, got a single str")
        seps = tuple(separators)
        if not all(isinstance(s, str) and s for s in seps):
            raise InvalidArgumentError("separators must be non-empty strings")
        self.separators = seps

    def __repr__(self) -> str:
        return (
            f"RecursiveCharacterSplitter(chunk_size={self.chunk_size}, "
            f"chunk_overlap={self.chunk_overlap}, separators={list(self.separators)!r}"
            f"{_length_repr(self.length)})"
        )

    def split(self, text: str) -> list[Chunk]:
        return [Chunk(text[s:e], s, e) for s, e in self.spans(text)]

    def _len(self, text: str, start: int, end: int) -> int:
        return end - start if self.length is None else self.length(text[start:end])

    def spans(self, text: str, start: int = 0, end: int | None = None) -> list[tuple[int, int]]:
        """The chunks of ``text[start:end]`` as ``(start, end)`` offsets into ``text``."""
        stop = len(text) if end is None else end
        if not isinstance(text, str):
            raise InvalidArgumentError(f"text must be a str, got {type(text).__name__}")
        out = _Emitter(text)
        self._merge(text, self._pieces(text, start, stop, 0), out)
        return out.spans

    def _pieces(self, text: str, start: int, end: int, level: int) -> Iterable[tuple[int, int]]:
        """Contiguous spans covering ``[start, end)``, each short enough if possible."""
        if self._len(text, start, end) <= self.chunk_size:
            yield (start, end)
            return
        for i in range(level, len(self.separators)):
            sep = self.separators[i]
            at = text.find(sep, start, end)
            if at < 0:
                continue
            piece_start = start
            while at >= 0:
                cut = at + len(sep)
                if _extends(text[cut : cut + 1]):  # the separator is a mark's base: no cut
                    at = text.find(sep, cut, end)
                    continue
                yield from self._pieces(text, piece_start, cut, i + 1)
                piece_start = cut
                at = text.find(sep, cut, end)
            if piece_start < end:
                yield from self._pieces(text, piece_start, end, i + 1)
            return
        yield from _graphemes(text, start, end)

    def _merge(self, text: str, pieces: Iterable[tuple[int, int]], out: _Emitter) -> None:
        size, overlap = self.chunk_size, self.chunk_overlap
        # (start, end, length) of the pieces of the chunk being packed. Pieces meet at
        # separators, so their token counts add up to the chunk's (a word cut into
        # graphemes counts at least its own tokens: a chunk never exceeds the size).
        window: deque[tuple[int, int, int]] = deque()
        total = 0
        for s, e in pieces:
            n = self._len(text, s, e)
            if window and total + n > size:
                out.emit(window[0][0], window[-1][1])
                while window and (total > overlap or total + n > size):
                    total -= window.popleft()[2]
            window.append((s, e, n))
            total += n
        if window:
            out.emit(window[0][0], window[-1][1])


def _length_repr(length: Callable[[str], int] | None) -> str:
    """``length`` in a splitter's repr (which keys ingestion's record of how a file was cut)."""
    if length is None:
        return ""
    owner = getattr(length, "__self__", None)
    name = repr(owner) if owner is not None else getattr(length, "__qualname__", repr(length))
    return f", length={name}"


# -- token splitter ----------------------------------------------------------------


def _is_tokenizers_tokenizer(obj: object) -> bool:
    """Whether ``obj`` is a ``tokenizers.Tokenizer`` (without importing tokenizers if
    it is not: only its owner has it installed)."""
    tokenizers = sys.modules.get("tokenizers")
    return tokenizers is not None and isinstance(obj, tokenizers.Tokenizer)


class TokenSplitter:
    """Windows of ``chunk_size`` tokens; each starts ``chunk_size - chunk_overlap`` after the last.

    Args:
        tokenizer: the path of a ``tokenizer.json``, or a ``tokenizers.Tokenizer``;
            by default the default embedder's (MiniLM's WordPiece). memlane
            reads BERT's WordPiece files itself; other files need the
            ``tokenizers`` library (``pip install 'memlane[tokenizers]'``).
            A copy is used, without padding or truncation.
        chunk_size: tokens per chunk, special tokens not counted (512).
        chunk_overlap: tokens shared by consecutive chunks (20).

    A chunk spans from its first token's first character to its last token's
    last one; ``metadata`` holds ``token_start`` and ``token_end``. Text that
    makes no token (whitespace, control characters) belongs to no chunk.
    """

    def __init__(
        self,
        tokenizer: Any = None,
        chunk_size: int = 512,
        chunk_overlap: int = 20,
    ) -> None:
        self.chunk_size, self.chunk_overlap = _sizes(chunk_size, chunk_overlap)
        from memlane.embeddings.tokenizer import HfTokenizer, load_tokenizer

        if tokenizer is None:
            from memlane.embeddings import default_tokenizer_path

            tokenizer = default_tokenizer_path()
        if isinstance(tokenizer, str | PathLike):
            self._tokenizer = load_tokenizer(tokenizer, None, InvalidArgumentError)
        elif _is_tokenizers_tokenizer(tokenizer):
            self._tokenizer = HfTokenizer(type(tokenizer).from_str(tokenizer.to_str()), None)
        else:
            raise InvalidArgumentError(
                "tokenizer must be a path or a tokenizers.Tokenizer, got "
                f"{type(tokenizer).__name__}"
            )

    def __repr__(self) -> str:
        return f"TokenSplitter(chunk_size={self.chunk_size}, chunk_overlap={self.chunk_overlap})"

    def count_tokens(self, text: str) -> int:
        """Tokens in ``text``, special tokens not counted."""
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def split(self, text: str) -> list[Chunk]:
        if not isinstance(text, str):
            raise InvalidArgumentError(f"text must be a str, got {type(text).__name__}")
        if not text:
            return []
        offsets = self._tokenizer.encode(text, add_special_tokens=False).offsets
        n = len(offsets)
        step = self.chunk_size - self.chunk_overlap
        chunks: list[Chunk] = []
        first = 0
        while first < n:
            last = min(first + self.chunk_size, n)
            window = offsets[first:last]
            start = min(s for s, _ in window)
            end = max(e for _, e in window)
            start, end = _trimmed(text, start, end)
            if start < end:
                meta = {"token_start": first, "token_end": last}
                chunks.append(Chunk(text[start:end], start, end, meta))
            if last == n:
                break
            first += step
        return chunks


# -- markdown splitter ----------------------------------------------------------------

_NEWLINE = re.compile(r"\r\n?|\n")


def _line_starts(text: str) -> list[int]:
    """Offset of each line's first character, as markdown-it numbers lines; then len(text)."""
    starts = [0]
    starts.extend(m.end() for m in _NEWLINE.finditer(text))
    starts.append(len(text))
    return starts


def markdown_headings(text: str) -> list[tuple[int, str, int, int]]:
    """The headings of a markdown text as ``(level, title, start, end)``, ``end`` after its line(s).

    ATX (``# Title``) and setext (``Title`` over ``===``) headings, found by
    markdown-it's CommonMark parser.
    """
    from markdown_it import MarkdownIt

    tokens = MarkdownIt("commonmark").parse(text)
    lines = _line_starts(text)
    last_line = len(lines) - 1
    out: list[tuple[int, str, int, int]] = []
    for i, tok in enumerate(tokens):
        if tok.type != "heading_open" or tok.map is None:
            continue
        inline = tokens[i + 1] if i + 1 < len(tokens) else None
        title = inline.content.strip() if inline is not None and inline.type == "inline" else ""
        first, after = tok.map
        out.append(
            (int(tok.tag[1:]), title, lines[min(first, last_line)], lines[min(after, last_line)])
        )
    return out


class MarkdownSplitter:
    """Splits at headings, then each section with a
    [`RecursiveCharacterSplitter`][memlane.knowledge.RecursiveCharacterSplitter].

    A section is the text between a heading's line and the next heading of
    level ``max_level`` or above; deeper headings stay inside their section.
    A heading line is part of no chunk's text (but the one chunk of a heading with no
    text under it, and no deeper heading to carry it): each chunk's ``prefix``
    is its heading path joined by ``separator`` and followed by a blank line (cut
    to half of ``chunk_size``, ending in "…", when longer; none when not even that
    fits), and
    ``metadata["headings"]`` lists it whole. Overlap never crosses a heading.
    """

    def __init__(
        self,
        chunk_size: int = 1000,
        chunk_overlap: int = 200,
        *,
        max_level: int = 6,
        separator: str = " > ",
        separators: Sequence[str] = DEFAULT_SEPARATORS,
        length: Callable[[str], int] | None = None,
    ) -> None:
        self._inner = RecursiveCharacterSplitter(
            chunk_size, chunk_overlap, separators, length=length
        )
        self.chunk_size, self.chunk_overlap = chunk_size, chunk_overlap
        self.max_level = _size(max_level, "max_level", 1)
        if not isinstance(separator, str):
            raise InvalidArgumentError(f"separator must be a str, got {type(separator).__name__}")
        self.separator = separator

    def __repr__(self) -> str:
        return (
            f"MarkdownSplitter(chunk_size={self.chunk_size}, chunk_overlap={self.chunk_overlap}, "
            f"max_level={self.max_level}, separator={self.separator!r}, "
            f"separators={list(self._inner.separators)!r}{_length_repr(self._inner.length)})"
        )

    def split(self, text: str) -> list[Chunk]:
        if not isinstance(text, str):
            raise InvalidArgumentError(f"text must be a str, got {type(text).__name__}")
        # (heading path, the heading line's span, the body's span) of each section.
        sections: list[tuple[list[str], tuple[int, int], int, int]] = []
        path: list[tuple[int, str]] = []
        line, body_start = (0, 0), 0
        for level, title, start, end in markdown_headings(text):
            if level > self.max_level:
                continue
            sections.append(([t for _, t in path], line, body_start, start))
            while path and path[-1][0] >= level:
                path.pop()
            path.append((level, title))
            line, body_start = (start, end), end
        sections.append(([t for _, t in path], line, body_start, len(text)))

        chunks: list[Chunk] = []
        for i, (headings, (hs, he), start, end) in enumerate(sections):
            prefix = self._prefix(headings)
            meta = {"headings": headings} if headings else {}
            spans = self._section(prefix).spans(text, start, end)
            for s, e in spans:
                chunks.append(Chunk(text[s:e], s, e, meta, prefix))
            after = sections[i + 1][0] if i + 1 < len(sections) else []
            carried = len(after) > len(headings) and after[: len(headings)] == headings
            if headings and not spans and not carried:
                # A heading with no body, and no deeper one to carry it in its prefix: its
                # line is the text (an outline's headings would otherwise be lost), whole,
                # as every other chunk's prefix holds it whole.
                s, e = _trimmed(text, hs, he)
                chunks.append(Chunk(text[s:e], s, e, meta, self._prefix(headings[:-1])))
        return chunks

    def _prefix(self, headings: list[str]) -> str:
        """The heading path a section's chunks carry, cut (ending in "…") to half the
        chunk size: what is left of the size is the body's, and a long heading would
        otherwise leave room for a few tokens a chunk (and a chunk longer than a model
        reads)."""
        prefix = self.separator.join(h for h in headings if h)
        if not prefix:
            return ""
        measure = self._inner.length or len
        limit = self.chunk_size // 2
        if measure(prefix + "\n\n") <= limit:
            return prefix + "\n\n"
        # The longest cut that fits, by bisection: a few measures of the long heading.
        lo, hi = 0, len(prefix)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if measure(prefix[:mid].rstrip() + "…\n\n") <= limit:
                lo = mid
            else:
                hi = mid - 1
        cut = prefix[:lo].rstrip() + "…\n\n"
        # A size too small for even the mark: none (``metadata["headings"]`` holds it).
        return cut if measure(cut) <= limit else ""

    def _section(self, prefix: str) -> RecursiveCharacterSplitter:
        """The splitter of a section: the prefix is embedded with each chunk, so with a
        ``length`` (a model's limit) it comes off the size, leaving room for the overlap."""
        inner = self._inner
        if inner.length is None or not prefix:
            return inner
        size = max(inner.chunk_size - inner.length(prefix), inner.chunk_overlap + 1)
        if size == inner.chunk_size:
            return inner
        return RecursiveCharacterSplitter(
            size, inner.chunk_overlap, inner.separators, length=inner.length
        )


# -- ingestion's defaults ---------------------------------------------------------

#: The default chunkers' size, in the default model's tokens, heading path included:
#: within the 256 it reads, so every fragment's vector stands for all of it. Of the
#: chunkers that fit, the best on retrieval (``benches/bench_chunking.py``, figures in
#: benches/README.md).
CHUNK_TOKENS = 128
#: The default chunkers' overlap, in the same tokens.
CHUNK_OVERLAP = 20


@functools.cache
def default_chunkers() -> tuple[RecursiveCharacterSplitter, MarkdownSplitter]:
    """The chunkers of an ingestion given none: (plain text, markdown and Word), both
    measuring in the default model's tokens (``CHUNK_TOKENS``, ``CHUNK_OVERLAP``)."""
    count = TokenSplitter(chunk_size=CHUNK_TOKENS).count_tokens
    return (
        RecursiveCharacterSplitter(CHUNK_TOKENS, CHUNK_OVERLAP, length=count),
        MarkdownSplitter(CHUNK_TOKENS, CHUNK_OVERLAP, length=count),
    )
