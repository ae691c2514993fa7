"""Facts the agent learns outside a turn go the one path of every fact it learns: the MCP
``remember`` tool served for an AgentMemory, and notes imported as memories, are checked
by the upkeep model against what the scope knows, which a contradicting fact supersedes;
without an upkeep model, add(unique=True)'s rules decide. Both backends, the scripted
chat model behind the loopback server."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from chat_server import ScriptedChatServer
from memlane import Memory
from memlane.agent import OpenAIChat
from memlane.agent.facts import CHECK
from memlane.agent.mcp_server import server_tools
from memlane.agent.notes_import import import_notes
from memlane.errors import InvalidArgumentError
from upkeep_scripts import agent

LIVES = re.compile(r"Alice lives in (\w+)")


def careful(body: dict[str, Any]) -> str:
    """A careful model's check: a new "Alice lives in X" updates the stored one that
    names another city, and is known when it names the same."""
    prompt = body["messages"][-1]["content"]
    assert "New facts:" in prompt, prompt
    stored_part, _, new_part = prompt.partition("New facts:")
    stored = {}
    for line in stored_part.splitlines():
        number, _, rest = line.partition(". ")
        if number.isdigit() and (m := LIVES.search(rest)):
            stored[m.group(1)] = int(number)
    decisions = []
    for line in new_part.strip().splitlines():
        label, _, rest = line.partition(". ")
        city = m.group(1) if (m := LIVES.search(rest)) else None
        if city is None or not stored:
            decisions.append({"fact": label, "decision": "add", "reason": "new"})
        elif city in stored:
            decisions.append({"fact": label, "decision": "none", "reason": "known"})
        else:
            (number,) = stored.values()
            decisions.append(
                {"fact": label, "decision": "update", "memory": number, "reason": "she moved"}
            )
    return json.dumps({"decisions": decisions})


def _superseded(mem: Memory, fields: dict[str, str], since: float) -> None:
    """Berlin gave way to Oslo: one current fact, the old one answers as of before."""
    current = [r for r in mem.list("memories", **fields) if r.valid_to is None]
    assert [r.text for r in current] == ["Alice lives in Oslo"]
    assert mem.count("memories", filters={CHECK: "pending"}) == 0
    (old,) = mem.search("where does Alice live", 1, table="memories", as_of=since, **fields)
    assert old.record.text == "Alice lives in Berlin"
    steps = [(v.event, v.by) for v in mem.history(current[0].id)]
    assert steps[-1] == ("supersede", "fact-check")


@pytest.mark.parametrize("upkeep", ["background", "inline"])
def test_mcp_remember_is_checked_and_supersedes(
    mem: Memory, server: ScriptedChatServer, llm: OpenAIChat, upkeep: str
) -> None:
    am = agent(mem, llm, upkeep=upkeep)
    alice = am.event("mcp", "alice")
    mem.add("Alice lives in Berlin", created_at=time.time() - 3600, **alice.fields)
    since = time.time() - 60
    server.push(careful)
    tools = server_tools(am, alice)
    out = tools.handle_tool_call("remember", {"content": "Alice lives in Oslo"})
    assert out["ok"] and out["stored"], out
    assert am.drain(timeout=60)
    _superseded(mem, alice.fields, since)
    (check,) = server.requests
    assert "Alice lives in Berlin" in check["messages"][-1]["content"]
    am.close()


def test_mcp_remember_without_a_model_keeps_the_rules(mem: Memory) -> None:
    am = agent(mem, None)
    alice = am.event("mcp", "alice")
    tools = server_tools(am, alice, notes=False)
    assert "notes_append" not in tools.schemas()
    first = tools.handle_tool_call("remember", {"content": "Alice lives in Berlin"})
    again = tools.handle_tool_call("remember", {"content": "Alice lives in Berlin"})
    assert again["duplicate"] == "exact" and again["duplicate_of"] == first["id"]
    assert mem.count("memories", filters={CHECK: "pending"}) == 0
    assert am.drain(timeout=60)
    with pytest.raises(InvalidArgumentError, match="EventScope"):
        server_tools(am, alice.fields)
    am.close()


def test_mcp_server_over_an_agent_memory(
    mem: Memory, server: ScriptedChatServer, llm: OpenAIChat
) -> None:
    anyio = pytest.importorskip("anyio")
    mcp = pytest.importorskip("mcp")
    from memlane.agent.mcp_server import build_server

    am = agent(mem, llm)
    alice = am.event("mcp", "alice")
    mem.add("Alice lives in Berlin", created_at=time.time() - 3600, **alice.fields)
    since = time.time() - 60
    server.push(careful)

    async def call() -> Any:
        async with mcp.Client(build_server(am, alice)) as client:
            return await client.call_tool("remember", {"content": "Alice lives in Oslo"})

    result = anyio.run(call)
    assert not result.is_error and json.loads(result.content[0].text)["ok"]
    assert am.drain(timeout=60)
    _superseded(mem, alice.fields, since)
    am.close()


def _notes(folder: Path, user: str, journal: str = "") -> Path:
    folder.mkdir(exist_ok=True)
    (folder / "USER.md").write_text(user, encoding="utf-8")
    if journal:
        (folder / "JOURNAL.md").write_text(journal, encoding="utf-8")
    return folder


def test_an_imported_note_is_checked_and_supersedes(
    mem: Memory, server: ScriptedChatServer, llm: OpenAIChat, tmp_path: Path
) -> None:
    am = agent(mem, llm)
    alice = am.event("telegram", 42)
    mem.add("Alice lives in Berlin", created_at=time.time() - 3600, **alice.fields)
    since = time.time() - 60
    server.push(careful)
    folder = _notes(
        tmp_path / "notes",
        "## 2026-04-01\nAlice lives in Oslo\n",
        journal="## 2026-04-01\nI booked the trip.\n",
    )
    done = import_notes(am, folder, alice)
    assert done.files == {"JOURNAL.md": 1, "USER.md": 1} and done.failures == []
    assert [r["ok"] for r in done.remembered] == [True]
    assert am.drain(timeout=60)
    _superseded(mem, alice.fields, since)
    # The notes stay as the files say; the journal is no fact.
    notes = {r.text for r in mem.list("notes", **alice.fields)}
    assert notes == {"Alice lives in Oslo", "I booked the trip."}
    # Importing the same files again learns nothing new: no model call.
    again = import_notes(am, folder, alice)
    assert again.files == {"JOURNAL.md": 0, "USER.md": 0} and again.remembered == []
    assert am.drain(timeout=60)
    assert len(server.requests) == 1
    am.close()


def test_an_imported_note_without_a_model_keeps_the_rules(mem: Memory, tmp_path: Path) -> None:
    am = agent(mem, None)
    alice = am.event("telegram", 42)
    mem.add("Alice lives in Berlin", **alice.fields)
    folder = _notes(tmp_path / "notes", "## 2026-04-01\nAlice lives in Berlin\n")
    done = import_notes(am, folder, alice)
    (result,) = done.remembered
    assert result["ok"] and result["duplicate"] == "exact"
    assert mem.count("memories", **alice.fields) == 1
    assert mem.count("memories", filters={CHECK: "pending"}) == 0
    am.close()
