"""Chunkers: exact offsets, sizes, overlaps and Unicode safety, as properties (hypothesis)."""

from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memlane.errors import InvalidArgumentError
from memlane.knowledge.chunking import (
    Chunk,
    Chunker,
    MarkdownSplitter,
    RecursiveCharacterSplitter,
    TokenSplitter,
    grapheme_spans,
)

# Pieces that exercise every separator, whitespace runs, combining marks, ZWJ
# emoji, flags, CRLF, astral characters and right-to-left text.
PIECES = st.sampled_from(
    [
        "a",
        "word",
        "Tea",
        " ",
        "  ",
        "\n",
        "\n\n",
        "\r\n",
        ". ",
        ".",
        "\t",
        "e\u0301",  # e + combining acute
        " \u0301",  # a lone accent: the space is its base
        "\u00a0\u0308",  # the same on a no-break space
        "\U0001f469\u200d\U0001f4bb",  # woman technologist (ZWJ sequence)
        "\U0001f1eb\U0001f1f7",  # a flag: two regional indicators
        "\U0001f44d\U0001f3fd",  # thumbs up, skin tone
        "\u6771\u4eac",
        "\u05e9\u05dc\u05d5\u05dd",
        "\U00010348",
        "x\ufe0f",
    ]
)
TEXTS = st.lists(PIECES, max_size=120).map("".join)


def boundaries(text: str) -> set[int]:
    return {s for s, _ in grapheme_spans(text)} | {len(text)}


def check_common(text: str, chunks: list[Chunk], overlap: int | None) -> None:
    """Exact slices, no empty or untrimmed chunk, in order, overlap bounded, whole graphemes."""
    cuts = boundaries(text)
    for c in chunks:
        assert text[c.start : c.end] == c.text
        assert c.text.strip(), "empty or whitespace-only chunk"
        # Trimmed, but for a space that carries a mark: the base of its grapheme.
        first = c.text[: grapheme_spans(c.text)[0][1]]
        assert c.text == c.text.rstrip()
        assert c.text == c.text.lstrip() or (len(first) > 1 and not first.isspace())
        assert c.start in cuts and c.end in cuts, "a chunk cuts a grapheme"
    for a, b in itertools.pairwise(chunks):
        assert a.start < b.start and a.end < b.end
        if overlap is not None:
            assert a.end - b.start <= overlap


def check_covered(text: str, chunks: list[Chunk], start: int = 0, end: int | None = None) -> None:
    covered = set()
    for c in chunks:
        covered.update(range(c.start, c.end))
    for i in range(start, len(text) if end is None else end):
        if not text[i].isspace():
            assert i in covered, f"character {i} ({text[i]!r}) is in no chunk"


# -- recursive character splitter ----------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(text=TEXTS, size=st.integers(1, 60), data=st.data())
def test_recursive_properties(text: str, size: int, data: st.DataObject) -> None:
    overlap = data.draw(st.integers(0, size - 1))
    chunks = RecursiveCharacterSplitter(size, overlap).split(text)
    check_common(text, chunks, overlap)
    check_covered(text, chunks)
    for c in chunks:
        # Longer than chunk_size only as one grapheme that long.
        assert len(c.text) <= size or grapheme_spans(c.text) == [(0, len(c.text))]


@settings(max_examples=100, deadline=None)
@given(
    n=st.integers(1, 400),
    size=st.integers(2, 50),
    data=st.data(),
)
def test_recursive_overlap_is_as_configured_without_separators(
    n: int, size: int, data: st.DataObject
) -> None:
    overlap = data.draw(st.integers(0, size - 1))
    text = "".join(chr(ord("a") + i % 26) for i in range(n))
    chunks = RecursiveCharacterSplitter(size, overlap).split(text)
    check_common(text, chunks, overlap)
    check_covered(text, chunks)
    for a, b in itertools.pairwise(chunks):
        assert len(a.text) == size
        assert a.end - b.start == overlap
    assert chunks[-1].end == n


def test_recursive_prefers_paragraphs_then_lines_then_sentences() -> None:
    para = "First sentence here. Second sentence here."
    text = f"{para}\n\n{para}"
    chunks = RecursiveCharacterSplitter(60, 0).split(text)
    assert [c.text for c in chunks] == [para, para]
    lines = "line one is here\nline two is here\nline three"
    assert [c.text for c in RecursiveCharacterSplitter(20, 0).split(lines)] == [
        "line one is here",
        "line two is here",
        "line three",
    ]
    sentences = "Alpha beta. Gamma delta. Epsilon."
    assert [c.text for c in RecursiveCharacterSplitter(14, 0).split(sentences)] == [
        "Alpha beta.",
        "Gamma delta.",
        "Epsilon.",
    ]


def test_recursive_defaults_and_overlap_of_words() -> None:
    s = RecursiveCharacterSplitter()
    assert (s.chunk_size, s.chunk_overlap) == (1000, 200)
    assert s.separators == ("\n\n", "\n", ". ", " ")
    text = " ".join(f"w{i:03d}" for i in range(1000))  # 4,999 characters
    chunks = s.split(text)
    check_common(text, chunks, 200)
    check_covered(text, chunks)
    assert all(len(c.text) <= 1000 for c in chunks)
    for a, b in itertools.pairwise(chunks):
        # Words of 5 characters: the overlap is as close to 200 as whole words allow.
        assert 190 <= a.end - b.start <= 200


def test_recursive_small_cases() -> None:
    s = RecursiveCharacterSplitter(10, 2)
    assert s.split("") == []
    assert s.split(" \n\n \t ") == []
    assert s.split("  hi  ") == [Chunk("hi", 2, 4)]
    # A grapheme longer than the size stays whole.
    zwj = "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466"
    chunks = RecursiveCharacterSplitter(2, 0).split(zwj + "ab")
    assert chunks[0].text == zwj
    assert "".join(c.text for c in chunks) == zwj + "ab"


@pytest.mark.parametrize(
    ("size", "overlap"), [(0, 0), (10, 10), (10, 11), (-1, 0), (10, -1), (True, 0), (1.5, 0)]
)
def test_recursive_rejects_bad_sizes(size: object, overlap: object) -> None:
    with pytest.raises(InvalidArgumentError):
        RecursiveCharacterSplitter(size, overlap)  # type: ignore[arg-type]


def test_recursive_rejects_bad_separators() -> None:
    with pytest.raises(InvalidArgumentError):
        RecursiveCharacterSplitter(separators="\n")
    with pytest.raises(InvalidArgumentError):
        RecursiveCharacterSplitter(separators=["\n", ""])


def test_chunkers_follow_the_protocol() -> None:
    assert isinstance(RecursiveCharacterSplitter(), Chunker)
    assert isinstance(MarkdownSplitter(), Chunker)
    assert "chunk_size=1000" in repr(RecursiveCharacterSplitter())


# -- graphemes -------------------------------------------------------------------------


def test_grapheme_spans() -> None:
    text = "e\u0301\r\n\U0001f1eb\U0001f1f7\U0001f469\u200d\U0001f4bbx"
    spans = grapheme_spans(text)
    assert [text[s:e] for s, e in spans] == [
        "e\u0301",
        "\r\n",
        "\U0001f1eb\U0001f1f7",
        "\U0001f469\u200d\U0001f4bb",
        "x",
    ]


# -- token splitter ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def token_splitter() -> TokenSplitter:
    return TokenSplitter(chunk_size=16, chunk_overlap=4)


WORDS = st.lists(
    st.sampled_from(
        ["the", "model", "naïve", "café", "東京", "unbelievably", "x", "\n", ",", "😀", "  "]
    ),
    max_size=80,
).map(" ".join)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=WORDS)
def test_token_windows(token_splitter: TokenSplitter, text: str) -> None:
    chunks = token_splitter.split(text)
    check_common(text, chunks, None)
    n = token_splitter.count_tokens(text)
    if n == 0:
        assert chunks == []
        return
    assert chunks[0].metadata["token_start"] == 0
    assert chunks[-1].metadata["token_end"] == n
    for c in chunks:
        assert 0 < c.metadata["token_end"] - c.metadata["token_start"] <= 16
    for a, b in itertools.pairwise(chunks):
        # Exactly chunk_overlap tokens shared by consecutive windows.
        assert a.metadata["token_end"] - b.metadata["token_start"] == 4
    check_covered(text, chunks)


def test_token_splitter_defaults_and_real_text() -> None:
    s = TokenSplitter()
    assert (s.chunk_size, s.chunk_overlap) == (512, 20)
    text = "Memlane stores memories for agents. " * 200
    chunks = s.split(text)
    n = s.count_tokens(text)
    assert n == 1600  # 8 tokens a sentence: windows start at 0, 492, 984 and 1476
    assert [c.metadata["token_start"] for c in chunks] == [0, 492, 984, 1476]
    for c in chunks:
        assert text[c.start : c.end] == c.text
        assert s.count_tokens(c.text) <= 512
    assert s.split("") == []
    assert s.split("\x00\x01 ") == []  # no token: no chunk


def test_token_splitter_takes_a_tokenizer_or_path(tmp_path: object) -> None:
    from tokenizers import Tokenizer

    from memlane.embeddings import default_tokenizer_path

    path = default_tokenizer_path()
    tok = Tokenizer.from_file(str(path))
    tok.enable_truncation(8)
    s = TokenSplitter(tok, chunk_size=4, chunk_overlap=1)
    assert tok.truncation is not None  # the caller's tokenizer is left as it was
    assert len(s.split("one two three four five six seven eight nine ten eleven")) == 4
    assert TokenSplitter(str(path), 8, 0).count_tokens("hello world") == 2
    with pytest.raises(InvalidArgumentError):
        TokenSplitter(42)
    with pytest.raises(InvalidArgumentError):
        TokenSplitter("no/such/tokenizer.json")
    with pytest.raises(InvalidArgumentError):
        TokenSplitter(chunk_size=20, chunk_overlap=20)


# -- markdown splitter -------------------------------------------------------------------


DOC = """Intro line before any heading.

# Guide

Welcome to the guide.

## Deploy

Run `make deploy`.

```sh
# not a heading: a comment in code
make deploy
```

### Rollback
Use `make rollback`.

Setext Title
============

Body under setext.
"""


def test_markdown_heading_paths_and_offsets() -> None:
    chunks = MarkdownSplitter().split(DOC)
    check_common(DOC, chunks, None)
    got = [(c.prefix, c.text.splitlines()[0]) for c in chunks]
    assert got == [
        ("", "Intro line before any heading."),
        ("Guide\n\n", "Welcome to the guide."),
        ("Guide > Deploy\n\n", "Run `make deploy`."),
        ("Guide > Deploy > Rollback\n\n", "Use `make rollback`."),
        ("Setext Title\n\n", "Body under setext."),
    ]
    assert "# not a heading" in chunks[2].text  # code stays with its section
    assert chunks[3].metadata["headings"] == ["Guide", "Deploy", "Rollback"]
    assert chunks[1].content == "Guide\n\nWelcome to the guide."
    for c in chunks:  # heading lines belong to no chunk
        assert not re.search(r"^#{1,6} ", c.text, re.MULTILINE) or "```" in c.text


def test_markdown_long_section_is_split_with_its_prefix() -> None:
    body = " ".join(["sentence number one."] * 100)
    text = f"# Title\n\n{body}\n\n# Next\n\nshort"
    chunks = MarkdownSplitter(200, 40).split(text)
    check_common(text, chunks, 40)
    titled = [c for c in chunks if c.prefix == "Title\n\n"]
    assert len(titled) > 5 and all(len(c.text) <= 200 for c in titled)
    assert chunks[-1].prefix == "Next\n\n" and chunks[-1].text == "short"
    # Overlap never crosses a heading.
    assert titled[-1].end <= text.index("# Next")


def test_markdown_max_level_and_crlf() -> None:
    text = "# A\r\n\r\ntext a\r\n\r\n## B\r\n\r\ntext b\r\n"
    chunks = MarkdownSplitter(max_level=1).split(text)
    check_common(text, chunks, None)
    assert [c.prefix for c in chunks] == ["A\n\n"]
    assert "## B" in chunks[0].text
    chunks = MarkdownSplitter().split(text)
    assert [(c.prefix, c.text) for c in chunks] == [("A\n\n", "text a"), ("A > B\n\n", "text b")]


HEADING = st.tuples(st.integers(1, 4), st.sampled_from(["Alpha", "Beta", "Gamma δ", "Ω"]))
BLOCK = st.one_of(HEADING, st.sampled_from(["para one.", "para two, longer text here.", "x y z"]))


def test_a_heading_without_text_is_a_chunk_of_its_line() -> None:
    text = "# Deploy guide\n## Blue green rollout\n\nIntro.\n\n## Rollback\n# Last\n"
    chunks = MarkdownSplitter().split(text)
    assert [(c.prefix, c.text, c.metadata["headings"]) for c in chunks] == [
        ("Deploy guide > Blue green rollout\n\n", "Intro.", ["Deploy guide", "Blue green rollout"]),
        ("Deploy guide\n\n", "## Rollback", ["Deploy guide", "Rollback"]),
        ("", "# Last", ["Last"]),
    ]
    check_common(text, chunks, None)


@settings(max_examples=200, deadline=None)
@given(blocks=st.lists(BLOCK, max_size=25), size=st.integers(5, 40))
def test_markdown_prefix_is_the_heading_path(blocks: list[object], size: int) -> None:
    lines = []
    for b in blocks:
        lines.append(f"{'#' * b[0]} {b[1]}" if isinstance(b, tuple) else b)
    text = "\n\n".join(lines)
    chunks = MarkdownSplitter(size, size // 3).split(text)
    check_common(text, chunks, None)
    # Reference: the heading path in force at each chunk's start, from the lines; for
    # a chunk that is a heading's own line, the path of the headings above it.
    for c in chunks:
        own = re.fullmatch(r"(#{1,6}) .*", c.text)
        path: list[tuple[int, str]] = []
        for m in re.finditer(r"^(#{1,6}) (.*)$", text[: c.end if own else c.start], re.MULTILINE):
            level = len(m.group(1))
            while path and path[-1][0] >= level:
                path.pop()
            path.append((level, m.group(2)))
        expected = " > ".join(t for _, t in (path[:-1] if own else path))
        whole = expected + "\n\n" if expected else ""
        if len(whole) <= size // 2:
            assert c.prefix == whole
        elif size // 2 < len("…\n\n"):  # not even the mark fits
            assert c.prefix == ""
        else:  # cut to half the size, as long as fits
            assert c.prefix.endswith("…\n\n") and len(c.prefix) <= size // 2
            cut = c.prefix[: -len("…\n\n")]
            assert expected.startswith(cut)
            longer = {expected[:k].rstrip() for k in range(len(cut), len(expected) + 1)} - {cut}
            assert all(len(t + "…\n\n") > size // 2 for t in longer)
        if own:
            # Only when neither text nor a deeper heading follows it (its section would
            # otherwise leave nothing searchable).
            rest = text[c.end :].lstrip()
            after = re.match(r"#+ ", rest)
            assert not rest or (after is not None and len(after.group()) - 1 <= len(own[1]))
        else:
            assert not re.search(r"^#{1,6} ", c.text, re.MULTILINE)
    # Every character outside heading lines is in some chunk.
    body = re.sub(r"^#{1,6} .*$", lambda m: " " * len(m.group(0)), text, flags=re.MULTILINE)
    check_covered(body, chunks)
