"""Loaders on real files of every type, generated here (fpdf2, pypdf's writer, python-docx)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from memlane.knowledge.loaders import (
    LOADERS,
    DocumentLimitError,
    DocumentLoadError,
    LoadedDocument,
    decode_text,
    load_csv,
    load_docx,
    load_html,
    load_json,
    load_jsonl,
    load_markdown,
    load_pdf,
    load_text,
    loader_for,
    register_loader,
)

P = Path("doc")


# -- generated files, shared with test_knowledge -------------------------------------------


def make_pdf(pages: list[str], title: str | None = "Operations manual") -> bytes:
    from fpdf import FPDF

    pdf = FPDF()
    if title:
        pdf.set_title(title)
    pdf.set_font("helvetica", size=12)
    for text in pages:
        pdf.add_page()
        pdf.multi_cell(0, 8, text)
    return bytes(pdf.output())


def encrypt_pdf(data: bytes, user_password: str) -> bytes:
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(data)))
    # RC4 needs no extra package (AES would need `cryptography`).
    writer.encrypt(user_password=user_password, owner_password="owner", algorithm="RC4-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def make_docx() -> bytes:
    import docx

    document = docx.Document()
    document.core_properties.title = "Team handbook"
    document.core_properties.author = "Ops"
    document.add_heading("Handbook", level=0)
    document.add_paragraph("Welcome to the team.")
    document.add_heading("Deploying", level=1)
    document.add_paragraph("Deploys happen on Tuesdays.")
    table = document.add_table(rows=2, cols=2)
    table.cell(0, 0).text, table.cell(0, 1).text = "step", "command"
    table.cell(1, 0).text, table.cell(1, 1).text = "ship", "make deploy"
    document.add_heading("On call", level=2)
    document.add_paragraph("Page the on-call engineer.")
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


# -- text and markdown ----------------------------------------------------------------------


def test_text_encodings() -> None:
    assert load_text("héllo wörld".encode(), P).text == "héllo wörld"
    assert load_text("\ufeffbom".encode(), P).text == "bom"
    assert load_text("utf16 ✓".encode("utf-16"), P).text == "utf16 ✓"
    assert load_text("café “quoted”".encode("cp1252"), P).text == "café “quoted”"
    with pytest.raises(DocumentLoadError, match="binary"):
        load_text(b"\x00\x01\x02PK", P)
    with pytest.raises(DocumentLoadError):
        decode_text(b"\xff\xfe\x00\xd8")  # a UTF-16 BOM, then a lone surrogate


def test_markdown_front_matter() -> None:
    data = (
        b"---\ntitle: Deploy guide\ndate: 2024-05-01\ntags: [ops, ci]\n---\n# Deploy\n\nRun it.\n"
    )
    doc = load_markdown(data, P)
    assert doc.metadata == {"title": "Deploy guide", "date": "2024-05-01", "tags": ["ops", "ci"]}
    assert doc.text == "# Deploy\n\nRun it."
    assert doc.markdown and doc.file_type == "md"
    assert load_markdown(b"# Only\n\ntext", P).metadata == {}
    with pytest.raises(DocumentLoadError, match="front matter"):
        load_markdown(b"---\ntitle: [unclosed\n---\nbody", P)


# -- PDF ---------------------------------------------------------------------------------


def test_pdf_pages_and_metadata() -> None:
    data = make_pdf(["Page one explains deployment.", "Page two covers rollback."])
    doc = load_pdf(data, P)
    assert doc.file_type == "pdf"
    assert doc.metadata["title"] == "Operations manual" and doc.metadata["page_count"] == 2
    assert doc.pages is not None and len(doc.pages) == 2
    first, second = doc.pages
    assert first == 0 and doc.text[first:].startswith("Page one explains deployment.")
    assert doc.text[second:].startswith("Page two covers rollback.")
    assert doc.page_at(0) == 1 and doc.page_at(second) == 2 and doc.page_at(second - 1) == 1


def test_pdf_corrupt_and_encrypted_fail() -> None:
    data = make_pdf(["Secret plans."])
    with pytest.raises(DocumentLoadError, match=r"corrupt|PDF"):
        load_pdf(b"%PDF-1.4\nthis is not really a pdf\n", P)
    with pytest.raises(DocumentLoadError):
        load_pdf(data[: len(data) // 3], P)
    with pytest.raises(DocumentLoadError, match="encrypted"):
        load_pdf(encrypt_pdf(data, "secret"), P)
    # An owner password alone (empty user password) opens like most viewers do.
    assert "Secret plans." in load_pdf(encrypt_pdf(data, ""), P).text


def test_pdf_without_text_fails() -> None:
    with pytest.raises(DocumentLoadError, match="no extractable text"):
        load_pdf(make_pdf([""], title=None), P)


# -- Word ---------------------------------------------------------------------------------


def test_docx_headings_tables_and_properties() -> None:
    doc = load_docx(make_docx(), P)
    assert doc.markdown and doc.file_type == "docx"
    assert doc.metadata == {"title": "Team handbook", "author": "Ops"}
    assert doc.text.split("\n\n") == [
        "# Handbook",
        "Welcome to the team.",
        "## Deploying",
        "Deploys happen on Tuesdays.",
        "step | command",
        "ship | make deploy",
        "### On call",
        "Page the on-call engineer.",
    ]


def test_docx_corrupt_fails() -> None:
    with pytest.raises(DocumentLoadError, match="docx"):
        load_docx(b"PK\x03\x04 broken zip", P)
    with pytest.raises(DocumentLoadError):
        load_docx(make_docx()[:500], P)


# -- JSON --------------------------------------------------------------------------------


def test_json_string_fields_with_key_paths() -> None:
    value = {
        "name": "memlane",
        "faq": [{"q": "How to deploy?", "a": "make deploy"}, {"q": "", "a": "x"}],
        "version": 3,
        "nested": {"deep": {"note": "kept"}, "flag": True, "none": None},
    }
    doc = load_json(json.dumps(value).encode(), P)
    assert doc.text.splitlines() == [
        "name: memlane",
        "faq[0].q: How to deploy?",
        "faq[0].a: make deploy",
        "faq[1].a: x",
        "nested.deep.note: kept",
    ]
    assert load_json(b'"just a string"', P).text == "$: just a string"
    with pytest.raises(DocumentLoadError, match="JSON"):
        load_json(b'{"a": ', P)


def test_jsonl_lines() -> None:
    doc = load_jsonl(b'{"text": "first"}\n\n{"text": "second", "n": 2}\n', P)
    assert doc.text.splitlines() == ["[0].text: first", "[2].text: second"]
    with pytest.raises(DocumentLoadError, match="line 2"):
        load_jsonl(b'{"a": "b"}\nnot json\n', P)


# -- HTML ---------------------------------------------------------------------------------


def test_html_visible_text_only() -> None:
    html = b"""<!doctype html><html><head><title> Ops  page </title>
    <style>body { color: red }</style><script>var secret = 1;</script></head>
    <body><h1>Deploying</h1><p>Run <b>make</b>&nbsp;deploy &amp; wait.</p>
    <div hidden>hidden div</div><p style="display: none">invisible</p>
    <span aria-hidden="true">icon</span><noscript>enable js</noscript>
    <template><p>template</p></template>
    <ul><li>one</li><li>two<br>lines</li></ul><pre>  keep   spaces</pre>
    <img src="x.png" alt="an image"><p>end</p></body></html>"""
    doc = load_html(html, P)
    assert doc.metadata == {"title": "Ops page"}
    for hidden in ("secret", "color", "hidden div", "invisible", "icon", "enable js", "template"):
        assert hidden not in doc.text
    assert doc.text.split("\n\n") == [
        "Deploying",
        "Run make\xa0deploy & wait.",
        "one",
        "two\nlines",
        "  keep   spaces",
        "end",
    ]


# -- CSV ----------------------------------------------------------------------------------


def test_a_wide_csv_names_its_first_columns_only() -> None:
    # Every fragment carries the names and the engine indexes each: a 79 KB file of
    # 10,000 columns took 1.8 GB to ingest, and one of 20,000 aborted the process.
    header = ",".join(f"c{i}" for i in range(20_000))
    doc = load_csv(f"{header}\n{','.join(['v'] * 20_000)}\n".encode(), Path("wide.csv"))
    assert doc.metadata == {
        "columns": [f"c{i}" for i in range(100)],
        "rows": 1,
        "columns_total": 20_000,
    }
    long_names = ",".join("n" * 1000 + str(i) for i in range(10))
    doc = load_csv(f"{long_names}\n{','.join(['v'] * 10)}\n".encode(), Path("long.csv"))
    assert len(doc.metadata["columns"]) == 4  # 4,096 characters of names at most
    assert doc.metadata["columns_total"] == 10


def test_csv_rows_with_headers() -> None:
    data = b'name,role,notes\nAlice,admin,"likes tea, biscuits"\nBob,,\n\nCarol,dev,x,extra\n'
    doc = load_csv(data, Path("people.csv"))
    assert doc.text.splitlines() == [
        "name: Alice; role: admin; notes: likes tea, biscuits",
        "name: Bob",
        "name: Carol; role: dev; notes: x; column 4: extra",
    ]
    assert doc.metadata == {"columns": ["name", "role", "notes"], "rows": 3}
    tsv = load_csv(b"a\tb\n1\t2\n", Path("t.tsv"))
    assert tsv.text == "a: 1; b: 2"
    semi = load_csv(b"a;b\n1;2\n3;4\n", Path("t.csv"))
    assert semi.text == "a: 1; b: 2\na: 3; b: 4"


# -- registry -------------------------------------------------------------------------------


def test_registry() -> None:
    assert loader_for("a/b/NOTES.MD") is load_markdown
    assert loader_for("x.pdf") is load_pdf and loader_for("x.htm") is load_html
    assert loader_for("x.exe") is None and loader_for("Makefile") is None
    for suffix in (".txt", ".md", ".pdf", ".docx", ".json", ".html", ".csv"):
        assert suffix in LOADERS

    def load_rst(data: bytes, path: Path) -> LoadedDocument:
        return LoadedDocument(data.decode(), "rst")

    register_loader(".RST", load_rst)
    try:
        assert loader_for("x.rst") is load_rst
    finally:
        del LOADERS[".rst"]
    with pytest.raises(ValueError):
        register_loader("rst", load_rst)
    with pytest.raises(ValueError):
        register_loader(".rst", "not callable")  # type: ignore[arg-type]


def test_a_pdf_pypdf_repairs_loads_without_writing_to_stderr(tmp_path: Path) -> None:
    """pypdf logs what it repairs; memlane must not let that reach stderr on its own.
    In a fresh interpreter: pytest's own log handlers would hide the last-resort one."""
    import re
    import subprocess
    import sys

    from fpdf import FPDF

    pdf = FPDF()
    pdf.add_page()
    pdf.set_font("helvetica", size=12)
    pdf.cell(text="hello pdf world")
    data = bytes(pdf.output())
    # A startxref offset that points past the table: pypdf finds it and logs a warning.
    data = re.sub(rb"startxref\s+(\d+)", lambda m: b"startxref\n%d" % (int(m[1]) + 7), data)
    (tmp_path / "repaired.pdf").write_bytes(data)
    script = (
        "import sys; from pathlib import Path; "
        "from memlane.knowledge.loaders import load_pdf; "
        "p = Path(sys.argv[1]); print(load_pdf(p.read_bytes(), p).text)"
    )
    run = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "repaired.pdf")],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "hello pdf world" in run.stdout
    assert run.stderr == ""


def hand_made_pdf(
    content: bytes,
    length: int | None = None,
    pages: bytes = b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
    extra: list[bytes] | None = None,
) -> bytes:
    """One page whose content stream is ``content`` (its declared ``/Length``: ``length``);
    ``pages`` and ``extra`` (objects 6 on) for others."""
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        pages,
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
        b"/Resources << /Font << /F1 5 0 R >> >> /Contents 4 0 R >>",
        b"<< /Length %d >>\nstream\n" % (len(content) if length is None else length)
        + content
        + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        *(extra or []),
    ]
    out = bytearray(b"%PDF-1.7\n")
    offsets = []
    for n, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % n + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)


def test_a_pdf_past_pypdfs_own_limits_is_limited_and_a_broken_one_failed() -> None:
    # pypdf's LimitReachedError, and the RecursionError of content nested 100,000 deep,
    # fell to the catch-all: "failed", in pypdf's or Python's own words.
    text = b"BT /F1 12 Tf 72 720 Td (Hi) Tj ET"
    assert load_pdf(hand_made_pdf(text), P).text == "Hi"
    with pytest.raises(DocumentLimitError, match="the PDF exceeds pypdf's limits"):
        load_pdf(hand_made_pdf(text, length=999_999_999), P)
    nested = text + b" " + b"[" * 100_000 + b"]" * 100_000
    with pytest.raises(DocumentLoadError, match="corrupt PDF: pypdf failed on its objects"):
        load_pdf(hand_made_pdf(nested), P)


def test_a_csv_cell_longer_than_the_csv_modules_bound_is_read() -> None:
    # Python's csv module refuses a cell over 128 KiB unless told otherwise.
    cell = "word " * 40_000
    doc = load_csv(f'name,notes\nAna,"{cell}"\n'.encode(), Path("people.csv"))
    assert doc.text.count("word") == 40_000


def test_the_text_after_an_unexpanded_entity_in_a_docx_is_kept() -> None:
    # Entities are never expanded (no billion laughs, no external files); the text
    # after a reference to one is its node's tail, and it was dropped.
    import zipfile

    import docx

    base = io.BytesIO()
    docx.Document().save(base)
    xml = (
        b'<?xml version="1.0"?><!DOCTYPE w:document [<!ENTITY e "E">]>'
        b'<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main">'
        b"<w:body><w:p><w:r><w:t>Before &e; and after.</w:t></w:r></w:p></w:body></w:document>"
    )
    out = io.BytesIO()
    with zipfile.ZipFile(base) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            dst.writestr(info, xml if info.filename == "word/document.xml" else src.read(info))
    assert load_docx(out.getvalue(), Path("entity.docx")).text == "Before  and after."


def test_a_docx_of_too_many_zip_members_is_refused_before_it_is_opened() -> None:
    # zipfile holds an object a member: a 94 MB .docx of a million empty members took
    # 657 MB before any limit. The count is read from the zip's end records first.
    import zipfile

    import docx

    from memlane.knowledge.loaded_document import unpacked_size, zip_members

    base = io.BytesIO()
    docx.Document().save(base)
    out = io.BytesIO()
    with zipfile.ZipFile(base) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            dst.writestr(info, src.read(info))
        for i in range(10_001):
            dst.writestr(f"media/empty{i}", b"")
    data = out.getvalue()
    assert zip_members(data) >= len(zipfile.ZipFile(io.BytesIO(data)).infolist()) > 10_000
    # An end record that says one member: zipfile reads the directory by its size.
    at = data.rfind(b"PK\x05\x06")
    lying = data[: at + 8] + (1).to_bytes(2, "little") * 2 + data[at + 12 :]
    for zipped in (data, lying):
        assert unpacked_size(zipped) == len(zipped)
        with pytest.raises(DocumentLimitError, match=r"members \(as its directory declares\)"):
            load_docx(zipped, Path("many.docx"))
    assert zip_members(base.getvalue()) < 100


def test_pages_sharing_one_content_stream_are_read_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # Distinct page objects drawing one stream were each parsed: 40 pages of a 12 KB
    # file sharing 1.9M operators took 6 minutes.
    from pypdf import PageObject

    text = b"BT /F1 12 Tf 72 720 Td (Shared) Tj ET"
    kids = b" ".join(b"%d 0 R" % n for n in (6, 7, 8))
    page = (
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
        b"/Resources << /Font << /F1 5 0 R >> >> /Contents 4 0 R >>"
    )
    data = hand_made_pdf(
        text, pages=b"<< /Type /Pages /Kids [%s] /Count 3 >>" % kids, extra=[page] * 3
    )
    calls: list[int] = []
    extract = PageObject.extract_text
    monkeypatch.setattr(
        PageObject,
        "extract_text",
        lambda self, *a, **k: (calls.append(1), extract(self, *a, **k))[1],
    )
    doc = load_pdf(data, P)
    assert doc.text == "Shared\n\nShared\n\nShared" and len(doc.pages or []) == 3
    assert len(calls) == 1
