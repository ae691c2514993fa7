"""What another attack on knowledge found, each refused or kept as it should be, on both
backends: another agent's knowledge in a store whose default scope names an agent (stored
where no knowledge call could find, list or remove it), two ``ingest_config`` folders
holding files of one name (one's results lost from the report), a folder the walk may
not list (its documents pruned as if its files were gone), and an empty path (the
current folder ingested). Each test fails on the code before its fix."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from conftest import StoreFactory, WordHashEmbedder
from memlane.errors import InvalidArgumentError
from memlane.knowledge import DOCUMENTS, FRAGMENTS, walk


def folder(tmp_path: Path, name: str, files: dict[str, str]) -> Path:
    top = tmp_path / name
    for rel, text in files.items():
        (top / rel).parent.mkdir(parents=True, exist_ok=True)
        (top / rel).write_text(text, encoding="utf-8")
    return top


def test_a_store_bound_to_an_agent_refuses_to_write_another_agents_knowledge(
    make_store: StoreFactory, word_embedder: WordHashEmbedder, tmp_path: Path
) -> None:
    kb = folder(tmp_path, "kb", {"a.txt": "the zebra code of alice"})
    mem = make_store("bound", word_embedder, default_scope={"agent_id": "x"})
    writes: list[Any] = [
        lambda: mem.ingest(kb, agent_id="alice", progress=False),
        lambda: mem.ingest_text("the zebra code", source="z.txt", agent_id="alice"),
        lambda: mem.ingest_config(["the zebra code"], agent_id="alice", progress=False),
        lambda: mem.ingest_config([{"path": "kb/a.txt"}], agent_id="alice", root=tmp_path),
        lambda: mem.watch(kb, agent_id="alice"),
    ]
    for write in writes:
        with pytest.raises(InvalidArgumentError, match="agent_id 'alice' is not this store's"):
            write()
    assert mem.count(DOCUMENTS) == mem.count(FRAGMENTS) == 0
    # Shared knowledge, and its own agent's, as before; another agent reads the shared.
    shared = mem.ingest_text("the zebra code is shared", source="s.txt", shared=True)
    own = mem.ingest(kb, agent_id="x", progress=False)
    assert [d.id for d in mem.list_documents(agent_id="alice")] == list(shared.ingested.values())
    found = mem.search_knowledge("zebra code", agent_id="alice", mode="text", threshold=None)
    assert [h.record.text for h in found] == ["the zebra code is shared"]
    assert mem.clear_knowledge("alice") == 0
    assert [d.id for d in mem.list_documents(agent_id="x", shared=False)] == list(
        own.ingested.values()
    )
    assert mem.clear_knowledge("x") == 1


def test_ingest_configs_folders_keep_their_files_of_one_name_apart(
    make_store: StoreFactory, word_embedder: WordHashEmbedder, tmp_path: Path
) -> None:
    for name in ("projA", "projB"):
        folder(tmp_path, name, {"README.md": f"# {name}\nabout {name}", "bad.json": "{x"})
    folder(tmp_path, "docs/sub", {"note.md": "# note\nalone"})
    mem = make_store("config", word_embedder)
    entries = [
        {"directory": "projA", "shared": True},
        {"directory": "projB", "shared": True},
        {"path": "docs/sub/note.md", "shared": True},
    ]
    report = mem.ingest_config(entries, root=tmp_path, progress=False)
    assert sorted(report.ingested) == ["docs/sub/note.md", "projA/README.md", "projB/README.md"]
    assert sorted(report.failed) == ["projA/bad.json", "projB/bad.json"]
    assert report.seen == 5
    assert sorted(report.ingested.values()) == sorted(d.id for d in mem.list_documents())


def test_a_folder_the_walk_may_not_list_keeps_its_documents(
    make_store: StoreFactory,
    word_embedder: WordHashEmbedder,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kb = folder(tmp_path, "kb", {"top.txt": "apples", "sub/a.txt": "bananas", "sub/b.txt": "figs"})
    mem = make_store("unlisted", word_embedder)
    mem.ingest(kb, shared=True, progress=False)
    (kb / "top.txt").unlink()
    scandir = os.scandir

    def refusing(path: Any) -> Any:
        if Path(path).name == "sub":  # as a folder of mode 000 is to another user
            raise PermissionError(13, "Permission denied", str(path))
        return scandir(path)

    monkeypatch.setattr(walk.os, "scandir", refusing)
    report = mem.ingest(kb, shared=True, progress=False, prune_missing=True)
    assert report.skipped == {"sub/": "cannot list the folder: Permission denied"}
    assert sorted(report.pruned) == ["top.txt"]  # gone; the unlisted files may be there
    assert sorted(d.metadata["source"] for d in mem.list_documents()) == ["sub/a.txt", "sub/b.txt"]


def test_an_empty_path_is_refused_not_taken_for_the_current_folder(
    make_store: StoreFactory,
    word_embedder: WordHashEmbedder,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(folder(tmp_path, "cwd", {"private.txt": "not for the store"}))
    mem = make_store("empty", word_embedder)
    for call in (
        lambda: mem.ingest("", shared=True, progress=False),
        lambda: mem.ingest(Path("private.txt"), root="", shared=True, progress=False),
        lambda: mem.watch("", shared=True),
        lambda: mem.export_jsonl(""),
    ):
        with pytest.raises(InvalidArgumentError, match="must not be empty"):
            call()
    assert mem.count() == 0


def test_ingest_configs_report_is_relative_to_its_root_whatever_root_ingests_a_file(
    make_store: StoreFactory, word_embedder: WordHashEmbedder, tmp_path: Path
) -> None:
    # An entry inside a knowledge root already ingested is ingested under that root; its
    # report's paths are still the config's (not "docs/docs/a.md").
    top = folder(tmp_path, "kb", {"docs/a.md": "# a\nalpha", "docs/sub/c.md": "# c\ngamma"})
    mem = make_store("rooted", word_embedder)
    mem.ingest(top, shared=True, progress=False)
    entries = [{"directory": "docs", "shared": True}, {"path": "docs/sub/c.md", "shared": True}]
    report = mem.ingest_config(entries, root=top, progress=False)
    assert sorted(report.unchanged) == ["docs/a.md", "docs/sub/c.md"]
    fresh = make_store("fresh", word_embedder)
    report = fresh.ingest_config(
        [{"directory": ".", "shared": True}, {"directory": "docs", "shared": True}],
        root=top,
        progress=False,
    )
    assert sorted(report.documents) == ["docs/a.md", "docs/sub/c.md"]
