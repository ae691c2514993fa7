"""A reflection reads exactly its scope, as the fact check does: an agent without an
agent_id is not shown, and so neither updates nor forgets, the memories another agent
keeps of the same contact (it was shown them, forgot one and superseded another), nor
the turns another agent took with that contact, and a kept answer applied after a
crash reaches none of them either. Both backends."""

from __future__ import annotations

import json
from typing import Any

from conftest import StoreFactory, WordHashEmbedder
from memlane import reflect
from memlane.agent import AgentMemory, Reflection, SessionScope
from memlane.agent.reflection import Resume, reflect_planned
from memlane.scoping import exact_scope
from upkeep_scripts import QUIET

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


class Learns:
    """Remembers each user line of the conversation it is shown; keeps its prompts."""

    def __init__(self) -> None:
        self.prompts: list[str] = []

    def complete(self, messages: Any) -> str:
        prompt = messages[-1]["content"]
        if "New facts:" in prompt:  # the fact check: nothing to decide
            return json.dumps({"decisions": []})
        self.prompts.append(prompt)
        said = prompt.split("Conversation:")[1].splitlines()
        ops = [{"op": "remember", "content": line[6:]} for line in said if line[:6] == "user: "]
        return json.dumps({"operations": ops})


def test_a_reflection_without_an_agent_is_not_shown_another_agents_turns(
    make_store: StoreFactory,
) -> None:
    """The window of turns a reflection shows was read by the room's scope as a prefix:
    an agent without agent_id showed its model the turns another agent took with the
    same contact in the same room (a PIN told to agent b), and stored what it drew from
    them in its own scope. It reads exactly the room's scope now."""
    mem = make_store("exact-turns", WordHashEmbedder())
    quiet = {**QUIET, "reflection": Reflection(every=2), "upkeep": "inline"}
    plain_model, b_model = Learns(), Learns()
    plain = AgentMemory(mem, SessionScope("per-peer"), plain_model, **quiet)
    b = AgentMemory(mem, SessionScope("per-peer", agent_id="b"), b_model, **quiet)
    to_plain, to_b = plain.event("telegram", 42, 7), b.event("telegram", 42, 7)
    for agent, event, text in [
        (b, to_b, "my bank PIN is 4711"),
        (plain, to_plain, "hello plain agent"),
        (plain, to_plain, "what is the weather"),
    ]:
        agent.after(event, agent.before(event, [{"role": "user", "content": text}]), "ok")
    assert len(plain_model.prompts) == 1 and "weather" in plain_model.prompts[0]
    assert "4711" not in plain_model.prompts[0], plain_model.prompts[0]
    fields, only = exact_scope(mem, to_plain.fields)
    own = sorted(r.text for r in mem.list("memories", filters=only, **fields))
    assert own == ["hello plain agent", "what is the weather"], own
    plain.close()
    b.close()
