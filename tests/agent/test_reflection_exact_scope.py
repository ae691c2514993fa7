"""A reflection reads exactly its scope, as the fact check does: an agent without an
agent_id is not shown, and so neither updates nor forgets, the memories another agent
keeps of the same contact (it was shown them, forgot one and superseded another), and
a kept answer applied after a crash reaches none of them either. Both backends."""

from __future__ import annotations

import json
from typing import Any

from conftest import StoreFactory, WordHashEmbedder
from memlane import reflect
from memlane.agent.reflection import Resume, reflect_planned

ALICE = {"user_id": "alice"}
AGENT_B = {"user_id": "alice", "agent_id": "b"}


class Prunes:
    """Forgets each memory it is shown that names a pin; updates each naming a city."""

    def __init__(self) -> None:
        self.prompts: list[str] = []

    def complete(self, messages: Any) -> str:
        prompt = messages[-1]["content"]
        self.prompts.append(prompt)
        ops = []
        for line in prompt.split("Conversation:")[0].splitlines():
            number, _, text = line.partition(". ")
            if number.isdigit() and "pin" in text:
                ops.append({"op": "forget", "memory": int(number)})
            elif number.isdigit() and "lives" in text:
                ops.append(
                    {"op": "update", "memory": int(number), "content": "Alice lives in Rome"}
                )
        return json.dumps({"operations": ops})


def test_a_reflection_without_an_agent_leaves_an_agents_memories_alone(
    make_store: StoreFactory,
) -> None:
    mem = make_store("exact", WordHashEmbedder())
    pin = mem.add("Alice's bank pin is 1234", **AGENT_B)
    home = mem.add("Alice lives in Oslo", **AGENT_B)
    own = mem.add("Alice lives in Lisbon", **ALICE)
    model = Prunes()
    report = reflect(mem, model, ["user: I moved to Rome; where is my pin?"], scope=ALICE)
    assert report.error is None
    assert not any("1234" in p or "Oslo" in p for p in model.prompts)
    assert pin.id in mem and mem.get(home.id).valid_to is None
    assert [r.text for r in report.updated] == ["Alice lives in Rome"]
    assert mem.get(own.id).valid_to is not None


def test_a_kept_answer_reaches_no_memory_of_another_agent(make_store: StoreFactory) -> None:
    mem = make_store("exact-plan", WordHashEmbedder())
    pin = mem.add("Alice's bank pin is 1234", **AGENT_B)
    raw = json.dumps({"operations": [{"op": "forget", "memory": 1}]})
    plan = {"raw": raw, "shown": [pin.id], "versions": [pin.updated_at]}
    reflect_planned(mem, plan, scope=ALICE, resume=Resume("op"))
    assert pin.id in mem
