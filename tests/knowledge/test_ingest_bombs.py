"""Ingest bombs (issue 33): small files whose parsing would cost far more than their size.

A .docx cell spanning 2**31 - 1 columns, three million empty paragraphs under the
unpacked-size cap, vertically merged cells that repeat a long text in every row, YAML
front matter of nested aliases (a "billion laughs"), and an HTML page of three million
<p> tags (9 MB, which lxml's tree made 645 MiB; 100 MB made 6.4 GiB). Each is ingested in a child
process whose address space is capped at 1 GiB, so that code which expands them fails
there (MemoryError) instead of taking the machine: the file must be loaded within
bounds or reported as over the limit that stopped it, and the other files ingested.
Smaller cases with low limits run in this process."""

from __future__ import annotations

import io
import itertools
import json
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import WordHashEmbedder
from memlane import Memory
from memlane.errors import InvalidArgumentError
from memlane.knowledge import IngestLimits
from memlane.knowledge.document_limits import DocumentLimitError, applied_limits
from memlane.knowledge.loaders import load_docx, load_html, load_markdown, unpacked_size

P = Path("bomb")
CAP = 2**30  # the child's address space


def docx_with_body(content: bytes, repeat: int = 1) -> bytes:
    """python-docx's empty document with ``content`` written ``repeat`` times as its body
    (streamed into the zip, so a large body costs no memory here)."""
    import docx

    buf = io.BytesIO()
    docx.Document().save(buf)
    out = io.BytesIO()
    with (
        zipfile.ZipFile(buf) as src,
        zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as dst,
    ):
        for info in src.infolist():
            data = src.read(info)
            if info.filename != "word/document.xml":
                dst.writestr(info, data)
                continue
            head, rest = data.split(b"<w:body>", 1)
            with dst.open("word/document.xml", "w", force_zip64=True) as f:
                f.write(head + b"<w:body>")
                for _ in range(repeat):
                    f.write(content)
                f.write(rest[rest.index(b"<w:sectPr") :])
    return out.getvalue()


def paragraph(text: str) -> bytes:
    return f"<w:p><w:r><w:t>{text}</w:t></w:r></w:p>".encode()


def cell(text: str, properties: bytes = b"") -> bytes:
    return b"<w:tc><w:tcPr>" + properties + b"</w:tcPr>" + paragraph(text) + b"</w:tc>"


def gridspan_bomb(span: int) -> bytes:
    """36 KB: one table cell that declares it spans ``span`` grid columns."""
    row = cell("spanned cell", b'<w:gridSpan w:val="%d"/>' % span) + cell("last cell")
    return docx_with_body(
        paragraph("Before the table.") + b"<w:tbl><w:tr>" + row + b"</w:tr></w:tbl>"
    )


def paragraph_bomb(count: int) -> bytes:
    """``count`` empty paragraphs (a multiple of 100,000): 60 KB for three million."""
    return docx_with_body(b"<w:p/>" * 100_000, repeat=count // 100_000)


def vmerge_bomb(text_chars: int, rows: int) -> bytes:
    """A cell of ``text_chars`` characters that ``rows`` more rows continue (w:vMerge):
    each row shows its text again."""
    first = b"<w:tr>" + cell("x" * text_chars, b'<w:vMerge w:val="restart"/>') + b"</w:tr>"
    more = b"<w:tr>" + cell("", b"<w:vMerge/>") + b"</w:tr>"
    data = docx_with_body(b"<w:tbl>" + first + more * rows + b"</w:tbl>")
    return data


def yaml_bomb(levels: int = 9) -> bytes:
    """``levels`` levels of nine aliases: 9 ** levels values once written out (387,420,489
    for nine levels, in 343 bytes)."""
    lines = ["---", "a: &a [lol,lol,lol,lol,lol,lol,lol,lol,lol]"]
    names = "abcdefghi"[:levels]
    for prev, name in itertools.pairwise(names):
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    return ("\n".join([*lines, "---", "Body text."]) + "\n").encode()


# The peak is read from /proc (VmHWM): the child's ru_maxrss would count the RSS this
# process had when it forked the child.
CHILD = """
import json, re, sys, time
from memlane import Memory
mem = Memory(sys.argv[2], embedder=None)
started = time.perf_counter()
report = mem.ingest(sys.argv[1], shared=True, progress=False)
seconds = time.perf_counter() - started
texts = {str(d.metadata["source"]): d.text for d in mem.list_documents(shared=True)}
print(json.dumps({
    "ingested": sorted(report.ingested), "failed": report.failed, "limited": report.limited,
    "texts": texts, "seconds": seconds,
    "peak_rss": int(re.search(r"VmHWM:\\s*(\\d+) kB", open("/proc/self/status").read())[1]) * 1024,
}))
"""


def ingest_capped(tmp_path: Path, name: str, data: bytes) -> dict[str, object]:
    """Ingests a folder of ``name`` and a small text file in a child process that may map
    at most CAP bytes; what it reported, with its peak RSS (bytes) and wall time."""
    import resource

    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / name).write_bytes(data)
    (kb / "fine.txt").write_text("a small document that is ingested all the same")

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (CAP, CAP))

    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(kb), str(tmp_path / "store")],
        preexec_fn=cap,
        capture_output=True,
        text=True,
        timeout=900,  # only so that a regression cannot hang the run
        check=False,
    )
    assert child.returncode == 0, child.stderr[-2000:]
    out: dict[str, object] = json.loads(child.stdout)
    print(name, len(data), "bytes:", out["seconds"], "s,", out["peak_rss"], "bytes peak RSS")
    return out


linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="RLIMIT_AS caps the address space on Linux"
)


@linux_only
@pytest.mark.parametrize(
    ("name", "make", "bound"),
    [
        ("paragraphs.docx", lambda: paragraph_bomb(3_000_000), "max_elements=2000000"),
        (
            "merged.docx",
            lambda: vmerge_bomb(64 * 1024, 100_000),
            "above max_unpacked_bytes=134217728",
        ),
        ("laughs.md", yaml_bomb, "max_front_matter_values=10000"),
    ],
)
def test_a_bomb_is_reported_over_the_limit_that_stopped_it(
    tmp_path: Path, name: str, make: object, bound: str
) -> None:
    assert callable(make)
    data = make()
    assert len(data) < 2**20 and unpacked_size(data) < IngestLimits().max_unpacked_bytes
    out = ingest_capped(tmp_path, name, data)
    assert out["ingested"] == ["fine.txt"]
    limited = out["limited"]
    assert isinstance(limited, dict) and set(limited) == {name}
    assert bound in limited[name]
    assert out["failed"] == limited
    assert isinstance(out["peak_rss"], int) and out["peak_rss"] < 512 * 2**20


@linux_only
def test_a_cell_spanning_two_billion_columns_is_read_once(tmp_path: Path) -> None:
    data = gridspan_bomb(2**31 - 1)
    assert len(data) < 40_000
    out = ingest_capped(tmp_path, "span.docx", data)
    assert out["ingested"] == ["fine.txt", "span.docx"] and out["failed"] == {}
    texts = out["texts"]
    assert isinstance(texts, dict)
    assert texts["span.docx"] == "Before the table.\n\nspanned cell | last cell"
    assert isinstance(out["peak_rss"], int) and out["peak_rss"] < 512 * 2**20


@linux_only
def test_an_html_page_of_millions_of_elements_stops_at_max_elements(tmp_path: Path) -> None:
    out = ingest_capped(tmp_path, "paragraphs.html", b"<p>" * 3_000_000)
    assert out["ingested"] == ["fine.txt"]
    reason = "more than 2000000 HTML elements, above max_elements=2000000"
    assert out["limited"] == {"paragraphs.html": reason}
    assert out["failed"] == out["limited"]
    assert isinstance(out["peak_rss"], int) and out["peak_rss"] < 256 * 2**20


@linux_only
def test_the_text_between_a_million_html_elements_is_joined_in_linear_work(
    tmp_path: Path,
) -> None:
    """A million spaces between two words, each space in its own element: a regular
    expression that tried each of them as the start of a match took the square of their
    number (a thousand seconds)."""
    out = ingest_capped(tmp_path, "spaces.html", b"a" + b"<b> </b>" * 1_000_000 + b"z")
    assert out["ingested"] == ["fine.txt", "spaces.html"] and out["failed"] == {}
    texts = out["texts"]
    assert isinstance(texts, dict) and texts["spaces.html"] == "a" + " " * 1_000_000 + "z"
    assert isinstance(out["peak_rss"], int) and out["peak_rss"] < 256 * 2**20


# -- the same bounds, small, in this process -----------------------------------------------


@pytest.fixture
def mem(tmp_path: Path, word_embedder: WordHashEmbedder) -> Iterator[Memory]:
    m = Memory(tmp_path / "store", word_embedder)
    yield m
    m.close()


def test_max_elements_refuses_a_docx_and_keeps_its_old_version(mem: Memory, tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "doc.docx").write_bytes(docx_with_body(paragraph("Ocelots hunt at dusk.")))
    (folder / "fine.txt").write_text("Fine text.")
    limits = IngestLimits(max_elements=20_000)
    assert mem.ingest(folder, shared=True, progress=False, limits=limits).ok
    (folder / "doc.docx").write_bytes(paragraph_bomb(100_000))
    report = mem.ingest(folder, shared=True, progress=False, limits=limits)
    assert set(report.limited) == {"doc.docx"} and report.failed == report.limited
    assert (
        "more than 20000 XML elements (stopped in word/document.xml)" in report.limited["doc.docx"]
    )
    assert "above max_elements=20000" in report.limited["doc.docx"]
    assert set(report.unchanged) == {"fine.txt"}
    hits = mem.search_knowledge("ocelots", mode="text")
    assert [h.record.metadata["source"] for h in hits] == ["doc.docx"]


def test_a_loader_called_directly_keeps_to_the_limits_in_force() -> None:
    data = paragraph_bomb(100_000)
    assert load_docx(data, P).text == ""  # within the defaults
    few = IngestLimits(max_elements=20_000)
    with applied_limits(few), pytest.raises(DocumentLimitError, match="max_elements=20000"):
        load_docx(data, P)
    assert load_docx(data, P).text == ""  # the defaults again


def test_html_keeps_to_the_limits_in_force() -> None:
    page = b"<ul>" + b"<li>item" * 500 + b"</ul>"  # 503 elements with <html> and <body>
    assert load_html(page, P).text == "\n\n".join(["item"] * 500)  # within the defaults
    few = IngestLimits(max_elements=502)
    with applied_limits(few), pytest.raises(DocumentLimitError) as raised:
        load_html(page, P)
    assert str(raised.value) == "more than 502 HTML elements, above max_elements=502"
    with applied_limits(IngestLimits(max_elements=503)):
        assert load_html(page, P).text == "\n\n".join(["item"] * 500)
    # The text kept, shown or the title's, counts as it is read.
    for text in (b"<p>" + b"word " * 1_000, b"<title>" + b"x" * 1_001 + b"</title>"):
        short = IngestLimits(max_unpacked_bytes=1_000)
        with applied_limits(short), pytest.raises(DocumentLimitError, match="characters of text"):
            load_html(text, P)


def test_html_limit_in_an_ingest(mem: Memory) -> None:
    page = "<h1>Tapirs</h1>" + "<p>Tapirs browse at night.</p>" * 100
    report = mem.ingest_text(
        page,
        source="page.html",
        file_type="html",
        shared=True,
        limits=IngestLimits(max_elements=50),
    )
    assert report.limited == {"page.html": "more than 50 HTML elements, above max_elements=50"}
    assert report.failed == report.limited and len(mem) == 0
    report = mem.ingest_text(page, source="page.html", file_type="html", shared=True)
    assert report.ok and set(report.ingested) == {"page.html"}


def test_html_read_in_pieces_reads_as_one_page() -> None:
    """The parser is given the page a megabyte at a time and may split a text anywhere:
    whitespace still collapses across the pieces, and a <pre> keeps its own."""
    words = "a  \n b " * 300_000  # 2.1 million characters
    doc = load_html(f"<title>T</title><p>{words}</p><pre>{words}</pre>".encode(), P)
    assert doc.metadata == {"title": "T"}
    assert doc.text == " ".join(["a b"] * 300_000) + "\n\n" + words.rstrip(" ")
    # What follows </html> is shown, as a browser shows it.
    after = b"<html><body><p>x</p></body></html>\n<p>after</p><script>no</script>"
    assert load_html(after, P).text == "x\n\nafter"


def test_merged_cells_repeat_their_text_within_max_unpacked_bytes() -> None:
    data = vmerge_bomb(1_000, 50)
    doc = load_docx(data, P)
    assert doc.text.split("\n\n") == ["x" * 1_000] * 51
    # Above what the zip unpacks to (1 MB, load_docx checks it first), below the text
    # 2,000 rows repeat (2 MB).
    bomb = vmerge_bomb(1_000, 2_000)
    short = IngestLimits(max_unpacked_bytes=1_500_000)
    with applied_limits(short), pytest.raises(DocumentLimitError, match="characters of text"):
        load_docx(bomb, P)


def test_a_spanning_cell_and_a_merged_one() -> None:
    """Spans and merges read as python-docx reads them: a spanning cell once, a merged one
    again in each row it covers (grid columns counted from w:gridBefore)."""
    rows = (
        b"<w:tr><w:trPr><w:gridBefore w:val='1'/></w:trPr>"
        + cell("top", b"<w:vMerge w:val='restart'/>")
        + cell("x", b"<w:gridSpan w:val='3'/>")
        + b"</w:tr><w:tr>"
        + cell("first")
        + cell("", b"<w:vMerge/>")
        + cell("y", b"<w:gridSpan w:val='not a number'/>")
        + b"</w:tr>"
    )
    doc = load_docx(docx_with_body(b"<w:tbl>" + rows + b"</w:tbl>"), P)
    assert doc.text == "top | x\n\nfirst | top | y"


def test_front_matter_aliases_are_bounded_as_written_out() -> None:
    bomb = yaml_bomb(5)  # 59,049 values: small enough to run here on any code
    with pytest.raises(DocumentLimitError, match="max_front_matter_values=10000"):
        load_markdown(bomb, P)
    # A few aliases, as front matter uses them, are fine.
    fine = b"---\nbase: &b {lang: en, tags: [a, b]}\npage: *b\n---\n# Title\n\nBody."
    doc = load_markdown(fine, P)
    assert doc.metadata == {
        "base": {"lang": "en", "tags": ["a", "b"]},
        "page": doc.metadata["base"],
    }
    assert doc.text == "# Title\n\nBody."
    # Each use of an alias counts in full: the root mapping, its 2 keys, and twice the
    # anchored mapping's 7 values (itself, 2 keys, "en", the list and its 2 items).
    few = IngestLimits(max_front_matter_values=16)
    with applied_limits(few), pytest.raises(DocumentLimitError, match="more than 16 values"):
        load_markdown(fine, P)
    with applied_limits(IngestLimits(max_front_matter_values=17)):
        assert load_markdown(fine, P).metadata == doc.metadata
    # An alias inside its own anchor never ends.
    with pytest.raises(DocumentLimitError, match="max_front_matter_values"):
        load_markdown(b"---\na: &a [*a]\n---\nbody", P)


def test_front_matter_limit_in_an_ingest(mem: Memory) -> None:
    text = "---\ntags: [" + ", ".join(f"t{i}" for i in range(100)) + "]\n---\nBody about tapirs."
    report = mem.ingest_text(
        text,
        source="notes.md",
        file_type="md",
        shared=True,
        limits=IngestLimits(max_front_matter_values=50),
    )
    assert "above max_front_matter_values=50" in report.limited["notes.md"]
    assert len(mem) == 0


@pytest.mark.parametrize("name", ["max_elements", "max_front_matter_values"])
@pytest.mark.parametrize("bad", [0, -1, 1.5, True, None])
def test_new_limits_are_checked(name: str, bad: object) -> None:
    with pytest.raises(InvalidArgumentError, match=name):
        IngestLimits(**{name: bad})  # type: ignore[arg-type]
