"""Automatic memory around an agent loop, in three lines: wrap the store, wrap the loop, run.

``AgentMemory`` puts the relevant memories, the room's history and the memory tools'
instructions into the system prompt before each model call, stores each turn after it,
and runs the triggers (reflection, consolidation, a flush reminder, step compaction)
and the caps by itself, on a background worker, so no turn waits for the memory LLM.

It runs offline: the agent's model and the memory LLM are small stand-ins below. With a
real model, the three lines are::

    llm = OpenAIChat("llama3", base_url="http://127.0.0.1:11434/v1")
    memory = AgentMemory(Memory("./agent-memory"), llm=llm)
    result = memory.openai(llm.chat).run(event, [{"role": "user", "content": text}])

Run: python examples/agent_memory.py
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any

from memlane import AgentMemory, Memory
from memlane.agent import Consolidation, Reflection, UpkeepResult


def agent_model(messages: list[dict[str, Any]], tools: Any = None) -> dict[str, Any]:
    """A stand-in function-calling model: remembers when asked, answers from its context."""
    system, last = messages[0]["content"], messages[-1]
    if last["role"] == "tool":
        return {"role": "assistant", "content": "Noted, I will remember that."}
    text = last["content"].lower()
    if "remember" in text and "allergic" in text:
        call = {"content": "Alice is allergic to peanuts", "importance": 0.9, "evergreen": True}
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call-1",
                    "type": "function",
                    "function": {"name": "remember", "arguments": json.dumps(call)},
                }
            ],
        }
    if "snack" in text and "allergic to peanuts" in system:  # the memory was injected
        return {"role": "assistant", "content": "How about an apple? No peanuts, as you asked."}
    return {"role": "assistant", "content": "Sounds good!"}


class MemoryLLM:
    """A stand-in for the model behind reflection and consolidation (``complete``)."""

    def complete(self, messages: Sequence[Mapping[str, str]]) -> str:
        system, prompt = messages[0]["content"], messages[-1]["content"]
        if "consolidate" in system:
            return json.dumps(
                {
                    "summary": "Alice talked about moving to Lisbon and her peanut allergy.",
                    "facts": ["Alice moved to Lisbon"],
                    "confidence": 0.8,
                }
            )
        if "Lisbon" in prompt and "long-term memory" in system:
            ops = [{"op": "remember", "content": "Alice lives in Lisbon", "type": "semantic"}]
            return json.dumps({"operations": ops})
        return json.dumps({"operations": []})


def show_upkeep(done: UpkeepResult) -> None:
    """Called on the upkeep worker with what each background job did."""
    report = done.report
    if report.reflection is not None:
        print(f"  [reflection] added {[r.text for r in report.reflection.added]}")
    if report.consolidation is not None and report.consolidation.episodic:
        n = len(report.consolidation.removed)
        print(f"  [consolidation] {n} entries -> {report.consolidation.episodic.text!r}")
    for failure in report.failures:
        print(f"  [{failure.trigger}] failed: {failure.error}")


def main() -> None:
    with tempfile.TemporaryDirectory() as folder, Memory(folder) as store:
        # 1. Wrap the store (triggers set low so that this short run shows them).
        # Reflection and consolidation run on a background worker: a turn never waits
        # for the memory LLM. What they did arrives here (and in a later turn's report).
        memory = AgentMemory(
            store,
            llm=MemoryLLM(),
            reflection=Reflection(every=3),
            consolidation=Consolidation(threshold=4, batch=4),
            on_upkeep=show_upkeep,
        )
        # 2. Wrap the loop.
        loop = memory.openai(agent_model)
        alice = memory.event("telegram", 42, chat_id=7)
        for text in (
            "Please remember that I'm allergic to peanuts.",
            "I moved to Lisbon last month.",
            "Can you suggest a snack?",
            "Thanks, see you tomorrow.",
        ):
            # 3. Run a turn: before -> model (+ memory tools) -> after.
            result = loop.run(alice, [{"role": "user", "content": text}])
            print(f"user: {text}\nassistant: {result.reply}")
            assert result.report.ok, result.report.failures
        # 4. Before reading what the upkeep wrote (or stopping): wait for it.
        assert memory.drain(timeout=60)
        memory.close()

        assert result.reply == "Sounds good!"
        stored = sorted(r.text for r in store.list("memories", **alice.fields))
        print("memories:", stored)
        assert "Alice is allergic to peanuts" in stored  # by the model's remember tool
        assert "Alice lives in Lisbon" in stored  # by reflection (turn 3)
        assert "Alice moved to Lisbon" in stored  # by consolidation (turn 4)
        assert store.count("messages", **alice.history) == 8  # four turns in the room
        print("ok")


if __name__ == "__main__":
    main()
