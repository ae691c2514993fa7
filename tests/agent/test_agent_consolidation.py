"""Short-term tier and consolidation with a scripted LLM behind the loopback chat server."""

from __future__ import annotations

import asyncio
import json

import pytest

from chat_server import ScriptedChatServer
from memlane import AsyncMemory, InvalidArgumentError
from memlane.agent.consolidation import (
    SHORT_TERM,
    aconsolidate,
    add_short_term,
    complete_action,
    consolidate,
    parse_summary,
)
from memlane.agent.llm import OpenAIChat
from memlane.agent.parsing import ParseError

SCOPE = {"user_id": "alice"}
GOOD = {
    "summary": "Alice planned a trip to Lisbon and booked a hotel.",
    "facts": ["Alice is vegetarian", "Alice lives in Berlin", "Alice is vegetarian"],
    "pending": ["Send Alice the train times"],
    "tone": "friendly",
    "preferences": ["window seats"],
    "confidence": 0.9,
}


def _entries(mem, n, action="a1", scope=SCOPE):
    return [
        add_short_term(mem, f"step {i}: looked at hotels in Lisbon", action, scope=scope)
        for i in range(n)
    ]


def test_complete_action_cleans_up(mem):
    _entries(mem, 3, "a1")
    _entries(mem, 2, "a2")
    _entries(mem, 2, "a1", scope={"user_id": "bob"})
    assert complete_action(mem, "a1", scope=SCOPE) == 3
    assert mem.count(SHORT_TERM, **SCOPE) == 2
    assert mem.count(SHORT_TERM, user_id="bob") == 2
    with pytest.raises(InvalidArgumentError):
        complete_action(mem, "")


def test_below_threshold_skips(mem, server, llm):
    _entries(mem, 11)
    report = consolidate(mem, llm, scope=SCOPE)
    assert report.status == "skipped" and report.pending_entries == 11
    assert server.requests == []


def test_consolidates_the_oldest_batch(mem, server, llm):
    entries = _entries(mem, 20)
    server.push("Here you go:\n```json\n" + json.dumps(GOOD) + "\n```\nAnything else?")
    report = consolidate(mem, llm, scope=SCOPE)
    assert report.status == "consolidated", report.error
    assert report.removed == [e.id for e in entries[:12]]
    assert mem.count(SHORT_TERM, **SCOPE) == 8 == report.pending_entries
    left = {r.id for r in mem.list(SHORT_TERM, limit=100, **SCOPE)}
    assert left == {e.id for e in entries[12:]}
    ep = report.episodic
    assert ep is not None and ep.type == "episodic" and ep.user_id == "alice"
    assert mem.get(ep.id).text == GOOD["summary"]
    assert ep.metadata["pending"] == GOOD["pending"] and ep.metadata["tone"] == "friendly"
    assert ep.metadata["preferences"] == ["window seats"] and ep.metadata["confidence"] == 0.9
    assert ep.metadata["consolidated_from"] == report.removed
    facts = sorted(r.text for r in mem.list("memories", type="semantic", **SCOPE))
    assert facts == ["Alice is vegetarian", "Alice lives in Berlin"]  # duplicates dropped
    # The prompt held the 12 oldest entries and asked for the JSON keys.
    (req,) = server.requests
    prompt = req["messages"][-1]["content"]
    assert prompt.count("looked at hotels") == 12 and "step 0:" in prompt
    assert "step 12:" not in prompt
    assert '"facts"' in req["messages"][0]["content"]


def test_configurable_threshold_and_batch(mem, server, llm):
    _entries(mem, 5)
    server.push(json.dumps(GOOD))
    report = consolidate(mem, llm, scope=SCOPE, threshold=5, batch=2)
    assert report.status == "consolidated" and len(report.removed) == 2
    assert mem.count(SHORT_TERM, **SCOPE) == 3


@pytest.mark.parametrize(
    "reply",
    [
        "I could not do that, sorry.",
        '{"summary": "x", "facts": "not a list"}'.replace('"not a list"', "5"),
        '{"facts": ["a"]}',
        '```json\n{"summary": "cut off',
        (500, "internal error"),
        (400, "bad"),
        {"choices": []},
    ],
)
def test_failures_lose_nothing(mem, server, llm, reply):
    entries = _entries(mem, 30)
    server.push(reply)
    before = len(mem)
    report = consolidate(mem, llm, scope=SCOPE)
    assert report.status == "failed" and report.error
    assert report.removed == [] and report.episodic is None
    assert len(mem) == before
    assert all(e.id in mem for e in entries)
    # The next attempt, with a good answer, works.
    server.push(json.dumps(GOOD))
    assert consolidate(mem, llm, scope=SCOPE).status == "consolidated"


def test_unreachable_llm_is_reported(mem):
    with ScriptedChatServer() as s:
        url = s.base_url
    _entries(mem, 1)
    llm = OpenAIChat("m", base_url=url, max_retries=0)
    report = consolidate(mem, llm, scope=SCOPE, force=True)
    assert report.status == "failed" and "LLMError" in (report.error or "")
    assert mem.count(SHORT_TERM) == 1


def test_parse_summary():
    out = parse_summary('{"summary": " s ", "facts": "one fact", "confidence": 7}')
    assert out == {
        "summary": "s",
        "facts": ["one fact"],
        "pending": [],
        "tone": "",
        "preferences": [],
        "confidence": 1.0,
    }
    for bad in ['{"summary": ""}', '{"summary": "s", "confidence": "high"}', "[]"]:
        with pytest.raises(ParseError):
            parse_summary(bad)


def test_aconsolidate_with_async_memory(word_embedder, server):
    async def go():
        mem = AsyncMemory(None, word_embedder)
        llm = OpenAIChat("scripted", base_url=server.base_url, max_retries=0)
        try:
            for i in range(3):
                add_short_term(mem.sync, f"async step {i}", "a", scope=SCOPE)
            skipped = await aconsolidate(mem, llm, scope=SCOPE)
            server.push("not json", json.dumps(GOOD))
            failed = await aconsolidate(mem, llm, scope=SCOPE, threshold=3)
            done = await aconsolidate(mem, llm, scope=SCOPE, threshold=3)
            return skipped, failed, done, await mem.count(SHORT_TERM)
        finally:
            await llm.aclose()
            await mem.close()

    skipped, failed, done, left = asyncio.run(go())
    assert skipped.status == "skipped"
    assert failed.status == "failed" and "ParseError" in (failed.error or "")
    assert done.status == "consolidated" and len(done.removed) == 3 and left == 0


def test_entries_of_a_completed_action_can_come_again(mem):
    meta = {"source": "telegram", "contact": "42", "message_id": "m1"}
    add_short_term(mem, "user said hello", "a1", scope=SCOPE, metadata=meta)
    assert complete_action(mem, "a1", scope=SCOPE) == 1
    again = add_short_term(mem, "user said hello", "a2", scope=SCOPE, metadata=meta)
    assert again.duplicate is None and mem.count(SHORT_TERM) == 1


def test_episodic_memory_says_why_and_what_kinds(mem, server, llm):
    # OrcBot's metadata: the reason of a consolidation and the kinds of messages it summarised.
    for i, kind in enumerate(["voice", None, "photo", "voice"]):
        meta = {"messageType": kind} if kind else None
        add_short_term(mem, f"entry {i}", "a1", scope=SCOPE, metadata=meta)
    server.push(json.dumps(GOOD))
    full = consolidate(mem, llm, scope=SCOPE, threshold=4, batch=4)
    assert full.episodic is not None
    assert full.episodic.metadata["reason"] == "threshold"
    assert full.episodic.metadata["messageTypes"] == ["photo", "text", "voice"]
    add_short_term(mem, "one more", "a1", scope=SCOPE)
    server.push(json.dumps(GOOD))
    forced = consolidate(mem, llm, scope=SCOPE, force=True)
    assert forced.episodic is not None
    assert forced.episodic.metadata["reason"] == "forced"
    assert forced.episodic.metadata["messageTypes"] == ["text"]
    # A caller's metadata names its own reason.
    add_short_term(mem, "and another", "a1", scope=SCOPE)
    server.push(json.dumps(GOOD))
    named = consolidate(mem, llm, scope=SCOPE, force=True, metadata={"reason": "max_age"})
    assert named.episodic is not None and named.episodic.metadata["reason"] == "max_age"
    stored = mem.get(named.episodic.id).metadata
    assert stored["reason"] == "max_age" and stored["messageTypes"] == ["text"]


class _Answers:
    def __init__(self, answer: str) -> None:
        self.answer = answer

    def complete(self, messages):
        return self.answer


@pytest.mark.parametrize(
    "answer",
    [
        # Short facts past the count an answer may hold, and a runaway answer's size.
        json.dumps({"summary": "chat", "facts": [f"Alice likes {i}" for i in range(101)]}),
        json.dumps({"summary": "chat", "facts": ["Alice likes " + "tea " * 20_000]}),
    ],
    ids=["101 facts", "80k characters"],
)
def test_a_runaway_answer_is_refused_whole(make_store, answer):
    from conftest import WordHashEmbedder

    mem = make_store("runaway", WordHashEmbedder())
    entries = _entries(mem, 2)
    report = consolidate(mem, _Answers(answer), scope=SCOPE, force=True)
    assert report.status == "failed" and "more than the" in (report.error or "")
    assert mem.count("memories") == 0
    assert sorted(r.id for r in mem.list(SHORT_TERM, **SCOPE)) == sorted(e.id for e in entries)
