"""Roots, attacked again: a root whose document got the root-keyed id keeps it once the
plain id's holder is gone, a folder ingested inside a root joins it only where the root's
walk reaches it (a root ingested above an earlier one leaves it apart:
test_ingest_roots_apart.py), and a watched folder replaced by a link to outside is not followed."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from memlane import Memory
from memlane.knowledge.ids import document_id


def texts(mem: Memory, query: str) -> list[str]:
    return [h.record.text for h in mem.search_knowledge(query, mode="text", threshold=None)]


def sources(mem: Memory) -> list[tuple[str, str | None]]:
    return sorted((str(d.metadata["source"]), d.metadata["root"]) for d in mem.list_documents())


def two_projects(tmp_path: Path) -> tuple[Path, Path]:
    a, b = tmp_path / "projA", tmp_path / "projB"
    for folder, text in ((a, "deploys with ansible"), (b, "deploys with helm")):
        folder.mkdir()
        (folder / "README.md").write_text(f"# {folder.name}\n\nThe project {text}.\n")
    return a, b


# -- the plain id's holder gone -----------------------------------------------------------


@pytest.mark.parametrize("route", ["remove_document", "prune"])
def test_a_root_keeps_its_keyed_id_once_the_plain_holder_is_gone(
    local: Memory, tmp_path: Path, route: str
) -> None:
    a, b = two_projects(tmp_path)
    first = local.ingest(a, shared=True, progress=False)
    second = local.ingest(b, shared=True, progress=False)
    if route == "remove_document":
        local.remove_document(first.ingested["README.md"])
    else:
        (a / "README.md").unlink()
        assert local.ingest(a, shared=True, progress=False, prune_missing=True).pruned
    again = local.ingest(b, shared=True, progress=False)
    assert again.unchanged == second.ingested and not again.ingested
    assert sources(local) == [("README.md", str(b.resolve()))]
    assert len(texts(local, "helm")) == 1


def test_a_text_keeps_its_keyed_id_once_the_plain_holder_is_gone(
    local: Memory, tmp_path: Path
) -> None:
    a, _ = two_projects(tmp_path)
    first = local.ingest(a, shared=True, progress=False)
    text = local.ingest_text("Refunds take five days.", source="README.md", shared=True)
    local.remove_document(first.ingested["README.md"])
    again = local.ingest_text("Refunds take five days.", source="README.md", shared=True)
    assert again.unchanged == text.ingested and not again.ingested
    assert sources(local) == [("README.md", None)]


# -- a watched folder replaced by a link --------------------------------------------------


def wait_for(check: Callable[[], object]) -> None:
    deadline = time.monotonic() + 30
    while not check() and time.monotonic() < deadline:
        time.sleep(0.05)


def test_a_watched_folder_replaced_by_a_link_to_outside_is_not_followed(
    local: Memory, tmp_path: Path
) -> None:
    kb, secret = tmp_path / "kb", tmp_path / "secret"
    kb.mkdir()
    secret.mkdir()
    (kb / "a.md").write_text("# Notes\n\nGardening notes.\n")
    (secret / "p.md").write_text("# Private\n\nThe passphrase is zebracorn.\n")
    errors: list[BaseException] = []
    with local.watch(kb, shared=True, debounce=0.1, on_error=errors.append) as watch:
        kb.rename(tmp_path / "kb.old")
        kb.symlink_to("secret")
        wait_for(lambda: errors)
        assert len(errors) == 1 and "not followed" in str(errors[0])
        assert watch.running and not texts(local, "zebracorn")
        # The watch keeps waiting: a folder made in the link's place is followed.
        kb.unlink()
        kb.mkdir()
        (kb / "y.md").write_text("# Yaks\n\nYellow yaks.\n")
        wait_for(lambda: texts(local, "yaks"))
        assert texts(local, "yaks") and len(errors) == 1
    assert not texts(local, "zebracorn")


# -- a folder inside a root ---------------------------------------------------------------


def test_a_hidden_folder_inside_a_root_stays_its_own_root(local: Memory, tmp_path: Path) -> None:
    kb = tmp_path / "kb"
    (kb / ".private").mkdir(parents=True)
    (kb / "pub.md").write_text("# Pub\n\nPublic note.\n")
    (kb / ".private" / "p.md").write_text("# P\n\nPrivate note about wombats.\n")
    local.ingest(kb, shared=True, progress=False, prune_missing=True)
    assert local.ingest(kb / ".private", shared=True, progress=False).ingested
    assert sources(local) == [("p.md", str((kb / ".private").resolve())), ("pub.md", str(kb))]
    again = local.ingest(kb, shared=True, progress=False, prune_missing=True)
    assert not again.pruned and texts(local, "wombats")


@pytest.mark.parametrize("inner", [".notes/kb", "docs"])
def test_a_root_made_by_one_file_takes_no_folder(local: Memory, tmp_path: Path, inner: str) -> None:
    home = tmp_path / "home"
    (home / inner).mkdir(parents=True)
    (home / "todo.md").write_text("# Todo\n\nBuy milk.\n")
    (home / inner / "n.md").write_text("# N\n\nNotes on numbats.\n")
    local.ingest(home / "todo.md", shared=True, progress=False)
    assert local.ingest(home / inner, shared=True, progress=False).ingested == {
        "n.md": document_id("n.md", agent_id=None, shared=True)
    }
    # Once the folder itself is ingested, its root is walked, and takes its subfolders
    # (not docs, a root of its own by then: test_ingest_roots_apart.py).
    assert local.ingest(home / "todo.md", shared=True, progress=False).unchanged
    local.ingest(home, shared=True, progress=False)
    (home / "more").mkdir()
    (home / "more" / "m.md").write_text("# M\n\nMore on marmots.\n")
    assert set(local.ingest(home / "more", shared=True, progress=False).ingested) == {"more/m.md"}
