"""A core block, a contact's profile and a day's log whose derived id another scope has
planted take the next of its spare ids (``<id>-1`` ... ``<id>-8``) in order, on both
backends: two writers making one at once (both past their refused add under the derived
id before either goes on, two store objects on PostgreSQL) still make one, the store's
refusal of an id it holds deciding between them, and lose nothing; with every spare id
planted the record is refused, naming the clash, and nothing is stored; records kept
under a random id by the code before are still found and kept."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from conftest import StoreFactory
from memlane import AgentMemory, CoreMemory, InvalidArgumentError, Memory
from memlane.agent import (
    CONTACTS,
    CORE,
    DAILY,
    SessionScope,
    contact_profile,
    record_contact,
)
from memlane.agent.daily import _add_log, _log_id
from memlane.agent.profiles import _place
from memlane.derived_ids import SPARE_IDS
from memlane.scoping import exact_scope
from upkeep_scripts import DAILY_ONLY, START

SCOPES = SessionScope(agent_id="bot")
EVENT = SCOPES.resolve("telegram", 42, 7, name="Alice")
MALLORY = {"agent_id": "mallory"}
DAY = "2026-11-20"
OFF = DAILY_ONLY


def base_id(mem: Memory, kind: str) -> str:
    if kind == "core":
        return CoreMemory(mem, EVENT.fields)._id("persona")
    if kind == "profile":
        return _place(mem, EVENT).id
    return _log_id(exact_scope(mem, EVENT.history)[0], DAY)


TABLES = {"core": CORE, "profile": CONTACTS, "daily": DAILY}


def write(kind: str, mem: Memory, i: int) -> Any:
    """Writer ``i``'s record of ``kind``: its block, its count of the contact, its log."""
    if kind == "core":
        return CoreMemory(mem, EVENT.fields).define("persona", f"persona {i}")
    if kind == "profile":
        event = SCOPES.resolve("telegram", 42, 7, name=f"Name{i}")
        return record_contact(mem, SCOPES, event, 1e9 + i)
    meta = {"date": DAY, "messages": 1, "method": "extract", "category": "daily log"}
    return _add_log(mem, f"log {i}", meta, START, exact_scope(mem, EVENT.history)[0])


def current(mem: Memory, kind: str) -> list[Any]:
    """The scope's current records of ``kind``."""
    table = TABLES[kind]
    return mem.list(table, limit=100, filters={"valid_to": None}, **EVENT.history) + [
        r
        for r in mem.list(table, limit=100, filters={"valid_to": None}, **EVENT.fields)
        if r.room_id is None
    ]


def other_writer(make_store: StoreFactory, mem: Memory, embedder: Any) -> Memory:
    """Another writer: on PostgreSQL another store object (another process's engine)."""
    if make_store.backend != "postgres":
        return mem
    return make_store("s", embedder, cache_dir=make_store.tmp_path / "cache-other")


def hold_fallbacks(monkeypatch: pytest.MonkeyPatch, table: str, base: str) -> None:
    """Each writer's first add to ``table`` under another id than ``base`` waits for the
    other's: both have been refused ``base`` before either stores elsewhere."""
    both = threading.Barrier(2, timeout=30)
    waited = threading.local()
    real: Callable[..., Any] = Memory.add

    def add(self: Memory, text: Any, *args: Any, **kwargs: Any) -> Any:
        first = not getattr(waited, "done", False)
        if first and kwargs.get("table") == table and kwargs.get("id") != base:
            waited.done = True
            both.wait()
        return real(self, text, *args, **kwargs)

    monkeypatch.setattr(Memory, "add", add)


@pytest.mark.parametrize("kind", ["core", "profile", "daily"])
def test_two_writers_under_a_planted_id_make_one_record(
    make_store: StoreFactory, word_embedder, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    with make_store("s", word_embedder) as mem:
        stores = [mem, other_writer(make_store, mem, word_embedder)]
        base = base_id(mem, kind)
        mem.add("planted", table="x", id=base, **MALLORY)
        hold_fallbacks(monkeypatch, TABLES[kind], base)
        results: list[Any] = [None, None]
        errors: list[BaseException] = []

        def run(i: int) -> None:
            try:
                results[i] = write(kind, stores[i], i)
            except BaseException as e:  # reported below, in the test's thread
                errors.append(e)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        monkeypatch.undo()
        assert errors == []
        mem._sync.follow()  # what the other store wrote (PostgreSQL)
        [rec] = current(mem, kind)
        assert rec.id == f"{base}-1"
        if kind == "core":  # the first definition is kept, the second finds it
            assert {b.id for b in results} == {rec.id}
            assert rec.text in {"persona: persona 0", "persona: persona 1"}
        elif kind == "profile":  # neither count nor name is lost
            assert rec.metadata["message_count"] == 2
            assert set(rec.metadata["aliases"]) == {"Name0", "Name1"}
            profile = contact_profile(mem, EVENT)
            assert profile is not None and profile.id == rec.id
        else:  # one writer stored the log, the other took the day as logged
            assert sorted(r is None for r in results) == [False, True]
        assert mem.get(base).text == "planted" and len(mem.history(base)) == 1
        if stores[1] is not mem:
            stores[1].close()


def plant_all(mem: Memory, base: str) -> list[str]:
    ids = [base] + [f"{base}-{n}" for n in range(1, SPARE_IDS + 1)]
    for rid in ids:
        mem.add("planted", table="x", id=rid, **MALLORY)
    return ids


@pytest.mark.parametrize("kind", ["core", "profile"])
def test_with_every_spare_id_planted_the_record_is_refused(
    make_store: StoreFactory, word_embedder, kind: str
) -> None:
    with make_store("s", word_embedder) as mem:
        base = base_id(mem, kind)
        ids = plant_all(mem, base)
        with pytest.raises(InvalidArgumentError, match=f"cannot be stored: its ids {base} to"):
            write(kind, mem, 0)
        assert current(mem, kind) == []
        assert [mem.get(rid).text for rid in ids] == ["planted"] * len(ids)


def test_with_every_spare_id_of_a_log_planted_the_turn_reports_it(
    make_store: StoreFactory, word_embedder
) -> None:
    clock = [START]
    with make_store("s", word_embedder) as mem:
        am = AgentMemory(mem, SCOPES, None, clock=lambda: clock[0], **OFF)
        am.after(EVENT, [{"role": "user", "content": "hello"}], "hi")
        plant_all(mem, base_id(mem, "daily"))
        clock[0] = START + 86400
        report = am.after(EVENT, [{"role": "user", "content": "morning"}], "ok")
        assert report.daily_logs == []
        [failure] = report.failures
        assert failure.trigger == "daily" and "the daily log of 2026-11-20" in failure.error
        assert current(mem, "daily") == []
        am.close()


@pytest.mark.parametrize("kind", ["core", "profile"])
def test_a_record_under_a_random_id_from_before_is_kept(
    make_store: StoreFactory, word_embedder, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    with make_store("s", word_embedder) as mem:
        base = base_id(mem, kind)
        mem.add("planted", table="x", id=base, **MALLORY)
        # What the code before did with its derived id taken: a random id.
        real: Callable[..., Any] = Memory.add
        monkeypatch.setattr(
            Memory, "add", lambda self, *a, **kw: real(self, *a, **kw | {"id": None})
        )
        old = write(kind, mem, 0)
        monkeypatch.undo()
        assert not old.id.startswith(base)
        again = write(kind, mem, 1)
        assert again.id == old.id
        [rec] = current(mem, kind)
        assert rec.id == old.id
        if kind == "profile":
            assert rec.metadata["message_count"] == 2
