"""Automatic agent memory over five sessions: facts change, and memory keeps up.

An ``AgentMemory`` wraps the store. Each turn, ``before`` puts the memory block
in the system prompt and ``after`` stores the turn and runs the triggers. Here
reflection runs after every second turn. When the user says they moved,
reflection *supersedes* the old fact instead of overwriting it. When the user's
job changes, the ``remember`` tool stores the new fact and the background check
of new facts finds the old one and supersedes it. Session 5's context then holds
the new facts only, ``history`` shows both versions, and a search ``as_of`` a
date in session 2 still answers with the old ones.

The sessions are spread over simulated weeks (``clock``). The model is
whatever OpenAI-compatible server ``--base-url`` names (llama.cpp's
llama-server, Ollama, vLLM, ...); the tests run it against a scripted loopback
server, so nothing here calls an outside service.

Run: python examples/agent_loop.py --base-url http://127.0.0.1:8080/v1 --model NAME
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import memlane
from memlane.agent import (
    AgentMemory,
    Consolidation,
    DailyLog,
    OpenAIChat,
    Reflection,
    UpkeepResult,
)

DAY = 86400.0
SESSIONS = [
    ["Hi! I'm Alice and I live in Paris.", "I work as a translator."],
    ["Can you recommend a bakery near me?", "Thanks, I'll try it."],
    ["Big news: I moved to Berlin last week.", "The flat is near the river."],
    ["I'm learning German now.", "I quit translating: I teach French at a school now."],
    ["Where do I live these days?", "Thanks!"],
]
#: What the chat model saves with the ``remember`` tool, by the user's words.
SAVED = {
    "I work as a translator.": "Alice works as a translator",
    "I quit translating: I teach French at a school now.": "Alice works as a French teacher",
}


def show_reflection(done: UpkeepResult, start: float) -> None:
    """What a background reflection did (called on the upkeep worker), by the session of
    the turn that asked for it."""
    session = int((done.asked_at - start) // (7 * DAY)) + 1
    reflection = done.report.reflection
    for rec in reflection.added if reflection else []:
        print(f"[session {session}] remembered: {rec.text}")
    for rec in reflection.updated if reflection else []:
        print(f"[session {session}] superseded by: {rec.text}")
    for d in done.report.facts.decisions if done.report.facts else []:
        print(f"[session {session}] fact-check: {d.decision} ({d.reason})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", default=os.environ.get("OPENAI_BASE_URL"))
    parser.add_argument("--model", default="local")
    args = parser.parse_args()
    if not args.base_url:
        parser.error("give --base-url (an OpenAI-compatible server) or set OPENAI_BASE_URL")

    start = time.time() - 35 * DAY  # session i happens on day 7 * i
    now = [start]
    llm = OpenAIChat(args.model, base_url=args.base_url, max_retries=0)
    with tempfile.TemporaryDirectory() as folder:
        mem = memlane.Memory(folder)
        # Reflection only, after every second turn: consolidation and daily logs are
        # the other LLM triggers, left out to keep the example to one of them.
        am = AgentMemory(
            mem,
            llm=llm,
            reflection=Reflection(every=2),
            consolidation=Consolidation(enabled=False),
            daily=DailyLog(enabled=False),
            clock=lambda: now[0],
            on_upkeep=lambda done: show_reflection(done, start),
        )
        event = am.event("chat", "alice")
        for i, turns in enumerate(SESSIONS):
            now[0] = start + 7 * DAY * i
            for text in turns:
                now[0] += 60
                messages = am.before(event, [{"role": "user", "content": text}])
                if text in SAVED:  # as a chat model calling the remember tool would
                    tools = am.memory_tools(event)
                    tools.handle_tool_call("remember", {"content": SAVED[text]})
                reply = llm.complete(messages)
                # Stores the turn and hands reflection to the background worker.
                am.after(event, messages, reply)
            # A session ends; its reflection finishes before the next one starts.
            assert am.drain(timeout=120)

        # Session 5: the context the model sees holds the new facts, not the old ones.
        context = am.context(event, "Where does Alice live and what is her job?")
        print("context memories:", context.sections["memories"])
        lines = context.sections["memories"]
        assert any("Berlin" in line for line in lines)
        assert any("French teacher" in line for line in lines)
        assert not any("Paris" in line or "translator" in line for line in lines)

        # The history keeps both versions, with who changed what and when.
        current = mem.search("where does Alice live", k=1, **event.fields)
        versions = mem.history(current[0].record.id)
        for v in versions:
            ended = f", ended by {v.ended} ({v.ended_by})" if v.ended else ""
            print(f"history: {v.record.text!r} ({v.event}{ended})")
        texts = [v.record.text for v in versions]
        assert any("Paris" in t for t in texts) and any("Berlin" in t for t in texts)

        # As the store stood in session 2, Alice lived in Paris.
        then = mem.search(
            "where does Alice live", k=1, as_of=start + 7 * DAY + 3600, **event.fields
        )
        print("as of session 2:", then[0].record.text)
        assert "Paris" in then[0].record.text
        am.close()
        mem.close()
    llm.close()


if __name__ == "__main__":
    main()
