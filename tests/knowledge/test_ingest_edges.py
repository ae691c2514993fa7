"""Edges of ingestion an attack found: a file's own ``alone`` key, a folder whose name is
not UTF-8, a watch callback that raises, an ``ingest_config`` entry pathlib cannot
resolve, a folder's name on the progress bar, front matter too large to build, a UTF-8
file cut inside its last character, the report's ``seen`` and a heading longer than a
chunk. Each test fails on the code before its fix."""

from __future__ import annotations

import contextlib
import io
import os
import threading
import time
import tracemalloc
from pathlib import Path

import pytest

from memlane import Memory
from memlane.knowledge import IngestReport
from memlane.knowledge.chunking import TokenSplitter, default_chunkers
from memlane.knowledge.document_limits import DocumentLimitError
from memlane.knowledge.loaded_document import decode_text
from memlane.knowledge.loaders import load_markdown
from memlane.knowledge.progress import ProgressBar


def sources(mem: Memory) -> list[str]:
    return sorted(str(d.metadata["source"]) for d in mem.list_documents())


def test_a_files_own_alone_key_is_ingests_own(tmp_path: Path) -> None:
    kb = tmp_path / "kb"
    (kb / "sub").mkdir(parents=True)
    (kb / "a.md").write_text("---\nalone: true\n---\n# A\n\nDeploy with the blue-green script.\n")
    (kb / "sub" / "b.md").write_text("---\nalone: true\n---\n# B\n\nBananas are yellow.\n")
    with Memory(tmp_path / "store", embedder=None) as mem:
        mem.ingest(kb, shared=True, progress=False)
        again = mem.ingest(kb, shared=True, progress=False)
        assert sorted(again.unchanged) == ["a.md", "sub/b.md"] and not again.replaced
        # kb is a walked root: kb/sub's files keep their paths under it.
        below = mem.ingest(kb / "sub", shared=True, progress=False)
        assert sorted(below.unchanged) == ["sub/b.md"] and not below.ingested
        assert sources(mem) == ["a.md", "sub/b.md"]
        assert all("alone" not in d.metadata for d in mem.list_documents())


def test_a_folder_whose_name_is_not_utf8_leaves_the_others_in(tmp_path: Path) -> None:
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "ok.txt").write_text("the others go in\n")
    os.makedirs(os.fsencode(kb) + b"/bad\xffdir")
    (Path(os.fsdecode(os.fsencode(kb) + b"/bad\xffdir")) / "in.txt").write_text("inside\n")
    with Memory(tmp_path / "store", embedder=None) as mem:
        report = mem.ingest(kb, shared=True, progress=False)
        assert "ok.txt" in report.ingested
        assert any("bad" in name for name in report.failed)  # its file, with its reason
        with mem.watch(kb, shared=True, debounce=0.05) as watch:
            assert "ok.txt" in watch.initial.unchanged


def wait_for(check: object, seconds: float = 20.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if callable(check) and check():
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("on_error_raises", [False, True])
def test_a_watch_goes_on_when_its_callbacks_raise(tmp_path: Path, on_error_raises: bool) -> None:
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "a.txt").write_text("alpha apples\n")
    reports: list[IngestReport] = []
    errors: list[BaseException] = []
    died: list[threading.ExceptHookArgs] = []

    def on_report(report: IngestReport) -> None:
        reports.append(report)
        raise RuntimeError("callback bug")

    def on_error(error: BaseException) -> None:
        errors.append(error)
        if on_error_raises:
            raise ValueError("handler bug too")

    hook, threading.excepthook = threading.excepthook, died.append
    try:
        warned = pytest.warns(RuntimeWarning) if on_error_raises else contextlib.nullcontext()
        with (
            Memory(tmp_path / "store", embedder=None) as mem,
            warned,
            mem.watch(kb, shared=True, debounce=0.05, on_report=on_report, on_error=on_error) as w,
        ):
            (kb / "b.txt").write_text("bravo bananas\n")
            assert wait_for(lambda: len(reports) >= 1 and errors)
            (kb / "c.txt").write_text("charlie cherries\n")
            assert wait_for(lambda: bool(mem.search_knowledge("cherries", mode="text")))
            assert w.running
    finally:
        threading.excepthook = hook
    assert not died
    assert isinstance(errors[0], RuntimeError) and "callback bug" in str(errors[0])


def test_ingest_config_reports_entries_pathlib_cannot_resolve(tmp_path: Path) -> None:
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "a.txt").write_text("alpha apples\n")
    (kb / "l1.md").symlink_to("l2.md")
    (kb / "l2.md").symlink_to("l1.md")
    long_name = "x" * 300 + ".txt"
    entries = [
        {"path": "l1.md", "shared": True},
        {"path": long_name, "shared": True},
        {"path": "a.txt", "shared": True},
    ]
    with Memory(tmp_path / "store", embedder=None) as mem:
        report = mem.ingest_config(entries, root=kb, progress=False)
        assert report.failed["l1.md"] == "symbolic link loop"
        assert report.failed[long_name] == "File name too long"
        assert "a.txt" in report.ingested


def test_the_progress_bar_escapes_a_folders_name() -> None:
    stream = io.StringIO()
    bar = ProgressBar(1, enabled="always", stream=stream, label="kb\x1b]0;pwned\x07\x1b[2J")
    bar.close()
    assert "\x1b" not in stream.getvalue() and "\x07" not in stream.getvalue()
    assert "kb\\x1b]0;pwned" in stream.getvalue()


def test_front_matter_is_counted_before_its_nodes_are_built() -> None:
    data = b"---\nx: [" + b"1," * 500_000 + b"1]\n---\nbody\n"
    tracemalloc.start()
    try:
        with pytest.raises(DocumentLimitError, match="max_front_matter_values"):
            load_markdown(data, Path("a.md"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Building the 500,001 nodes took about 150 MB of Python objects.
    assert peak < 4 * len(data)


def test_utf8_cut_inside_its_last_character_stays_utf8() -> None:
    text = "展開の報告は準備ができました。サービスは稼働中です。" * 20
    assert decode_text((text + "я").encode()[:-1]) == text
    # A stray byte inside much UTF-8 is one replacement, not the whole text another encoding.
    mixed = text.encode() + b"\xe9 " + text.encode()
    assert decode_text(mixed) == text + "\ufffd " + text
    # A Latin-1 text ending in its one accented letter is no cut UTF-8 character.
    for short in ("Menu du jour: café", "Name: José", "Viele Grüße, Ihr Gruß"):
        assert decode_text(short.encode("latin-1")) == short
    # A legacy encoding's text is still detected as one.
    assert decode_text("Grüße aus Köln, schöne Tage. ".encode("cp1252") * 20).startswith("Grüße")


def test_seen_leaves_the_skipped_out(tmp_path: Path) -> None:
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "a.txt").write_text("alpha\n")
    (kb / "empty.txt").write_text("")
    with Memory(tmp_path / "store", embedder=None) as mem:
        report = mem.ingest(kb, shared=True, progress=False)
    assert "empty.txt" in report.skipped
    assert report.seen == 1


def test_a_long_heading_leaves_the_body_its_room() -> None:
    count = TokenSplitter().count_tokens
    _, markdown = default_chunkers()
    body = " ".join(f"word{i % 50}" for i in range(400))
    short = markdown.split("# Title\n\n" + body + "\n")
    for words in (110, 300):
        chunks = markdown.split("# " + " ".join(["title"] * words) + "\n\n" + body + "\n")
        assert len(chunks) <= 3 * len(short)
        assert all(count(c.content) <= 128 for c in chunks)
        assert all(c.prefix.endswith("…\n\n") for c in chunks)
        assert all(c.metadata["headings"] == [" ".join(["title"] * words)] for c in chunks)


def test_a_deep_tree_of_folders_is_walked_and_not_taken_for_a_link_loop(tmp_path: Path) -> None:
    # The walk recursed a folder a level: past Python's bound the RecursionError (a
    # RuntimeError) was read as pathlib's link loop, and the deep file left out as one.
    import sys
    import traceback

    kb = tmp_path / "kb"
    deep = kb.joinpath(*(["d"] * 200))
    deep.mkdir(parents=True)
    (deep / "bottom.txt").write_text("the deepest note\n")
    (kb / "top.txt").write_text("the top note\n")
    with Memory(tmp_path / "store", embedder=None) as mem:
        bound = sys.getrecursionlimit()
        sys.setrecursionlimit(len(traceback.extract_stack()) + 150)
        try:
            report = mem.ingest(kb, shared=True, progress=False)
        finally:
            sys.setrecursionlimit(bound)
        assert not report.failed and not report.skipped
        assert sorted(report.ingested) == ["d/" * 200 + "bottom.txt", "top.txt"]


def test_a_chain_of_links_too_long_to_follow_is_left_out_alone(tmp_path: Path) -> None:
    # pathlib follows a chain of links by recursion: past Python's bound the whole ingest
    # raised RecursionError, and no file went in.
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "good.md").write_text("# Good\n\nkept\n")
    chain = tmp_path / "chain"
    chain.mkdir()
    (chain / "l0").write_text("the end of the chain\n")
    for i in range(1, 1500):
        (chain / f"l{i}").symlink_to(chain / f"l{i - 1}")
    (kb / "far.txt").symlink_to(chain / "l1499")
    with Memory(tmp_path / "store", embedder=None) as mem:
        report = mem.ingest(kb, shared=True, progress=False, follow_outside=True)
        assert list(report.ingested) == ["good.md"]
        assert "far.txt" in report.failed or "far.txt" in report.skipped
