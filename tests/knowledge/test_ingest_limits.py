"""Ingestion limits (issue 14): a document that unpacks to too many bytes (a .docx zip
bomb) or makes too many fragments is reported and nothing of it stored."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import WordHashEmbedder
from memlane import Memory
from memlane.errors import InvalidArgumentError
from memlane.knowledge import FRAGMENTS, IngestLimits
from memlane.knowledge.loaders import unpacked_size


def docx_bomb(unpacked: int) -> bytes:
    """A valid .docx (made by python-docx) whose word/document.xml is ``unpacked`` bytes of
    one highly compressible paragraph: a few hundred KB at most on disk."""
    import docx

    buf = io.BytesIO()
    docx.Document().save(buf)
    out = io.BytesIO()
    with (
        zipfile.ZipFile(buf) as src,
        zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as dst,
    ):
        for info in src.infolist():
            if info.filename != "word/document.xml":
                dst.writestr(info, src.read(info))
                continue
            head = (
                b'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
                b'<w:document xmlns:w="http://schemas.openxmlformats.org/'
                b'wordprocessingml/2006/main"><w:body><w:p><w:r><w:t>'
            )
            tail = b"</w:t></w:r></w:p></w:body></w:document>"
            chunk = b"bomb " * 200_000
            with dst.open("word/document.xml", "w", force_zip64=True) as f:
                f.write(head)
                left = unpacked - len(head) - len(tail)
                while left > 0:
                    f.write(chunk[:left])
                    left -= len(chunk)
                f.write(tail)
    return out.getvalue()


@pytest.fixture
def mem(tmp_path: Path, word_embedder: WordHashEmbedder) -> Iterator[Memory]:
    m = Memory(tmp_path / "store", word_embedder)
    yield m
    m.close()


def test_a_docx_bomb_stops_before_it_is_parsed(mem: Memory, tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    bomb = docx_bomb(160 * 2**20)  # what the 750 KB file did, smaller
    assert len(bomb) < 2**20 and unpacked_size(bomb) > 160 * 2**20
    (folder / "bomb.docx").write_bytes(bomb)
    (folder / "fine.txt").write_text("a small document that is ingested all the same")
    report = mem.ingest(folder, shared=True, progress=False)  # the default limits
    assert set(report.limited) == {"bomb.docx"} and report.failed == report.limited
    assert "max_unpacked_bytes=134217728" in report.limited["bomb.docx"]
    assert "above max_unpacked_bytes" in str(report)
    assert "1 over a size limit" in report.summary()
    assert set(report.ingested) == {"fine.txt"}
    assert [d.metadata["source"] for d in mem.list_documents(shared=True)] == ["fine.txt"]
    # A lower limit is configurable; a higher one lets a document through.
    small = docx_bomb(2 * 2**20)
    (folder / "bomb.docx").write_bytes(small)
    report = mem.ingest(
        folder / "bomb.docx", shared=True, progress=False, limits=IngestLimits(2**20)
    )
    assert "unpacks to" in report.limited["bomb.docx"]
    report = mem.ingest(
        folder / "bomb.docx",
        shared=True,
        progress=False,
        limits=IngestLimits(max_unpacked_bytes=4 * 2**20, max_fragments=10**6),
    )
    assert set(report.ingested) == {"bomb.docx"} and not report.limited


def test_too_many_fragments_store_nothing_and_keep_the_old_version(mem: Memory) -> None:
    text = "\n\n".join(f"paragraph {i} " + "word " * 300 for i in range(40))
    few = IngestLimits(max_fragments=5)
    report = mem.ingest_text(text, source="inline:long", shared=True, limits=few)
    assert "above max_fragments=5" in report.limited["inline:long"]
    assert report.fragments == 0 and mem.count(FRAGMENTS) == 0 and len(mem) == 0
    # Stored within the limit, then refused when it grows past it: the old one stays.
    report = mem.ingest_text("short text", source="inline:long", shared=True, limits=few)
    assert report.ok and mem.count(FRAGMENTS) == 1
    before = sorted(r.id for r in mem.list(None, limit=100))
    report = mem.ingest_text(text, source="inline:long", shared=True, limits=few)
    assert set(report.limited) == {"inline:long"}
    assert sorted(r.id for r in mem.list(None, limit=100)) == before
    # The default is far above what a normal document makes.
    assert mem.ingest_text(text, source="inline:long", shared=True).ok


def test_text_longer_than_the_limit_is_refused(mem: Memory) -> None:
    report = mem.ingest_text("x " * 5_000, source="t", shared=True, limits=IngestLimits(1_000))
    assert "characters of text" in report.limited["t"] or "unpacks to" in report.limited["t"]
    assert len(mem) == 0


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, None])
def test_limits_are_checked(bad: object) -> None:
    with pytest.raises(InvalidArgumentError, match="max_fragments"):
        IngestLimits(max_fragments=bad)  # type: ignore[arg-type]


def test_limits_must_be_ingest_limits(mem: Memory) -> None:
    with pytest.raises(InvalidArgumentError, match="limits"):
        mem.ingest_text("x", source="t", shared=True, limits={"max_fragments": 1})  # type: ignore[arg-type]


def test_a_document_stops_being_cut_at_the_fragment_limit(
    mem: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its fragments were counted once all were cut: 20 MB of one word took 48 s and
    # 2 GB before the refusal. The built-in splitters now stop one past the limit.
    from memlane.knowledge import chunking

    made: list[int] = []
    count = chunking.fragments_made
    monkeypatch.setattr(chunking, "fragments_made", lambda n: (made.append(n), count(n)))
    few = IngestLimits(max_fragments=5)
    for kind, text in [("txt", "word " * 40_000), ("md", "# A\n\n" + "word " * 40_000)]:
        made.clear()
        report = mem.ingest_text(text, source=kind, shared=True, file_type=kind, limits=few)
        assert report.limited[kind] == "more than 5 fragments, above max_fragments=5"
        assert sum(made) == 6
    assert len(mem) == 0
    # A splitter called outside ingestion cuts the whole text.
    splitter = chunking.RecursiveCharacterSplitter(100, 0)
    assert len(splitter.split("x" * 2_000)) == 20


def test_metadata_each_fragment_would_carry_is_bounded(mem: Memory) -> None:
    # A title of a megabyte went into every fragment: a 1.2 MB page made a 719 MB store.
    page = f"<html><head><title>{'T' * 20_000}</title></head><body><p>{'word ' * 500}</p>"
    report = mem.ingest_text(page, source="page", shared=True, file_type="html")
    reason = report.limited["page"]
    assert reason == "metadata of 20013 characters, above max_metadata_chars=16384"
    assert len(mem) == 0
    wide = IngestLimits(max_metadata_chars=30_000)
    assert mem.ingest_text(page, source="page", shared=True, file_type="html", limits=wide).ok
    # Counted as characters, not as JSON's escapes of them.
    page = f"<html><head><title>{'標' * 10_000}</title></head><body><p>text</p>"
    assert mem.ingest_text(page, source="cjk", shared=True, file_type="html").ok


def test_a_chunker_of_the_callers_own_is_counted_by_what_it_returns(mem: Memory) -> None:
    # One that packs the sentences a built-in splitter cuts was charged every sentence:
    # a document of 6 fragments was refused at max_fragments=100.
    from memlane.knowledge.chunking import Chunk, RecursiveCharacterSplitter

    class Packing:
        def split(self, text: str) -> list[Chunk]:
            pieces = RecursiveCharacterSplitter(40, 0).split(text)
            return [
                Chunk(text[g[0].start : g[-1].end], g[0].start, g[-1].end)
                for g in (pieces[i : i + 50] for i in range(0, len(pieces), 50))
            ]

    text = " ".join(f"Sentence number {i} says little." for i in range(300))
    few = IngestLimits(max_fragments=100)
    report = mem.ingest_text(text, source="packed", shared=True, limits=few, chunker=Packing())
    assert report.ok and report.fragments == 6
    report = mem.ingest_text(
        text, source="p2", shared=True, chunker=Packing(), limits=IngestLimits(max_fragments=5)
    )
    assert report.limited["p2"] == "6 fragments, above max_fragments=5"


def test_a_csv_is_read_under_a_limit_beyond_a_c_long(mem: Memory) -> None:
    # The csv module's bound was set to the limit itself: 2**63 is no C long.
    huge = IngestLimits(max_unpacked_bytes=2**63)
    report = mem.ingest_text(
        "a,b\n1,2\n", source="t.csv", shared=True, file_type="csv", limits=huge
    )
    assert report.ok
