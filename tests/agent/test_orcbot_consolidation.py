"""OrcBot's episodic consolidation as AgentMemory does it by default: each contact's turns
summarised 12 at a time (its interactionBatchSize), each episode saying why
(``reason``) and what it sums up (``messageTypes``), and the contact's 5 newest episodes in
its prompt (both backends, a scripted model behind the loopback chat server)."""

from __future__ import annotations

import json
from typing import Any

from chat_server import ScriptedChatServer
from memlane import AgentMemory, Memory
from memlane.agent import (
    SHORT_TERM,
    Compaction,
    DailyLog,
    FlushReminder,
    OpenAIChat,
    Reflection,
    SessionScope,
    add_short_term,
    consolidate,
)
from upkeep_scripts import turn

# Every trigger but consolidation off; consolidation at its defaults.
SETTINGS: dict[str, Any] = {
    "daily": DailyLog(enabled=False),
    "reflection": Reflection(enabled=False),
    "flush": FlushReminder(enabled=False),
    "compaction": Compaction(enabled=False),
    "upkeep": "inline",
    "context": {"min_score": None},
}


def summary(n: int) -> str:
    return json.dumps({"summary": f"Episode {n}: a chat about trains", "confidence": 0.5})


def test_each_contact_is_consolidated_in_batches_of_12(
    mem: Memory, server: ScriptedChatServer, llm: OpenAIChat
) -> None:
    am = AgentMemory(mem, SessionScope("per-channel-peer"), llm, **SETTINGS)
    alice, bob = am.event("telegram", 1, 10), am.event("telegram", 2, 10)
    server.push(*(summary(n) for n in range(7)))
    # Interleaved: one contact's turns never fill the other's batch.
    for i in range(11):
        assert turn(am, alice, f"alice {i}").consolidation is None
        assert turn(am, bob, f"bob {i}").consolidation is None
    assert server.requests == []
    done = turn(am, alice, "alice 11").consolidation
    assert done is not None and done.status == "consolidated" and len(done.removed) == 12
    prompt = server.requests[0]["messages"][1]["content"]
    assert all(f"alice {i}" in prompt for i in range(12)) and "bob" not in prompt
    episode = mem.get(done.episodic.id)
    assert episode.type == "episodic" and episode.user_id == alice.fields["user_id"]
    assert episode.metadata["reason"] == "threshold"
    assert episode.metadata["messageTypes"] == ["text"]
    assert len(episode.metadata["consolidated_from"]) == 12
    assert mem.count(SHORT_TERM, **alice.fields) == 0
    assert mem.count(SHORT_TERM, **bob.fields) == 11
    assert turn(am, bob, "bob 11").consolidation is not None
    # Five more of Alice's batches: her prompt shows her 5 newest episodes, newest first.
    for i in range(12, 72):
        turn(am, alice, f"alice {i}")
    assert len(server.requests) == 7
    assert mem.count("memories", type="episodic", **alice.fields) == 6
    # However the message matches (no relevant memory injected here), as OrcBot does.
    am.context_options["inject_limit"] = 0
    shown = am.context(alice, "hello").sections["memories"]
    assert [line.split("Episode ")[1][0] for line in shown] == ["6", "5", "4", "3", "2"]
    am.close()


def test_consolidate_defaults_to_a_batch_of_12(
    mem: Memory, server: ScriptedChatServer, llm: OpenAIChat
) -> None:
    scope = {"user_id": "telegram:1"}
    for i in range(11):
        add_short_term(mem, f"step {i}", "act-1", scope=scope, metadata={"messageType": "photo"})
    assert consolidate(mem, llm, scope=scope).status == "skipped"
    add_short_term(mem, "step 11", "act-1", scope=scope)
    server.push(summary(0))
    report = consolidate(mem, llm, scope=scope)
    assert report.status == "consolidated" and len(report.removed) == 12
    assert report.episodic is not None
    assert report.episodic.metadata["messageTypes"] == ["photo", "text"]
    assert report.episodic.metadata["reason"] == "threshold"
