"""AgentMemory around an agent loop: injection (first_only / every_iteration), the turn stored,
each trigger firing and not firing with a scripted LLM behind the loopback chat server, the
caps (evictions reported, evergreen exempt), failing LLMs, and both chat formats."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from typing import Any

import pytest

from chat_server import ScriptedChatServer, completion
from memlane import AgentMemory, InvalidArgumentError, Memory
from memlane.agent import (
    MESSAGES,
    SHORT_TERM,
    Compaction,
    Consolidation,
    DailyLog,
    FlushReminder,
    Limits,
    OpenAIChat,
    Reflection,
    SessionScope,
)
from memlane.agent.loop import split_text
from memlane.agent.messages import SUMMARY_TAG, TOOL_INSTRUCTIONS

SCOPES = SessionScope("per-peer", {"telegram:42": "alice", "whatsapp:+1555": "alice"})
# Every trigger off unless a test turns it on. The daily log too: these tests' clock
# starts at the real time and moves minutes on, and a day that ends meanwhile would
# add its log's model call (seen at 23:50 UTC).
OFF = {
    "daily": DailyLog(enabled=False),
    "reflection": Reflection(enabled=False),
    "consolidation": Consolidation(enabled=False),
    "flush": FlushReminder(enabled=False),
    "compaction": Compaction(enabled=False),
    # What each trigger does, as the turn's own report shows it (tests/agent/test_agent_upkeep.py
    # runs them in the background).
    "upkeep": "inline",
}
#: The check of the facts a consolidation drew: keep each.
KEEP = json.dumps({"decisions": []})
SUMMARY = {
    "summary": "Alice talked about her tea habits.",
    "facts": ["Alice drinks green tea"],
    "pending": [],
    "tone": "friendly",
    "preferences": ["green tea"],
    "confidence": 0.8,
}


class Clock:
    """An injectable clock: time moves only when the test says so."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> Clock:
    return Clock()


def agent(mem, llm=None, clock=None, **settings: Any) -> AgentMemory:
    options = {**OFF, **settings}
    return AgentMemory(mem, SCOPES, llm, clock=clock, context={"min_score": None}, **options)


def turn(am, event, text: str, reply: str = "ok", system: str = "You are a bot."):
    """One plain turn: before, the model (here: a fixed reply), after."""
    msgs = am.before(
        event, [{"role": "system", "content": system}, {"role": "user", "content": text}]
    )
    return msgs, am.after(event, msgs, reply)


def ops(*items: dict[str, Any]) -> str:
    return json.dumps({"operations": list(items)})


# -- before: injection --------------------------------------------------------------------------


def test_before_injects_context_and_tool_instructions(mem):
    am = agent(mem)
    alice = am.event("telegram", 42, 7)
    mem.add("Alice drinks green tea every morning", **alice.fields)
    given = [{"role": "system", "content": "You are a bot."}, {"role": "user", "content": "tea?"}]
    out = am.before(alice, given)
    assert given[0]["content"] == "You are a bot."  # the input is left as it was
    system = out[0]["content"]
    assert system.startswith("You are a bot.\n\n<memlane-memory")
    assert "## What you remember\n- Alice drinks green tea every morning" in system
    assert TOOL_INSTRUCTIONS in system
    assert out[1:] == given[1:]
    # No system message: one is put first.
    out = am.before(alice, [{"role": "user", "content": "tea?"}])
    assert out[0]["role"] == "system" and "green tea" in out[0]["content"]
    # Tools off: no instructions; another person sees nothing of Alice.
    quiet = agent(mem, tools=False)
    out = quiet.before(quiet.event("telegram", 9), [{"role": "user", "content": "tea?"}])
    assert "Memory tools" not in out[0]["content"] and "green tea" not in out[0]["content"]
    # Injecting twice never stacks blocks.
    again = am.before(alice, am.before(alice, given))
    assert again[0]["content"].count("<memlane-memory") == 1


def test_first_only_keeps_the_block_for_the_turn(mem):
    am = agent(mem)
    alice = am.event("telegram", 42, 7)
    mem.add("Alice likes green tea", **alice.fields)
    msgs = am.before(alice, [{"role": "user", "content": "what tea do I like?"}])
    first = msgs[0]["content"]
    mem.add("Alice likes tea with lemon", **alice.fields)  # a tool stored this mid-turn
    msgs.append({"role": "assistant", "content": "checking"})
    again = am.before(alice, msgs)
    assert again[0]["content"] == first  # first_only: not rebuilt within the turn
    am.after(alice, again, "green tea")
    nxt = am.before(alice, [*again, {"role": "user", "content": "what tea do I like?"}])
    assert "lemon" in nxt[0]["content"]  # the next turn gets a fresh block


def test_every_iteration_rebuilds_the_block(mem):
    am = agent(mem, inject="every_iteration")
    alice = am.event("telegram", 42, 7)
    mem.add("Alice likes green tea", **alice.fields)
    msgs = am.before(alice, [{"role": "user", "content": "what tea do I like?"}])
    assert "lemon" not in msgs[0]["content"]
    mem.add("Alice likes tea with lemon", **alice.fields)
    msgs = am.before(alice, msgs)
    assert "lemon" in msgs[0]["content"] and msgs[0]["content"].count("<memlane-memory") == 1


def test_system_as_content_blocks(mem):
    am = agent(mem)
    alice = am.event("telegram", 42)
    mem.add("Alice likes green tea", **alice.fields)
    system = [{"type": "text", "text": "You are a bot."}]
    new_system, msgs = am.before_anthropic(alice, system, [{"role": "user", "content": "tea"}])
    assert new_system[0] == system[0] and "green tea" in new_system[1]["text"]
    again, _ = am.before_anthropic(alice, new_system, msgs)
    assert len(again) == 2


# -- after: the turn ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "reply",
    [
        "Green tea it is.",
        {"role": "assistant", "content": "Green tea it is."},
        completion("Green tea it is."),
        {"role": "assistant", "content": [{"type": "text", "text": "Green tea it is."}]},
    ],
    ids=["str", "openai-message", "completion", "anthropic-blocks"],
)
def test_after_stores_the_turn(make_store, word_embedder, clock, reply):
    mem = make_store("turn", word_embedder)
    try:
        am = agent(mem, clock=clock)
        alice = am.event("telegram", 42, 7)
        msgs = am.before(alice, [{"role": "user", "content": "Which tea should I try?"}])
        report = am.after(alice, msgs, reply)
        assert report.ok and report.failures == []
        assert [r.text for r in report.stored] == ["Which tea should I try?", "Green tea it is."]
        assert [r.metadata["role"] for r in report.stored] == ["user", "assistant"]
        assert all(r.created_at == clock.now for r in report.stored)
        history = mem.list(MESSAGES, order="asc", **alice.history)
        assert [r.text for r in history] == ["Which tea should I try?", "Green tea it is."]
        (entry,) = mem.list(SHORT_TERM, **alice.fields)
        assert entry.text == "user: Which tea should I try?\nassistant: Green tea it is."
        # The next turn's context shows the stored history (on another platform, linked).
        other = am.event("telegram", 42, 7)
        nxt = am.before(other, [{"role": "user", "content": "and now?"}])
        assert "assistant: Green tea it is." in nxt[0]["content"]
    finally:
        mem.close()


def test_a_repeated_short_reply_is_kept_and_a_redelivery_is_not(mem, clock):
    """Turns the loop records in order are never skipped for their text alone ("yes"
    twice within the dedup window); the same platform message id delivered again is."""
    am = agent(mem, clock=clock, consolidation=Consolidation(record_turns=False, enabled=False))
    alice = am.event("telegram", 42, 7)
    for _ in range(2):
        am.after(alice, [{"role": "user", "content": "yes"}], "ok")
        clock.advance(10)
    texts = [r.text for r in mem.list(MESSAGES, order="asc", **alice.history)]
    assert texts == ["yes", "ok", "yes", "ok"]
    # The platform's message id, given to after() or carried by the event.
    first = am.after(alice, [{"role": "user", "content": "book it"}], "done", message_id=981)
    again = am.after(alice, [{"role": "user", "content": "book it"}], "done", message_id="981")
    assert again.stored[0].id == first.stored[0].id
    assert again.stored[0].duplicate == "window"
    delivered = am.event("telegram", 42, 7, message_id="m-5")
    one = am.after(delivered, [{"role": "user", "content": "and a taxi"}], "sure")
    two = am.after(delivered, [{"role": "user", "content": "and a taxi!"}], "sure")
    assert two.stored[0].id == one.stored[0].id
    # The reply to a message is never taken for the message, whatever its id.
    assert one.stored[1].duplicate is None and one.stored[1].text == "sure"
    user_texts = [
        r.text
        for r in mem.list(MESSAGES, order="asc", **alice.history)
        if r.metadata["role"] == "user"
    ]
    assert user_texts == ["yes", "yes", "book it", "and a taxi"]
    with pytest.raises(InvalidArgumentError, match="message_id"):
        am.after(alice, [{"role": "user", "content": "x"}], "y", message_id=" ")


TOOL_CALL = {"id": "c1", "type": "function", "function": {"name": "book", "arguments": "{}"}}


def test_after_with_a_tool_call_only_reply_stores_the_user_message(mem):
    am = agent(mem, consolidation=Consolidation(record_turns=False, enabled=False))
    alice = am.event("telegram", 42, 7)
    report = am.after(
        alice, [{"role": "user", "content": "hi"}], {"content": None, "tool_calls": []}
    )
    assert [r.text for r in report.stored] == ["hi"] and report.short_term == []


def test_the_turns_user_message_is_the_last_one_it_wrote(mem):
    """A whole history: only the last user message is the turn's (the ones before it
    were stored by their own turns, even with no reply between: one was stored twice),
    past the tool call and result after it; text beside a tool result is the user's
    (Anthropic's shape); and a compaction summary after the last text means the turn's
    message is the one ``before`` saw, not an older turn's that the compaction kept."""
    am = agent(mem, consolidation=Consolidation(record_turns=False, enabled=False))
    alice = am.event("telegram", 42, 7)
    first = am.after(alice, [{"role": "user", "content": "My code is 4711."}], "", message_id=1)
    assert [r.text for r in first.stored] == ["My code is 4711."]
    history = [
        {"role": "user", "content": "My code is 4711."},
        {"role": "user", "content": "book a flight"},
        {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]},
        {"role": "tool", "tool_call_id": "c1", "content": "booked"},
    ]
    report = am.after(alice, history, "Booked.", message_id=2)
    assert [r.text for r in report.stored] == ["book a flight", "Booked."]
    result = {"type": "tool_result", "tool_use_id": "c1", "content": "booked"}
    beside = [result, {"type": "text", "text": "Make it Bergen."}]
    report = am.after(alice, [*history, {"role": "user", "content": beside}], "Ok.", message_id=3)
    assert report.stored[0].text == "Make it Bergen."
    asked = [*history[:1], {"role": "user", "content": "fly me to Oslo"}]
    am.before(alice, asked)
    compacted = [history[0], {"role": "user", "content": f"{SUMMARY_TAG} (3 steps)\nbooked"}]
    report = am.after(alice, compacted, "Done.", message_id=4)
    assert report.stored[0].text == "fly me to Oslo"
    said = [r.text for r in mem.list(MESSAGES, order="asc", **alice.history) if r.text]
    assert said.count("My code is 4711.") == 1


def test_bad_input_raises(mem, llm):
    am = agent(mem)
    alice = am.event("telegram", 42)
    with pytest.raises(InvalidArgumentError, match="EventScope"):
        am.before({"user_id": "alice"}, [])  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="list"):
        am.before(alice, "hello")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="role"):
        am.after(alice, [{"content": "x"}], "ok")
    with pytest.raises(InvalidArgumentError, match="reply"):
        am.after(alice, [], 42)
    with pytest.raises(InvalidArgumentError, match="inject"):
        AgentMemory(mem, inject="sometimes")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="llm"):
        AgentMemory(mem, llm="gpt")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="max_tokens"):
        AgentMemory(mem, max_tokens=0)
    with pytest.raises(InvalidArgumentError, match="Reflection"):
        AgentMemory(mem, reflection=Consolidation())  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="build_context option"):
        AgentMemory(mem, context={"max_tokens": 10})  # given as max_tokens=
    with pytest.raises(InvalidArgumentError, match="every"):
        Reflection(every=0)
    with pytest.raises(InvalidArgumentError, match="max_age"):
        Consolidation(max_age=-1)
    with pytest.raises(InvalidArgumentError, match="cooldown"):
        FlushReminder(cooldown=float("nan"))
    with pytest.raises(InvalidArgumentError, match="max_steps"):
        Compaction(max_steps=7, keep_first=2, keep_last=5)
    with pytest.raises(InvalidArgumentError, match="overflow"):
        Limits(overflow="truncate")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="max_memories"):
        Limits(max_memories=0)
    # Nothing was stored by the refused calls.
    assert mem.count() == 0


# -- reflection -----------------------------------------------------------------------------------


def test_reflection_every_n_turns(make_store, word_embedder, server, llm, clock):
    mem = make_store("reflect", word_embedder)
    try:
        for i in range(60):
            mem.add(f"Alice fact number {i} about tea", user_id="alice", session_id="peer:alice")
        am = agent(mem, llm, clock, reflection=Reflection(every=3, window=4, shown=50))
        alice = am.event("telegram", 42, 7)

        def answer(body):
            assert body["max_tokens"] == 500
            prompt = body["messages"][1]["content"]
            listed, _, conversation = prompt.partition("\n\nConversation:\n")
            assert len(listed.splitlines()) - 1 == 50  # up to 50 memories shown
            # The window: the room's last 4 messages, oldest first.
            assert conversation.splitlines() == [
                "user: message 1",
                "assistant: reply 1",
                "user: message 2",
                "assistant: reply 2",
            ]
            return ops({"op": "remember", "content": "Alice prefers oolong tea"})

        server.push(answer, json.dumps({"decisions": [{"fact": "F1", "decision": "add"}]}))
        for i in range(2):
            _, report = turn(am, alice, f"message {i}", f"reply {i}")
            assert report.reflection is None
        assert server.requests == []  # not before the 3rd turn
        _, report = turn(am, alice, "message 2", "reply 2")
        assert report.ok, report.failures
        assert report.reflection is not None
        assert [r.text for r in report.reflection.added] == ["Alice prefers oolong tea"]
        assert report.facts is not None and [d.decision for d in report.facts.decisions] == ["add"]
        assert mem.search("oolong", 1, **alice.fields)[0].record.text == "Alice prefers oolong tea"
        for i in range(3, 5):
            _, report = turn(am, alice, f"message {i}", f"reply {i}")
            assert report.reflection is None  # counted again from 0
        assert len(server.requests) == 2  # the reflection, and the check of its fact
    finally:
        mem.close()


@pytest.mark.parametrize("failure", ["http", "malformed", "timeout"])
def test_reflection_failure_loses_nothing_and_retries(mem, server, clock, failure):
    release = threading.Event()

    def hang(body):
        release.wait()
        return ops()

    bad = {"http": (500, "boom"), "malformed": "I think {operations: maybe", "timeout": hang}
    server.push(bad[failure], ops({"op": "remember", "content": "Alice likes matcha"}))
    # The timeout is what the hung call waits; the answered ones take a fraction of it.
    with OpenAIChat("s", base_url=server.base_url, max_retries=0, timeout=2.0) as llm:
        am = agent(mem, llm, clock, reflection=Reflection(every=1))
        alice = am.event("telegram", 42, 7)
        try:
            _, report = turn(am, alice, "I love matcha", "Matcha noted")
        finally:
            release.set()
        assert not report.ok
        (f,) = report.failures
        assert f.trigger == "reflection"
        assert {"http": "500", "malformed": "ParseError", "timeout": "LLMError"}[failure] in f.error
        assert [r.text for r in report.stored] == ["I love matcha", "Matcha noted"]  # kept
        assert mem.count(MESSAGES, **alice.history) == 2
        # The next turn retries, and succeeds.
        _, report = turn(am, alice, "really", "yes")
        assert report.ok and report.reflection is not None
        assert [r.text for r in report.reflection.added] == ["Alice likes matcha"]
        assert mem.count(MESSAGES, **alice.history) == 4


# -- consolidation ------------------------------------------------------------------------------


def test_consolidation_at_the_threshold(make_store, word_embedder, server, llm, clock):
    mem = make_store("consolidate", word_embedder)
    try:
        am = agent(mem, llm, clock, consolidation=Consolidation(threshold=3, batch=2))
        alice = am.event("telegram", 42, 7)
        server.push(json.dumps(SUMMARY), KEEP)
        for i in range(2):
            _, report = turn(am, alice, f"tea talk {i}", "nice")
            assert report.consolidation is None
        assert server.requests == [] and mem.count(SHORT_TERM, **alice.fields) == 2
        _, report = turn(am, alice, "tea talk 2", "nice")
        assert report.ok, report.failures
        c = report.consolidation
        assert c is not None and c.status == "consolidated"
        assert len(c.removed) == 2 and mem.count(SHORT_TERM, **alice.fields) == 1
        assert "tea talk 0" in server.requests[0]["messages"][1]["content"]
        assert mem.get(c.episodic.id).text == SUMMARY["summary"]
        facts = [r.text for r in mem.list("memories", type="semantic", **alice.fields)]
        assert facts == ["Alice drinks green tea"]
    finally:
        mem.close()


def test_consolidation_of_a_stale_oldest_entry(mem, server, llm, clock):
    am = agent(mem, llm, clock)  # threshold 12, max_age 600
    am.consolidation = Consolidation()
    alice = am.event("telegram", 42, 7)
    server.push(json.dumps(SUMMARY))
    turn(am, alice, "first", "one")
    clock.advance(599)
    _, report = turn(am, alice, "second", "two")
    assert report.consolidation is None and server.requests == []  # not yet 10 minutes
    clock.advance(2)
    _, report = turn(am, alice, "third", "three")
    assert report.consolidation is not None and report.consolidation.status == "consolidated"
    assert mem.count(SHORT_TERM, **alice.fields) == 0  # forced: all 3 summarised


@pytest.mark.parametrize("failure", ["http", "malformed"])
def test_consolidation_failure_keeps_entries_and_retries(mem, server, llm, clock, failure):
    am = agent(mem, llm, clock, consolidation=Consolidation(threshold=2))
    alice = am.event("telegram", 42, 7)
    bad = {"http": (503, "overloaded"), "malformed": '{"summary": 42}'}[failure]
    server.push(bad, json.dumps(SUMMARY), KEEP)
    turn(am, alice, "one", "a")
    _, report = turn(am, alice, "two", "b")
    (f,) = report.failures
    assert f.trigger == "consolidation" and report.consolidation.status == "failed"
    assert mem.count(SHORT_TERM, **alice.fields) == 3 - 1  # both turns' entries kept
    assert mem.count(MESSAGES, **alice.history) == 4
    _, report = turn(am, alice, "three", "c")
    assert report.ok and report.consolidation.status == "consolidated"
    assert mem.count(SHORT_TERM, **alice.fields) == 0


# -- flush reminder -----------------------------------------------------------------------------


def test_flush_reminder_and_its_cooldown(mem, clock):
    am = agent(mem, clock=clock, flush=FlushReminder(entries=5, cooldown=1800))
    alice = am.event("telegram", 42, 7)
    _, report = turn(am, alice, "one", "a")  # 3 entries: 2 messages, 1 short-term
    assert report.flush_reminder is None
    msgs, report = turn(am, alice, "two", "b")  # 6
    assert "Save what matters" not in msgs[0]["content"]
    assert report.flush_reminder is not None and "6 new entries" in report.flush_reminder
    msgs, report = turn(am, alice, "three", "c")
    assert "## Save what matters\n6 new entries" in msgs[0]["content"]  # delivered once
    for text in ("four", "five"):
        msgs, report = turn(am, alice, text, "d")
        assert "Save what matters" not in msgs[0]["content"]
        assert report.flush_reminder is None  # 6, 9 entries: within the cooldown
    clock.advance(1800)
    _, report = turn(am, alice, "six", "e")
    assert report.flush_reminder is not None and "12 new entries" in report.flush_reminder
    # Tool writes count too, and without tools there is no reminder.
    silent = agent(mem, clock=clock, tools=False, flush=FlushReminder(entries=1))
    _, report = turn(silent, silent.event("telegram", 5), "hi", "hello")
    assert report.flush_reminder is None


def test_tool_writes_count_towards_the_reminder(mem, clock):
    am = agent(mem, clock=clock, flush=FlushReminder(entries=4))
    alice = am.event("telegram", 42, 7)
    tools = am.memory_tools(alice)
    for fact in ("Alice likes tea", "Alice likes cats", "Alice likes jazz"):
        assert tools.handle_tool_call("remember", {"content": fact})["ok"]
    am.consolidation = Consolidation(record_turns=False, enabled=False)
    _, report = turn(am, alice, "bye", "")  # 3 memories + 1 message
    assert report.flush_reminder is not None and "4 new entries" in report.flush_reminder


# -- step compaction ----------------------------------------------------------------------------


def tool_steps(n: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(n):
        out.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"c{i}",
                        "type": "function",
                        "function": {"name": "lookup", "arguments": json.dumps({"q": f"item {i}"})},
                    }
                ],
            }
        )
        out.append({"role": "tool", "tool_call_id": f"c{i}", "content": f"result {i}"})
    return out


def test_compaction_past_ten_steps(mem, server, llm):
    am = agent(mem, llm, compaction=Compaction())
    alice = am.event("telegram", 42, 7)
    short = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "plan it"},
        *tool_steps(9),
    ]
    assert am.before(alice, short)[1:] == short[1:]  # 10 steps: kept as they are
    assert server.requests == []

    def summarise(body):
        assert body["max_tokens"] == 500
        prompt = body["messages"][1]["content"]
        assert "item 1" in prompt and "result 5" in prompt  # the middle steps
        assert '"item 0"' not in prompt and '"item 6"' not in prompt  # kept ones are not
        return "Looked up items 1 to 5; all found."

    server.push(summarise)
    # 12 steps: the user's message and 11 tool rounds.
    long = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "plan it"},
        *tool_steps(11),
    ]
    out = am.before(alice, long)
    assert out[0]["role"] == "system"
    assert out[1] == long[1] and out[2:4] == long[2:4]  # first 2 steps: user, round 0
    assert out[4]["role"] == "user" and "Looked up items 1 to 5" in out[4]["content"]
    assert out[5:] == long[-10:]  # last 5 steps, each assistant call with its tool result
    assert [m["role"] for m in out[5:7]] == ["assistant", "tool"]
    # The same history again: the summary is reused, no second request.
    assert am.before(alice, long)[4] == out[4] and len(server.requests) == 1
    report = am.after(alice, out, "done")
    (c,) = report.compactions
    assert (c.status, c.steps_before, c.steps_after) == ("compacted", 12, 8)
    assert [r.text for r in report.stored] == ["plan it", "done"]  # the user message found


@pytest.mark.parametrize("failure", [(500, "down"), "   "])
def test_compaction_failure_keeps_every_step(mem, server, llm, failure):
    am = agent(mem, llm, compaction=Compaction())
    alice = am.event("telegram", 42, 7)
    long = [{"role": "user", "content": "plan it"}, *tool_steps(11)]
    server.push(failure, "Summary of the middle.")
    out = am.before(alice, long)
    assert out[1:] == long  # nothing dropped
    out = am.before(alice, long)  # retried at the next call
    assert "Summary of the middle." in out[4]["content"]
    report = am.after(alice, out, "done")
    assert [c.status for c in report.compactions] == ["failed", "compacted"]
    assert [f.trigger for f in report.failures] == ["compaction"]


def test_compaction_keeps_anthropic_tool_pairs(mem, server, llm):
    am = agent(mem, llm, compaction=Compaction(max_steps=4, keep_first=1, keep_last=2))
    alice = am.event("telegram", 42)
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for i in range(5):
        msgs.append(
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": f"t{i}", "name": "f", "input": {"i": i}}],
            }
        )
        msgs.append(
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": f"t{i}", "content": f"r{i}"}],
            }
        )
    server.push("Called f three times.")
    system, out = am.before_anthropic(alice, "S", msgs)
    assert system.startswith("S\n\n<memlane-memory")
    assert out[0] == msgs[0] and "Called f three times." in out[1]["content"]
    assert out[2:] == msgs[-4:]  # the last 2 steps, tool_use with its tool_result
    assert 'f({"i": 0})' in server.requests[0]["messages"][1]["content"]
    report = am.after(
        alice, out, {"role": "assistant", "content": [{"type": "text", "text": "ok"}]}
    )
    assert [r.text for r in report.stored] == ["go", "ok"]


# -- the length cap -------------------------------------------------------------------------------


def test_long_entries_are_split_never_cut(make_store, word_embedder, clock):
    mem = make_store("split", word_embedder)
    try:
        am = agent(mem, clock=clock)
        am.consolidation = Consolidation(enabled=False)  # turns still recorded
        alice = am.event("telegram", 42, 7)
        long = " ".join(f"Sentence {i} about the tea ceremony in Kyoto." for i in range(100))
        assert len(long) > 4000
        _, report = turn(am, alice, long, "Interesting.")
        user_parts = [r for r in report.stored if r.metadata["role"] == "user"]
        assert len(user_parts) == 4 and all(len(r.text) <= 1500 for r in user_parts)
        assert " ".join(r.text for r in user_parts) == long  # nothing lost
        assert [r.metadata["part"] for r in user_parts] == [1, 2, 3, 4]
        assert len({r.metadata["split_group"] for r in user_parts}) == 1
        assert ("user message", 4) in report.splits
        assert all(len(r.text) <= 1500 for r in report.short_term) and len(report.short_term) > 1
        # The model's remember tool keeps to the cap the same way.
        result = am.memory_tools(alice).handle_tool_call("remember", {"content": long})
        assert result["ok"] and len(result["ids"]) == 4
        texts = [mem.get(i).text for i in result["ids"]]
        assert " ".join(texts) == long and max(map(len, texts)) <= 1500
    finally:
        mem.close()


def test_split_text():
    assert split_text("short", 10) == ["short"]
    assert split_text("aaaa bbbb cccc", 9) == ["aaaa bbbb", "cccc"]
    assert split_text("x" * 25, 10) == ["x" * 10, "x" * 10, "x" * 5]  # one long word
    assert split_text("One. Two three four.", 12) == ["One.", "Two three", "four."]
    para = "first para\n\nsecond one here"
    assert split_text(para, 20) == ["first para", "second one here"]


def test_overflow_summarize(mem, server, llm, clock):
    limits = Limits(max_entry_chars=100, overflow="summarize")
    am = agent(mem, llm, clock, limits=limits)
    am.consolidation = Consolidation(enabled=False)
    alice = am.event("telegram", 42, 7)
    long = "Alice explained at length why she prefers green tea. " * 4
    server.push("Alice prefers green tea.")
    _, report = turn(am, alice, long, "ok")
    (entry,) = report.short_term
    assert entry.text == "Alice prefers green tea."
    parts = [r.text for r in report.stored if r.metadata["role"] == "user"]
    assert " ".join(parts) == long.strip() and len(parts) == 4  # history: split, repeats kept
    # A failing or too long summary: split instead, and reported.
    server.push((500, "down"), "x" * 101)
    for _ in range(2):
        _, report = turn(am, alice, long + "again", "ok")
        assert len(report.short_term) > 1 and all(len(r.text) <= 100 for r in report.short_term)
        assert [f.trigger for f in report.failures] == ["summarize"]


# -- the memory cap ---------------------------------------------------------------------------


def test_memory_cap_evicts_least_important_least_used_oldest(
    make_store, word_embedder, clock, caplog
):
    mem = make_store("cap", word_embedder)
    try:
        am = agent(mem, clock=clock, limits=Limits(max_memories=5))
        am.context_options["track_access"] = False  # only the search below counts
        alice = am.event("telegram", 42, 7)
        scope = alice.fields
        t = time.time() - 1000
        keep = [
            mem.add(
                "pinned allergy peanuts", importance=0.0, evergreen=True, created_at=t, **scope
            ),
            mem.add("important fact one", importance=0.9, created_at=t, **scope),
            mem.add("important fact two", importance=0.9, created_at=t, **scope),
        ]
        used = mem.add("used trivia", importance=0.1, created_at=t, **scope)
        unused_new = mem.add("unused trivia new", importance=0.1, created_at=t + 10, **scope)
        unused_old = mem.add("unused trivia old", importance=0.1, created_at=t, **scope)
        lowest = mem.add("lowest trivia", importance=0.05, created_at=t + 500, **scope)
        mem.add("someone else", importance=0.0, user_id="bob")
        mem.search("used trivia", 1, track_access=True, **scope)
        with caplog.at_level(logging.INFO, logger="memlane.agent"):
            _, report = turn(am, alice, "hi", "hello")  # 7 memories, cap 5
        evicted = [r.id for r in report.evicted]
        assert evicted == [lowest.id, unused_old.id]
        left = {r.id for r in mem.list("memories", limit=100, **scope)}
        assert left == {*(r.id for r in keep), used.id, unused_new.id}
        assert mem.count("memories", user_id="bob") == 1  # another scope is not counted
        assert caplog.records and any("evicted memory" in r.getMessage() for r in caplog.records)
        # Within the cap: nothing evicted.
        _, report = turn(am, alice, "again", "hello")
        assert report.evicted == []
    finally:
        mem.close()


def test_memory_cap_never_evicts_evergreen(mem, clock):
    am = agent(mem, clock=clock, limits=Limits(max_memories=2))
    alice = am.event("telegram", 42, 7)
    pinned = [mem.add(f"evergreen fact {i}", evergreen=True, **alice.fields) for i in range(3)]
    plain = mem.add("plain fact", importance=1.0, **alice.fields)
    _, report = turn(am, alice, "hi", "hello")
    assert [r.id for r in report.evicted] == [plain.id]
    assert {r.id for r in mem.list("memories", **alice.fields)} == {r.id for r in pinned}


# -- adapters -------------------------------------------------------------------------------------


def openai_tool_call(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    body = completion("")
    body["choices"][0]["message"] = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
        ],
    }
    return body


def test_openai_loop(mem):
    def remember(body):
        system = body["messages"][0]["content"]
        assert system.startswith("Be brief.") and TOOL_INSTRUCTIONS in system
        assert {t["function"]["name"] for t in body["tools"]} >= {"remember", "recall", "weather"}
        return openai_tool_call("c1", "remember", {"content": "Alice is allergic to peanuts"})

    def weather(body):
        result = json.loads(body["messages"][-1]["content"])
        assert result["ok"] and body["messages"][-1]["tool_call_id"] == "c1"
        return openai_tool_call("c2", "weather", {"city": "Lisbon"})

    def answer(body):
        assert json.loads(body["messages"][-1]["content"]) == {"ok": True, "result": "sunny"}
        return "Noted, and it is sunny."

    def second(body):
        assert "Alice is allergic to peanuts" in body["messages"][0]["content"]
        return "No peanuts, then."

    extra = {"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}
    with (
        ScriptedChatServer([remember, weather, answer, second]) as model_server,
        OpenAIChat("agent", base_url=model_server.base_url, max_retries=0) as model,
    ):
        am = agent(mem)
        loop = am.openai(model.chat, tools=[extra], tool_handler=lambda name, args: "sunny")
        alice = am.event("telegram", 42, 7)
        given = [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "I'm allergic to peanuts. Weather in Lisbon?"},
        ]
        result = loop.run(alice, given)
        assert result.reply == "Noted, and it is sunny."
        assert [m["role"] for m in result.messages] == [
            "system",
            "user",
            "assistant",
            "tool",
            "assistant",
            "tool",
            "assistant",
        ]
        assert result.report.ok
        assert [r.text for r in result.report.stored][1] == "Noted, and it is sunny."
        # The next turn, on WhatsApp (linked): the memory is in the context.
        bob_phone = am.event("whatsapp", "+1555", 9)
        result = loop.run(bob_phone, [{"role": "user", "content": "A snack with peanuts?"}])
        assert result.reply == "No peanuts, then."
    assert [r.text for r in mem.list("memories", user_id="alice")] == [
        "Alice is allergic to peanuts"
    ]


def test_anthropic_loop(mem):
    seen: list[dict[str, Any]] = []

    def create(system, messages, tools=None):
        seen.append({"system": system, "messages": messages, "tools": tools})
        last = messages[-1]
        if isinstance(last["content"], str):  # the user's message
            return {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Let me note that."},
                    {
                        "type": "tool_use",
                        "id": "tu1",
                        "name": "remember",
                        "input": {"content": "Alice likes jazz"},
                    },
                    {"type": "tool_use", "id": "tu2", "name": "nope", "input": {}},
                ],
                "stop_reason": "tool_use",
            }
        results = {b["tool_use_id"]: b for b in last["content"]}
        assert json.loads(results["tu1"]["content"])["ok"] and "is_error" not in results["tu1"]
        assert results["tu2"]["is_error"] is True
        return {"role": "assistant", "content": [{"type": "text", "text": "Jazz it is."}]}

    am = agent(mem)
    alice = am.event("telegram", 42, 7)
    result = am.anthropic(create).run(
        alice, [{"role": "user", "content": "I like jazz"}], system="Hi."
    )
    assert result.reply == "Jazz it is."
    assert (
        seen[0]["system"].startswith("Hi.\n\n<memlane-memory")
        and TOOL_INSTRUCTIONS in seen[0]["system"]
    )
    assert {t["name"] for t in seen[0]["tools"]} == {
        "remember",
        "recall",
        "forget",
        "search_knowledge",
        "notes_append",
        "notes_replace",
    }
    assert [r.text for r in result.report.stored] == ["I like jazz", "Jazz it is."]
    assert mem.list("memories", **alice.fields)[0].text == "Alice likes jazz"


# -- async ------------------------------------------------------------------------------------


class AsyncOnly:
    """An LLM with only acomplete (the async protocol), scripted."""

    def __init__(self, answers: list[Any]) -> None:
        self.answers = answers
        self.calls = 0

    async def acomplete(self, messages):
        self.calls += 1
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        await asyncio.sleep(0)
        return answer


def test_async_twins_and_loops(mem, server, llm, clock):
    server.push(ops({"op": "remember", "content": "Alice likes rooibos"}))

    async def go():
        am = agent(mem, llm, clock, reflection=Reflection(every=1))
        alice = am.event("telegram", 42, 7)
        msgs = await am.abefore(alice, [{"role": "user", "content": "rooibos is great"}])
        assert TOOL_INSTRUCTIONS in msgs[0]["content"]
        report = await am.aafter(alice, msgs, "It is.")
        assert report.ok and [r.text for r in report.reflection.added] == ["Alice likes rooibos"]

        async def chat(messages, tools=None):
            assert "rooibos" in messages[0]["content"]
            return {"role": "assistant", "content": "Rooibos again?"}

        am.reflection = Reflection(enabled=False)
        result = await am.openai(chat).arun(alice, [{"role": "user", "content": "tea?"}])
        assert result.reply == "Rooibos again?" and result.report.ok

        async def create(system, messages, tools=None):
            return {"role": "assistant", "content": [{"type": "text", "text": "Sure."}]}

        result = await am.anthropic(create).arun(alice, [{"role": "user", "content": "ok"}])
        assert result.reply == "Sure."
        system, _ = await am.abefore_anthropic(alice, "S", [{"role": "user", "content": "x"}])
        assert system.startswith("S\n\n")

    asyncio.run(go())
    assert mem.count(MESSAGES, user_id="alice") == 6


def test_async_only_llm(mem, clock):
    fake = AsyncOnly([RuntimeError("down"), ops({"op": "remember", "content": "Alice likes chai"})])

    async def go():
        am = agent(mem, fake, clock, reflection=Reflection(every=1))
        alice = am.event("telegram", 42, 7)
        report = await am.aafter(alice, [{"role": "user", "content": "chai"}], "yes")
        assert [f.trigger for f in report.failures] == ["reflection"]
        report = await am.aafter(alice, [{"role": "user", "content": "chai!"}], "yes")
        assert report.ok and [r.text for r in report.reflection.added] == ["Alice likes chai"]
        # The sync after() cannot call an async-only LLM: reported, not raised.
        report = am.after(alice, [{"role": "user", "content": "more"}], "ok")
        assert "acomplete" in report.failures[0].error or "complete" in report.failures[0].error

    asyncio.run(go())
    assert fake.calls == 2


def test_without_llm_the_llm_triggers_do_nothing(mem, clock):
    am = AgentMemory(
        mem,
        SCOPES,
        clock=clock,
        reflection=Reflection(every=1),
        consolidation=Consolidation(threshold=1, max_age=0),
    )
    alice = am.event("telegram", 42, 7)
    long = [{"role": "user", "content": "go"}, *tool_steps(20)]
    assert am.before(alice, long)[1:] == long  # no compaction without a model
    report = am.after(alice, long, "done")
    assert report.ok and report.reflection is None and report.consolidation is None
    assert mem.count(SHORT_TERM, **alice.fields) == 1


def test_the_logger_reports_failures(mem, server, llm, clock, caplog):
    server.push((500, "boom"))
    am = agent(mem, llm, clock, reflection=Reflection(every=1))
    with caplog.at_level(logging.WARNING, logger="memlane.agent"):
        turn(am, am.event("telegram", 42), "hi", "hello")
    assert any("reflection failed" in r.getMessage() for r in caplog.records)


def test_async_memory_and_the_step_limit(word_embedder):
    from memlane import AsyncMemory

    amem = AsyncMemory(memory=Memory(None, word_embedder))
    try:
        am = AgentMemory(amem, SCOPES, **OFF)
        assert am.memory is amem.sync
        alice = am.event("telegram", 42, 7)
        calls = []

        def looping(messages, tools=None):
            calls.append(1)
            return openai_tool_call(f"c{len(calls)}", "recall", {"query": "tea"})

        result = am.openai(looping, max_steps=3).run(alice, [{"role": "user", "content": "tea?"}])
        assert len(calls) == 3 and result.reply == ""
        assert [r.text for r in result.report.stored] == ["tea?"]  # the turn is kept
    finally:
        amem.sync.close()


def test_evergreen_over_the_cap_is_logged(mem, caplog):
    am = agent(mem, limits=Limits(max_memories=1))
    alice = am.event("telegram", 42, 7)
    for i in range(3):
        mem.add(f"evergreen {i}", evergreen=True, **alice.fields)
    with caplog.at_level(logging.WARNING, logger="memlane.agent"):
        _, report = turn(am, alice, "hi", "hello")
    assert report.evicted == [] and mem.count("memories", **alice.fields) == 3
    assert any("never evicted" in r.getMessage() for r in caplog.records)


def test_a_failing_embedder_in_before_is_reported_not_raised(word_embedder):
    from memlane import EmbedderUnavailableError

    class Flaky:
        name, dimension, down = word_embedder.name, word_embedder.dimension, False

        def embed(self, text):
            if self.down:
                raise EmbedderUnavailableError("embedding service down")
            return word_embedder.embed(text)

        def embed_batch(self, texts):
            if self.down:
                raise EmbedderUnavailableError("embedding service down")
            return word_embedder.embed_batch(texts)

    flaky = Flaky()
    mem = Memory(None, flaky)
    try:
        am = agent(mem)
        alice = am.event("telegram", 42, 7)
        mem.add("Alice likes tea", **alice.fields)
        flaky.down = True
        msgs = am.before(alice, [{"role": "user", "content": "coffee or tea?"}])
        assert (
            TOOL_INSTRUCTIONS in msgs[0]["content"] and "Alice likes tea" not in msgs[0]["content"]
        )
        flaky.down = False
        report = am.after(alice, msgs, "tea")
        assert [f.trigger for f in report.failures] == ["context"]
        assert "embedding service down" in report.failures[0].error
        assert [r.text for r in report.stored] == ["coffee or tea?", "tea"]
    finally:
        mem.close()


def test_trigger_outputs_keep_to_the_length_cap(make_store, word_embedder, server, llm, clock):
    mem = make_store("cap-outputs", word_embedder)
    try:
        limits = Limits(max_entry_chars=200)
        am = agent(mem, llm, clock, limits=limits, reflection=Reflection(every=1))
        alice = am.event("telegram", 42, 7)
        long = " ".join(f"Alice visited tea house number {i} in Kyoto." for i in range(15))
        assert len(long) > 600
        server.push(
            ops({"op": "remember", "content": long, "importance": 0.7}),
            json.dumps({"decisions": []}),  # the check of the new fact: each part kept
        )
        _, report = turn(am, alice, "I toured Kyoto", "Lovely")
        assert report.ok, report.failures
        (added,) = report.reflection.added
        assert any(what.endswith(added.id) and n == 4 for what, n in report.splits)
        parts = sorted(
            mem.list(
                "memories",
                filters={"split_group": mem.get(added.id).metadata["split_group"]},
                **alice.fields,
            ),
            key=lambda r: r.metadata["part"],
        )
        assert [r.metadata["part"] for r in parts] == [1, 2, 3, 4] and parts[0].id == added.id
        assert " ".join(r.text for r in parts) == long
        assert all(len(r.text) <= 200 and r.importance == 0.7 for r in parts)
    finally:
        mem.close()
