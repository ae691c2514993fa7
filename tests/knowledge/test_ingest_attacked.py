"""Hostile files against ingestion: one file whose records an add would refuse (a NUL in
its text, front matter with a reserved key or an integer too long for JSON), a file name
that is not UTF-8, two names that are one once normalised, a PDF whose pages share one
deflated content stream, an ``ingest_config`` entry that is not what it should be. Each
fails alone (reported with its reason, the others ingested) or is refused before anything
is written; an unexpected error of the producer thread reaches the caller."""

from __future__ import annotations

import os
import unicodedata
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import StoreFactory, WordHashEmbedder
from memlane import Memory
from memlane.errors import InvalidArgumentError
from memlane.knowledge import DOCUMENTS, FRAGMENTS, IngestLimits, pipeline
from memlane.knowledge.document_limits import DocumentLimitError, applied_limits
from memlane.knowledge.loaders import load_pdf

GOOD = {"a_good.txt": "Cats sleep sixteen hours a day.\n", "z_good.txt": "Dogs bark at mail.\n"}


def raw_pdf(content: bytes, pages: int = 1, deflate: bool = False) -> bytes:
    """A PDF of ``pages`` pages that all draw the one content stream ``content`` (written
    by hand: fpdf would not put a NUL in a string, nor share a stream)."""
    stream = zlib.compress(content, 9) if deflate else content
    head = b"<< /Length %d%s >>\nstream\n" % (len(stream), b" /Filter /FlateDecode" * deflate)
    objects = {
        1: b"<< /Type /Catalog /Pages 2 0 R >>",
        3: head + stream + b"\nendstream",
        4: b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    }
    page = b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 3 0 R "
    page += b"/Resources << /Font << /F1 4 0 R >> >> >>"
    for n in range(5, 5 + pages):
        objects[n] = page
    kids = b" ".join(b"%d 0 R" % n for n in range(5, 5 + pages))
    objects[2] = b"<< /Type /Pages /Kids [" + kids + b"] /Count %d >>" % pages
    out, offsets = b"%PDF-1.4\n", {}
    for n in sorted(objects):
        offsets[n] = len(out)
        out += b"%d 0 obj\n" % n + objects[n] + b"\nendobj\n"
    xref, size = len(out), max(objects) + 1
    out += b"xref\n0 %d\n0000000000 65535 f \n" % size
    out += b"".join(b"%010d 00000 n \n" % offsets[n] for n in range(1, size))
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (size, xref)
    return out


@pytest.fixture
def store(make_store: StoreFactory, word_embedder: WordHashEmbedder) -> Iterator[Memory]:
    """A store with vectors, on both backends."""
    m = make_store("kb", word_embedder)
    yield m
    m.close()


def folder(root: Path, bad: dict[str, bytes]) -> Path:
    root.mkdir()
    for name, text in GOOD.items():
        (root / name).write_text(text)
    for name, data in bad.items():
        (root / name).write_bytes(data)
    return root


# -- 1. a record an add would refuse fails its file alone ----------------------------------------

REFUSED = {
    "b_nul.pdf": (raw_pdf(b"BT /F1 12 Tf 72 700 Td (hello\\000world) Tj ET"), "NUL character"),
    "b_nul.json": (b'{"a": "x\\u0000y"}', "NUL character"),
    "b_nul.jsonl": (b'{"a": "fine"}\n{"b": "x\\u0000y"}\n', "NUL character"),
    "b_bigint.md": (b"---\nk: 0x" + b"f" * 5000 + b"\n---\n# T\n\nbody text\n", "4300 digits"),
    "b_reserved.md": (b"---\nmemlane:unique: true\n---\n# T\n\nbody\n", "'memlane:unique'"),
    "b_huge.md": (b"---\nk: " + b"9" * 400 + b"\n---\n# T\n\nbody text\n", "larger than any"),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_record_an_add_refuses_fails_its_file_alone(
    store: Memory, tmp_path: Path, name: str
) -> None:
    data, why = REFUSED[name]
    root = folder(tmp_path / "files", {name: data})
    report = store.ingest(root, shared=True, progress=False)
    assert set(report.failed) == {name} and why in report.failed[name], report.failed
    assert set(report.ingested) == set(GOOD)  # the file after it, in the same batch, too
    assert store.count(table=DOCUMENTS) == 2 and store.count(table=FRAGMENTS) == 2
    assert store.search_knowledge("dogs bark", mode="text", threshold=None)


def test_every_refused_file_in_one_batch(store: Memory, tmp_path: Path) -> None:
    root = folder(tmp_path / "files", {name: data for name, (data, _) in REFUSED.items()})
    report = store.ingest(root, shared=True, progress=False)
    assert set(report.failed) == set(REFUSED) and set(report.ingested) == set(GOOD)
    again = store.ingest(root, shared=True, progress=False)  # nothing half-written
    assert set(again.unchanged) == set(GOOD) and set(again.failed) == set(REFUSED)


class Garbling(WordHashEmbedder):
    """The test embedder, answering a batch that holds "zebra" with garbage: one vector
    for all of it, vectors one number short, or a NaN in one."""

    def __init__(self, how: str) -> None:
        super().__init__()
        self.how = how

    def embed_batch(self, texts: Any) -> Any:
        out = super().embed_batch(texts)
        if not any("zebra" in t.lower() for t in texts):
            return out
        if self.how == "one":
            return out[:1]
        if self.how == "short":
            return out[:, :-1]
        out[-1, 0] = np.nan
        return out


@pytest.mark.parametrize("how", ["one", "short", "nan"])
def test_an_embedder_answer_no_write_could_use_fails_the_document(
    make_store: StoreFactory, how: str
) -> None:
    """Checked as an add checks it: one vector for every fragment was stored (broadcast),
    a shorter one escaped as numpy's ValueError, a NaN failed the whole call."""
    mem = make_store("garbled", Garbling(how))
    text = "\n\n".join(f"Zebras graze on the plain, herd number {i}." for i in range(40))
    report = mem.ingest_text(text, source="zebras", shared=True)
    assert not report.ok and "cannot embed" in report.failed["zebras"], report.failed
    assert mem.count(table=DOCUMENTS) == 0 and mem.count(table=FRAGMENTS) == 0
    assert mem.ingest_text("Cats sleep all day.", source="cats", shared=True).ok
    mem.close()


def test_an_agent_id_no_record_can_hold_is_refused_before_the_ingest(
    local: Memory, tmp_path: Path
) -> None:
    root = folder(tmp_path / "files", {})
    with pytest.raises(InvalidArgumentError, match="agent_id contains a NUL"):
        local.ingest(root, agent_id="eli\x00za", progress=False)
    assert local.count(table=DOCUMENTS) == 0


# -- 2. a name that is not UTF-8; the producer's errors ------------------------------------------


def test_a_file_name_that_is_not_utf8_fails_alone(local: Memory, tmp_path: Path) -> None:
    root = folder(tmp_path / "files", {})
    with open(os.path.join(os.fsencode(root), b"m-name-\xff.txt"), "wb") as f:
        f.write(b"text of a file with a Latin-1 name")
    report = local.ingest(root, shared=True, progress=False)
    assert report.failed == {
        "m-name-\udcff.txt": "the file name is not valid UTF-8: " + repr(b"m-name-\xff.txt")
    }
    assert set(report.ingested) == set(GOOD) and not report.ok
    assert local.count(table=DOCUMENTS) == 2


def test_names_that_are_one_once_normalised_fail_the_second(local: Memory, tmp_path: Path) -> None:
    nfc, nfd = (unicodedata.normalize(form, "café.txt") for form in ("NFC", "NFD"))
    root = folder(tmp_path / "files", {nfc: b"about cats\n", nfd: b"about dogs\n"})
    report = local.ingest(root, shared=True, progress=False)
    assert set(report.ingested) == {*GOOD, nfc}
    assert "same name once normalised" in report.failed[nfc]
    assert local.count(table=DOCUMENTS) == 3


def test_an_unexpected_error_of_the_producer_reaches_the_caller(
    local: Memory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = folder(tmp_path / "files", {})
    real = pipeline.choose_id

    def choose_id(path: str, *args: object) -> str:
        if path == "z_good.txt":
            raise RuntimeError("boom in the producer")
        return real(path, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(pipeline, "choose_id", choose_id)
    with pytest.raises(RuntimeError, match="boom in the producer"):
        local.ingest(root, shared=True, progress=False)
    # What was prepared before it is written; the next run completes the folder.
    assert [d.metadata["source"] for d in local.list_documents()] == ["a_good.txt"]
    monkeypatch.undo()
    assert set(local.ingest(root, shared=True, progress=False).ingested) == {"z_good.txt"}


# -- 3. a PDF's text is bounded while it is extracted ---------------------------------------------


def pdf_bomb(pages: int, chars: int) -> bytes:
    """Pages that share one deflated content stream of ``chars`` characters of text."""
    return raw_pdf(b"BT /F1 12 Tf 72 700 Td (" + b"A " * (chars // 2) + b") Tj ET", pages, True)


def test_pdf_text_stops_at_max_unpacked_bytes(
    local: Memory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pypdf import PageObject

    data = pdf_bomb(pages=30, chars=50_000)  # 1.5 million characters from a few KB
    assert len(data) < 10_000
    extracted = []
    real = PageObject.extract_text

    def extract_text(self: PageObject, *args: object, **kwargs: object) -> str:
        extracted.append(1)
        return real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(PageObject, "extract_text", extract_text)
    with (
        applied_limits(IngestLimits(max_unpacked_bytes=120_000)),
        pytest.raises(DocumentLimitError, match="max_unpacked_bytes=120000"),
    ):
        load_pdf(data, Path("bomb.pdf"))
    # Pages of 50,000 characters, all drawing one stream: its text is extracted once, and
    # the third page's passes the bound.
    assert len(extracted) == 1
    with applied_limits(IngestLimits(max_unpacked_bytes=1_600_000)):
        assert len(load_pdf(data, Path("bomb.pdf")).pages or []) == 30  # within it: whole
    root = folder(tmp_path / "files", {"bomb.pdf": data})
    limits = IngestLimits(max_unpacked_bytes=120_000)
    report = local.ingest(root, shared=True, progress=False, limits=limits)
    assert set(report.limited) == {"bomb.pdf"} and "stopped at page 3" in report.limited["bomb.pdf"]
    assert set(report.ingested) == set(GOOD)


# -- 4. ingest_config checks every entry first ----------------------------------------------------

BAD_ENTRIES = [
    ({"path": "b.txt", "shared": True, "metadata": "oops"}, "metadata must be a dict, got str"),
    ({"path": "b.txt", "shared": True, "metadata": ["x"]}, "metadata must be a dict"),
    ({"path": "b.txt", "shared": True, "metadata": {1: "x"}}, "str keys"),
    ({"path": "b.txt", "shared": True, "metadata": {"memlane:unique": 1}}, "reserved"),
    ({"path": "b.txt", "shared": True, "metadata": {"n": float("nan")}}, "JSON"),
    ({"path": "b.txt", "shared": "yes"}, "shared must be a bool"),
    ({"path": "b.txt"}, "needs an agent_id"),
    ({"path": " "}, "must not be empty"),
    ({"path": 3}, "exactly one of"),
    ("text with a lone \udcff surrogate", "lone surrogate"),
    (7, "must be a dict or a str"),
]


@pytest.mark.parametrize(("entry", "why"), BAD_ENTRIES)
def test_ingest_config_checks_every_entry_before_the_first(
    local: Memory, tmp_path: Path, entry: object, why: str
) -> None:
    (tmp_path / "a.txt").write_text("Alpha facts about apples.\n")
    (tmp_path / "b.txt").write_text("Beta facts about bananas.\n")
    entries = [{"path": "a.txt", "shared": True}, "Inline facts about cherries.", entry]
    with pytest.raises(InvalidArgumentError, match="entries\\[2\\]") as caught:
        local.ingest_config(entries, root=tmp_path, progress=False)  # type: ignore[arg-type]
    assert why in str(caught.value)
    assert local.count(table=DOCUMENTS) == 0  # nothing ingested before the refusal


def test_ingest_config_metadata_given_for_all_is_checked_first(
    local: Memory, tmp_path: Path
) -> None:
    (tmp_path / "a.txt").write_text("Alpha facts about apples.\n")
    with pytest.raises(InvalidArgumentError, match="metadata"):
        local.ingest_config(
            [{"path": "a.txt", "shared": True}],
            root=tmp_path,
            metadata="oops",  # type: ignore[arg-type]
            progress=False,
        )
    report = local.ingest_config(
        [{"path": "a.txt", "shared": True, "metadata": {"team": "fruit"}}],
        root=tmp_path,
        metadata={"kind": "facts"},
        progress=False,
    )
    doc = local.get(report.ingested["a.txt"])
    assert doc.metadata["team"] == "fruit" and doc.metadata["kind"] == "facts"
