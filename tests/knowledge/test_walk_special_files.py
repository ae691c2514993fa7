"""Paths that are not regular files (issue 33): a FIFO, a socket, a device.

Opening a FIFO to read it waits for a writer, forever: an ingest, or a watch's thread,
that opens one never comes back; reading /dev/zero never ends. The walk skips such a
path with the reason, whether it is met in a folder, named as the target or reported by
a watch, and a file replaced by one after the walk is refused when it is read, never
opened as one. Each case runs in a child process, with a timeout only so that code that
blocks fails the test instead of hanging the run; the child's address space is capped
so that code that reads a device without end fails there."""

from __future__ import annotations

import json
import os
import resource
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    not hasattr(os, "mkfifo") or not sys.platform.startswith("linux"),
    reason="FIFOs, sockets and /dev/zero as on Linux",
)

CAP = 2**30  # the child's address space
FIFO = "not a regular file: a FIFO"

INGEST = """
import json, sys
from memlane import Memory
target, root, follow = sys.argv[1], sys.argv[2], sys.argv[3] == "follow"
with Memory(None, embedder=None) as mem:
    report = mem.ingest(target, root=root, shared=True, progress=False, follow_outside=follow)
    print(json.dumps({
        "ingested": sorted(report.ingested), "skipped": report.skipped, "failed": report.failed
    }))
"""

# The file is replaced by a FIFO after the walk found it and before the ingest reads it.
RACE = """
import json, os, sys
import memlane.knowledge.ingest as ingest
from memlane import Memory
walk = ingest.walk

def walk_then_swap(*args, **kwargs):
    found = walk(*args, **kwargs)
    os.unlink(sys.argv[2])
    os.mkfifo(sys.argv[2])
    return found

ingest.walk = walk_then_swap
with Memory(None, embedder=None) as mem:
    report = mem.ingest(sys.argv[1], shared=True, progress=False)
    print(json.dumps({"ingested": sorted(report.ingested), "failed": report.failed}))
"""

WATCH = """
import json, os, sys, time
from pathlib import Path
from memlane import Memory
kb = Path(sys.argv[1])
reports = []

def sources(mem):
    return {str(d.metadata["source"]) for d in mem.list_documents(shared=True)}

def wait_for(condition):
    deadline = time.monotonic() + 20
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)

with Memory(None, embedder=None) as mem:
    with mem.watch(kb, shared=True, debounce=0.1, on_report=reports.append) as watch:
        before = sorted(sources(mem))
        (kb / "pipe.txt").unlink()
        os.mkfifo(kb / "pipe.txt")  # a watched file becomes a FIFO
        os.mkfifo(kb / "new.md")  # and a FIFO appears
        wait_for(lambda: "pipe.txt" not in sources(mem))
        (kb / "marker.txt").write_text("Marker lemurs.")  # the watch still follows
        wait_for(lambda: "marker.txt" in sources(mem))
        after = sorted(sources(mem))
    skipped, pruned = {}, []
    for report in reports:
        skipped.update(report.skipped)
        pruned.extend(report.pruned)
    print(json.dumps({"before": before, "after": after, "skipped": skipped, "pruned": pruned}))
"""


def run_child(script: str, *args: str) -> dict[str, object]:
    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (CAP, CAP))

    child = subprocess.run(
        [sys.executable, "-c", script, *args],
        preexec_fn=cap,
        capture_output=True,
        text=True,
        timeout=120,  # only so that a child blocked on a FIFO cannot hang the run
        check=False,
    )
    assert child.returncode == 0, child.stderr[-2000:]
    out: dict[str, object] = json.loads(child.stdout)
    return out


@pytest.fixture
def kb(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder with a text file, a FIFO, a Unix socket and a link to /dev/zero."""
    folder = tmp_path / "kb"
    folder.mkdir()
    (folder / "fine.txt").write_text("a small document that is ingested all the same")
    os.mkfifo(folder / "pipe.txt")
    (folder / "zero.txt").symlink_to("/dev/zero")
    with socket.socket(socket.AF_UNIX) as sock:
        monkeypatch.chdir(folder)  # a Unix socket's path must be short
        sock.bind("sock.txt")
        yield folder


def test_a_fifo_named_as_the_target_is_skipped_not_opened(kb: Path) -> None:
    out = run_child(INGEST, str(kb / "pipe.txt"), str(kb), "")
    assert out == {"ingested": [], "skipped": {"pipe.txt": FIFO}, "failed": {}}


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("sock.txt", "not a regular file: a socket"),
        ("zero.txt", "not a regular file: a character device"),
    ],
)
def test_a_socket_or_a_device_named_as_the_target_is_skipped(
    kb: Path, name: str, reason: str
) -> None:
    out = run_child(INGEST, str(kb / name), str(kb), "follow")
    assert out == {"ingested": [], "skipped": {name: reason}, "failed": {}}


def test_a_folder_walk_names_what_each_special_file_is(kb: Path) -> None:
    out = run_child(INGEST, str(kb), str(kb), "follow")
    assert out == {
        "ingested": ["fine.txt"],
        "skipped": {
            "pipe.txt": FIFO,
            "sock.txt": "not a regular file: a socket",
            "zero.txt": "not a regular file: a character device",
        },
        "failed": {},
    }
    # A link out of the root is left out for that first, unless followed.
    out = run_child(INGEST, str(kb), str(kb), "")
    assert out["skipped"] == {
        "pipe.txt": FIFO,
        "sock.txt": "not a regular file: a socket",
        "zero.txt": "symbolic link to outside the knowledge root",
    }


def test_a_file_replaced_by_a_fifo_after_the_walk_fails_without_blocking(
    tmp_path: Path,
) -> None:
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "fine.txt").write_text("a small document that is ingested all the same")
    (kb / "late.txt").write_text("a file that is a FIFO by the time it is read")
    out = run_child(RACE, str(kb), str(kb / "late.txt"))
    assert out == {"ingested": ["fine.txt"], "failed": {"late.txt": f"cannot read: {FIFO}"}}


def test_a_watch_skips_a_fifo_and_goes_on(tmp_path: Path) -> None:
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "pipe.txt").write_text("Pipes carry water.")
    (kb / "fine.txt").write_text("Fine text.")
    out = run_child(WATCH, str(kb))
    assert out["before"] == ["fine.txt", "pipe.txt"]
    assert out["after"] == ["fine.txt", "marker.txt"]  # the FIFO's old document went
    assert out["pruned"] == ["pipe.txt"]
    skipped = out["skipped"]
    assert isinstance(skipped, dict) and skipped["pipe.txt"] == FIFO
