"""The agent layer attacked where scope, versions and delivery meet: ``forget``, a kept
reflection answer and a resumed consolidation keep to the store's ``default_scope``;
eviction and reflection see current memories only; a summary on the turn's path keeps to
``upkeep_timeout`` and loses nothing; a message delivered again is no new turn. On both
backends."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from chat_server import ScriptedChatServer
from conftest import StoreFactory, WordHashEmbedder
from memlane import AgentMemory, MemoryTools, reflect
from memlane.agent import Limits, OpenAIChat, Profiles, Reflection, SessionScope
from memlane.agent.caps import split_text
from memlane.agent.upkeep import Job
from memlane.agent.upkeep.jobs import owner_of
from upkeep_scripts import QUIET, Model, agent, returns, turn

# -- default_scope: what an agent's tools and jobs reach -------------------------------------


def test_forget_keeps_to_the_stores_default_scope(make_store: StoreFactory) -> None:
    """Agent A's tools for Alice cannot forget agent B's memory of Alice by its id, nor
    read its text: the answer is the one for an id that does not exist."""
    mem = make_store("forget-a", WordHashEmbedder(), default_scope={"agent_id": "A"})
    secret = mem.add("alice's bank pin is 1234", agent_id="B", user_id="alice")
    mine = mem.add("alice drinks green tea", user_id="alice")
    tools = MemoryTools(mem, {"user_id": "alice"})
    out = tools.handle_tool_call("forget", {"id": secret.id})
    assert out["ok"] is False and out["error"]["type"] == "not_found"
    assert "1234" not in json.dumps(out)
    assert secret.id in mem and mem.get(secret.id).text == "alice's bank pin is 1234"
    missing = tools.handle_tool_call("forget", {"id": "no-such-id"})
    assert missing["error"]["message"] == out["error"]["message"].replace(secret.id, "no-such-id")
    done = tools.handle_tool_call("forget", {"id": mine.id})
    assert done == {"ok": True, "id": mine.id, "forgotten": "alice drinks green tea"}
    assert mine.id not in mem


def test_a_kept_plan_or_tag_keeps_to_the_stores_default_scope(make_store: StoreFactory) -> None:
    """Jobs of agent A (default_scope) found again: a kept reflection answer naming agent
    B's memory of the same contact, and a tagged record whose sources name B's short-term
    entry, leave B's records as they were."""
    mem = make_store("jobs-a", WordHashEmbedder(), default_scope={"agent_id": "A"})
    scopes = SessionScope("per-peer")
    owner = owner_of("memories", scopes, mem.default_scope)
    alice = scopes.resolve("telegram", 42, 7)
    secret = mem.add("Alice's code is 1234", table="memories", agent_id="B", **alice.fields)
    entry = mem.add("Alice said hi to B", table="short_term", agent_id="B", **alice.fields)
    planned = Job("reflection", alice, 1_000.0, owner=owner)
    update = {"op": "update", "memory": 1, "content": "Alice's code is 0000"}
    plan = {"raw": json.dumps({"operations": [update]}), "shown": [secret.id]}
    mem.jobs.put(planned.key, planned.with_plan(plan).dumps())
    tagged = Job("consolidation", alice, 1_001.0, owner=owner)
    mem.jobs.put(tagged.key, tagged.dumps())
    mem.add(
        "a summary",
        table="memories",
        metadata={"upkeep_job": tagged.id, "consolidated_from": [entry.id]},
        **alice.fields,
    )
    am = agent(mem, Model(json.dumps({"operations": []})))
    turn(am, alice, "hello")
    assert am.drain(timeout=60)
    kept = mem.get(secret.id)
    assert kept.text == "Alice's code is 1234" and kept.valid_to is None
    assert mem.get(entry.id).text == "Alice said hi to B"
    assert mem.count("memories", filters={"valid_to": None}, agent_id="B") == 1
    assert mem.jobs.items() == []
    am.close()


# -- superseded versions are history, not memories ------------------------------------------


def test_eviction_counts_and_chooses_current_memories_only(make_store: StoreFactory) -> None:
    """Three current memories under a cap of 3 stay, however many versions one fact has;
    past the cap, the lowest-ranked current memory goes, never a superseded version, and
    superseded versions push no current memory out."""
    mem = make_store("evict", WordHashEmbedder())
    am = AgentMemory(mem, upkeep="inline", limits=Limits(max_memories=3), **QUIET)
    ev = am.event("telegram", 42, chat_id=7)
    home = mem.add("Alice lives in Paris", importance=0.9, **ev.fields)
    vegan = mem.add("Alice is vegan", importance=0.5, **ev.fields)
    mem.add("Alice has a cat", importance=0.6, **ev.fields)
    berlin = mem.supersede(home.id, "Alice lives in Berlin")
    mem.supersede(berlin.id, "Alice lives in Oslo")
    bike = mem.add("Alice's bike is red", importance=0.05, **ev.fields)
    blue = mem.supersede(bike.id, "Alice's bike is blue", importance=0.95)
    # Four current memories (Oslo 0.9, vegan 0.5, cat 0.6, blue bike 0.95), three
    # superseded versions (Paris, Berlin, the red bike at 0.05): one memory goes.
    report = am.after(ev, [{"role": "user", "content": "hi"}], "hello")
    assert [r.text for r in report.evicted] == ["Alice is vegan"]
    assert vegan.id not in mem and bike.id in mem and blue.id in mem
    current = mem.list("memories", limit=10, filters={"valid_to": None}, **ev.fields)
    assert sorted(r.text for r in current) == [
        "Alice has a cat",
        "Alice lives in Oslo",
        "Alice's bike is blue",
    ]
    again = am.after(ev, [{"role": "user", "content": "hi again"}], "hello")
    assert again.evicted == []
    am.close()


def test_eviction_keeps_to_exactly_the_agents_scope(make_store: StoreFactory) -> None:
    """An agent without an ``agent_id`` past its cap evicts its own memories only, never
    the lower-ranked ones of an agent that has one (in the same contact's scope)."""
    mem = make_store("evict-exact", WordHashEmbedder())
    am = AgentMemory(mem, upkeep="inline", limits=Limits(max_memories=2), **QUIET)
    ev = am.event("telegram", 42, chat_id=7)
    others = [
        mem.add(f"agent A's note {i}", importance=0.01, agent_id="A", **ev.fields) for i in range(3)
    ]
    mem.add("Alice is vegan", importance=0.5, **ev.fields)
    mem.add("Alice has a cat", importance=0.6, **ev.fields)
    mem.add("Alice lives in Oslo", importance=0.9, **ev.fields)
    report = am.after(ev, [{"role": "user", "content": "hi"}], "hello")
    assert [r.text for r in report.evicted] == ["Alice is vegan"]
    assert all(r.id in mem for r in others)
    am.close()


class Prompted:
    """A model that keeps reflection's prompt and changes nothing."""

    prompt = ""

    def complete(self, messages: Any) -> str:
        self.prompt = messages[-1]["content"]
        return '{"operations": []}'


def test_reflection_shows_current_memories_only(make_store: StoreFactory) -> None:
    """The scope's newest memories that fill reflection's list leave superseded versions
    out (the search beside them already does)."""
    mem = make_store("reflect", WordHashEmbedder())
    ev = SessionScope().resolve("telegram", 42, chat_id=7)
    old = mem.add("Alice lives in Paris", **ev.fields)
    mem.supersede(old.id, "Alice lives in Berlin")
    trip = mem.add("Alice booked a trip to Lisbon", type="episodic", **ev.fields)
    mem.supersede(trip.id, "Alice cancelled the Lisbon trip")
    llm = Prompted()
    report = reflect(mem, llm, ["user: qqq"], scope=ev.fields)
    listed = llm.prompt.split("Conversation:")[0]
    assert "Alice lives in Berlin" in listed and "Alice cancelled the Lisbon trip" in listed
    assert "Alice lives in Paris" not in listed and "booked a trip" not in listed
    assert old.id not in report.shown and trip.id not in report.shown


# -- a summary on the turn's path, within upkeep_timeout ------------------------------------


class Gate:
    """A scripted answer that waits until ``release`` (or a minute), then answers."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()
        self.answered = threading.Event()

    def __call__(self, body: dict[str, Any]) -> str:
        self.entered.set()
        self.release.wait(60)
        self.answered.set()
        return "a summary that came too late"


@pytest.fixture
def slow_llm(server: ScriptedChatServer) -> Any:
    """A client that would wait for the scripted server's answer for a minute."""
    with OpenAIChat("scripted", base_url=server.base_url, max_retries=0, timeout=60) as c:
        yield c


LONG = " ".join(f"Fact {i}: Alice's locker {i} holds item {i * 7}." for i in range(40))


@pytest.mark.parametrize("upkeep", ["background", "inline"])
def test_a_long_remember_waits_for_no_model_in_the_background(
    make_store: StoreFactory, server: ScriptedChatServer, slow_llm: OpenAIChat, upkeep: str
) -> None:
    """``remember`` of a text past the cap with ``overflow="summarize"``, the model not
    answering: in the background the text is split at once, as ``after`` splits an entry
    (the upkeep_timeout of two minutes never waited for); inline the summary is an upkeep
    call, and the call returns at the timeout with the text in parts, the late summary
    thrown away. Either way the text is stored in parts."""
    gate = Gate()
    server.script.extend([gate] * 3)
    mem = make_store("remember", WordHashEmbedder())
    limits = Limits(max_entry_chars=200, overflow="summarize")
    timeout = 120.0 if upkeep == "background" else 0.3
    am = AgentMemory(
        mem, llm=slow_llm, upkeep=upkeep, limits=limits, upkeep_timeout=timeout, **QUIET
    )
    ev = am.event("telegram", 42, chat_id=7)
    tools = am.memory_tools(ev)
    try:
        out = returns(lambda: tools.handle_tool_call("remember", {"content": LONG}))
        assert out, "remember waited for a model"
        assert not gate.answered.is_set()
        result = out[0]
        assert result["ok"] is True and result["stored"] is True
        pieces = split_text(LONG, 200)
        assert len(result["ids"]) == len(pieces) > 1
        assert [mem.get(i).text for i in result["ids"]] == pieces
    finally:
        gate.release.set()
    if upkeep == "inline":
        assert gate.answered.wait(30)
    am.close()
    texts = [r.text for r in mem.list("memories", limit=100, **ev.fields)]
    assert sorted(texts) == sorted(pieces) and "a summary that came too late" not in texts


def test_an_inline_turn_keeps_to_upkeep_timeout(
    make_store: StoreFactory, server: ScriptedChatServer, slow_llm: OpenAIChat
) -> None:
    """``after`` with inline upkeep: the short-term entry of a long turn is not held by a
    model that does not answer its summary; the entry is stored in parts, and the
    failure is in the report."""
    gate = Gate()
    server.script.extend([gate] * 3)
    mem = make_store("inline", WordHashEmbedder())
    limits = Limits(max_entry_chars=300, overflow="summarize")
    am = AgentMemory(mem, llm=slow_llm, upkeep="inline", limits=limits, upkeep_timeout=0.3, **QUIET)
    ev = am.event("telegram", 42, chat_id=7)
    user = LONG[:290]
    try:
        out = returns(lambda: am.after(ev, [{"role": "user", "content": user}], "Noted."))
        assert out, "after waited for a model past upkeep_timeout"
        assert gate.entered.is_set() and not gate.answered.is_set()
        report = out[0]
        assert any(f.trigger == "summarize" for f in report.failures)
        digest = f"user: {user}\nassistant: Noted."
        parts = [r.text for r in report.short_term]
        assert parts == split_text(digest, 300) and len(parts) > 1
        assert [r.text for r in report.stored] == [user, "Noted."]
    finally:
        gate.release.set()
    assert gate.answered.wait(30)
    assert mem.count("short_term", **ev.fields) == len(parts)
    am.close()


# -- a message delivered again ---------------------------------------------------------------


@pytest.mark.parametrize("length", ["short", "split"])
def test_a_redelivered_message_is_no_new_turn(make_store: StoreFactory, length: str) -> None:
    """The same message id delivered twice within the dedup window: one history record,
    one short-term entry, one turn towards reflection and one message in the profile."""
    mem = make_store("redelivered", WordHashEmbedder())
    model = Model(json.dumps({"operations": []}))
    am = agent(
        mem,
        model,
        upkeep="inline",
        reflection=Reflection(every=2),
        profiles=Profiles(),
        limits=Limits(max_entry_chars=60),
    )
    text = "I moved to Oslo" if length == "short" else "I moved to Oslo. " * 8
    reports = []
    for _ in range(2):  # the platform delivers message 555 again
        ev = am.event("telegram", 42, chat_id=7, message_id=555)
        reports.append(am.after(ev, [{"role": "user", "content": text}], "Noted."))
    first, again = reports
    assert first.short_term and all(r.duplicate is None for r in first.short_term)
    assert again.short_term == []
    assert again.stored[0].duplicate == "window"
    assert mem.count("short_term", **ev.fields) == len(first.short_term)
    users = [r for r in first.stored if r.metadata.get("role") == "user"]
    assert len(users) == (1 if length == "short" else 3)
    assert mem.count("messages", filters={"role": "user"}, **ev.history) == len(users)
    assert model.prompts == []  # one turn: reflection (every 2) not due
    profile = am.contact(ev)
    assert profile is not None and profile.message_count == 1
    nxt = am.event("telegram", 42, chat_id=7, message_id=556)
    am.after(nxt, [{"role": "user", "content": "And I got a dog"}], "Nice.")
    assert len(model.prompts) == 1  # the second turn
    profile = am.contact(nxt)
    assert profile is not None and profile.message_count == 2
    am.close()
