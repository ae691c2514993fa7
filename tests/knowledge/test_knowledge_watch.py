"""Memory.watch and ``memlane ingest --watch``: a knowledge folder kept in sync with real
files, on both backends. Every wait polls the store (or the command's output) until the
expected state, failing after a bounded time; nothing sleeps a fixed time and assumes."""

from __future__ import annotations

import asyncio
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import REPO, StoreFactory, WordHashEmbedder
from memlane import AsyncMemory, IngestReport, Memory, OnnxEmbedder
from memlane.errors import InvalidArgumentError, NotFoundError

# A bound for a hang: every wait returns once its state is reached, so a busy machine
# (the command below starts Python and loads the model) only waits longer.
TIMEOUT = 120.0


def wait_for(condition: Callable[[], object], what: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {TIMEOUT} s: {what}")
        time.sleep(0.05)


def sources(mem: Memory) -> set[str]:
    return {str(d.metadata["source"]) for d in mem.list_documents(shared=True)}


def found(mem: Memory, word: str) -> set[str]:
    hits = mem.search_knowledge(word, mode="text", k=20)
    return {str(h.record.metadata["source"]) for h in hits}


def test_watch_follows_files(
    make_store: StoreFactory, word_embedder: WordHashEmbedder, tmp_path: Path
) -> None:
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "a.txt").write_text("Aardvarks dig burrows at night.")
    (kb / "stale.txt").write_text("Stale penguins.")
    mem = make_store("watch", word_embedder)
    mem.ingest(kb, shared=True, progress=False)
    (kb / "stale.txt").unlink()  # gone before the watch: its first sync removes it
    reports: list[IngestReport] = []
    try:
        with mem.watch(kb, shared=True, debounce=0.1, on_report=reports.append) as watch:
            assert watch.running
            assert watch.initial.unchanged.keys() == {"a.txt"}
            assert watch.initial.pruned.keys() == {"stale.txt"}
            assert sources(mem) == {"a.txt"}

            # Create -> searchable.
            (kb / "guides").mkdir()
            (kb / "guides" / "b.md").write_text("# Zebras\n\nZebras graze on the savanna.")
            wait_for(lambda: found(mem, "zebras") == {"guides/b.md"}, "a new file is searchable")

            # Modify -> the new content is found, the old is gone, nothing else rewritten.
            reports.clear()
            (kb / "guides" / "b.md").write_text("# Giraffes\n\nGiraffes browse acacia trees.")
            wait_for(lambda: found(mem, "giraffes") == {"guides/b.md"}, "the new content")
            assert found(mem, "zebras") == set()
            # The report reaches on_report after the change it tells of is committed (and
            # searchable): a busy machine runs a search in between.
            wait_for(lambda: any(r.replaced for r in reports), "the change's report")
            changed = [r for r in reports if r.replaced]
            assert [r.replaced.keys() for r in changed] == [{"guides/b.md"}]
            assert not any(r.ingested for r in reports)
            doc = mem.get(changed[0].replaced["guides/b.md"])
            assert doc.text == "# Giraffes\n\nGiraffes browse acacia trees."

            # Files the ingest skips are ignored: a marker written after them shows they
            # have been seen.
            (kb / ".b.md.swp").write_text("swap of the editor")
            (kb / "b.md~").write_text("backup of the editor")
            (kb / "marker.txt").write_text("Marker lemurs.")
            wait_for(lambda: "marker.txt" in sources(mem), "the marker file")
            assert sources(mem) == {"a.txt", "guides/b.md", "marker.txt"}

            # Delete -> gone with its fragments; a deleted folder takes its documents.
            (kb / "marker.txt").unlink()
            wait_for(lambda: "marker.txt" not in sources(mem), "a deleted file is gone")
            shutil.rmtree(kb / "guides")
            wait_for(lambda: sources(mem) == {"a.txt"}, "a deleted folder's documents go")
            assert found(mem, "giraffes") == set()
            assert mem.count("fragments") == len(
                mem.get_fragments(watch.initial.unchanged["a.txt"])
            )

            # A file moved in under a new name is ingested, and the old name removed.
            (kb / "a.txt").rename(kb / "c.txt")
            wait_for(lambda: sources(mem) == {"c.txt"}, "a renamed file")
        assert not watch.running
        assert any("guides/b.md" in r.pruned for r in reports)
    finally:
        mem.close()


def test_watch_private_knowledge_and_stop_twice(
    word_embedder: WordHashEmbedder, tmp_path: Path
) -> None:
    kb = tmp_path / "kb"
    kb.mkdir()
    mem = Memory(None, word_embedder)
    watch = mem.watch(kb, agent_id="eliza", debounce=0)
    try:
        (kb / "n.txt").write_text("Narwhals have one long tusk.")
        wait_for(
            lambda: mem.search_knowledge("narwhals", agent_id="eliza", mode="text"),
            "private knowledge",
        )
        assert mem.search_knowledge("narwhals", mode="text") == []  # not shared
    finally:
        watch.stop()
        watch.stop()
    assert "stopped" in repr(watch)


def test_a_burst_of_events_is_one_batch(word_embedder: WordHashEmbedder, tmp_path: Path) -> None:
    """Files written in a burst are ingested together once the folder is quiet, not one
    batch per event (it would take a second between writes to split them all)."""
    kb = tmp_path / "kb"
    kb.mkdir()
    mem = Memory(None, word_embedder)
    reports: list[IngestReport] = []
    with mem.watch(kb, shared=True, debounce=1.0, on_report=reports.append):
        for i in range(20):
            (kb / f"note{i}.txt").write_text(f"Note number {i} about quokkas.")
        wait_for(lambda: len(sources(mem)) == 20, "the burst is ingested")
    assert sum(len(r.ingested) for r in reports) == 20
    assert len(reports) < 20


def test_watch_checks_its_arguments_first(word_embedder: WordHashEmbedder, tmp_path: Path) -> None:
    mem = Memory(None, word_embedder)
    (tmp_path / "a.txt").write_text("Alpha.")
    with pytest.raises(NotFoundError):
        mem.watch(tmp_path / "missing", shared=True)
    with pytest.raises(InvalidArgumentError, match="folder"):
        mem.watch(tmp_path / "a.txt", shared=True)
    with pytest.raises(InvalidArgumentError, match="debounce"):
        mem.watch(tmp_path, shared=True, debounce=-1)
    with pytest.raises(InvalidArgumentError, match="agent_id"):
        mem.watch(tmp_path)
    with pytest.raises(InvalidArgumentError, match="on_report"):
        mem.watch(tmp_path, shared=True, on_report="print")  # type: ignore[arg-type]
    assert len(mem) == 0


def test_watch_reports_errors_and_goes_on(word_embedder: WordHashEmbedder, tmp_path: Path) -> None:
    kb = tmp_path / "kb"
    kb.mkdir()
    mem = Memory(None, word_embedder)
    errors: list[BaseException] = []
    watch = mem.watch(kb, shared=True, debounce=0, on_error=errors.append)
    try:
        mem.close()  # the store goes away under the watch
        (kb / "late.txt").write_text("Too late.")
        wait_for(lambda: errors, "the error of a closed store")
        assert watch.running
    finally:
        watch.stop()


async def test_async_watch(word_embedder: WordHashEmbedder, tmp_path: Path) -> None:
    kb = tmp_path / "kb"
    kb.mkdir()
    async with AsyncMemory(None, word_embedder) as mem:
        watch = await mem.watch(kb, shared=True, debounce=0)
        try:
            (kb / "o.txt").write_text("Otters hold hands while they sleep.")
            deadline = time.monotonic() + TIMEOUT
            while not await mem.search_knowledge("otters", mode="text"):
                assert time.monotonic() < deadline, "the async watch did not ingest the file"
                await asyncio.sleep(0.05)
        finally:
            watch.stop()


# -- memlane ingest --watch ------------------------------------------------------------------


def _lines(stream: object, out: queue.Queue[str]) -> None:
    for line in stream:  # type: ignore[attr-defined]
        out.put(line.rstrip("\n"))


def _expect(lines: queue.Queue[str], wanted: str, seen: list[str]) -> None:
    deadline = time.monotonic() + TIMEOUT
    while wanted not in seen:
        left = deadline - time.monotonic()
        if left <= 0:
            pytest.fail(f"no line {wanted!r} within {TIMEOUT} s; got {seen}")
        try:
            seen.append(lines.get(timeout=left))
        except queue.Empty:
            continue


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child process is POSIX")
def test_cli_watch_until_interrupted(tmp_path: Path, onnx_embedder: OnnxEmbedder) -> None:
    """``memlane ingest ... --watch`` as docs/cli.md writes it, with the default model."""
    command = "memlane ingest kb-store knowledge --shared --watch"
    assert command in (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    kb = tmp_path / "knowledge"
    kb.mkdir()
    (kb / "a.txt").write_text("Aardvarks dig burrows at night.")
    Memory(tmp_path / "kb-store", onnx_embedder).close()  # made by the page's first block
    # The installed memlane (the source tree has no native module in a plain install).
    # Ctrl-C as in a terminal: a child inherits an ignored SIGINT (a job started in the
    # background of a non-interactive shell ignores it, as .ci/run may be), and then
    # Python never raises KeyboardInterrupt. A handler here is reset to the default
    # in the child. -X faulthandler: a child that hangs is aborted below and prints
    # every thread's stack.
    restore = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        child = subprocess.Popen(
            [sys.executable, "-X", "faulthandler", "-m", "memlane", *command.split()[1:]],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    finally:
        if restore is not None:  # None: a handler not set from Python, left as it was
            signal.signal(signal.SIGINT, restore)
    out: queue.Queue[str] = queue.Queue()
    err: queue.Queue[str] = queue.Queue()
    readers = [
        threading.Thread(target=_lines, args=(stream, sink), daemon=True)
        for stream, sink in ((child.stdout, out), (child.stderr, err))
    ]
    for reader in readers:
        reader.start()
    stdout: list[str] = []
    stderr: list[str] = []
    try:
        _expect(err, "memlane: watching knowledge (Ctrl-C to stop)", stderr)
        assert stdout == [] and out.get(timeout=TIMEOUT).startswith("1 seen, 1 ingested")
        (kb / "b.txt").write_text("Bats hang upside down.")
        _expect(out, "ingested b.txt", stdout)
        (kb / "a.txt").write_text("Aardvarks eat termites.")
        _expect(out, "replaced a.txt", stdout)
        (kb / "b.txt").unlink()
        _expect(out, "removed b.txt", stdout)
        child.send_signal(signal.SIGINT)
        try:
            code = child.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            child.send_signal(signal.SIGABRT)
            child.wait(timeout=TIMEOUT)
            for reader in readers:
                reader.join(timeout=TIMEOUT)
            while not err.empty():
                stderr.append(err.get())
            lines = "\n".join(stderr)
            pytest.fail(f"still running {TIMEOUT} s after SIGINT; its stderr:\n{lines}")
        assert code == 0
        _expect(err, "memlane: stopped watching", stderr)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        # The readers end at end of stream; the pipes are closed here, not by a later
        # test's garbage collection.
        for reader in readers:
            reader.join(timeout=TIMEOUT)
        for stream in (child.stdout, child.stderr):
            if stream is not None:
                stream.close()
    with Memory(tmp_path / "kb-store", onnx_embedder) as mem:
        (doc,) = mem.list_documents()
        assert (doc.metadata["source"], doc.text) == ("a.txt", "Aardvarks eat termites.")
        hits = mem.search_knowledge("What do aardvarks feed on?")
        assert [h.record.text for h in hits] == ["Aardvarks eat termites."]
