"""A day's log is written once per room, on both backends: two writers (two agents on one
store, two stores on one PostgreSQL schema) taking the room's first turn of the next day
at once store one log, the second taking the day as logged; a record planted under the
log's computable id does not stop it; and bad arguments to the daily functions are
memlane errors that store nothing."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from conftest import StoreFactory
from memlane import AgentMemory, InvalidArgumentError, Memory
from memlane.agent import (
    DAILY,
    DailyLog,
    SessionScope,
)
from memlane.agent.daily import MAX_LOOKBACK, _log_id, append_daily, export_daily
from memlane.scoping import exact_scope
from upkeep_scripts import DAILY_ONLY, DAY, START

SCOPES = SessionScope(agent_id="bot")
OFF = DAILY_ONLY
SUMMARY = "We talked about the weather."


class Model:
    """Answers a day's summary once ``parties`` callers are all asking for one: every
    writer has checked which days are logged before any stores its log."""

    def __init__(self, parties: int) -> None:
        self.asked = threading.Barrier(parties, timeout=60)

    def complete(self, messages: list[dict[str, Any]], *args: Any, **kwargs: Any) -> str:
        self.asked.wait()
        return SUMMARY


def agent(mem: Memory, model: Any, clock: list[float], **settings: Any) -> AgentMemory:
    return AgentMemory(mem, SCOPES, model, clock=lambda: clock[0], **{**OFF, **settings})


def second_store(make_store: StoreFactory, mem: Memory, embedder: Any) -> Memory:
    """Another writer's store: on PostgreSQL another object on the schema (another
    process's engine); an embedded store has one per process, shared by its agents."""
    if make_store.backend != "postgres":
        return mem
    return make_store("d", embedder, cache_dir=make_store.tmp_path / "cache-other")


def test_two_writers_at_the_first_turn_of_a_day_store_one_log(
    make_store: StoreFactory, word_embedder
) -> None:
    clock = [START]
    with make_store("d", word_embedder) as mem:
        other = second_store(make_store, mem, word_embedder)
        model = Model(2)
        agents = [agent(mem, model, clock), agent(other, model, clock)]
        event = SCOPES.resolve("telegram", 42, 7)
        agents[0].after(event, [{"role": "user", "content": "is it raining?"}], "yes")
        clock[0] = START + DAY
        reports: list[Any] = []

        def turn(am: AgentMemory, text: str) -> None:
            reports.append(am.after(event, [{"role": "user", "content": text}], "ok"))

        threads = [
            threading.Thread(target=turn, args=(am, text))
            for am, text in zip(agents, ("morning", "hello"), strict=True)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert [r.failures for r in reports] == [[], []]
        assert sorted(len(r.daily_logs) for r in reports) == [0, 1]
        mem._sync.follow()  # what the other store wrote (PostgreSQL)
        logs = mem.list(DAILY, type="daily_log", **event.history)
        assert [(r.metadata["date"], r.text) for r in logs] == [("2026-11-20", SUMMARY)]
        for am in agents:
            am.close()
        if other is not mem:
            other.close()


@pytest.mark.parametrize(
    "where",
    [
        {"user_id": "mallory", "type": "daily_log"},  # another scope's
        {"type": "daily_entry"},  # the room's own, but an entry, not the log
    ],
    ids=["scope", "type"],
)
def test_a_record_planted_under_the_logs_id_does_not_stop_the_log(
    make_store: StoreFactory, word_embedder, where: dict[str, Any]
) -> None:
    clock = [START]
    with make_store("d", word_embedder) as mem:
        event = SCOPES.resolve("telegram", 42, 7)
        scope = exact_scope(mem, event.history)[0]
        rid = _log_id(scope, "2026-11-20")
        meta = {"date": "2026-11-20", "category": "daily log"}
        mem.add("planted", id=rid, table=DAILY, metadata=meta, **{**scope, **where})
        am = agent(mem, None, clock)
        am.after(event, [{"role": "user", "content": "is it raining?"}], "yes")
        clock[0] = START + DAY
        report = am.after(event, [{"role": "user", "content": "morning"}], "ok")
        assert report.failures == []
        [log] = report.daily_logs
        assert log.id != rid and log.metadata["method"] == "extract"
        assert mem.get(rid).text == "planted"
        # The day is logged: a restart does not log it again.
        again = agent(mem, None, clock)
        report = again.after(event, [{"role": "user", "content": "again"}], "ok")
        assert report.daily_logs == [] and report.failures == []
        am.close()
        again.close()


def test_bad_arguments_are_memlane_errors_that_store_nothing(word_embedder, tmp_path: Path) -> None:
    with Memory(None, word_embedder) as mem:
        event = SCOPES.resolve("telegram", 42, 7)
        with pytest.raises(InvalidArgumentError, match="tz must be a tzinfo"):
            append_daily(mem, "x", event, tz="UTC")  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError, match="dir must be a str or a path"):
            export_daily(mem, 5, event)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError, match="tz must be a tzinfo"):
            export_daily(mem, tmp_path / "a", event, tz=0)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError, match="EventScope"):
            export_daily(mem, tmp_path / "b", {"room_id": "r"})  # type: ignore[arg-type]
        assert list(tmp_path.iterdir()) == [] and mem.count() == 0
        with pytest.raises(InvalidArgumentError, match=r"DailyLog\.lookback must be at most 3650"):
            DailyLog(lookback=MAX_LOOKBACK + 1)
        with pytest.raises(InvalidArgumentError, match=r"DailyLog\.lookback"):
            DailyLog(lookback=10**6)


def test_the_longest_lookback_works(word_embedder) -> None:
    clock = [START]
    with Memory(None, word_embedder) as mem:
        am = agent(mem, None, clock, daily=DailyLog(lookback=MAX_LOOKBACK))
        event = SCOPES.resolve("telegram", 42, 7)
        am.after(event, [{"role": "user", "content": "hello"}], "hi")
        clock[0] = START + 2 * DAY
        report = am.after(event, [{"role": "user", "content": "morning"}], "ok")
        assert report.failures == []
        assert [r.metadata["date"] for r in report.daily_logs] == ["2026-11-20"]
        am.close()
