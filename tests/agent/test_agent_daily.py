"""Daily logs on both backends, with a scripted LLM behind the loopback chat server and a
fake clock: a day's turns become one dated log at the first turn of a later day, a failing
LLM stores nothing and is tried again next turn, missing days are caught up, no LLM gives
an extract cut to its limit, and the newest logs are in the context block."""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from conftest import StoreFactory
from memlane import AgentMemory, InvalidArgumentError, Memory
from memlane.agent import (
    DAILY,
    MESSAGES,
    DailyLog,
    Reflection,
    SessionScope,
    build_context,
)
from memlane.agent.daily import append_daily, export_daily
from upkeep_scripts import DAILY_ONLY, DAY, START

SCOPES = SessionScope("per-peer", {"telegram:42": "alice"})
OFF = DAILY_ONLY


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return self.now


def agent(mem: Memory, llm: Any, clock: Clock, **settings: Any) -> AgentMemory:
    return AgentMemory(
        mem, SCOPES, llm, clock=clock, context={"min_score": None}, **{**OFF, **settings}
    )


def turn(am: AgentMemory, event, text: str, reply: str = "ok"):
    msgs = am.before(event, [{"role": "user", "content": text}])
    return msgs, am.after(event, msgs, reply)


def logs(mem: Memory, event) -> list[Any]:
    return mem.list(DAILY, order="asc", **event.history)


def test_a_day_is_logged_at_the_first_turn_of_the_next(
    make_store: StoreFactory, word_embedder, server, llm
) -> None:
    clock = Clock()
    with make_store("d", word_embedder) as mem:
        am = agent(mem, llm, clock)
        alice = am.event("telegram", 42, 7)
        turn(am, alice, "I adopted a cat named Miso", "Congratulations!")
        clock.now += 3 * 3600
        _, report = turn(am, alice, "Miso hates the vacuum", "Poor Miso.")
        assert report.daily_logs == [] and server.requests == []  # the day is not over
        clock.now = START + DAY  # the next morning
        server.push("Alice adopted a cat, Miso, who hates the vacuum.")
        _, report = turn(am, alice, "good morning")
        assert report.ok
        [log] = report.daily_logs
        assert log.text == "Alice adopted a cat, Miso, who hates the vacuum."
        assert log.metadata == {
            "date": "2026-11-20",
            "messages": 4,
            "method": "llm",
            "category": "daily log",
        }
        assert log.created_at == datetime(2026, 11, 20, tzinfo=UTC).timestamp()
        assert log.scope["room_id"] == "telegram:7" and log.table == DAILY
        # The model saw that day's turns only, oldest first, with its budget.
        [request] = server.requests
        assert request["max_tokens"] == 500
        shown = request["messages"][1]["content"]
        assert "2026-11-20" in shown and "in telegram:7" in shown
        assert shown.index("adopted a cat") < shown.index("hates the vacuum")
        assert "[09:00] user: I adopted a cat named Miso" in shown
        assert "[12:00] assistant: Poor Miso." in shown
        assert "good morning" not in shown
        # Later turns that day ask nothing; the log is not written twice.
        clock.now += 3600
        _, report = turn(am, alice, "what about Miso?")
        assert report.daily_logs == [] and len(server.requests) == 1
        assert len(logs(mem, alice)) == 1
        # A new AgentMemory (a restart) finds the day logged in the store.
        again = agent(mem, llm, clock)
        _, report = turn(again, alice, "after a restart")
        assert report.daily_logs == [] and len(server.requests) == 1


def test_a_failing_llm_stores_nothing_and_retries_next_turn(
    make_store: StoreFactory, word_embedder, server, llm
) -> None:
    clock = Clock()
    with make_store("d", word_embedder) as mem:
        am = agent(mem, llm, clock)
        alice = am.event("telegram", 42, 7)
        turn(am, alice, "remember the dentist on Tuesday")
        clock.now += DAY
        # A NUL or a lone surrogate the store would refuse: the day was taken as logged
        # by another scope, and never logged.
        server.push(
            (500, "boom"),
            "x" * 1501,
            "   ",
            "Alice has a dentist \x00 appointment.",
            "Alice has a \ud800 dentist appointment.",
            "Alice has a dentist appointment Tuesday.",
        )
        errors = ["HTTP 500", "1501 characters", "is empty", "NUL", "lone surrogate"]
        for i, expected in enumerate(errors):
            _, report = turn(am, alice, f"hello {i}")
            assert [f.trigger for f in report.failures] == ["daily"]
            assert expected in report.failures[0].error
            assert report.daily_logs == [] and logs(mem, alice) == []
            assert report.stored  # the turn itself is stored
        _, report = turn(am, alice, "hello again")
        assert report.ok and [r.metadata["date"] for r in report.daily_logs] == ["2026-11-20"]
        assert len(server.requests) == 6
        # Every turn is stored; the log covers yesterday's only.
        assert mem.count(MESSAGES, **alice.history) == 2 + 5 * 2 + 2
        assert report.daily_logs[0].metadata["messages"] == 2


def test_missing_days_are_caught_up_within_the_lookback(
    make_store: StoreFactory, word_embedder, server, llm
) -> None:
    clock = Clock()
    with make_store("d", word_embedder) as mem:
        # Turns written while logs were off: the 20th, the 24th and the 26th.
        off = agent(mem, None, clock, daily=DailyLog(enabled=False))
        alice = off.event("telegram", 42, 7)
        for day in (0, 4, 6):
            clock.now = START + day * DAY
            turn(off, alice, f"news of day {day}")
        assert logs(mem, alice) == []
        am = agent(mem, llm, clock, daily=DailyLog(lookback=5))
        clock.now = START + 7 * DAY + 5  # the 27th: the lookback is the 22nd to the 26th

        def summary(body: dict[str, Any]) -> str:
            shown = body["messages"][1]["content"]
            return "log of " + re.findall(r"news of day \d", shown)[0]

        server.push(summary, summary)
        _, report = turn(am, alice, "a week later")
        assert report.ok
        got = [(r.metadata["date"], r.text) for r in report.daily_logs]
        assert got == [
            ("2026-11-24", "log of news of day 4"),
            ("2026-11-26", "log of news of day 6"),
        ]
        assert len(server.requests) == 2  # the 20th is past the lookback, the 25th was quiet
        assert [r.metadata["date"] for r in logs(mem, alice)] == ["2026-11-24", "2026-11-26"]


def test_without_an_llm_the_log_is_an_extract_cut_to_its_limit(
    make_store: StoreFactory, word_embedder
) -> None:
    clock = Clock()
    with make_store("d", word_embedder) as mem:
        am = agent(mem, None, clock, daily=DailyLog(max_chars=400))
        alice = am.event("telegram", 42, 7)
        for i in range(6):
            clock.now = START + 60 * i
            turn(am, alice, f"point {i}: " + "word " * 30, f"reply {i}")
        clock.now = START + DAY
        _, report = turn(am, alice, "next day")
        [log] = report.daily_logs
        assert log.metadata == {
            "date": "2026-11-20",
            "messages": 12,
            "method": "extract",
            "category": "daily log",
        }
        lines = log.text.split("\n")
        assert len(log.text) <= 400
        assert lines[0].startswith("[09:00] user: point 0: word word")
        assert lines[1] == "[09:00] assistant: reply 0"
        kept = len(lines) - 1
        assert 0 < kept < 12 and lines[-1] == f"(+{12 - kept} more messages)"
        # A short day fits whole, with no note.
        clock.now = START + DAY + 60
        turn(am, alice, "only this")
        clock.now = START + 2 * DAY
        _, report = turn(am, alice, "and the day after")
        [log] = report.daily_logs
        assert log.text == (
            "[09:00] user: next day\n[09:00] assistant: ok\n"
            "[09:01] user: only this\n[09:01] assistant: ok"
        )
        # extract=False: no log without an LLM; enabled=False: none at all.
        for cfg in (DailyLog(extract=False), DailyLog(enabled=False)):
            quiet = agent(mem, None, clock, daily=cfg)
            bob = quiet.event("telegram", 5, 9)
            turn(quiet, bob, "bob says hi")
            clock.now += DAY
            _, report = turn(quiet, bob, "bob again")
            assert report.daily_logs == [] and logs(mem, bob) == []


def test_the_newest_logs_are_in_the_context(
    make_store: StoreFactory, word_embedder, server, llm
) -> None:
    clock = Clock()
    with make_store("d", word_embedder) as mem:
        am = agent(mem, llm, clock)
        alice = am.event("telegram", 42, 7)
        bob = am.event("telegram", 5, 8)
        for day in range(5):
            clock.now = START + day * DAY
            if day:
                server.push(f"summary of day {day - 1}")
            turn(am, alice, f"what happened on day {day}")
        msgs, _ = turn(am, alice, "what did we talk about?")
        block = msgs[0]["content"]
        section = block[block.index("## Daily log") :].split("\n\n")[0].split("\n")
        # The newest 3, oldest first.
        assert section[1:] == [
            "[2026-11-21] summary of day 1",
            "[2026-11-22] summary of day 2",
            "[2026-11-23] summary of day 3",
        ]
        # Another room has its own logs (none yet).
        assert (
            "## Daily log" not in am.before(bob, [{"role": "user", "content": "hi"}])[0]["content"]
        )
        # days=1 shows one; days=0 none, though the logs stay.
        one = agent(mem, llm, clock, daily=DailyLog(days=1))
        assert one.context(alice, "x").sections["daily"] == ["[2026-11-23] summary of day 3"]
        none = agent(mem, llm, clock, daily=DailyLog(days=0))
        assert none.context(alice, "x").sections["daily"] == []
        assert len(logs(mem, alice)) == 4


def test_days_follow_the_configured_time_zone(
    make_store: StoreFactory, word_embedder, server, llm
) -> None:
    clock = Clock()
    tokyo = timezone(timedelta(hours=9))
    with make_store("d", word_embedder) as mem:
        am = agent(mem, llm, clock, daily=DailyLog(tz=tokyo))
        alice = am.event("telegram", 42, 7)
        clock.now = START + 12 * 3600  # 21:00 UTC on the 20th: 06:00 on the 21st in Tokyo
        turn(am, alice, "early in Tokyo")
        clock.now = START + 14 * 3600  # 23:00 UTC: still the 21st in Tokyo, no log
        _, report = turn(am, alice, "still the same day")
        assert report.daily_logs == [] and server.requests == []
        clock.now = START + DAY + 6 * 3600  # 15:00 UTC on the 21st: the 22nd in Tokyo
        server.push("Tokyo day log")
        _, report = turn(am, alice, "next Tokyo day")
        [log] = report.daily_logs
        assert log.metadata["date"] == "2026-11-21"
        assert log.created_at == datetime(2026, 11, 21, tzinfo=tokyo).timestamp()
        assert "[06:00] user: early in Tokyo" in server.requests[0]["messages"][1]["content"]


def test_async_turns_write_logs(make_store: StoreFactory, word_embedder, server, llm) -> None:
    clock = Clock()
    with make_store("d", word_embedder) as mem:
        am = agent(mem, llm, clock)
        alice = am.event("telegram", 42, 7)

        async def go(text: str) -> Any:
            msgs = await am.abefore(alice, [{"role": "user", "content": text}])
            return await am.aafter(alice, msgs, "ok")

        asyncio.run(go("async day one"))
        clock.now += DAY
        server.push("async log")
        report = asyncio.run(go("async day two"))
        assert [r.text for r in report.daily_logs] == ["async log"]


def test_bad_settings_are_refused(word_embedder) -> None:
    for bad in (
        {"days": -1},
        {"lookback": 0},
        {"max_chars": 299},
        {"max_messages": True},
        {"max_output_tokens": 0},
        {"tz": "UTC"},
    ):
        with pytest.raises(InvalidArgumentError, match="DailyLog"):
            DailyLog(**bad)
    with Memory(None, word_embedder) as mem:
        with pytest.raises(InvalidArgumentError, match="DailyLog"):
            AgentMemory(mem, daily=Reflection())  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError, match="unknown build_context"):
            AgentMemory(mem, context={"daily_limit": 2})
        assert mem.count() == 0


def test_entries_with_categories_and_the_days_as_markdown_files(
    make_store: StoreFactory, word_embedder, tmp_path
) -> None:
    # OrcBot's appendToDaily(content, category) and its memory/YYYY-MM-DD.md files.
    clock = Clock()
    with make_store("d", word_embedder) as mem:
        am = agent(mem, None, clock)
        alice = am.event("telegram", 42, 7)
        turn(am, alice, "book the train to Lisbon")
        append_daily(mem, "Booked the 9:10 train.", alice, category="task", created_at=START + 60)
        append_daily(mem, "Alice prefers window seats.", alice, created_at=START + 120)
        clock.now = START + DAY
        _, report = turn(am, alice, "thanks")
        # The entries do not count as the day's log: it is written.
        assert [r.type for r in report.daily_logs] == ["daily_log"]
        append_daily(mem, "Sent the tickets.", alice, category="done", created_at=START + DAY + 5)
        lines = build_context(mem, "anything new?", alice, 5000).sections["daily"]
        assert lines[-1] == "[2026-11-21] (done) Sent the tickets."
        assert "[2026-11-20] (task) Booked the 9:10 train." in lines
        files = export_daily(mem, tmp_path / "data", alice)
        assert [f.name for f in files] == ["2026-11-20.md", "2026-11-21.md"]
        assert files[0].parent == tmp_path / "data" / "memory"
        first = files[0].read_text(encoding="utf-8")
        assert first.startswith(
            "# Daily Memory Log - 2026-11-20\n\n## [2026-11-20T00:00:00+00:00] daily log\n\n"
        )
        assert "## [2026-11-20T09:01:00+00:00] task\n\nBooked the 9:10 train.\n\n---\n\n" in first
        assert "## [2026-11-20T09:02:00+00:00]\n\nAlice prefers window seats.\n\n---\n\n" in first
        assert files[1].read_text(encoding="utf-8").count("## [") == 1
        # Another room's days are not in this room's files.
        bob = am.event("telegram", 5, 9)
        append_daily(mem, "Bob's note.", bob, created_at=START)
        assert "Bob" not in export_daily(mem, tmp_path / "data", alice)[0].read_text()
        with pytest.raises(InvalidArgumentError, match="category"):
            append_daily(mem, "x", alice, category="")
        with pytest.raises(InvalidArgumentError, match="EventScope"):
            append_daily(mem, "x", {"room_id": "r"})  # type: ignore[arg-type]
