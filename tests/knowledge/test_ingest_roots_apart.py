"""A folder the owner ingested (or watches) as a root of its own stays its own root: a
root ingested above it leaves the folder out (reported as skipped), storing and pruning
nothing of it, and so does a watch of the higher root. Before, the higher root took the
lower root's documents over file by file, which left a deleted file's document behind
for good, duplicated under a lower-root ingest racing it, and took over the documents
of a running watch (which then duplicated and could not remove)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import MidwayEmbedder
from memlane import Memory
from memlane.knowledge.ingest import FILE_APART, ROOT_APART, roots_apart
from memlane.knowledge.pipeline import Owner

TIMEOUT = 20.0


def texts(mem: Memory, query: str) -> list[str]:
    return [h.record.text for h in mem.search_knowledge(query, mode="text", threshold=None)]


def places(mem: Memory, base: Path) -> list[tuple[str, str]]:
    """Each document as (source, its root relative to ``base``)."""
    real = base.resolve()
    return sorted(
        (str(d.metadata["source"]), str(Path(str(d.metadata["root"])).relative_to(real)))
        for d in mem.list_documents()
    )


def make_kb(tmp_path: Path) -> Path:
    kb = tmp_path / "kb"
    (kb / "sub" / "deep").mkdir(parents=True)
    (kb / "top.md").write_text("# Top\n\nThe top readme.\n")
    (kb / "sub" / "a.md").write_text("# A\n\nThe sub note mentions quokkas.\n")
    (kb / "sub" / "deep" / "b.md").write_text("# B\n\nA deeper note on bilbies.\n")
    return kb


def wait_for(condition: Callable[[], object], what: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_a_root_ingested_above_an_earlier_one_leaves_it_apart(
    local: Memory, tmp_path: Path
) -> None:
    kb = make_kb(tmp_path)
    first = local.ingest(kb / "sub", shared=True, progress=False)
    assert set(first.ingested) == {"a.md", "deep/b.md"}
    report = local.ingest(kb, shared=True, progress=False, prune_missing=True)
    assert set(report.ingested) == {"top.md"} and not report.replaced and not report.pruned
    assert report.skipped["sub/"] == ROOT_APART
    assert places(local, tmp_path) == [
        ("a.md", "kb/sub"),
        ("deep/b.md", "kb/sub"),
        ("top.md", "kb"),
    ]
    assert len(texts(local, "quokkas")) == 1 and len(texts(local, "bilbies")) == 1
    # kb/sub is still its own root: its ingest finds its documents unchanged.
    again = local.ingest(kb / "sub", shared=True, progress=False, prune_missing=True)
    assert set(again.unchanged) == {"a.md", "deep/b.md"} and not again.pruned
    assert len(local.list_documents()) == 3


def test_a_file_deleted_below_is_pruned_by_its_own_root_only_once(
    local: Memory, tmp_path: Path
) -> None:
    """The deleted file's document was never pruned, and the next ingest of
    kb/sub stored every file of it a second time."""
    kb = make_kb(tmp_path)
    local.ingest(kb / "sub", shared=True, progress=False)
    (kb / "sub" / "deep" / "b.md").unlink()
    # kb leaves sub out: it prunes nothing of it (sub's own ingest does).
    report = local.ingest(kb, shared=True, progress=False, prune_missing=True)
    assert not report.pruned and report.skipped["sub/"] == ROOT_APART
    sub = local.ingest(kb / "sub", shared=True, progress=False, prune_missing=True)
    assert set(sub.pruned) == {"deep/b.md"} and set(sub.unchanged) == {"a.md"}
    assert not sub.ingested
    assert places(local, tmp_path) == [("a.md", "kb/sub"), ("top.md", "kb")]
    assert not texts(local, "bilbies") and len(texts(local, "quokkas")) == 1


def test_a_higher_root_ingested_while_the_lower_one_writes_stores_no_copy(
    tmp_path: Path,
) -> None:
    """Kb/sub read its documents, kb then took them over, and kb/sub's
    write stored its file again beside kb's copy."""
    kb = make_kb(tmp_path)
    embedder = MidwayEmbedder()
    mem = Memory(tmp_path / "store", embedder)
    try:
        mem.ingest(kb / "sub", shared=True, progress=False)
        (kb / "sub" / "a.md").write_text("# A\n\nThe sub note, changed, mentions quokkas.\n")
        reports = []
        embedder.midway = lambda: reports.append(mem.ingest(kb, shared=True, progress=False))
        report = mem.ingest(kb / "sub", shared=True, progress=False)
        assert set(report.replaced) == {"a.md"}
        assert set(reports[0].ingested) == {"top.md"} and reports[0].skipped["sub/"] == ROOT_APART
        assert places(mem, tmp_path) == [
            ("a.md", "kb/sub"),
            ("deep/b.md", "kb/sub"),
            ("top.md", "kb"),
        ]
        assert texts(mem, "quokkas") == [texts(mem, "changed")[0]]
    finally:
        mem.close()


def test_a_watched_folder_stays_its_own_when_a_root_above_is_ingested(
    local: Memory, tmp_path: Path
) -> None:
    """Kb took the watch's documents over; the watch then stored an edited
    file a second time and could not remove a deleted one."""
    kb = make_kb(tmp_path)
    errors: list[BaseException] = []
    with local.watch(kb / "sub", shared=True, debounce=0.1, on_error=errors.append):
        report = local.ingest(kb, shared=True, progress=False, prune_missing=True)
        assert set(report.ingested) == {"top.md"} and report.skipped["sub/"] == ROOT_APART
        (kb / "sub" / "a.md").write_text("# A\n\nThe sub note, edited, mentions quokkas.\n")
        (kb / "sub" / "deep" / "b.md").unlink()
        wait_for(
            lambda: not texts(local, "bilbies") and texts(local, "edited"),
            "the watch did not apply the edit and the deletion",
        )
    assert not errors
    assert places(local, tmp_path) == [("a.md", "kb/sub"), ("top.md", "kb")]
    assert len(texts(local, "quokkas")) == 1


def test_a_watch_of_the_higher_root_leaves_the_lower_root_alone(
    local: Memory, tmp_path: Path
) -> None:
    kb = make_kb(tmp_path)
    local.ingest(kb / "sub", shared=True, progress=False)
    reports = []
    with local.watch(kb, shared=True, debounce=0.1, on_report=reports.append) as watch:
        assert watch.initial.skipped["sub/"] == ROOT_APART and not watch.initial.pruned
        (kb / "sub" / "c.md").write_text("# C\n\nA new note on numbats.\n")
        (kb / "sub" / "deep" / "b.md").unlink()
        (kb / "t.md").write_text("# T\n\nA top note on tapirs.\n")
        wait_for(lambda: texts(local, "tapirs"), "the watch did not ingest t.md")
        time.sleep(0.3)  # the events under sub were gathered with t.md's
    # Nothing under sub was stored or removed for kb: sub's own ingest does it.
    assert not texts(local, "numbats") and len(texts(local, "bilbies")) == 1
    assert places(local, tmp_path) == [
        ("a.md", "kb/sub"),
        ("deep/b.md", "kb/sub"),
        ("t.md", "kb"),
        ("top.md", "kb"),
    ]
    sub = local.ingest(kb / "sub", shared=True, progress=False, prune_missing=True)
    assert set(sub.ingested) == {"c.md"} and set(sub.pruned) == {"deep/b.md"}


def test_a_file_ingested_alone_below_a_root_is_left_to_itself(
    local: Memory, tmp_path: Path
) -> None:
    kb = make_kb(tmp_path)
    alone = local.ingest(kb / "sub" / "a.md", shared=True, progress=False)
    assert set(alone.ingested) == {"a.md"}
    report = local.ingest(kb, shared=True, progress=False, prune_missing=True)
    assert report.skipped["sub/a.md"] == FILE_APART
    assert set(report.ingested) == {"sub/deep/b.md", "top.md"}
    assert len(texts(local, "quokkas")) == 1
    assert local.ingest(kb / "sub" / "a.md", shared=True, progress=False).unchanged


def test_a_root_apart_is_left_out_by_any_path_to_it(local: Memory, tmp_path: Path) -> None:
    """Named with ``root=`` above it, named as a file inside it, or reached by a link from
    the higher root: the folder apart is left out all the same, nothing stored twice."""
    kb = make_kb(tmp_path)
    (kb / "l.md").symlink_to(kb / "sub" / "a.md")
    (kb / "ldir").symlink_to(kb / "sub" / "deep")
    local.ingest(kb / "sub", shared=True, progress=False)
    for path in (kb / "sub", kb / "sub" / "deep", kb / "sub" / "a.md"):
        report = local.ingest(path, root=kb, shared=True, progress=False)
        assert not report.ingested and ROOT_APART in report.skipped.values()
    report = local.ingest(kb, shared=True, progress=False)
    assert set(report.ingested) == {"top.md"}
    assert report.skipped["l.md"] == report.skipped["ldir/"] == ROOT_APART
    assert places(local, kb) == [("a.md", "sub"), ("deep/b.md", "sub"), ("top.md", ".")]
    assert len(texts(local, "quokkas")) == 1


def test_a_root_reached_outside_by_a_followed_link_is_apart(local: Memory, tmp_path: Path) -> None:
    kb, ext = make_kb(tmp_path), tmp_path / "ext"
    ext.mkdir()
    (ext / "e.md").write_text("# E\n\nAn echidna note.\n")
    (kb / "ext").symlink_to(ext)
    local.ingest(ext, shared=True, progress=False)
    local.ingest(kb / "sub", shared=True, progress=False)
    report = local.ingest(kb, shared=True, progress=False, follow_outside=True)
    assert report.skipped["ext/"] == ROOT_APART
    assert len(texts(local, "echidna")) == 1


def test_roots_apart_reads_a_document_per_root_not_each(
    local: Memory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What an ingest reads to find the roots apart grows with the roots, not with their
    documents."""
    kb = make_kb(tmp_path)
    many = tmp_path / "many"
    many.mkdir()
    for i in range(300):
        (many / f"n{i}.md").write_text(f"# N{i}\n\nNote {i}.\n")
    local.ingest(many, shared=True, progress=False)
    local.ingest(kb / "sub", shared=True, progress=False)
    read = []
    listing = local.list

    def counted(*args: Any, **kwargs: Any) -> Any:
        found = listing(*args, **kwargs)
        read.append(len(found))
        return found

    monkeypatch.setattr(local, "list", counted)
    apart = roots_apart(local, Owner.of(None, True), str(kb.resolve()))
    assert apart == {(kb / "sub").resolve(): ROOT_APART}
    assert sum(read) <= 3


def test_a_document_record_with_an_odd_root_stops_no_ingest(local: Memory, tmp_path: Path) -> None:
    """A writer of the owner's scope may add a document record whose root is a list or a
    number: ingests go on, and it marks nothing apart."""
    kb = make_kb(tmp_path)
    sub = str((kb / "sub").resolve())
    for root in ([sub], 5, None):
        local.add("x", table="documents", metadata={"shared": True, "root": root})
    report = local.ingest(kb, shared=True, progress=False)
    assert set(report.ingested) == {"top.md", "sub/a.md", "sub/deep/b.md"}
