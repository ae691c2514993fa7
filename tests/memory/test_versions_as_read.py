"""``supersede`` and ``update`` given the record read (not its id) change it only while it
is still the version read (its ``updated_at``), checked inside their transaction: one
rewritten or superseded since is refused with ``ConflictError`` and nothing is stored,
before or while the change embeds its text, by this process or another. An id keeps its
meaning (the current version, whatever it is). Both backends."""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from conftest import SlowEmbedder, StoreFactory, WordHashEmbedder
from memlane import AsyncMemory, ConflictError, InvalidArgumentError, Memory, MemoryRecord, times
from memlane.edits import rewrite

SCOPE = {"user_id": "alice"}


def current(mem: Memory) -> list[str]:
    return sorted(r.text for r in mem.list("memories", filters={"valid_to": None}, **SCOPE))


def events(mem: Memory, record_id: str) -> list[str]:
    return [v.event for v in mem.history(record_id)]


Change = Callable[[Memory, Any, str], MemoryRecord]


def _supersede(mem: Memory, target: Any, text: str) -> MemoryRecord:
    return mem.supersede(target, text, by="test")


def _update(mem: Memory, target: Any, text: str) -> MemoryRecord:
    return mem.update(target, text=text, by="test")


CHANGES = pytest.mark.parametrize("change", [_supersede, _update], ids=["supersede", "update"])


@CHANGES
def test_the_record_read_is_changed_while_it_is_current(
    make_store: StoreFactory, change: Change
) -> None:
    mem = make_store("as-read", WordHashEmbedder())
    read = mem.add("Alice works at Acme", **SCOPE)
    mem.search("Alice", **SCOPE)  # an access count, flushed, is no rewrite
    mem.snapshot()
    assert mem.get(read.id).access_count == 1
    new = change(mem, read, "Alice works at Globex")
    assert current(mem) == ["Alice works at Globex"]
    # The record a change returns is the version stored: it can be changed in turn.
    newer = change(mem, new, "Alice works at Initech")
    assert current(mem) == ["Alice works at Initech"]
    assert newer.updated_at == mem.get(newer.id).updated_at


@CHANGES
@pytest.mark.parametrize("meanwhile", ["update", "supersede"])
def test_a_record_changed_since_it_was_read_is_refused(
    make_store: StoreFactory, change: Change, meanwhile: str
) -> None:
    """The record was rewritten (or superseded) after it was read: the change, judged
    against the old text, stores nothing and the rewrite stays current."""
    mem = make_store("stale", WordHashEmbedder())
    read = mem.add("Alice works at Acme", created_at=1000.0, **SCOPE)
    if meanwhile == "update":
        mem.update(read.id, text="Alice works at Initech (her correction)")
    else:
        mem.supersede(read.id, "Alice works at Initech (her correction)", at=2000.0)
    before = (len(mem), events(mem, read.id))
    with pytest.raises(ConflictError, match="since it was read"):
        change(mem, read, "Alice works at Globex")
    assert current(mem) == ["Alice works at Initech (her correction)"]
    assert (len(mem), events(mem, read.id)) == before


@CHANGES
def test_a_rewrite_at_the_same_clock_reading_is_a_new_version(
    make_store: StoreFactory, change: Change, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A clock that stands still between two writes (mocked, or coarse: 15.6 ms on some
    systems) still gives the rewrite a version of its own, so a change judged against
    the text before it is refused, not applied over the correction."""
    mem = make_store("same-tick", WordHashEmbedder())
    stopped = time.time()
    monkeypatch.setattr(time, "time", lambda: stopped)
    read = mem.add("Alice works at Acme", **SCOPE)
    mem.update(read.id, text="Alice works at Initech (her correction)")
    assert mem.get(read.id).updated_at != read.updated_at
    with pytest.raises(ConflictError, match="since it was read"):
        change(mem, read, "Alice works at Globex")
    assert current(mem) == ["Alice works at Initech (her correction)"]


def test_a_clock_set_back_still_lets_the_newest_statement_win(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fact was stored while the clock ran two minutes ahead; corrected, a supersede
    with no ``at`` starts the new fact where the old one began, not before it (which is
    refused when ``at`` is given)."""
    mem = make_store("set-back", WordHashEmbedder())
    real = time.time()
    monkeypatch.setattr(time, "time", lambda: real + 120)
    old = mem.add("Bob likes tea", **SCOPE)
    monkeypatch.setattr(time, "time", lambda: real)
    new = mem.supersede(old.id, "Bob likes coffee")
    assert current(mem) == ["Bob likes coffee"]
    assert new.created_at == old.created_at == mem.get(old.id).valid_to
    later = mem.update(new, text="Bob likes green tea")
    assert later.updated_at > new.updated_at
    with pytest.raises(InvalidArgumentError, match="became true"):
        mem.supersede(later.id, "Bob likes cocoa", at=real)
    assert current(mem) == ["Bob likes green tea"]


@CHANGES
def test_an_id_changes_the_current_version_whatever_it_is(
    make_store: StoreFactory, change: Change
) -> None:
    mem = make_store("by-id", WordHashEmbedder())
    read = mem.add("Alice works at Acme", **SCOPE)
    mem.update(read.id, text="Alice works at Initech")
    change(mem, read.id, "Alice works at Globex")
    assert current(mem) == ["Alice works at Globex"]


@CHANGES
def test_a_version_read_from_the_history_is_refused_as_history(
    make_store: StoreFactory, change: Change
) -> None:
    """A record given that was superseded already when it was read is history, refused
    as an id of it is (InvalidArgumentError), not a conflict."""
    mem = make_store("history", WordHashEmbedder())
    old = mem.add("Alice works at Acme", created_at=1000.0, **SCOPE)
    mem.supersede(old.id, "Alice works at Initech", at=2000.0)
    closed = mem.get(old.id)
    assert closed.valid_to is not None
    with pytest.raises(InvalidArgumentError, match="superseded already"):
        change(mem, closed, "Alice works at Globex")
    assert current(mem) == ["Alice works at Initech"]


@CHANGES
def test_a_rewrite_while_the_change_embeds_is_refused_in_its_transaction(
    make_store: StoreFactory, change: Change
) -> None:
    """The record is rewritten after the change looked at it and while it embeds its new
    text: the check made inside its transaction refuses it."""
    emb = SlowEmbedder()
    mem = make_store("embedding", emb)
    read = mem.add("Alice works at Acme", **SCOPE)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            change(mem, read, "slow: Alice works at Globex")
        except BaseException as e:
            errors.append(e)

    t = threading.Thread(target=run)
    t.start()
    try:
        assert emb.embedding.wait(60)
        mem.update(read.id, text="Alice works at Initech (her correction)")
    finally:
        emb.go.set()
        t.join(60)
    assert len(errors) == 1 and isinstance(errors[0], ConflictError), errors
    assert "rewritten since it was read" in str(errors[0])
    assert current(mem) == ["Alice works at Initech (her correction)"]
    assert events(mem, read.id) == ["add", "update"]


@CHANGES
@pytest.mark.parametrize("when", ["before", "while embedding"])
def test_a_rewrite_by_another_process_is_refused_on_postgres(
    make_store: StoreFactory, change: Change, when: str
) -> None:
    """Another process (a second Memory on the schema, with its own engine) rewrites the
    record after this one read it, before this one's change or while it embeds: this
    one's change stores nothing."""
    if make_store.backend != "postgres":
        pytest.skip("two processes share a store on PostgreSQL")
    cache, emb = make_store.tmp_path, SlowEmbedder()
    mem = make_store("two-processes", emb, cache_dir=cache / "ca")
    other = make_store("two-processes", WordHashEmbedder(), cache_dir=cache / "cb")
    read = mem.add("Alice works at Acme", **SCOPE)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            change(mem, read, "slow: Alice works at Globex")
        except BaseException as e:
            errors.append(e)

    t = threading.Thread(target=run)
    if when == "before":
        other.update(read.id, text="Alice works at Initech (her correction)")
        emb.go.set()
        t.start()
    else:
        t.start()
        try:
            assert emb.embedding.wait(60)
            other.update(read.id, text="Alice works at Initech (her correction)")
        finally:
            emb.go.set()
    t.join(60)
    assert len(errors) == 1 and isinstance(errors[0], ConflictError), errors
    assert "rewritten since it was read" in str(errors[0])
    assert current(other) == ["Alice works at Initech (her correction)"]
    assert mem.get(read.id).text == "Alice works at Initech (her correction)"
    # Read again, the rewrite can be changed.
    change(mem, mem.get(read.id), "Alice works at Globex")
    assert current(mem) == ["Alice works at Globex"]


def test_async_memory_takes_the_record_read(make_store: StoreFactory) -> None:
    mem = make_store("async", WordHashEmbedder())
    read = mem.add("Alice works at Acme", **SCOPE)

    async def main() -> None:
        amem = AsyncMemory(memory=mem)
        await amem.update(read.id, text="Alice works at Initech")
        with pytest.raises(ConflictError):
            await amem.supersede(read, "Alice works at Globex")
        fresh = await amem.get(read.id)
        await amem.supersede(fresh, "Alice works at Globex")

    asyncio.run(main())
    assert current(mem) == ["Alice works at Globex"]


def test_an_edit_is_made_again_on_a_record_rewritten_in_place_meanwhile(
    make_store: StoreFactory,
) -> None:
    """``edits.rewrite`` (notes, core blocks, profiles) superseded whatever version was
    current: a rewrite in place made while the edit was worked out was lost."""
    mem = make_store("rewrite", WordHashEmbedder())
    rec = mem.add("line one")
    calls: list[str] = []

    def append(current: MemoryRecord) -> tuple[str, None]:
        calls.append(current.text)
        if len(calls) == 1:  # another writer, in place, while this one works
            mem.update(rec.id, text="line one\nline two")
        return current.text + "\nline three", None

    new = rewrite(mem, rec, append)
    assert new.text == "line one\nline two\nline three"
    assert calls == ["line one", "line one\nline two"]


def test_a_record_at_the_last_time_still_takes_updates(make_store: StoreFactory) -> None:
    """A version past the last time a record may hold is none: an update of a record
    imported with the last one keeps it, where it was refused about an ``updated_at``
    nobody gave, and the store's export imports again."""
    mem = make_store("last-time", WordHashEmbedder())
    last = math.nextafter(times.END_TIME, 0.0)
    line = {"id": "x", "text": "Alice works at Acme", "updated_at": last, **SCOPE}
    path = make_store.tmp_path / "in.jsonl"
    path.write_text(json.dumps(line) + "\n")
    mem.import_jsonl(path)
    assert mem.update("x", text="Alice works at Globex").updated_at == last
    superseding = mem.supersede("x", "Alice works at Initech")
    assert mem.get("x").updated_at == last
    mem.export_jsonl(make_store.tmp_path / "out.jsonl")
    other = make_store("last-time-again", WordHashEmbedder())
    assert other.import_jsonl(make_store.tmp_path / "out.jsonl") >= 2
    assert other.get(superseding.id).text == "Alice works at Initech"
