"""Notes files and core memory blocks keep their limits when writers edit them at once:
threads sharing a ``Memory`` (both backends), processes sharing a PostgreSQL schema, and
processes taking turns on an embedded store (its lock admits one open ``Memory`` at a time).
Every edit that returned is in what is left, the text stays within the limit, and an
edit refused for room raises the memlane error that names the limit."""

from __future__ import annotations

import multiprocessing
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import StoreFactory, WordHashEmbedder
from memlane import Memory, StoreLockedError, UnknownIdError
from memlane.agent import CoreMemory, CoreMemoryLimitError
from memlane.notes import Notebook, NoteLimitError
from memlane.notes_files import NOTES, entry_line, head_token, write_entries

LIMIT = 300
SCOPE = {"agent_id": "helper", "user_id": "alice"}
MAY_1 = 1777593600.0  # 2026-05-01 UTC
LINE = len(entry_line(MAY_1, "", "x")) - 1  # the date prefix a line adds to its text


class SlowEmbedder(WordHashEmbedder):
    """Takes a moment over each batch, so that writers which read together are still
    reading when the first of them writes."""

    def embed_batch(self, texts: Any) -> np.ndarray:
        time.sleep(0.02)
        return super().embed_batch(texts)


def book(mem: Memory) -> Notebook:
    return Notebook(mem, SCOPE, limits={"user": LIMIT}, clock=lambda: MAY_1)


def at_once(calls: list[Callable[[], Any]]) -> list[Any]:
    """Runs ``calls`` on threads released together; each one's result or exception."""
    barrier = threading.Barrier(len(calls), timeout=60)
    out: list[Any] = [None] * len(calls)

    def run(i: int) -> None:
        barrier.wait()
        try:
            out[i] = calls[i]()
        except BaseException as e:
            out[i] = e

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def fact(i: int) -> str:
    return f"writer {i:02d} says Alice keeps a notebook of birds seen in town"


def check_file(mem: Memory, done: list[str], refused: list[BaseException]) -> list[str]:
    """USER.md within the limit, holding every text in ``done``; each refusal a
    NoteLimitError naming the limit. Returns the entries' texts."""
    notes = book(mem)
    texts = [r.text for r in notes.entries("USER.md")]
    assert notes.size("USER.md") <= LIMIT
    for text in done:
        assert text in texts
    for e in refused:
        assert isinstance(e, NoteLimitError), repr(e)
        assert f"limited to {LIMIT} characters" in str(e)
    return texts


def test_concurrent_appends_keep_the_limit(make_store: StoreFactory) -> None:
    """The issue's trial: 12 appends at once to a 300-character USER.md all succeeded and
    left 818 characters."""
    mem = make_store("appends", SlowEmbedder())
    results = at_once([lambda i=i: book(mem).append("USER.md", fact(i)) for i in range(12)])
    done = [fact(i) for i, r in enumerate(results) if not isinstance(r, BaseException)]
    refused = [r for r in results if isinstance(r, BaseException)]
    texts = check_file(mem, done, refused)
    assert sorted(texts) == sorted(done)
    line = LINE + len(fact(0)) + 1
    assert len(done) == LIMIT // line  # refused only for want of room
    assert book(mem).size("USER.md") == len(done) * line


def test_concurrent_growing_replaces_and_appends_keep_the_limit(make_store: StoreFactory) -> None:
    mem = make_store("replaces", SlowEmbedder())
    notes = book(mem)
    for i in range(4):
        notes.append("USER.md", f"bird {i}")
    grow = [
        lambda i=i: book(mem).replace("USER.md", f"bird {i}", f"bird {i} was a heron by the river")
        for i in range(4)
    ]
    add = [lambda i=i: book(mem).append("USER.md", fact(i)) for i in range(6)]
    results = at_once(grow + add)
    done = [
        f"bird {i} was a heron by the river"
        for i, r in enumerate(results[:4])
        if not isinstance(r, BaseException)
    ]
    done += [fact(i) for i, r in enumerate(results[4:]) if not isinstance(r, BaseException)]
    refused = [r for r in results if isinstance(r, BaseException)]
    texts = check_file(mem, done, refused)
    for i, r in enumerate(results[:4]):
        if isinstance(r, BaseException):  # a refused rewrite leaves the entry as it was
            assert f"bird {i}" in texts


def test_concurrent_removals_never_take_an_append(make_store: StoreFactory) -> None:
    mem = make_store("removals", SlowEmbedder())
    notes = book(mem)
    for i in range(4):
        notes.append("USER.md", f"old bird {i}")
    drop = [lambda i=i: book(mem).replace("USER.md", f"old bird {i}", "") for i in range(4)]
    add = [lambda i=i: book(mem).append("USER.md", fact(i)) for i in range(6)]
    results = at_once(drop + add)
    assert all(r.removed == 1 for r in results[:4]), results[:4]
    done = [fact(i) for i, r in enumerate(results[4:]) if not isinstance(r, BaseException)]
    refused = [r for r in results[4:] if isinstance(r, BaseException)]
    texts = check_file(mem, done, refused)
    assert not any(t.startswith("old bird") for t in texts)
    assert sorted(texts) == sorted(done)


def test_two_rewrites_of_one_entry_both_land(make_store: StoreFactory) -> None:
    mem = make_store("rewrites", SlowEmbedder())
    book(mem).append("USER.md", "It rains in Lisbon and Porto.")
    results = at_once(
        [
            lambda: book(mem).replace("USER.md", "rains", "shines"),
            lambda: book(mem).replace("USER.md", "Porto", "Faro"),
        ]
    )
    assert [r.replaced for r in results] == [1, 1]
    (entry,) = book(mem).entries("USER.md")
    assert entry.text == "It shines in Lisbon and Faro."
    assert entry.created_at == MAY_1
    wordings = [v.record.text for v in mem.history(entry.id)]
    assert wordings[0] == "It rains in Lisbon and Porto." and wordings[-1] == entry.text


def test_a_write_over_a_changed_head_stores_nothing(
    make_store: StoreFactory, tmp_path: Path
) -> None:
    """The condition an edit is stored under: the file's head is still the one it read,
    checked in the edit's transaction. An append, a rewrite and an import each change it."""
    mem = make_store("heads", WordHashEmbedder())
    notes = book(mem)
    notes.append("USER.md", "Alice likes herons.")
    (entry,) = notes.entries("USER.md")
    late = {"text": "late", "table": NOTES, "type": "user", **notes.scope}
    changes = [
        lambda: book(mem).append("USER.md", "Alice likes owls."),
        lambda: book(mem).replace("USER.md", "owls", "swifts"),
        lambda: mem.import_notes(tmp_path / "files", **SCOPE),
    ]
    mem.export_notes(tmp_path / "files", **SCOPE)
    (tmp_path / "files" / "USER.md").write_text("## 2026-05-02\nAlice likes gulls.\n")
    for change in changes:
        token = head_token(mem, "user", notes.scope)
        before = [(r.id, r.text) for r in notes.entries("USER.md")]
        change()
        after = [(r.id, r.text) for r in notes.entries("USER.md")]
        assert after != before
        assert write_entries(mem, "user", notes.scope, token, [late], [entry.id]) is None
        assert [(r.id, r.text) for r in notes.entries("USER.md")] == after
    token = head_token(mem, "user", notes.scope)
    (stored,) = write_entries(mem, "user", notes.scope, token, [late]) or []
    assert stored.text == "late" and stored.id in {r.id for r in notes.entries("USER.md")}


def test_concurrent_block_appends_keep_the_limit(make_store: StoreFactory) -> None:
    mem = make_store("blocks", SlowEmbedder())
    CoreMemory(mem, SCOPE).define("human", limit=LIMIT)
    results = at_once(
        [lambda i=i: CoreMemory(mem, SCOPE).append("human", fact(i)) for i in range(12)]
    )
    done = [fact(i) for i, r in enumerate(results) if not isinstance(r, BaseException)]
    refused = [r for r in results if isinstance(r, BaseException)]
    value = CoreMemory(mem, SCOPE).get("human").value
    assert len(value) <= LIMIT
    assert sorted(value.split("\n")) == sorted(done)
    for e in refused:
        assert isinstance(e, CoreMemoryLimitError), repr(e)
        assert f"limited to {LIMIT} characters" in str(e)
    assert len(value) + 1 + len(fact(0)) > LIMIT  # refused only for want of room


def test_concurrent_block_replaces_keep_the_limit(make_store: StoreFactory) -> None:
    mem = make_store("block-replaces", SlowEmbedder())
    core = CoreMemory(mem, SCOPE)
    core.define("human", "\n".join(f"bird {i}" for i in range(4)), limit=LIMIT)
    grow = [
        lambda i=i: CoreMemory(mem, SCOPE).replace(
            "human", f"bird {i}", f"bird {i} was a heron by the river"
        )
        for i in range(4)
    ]
    add = [lambda i=i: CoreMemory(mem, SCOPE).append("human", fact(i)) for i in range(6)]
    results = at_once(grow + add)
    value = core.get("human").value
    assert len(value) <= LIMIT
    for i, r in enumerate(results[:4]):
        long = f"bird {i} was a heron by the river"
        assert (long in value) == (not isinstance(r, BaseException))
    for i, r in enumerate(results[4:]):
        assert (fact(i) in value) == (not isinstance(r, BaseException))
    for r in results:
        if isinstance(r, BaseException):
            assert isinstance(r, CoreMemoryLimitError), repr(r)


def test_a_block_deleted_while_an_edit_lands_is_gone(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An append that lands after delete() read the block's versions, and before it
    removed them, is removed with them: the block is gone, not left at the append."""
    mem = make_store("block-delete", WordHashEmbedder())
    core = CoreMemory(mem, SCOPE)
    core.define("human", "Alice.", limit=LIMIT)
    core.append("human", "Vegan.")
    landed: list[Any] = []
    for name in ("delete", "replace"):
        method = getattr(mem, name)

        def edit_first(*args: Any, _method: Any = method, **kwargs: Any) -> Any:
            if not landed:
                landed.append(CoreMemory(mem, SCOPE).append("human", "Likes jazz."))
            return _method(*args, **kwargs)

        monkeypatch.setattr(mem, name, edit_first)
    core.delete("human")
    assert landed
    with pytest.raises(UnknownIdError):
        core.get("human")
    assert core.blocks() == []
    assert core.define("human", "Bob.", limit=LIMIT).value == "Bob."


# -- processes --------------------------------------------------------------------------------


def _open(location: str, cache: str) -> Memory:
    """The store, once the other process has closed it where one open Memory at a time is
    admitted (an embedded store's lock)."""
    for _ in range(60_000):
        try:
            if location.startswith("postgresql"):
                return Memory(location, None, cache_dir=cache)
            return Memory(location, None)
        except StoreLockedError:
            time.sleep(0.001)
    raise AssertionError("the other process kept the store open")


def _append_in_process(
    location: str, cache: str, what: str, first: int, start: Any, out: Any
) -> None:
    """A process's writer: appends 6 facts to the note or block and reports each. On an
    embedded store it opens the store for each append and closes it after, so the two
    processes take turns."""
    embedded = not location.startswith("postgresql")
    results: list[tuple[int, str, str]] = []
    try:
        start.wait(60)
        mem: Memory | None = None
        for i in range(first, first + 6):
            mem = mem or _open(location, cache)
            try:
                if what == "notes":
                    book(mem).append("USER.md", fact(i))
                else:
                    CoreMemory(mem, SCOPE).append("human", fact(i))
                results.append((i, "ok", ""))
            except (NoteLimitError, CoreMemoryLimitError) as e:
                results.append((i, "limit", str(e)))
            if embedded:
                mem.close()
                mem = None
        if mem is not None:
            mem.close()
    except BaseException as e:
        results.append((-1, "error", repr(e)))
    out.put(results)


def run_processes(location: str, tmp_path: Path, what: str) -> list[str]:
    """Two spawned processes appending 6 facts each to the same note or block; returns the
    facts whose append succeeded (every refusal named the limit)."""
    ctx = multiprocessing.get_context("spawn")
    start, out = ctx.Barrier(2), ctx.Queue()
    procs = [
        ctx.Process(
            target=_append_in_process,
            args=(location, str(tmp_path / f"cache{w}"), what, w * 6, start, out),
        )
        for w in range(2)
    ]
    for p in procs:
        p.start()
    results = [out.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    done: list[str] = []
    refusals: list[str] = []
    for rows in results:
        for i, status, message in rows:
            assert status != "error", message
            if status == "ok":
                done.append(fact(i))
            else:
                refusals.append(message)
    assert refusals, "the limit was never reached"
    assert all(f"limited to {LIMIT} characters" in m for m in refusals)
    return done


@pytest.mark.parametrize("what", ["notes", "core"])
def test_two_processes_on_postgres_keep_the_limit(
    pg_server: Any, tmp_path: Path, what: str
) -> None:
    factory = StoreFactory("postgres", tmp_path, pg_server)
    try:
        mem = factory("procs")
        if what == "core":
            CoreMemory(mem, SCOPE).define("human", limit=LIMIT)
        done = run_processes(str(factory.location("procs")), tmp_path, what)
        mem.close()
        mem = factory("procs")  # a fresh look at what the two wrote
        if what == "notes":
            texts = check_file(mem, done, [])
            assert sorted(texts) == sorted(done)
        else:
            value = CoreMemory(mem, SCOPE).get("human").value
            assert len(value) <= LIMIT and sorted(value.split("\n")) == sorted(done)
    finally:
        factory.close_all()


@pytest.mark.parametrize("what", ["notes", "core"])
def test_two_processes_taking_turns_on_an_embedded_store(tmp_path: Path, what: str) -> None:
    location = tmp_path / "store"
    mem = Memory(location, None)
    if what == "core":
        CoreMemory(mem, SCOPE).define("human", limit=LIMIT)
    mem.close()
    done = run_processes(str(location), tmp_path, what)
    mem = Memory(location, None)
    try:
        if what == "notes":
            texts = check_file(mem, done, [])
            assert sorted(texts) == sorted(done)
        else:
            value = CoreMemory(mem, SCOPE).get("human").value
            assert len(value) <= LIMIT and sorted(value.split("\n")) == sorted(done)
    finally:
        mem.close()
