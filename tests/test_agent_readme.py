"""The README's agent section snippets run as written, against the scripted loopback chat
server in place of the local model server they name (the only text changed)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from chat_server import ScriptedChatServer
from memlane import Memory

README = Path(__file__).resolve().parents[1] / "README.md"
URL = "http://127.0.0.1:11434/v1"


def agent_snippets() -> list[str]:
    text = README.read_text(encoding="utf-8")
    start = text.index("## Agents: tools")
    end = text.index("\n## ", start + 1)
    return re.findall(r"```python\n(.*?)```", text[start:end], flags=re.S)


def run(snippet: str, server: ScriptedChatServer, scope: dict[str, Any]) -> dict[str, Any]:
    assert URL in snippet  # the one thing replaced
    code = snippet.replace(URL, server.base_url)
    exec(compile(code, "README.md (agents)", "exec"), scope)
    return scope


def test_the_section_has_its_snippets():
    snippets = agent_snippets()
    assert len(snippets) == 4
    assert "AgentMemory" in snippets[0] and "memory.openai(llm.chat)" in snippets[0]
    assert "core_memory_append" in snippets[2] and "import_notes" in snippets[3]


def test_three_line_version(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)

    def model(body: dict[str, Any]) -> str:
        system = body["messages"][0]["content"]
        assert "<memlane-memory" in system and "## Memory tools" in system
        assert {t["function"]["name"] for t in body["tools"]} >= {"remember", "recall"}
        assert body["messages"][-1] == {"role": "user", "content": "I'm vegan"}
        return "Noted: vegan."

    with ScriptedChatServer([model]) as server:
        scope = run(agent_snippets()[0], server, {})
    try:
        assert scope["result"].reply == "Noted: vegan."
        assert scope["result"].report.ok
        assert capsys.readouterr().out == "Noted: vegan. []\n"
        event = scope["memory"].event("telegram", 42, chat_id=7)
        history = scope["memory"].memory.list("messages", order="asc", **event.history)
        assert [r.text for r in history] == ["I'm vegan", "Noted: vegan."]
    finally:
        scope["memory"].memory.close()
        scope["llm"].close()
    assert (tmp_path / "agent-memory").is_dir()


def test_the_parts(word_embedder, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    mem = Memory(None, word_embedder)
    mem.add("Alice's diet is vegetarian", user_id="alice", session_id="peer:alice")
    conversation = [{"role": "user", "content": "I eat fish now, so I'm pescatarian."}]

    def reflection(body: dict[str, Any]) -> str:
        listed = body["messages"][1]["content"]
        assert "1. Alice's diet is vegetarian" in listed
        update = {"op": "update", "memory": 1, "content": "Alice is pescatarian"}
        return json.dumps({"operations": [update]})

    with ScriptedChatServer([reflection]) as server:
        # consolidate() finds no short-term entries: it asks nothing.
        run(agent_snippets()[1], server, {"mem": mem, "conversation": conversation})
    try:
        assert "Alice is pescatarian" in [r.text for r in mem.list("memories", user_id="alice")]
        assert len(server.requests) == 1
    finally:
        mem.close()


@pytest.mark.parametrize("heading", ["### Automatic memory around any agent loop"])
def test_the_triggers_are_listed_with_their_defaults(heading):
    text = README.read_text(encoding="utf-8")
    section = text[text.index(heading) : text.index("### The parts")]
    for name, default in [
        ("reflection", "every 10 turns"),
        ("consolidation", "30 short-term entries"),
        ("flush reminder", "25 new entries"),
        ("step compaction", "past 10 steps"),
        ("entry length", "1,500 characters"),
        ("memories per scope", "10,000"),
    ]:
        (row,) = [line for line in section.splitlines() if line.startswith(f"| {name} |")]
        assert default in row


def test_core_memory(word_embedder, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    mem = Memory(tmp_path / "store", word_embedder)
    try:
        scope = {"mem": mem}
        exec(compile(agent_snippets()[2], "README.md (core memory)", "exec"), scope)
        assert scope["appended"] == {"ok": True, "label": "human", "chars": 6, "limit": 2000}
        refused = scope["too_long"]
        assert refused["error"]["type"] == "limit_exceeded"
        assert (refused["limit"], refused["size"], refused["over"]) == (500, 33, 34)
        system = scope["messages"][0]["content"]
        assert system.index("I am a patient cooking assistant.") < system.index("Vegan.")
        assert scope["human"] == scope["seen"] == "Vegan."  # one block for both agents
    finally:
        mem.close()


def test_long_term_notes(word_embedder, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "orcbot-notes"
    folder.mkdir()
    (folder / "JOURNAL.md").write_text(
        "# Journal\n\n## 2026-05-01\nAlice asked about a trip to Lisbon.\n\n"
        "## 2026-05-02\nBooked the trip for Friday.\n",
        encoding="utf-8",
    )
    (folder / "USER.md").write_text("## 2026-04-01\nAlice is vegan.\n", encoding="utf-8")
    mem = Memory(tmp_path / "store", word_embedder)
    try:
        scope: dict[str, Any] = {"mem": mem}
        exec(compile(agent_snippets()[3], "README.md (notes)", "exec"), scope)
        assert scope["notes"] == [
            "### JOURNAL.md",
            "[2026-05-01] Alice asked about a trip to Lisbon.",
            "[2026-05-02] Booked the trip for Friday.",
            "### USER.md",
            "[2026-04-01] Alice is vegan.",
        ]
        # The appended entry, and "Lisbon" rewritten in two entries (old wording kept).
        assert mem.count("notes", filters={"valid_to": None}) == 4
        journal = (tmp_path / "notes-out" / "JOURNAL.md").read_text(encoding="utf-8")
        assert "a trip to Porto." in journal and "Booked the Porto flight." in journal
        assert "Lisbon" not in journal
        written = sorted(p.name for p in (tmp_path / "notes-out").iterdir())
        assert written == ["JOURNAL.md", "LEARNING.md", "MEMORY.md", "USER.md", "WORLD.md"]
        # The comment's figures are what the first import returns.
        again = Memory(None, word_embedder)
        try:
            assert again.import_notes(folder, agent_id="helper") == {"JOURNAL.md": 2, "USER.md": 1}
        finally:
            again.close()
    finally:
        mem.close()
