"""What the upkeep's tests and benches/upkeep_faults.py share: an agent with only
reflection on, a scripted model, and a child process killed during a reflection; the
daily log's tests, an agent with only the daily log on and their clock."""

from __future__ import annotations

import json
import re
import select
import subprocess
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from memlane import AgentMemory, Memory
from memlane.agent import (
    Compaction,
    Consolidation,
    DailyLog,
    FlushReminder,
    Profiles,
    Reflection,
    SessionScope,
)

#: Every trigger off but reflection (each test turns on what it needs).
QUIET: dict[str, Any] = {
    "consolidation": Consolidation(enabled=False),
    "flush": FlushReminder(enabled=False),
    "compaction": Compaction(enabled=False),
    "daily": DailyLog(enabled=False),
    "profiles": Profiles(enabled=False),
}

#: Every trigger off but the daily log, run inline: what each turn's log does is in the
#: turn's own report (tests/agent/test_agent_upkeep.py runs them in the background).
DAILY_ONLY: dict[str, Any] = {
    "reflection": Reflection(enabled=False),
    "consolidation": Consolidation(enabled=False),
    "flush": FlushReminder(enabled=False),
    "compaction": Compaction(enabled=False),
    "profiles": Profiles(enabled=False),
    "upkeep": "inline",
}
#: The daily log tests' clock: a day, and a Friday morning (UTC) to start from.
DAY = 86400.0
START = datetime(2026, 11, 20, 9, 0, tzinfo=UTC).timestamp()


def agent(mem: Memory, llm: Any, table: str = "memories", **options: Any) -> AgentMemory:
    """An agent reflecting every second turn, per-peer scopes, no context floor."""
    settings = {**QUIET, "reflection": Reflection(every=2), **options}
    scopes = SessionScope("per-peer")
    return AgentMemory(mem, scopes, llm, table=table, context={"min_score": None}, **settings)


def turn(am: AgentMemory, event: Any, text: str) -> Any:
    return am.after(event, am.before(event, [{"role": "user", "content": text}]), "ok")


def keep_every_fact(prompt: str) -> str | None:
    """The answer keeping every new fact, if ``prompt`` is the fact check's; else None."""
    if "New facts:" not in prompt:
        return None
    n = len(re.findall(r"^F\d+\.", prompt, re.M))
    return json.dumps({"decisions": [{"fact": f"F{i + 1}", "decision": "add"} for i in range(n)]})


class Model:
    """Answers reflection with ``answer`` and keeps every new fact when asked to check
    them; ``prompts``: the reflection prompts, ``seen``: every prompt; waits for
    ``gate`` when set."""

    def __init__(self, answer: str, gate: threading.Event | None = None) -> None:
        self.answer = answer
        self.gate = gate
        self.entered = threading.Event()
        self.prompts: list[str] = []
        self.seen: list[str] = []

    def complete(self, messages: Any) -> str:
        self.seen.append(json.dumps(messages))
        if "New facts:" in messages[-1]["content"]:
            return json.dumps({"decisions": []})
        self.prompts.append(json.dumps(messages))
        self.entered.set()
        if self.gate is not None and not self.gate.wait(60):
            raise TimeoutError("the test never opened the gate")
        return self.answer


class Hung:
    """A model that never answers, until ``release`` is set (or 10 minutes pass)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.calls = 0

    def complete(self, messages: Any) -> str:
        self.calls += 1
        self.release.wait(600)
        return json.dumps({"operations": []})


def said(child: subprocess.Popen[str], count: int, timeout: float = 120.0) -> list[str]:
    """The child's next ``count`` lines of output (fewer if it says nothing for
    ``timeout`` seconds)."""
    assert child.stdout is not None
    lines: list[str] = []
    while len(lines) < count:
        ready, _, _ = select.select([child.stdout], [], [], timeout)
        if not ready:
            break
        lines.append(child.stdout.readline().strip())
    return lines


#: A process that runs two turns of an agent whose model answers reflection with argv[5]
#: and stalls while it embeds a text holding argv[4] (after saying EMBEDDING), to be
#: killed there; it says TURNS once both turns returned. argv: store, cache folder ("-":
#: none), the tests folder, the text to stall at ("": never), the answer.
KILLED_REFLECTION = """
import os, sys, time
sys.path.insert(0, sys.argv[3])
from conftest import WordHashEmbedder
from memlane import Memory
from upkeep_scripts import agent, turn

stall = sys.argv[4]

class Stalls(WordHashEmbedder):
    def embed_batch(self, texts):
        if stall and any(stall in t for t in texts):
            os.write(1, b"EMBEDDING\\n")
            time.sleep(600)
        return super().embed_batch(texts)

    def embed(self, text):
        return self.embed_batch([text])[0]

class Answers:
    def complete(self, messages):
        if "New facts:" in messages[-1]["content"]:
            return '{"decisions": []}'
        return sys.argv[5]

options = {} if sys.argv[2] == "-" else {"cache_dir": sys.argv[2]}
am = agent(Memory(sys.argv[1], Stalls(), **options), Answers())
alice = am.event("telegram", 42, 7)
for text in ("I have news", "lots of news"):
    turn(am, alice, text)
os.write(1, b"TURNS\\n")
time.sleep(600)
"""


def returns(fn: Callable[[], Any], within: float = 30.0) -> list[Any]:
    """``fn()``'s result in a list, or an empty list when it has not returned ``within``
    seconds (a generous bound: the tests' models never answer before the test lets them)."""
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    thread.start()
    thread.join(within)
    return out
