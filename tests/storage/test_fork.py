"""A Memory opened before os.fork() belongs to the parent: the child gets a memlane
error that tells it to open the store itself, never a misleading one, and the parent's
store is untouched."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import memlane
from conftest import WordHashEmbedder
from memlane.errors import MemlaneError

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork on this platform")


def in_child(work: Callable[[], Any]) -> dict[str, Any]:
    """Runs ``work`` in a forked child; what it returned or raised, as the child saw it."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report through the pipe, never return into pytest
        code = 0
        # A child that hangs is ended, and the parent sees how, instead of waiting forever.
        signal.alarm(60)
        try:
            os.close(read)
            try:
                result: dict[str, Any] = {"returned": repr(work())}
            except BaseException as exc:  # everything is reported
                result = {
                    "raised": type(exc).__name__,
                    "memlane": isinstance(exc, MemlaneError),
                    "message": str(exc),
                }
            with os.fdopen(write, "w") as out:
                json.dump(result, out)
        except BaseException:  # the parent sees the exit code
            code = 1
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as got:
        text = got.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, text
    report: dict[str, Any] = json.loads(text)
    return report


CALLS: dict[str, Callable[[memlane.Memory, str], Any]] = {
    "add": lambda m, _: m.add("written by the child"),
    "add_many": lambda m, _: m.add_many([{"text": "one"}, {"text": "two"}]),
    "search": lambda m, _: m.search("parent"),
    "get": lambda m, id: m.get(id),
    "count": lambda m, _: m.count(),
    "delete": lambda m, id: m.delete(id),
    "update": lambda m, id: m.update(id, text="changed by the child"),
    "supersede": lambda m, id: m.supersede(id, "superseded by the child"),
    "history": lambda m, id: m.history(id),
}


@pytest.mark.parametrize("call", list(CALLS))
def test_a_child_using_the_parents_memory_is_told_to_open_its_own(
    tmp_path: Path, call: str
) -> None:
    # The old code let the child write through the parent's engine and connection: an
    # add came back as "id(s) already stored".
    with memlane.Memory(tmp_path / "store", embedder=None) as m:
        first = m.add("written by the parent")
        report = in_child(lambda: CALLS[call](m, first.id))
        assert report.get("memlane") is True, report
        assert "os.fork()" in report["message"]
        assert "open the store again in the child" in report["message"]
        # The parent goes on as before.
        assert m.count() == 1
        assert [h.record.text for h in m.search("parent")] == ["written by the parent"]
        m.add("the parent again")
        assert m.count() == 2


def test_a_store_opened_in_the_child_works(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with memlane.Memory(path, embedder=None) as m:
        m.add("written by the parent")

    def reopen() -> list[str]:
        with memlane.Memory(path, embedder=None) as own:
            own.add("written by the child")
            return sorted(h.record.text for h in own.search("written", k=5))

    report = in_child(reopen)
    assert report == {"returned": repr(["written by the child", "written by the parent"])}
    with memlane.Memory(path, embedder=None) as m:
        assert m.count() == 2


def test_a_child_forked_after_the_parents_parallel_work_does_its_own(tmp_path: Path) -> None:
    """The engine's thread pools are its process's: rayon's global pool, once a bulk load
    had used it, left a forked child (multiprocessing's default start on Linux) waiting
    forever for workers that exist only in the parent."""

    def load(path: Path) -> int:
        with memlane.Memory(path, WordHashEmbedder()) as m:
            m.add_many([{"text": f"note {i} about kites"} for i in range(3000)])
            m.wait_indexed()
            return len(m.search("note 7 about kites", k=5))

    assert load(tmp_path / "parent") == 5
    assert in_child(lambda: load(tmp_path / "child")) == {"returned": "5"}


def test_a_grandchild_is_refused_too(tmp_path: Path) -> None:
    with memlane.Memory(tmp_path / "store", embedder=None) as m:
        m.add("written by the parent")

        def fork_again() -> dict[str, Any]:
            return in_child(lambda: m.count())

        report = in_child(fork_again)
        assert "MemlaneError" in report["returned"] and "os.fork()" in report["returned"]
        assert m.count() == 1


def test_close_in_the_child_leaves_the_parents_store_alone(tmp_path: Path) -> None:
    """Closing the parent's Memory in the child (a ``with`` block the fork ran inside)
    neither writes the parent's files nor releases its store lock."""
    path = tmp_path / "store"
    with memlane.Memory(path, embedder=None) as m:
        m.add("written by the parent")
        files = {p.name: p.stat().st_mtime_ns for p in path.rglob("*") if p.is_file()}
        report = in_child(lambda: m.close())
        assert report == {"returned": "None"}
        # The store lock is still held: a second open is refused, as before the fork.
        with pytest.raises(memlane.StoreLockedError):
            memlane.Memory(path, embedder=None)
        after = {p.name: p.stat().st_mtime_ns for p in path.rglob("*") if p.is_file()}
        assert {k: v for k, v in after.items() if k in files} == files
        m.add("the parent again")
    with memlane.Memory(path, embedder=None) as m:
        assert m.count() == 2
