"""Two agents in one room, one of them without ``agent_id``: the plain one is an agent of
its own. Its context, thread context, ``recall`` and ``forget`` and its check of a fact
said again read and change its own records, not the other agent's (they did, by prefix
scope: a plain agent was shown agent b's turns and memories, and ``forget`` deleted
b's); b sees nothing of the plain agent's. Both backends."""

from __future__ import annotations

from typing import Any

import pytest

from conftest import StoreFactory, WordHashEmbedder
from memlane import AgentMemory, Memory
from memlane.agent import Limits, MemoryTools, Reflection, SessionScope, thread_context
from memlane.agent.statements import RESTATED
from memlane.notes import Notebook
from upkeep_scripts import QUIET

OPTIONS: dict[str, Any] = {**QUIET, "reflection": Reflection(enabled=False), "upkeep": "inline"}


class Quiet:
    """A model that stores nothing."""

    def complete(self, messages: Any) -> str:
        if "New facts:" in messages[-1]["content"]:
            return '{"decisions": []}'
        return '{"operations": []}'


def agents(
    mem: Memory, other: SessionScope, llm: Any = None
) -> tuple[list[float], AgentMemory, AgentMemory]:
    now = [1000.0]
    plain = AgentMemory(mem, SessionScope("per-peer"), llm, clock=lambda: now[0], **OPTIONS)
    b = AgentMemory(mem, other, llm, clock=lambda: now[0], **OPTIONS)
    return now, plain, b


#: The other agent, told apart by its agent_id or by its namespace.
OTHER_AGENTS = pytest.mark.parametrize(
    "other",
    [SessionScope("per-peer", agent_id="b"), SessionScope("per-peer", namespace="b")],
    ids=["agent_id", "namespace"],
)


@OTHER_AGENTS
def test_a_plain_agent_neither_reads_nor_forgets_another_agents_records(
    make_store: StoreFactory, other: SessionScope
) -> None:
    mem = make_store("apart", WordHashEmbedder())
    now, plain, b = agents(mem, other)
    ea, eb = plain.event("telegram", 42, 7), b.event("telegram", 42, 7)
    plain.after(ea, [{"role": "user", "content": "hello plain agent"}], "PLAIN-REPLY here")
    now[0] = 1100.0
    b.after(eb, [{"role": "user", "content": "B-TURN locker question"}], "B-REPLY locker 4417")
    fact = b.memory_tools(eb).handle_tool_call("remember", {"content": "locker code is 4417"})
    mem.add("B-EPISODE talked about the locker", type="episodic", **eb.fields)
    mine = plain.memory_tools(ea).handle_tool_call("remember", {"content": "locker is blue"})
    now[0] = 1200.0

    ctx = plain.context(ea, "what is the locker code?").sections
    shown = " | ".join(line for lines in ctx.values() for line in lines)
    assert "PLAIN-REPLY" in shown and "locker is blue" in shown  # its own, still shown
    assert "B-REPLY" not in shown and "4417" not in shown and "B-EPISODE" not in shown
    block = plain.before(ea, [{"role": "user", "content": "what is the locker code?"}])
    assert "4417" not in block[0]["content"]
    thread = thread_context(mem, "locker code", ea)
    assert any("PLAIN-REPLY" in line for line in thread)
    assert not any("4417" in line for line in thread)
    tools = plain.memory_tools(ea)
    recalled = tools.handle_tool_call("recall", {"query": "locker code"})["memories"]
    assert [m["id"] for m in recalled] == [mine["id"]]
    refused = tools.handle_tool_call("forget", {"id": fact["id"]})
    assert refused["ok"] is False and refused["error"]["type"] == "not_found"
    assert fact["id"] in mem
    assert tools.handle_tool_call("forget", {"id": mine["id"]})["ok"]

    # The other way round, as before: b reads nothing of the plain agent's.
    bctx = b.context(eb, "hello plain agent").sections
    assert "PLAIN-REPLY" not in " | ".join(line for lines in bctx.values() for line in lines)
    assert not any("PLAIN-REPLY" in line for line in thread_context(mem, "hello", eb))
    plain.close()
    b.close()


def _restated_after_repeat(mem: Memory, with_b: bool) -> tuple[object, int]:
    """The plain agent remembers a fact after its turn, b takes a turn in the room (or
    not), and the plain agent remembers the fact again: whether it was kept as said
    again, and the memory's versions."""
    now, plain, b = agents(mem, SessionScope("per-peer", agent_id="b"), Quiet())
    ea, eb = plain.event("telegram", 42, 7), b.event("telegram", 42, 7)
    plain.after(ea, [{"role": "user", "content": "hi"}], "hello from the plain agent")
    now[0] = 1100.0
    tools = plain.memory_tools(ea)
    first = tools.handle_tool_call("remember", {"content": "Alice likes green tea"})
    if with_b:
        now[0] = 1200.0
        b.after(eb, [{"role": "user", "content": "hi b"}], "hello from b")
    now[0] = 1300.0
    again = tools.handle_tool_call("remember", {"content": "Alice likes green tea"})
    assert again.get("duplicate") == "exact" and again["duplicate_of"] == first["id"], again
    out = (mem.get(first["id"]).metadata.get(RESTATED), len(mem.history(first["id"])))
    plain.close()
    b.close()
    return out


def test_another_agents_turn_is_not_the_plain_agents_last(make_store: StoreFactory) -> None:
    """A fact said again since the agent's last turn is not kept as said again: b's turn
    in the room between was taken for that last turn (one more version of the memory,
    dated as said later than it was)."""
    alone = _restated_after_repeat(make_store("alone", WordHashEmbedder()), with_b=False)
    shared = _restated_after_repeat(make_store("shared", WordHashEmbedder()), with_b=True)
    assert alone == (None, 1)
    assert shared == alone


def test_a_turns_question_reads_before_its_answer_in_the_thread(
    make_store: StoreFactory,
) -> None:
    """A turn's messages share its time, and were ordered by their random ids."""
    mem = make_store("thread_order", WordHashEmbedder())
    now = [1000.0]
    am = AgentMemory(mem, SessionScope("per-peer"), None, clock=lambda: now[0], **OPTIONS)
    event = am.event("telegram", 42, 7)
    for i in range(6):
        now[0] += 60
        am.after(event, [{"role": "user", "content": f"question {i}"}], f"answer {i}")
    lines = thread_context(mem, "question", event, recent=6, relevant=12)
    said = [line.split(": ", 1)[1] for line in lines]
    assert said == [f"{w} {i}" for i in range(6) for w in ("question", "answer")][-len(said) :]
    assert len(said) == 12
    am.close()


def test_an_agent_keeps_its_own_records_of_any_namespace(make_store: StoreFactory) -> None:
    """The agent fields are left out only for a scope that names no agent: agent b's
    record stored with a namespace is still b's to recall and forget."""
    mem = make_store("own_namespace", WordHashEmbedder())
    fields = SessionScope("per-peer", agent_id="b").resolve("telegram", 42, 7).fields
    rec = mem.add("the locker code is 4417", namespace="work", **fields)
    tools = MemoryTools(mem, fields)
    recalled = tools.handle_tool_call("recall", {"query": "locker code"})["memories"]
    assert [m["id"] for m in recalled] == [rec.id]
    assert tools.handle_tool_call("forget", {"id": rec.id})["ok"]


def test_a_long_messages_pieces_and_turns_at_one_time_keep_their_order(
    make_store: StoreFactory,
) -> None:
    """The pieces of a long message share its time and role: found by relevance, they
    read in order; two turns at one clock reading, listed, read as they were said."""
    mem = make_store("pieces", WordHashEmbedder())
    now = [1000.0]
    am = AgentMemory(
        mem,
        SessionScope("per-peer"),
        None,
        clock=lambda: now[0],
        limits=Limits(max_entry_chars=200),
        **OPTIONS,
    )
    event = am.event("telegram", 42, 7)
    long = "\n\n".join(f"PART{i} " + "filler " * 25 + f"zebra{i}" for i in range(1, 6))
    am.after(event, [{"role": "user", "content": long}], "short reply")
    for recent, relevant, query in [
        (20, 0, "x"),
        (0, 20, "zebra5 zebra4 zebra3"),
        (2, 3, "zebra1 zebra2"),
        (1, 5, "zebra3 zebra5"),
    ]:
        lines = thread_context(mem, query, event, recent=recent, relevant=relevant, max_line=400)
        parts = [int(line.split("PART")[1].split()[0]) for line in lines if "PART" in line]
        assert parts == sorted(parts), (recent, relevant, parts)
        assert len(parts) > 1
    now[0] = 2000.0
    am.after(event, [{"role": "user", "content": "question one"}], "answer one")
    am.after(event, [{"role": "user", "content": "question two"}], "answer two")
    said = [line.split(": ", 1)[1] for line in thread_context(mem, "", event, recent=4)]
    assert said == ["question one", "answer one", "question two", "answer two"]
    am.close()


@OTHER_AGENTS
def test_neither_agent_is_shown_the_others_notes(
    make_store: StoreFactory, other: SessionScope
) -> None:
    """The notes a context shows are the scope's and its broader scopes' of the same
    agent: a plain agent's notes (no agent_id, no namespace) are not a broader scope of
    agent b's, and b's are not the plain agent's. What b keeps for every conversation
    (its scope without the user's) is still in each of them."""
    mem = make_store("notes", WordHashEmbedder())
    _, plain, b = agents(mem, other)
    ea, eb = plain.event("telegram", 42, 7), b.event("telegram", 42, 7)
    for am, ev, who in ((plain, ea, "plain"), (b, eb, "b")):
        note = {"file": "USER.md", "content": f"{who} noted that alice likes tea"}
        assert am.memory_tools(ev).handle_tool_call("notes_append", note)["ok"] is True
    agent_wide = {k: v for k, v in eb.fields.items() if k in ("agent_id", "namespace")}
    Notebook(mem, agent_wide).append("JOURNAL.md", "b keeps a journal for every user")
    mine = plain.context(ea, "alice tea noted journal").text
    assert "plain noted" in mine and "b noted" not in mine and "journal" not in mine
    theirs = b.context(eb, "alice tea noted journal").text
    assert "b noted" in theirs and "b keeps a journal" in theirs and "plain noted" not in theirs


@pytest.mark.parametrize("field", ["namespace", "agent_id", "user_id"])
def test_an_agent_that_sets_a_default_scope_field_anew_is_shown_its_notes(
    make_store: StoreFactory, field: str
) -> None:
    """Its notes were stored under its own value, and read under the store's default
    (``default_scope``), so never shown."""
    mem = make_store("defaults", WordHashEmbedder(), default_scope={field: "prod"})
    scope = {} if field == "user_id" else {field: "support"}  # the contact sets user_id
    am = AgentMemory(mem, SessionScope("per-peer", **scope), None, **OPTIONS)
    ev = am.event("telegram", 42, 7)
    note = {"file": "USER.md", "content": "alice likes green tea"}
    assert am.memory_tools(ev).handle_tool_call("notes_append", note)["ok"] is True
    assert "alice likes green tea" in am.context(ev, "tea").text
    am.close()
