"""Memory.watch when a watched path becomes a symbolic link that leads outside the
knowledge root (issue 33): the walk leaves it out, so the document it had is removed
and the report says why; what the link points at never becomes searchable."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from test_knowledge_watch import found, sources, wait_for

from conftest import WordHashEmbedder
from memlane import IngestReport, Memory

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="symbolic links need privileges")

OUTSIDE = "symbolic link to outside the knowledge root"


def test_a_file_replaced_by_a_link_to_outside_loses_its_document(
    word_embedder: WordHashEmbedder, tmp_path: Path
) -> None:
    kb, outside = tmp_path / "kb", tmp_path / "outside"
    (kb / "sub").mkdir(parents=True)
    (outside / "dir").mkdir(parents=True)
    (kb / "a.txt").write_text("Aardvarks dig burrows at night.")
    (kb / "b.txt").write_text("Badgers stay where they are.")
    (kb / "sub" / "c.txt").write_text("Capybaras swim in rivers.")
    (outside / "secret.txt").write_text("Secret platypus plans.")
    (outside / "dir" / "c.txt").write_text("Outside wombats.")
    mem = Memory(None, word_embedder)
    reports: list[IngestReport] = []
    try:
        with mem.watch(kb, shared=True, debounce=0.1, on_report=reports.append):
            assert sources(mem) == {"a.txt", "b.txt", "sub/c.txt"}

            # An atomic replace, as an editor saves: the path never stops existing.
            (kb / ".a.txt.new").symlink_to(outside / "secret.txt")
            os.replace(kb / ".a.txt.new", kb / "a.txt")
            wait_for(lambda: "a.txt" not in sources(mem), "the replaced file's document goes")
            # The report reaches on_report once the sync returns, after the delete.
            wait_for(lambda: any("a.txt" in r.pruned for r in reports), "its report")
            assert found(mem, "aardvarks") == set()
            assert found(mem, "platypus") == set()
            said = [r for r in reports if "a.txt" in r.pruned]
            assert len(said) == 1
            assert "outside the knowledge root" in said[0].skipped["a.txt"]
            assert "a.txt" in str(said[0])

            # A folder replaced by a link to a folder outside: its documents go too.
            (kb / "sub").rename(tmp_path / "moved-away")
            (kb / "sub").symlink_to(outside / "dir", target_is_directory=True)
            wait_for(lambda: sources(mem) == {"b.txt"}, "the replaced folder's documents go")
            assert found(mem, "capybaras") == set()
            assert found(mem, "wombats") == set()
            wait_for(lambda: any("sub/c.txt" in r.pruned for r in reports), "its report")

            # A link that stays inside the root is a second path to a file the root
            # holds: skipped, as a full ingest skips it (a document of its own would go
            # stale when the file changed).
            (kb / ".a.txt.new").symlink_to(kb / "b.txt")
            os.replace(kb / ".a.txt.new", kb / "a.txt")
            # (A file written after it is synced after it: then the link was seen.)
            (kb / "d.txt").write_text("dingoes")
            wait_for(lambda: found(mem, "dingoes") == {"d.txt"}, "a file after the link")
            assert found(mem, "badgers") == {"b.txt"} and "a.txt" not in sources(mem)
        assert found(mem, "platypus") == set()
    finally:
        mem.close()


def test_the_first_sync_says_the_same(word_embedder: WordHashEmbedder, tmp_path: Path) -> None:
    """A link made while nobody watched: the watch's first sync removes the document too."""
    kb, outside = tmp_path / "kb", tmp_path / "outside"
    kb.mkdir()
    outside.mkdir()
    (kb / "a.txt").write_text("Aardvarks dig burrows at night.")
    (outside / "secret.txt").write_text("Secret platypus plans.")
    mem = Memory(None, word_embedder)
    try:
        mem.ingest(kb, shared=True, progress=False)
        (kb / "a.txt").unlink()
        (kb / "a.txt").symlink_to(outside / "secret.txt")
        with mem.watch(kb, shared=True, debounce=0.1) as watch:
            assert watch.initial.skipped["a.txt"] == OUTSIDE
            assert "a.txt" in watch.initial.pruned
            assert sources(mem) == set()
            assert found(mem, "platypus") == set()
    finally:
        mem.close()
