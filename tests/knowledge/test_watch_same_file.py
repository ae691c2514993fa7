"""Memory.watch and a file reached by two paths (a symbolic link to a file or a folder
of the watched folder): one document, under the path a full ingest keeps (the file's
own, not the link's), and a change to the file leaves no copy of its old text current.
On both backends."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from test_knowledge_watch import found, sources, wait_for

from conftest import StoreFactory, WordHashEmbedder
from memlane import IngestReport, Memory

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="symbolic links need privileges")


def full_ingest(word_embedder: WordHashEmbedder, kb: Path) -> set[str]:
    """The documents a full ingest of the folder, as it is now, makes."""
    with Memory(None, word_embedder) as fresh:
        fresh.ingest(kb, shared=True, progress=False)
        return sources(fresh)


def test_a_link_to_a_file_is_no_second_document(
    make_store: StoreFactory, word_embedder: WordHashEmbedder, tmp_path: Path
) -> None:
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "a.md").write_text("# Policy\n\nRefunds take thirty days.\n")
    mem = make_store("watch", word_embedder)
    reports: list[IngestReport] = []
    with mem.watch(kb, shared=True, debounce=0.1, on_report=reports.append):
        # A batch of the link alone stores nothing, and has no report (it has no
        # document to replace or remove): the edit may come in it or in the next.
        (kb / "link.md").symlink_to(kb / "a.md")
        (kb / "a.md").write_text("# Policy\n\nRefunds take five days.\n")
        wait_for(lambda: found(mem, "five") == {"a.md"}, "the new text")
        assert found(mem, "thirty") == set()
        assert sources(mem) == full_ingest(word_embedder, kb) == {"a.md"}
        assert not any(r.ingested for r in reports)
        wait_for(lambda: any(r.replaced for r in reports), "the edit's report")
        assert [r.replaced.keys() for r in reports if r.replaced] == [{"a.md"}]


def test_a_change_removes_a_stale_copy_under_another_path(
    make_store: StoreFactory, word_embedder: WordHashEmbedder, tmp_path: Path
) -> None:
    """A document made from the link (as the watch made them before, or by an ingest of
    the link alone) goes when the file it leads to changes: its text is the old one."""
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "a.md").write_text("# Policy\n\nRefunds take thirty days.\n")
    (kb / "link.md").symlink_to(kb / "a.md")
    mem = make_store("watch", word_embedder)
    reports: list[IngestReport] = []
    with mem.watch(kb, shared=True, debounce=0.1, on_report=reports.append) as watch:
        assert watch.initial.skipped["link.md"] == "same file as a.md"
        mem.ingest(kb / "link.md", root=kb, shared=True, progress=False)
        assert sources(mem) == {"a.md", "link.md"}

        (kb / "a.md").write_text("# Policy\n\nRefunds take five days.\n")
        wait_for(lambda: found(mem, "five") == {"a.md"}, "the new text")
        wait_for(lambda: sources(mem) == {"a.md"}, "the stale copy goes")
        assert found(mem, "thirty") == set()
        # The report reaches on_report once the sync returns, after the delete.
        wait_for(lambda: any("link.md" in r.pruned for r in reports), "its report")


def test_a_file_replaced_by_a_link_to_another_file_loses_its_document(
    word_embedder: WordHashEmbedder, tmp_path: Path
) -> None:
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "a.txt").write_text("Aardvarks dig burrows at night.")
    (kb / "b.txt").write_text("Badgers stay where they are.")
    with Memory(None, word_embedder) as mem:
        reports: list[IngestReport] = []
        with mem.watch(kb, shared=True, debounce=0.1, on_report=reports.append):
            (kb / ".a.txt.new").symlink_to(kb / "b.txt")
            os.replace(kb / ".a.txt.new", kb / "a.txt")  # as an editor saves
            wait_for(lambda: sources(mem) == {"b.txt"}, "the replaced file's document goes")
            assert found(mem, "aardvarks") == set()
            assert found(mem, "badgers") == {"b.txt"}
            wait_for(lambda: any("a.txt" in r.pruned for r in reports), "its report")
            said = next(r for r in reports if "a.txt" in r.pruned)
            assert said.skipped["a.txt"] == "same file as b.txt"
        assert sources(mem) == full_ingest(word_embedder, kb)


def test_a_link_to_a_folder_of_the_root(word_embedder: WordHashEmbedder, tmp_path: Path) -> None:
    """A folder linked inside the root: its files are documents once, by their own path,
    and a file added or changed in it stays one document."""
    kb = tmp_path / "kb"
    (kb / "real").mkdir(parents=True)
    (kb / "real" / "x.md").write_text("# X\n\nOtters hold hands.\n")
    (kb / "alias").symlink_to(kb / "real", target_is_directory=True)
    with Memory(None, word_embedder) as mem:
        with mem.watch(kb, shared=True, debounce=0.1) as watch:
            assert watch.initial.skipped["alias/x.md"] == "same file as real/x.md"
            (kb / "real" / "y.md").write_text("# Y\n\nWalruses nap.\n")
            wait_for(lambda: found(mem, "walruses") == {"real/y.md"}, "the new file")
            (kb / "real" / "x.md").write_text("# X\n\nOtters float on their backs.\n")
            wait_for(lambda: found(mem, "float") == {"real/x.md"}, "the changed file")
            assert found(mem, "hold") == set()
            assert sources(mem) == {"real/x.md", "real/y.md"}
        assert sources(mem) == full_ingest(word_embedder, kb)
