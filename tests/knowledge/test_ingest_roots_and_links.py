"""Roots, links and paths: a file or folder swapped for a link to outside the root
between the walk and the read, link loops between files, two roots holding the same
path (two projects' README.md), a folder ingested inside a root ingested before, path
arguments of the wrong type or holding a NUL, a heading-only markdown file, and a
watched folder deleted and made again."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from memlane import Memory
from memlane.errors import InvalidArgumentError
from memlane.knowledge import RecursiveCharacterSplitter
from memlane.knowledge.chunking import Chunk
from memlane.knowledge.ids import document_id


def texts(mem: Memory, query: str) -> list[str]:
    return [h.record.text for h in mem.search_knowledge(query, mode="text", threshold=None)]


def sources(mem: Memory) -> list[tuple[str, str]]:
    return sorted(
        (str(d.metadata["source"]), str(d.metadata["root"])) for d in mem.list_documents()
    )


class SwappingChunker:
    """Runs ``swap`` while the first file is chunked: the race made deterministic."""

    def __init__(self, swap: Callable[[], None]) -> None:
        self.swap: Callable[[], None] | None = swap
        self.inner = RecursiveCharacterSplitter()

    def split(self, text: str) -> list[Chunk]:
        if self.swap is not None:
            self.swap()
            self.swap = None
        return self.inner.split(text)

    def __repr__(self) -> str:
        return "SwappingChunker()"


# -- swapped for a link after the walk ------------------------------------------------------


def test_a_file_swapped_for_a_link_to_outside_is_not_read(local: Memory, tmp_path: Path) -> None:
    kb = tmp_path / "kb"
    kb.mkdir()
    secret = tmp_path / "secret.txt"
    secret.write_text("ROOTPASSWORD hunter2\n")
    (kb / "a.txt").write_text("Apples are red.\n")
    (kb / "b.txt").write_text("Bananas are yellow.\n")

    def swap() -> None:
        (kb / "b.txt").unlink()
        (kb / "b.txt").symlink_to(secret)

    report = local.ingest(kb, shared=True, progress=False, chunker=SwappingChunker(swap))
    assert not texts(local, "hunter2")
    assert set(report.ingested) == {"a.txt"}
    assert report.skipped == {"b.txt": "replaced by a symbolic link since the folder was walked"}


def test_a_folder_swapped_for_a_link_to_outside_is_not_read(local: Memory, tmp_path: Path) -> None:
    kb = tmp_path / "kb"
    (kb / "d").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "b.txt").write_text("ROOTPASSWORD hunter2\n")
    (kb / "a.txt").write_text("Apples are red.\n")
    (kb / "d" / "b.txt").write_text("Bananas are yellow.\n")

    def swap() -> None:
        shutil.rmtree(kb / "d")
        (kb / "d").symlink_to(outside, target_is_directory=True)

    report = local.ingest(kb, shared=True, progress=False, chunker=SwappingChunker(swap))
    assert not texts(local, "hunter2")
    assert set(report.ingested) == {"a.txt"}
    assert "outside the knowledge root" in report.skipped["d/b.txt"]


def test_links_inside_the_root_are_still_read(local: Memory, tmp_path: Path) -> None:
    kb = tmp_path / "kb"
    (kb / "real").mkdir(parents=True)
    (kb / "real" / "a.txt").write_text("Apples are red.\n")
    (kb / "link.txt").symlink_to(kb / "real" / "a.txt")
    (kb / "folder").symlink_to(kb / "real", target_is_directory=True)
    (kb / "real" / "b.txt").write_text("Bananas are yellow.\n")
    report = local.ingest(kb / "link.txt", root=kb, shared=True, progress=False)
    assert set(report.ingested) == {"link.txt"}  # named itself: the link is read


def test_link_loops_are_skipped_not_raised(local: Memory, tmp_path: Path) -> None:
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "good.txt").write_text("A good note.\n")
    (kb / "l1.txt").symlink_to("l2.txt")
    (kb / "l2.txt").symlink_to("l1.txt")
    (kb / "self.md").symlink_to("self.md")
    report = local.ingest(kb, shared=True, progress=False)
    assert set(report.ingested) == {"good.txt"}
    loop = "symbolic link loop"
    assert report.skipped == {"l1.txt": loop, "l2.txt": loop, "self.md": loop}


# -- two roots, one path ----------------------------------------------------------------------


def two_projects(tmp_path: Path) -> tuple[Path, Path]:
    a, b = tmp_path / "projA", tmp_path / "projB"
    for folder, text in ((a, "deploys with ansible"), (b, "deploys with helm")):
        folder.mkdir()
        (folder / "README.md").write_text(f"# {folder.name}\n\nThe project {text}.\n")
    return a, b


def test_two_roots_with_the_same_path_are_two_documents(local: Memory, tmp_path: Path) -> None:
    a, b = two_projects(tmp_path)
    first = local.ingest(a, shared=True, progress=False)
    second = local.ingest(b, shared=True, progress=False)
    plain = document_id("README.md", agent_id=None, shared=True)
    assert first.ingested == {"README.md": plain}  # the first root keeps the plain id
    assert set(second.ingested) == {"README.md"} and not second.replaced
    assert second.ingested["README.md"] != plain
    assert texts(local, "ansible") and texts(local, "helm")
    assert sources(local) == [("README.md", str(a.resolve())), ("README.md", str(b.resolve()))]
    # Each root finds its own document again.
    assert local.ingest(a, shared=True, progress=False).unchanged == first.ingested
    assert local.ingest(b, shared=True, progress=False).unchanged == second.ingested
    (a / "README.md").write_text("# projA\n\nThe project deploys with salt.\n")
    assert local.ingest(a, shared=True, progress=False).replaced == first.ingested
    assert texts(local, "salt") and texts(local, "helm") and not texts(local, "ansible")
    # Pruning and removing act on one root's document.
    (a / "README.md").unlink()
    assert local.ingest(a, shared=True, progress=False, prune_missing=True).pruned == {
        "README.md": plain
    }
    assert sources(local) == [("README.md", str(b.resolve()))]
    local.remove_document(second.ingested["README.md"])
    assert not sources(local)


def test_a_text_and_a_file_with_the_same_source_are_two_documents(
    local: Memory, tmp_path: Path
) -> None:
    a, _ = two_projects(tmp_path)
    local.ingest(a, shared=True, progress=False)
    local.ingest_text("Refunds take five days.", source="README.md", shared=True)
    assert texts(local, "ansible") and texts(local, "refunds")
    local.ingest_text("Refunds take six days.", source="README.md", shared=True)
    assert len(local.list_documents()) == 2 and texts(local, "six")


def test_a_moved_folder_takes_over_its_documents(local: Memory, tmp_path: Path) -> None:
    a, _ = two_projects(tmp_path)
    first = local.ingest(a, shared=True, progress=False)
    moved = tmp_path / "moved"
    a.rename(moved)
    report = local.ingest(moved, shared=True, progress=False)
    assert report.replaced == first.ingested  # not a copy beside the old one
    assert sources(local) == [("README.md", str(moved.resolve()))]


# -- a folder inside a root -------------------------------------------------------------------


def test_a_folder_inside_a_root_is_ingested_under_that_root(local: Memory, tmp_path: Path) -> None:
    kb = tmp_path / "kb"
    (kb / "sub").mkdir(parents=True)
    (kb / "sub" / "s.txt").write_text("A subfolder note about walruses.\n")
    (kb / "top.txt").write_text("A note at the top.\n")
    local.ingest(kb, shared=True, progress=False)
    report = local.ingest(kb / "sub", shared=True, progress=False, prune_missing=True)
    assert set(report.unchanged) == {"sub/s.txt"} and not report.pruned
    assert [s for s, _ in sources(local)] == ["sub/s.txt", "top.txt"]
    (kb / "sub" / "s.txt").unlink()
    assert set(local.ingest(kb, shared=True, progress=False, prune_missing=True).pruned) == {
        "sub/s.txt"
    }
    assert not texts(local, "walruses")


def test_a_folder_that_is_a_root_itself_stays_its_own_when_one_above_is_ingested(
    local: Memory, tmp_path: Path
) -> None:
    kb = tmp_path / "kb"
    (kb / "sub").mkdir(parents=True)
    (kb / "sub" / "s.txt").write_text("Walruses.\n")
    local.ingest(kb / "sub", shared=True, progress=False)
    assert set(local.ingest(kb / "sub", shared=True, progress=False).unchanged) == {"s.txt"}
    # kb leaves it apart (test_ingest_roots_apart.py): sub keeps its documents.
    local.ingest(kb, shared=True, progress=False)
    assert set(local.ingest(kb / "sub", shared=True, progress=False).unchanged) == {"s.txt"}


# -- path arguments ---------------------------------------------------------------------------


def test_path_arguments_of_the_wrong_type_are_invalid(local: Memory, tmp_path: Path) -> None:
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "a.txt").write_text("Apples.\n")
    with pytest.raises(InvalidArgumentError, match="path must be a str or a path"):
        local.ingest(5, shared=True, progress=False)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="root must be a str or a path"):
        local.ingest(kb, root=5, shared=True, progress=False)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="folder must be a str or a path"):
        local.watch(5, shared=True)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="NUL"):
        local.ingest(str(kb) + "\x00x", shared=True, progress=False)


def test_ingest_config_refuses_a_nul_path_before_any_entry(local: Memory, tmp_path: Path) -> None:
    (tmp_path / "kb").mkdir()
    (tmp_path / "kb" / "a.txt").write_text("Apples.\n")
    entries = [{"directory": "kb", "shared": True}, {"path": "b\x00.txt", "shared": True}]
    with pytest.raises(InvalidArgumentError, match=r"entries\[1\].*NUL"):
        local.ingest_config(entries, root=tmp_path, progress=False)
    with pytest.raises(InvalidArgumentError, match="root must be a str or a path"):
        local.ingest_config(entries[:1], root=5, progress=False)  # type: ignore[arg-type]
    assert not local.list_documents()


# -- headings alone ---------------------------------------------------------------------------


def test_a_markdown_file_of_headings_alone_is_searchable(local: Memory, tmp_path: Path) -> None:
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "outline.md").write_text("# Deploy guide\n## Blue green rollout\n")
    (kb / "tail.md").write_text("Intro paragraph.\n\n# Rollback procedure\n")
    report = local.ingest(kb, shared=True, progress=False)
    assert set(report.ingested) == {"outline.md", "tail.md"}
    assert texts(local, "rollout") == ["Deploy guide\n\n## Blue green rollout"]
    assert texts(local, "rollback") == ["# Rollback procedure"]


# -- a watched folder made again --------------------------------------------------------------


def test_a_watched_folder_deleted_and_made_again_is_followed_again(
    local: Memory, tmp_path: Path
) -> None:
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "a.txt").write_text("Alpha apples.\n")
    errors: list[BaseException] = []
    with local.watch(kb, shared=True, debounce=0.1, on_error=errors.append) as watch:
        shutil.rmtree(kb)
        kb.mkdir()
        (kb / "z.txt").write_text("Zeta zebras.\n")
        deadline = time.monotonic() + 30
        while not texts(local, "zebras") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert texts(local, "zebras")
        assert watch.running and not errors
        (kb / "y.txt").write_text("Yellow yaks.\n")  # and its events reach the watch again
        deadline = time.monotonic() + 30
        while not texts(local, "yaks") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert texts(local, "yaks")
    assert not texts(local, "apples")
