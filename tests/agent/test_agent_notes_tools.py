"""The model writes its long-term notes (OrcBot's JOURNAL.md, LEARNING.md, USER.md, WORLD.md,
MEMORY.md) through notes_append / notes_replace, on both backends: the tools are offered by
AgentMemory's loops and over MCP, the next prompt shows the edit, each file keeps to its
limit, a failing edit comes back as a tool error (never raised), a rewrite keeps the entry's
date and its old wording in the history, the files still export and import, and two writers
rewriting one entry at once both land."""

from __future__ import annotations

import json
import sys
import threading
from datetime import UTC, datetime
from typing import Any

import pytest

from memlane import AgentMemory, InvalidArgumentError, UnknownIdError
from memlane.agent import (
    Compaction,
    Consolidation,
    FlushReminder,
    MemoryTools,
    Reflection,
    SessionScope,
    build_context,
)
from memlane.agent.memory_tools import NOTES_TOOL_SCHEMAS, anthropic_tools, openai_tools
from memlane.notes import NOTE_FILES, NOTES, Notebook, NoteLimitError

OFF = {
    "reflection": Reflection(enabled=False),
    "consolidation": Consolidation(enabled=False),
    "flush": FlushReminder(enabled=False),
    "compaction": Compaction(enabled=False),
    "upkeep": "inline",
}
MAY_1 = datetime(2026, 5, 1, 9, 30, tzinfo=UTC).timestamp()
MAY_3 = datetime(2026, 5, 3, 18, 0, tzinfo=UTC).timestamp()


def agent(mem, **options: Any) -> AgentMemory:
    scopes = SessionScope("per-peer", agent_id="helper")
    options.setdefault("context", {"min_score": None})
    return AgentMemory(mem, scopes, clock=lambda: MAY_3, **{**OFF, **options})


def system_of(messages: list[dict[str, Any]]) -> str:
    (system,) = [m["content"] for m in messages if m["role"] == "system"]
    return str(system)


def openai_call(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    function = {"name": name, "arguments": json.dumps(args)}
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call_id, "type": "function", "function": function}],
    }


def test_schemas_are_offered_only_with_notes(make_store, word_embedder):
    from jsonschema import Draft202012Validator

    for _, schema in NOTES_TOOL_SCHEMAS.values():
        Draft202012Validator.check_schema(schema)
        assert schema["properties"]["file"]["enum"] == list(NOTE_FILES)
    assert "notes_append" not in {t["function"]["name"] for t in openai_tools()}
    assert {"notes_append", "notes_replace"} <= {
        t["function"]["name"] for t in openai_tools(notes=True)
    }
    assert {"notes_append", "notes_replace"} <= {t["name"] for t in anthropic_tools(notes=True)}

    mem = make_store("schemas", word_embedder)
    plain = MemoryTools(mem, {"agent_id": "helper"})
    assert "notes_append" not in plain.names
    assert plain.handle_tool_call("notes_append", {})["error"]["type"] == "unknown_tool"
    with pytest.raises(InvalidArgumentError, match="notes must be a Notebook"):
        MemoryTools(mem, notes="JOURNAL.md")  # type: ignore[arg-type]


def test_append_and_replace_within_the_limits(make_store, word_embedder):
    mem = make_store("edits", word_embedder)
    scope = {"agent_id": "helper", "user_id": "alice"}
    book = Notebook(mem, scope, clock=lambda: MAY_3)
    tools = MemoryTools(mem, scope, notes=book)

    ok = tools.handle_tool_call(
        "notes_append", {"file": "USER.md", "content": "Alice is vegan.\nShe likes jazz."}
    )
    # "[2026-05-03] Alice is vegan. She likes jazz." and its newline, as the context shows it.
    assert ok == {"ok": True, "file": "USER.md", "chars": 45, "limit": 1500}
    assert book.size("USER.md") == book.size("user") == 45
    tools.handle_tool_call("notes_append", {"file": "JOURNAL.md", "content": "Planned a trip."})
    ctx = build_context(mem, "anything", scope)
    assert ctx.sections["notes"] == [
        "### JOURNAL.md",
        "[2026-05-03] Planned a trip.",
        "### USER.md",
        "[2026-05-03] Alice is vegan. She likes jazz.",
    ]

    # The model quotes what it sees: whitespace collapsed in the context matches the newline.
    done = tools.handle_tool_call(
        "notes_replace",
        {"file": "USER.md", "old_content": "vegan. She likes", "new_content": "vegan; loves"},
    )
    assert done == {
        "ok": True,
        "file": "USER.md",
        "chars": 41,
        "limit": 1500,
        "replaced": 1,
        "removed": 0,
    }
    (entry,) = book.entries("USER.md")
    assert entry.text == "Alice is vegan; loves jazz."
    assert entry.created_at == MAY_3  # a rewrite keeps the entry's date
    old = [v.record.text for v in mem.history(entry.id)]
    assert old == ["Alice is vegan.\nShe likes jazz.", "Alice is vegan; loves jazz."]
    assert mem.count(NOTES, filters={"valid_to": None}) == 2

    # Failing edits are tool errors the model can act on.
    errors = [
        ("notes_replace", {"file": "USER.md", "old_content": "rock", "new_content": "pop"}),
        ("notes_append", {"file": "DIARY.md", "content": "x"}),
        ("notes_append", {"file": "USER.md", "content": "   "}),
        ("notes_append", {"file": "USER.md", "content": "ok\n## 2026-05-04\nsneaky"}),
        ("notes_replace", {"file": "USER.md", "old_content": "vegan"}),
        ("notes_append", {"file": "USER.md", "content": "x" * 1460}),
    ]
    results = [tools.handle_tool_call(name, args) for name, args in errors]
    kinds = [r["error"]["type"] for r in results]
    assert kinds == [
        "not_found",
        "invalid_arguments",
        "invalid_arguments",
        "invalid_arguments",
        "invalid_arguments",
        "limit_exceeded",
    ]
    assert "'rock' is not in USER.md" in results[0]["error"]["message"]
    assert "'file' must be one of" in results[1]["error"]["message"]
    assert "'## '" in results[3]["error"]["message"]
    over = results[5]
    # 41 held; "[2026-05-03] " + 1,460 + newline = 1,474 more: 1,515, 15 over.
    assert (over["limit"], over["size"], over["over"]) == (1500, 41, 15)
    assert "USER.md is limited to 1500 characters" in over["error"]["message"]
    assert "15 over" in over["error"]["message"]
    assert [e.text for e in book.entries("USER.md")] == ["Alice is vegan; loves jazz."]

    # An entry replaced with nothing is removed, and the room it took is free again.
    gone = tools.handle_tool_call(
        "notes_replace",
        {"file": "JOURNAL.md", "old_content": "Planned a trip.", "new_content": ""},
    )
    assert (gone["ok"], gone["removed"], gone["chars"]) == (True, 1, 0)
    assert book.entries("JOURNAL.md") == []

    # The Python API raises what the tools report.
    with pytest.raises(NoteLimitError) as limit:
        book.append("user", "x" * 1460)
    assert limit.value.over == 15
    with pytest.raises(UnknownIdError, match=r"not in USER\.md"):
        book.replace("USER.md", "rock", "pop")
    with pytest.raises(InvalidArgumentError, match="unknown notes file"):
        book.append("diary", "x")
    with pytest.raises(InvalidArgumentError, match="unknown note kind"):
        Notebook(mem, scope, limits={"diary": 10})


def test_a_file_over_its_limit_can_only_shrink(make_store, word_embedder, tmp_path):
    mem = make_store("over", word_embedder)
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "JOURNAL.md").write_text(
        "## 2026-05-01 09:30\nHelped Alice plan a trip to Lisbon.\n\n"
        "## 2026-05-01 10:00\nAlice's flight moved to Friday.\nShe asked for a reminder.\n",
        encoding="utf-8",
    )
    mem.import_notes(folder, agent_id="helper")
    book = Notebook(mem, {"agent_id": "helper"}, limits={"journal": 60}, clock=lambda: MAY_3)
    assert book.size("JOURNAL.md") == 49 + 71 > 60
    with pytest.raises(NoteLimitError):
        book.append("JOURNAL.md", "More.")
    with pytest.raises(NoteLimitError):  # it would grow
        book.replace("JOURNAL.md", "Lisbon", "Lisbon and Porto")
    edit = book.replace("JOURNAL.md", "Friday. She asked for a reminder.", "Friday.")
    assert (edit.replaced, edit.size) == (1, 49 + 45)
    first, second = book.entries("JOURNAL.md")
    assert first.text == "Helped Alice plan a trip to Lisbon."
    assert second.text == "Alice's flight moved to Friday."
    assert second.created_at == datetime(2026, 5, 1, 10, 0, tzinfo=UTC).timestamp()

    # The files still round-trip: the export shows the rewrite, and importing it is a no-op.
    out = tmp_path / "out"
    assert mem.export_notes(out, agent_id="helper")["JOURNAL.md"] == 2
    text = (out / "JOURNAL.md").read_text(encoding="utf-8")
    assert "## 2026-05-01 10:00:00\n\nAlice's flight moved to Friday.\n" in text
    assert "reminder" not in text
    assert mem.import_notes(out, agent_id="helper")["JOURNAL.md"] == 0


def test_agent_loop_offers_the_tools_and_shows_the_edit(make_store, word_embedder):
    mem = make_store("loop", word_embedder)
    prompts: list[str] = []
    offered: list[set[str]] = []

    def chat(messages, tools=None):
        prompts.append(system_of(messages))
        offered.append({t["function"]["name"] for t in tools})
        last = messages[-1]
        if last["role"] == "user" and "Lisbon" in last["content"]:
            args = {"file": "JOURNAL.md", "content": "Alice plans a trip to Lisbon."}
            return openai_call("c1", "notes_append", args)
        if last["role"] == "user":
            args = {"file": "JOURNAL.md", "old_content": "Lisbon", "new_content": "Porto"}
            return openai_call("c2", "notes_replace", args)
        result = json.loads(last["content"])
        assert result["ok"] and result["file"] == "JOURNAL.md"
        return {"role": "assistant", "content": f"Noted ({result['chars']} chars)."}

    am = agent(mem)
    event = am.event("telegram", 42)
    loop = am.openai(chat)
    assert loop.run(event, [{"role": "user", "content": "Trip to Lisbon!"}]).reply == (
        "Noted (43 chars)."
    )
    loop.run(event, [{"role": "user", "content": "No, Porto."}])
    assert {"notes_append", "notes_replace", "remember"} <= offered[0]
    # The next turn's prompt shows the note; the one after, the rewrite.
    assert "[2026-05-03] Alice plans a trip to Lisbon." in prompts[2]
    assert "[2026-05-03] Alice plans a trip to Porto." not in prompts[2]
    # The notes are the event's scope's: another user's prompt does not hold them.
    other = am.before(am.event("telegram", 43), [{"role": "user", "content": "Lisbon?"}])
    assert "Alice plans" not in system_of(other)
    book = Notebook(mem, event.fields)
    assert [e.text for e in book.entries("JOURNAL.md")] == ["Alice plans a trip to Porto."]

    # No notes in the context: no notes tools; the context's limits are the tools' limits.
    assert "notes_append" not in agent(mem, context={"notes": None}).memory_tools(event).names
    small = agent(mem, context={"notes": {"journal": 60}}).memory_tools(event)
    result = small.handle_tool_call("notes_append", {"file": "WORLD.md", "content": "Sunny."})
    assert (result["error"]["type"], result["limit"]) == ("limit_exceeded", 0)
    result = small.handle_tool_call("notes_append", {"file": "JOURNAL.md", "content": "x" * 40})
    assert (result["error"]["type"], result["limit"], result["size"]) == ("limit_exceeded", 60, 42)


def test_anthropic_loop_reports_a_failing_edit(make_store, word_embedder):
    mem = make_store("anthropic", word_embedder)
    results: list[dict[str, Any]] = []

    def create(system, messages, tools=None):
        assert {"notes_append", "notes_replace"} <= {t["name"] for t in tools}
        last = messages[-1]
        if isinstance(last["content"], str):
            calls = [
                ("t1", "notes_append", {"file": "MEMORY.md", "content": "x" * 2000}),
                (
                    "t2",
                    "notes_replace",
                    {"file": "MEMORY.md", "old_content": "a", "new_content": ""},
                ),
                ("t3", "notes_append", {"file": "MEMORY.md", "content": "Budget: 500 EUR."}),
            ]
            blocks = [{"type": "tool_use", "id": i, "name": n, "input": a} for i, n, a in calls]
            return {"role": "assistant", "content": blocks}
        results.extend(last["content"])
        return {"role": "assistant", "content": [{"type": "text", "text": "Done."}]}

    am = agent(mem)
    event = am.event("discord", 7)
    assert am.anthropic(create).run(event, [{"role": "user", "content": "hi"}]).reply == "Done."
    by_id = {r["tool_use_id"]: (json.loads(r["content"]), r.get("is_error")) for r in results}
    assert by_id["t1"][1] is True and by_id["t1"][0]["error"]["type"] == "limit_exceeded"
    assert by_id["t2"][1] is True and by_id["t2"][0]["error"]["type"] == "not_found"
    assert by_id["t3"] == ({"ok": True, "file": "MEMORY.md", "chars": 30, "limit": 2000}, None)


def test_two_writers_rewriting_one_entry_both_land(make_store, word_embedder, monkeypatch):
    mem = make_store("race", word_embedder)
    scope = {"agent_id": "helper"}
    Notebook(mem, scope, clock=lambda: MAY_1).append("WORLD.md", "It rains in Lisbon and Porto.")
    # Both writers read the entry before either writes: the second must not undo the first.
    barrier = threading.Barrier(2, timeout=60)
    waited = threading.local()
    calls: list[str] = []
    for name in ("replace", "supersede", "update"):
        method = getattr(mem, name)

        def wait_first(*args: Any, _method: Any = method, **kwargs: Any) -> Any:
            calls.append(_method.__name__)
            if not getattr(waited, "done", False):
                waited.done = True
                barrier.wait()
            return _method(*args, **kwargs)

        monkeypatch.setattr(mem, name, wait_first)
    errors: list[BaseException] = []

    def rewrite(old: str, new: str) -> None:
        try:
            Notebook(mem, scope).replace("WORLD.md", old, new)
        except BaseException as e:
            errors.append(e)

    threads = [
        threading.Thread(target=rewrite, args=("rains", "shines")),
        threading.Thread(target=rewrite, args=("Porto", "Faro")),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert calls == ["replace"] * 3  # one lost the race and was applied again
    (entry,) = Notebook(mem, scope).entries("WORLD.md")
    assert entry.text == "It shines in Lisbon and Faro."
    assert entry.created_at == MAY_1


def test_mcp_serves_the_notes_tools(tmp_path):
    anyio = pytest.importorskip("anyio")
    pytest.importorskip("mcp")
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    from memlane import Memory

    store = tmp_path / "store"
    Memory(store, None).close()
    args = ["-m", "memlane", "mcp", "--store", str(store), "--embedder", "none", "--user", "alice"]
    calls = [
        ("notes_append", {"file": "USER.md", "content": "Alice takes her coffee black."}),
        ("notes_replace", {"file": "USER.md", "old_content": "black", "new_content": "white"}),
        ("notes_append", {"file": "USER.md", "content": "x" * 1500}),
    ]

    async def run() -> list[Any]:
        params = StdioServerParameters(command=sys.executable, args=args)
        out: list[Any] = []
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            listed = await session.list_tools()
            out.append({t.name: t.input_schema for t in listed.tools})
            for name, arguments in calls:
                result = await session.call_tool(name, arguments)
                out.append((json.loads(result.content[0].text), result.is_error))
        return out

    tools, appended, replaced, over = anyio.run(run)
    assert tools["notes_replace"] == NOTES_TOOL_SCHEMAS["notes_replace"][1]
    assert appended == ({"ok": True, "file": "USER.md", "chars": 43, "limit": 1500}, False)
    assert replaced[0]["replaced"] == 1 and replaced[1] is False
    assert over[1] is True and over[0]["error"]["type"] == "limit_exceeded"
    with Memory(store, None) as mem:
        entries = Notebook(mem, {"user_id": "alice"}).entries("USER.md")
        assert [e.text for e in entries] == ["Alice takes her coffee white."]


def test_a_file_of_many_short_entries_within_its_limit_is_shown_whole(make_store, word_embedder):
    # Entries were read 50 at most: the 25 oldest of 75 accepted never reached the model.
    mem = make_store("many", word_embedder)
    scope = {"agent_id": "helper"}
    tools = MemoryTools(mem, scope, notes=Notebook(mem, scope))
    accepted = []
    for i in range(200):
        call = {"file": "WORLD.md", "content": f"fact{i:03d}"}
        if not tools.handle_tool_call("notes_append", call)["ok"]:
            break
        accepted.append(f"fact{i:03d}")
    assert len(accepted) > 50
    notes = "\n".join(build_context(mem, "anything", scope).sections.get("notes", []))
    assert [a for a in accepted if a not in notes] == []


@pytest.mark.parametrize("limit", [10**30, 1_000_001, -1])
def test_a_notes_limit_no_context_can_show_is_refused_when_given(make_store, word_embedder, limit):
    # Accepted, a huge limit failed every turn's context afterwards (its read's bound).
    mem = make_store("huge-limit", word_embedder)
    with pytest.raises(InvalidArgumentError, match="limits\\['memory'\\]"):
        AgentMemory(mem, SessionScope(), context={"notes": {"memory": limit}}, **OFF)
    with pytest.raises(InvalidArgumentError, match="limits\\['memory'\\]"):
        Notebook(mem, {"agent_id": "a"}, limits={"memory": limit})
