"""Knowledge end to end: ingest folders of real files, re-ingest, prune, isolation, search."""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_loaders import encrypt_pdf, make_docx, make_pdf

from conftest import WordHashEmbedder
from memlane import AsyncMemory, IngestReport, Memory, OnnxEmbedder, UnknownIdError
from memlane.embeddings import TextTruncatedWarning
from memlane.errors import InvalidArgumentError, NotFoundError, StorageError
from memlane.knowledge import (
    RecursiveCharacterSplitter,
    TokenSplitter,
    document_id,
    fragment_id,
    normalise_path,
)
from memlane.knowledge.pipeline import embedding_cost
from memlane.knowledge.progress import ProgressBar

FRAGMENT_KEYS = {
    "document_id",
    "position",
    "total",
    "start",
    "end",
    "source",
    "file_type",
    "shared",
    "agent_id",
}

DEPLOY_MD = """---
title: Deploy guide
tags: [ops]
---
# Deploy

Run `make deploy` from the main branch, then watch the dashboards.

## Rollback

Use `make rollback` when the error rate climbs.
"""


def write_folder(root: Path) -> dict[str, str]:
    """A knowledge folder with a file of every supported type; returns rel path -> kind."""
    (root / "guides").mkdir(parents=True)
    (root / "guides" / "deploy.md").write_text(DEPLOY_MD)
    (root / "notes.txt").write_text("The office coffee machine is on the third floor. " * 40)
    (root / "manual.pdf").write_bytes(
        make_pdf(["Servers restart at midnight.", "Backups run every Sunday."])
    )
    (root / "handbook.docx").write_bytes(make_docx())
    (root / "faq.json").write_text('{"faq": [{"q": "Who approves leave?", "a": "Your lead."}]}')
    (root / "page.html").write_text(
        "<html><head><title>Status</title><script>x()</script></head>"
        "<body><p>All systems nominal.</p></body></html>"
    )
    (root / "people.csv").write_text("name,team\nAlice,infra\nBob,data\n")
    return {
        "guides/deploy.md": "md",
        "notes.txt": "txt",
        "manual.pdf": "pdf",
        "handbook.docx": "docx",
        "faq.json": "json",
        "page.html": "html",
        "people.csv": "csv",
    }


@pytest.fixture
def mem(word_embedder: WordHashEmbedder) -> Memory:
    m = Memory(None, word_embedder)
    yield m
    m.close()


def search_ids(hits: list) -> list[str]:
    return [h.record.id for h in hits]


# -- ingesting a folder ---------------------------------------------------------------------------


def test_ingest_every_type(mem: Memory, tmp_path: Path) -> None:
    kb = tmp_path / "kb"
    kinds = write_folder(kb)
    report = mem.ingest(kb, agent_id="eliza", progress=False)
    assert report.ok, str(report)
    assert report.seen == len(kinds)
    assert set(report.ingested) == set(kinds)
    assert not report.unchanged and not report.replaced and not report.skipped
    assert report.fragments == mem.count("fragments") > len(kinds)
    assert mem.count("documents") == len(kinds)

    for rel, kind in kinds.items():
        doc_id = report.ingested[rel]
        assert doc_id == document_id(rel, agent_id="eliza", shared=False)
        doc = mem.get(doc_id)
        assert doc.table == "documents" and doc.agent_id == "eliza"
        assert doc.metadata["file_type"] == kind and doc.metadata["source"] == rel
        fragments = mem.get_fragments(doc_id)
        assert len(fragments) == doc.metadata["total"]
        for position, frag in enumerate(fragments):
            assert frag.id == fragment_id(doc_id, position) == f"{doc_id}-chunk-{position}"
            assert set(frag.metadata) >= FRAGMENT_KEYS
            assert frag.metadata["position"] == position
            assert frag.metadata["total"] == len(fragments)
            assert frag.metadata["shared"] is False and frag.metadata["agent_id"] == "eliza"
            assert frag.agent_id == "eliza" and frag.evergreen

    # Offsets index the document's extracted text: for a .txt, the file itself.
    notes = (kb / "notes.txt").read_text()
    for frag in mem.get_fragments(report.ingested["notes.txt"]):
        assert notes[frag.metadata["start"] : frag.metadata["end"]] == frag.text

    pdf = mem.get_fragments(report.ingested["manual.pdf"])
    assert pdf[0].metadata["page"] == 1 and pdf[-1].metadata["page_end"] == 2
    md = mem.get_fragments(report.ingested["guides/deploy.md"])
    assert [f.metadata["headings"] for f in md] == [["Deploy"], ["Deploy", "Rollback"]]
    assert md[1].text.startswith("Deploy > Rollback\n\nUse `make rollback`")
    assert md[0].metadata["title"] == "Deploy guide"  # front matter reaches the fragments
    deploy = mem.get(report.ingested["guides/deploy.md"])
    assert deploy.metadata["title"] == "Deploy guide"
    assert deploy.text.startswith("# Deploy\n") and "make rollback" in deploy.text
    assert mem.get(report.ingested["notes.txt"]).text == notes  # the whole extracted text
    docx = mem.get_fragments(report.ingested["handbook.docx"])
    assert any(f.metadata.get("headings") == ["Handbook", "Deploying"] for f in docx)

    hits = mem.search_knowledge("make rollback error rate", agent_id="eliza", k=3)
    assert hits[0].record.id == md[1].id


def test_report_prints(mem: Memory, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("alpha")
    (tmp_path / "b.xyz").write_text("beta")
    (tmp_path / "c.pdf").write_bytes(b"%PDF-1.4 nonsense")
    report = mem.ingest(tmp_path, shared=True, progress=False)
    text = str(report)
    assert text.startswith("2 seen, 1 ingested, 0 unchanged, 0 replaced, 1 failed, 1 skipped;")
    assert "fragments written in" in text
    assert "c.pdf: " in text and "b.xyz: unsupported type '.xyz'" in text
    assert isinstance(report, IngestReport) and not report.ok


def test_corrupt_and_encrypted_pdfs_fail_alone(mem: Memory, tmp_path: Path) -> None:
    good = make_pdf(["Quarterly numbers are up."])
    (tmp_path / "good.pdf").write_bytes(good)
    (tmp_path / "corrupt.pdf").write_bytes(good[: len(good) // 2])
    (tmp_path / "locked.pdf").write_bytes(encrypt_pdf(good, "hunter2"))
    (tmp_path / "broken.docx").write_bytes(b"PK\x03\x04 not a zip")
    (tmp_path / "bad.json").write_text("{oops")
    (tmp_path / "ok.txt").write_text("still ingested")
    report = mem.ingest(tmp_path, agent_id="eliza", progress=False)
    assert set(report.ingested) == {"good.pdf", "ok.txt"}
    assert set(report.failed) == {"corrupt.pdf", "locked.pdf", "broken.docx", "bad.json"}
    assert "encrypted" in report.failed["locked.pdf"]
    assert mem.count("documents") == 2


# -- re-ingesting ---------------------------------------------------------------------------------


def test_unchanged_reingest_does_nothing(
    mem: Memory, word_embedder: WordHashEmbedder, tmp_path: Path
) -> None:
    write_folder(tmp_path)
    first = mem.ingest(tmp_path, agent_id="eliza", progress=False)
    before = {r.id: r.updated_at for r in mem.list("fragments", limit=1000)}
    calls = word_embedder.calls
    again = mem.ingest(tmp_path, agent_id="eliza", progress=False)
    assert again.unchanged == first.ingested
    assert not again.ingested and not again.replaced and again.fragments == 0
    assert word_embedder.calls == calls
    assert {r.id: r.updated_at for r in mem.list("fragments", limit=1000)} == before


def test_changed_file_replaces_its_fragments(mem: Memory, tmp_path: Path) -> None:
    path = tmp_path / "policy.txt"
    chunker = RecursiveCharacterSplitter(60, 0)
    path.write_text("Remote work is allowed on Fridays. " * 6)
    first = mem.ingest(tmp_path, agent_id="eliza", chunker=chunker, progress=False)
    doc_id = first.ingested["policy.txt"]
    old = mem.get_fragments(doc_id)
    assert len(old) > 2

    path.write_text("Remote work is allowed every day.")
    second = mem.ingest(tmp_path, agent_id="eliza", chunker=chunker, progress=False)
    assert second.replaced == {"policy.txt": doc_id}
    new = mem.get_fragments(doc_id)
    assert [f.text for f in new] == ["Remote work is allowed every day."]
    assert mem.count("fragments") == 1 and mem.count("documents") == 1
    for frag in old[1:]:
        assert frag.id not in mem
    assert not mem.search_knowledge("Fridays", agent_id="eliza", mode="text")


def test_other_chunker_or_metadata_reingests(mem: Memory, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("word " * 300)
    mem.ingest(tmp_path, shared=True, progress=False)
    again = mem.ingest(
        tmp_path, shared=True, chunker=RecursiveCharacterSplitter(100, 10), progress=False
    )
    assert set(again.replaced) == {"a.txt"}
    tagged = mem.ingest(
        tmp_path,
        shared=True,
        chunker=RecursiveCharacterSplitter(100, 10),
        metadata={"team": "ops"},
        progress=False,
    )
    assert set(tagged.replaced) == {"a.txt"}
    assert {f.metadata["team"] for f in mem.list("fragments", limit=100)} == {"ops"}
    hits = mem.search_knowledge("word", filters={"team": "ops"})
    assert hits and not mem.search_knowledge("word", filters={"team": "dev"})


def test_prune_missing(mem: Memory, tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    for name in ("keep.txt", "gone.txt", "sub/gone too.md"):
        (tmp_path / name).write_text(f"text of {name}")
    first = mem.ingest(tmp_path, agent_id="eliza", progress=False)
    (tmp_path / "gone.txt").unlink()
    (tmp_path / "sub" / "gone too.md").unlink()
    kept = mem.ingest(tmp_path, agent_id="eliza", progress=False)
    assert not kept.pruned and mem.count("documents") == 3
    pruned = mem.ingest(tmp_path, agent_id="eliza", prune_missing=True, progress=False)
    assert pruned.pruned == {
        "gone.txt": first.ingested["gone.txt"],
        "sub/gone too.md": first.ingested["sub/gone too.md"],
    }
    assert [d.metadata["source"] for d in mem.list_documents()] == ["keep.txt"]
    assert mem.count("fragments") == 1


def test_emptied_file_removes_its_document(mem: Memory, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("content")
    mem.ingest(tmp_path, shared=True, progress=False)
    (tmp_path / "a.txt").write_text("  \n")
    report = mem.ingest(tmp_path, shared=True, progress=False)
    assert report.skipped == {"a.txt": "empty file"} and set(report.pruned) == {"a.txt"}
    assert mem.count("documents") == 0 and mem.count("fragments") == 0


def test_reopened_store_remembers_what_it_ingested(
    word_embedder: WordHashEmbedder, tmp_path: Path
) -> None:
    kb = tmp_path / "kb"
    write_folder(kb)
    with Memory(tmp_path / "store", word_embedder) as m:
        first = m.ingest(kb, shared=True, progress=False)
    with Memory(tmp_path / "store", word_embedder) as m:
        again = m.ingest(kb, shared=True, progress=False)
        assert again.unchanged == first.ingested and not again.ingested
        assert m.search_knowledge("coffee machine floor", k=1)[0].record.metadata["source"] == (
            "notes.txt"
        )


# -- what is walked -------------------------------------------------------------------------------


def test_hidden_and_unsupported_files_are_skipped(mem: Memory, tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "config.txt").write_text("hidden folder")
    (tmp_path / ".env.txt").write_text("hidden file")
    (tmp_path / "image.png").write_bytes(b"\x89PNG")
    (tmp_path / "Makefile").write_text("all:")
    (tmp_path / "empty.md").write_text("")
    (tmp_path / "real.md").write_text("# Real\n\ncontent")
    report = mem.ingest(tmp_path, shared=True, progress=False)
    assert set(report.ingested) == {"real.md"}
    assert report.skipped == {
        ".git/": "hidden",
        ".env.txt": "hidden",
        "image.png": "unsupported type '.png'",
        "Makefile": "unsupported type",
        "empty.md": "empty file",
    }
    # A hidden file named explicitly is ingested.
    assert set(mem.ingest(tmp_path / ".env.txt", shared=True, progress=False).ingested) == {
        ".env.txt"
    }


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="no symbolic links here")
def test_links_out_of_the_root_are_not_followed(mem: Memory, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("the launch codes")
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "inside.txt").write_text("public text")
    (kb / "secret.txt").symlink_to(outside / "secret.txt")
    (kb / "outdir").symlink_to(outside, target_is_directory=True)
    (kb / "alias.txt").symlink_to(kb / "inside.txt")  # inside the root: same file once
    (kb / "loop").symlink_to(kb, target_is_directory=True)
    (kb / "dangling.txt").symlink_to(tmp_path / "missing.txt")
    report = mem.ingest(kb, shared=True, progress=False)
    assert set(report.ingested) == {"inside.txt"}
    assert report.skipped == {
        "alias.txt": "same file as inside.txt",
        "dangling.txt": "broken symbolic link",
        "loop/": "symbolic link loop",
        "outdir": "symbolic link to outside the knowledge root",
        "secret.txt": "symbolic link to outside the knowledge root",
    }
    assert not mem.search_knowledge("launch codes", mode="text")

    followed = mem.ingest(kb, shared=True, follow_outside=True, progress=False)
    assert set(followed.ingested) == {"outdir/secret.txt"}
    assert followed.skipped["secret.txt"] == "same file as outdir/secret.txt"
    assert mem.search_knowledge("launch codes", mode="text")


def test_dotdot_paths_stay_inside_the_root(mem: Memory, tmp_path: Path) -> None:
    (tmp_path / "secret.txt").write_text("private")
    kb = tmp_path / "kb"
    (kb / "eliza").mkdir(parents=True)
    (kb / "eliza" / "a.txt").write_text("agent notes")
    report = mem.ingest_config(
        [{"directory": "eliza"}, {"path": "../secret.txt"}, {"path": "eliza/../../secret.txt"}],
        agent_id="eliza",
        root=kb,
        progress=False,
    )
    assert set(report.ingested) == {"eliza/a.txt"}  # relative to the root, as failed
    # Both entries name the same file.
    assert report.failed == {"../secret.txt": "outside the knowledge root"}
    with pytest.raises(NotFoundError):
        mem.ingest(kb / "missing", agent_id="eliza")
    # ingest() with an explicit root refuses a path that climbs out of it.
    climbed = mem.ingest(kb / ".." / "secret.txt", agent_id="eliza", root=kb, progress=False)
    assert climbed.skipped == {"../secret.txt": "outside the knowledge root"}


# -- ids and scopes -------------------------------------------------------------------------------


def test_ids_are_deterministic() -> None:
    a = document_id("notes/deploy.md", agent_id="eliza", shared=False)
    assert a == document_id("./notes//deploy.md", agent_id="eliza", shared=False)
    assert a == document_id("notes\\deploy.md", agent_id="eliza", shared=False)
    assert a == "d13e7e0a-863c-52ee-9284-78ee1a54cee0"  # fixed forever: ids survive upgrades
    assert a != document_id("notes/deploy.md", agent_id="other", shared=False)
    assert a != document_id("notes/deploy.md", agent_id="eliza", shared=True)
    # Shared knowledge is the same document whoever ingests it.
    assert document_id("x.md", agent_id="eliza", shared=True) == document_id(
        "x.md", agent_id=None, shared=True
    )
    assert normalise_path("a/./b/../c.md") == "a/c.md"
    assert normalise_path("cafe\u0301.md") == "café.md"  # NFD names match NFC ones
    with pytest.raises(InvalidArgumentError):
        normalise_path(" ")


def test_same_file_same_id_across_stores(word_embedder: WordHashEmbedder, tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# A\n\nsame")
    ids = []
    for _ in range(2):
        with Memory(None, word_embedder) as m:
            ids.append(m.ingest(tmp_path, agent_id="eliza", progress=False).ingested["a.md"])
    assert ids[0] == ids[1] == document_id("a.md", agent_id="eliza", shared=False)


def scoped_store(mem: Memory, tmp_path: Path) -> None:
    for name, text in (
        ("shared", "The cafeteria opens at eight."),
        ("eliza", "Eliza's private launch plan: Tuesday."),
        ("bob", "Bob's private launch plan: Friday."),
    ):
        (tmp_path / name).mkdir()
        (tmp_path / name / f"{name}.txt").write_text(text)
    mem.ingest_config(
        [
            {"directory": "shared", "shared": True},
            {"directory": "eliza", "shared": False},
        ],
        agent_id="eliza",
        root=tmp_path,
        progress=False,
    )
    mem.ingest(tmp_path / "bob", agent_id="bob", progress=False)


def test_private_knowledge_is_isolated(mem: Memory, tmp_path: Path) -> None:
    scoped_store(mem, tmp_path)

    def texts(hits: list) -> set[str]:
        return {h.record.text for h in hits}

    for mode in ("hybrid", "vector", "text"):
        eliza = mem.search_knowledge("launch plan cafeteria", agent_id="eliza", k=10, mode=mode)
        assert "Bob's private launch plan: Friday." not in texts(eliza)
        assert "Eliza's private launch plan: Tuesday." in texts(eliza)
        bob = mem.search_knowledge("launch plan cafeteria", agent_id="bob", k=10, mode=mode)
        assert "Eliza's private launch plan: Tuesday." not in texts(bob)
        nobody = mem.search_knowledge("launch plan cafeteria", k=10, mode=mode)
        assert texts(nobody) <= {"The cafeteria opens at eight."}
    assert {d.metadata["source"] for d in mem.list_documents(agent_id="eliza")} == {
        "shared.txt",
        "eliza.txt",
    }
    assert {d.metadata["source"] for d in mem.list_documents(shared=True)} == {"shared.txt"}
    assert {d.metadata["source"] for d in mem.list_documents(agent_id="bob", shared=False)} == {
        "bob.txt"
    }
    assert len(mem.list_documents(shared=False)) == 2
    assert len(mem.list_documents()) == 3


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    owners=st.lists(st.sampled_from(["a", "b", "c", None]), min_size=1, max_size=12),
    viewer=st.sampled_from(["a", "b", "c", None]),
    query=st.sampled_from(["secret plan", "shared plan notes", "zebra", "plan"]),
    mode=st.sampled_from(["hybrid", "vector", "text"]),
)
def test_isolation_property(
    word_embedder: WordHashEmbedder,
    owners: list[str | None],
    viewer: str | None,
    query: str,
    mode: str,
) -> None:
    with Memory(None, word_embedder) as m:
        for i, owner in enumerate(owners):
            text = f"secret plan {i} of {owner}" if owner else f"shared plan notes {i}"
            m.ingest_text(text, source=f"doc{i}", agent_id=owner, shared=owner is None)
        hits = m.search_knowledge(query, agent_id=viewer, k=20, mode=mode)
        for h in hits:
            meta = h.record.metadata
            assert meta["shared"] or meta["agent_id"] == viewer
        visible = sum(1 for o in owners if o is None or o == viewer)
        if query == "plan":
            assert len(hits) == visible


# -- removing -------------------------------------------------------------------------------------


def test_remove_and_clear(mem: Memory, tmp_path: Path) -> None:
    scoped_store(mem, tmp_path)
    eliza_doc = document_id("eliza.txt", agent_id="eliza", shared=False)
    assert mem.remove_document(eliza_doc) == 1
    assert eliza_doc not in mem and fragment_id(eliza_doc, 0) not in mem
    with pytest.raises(UnknownIdError):
        mem.remove_document(eliza_doc)
    with pytest.raises(UnknownIdError):
        mem.get_fragments("nope")
    with pytest.raises(InvalidArgumentError):
        mem.clear_knowledge()  # private knowledge of whom?
    assert mem.clear_knowledge("bob") == 1
    assert mem.clear_knowledge(shared=True) == 1
    assert mem.count("documents") == mem.count("fragments") == 0
    scoped_store_again = tmp_path / "again"
    scoped_store_again.mkdir()
    scoped_store(mem, scoped_store_again)
    assert mem.clear_knowledge(shared=None) == 3
    assert mem.count("fragments") == 0


def test_clear_deletes_documents_and_fragments_in_one_transaction(
    mem: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A delete that fails on the fragments (as a process killed there would stop)
    # leaves the documents too: never a fragment of a document that is gone.
    mem.ingest_text("The deploy key rotates every Monday.", source="inline:a", agent_id="a")
    fragments = {
        r.rowid
        for r in mem._db.rows_by_rowid(list(mem._sync.engine.ids_where(None))).values()
        if r.tbl == "fragments"
    }
    real = type(mem._db).delete

    def failing(self: Any, conn: Any, rowids: Any, *args: Any, **kwargs: Any) -> Any:
        if fragments & set(rowids):
            raise StorageError("the disk failed")
        return real(self, conn, rowids, *args, **kwargs)

    monkeypatch.setattr(type(mem._db), "delete", failing)
    with pytest.raises(StorageError):
        mem.clear_knowledge("a")
    monkeypatch.undo()
    assert len(mem.list_documents(agent_id="a")) == 1
    assert mem.search_knowledge("deploy key", agent_id="a", mode="text", threshold=None)
    assert mem.clear_knowledge("a") == 1
    assert mem.count("documents") == mem.count("fragments") == 0


def test_other_memories_are_untouched(mem: Memory, tmp_path: Path) -> None:
    mem.add("User prefers dark mode", agent_id="eliza")
    (tmp_path / "a.txt").write_text("knowledge")
    mem.ingest(tmp_path, agent_id="eliza", progress=False)
    mem.clear_knowledge("eliza")
    assert mem.count() == 1 and mem.count("memories") == 1
    assert not mem.search_knowledge("dark mode", agent_id="eliza")


# -- text, config, options ------------------------------------------------------------------------


def test_ingest_text(mem: Memory) -> None:
    first = mem.ingest_text("Refunds take five days.", source="inline:faq", shared=True)
    doc_id = first.ingested["inline:faq"]
    assert doc_id == document_id("inline:faq", agent_id=None, shared=True)
    assert mem.ingest_text("Refunds take five days.", source="inline:faq", shared=True).unchanged
    again = mem.ingest_text("Refunds take ten days.", source="inline:faq", shared=True)
    assert again.replaced == {"inline:faq": doc_id}
    assert [f.text for f in mem.get_fragments(doc_id)] == ["Refunds take ten days."]
    md = mem.ingest_text("# Title\n\nbody", source="inline:md", shared=True, file_type="md")
    assert mem.get_fragments(md.ingested["inline:md"])[0].text == "Title\n\nbody"
    with pytest.raises(InvalidArgumentError):
        mem.ingest_text("x", source="s", shared=True, file_type="exe")
    with pytest.raises(InvalidArgumentError):
        mem.ingest_text("x", source="s")  # private without an agent
    with pytest.raises(InvalidArgumentError):
        mem.ingest_text("x", source=" ", shared=True)
    assert mem.ingest_text("   ", source="blank", shared=True).skipped == {"blank": "empty file"}


def test_ingest_config(mem: Memory, tmp_path: Path) -> None:
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "s.md").write_text("# Shared\n\nfor all")
    (tmp_path / "eliza").mkdir()
    (tmp_path / "eliza" / "specific.pdf").write_bytes(make_pdf(["Eliza's own manual."]))
    (tmp_path / "eliza" / "other.txt").write_text("more of eliza")
    report = mem.ingest_config(
        [
            {"directory": "shared", "shared": True},
            {"path": "eliza/specific.pdf", "shared": False, "metadata": {"priority": 1}},
            "Inline knowledge: the wifi password is on the fridge.",  # elizaOS: a plain string
            {"path": "missing.txt"},
            {"path": "shared"},
        ],
        agent_id="eliza",
        root=tmp_path,
        progress=False,
    )
    inline = "Inline knowledge: the wifi password is on the fridge."
    inline_source = f"inline:{hashlib.sha256(inline.encode()).hexdigest()[:16]}"
    # Paths relative to the root, as the entries name them.
    assert set(report.ingested) == {"shared/s.md", "eliza/specific.pdf", inline_source}
    assert report.failed == {"missing.txt": "no such file or folder", "shared": "not a file"}
    pdf = mem.get_fragments(report.ingested["eliza/specific.pdf"])
    assert pdf[0].metadata["priority"] == 1 and pdf[0].metadata["page"] == 1
    # The folder entry later gives specific.pdf the same id: it is unchanged... except for
    # the metadata, so it is replaced; other.txt is new.
    again = mem.ingest_config(
        [{"directory": "eliza", "shared": False}], agent_id="eliza", root=tmp_path, progress=False
    )
    assert again.replaced == {"eliza/specific.pdf": report.ingested["eliza/specific.pdf"]}
    assert set(again.ingested) == {"eliza/other.txt"}
    assert mem.search_knowledge("wifi password fridge", agent_id="eliza", k=1)
    with pytest.raises(InvalidArgumentError):
        mem.ingest_config([{"directory": "a", "path": "b"}], agent_id="eliza")
    with pytest.raises(InvalidArgumentError):
        mem.ingest_config({"directory": "a"}, agent_id="eliza")  # type: ignore[arg-type]


def test_token_splitter_as_chunker(mem: Memory, tmp_path: Path) -> None:
    (tmp_path / "long.txt").write_text("Agents remember what users tell them. " * 60)
    report = mem.ingest(
        tmp_path, shared=True, chunker=TokenSplitter(chunk_size=64, chunk_overlap=8), progress=False
    )
    frags = mem.get_fragments(report.ingested["long.txt"])
    assert len(frags) > 5
    assert all(f.metadata["token_end"] - f.metadata["token_start"] <= 64 for f in frags)


def test_text_only_store(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# Billing\n\nInvoices go out monthly.")
    with Memory(None, None) as m:
        report = m.ingest(tmp_path, shared=True, progress=False)
        assert report.ok and report.fragments == 1
        assert m.search_knowledge("invoices", k=1)[0].record.text.startswith("Billing")


def test_threshold_is_a_cosine_similarity(mem: Memory, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("alpha beta gamma")
    mem.ingest(tmp_path, shared=True, progress=False)
    hits = mem.search_knowledge("alpha beta gamma", threshold=0.99, explain=True)
    assert hits and hits[0].explain is not None and hits[0].explain["cosine"] >= 0.99
    assert not mem.search_knowledge("unrelated words only", threshold=0.99)
    # Text mode: BM25 over the query's ceiling, about 0.45 for one occurrence in a short text.
    assert mem.search_knowledge("alpha", mode="text", threshold=0.3)
    assert not mem.search_knowledge("alpha", mode="text", threshold=0.9)


def test_bad_arguments(mem: Memory, tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError):
        mem.ingest(tmp_path, shared="yes")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        mem.ingest(tmp_path, agent_id="")
    with pytest.raises(InvalidArgumentError):
        mem.ingest(tmp_path, shared=True, chunker=object())  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        mem.ingest(tmp_path, shared=True, batch_size=0)
    with pytest.raises(InvalidArgumentError):
        mem.ingest(tmp_path, shared=True, metadata=["x"])  # type: ignore[arg-type]


def test_small_batches_give_the_same_result(tmp_path: Path) -> None:
    write_folder(tmp_path)
    results = []
    for batch_size in (1, 512):
        with Memory(None, WordHashEmbedder()) as m:
            m.ingest(tmp_path, agent_id="eliza", batch_size=batch_size, progress=False)
            results.append(sorted((r.id, r.text) for r in m.list("fragments", limit=1000)))
    assert results[0] == results[1]


# -- progress and async ---------------------------------------------------------------------------


def test_progress_bar(capsys: pytest.CaptureFixture[str], mem: Memory, tmp_path: Path) -> None:
    stream = io.StringIO()
    bar = ProgressBar(4, enabled="always", stream=stream, interval=0.0, label="kb")
    bar.update(files=1, fragments=10)
    bar.update(files=3, fragments=5)
    bar.close()
    lines = stream.getvalue().splitlines()  # tqdm redraws after a carriage return
    assert any(line.startswith("kb:  25.0%") and "1/4 files" in line for line in lines)
    assert "4/4 files" in lines[-1] and "15 fragments" in lines[-1]
    assert not ProgressBar(3, enabled=True, stream=io.StringIO()).enabled  # not a terminal
    (tmp_path / "a.txt").write_text("text")
    mem.ingest(tmp_path, shared=True, progress="always")
    assert "1/1 files" in capsys.readouterr().err
    mem.ingest(tmp_path, shared=True, progress=False)
    assert capsys.readouterr().err == ""


def test_async_memory(word_embedder: WordHashEmbedder, tmp_path: Path) -> None:
    write_folder(tmp_path)

    async def main() -> None:
        async with AsyncMemory(None, word_embedder) as m:
            report = await m.ingest(tmp_path, agent_id="eliza", progress=False)
            assert report.ok
            hits = await m.search_knowledge("coffee machine", agent_id="eliza", k=1)
            assert hits[0].record.metadata["source"] == "notes.txt"
            docs = await m.list_documents(agent_id="eliza")
            assert len(docs) == 7
            frags = await m.get_fragments(docs[0].id)
            assert frags
            await m.ingest_text("async text", source="inline:a", shared=True)
            await m.ingest_config([{"directory": str(tmp_path), "shared": True}], progress=False)
            assert await m.remove_document(docs[0].id) == len(frags)
            assert await m.clear_knowledge("eliza") == 6

    asyncio.run(main())


# -- the real model -------------------------------------------------------------------------------


def test_real_model_end_to_end(onnx_embedder: OnnxEmbedder, tmp_path: Path) -> None:
    kb = tmp_path / "knowledge"
    (kb / "shared").mkdir(parents=True)
    (kb / "eliza").mkdir()
    (kb / "shared" / "deploy.md").write_text(DEPLOY_MD)
    (kb / "shared" / "cafeteria.txt").write_text("Lunch is served from noon to two.")
    (kb / "eliza" / "persona.txt").write_text("Eliza speaks formally and loves astronomy.")
    with Memory(tmp_path / "store", onnx_embedder) as m:
        report = m.ingest_config(
            [{"directory": "shared", "shared": True}, {"directory": "eliza", "shared": False}],
            agent_id="eliza",
            root=kb,
            progress=False,
        )
        assert report.ok and len(report.ingested) == 3
        hits = m.search_knowledge("how do I deploy?", agent_id="eliza", k=2)
        assert hits[0].record.metadata["source"] == "deploy.md"
        assert hits[0].record.metadata["headings"] == ["Deploy"]
        top = m.search_knowledge("which hobby does eliza have", agent_id="eliza", k=1)
        assert top[0].record.metadata["source"] == "persona.txt"
        assert not any(
            h.record.metadata["source"] == "persona.txt"
            for h in m.search_knowledge("which hobby does eliza have", agent_id="bob", k=5)
        )
        strict = m.search_knowledge("how do I deploy?", agent_id="eliza", threshold=0.3, k=5)
        assert strict and all(h.record.metadata["source"] == "deploy.md" for h in strict)
        doc = m.get(report.ingested["shared/deploy.md"], include_embedding=True)
        assert doc.embedding is not None and abs(float((doc.embedding**2).sum()) - 1) < 1e-4


def test_real_model_reports_cut_fragments_and_refused_files(
    onnx_embedder: OnnxEmbedder, tmp_path: Path
) -> None:
    (tmp_path / "long.txt").write_text("Telescopes gather light from distant galaxies. " * 60)
    (tmp_path / "control.txt").write_text("\x01\x02\x03")  # no token the model can read
    (tmp_path / "fine.txt").write_text("A short note.")
    with Memory(None, onnx_embedder) as m:
        with pytest.warns(TextTruncatedWarning, match="1 fragment"):
            report = m.ingest(
                tmp_path, shared=True, chunker=RecursiveCharacterSplitter(3000, 0), progress=False
            )
        assert report.truncated == 1 and "cut by the model" in str(report)
        assert set(report.ingested) == {"long.txt", "fine.txt"}
        assert report.failed["control.txt"].startswith("cannot embed:")


def test_a_file_the_model_refuses_fails_alone(onnx_embedder: OnnxEmbedder) -> None:
    with Memory(None, onnx_embedder) as m:
        report = m.ingest_text("\x01\x02", source="inline:control", shared=True)
        assert report.failed["inline:control"].startswith("cannot embed:")
        assert m.count() == 0


def test_fragments_sort_by_what_the_model_reads(
    onnx_embedder: OnnxEmbedder, word_embedder: WordHashEmbedder
) -> None:
    texts = ["hello world", "a", "word " * 400]
    # The default model: tokens with [CLS] and [SEP], cut at its 256.
    assert embedding_cost(onnx_embedder)(texts) == [4, 3, 256]
    assert embedding_cost(word_embedder)(texts) == [11, 1, 2000]  # others: characters
    assert embedding_cost(None)(texts) == [11, 1, 2000]
