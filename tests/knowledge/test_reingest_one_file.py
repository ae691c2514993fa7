"""Ingesting one file of a folder ingested before, without ``root``: the file is
ingested again under the folder's root (that of the owner's document made from the same
real file), so its document is replaced, never joined by a second one under another id.
On both backends."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from conftest import StoreFactory, WordHashEmbedder
from memlane import Memory
from memlane.knowledge import document_id


def folder(tmp_path: Path) -> Path:
    kb = tmp_path / "kb"
    (kb / "sub").mkdir(parents=True)
    (kb / "sub" / "a.md").write_text("# Refunds\n\nRefunds take thirty days.\n")
    (kb / "b.md").write_text("# Shipping\n\nParcels ship within two days.\n")
    return kb


def documents(mem: Memory, agent: str) -> dict[str, str]:
    return {str(d.metadata["source"]): d.text for d in mem.list_documents(agent, shared=False)}


def test_a_changed_file_replaces_its_document(
    make_store: StoreFactory, word_embedder: WordHashEmbedder, tmp_path: Path
) -> None:
    kb = folder(tmp_path)
    mem = make_store("one-file", word_embedder)
    first = mem.ingest(kb, agent_id="eliza", progress=False)
    doc_id = first.ingested["sub/a.md"]
    (kb / "sub" / "a.md").write_text("# Refunds\n\nRefunds take five days.\n")

    report = mem.ingest(kb / "sub" / "a.md", agent_id="eliza", progress=False)
    assert report.replaced == {"sub/a.md": doc_id}
    assert not report.ingested
    assert documents(mem, "eliza").keys() == {"sub/a.md", "b.md"}
    assert "five days" in documents(mem, "eliza")["sub/a.md"]
    hits = mem.search_knowledge("refunds", agent_id="eliza", threshold=None, mode="text")
    assert ["five" in h.record.text for h in hits] == [True]
    assert mem.get(doc_id).metadata["root"] == str(kb.resolve())

    # Unchanged, and given by another path to it: nothing to do.
    again = mem.ingest(kb / "sub" / ".." / "sub" / "a.md", agent_id="eliza", progress=False)
    assert again.unchanged == {"sub/a.md": doc_id}


@pytest.mark.skipif(sys.platform == "win32", reason="symbolic links need privileges")
def test_the_file_is_known_by_its_real_path(
    make_store: StoreFactory, word_embedder: WordHashEmbedder, tmp_path: Path
) -> None:
    kb = folder(tmp_path)
    (tmp_path / "kb-link").symlink_to(kb, target_is_directory=True)
    mem = make_store("one-file", word_embedder)
    doc_id = mem.ingest(tmp_path / "kb-link", agent_id="eliza", progress=False).ingested["sub/a.md"]
    (kb / "sub" / "a.md").write_text("# Refunds\n\nRefunds take five days.\n")
    # The folder was given through a link; the file is given by its real path.
    report = mem.ingest(kb / "sub" / "a.md", agent_id="eliza", progress=False)
    assert report.replaced == {"sub/a.md": doc_id}
    assert documents(mem, "eliza").keys() == {"sub/a.md", "b.md"}


def test_only_the_owners_documents_count(
    make_store: StoreFactory, word_embedder: WordHashEmbedder, tmp_path: Path
) -> None:
    """Another agent's (or the shared) document of the file gives no root: the file
    alone is a document of its folder, as before; and a root given is the root."""
    kb = folder(tmp_path)
    mem = make_store("one-file", word_embedder)
    mem.ingest(kb, agent_id="bob", progress=False)
    mem.ingest(kb, shared=True, progress=False)
    report = mem.ingest(kb / "sub" / "a.md", agent_id="eliza", progress=False)
    assert report.ingested == {"a.md": document_id("a.md", agent_id="eliza", shared=False)}
    assert documents(mem, "bob").keys() == {"sub/a.md", "b.md"}
    assert {d.metadata["source"] for d in mem.list_documents(shared=True)} == {"sub/a.md", "b.md"}

    shared = mem.ingest(kb / "sub" / "a.md", shared=True, progress=False)
    assert shared.unchanged.keys() == {"sub/a.md"}
    given = mem.ingest(kb / "sub" / "a.md", agent_id="bob", root=kb / "sub", progress=False)
    assert given.ingested.keys() == {"a.md"}
