"""What an attack on the agent's per-scope state found: a core block over a limit
lowered since (every turn failed), records of the scope shaped like a note, a block or a
profile with metadata of their writer's own (raw exceptions on every read), time zones
that give no offset, a daily-log export to "", wrong-typed arguments, and OrcBot's
``memory/`` folder beside the notes files. Each test fails on the code before its fix."""

from __future__ import annotations

import time
from datetime import timedelta, tzinfo
from pathlib import Path
from typing import Any

import pytest

from conftest import WordHashEmbedder
from memlane import AgentMemory, InvalidArgumentError, Memory
from memlane.agent import CoreMemoryLimitError, DailyLog, SessionScope, Shared
from memlane.agent.daily import append_daily, export_daily
from memlane.agent.notes_import import import_notes
from memlane.agent.profiles import record_contact
from memlane.notes import Notebook


@pytest.fixture
def mem(tmp_path: Path) -> Any:
    with Memory(tmp_path / "store", WordHashEmbedder()) as m:
        yield m


def test_a_block_over_a_limit_lowered_since_may_shrink_and_not_grow(mem: Memory) -> None:
    big = AgentMemory(
        mem, SessionScope(agent_id="helper"), core_memory={"human": Shared(2000, by=("user_id",))}
    )
    event = big.event("telegram", 42)
    assert big.memory_tools(event).handle_tool_call(
        "core_memory_append", {"label": "human", "content": "x" * 900}
    )["ok"]
    big.close()
    small = AgentMemory(
        mem, SessionScope(agent_id="planner"), core_memory={"human": Shared(500, by=("user_id",))}
    )
    event = small.event("telegram", 42)
    small.before(event, [{"role": "user", "content": "hi"}])  # raised before
    core = small.core(event)
    assert core is not None
    with pytest.raises(CoreMemoryLimitError):
        core.append("human", "more")
    assert core.set("human", "x" * 600).value == "x" * 600  # shorter, still over
    with pytest.raises(CoreMemoryLimitError):
        core.set("human", "x" * 601)
    assert core.set("human", "short").value == "short"
    small.close()


def test_records_of_the_scope_shaped_otherwise_are_not_the_agents(mem: Memory) -> None:
    am = AgentMemory(mem, SessionScope(agent_id="a"), core_memory=True)
    event = am.event("telegram", 1, chat_id=5)
    mem.add("planted", table="notes", type="journal", metadata={"position": "first"}, agent_id="a")
    book = Notebook(mem, {"agent_id": "a"})
    book.append("JOURNAL.md", "hello")
    mem.add(
        "persona: hi",
        table="core",
        type="core_block",
        metadata={"label": "persona", "limit": "lots"},
        **event.fields,
    )
    mem.add(
        "Contact telegram:1",
        table="contacts",
        type="profile",
        metadata={"contact": "telegram:1", "platform_ids": ["x"], "first_seen": "?"},
        **event.fields,
    )
    am.before(event, [{"role": "user", "content": "hi"}])
    report = am.after(event, [{"role": "user", "content": "hi"}], "yo")
    assert am.drain(60)
    failures = report.failures + [
        f for d in am.after(event, [], "ok").upkeep for f in d.report.failures
    ]
    assert failures == []
    profile = am.contact(event)
    assert profile is not None and profile.message_count == 1
    am.close()


class _NoOffset(tzinfo):
    def utcoffset(self, dt: Any) -> timedelta:
        return timedelta(hours=30)

    def dst(self, dt: Any) -> None:
        return None


@pytest.mark.parametrize("tz", [tzinfo(), _NoOffset()], ids=["abstract", "past a day"])
def test_a_time_zone_without_a_usable_offset_is_refused(
    mem: Memory, tmp_path: Path, tz: tzinfo
) -> None:
    event = SessionScope(agent_id="a").resolve("telegram", 1, 5)
    for call in (
        lambda: append_daily(mem, "did x", event, tz=tz),
        lambda: export_daily(mem, tmp_path / "out", event, tz=tz),
        lambda: DailyLog(tz=tz),
    ):
        with pytest.raises(InvalidArgumentError, match="no usable UTC offset"):
            call()
    assert mem.count(None) == 0


def test_export_daily_to_an_empty_path_is_refused(
    mem: Memory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    event = SessionScope(agent_id="a").resolve("telegram", 1, 5)
    append_daily(mem, "entry", event)
    with pytest.raises(InvalidArgumentError, match="dir must be a path"):
        export_daily(mem, "", event)
    assert not (tmp_path / "memory").exists()


def test_wrong_typed_arguments_are_named(mem: Memory, tmp_path: Path) -> None:
    scopes = SessionScope(agent_id="a")
    am = AgentMemory(mem, scopes)
    event = am.event("telegram", 1, chat_id=5)
    calls = [
        lambda: record_contact(mem, scopes, {"user_id": "u"}, time.time()),  # type: ignore[arg-type]
        lambda: record_contact(mem, scopes, event, time.time(), settings=5),  # type: ignore[arg-type]
        lambda: record_contact(mem, None, event, time.time()),  # type: ignore[arg-type]
        lambda: import_notes(am, tmp_path, {"agent_id": "a"}),  # type: ignore[arg-type]
        lambda: import_notes(mem, tmp_path, event),  # type: ignore[arg-type]
    ]
    for call in calls:
        with pytest.raises(InvalidArgumentError, match="must be"):
            call()
    am.close()


def test_notes_import_leaves_the_daily_logs_folder_beside_them(mem: Memory, tmp_path: Path) -> None:
    am = AgentMemory(mem, SessionScope(agent_id="a"))
    event = am.event("telegram", 1, chat_id=5)
    Notebook(mem, event.fields).append("USER.md", "Alice is vegan.")
    append_daily(mem, "Booked the trip.", event)
    folder = tmp_path / "data"
    mem.export_notes(folder, **event.fields)
    export_daily(mem, folder, event)  # OrcBot's layout: memory/ beside the notes files
    assert (folder / "memory").is_dir()
    assert mem.import_notes(folder, **event.fields)["USER.md"] == 0  # as stored
    am.close()
