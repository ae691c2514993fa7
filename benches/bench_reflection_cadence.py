"""Reflection's cadence: facts kept against model calls per 100 turns, for each ``every``.

The dated conversation set (benches/_conversations.py) is played turn by turn through an
``AgentMemory`` (upkeep inline, so what runs does not depend on timing) whose model is an
oracle: asked to reflect, it remembers exactly the user turns of the window it is shown
that state a fact (the set knows which), and it keeps every fact the check of new facts
asks about. So the facts missed are those no window showed, and the calls are what the
cadence costs: reflection's, plus the checks of what it remembered.

    python benches/bench_reflection_cadence.py [--users 2] [--sessions 20] [--every 1,2,5,10,15,20]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # its conftest first

from _conversations import generate
from conftest import WordHashEmbedder
from memlane import AgentMemory, Memory
from memlane.agent import Reflection, SessionScope
from upkeep_scripts import QUIET


class Oracle:
    """Remembers the fact-stating user turns of each window; keeps every checked fact."""

    def __init__(self, facts: set[str]) -> None:
        self.facts = facts
        self.reflections = 0
        self.checks = 0

    def complete(self, messages: Any) -> str:
        prompt = messages[-1]["content"]
        if "New facts:" in prompt:
            self.checks += 1
            return json.dumps({"decisions": []})
        self.reflections += 1
        conversation = prompt.partition("Conversation:\n")[2]
        said = [line[len("user: ") :] for line in conversation.splitlines()]
        ops = [{"op": "remember", "content": t} for t in said if t in self.facts]
        return json.dumps({"operations": ops})


def run(every: int, users: int, sessions: int) -> dict[str, float]:
    data = generate(seed=0, users=users, sessions=sessions)
    stating = {t for q in data.questions for t in (*q.evidence, *q.superseded)}
    texts = {t.id: t.text for t in data.turns}
    facts = {texts[t] for t in stating}
    oracle = Oracle(facts)
    turns = 0
    with tempfile.TemporaryDirectory() as folder:
        mem = Memory(Path(folder) / "store", WordHashEmbedder())
        am = AgentMemory(
            mem,
            SessionScope("per-peer"),
            oracle,
            upkeep="inline",
            reflection=Reflection(every=every),
            context={"min_score": None},
            tools=False,
            **QUIET,
        )
        by_user: dict[str, list[Any]] = {}
        for t in data.turns:
            by_user.setdefault(t.user, []).append(t)
        for user, said in by_user.items():
            event = am.event("chat", user, user)
            for ask, answer in zip(said[::2], said[1::2], strict=False):
                am.after(event, [{"role": "user", "content": ask.text}], answer.text)
                turns += 1
        kept = {r.text for r in mem.list("memories", limit=100_000)} & facts
        am.close()
        mem.close()
    return {
        "every": every,
        "kept": len(kept) / len(facts),
        "reflections": 100 * oracle.reflections / turns,
        "checks": 100 * oracle.checks / turns,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--users", type=int, default=2)
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--every", default="1,2,5,10,15,20")
    args = parser.parse_args()
    print("| every | facts kept | reflection calls / 100 turns | check calls / 100 turns |")
    print("| ---: | ---: | ---: | ---: |")
    for every in (int(e) for e in args.every.split(",")):
        r = run(every, args.users, args.sessions)
        print(f"| {every} | {r['kept']:.1%} | {r['reflections']:.1f} | {r['checks']:.1f} |")


if __name__ == "__main__":
    main()
