"""Bounds that must hold before or while a file is read, not after: a JSON or CSV file
whose text repeats a long key path or header before every value (1,000 times its size),
a file far larger than ``max_unpacked_bytes`` (never read in; a ``MemoryError`` fails that
file alone), a PDF whose page tree names one page thousands of times or whose pages share
a heavy content stream that shows no text, and a ``.docx`` zip with a byte before it."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from memlane import Memory
from memlane.knowledge import IngestLimits
from memlane.knowledge.document_limits import DocumentLimitError, applied_limits
from memlane.knowledge.loaders import load_csv, load_docx, load_json, load_jsonl, load_pdf
from memlane.knowledge.walk import Source

P = Path("bomb")
SMALL = IngestLimits(max_unpacked_bytes=100_000)


# -- JSON and CSV: their text counted as it is produced -------------------------------------


def test_a_json_key_path_repeated_before_every_item_stops_at_the_limit() -> None:
    data = json.dumps({"K" * 10_000: ["x"] * 1000}).encode()  # 10 KB: 10 MB of text
    with applied_limits(SMALL), pytest.raises(DocumentLimitError, match="max_unpacked_bytes"):
        load_json(data, P)
    lines = b"\n".join(json.dumps({"K" * 10_000: "x"}).encode() for _ in range(20))
    with applied_limits(SMALL), pytest.raises(DocumentLimitError, match="max_unpacked_bytes"):
        load_jsonl(lines, P)  # counted over the whole file, not line by line


def test_json_text_within_the_limit_is_unchanged() -> None:
    value = {"a": {"b": ["x", {"c": "y"}, " "]}, "": {"d": "z"}, "n": 3}
    with applied_limits(SMALL):
        assert load_json(json.dumps(value).encode(), P).text == "a.b[0]: x\na.b[1].c: y\nd: z"
        assert load_json(b'"just"', P).text == "$: just"
        assert load_jsonl(b'{"t": "one"}\n["two"]\n', P).text == "[0].t: one\n[1][0]: two"


def test_a_csv_header_repeated_before_every_cell_stops_at_the_limit() -> None:
    header = ",".join(f"H{i}" + "h" * 5_000 for i in range(10))
    data = (header + "\n" + ("a," * 9 + "a\n") * 100).encode()  # 50 KB: 5 MB of text
    with applied_limits(SMALL), pytest.raises(DocumentLimitError, match="max_unpacked_bytes"):
        load_csv(data, Path("bomb.csv"))
    with applied_limits(SMALL):
        assert load_csv(b"name,age\nAda,36\n", Path("p.csv")).text == "name: Ada; age: 36"


def exactly(limit: int) -> IngestLimits:
    return IngestLimits(max_unpacked_bytes=limit)


def test_json_text_of_exactly_the_limit_is_taken() -> None:
    data = json.dumps(["x"] * 10).encode()
    text = "\n".join(f"[{i}]: x" for i in range(10))
    with applied_limits(exactly(len(text))):
        assert load_json(data, P).text == text
    with applied_limits(exactly(len(text) - 1)), pytest.raises(DocumentLimitError):
        load_json(data, P)
    both = b"\n".join([data, data])
    joined = "\n".join(f"[{n}][{i}]: x" for n in range(2) for i in range(10))
    with applied_limits(exactly(len(joined))):
        assert load_jsonl(both, P).text == joined
    with applied_limits(exactly(len(joined) - 1)), pytest.raises(DocumentLimitError):
        load_jsonl(both, P)


def test_csv_text_is_counted_as_written_whitespace_collapsed() -> None:
    data = ("h,g\n" + "a          b,  \n" * 700 + "c,d\n").encode()  # 10 KB
    text = "\n".join(["h: a b"] * 700 + ["h: c; g: d"])
    with applied_limits(exactly(len(text))):
        assert load_csv(data, Path("fixed.csv")).text == text
    with applied_limits(exactly(len(text) - 1)), pytest.raises(DocumentLimitError):
        load_csv(data, Path("fixed.csv"))


# -- a file larger than the limit is not read -------------------------------------------------

HUGE = """
import json, resource, sys
from memlane import Memory
resource.setrlimit(resource.RLIMIT_AS, (2**30, 2**30))
with Memory(None, embedder=None) as mem:
    report = mem.ingest(sys.argv[1], shared=True, progress=False)
    print(json.dumps({"ingested": sorted(report.ingested), "limited": report.limited}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS as on Linux")
def test_a_file_larger_than_memory_is_refused_by_its_size(tmp_path: Path) -> None:
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "a.txt").write_text("A small note about apples.\n")
    with open(kb / "big.txt", "wb") as f:
        f.truncate(3 * 2**30)  # sparse: no disk; more than the child's address space
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.run(
        [sys.executable, "-c", HUGE, str(kb)], capture_output=True, text=True, env=env, timeout=120
    )
    assert child.returncode == 0, child.stderr[-2000:]
    out = json.loads(child.stdout.splitlines()[-1])
    assert out["ingested"] == ["a.txt"]
    assert out["limited"] == {"big.txt": f"{3 * 2**30} bytes, above max_unpacked_bytes={2**27}"}


def test_a_file_over_the_limit_is_refused_by_its_size(tmp_path: Path) -> None:
    path = tmp_path / "a.txt"
    path.write_bytes(b"x" * 10)
    source = Source("a.txt", load_csv, path=path)
    assert source.read(10) == b"x" * 10
    with pytest.raises(DocumentLimitError, match=r"^10 bytes, above max_unpacked_bytes=9$"):
        source.read(9)


def test_a_memory_error_while_reading_fails_that_file_alone(
    local: Memory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "a.txt").write_text("Apples are red.\n")
    (kb / "b.txt").write_text("Bananas are yellow.\n")
    real = Source.read

    def read(self: Source, limit: int) -> bytes:
        if self.rel == "a.txt":
            raise MemoryError
        return real(self, limit)

    monkeypatch.setattr(Source, "read", read)
    report = local.ingest(kb, shared=True, progress=False)
    assert report.failed == {"a.txt": "cannot read: out of memory"}
    assert set(report.ingested) == {"b.txt"}


# -- PDF: pages named many times, content streams that show nothing -------------------------


def deflated(content: bytes, head: bytes = b"") -> bytes:
    stream = zlib.compress(content, 9)
    return (
        b"<< %s/Length %d /Filter /FlateDecode >>\nstream\n"
        % (
            head,
            len(stream),
        )
        + stream
        + b"\nendstream"
    )


def pdf(
    kids: list[int],
    pages: dict[int, int],
    content: bytes,
    forms: dict[int, tuple[bytes, bytes]] | None = None,
    differ: bool = False,
) -> bytes:
    """A PDF whose page tree lists page objects ``kids`` (repeats allowed); ``pages``
    maps each page object's number to its content stream's, all of them ``content``;
    ``forms``, form XObjects by object number, as (content, the names they draw with,
    ``/X 5 0 R ...``), which every page and form may draw; ``differ``: each stream
    ends with a comment of its own."""
    forms = forms or {}
    xobjects = b" ".join(names for _, names in forms.values())
    resources = b"/Resources << /Font << /F1 3 0 R >> /XObject << %s >> >>" % xobjects
    objects = {
        1: b"<< /Type /Catalog /Pages 2 0 R >>",
        2: b"<< /Type /Pages /Kids [%s] /Count %d >>"
        % (b" ".join(b"%d 0 R" % k for k in kids), len(kids)),
        3: b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    }
    for n, (form, _) in forms.items():
        head = b"/Type /XObject /Subtype /Form /BBox [0 0 612 792] %s " % resources
        objects[n] = deflated(form, head)
    for page, stream_number in pages.items():
        objects[page] = (
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R %s >>"
            % (stream_number, resources)
        )
        objects[stream_number] = deflated(content + (b" %%%d" % page if differ else b""))
    out = bytearray(b"%PDF-1.4\n")
    offsets = {}
    for n in sorted(objects):
        offsets[n] = len(out)
        out += b"%d 0 obj\n" % n + objects[n] + b"\nendobj\n"
    xref, size = len(out), max(objects) + 1
    out += b"xref\n0 %d\n0000000000 65535 f \n" % size
    for n in range(1, size):
        out += b"%010d 00000 n \n" % offsets[n] if n in offsets else b"0000000000 65535 f \n"
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (size, xref)
    return bytes(out)


def test_a_page_named_many_times_is_extracted_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from pypdf import PageObject

    extracted = []
    real = PageObject.extract_text

    def extract_text(self: PageObject, *args: object, **kwargs: object) -> str:
        extracted.append(1)
        return real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(PageObject, "extract_text", extract_text)
    data = pdf([10] * 500, {10: 11}, b"BT /F1 12 Tf 72 700 Td (Same page) Tj ET")
    doc = load_pdf(data, Path("p.pdf"))
    assert len(doc.pages or []) == 500 and doc.text.count("Same page") == 500
    assert len(extracted) == 1


def test_content_streams_that_show_no_text_count_against_the_limit() -> None:
    content = b"BT /F1 12 Tf " + b"1 0 Td " * 5_000 + b"ET"  # 35 KB of operators, no text
    pages = {10 + 2 * i: 11 + 2 * i for i in range(10)}  # ten page objects
    # Each stream its own (the same one is read once, whatever pages draw it).
    data = pdf(list(pages), pages, content, differ=True)
    with (
        applied_limits(SMALL),
        pytest.raises(
            DocumentLimitError, match=r"unpack to more than 100000 bytes \(stopped at page 3\)"
        ),
    ):
        load_pdf(data, Path("p.pdf"))


def test_forms_drawn_count_each_time_they_are_drawn() -> None:
    # Y: 7 KB of operators; X draws Y ten times; the page draws X (by an escaped name)
    # twenty times: 1.4 MB for pypdf to parse, from 2 KB of PDF.
    forms = {
        5: (b"/Y Do " * 10, b"/X0 5 0 R"),
        6: (b"BT /F1 12 Tf " + b"1 0 Td " * 1000 + b"(Deep text) Tj ET", b"/Y 6 0 R"),
    }
    data = pdf([10], {10: 11}, b"/X#30 Do " * 20, forms)
    with (
        applied_limits(SMALL),
        pytest.raises(DocumentLimitError, match="with the forms they draw each time drawn"),
    ):
        load_pdf(data, Path("p.pdf"))
    # Drawn once, the same forms are within the limit, and their text is extracted.
    with applied_limits(SMALL):
        assert "Deep text" in load_pdf(pdf([10], {10: 11}, b"/X0 Do", forms), P).text


@pytest.mark.parametrize(
    ("draw", "subtype"),
    [
        (b"/X0 1 Do ", b"/Form"),  # an operand more: pypdf draws the first
        (b"/X0 %c\nDo ", b"/Form"),  # a comment between the name and Do
        (b"/X0 Do ", b"/PS"),  # pypdf draws every XObject that is no image
    ],
    ids=["extra operand", "comment", "not /Form"],
)
def test_forms_count_as_pypdf_draws_them(draw: bytes, subtype: bytes) -> None:
    form = b"BT /F1 12 Tf " + b"1 0 Td " * 1000 + b"(Deep text) Tj ET"
    data = pdf([10], {10: 11}, draw * 20, {5: (form, b"/X0 5 0 R")})
    data = data.replace(b"/Subtype /Form", b"/Subtype " + subtype)
    with (
        applied_limits(SMALL),
        pytest.raises(DocumentLimitError, match="with the forms they draw each time drawn"),
    ):
        load_pdf(data, Path("p.pdf"))


# -- .docx: the unpacked size, whatever precedes the zip -------------------------------------


def test_a_docx_zip_after_a_junk_byte_is_measured_too() -> None:
    import docx

    buf = io.BytesIO()
    docx.Document().save(buf)
    limits = IngestLimits(max_unpacked_bytes=10_000)  # the empty document unpacks to more
    for data in (buf.getvalue(), b"X" + buf.getvalue()):
        with applied_limits(limits), pytest.raises(DocumentLimitError, match="unpacks to"):
            load_docx(data, Path("d.docx"))
