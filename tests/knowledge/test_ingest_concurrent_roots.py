"""Two processes ingesting two roots of one owner into one PostgreSQL store, both
holding README.md: each chose the plain id from what it read when it started, and the
later write replaced the other's document. The write now replaces only the records its
ids were chosen for; finding one taken meanwhile, it chooses again. The interleaving is
made deterministic: the second store's ingest runs while the first embeds."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import MidwayEmbedder, StoreFactory, WordHashEmbedder
from memlane.knowledge.ids import document_id
from pg_server import PgServer


@pytest.fixture
def postgres(pg_server: PgServer, tmp_path: Path) -> Iterator[StoreFactory]:
    factory = StoreFactory("postgres", tmp_path, pg_server)
    yield factory
    factory.close_all()


def test_two_stores_ingesting_two_roots_at_once_keep_both(
    postgres: StoreFactory, tmp_path: Path
) -> None:
    a, b = tmp_path / "projA", tmp_path / "projB"
    for folder, text in ((a, "deploys with ansible"), (b, "deploys with helm")):
        folder.mkdir()
        (folder / "README.md").write_text(f"# {folder.name}\n\nThe project {text}.\n")
    embedder = MidwayEmbedder()
    first = postgres("kb", embedder)
    second = postgres("kb", WordHashEmbedder(), cache_dir=tmp_path / "cache2")
    reports = []
    embedder.midway = lambda: reports.append(second.ingest(b, shared=True, progress=False))
    report = first.ingest(a, shared=True, progress=False)
    plain = document_id("README.md", agent_id=None, shared=True)
    assert reports[0].ingested == {"README.md": plain}  # stored first: the plain id
    assert set(report.ingested) == {"README.md"} and report.ingested["README.md"] != plain
    roots = sorted(str(d.metadata["root"]) for d in first.list_documents())
    assert roots == [str(a.resolve()), str(b.resolve())]
    for word in ("ansible", "helm"):
        assert len(first.search_knowledge(word, mode="text", threshold=None)) == 1
    deadline = time.monotonic() + 30  # the other process sees it once it follows the log
    while len(second.list_documents()) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(second.list_documents()) == 2
    # Each root finds its own document again.
    assert first.ingest(a, shared=True, progress=False).unchanged == report.ingested
    assert first.ingest(b, shared=True, progress=False).unchanged == reports[0].ingested


def test_a_write_whose_id_another_root_took_meanwhile_chooses_again(
    postgres: StoreFactory, tmp_path: Path
) -> None:
    # The first root's document is there, then gone (so B chooses the plain id); A's
    # ingest stores it again while B embeds.
    a, b = tmp_path / "projA", tmp_path / "projB"
    for folder in (a, b):
        folder.mkdir()
        (folder / "README.md").write_text(f"# {folder.name}\n\nAbout {folder.name}.\n")
    embedder = MidwayEmbedder()
    first = postgres("kb", embedder)
    second = postgres("kb", WordHashEmbedder(), cache_dir=tmp_path / "cache2")
    done = second.ingest(a, shared=True, progress=False)
    second.remove_document(done.ingested["README.md"])
    embedder.midway = lambda: second.ingest(a, shared=True, progress=False)
    report = first.ingest(b, shared=True, progress=False)
    assert set(report.ingested) == {"README.md"} and not report.replaced
    roots = sorted(str(d.metadata["root"]) for d in first.list_documents())
    assert roots == [str(a.resolve()), str(b.resolve())]
