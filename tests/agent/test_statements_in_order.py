"""The newest statement wins where facts are stated at once or reflected late: the later
of two facts of one consolidation or one reflection replaces what the earlier changed
(both shared one order, and the version the earlier made counted as newer, so the later
was dropped as a repeat), and a reflection retried after its window changes no memory
stated since (it made the older city current). Both backends."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from conftest import StoreFactory, WordHashEmbedder
from memlane import Memory, reflect
from memlane.agent.consolidation import add_short_term, consolidate
from memlane.agent.facts import CHECK, check_facts, pending
from upkeep_scripts import agent

CITY = re.compile(r"(?:moved to|lives in) (\w+)")
SCOPE = {"user_id": "alice"}


def numbered(part: str) -> list[tuple[int, str]]:
    return [(int(n), t) for n, t in re.findall(r"^(\d+)\. (.*)$", part, re.M)]


class Careful:
    """Decides from what it is shown: a fact of another city updates the stored one (the
    last listed), the same city is a repeat. A reflection remembers ``remember`` (or,
    given none, updates each listed city to the conversation's last); one failure when
    ``fail_next`` is set."""

    def __init__(self, remember: list[str] | None = None) -> None:
        self.remember = remember
        self.fail_next = False

    def complete(self, messages: Any) -> str:
        prompt = messages[-1]["content"]
        if "New facts:" in prompt:
            stored_part, _, new_part = prompt.partition("New facts:")
            stored = [(n, m.group(1)) for n, t in numbered(stored_part) if (m := CITY.search(t))]
            out = []
            for label, text in re.findall(r"^(F\d+)\. (.*)$", new_part, re.M):
                city = CITY.search(text)
                said = {"fact": label, "reason": "r"}
                if not stored or city is None:
                    out.append({**said, "decision": "add"})
                elif stored[-1][1] == city.group(1):
                    out.append({**said, "decision": "none"})
                else:
                    out.append({**said, "decision": "update", "memory": stored[-1][0]})
            return json.dumps({"decisions": out})
        if "Short-term entries" in prompt:
            facts = self.remember or []
            return json.dumps({"summary": "Alice moved.", "facts": facts, "confidence": 0.9})
        if self.fail_next:
            self.fail_next = False
            raise ConnectionError("the model is down")
        if self.remember is not None:
            ops = [{"op": "remember", "content": text} for text in self.remember]
            return json.dumps({"operations": ops})
        shown_part, _, conversation = prompt.partition("Conversation:")
        said_cities = CITY.findall(conversation)
        if not said_cities:
            return json.dumps({"operations": []})
        latest = said_cities[-1]
        ops = [
            {"op": "update", "memory": n, "content": f"Alice lives in {latest}"}
            for n, t in numbered(shown_part)
            if (m := CITY.search(t)) and m.group(1) != latest
        ]
        return json.dumps({"operations": ops})


def current(mem: Memory, **scope: str) -> list[str]:
    return sorted(r.text for r in mem.list("memories", filters={"valid_to": None}, **scope))


@pytest.mark.parametrize("by", ["consolidation", "reflection"])
def test_the_later_of_two_facts_stated_at_once_is_current(
    make_store: StoreFactory, by: str
) -> None:
    mem = make_store(f"together-{by}", WordHashEmbedder())
    mem.add("Alice lives in Oslo", created_at=1_000_000.0, metadata={CHECK: "kept"}, **SCOPE)
    model = Careful(remember=["Alice lives in Paris", "Alice lives in Rome"])
    if by == "consolidation":
        add_short_term(mem, "I moved from Oslo to Paris in March", "a1", scope=SCOPE)
        add_short_term(mem, "and in June I moved again, to Rome", "a1", scope=SCOPE)
        consolidate(mem, model, scope=SCOPE, force=True, marks=pending(None))
    else:
        reflect(
            mem, model, ["user: Paris in March, Rome in June"], scope=SCOPE, marks=pending(None)
        )
    report = check_facts(mem, model, "memories", SCOPE)
    assert report.error is None
    assert [d.decision for d in report.decisions] == ["update", "update"]
    assert [t for t in current(mem, **SCOPE) if CITY.search(t)] == ["Alice lives in Rome"]


@pytest.mark.parametrize("upkeep", ["inline", "background"])
def test_a_retried_reflection_changes_no_memory_stated_after_its_window(
    make_store: StoreFactory, upkeep: str
) -> None:
    # Turn 2's reflection fails; at turn 3 the user moves again and the agent remembers
    # it; the retry of turn 2's window (which says Paris) must leave Rome current.
    mem = make_store(f"retried-{upkeep}", WordHashEmbedder())
    model = Careful()
    am = agent(mem, model, upkeep=upkeep)
    event = am.event("telegram", 42, chat_id=7)
    mem.add("Alice lives in Oslo", metadata={CHECK: "kept"}, created_at=1_000_000.0, **event.fields)

    def turn(text: str, remember: str | None = None) -> None:
        messages = am.before(event, [{"role": "user", "content": text}])
        if remember is not None:
            assert am.memory_tools(event).handle_tool_call("remember", {"content": remember})["ok"]
        am.after(event, messages, "ok")
        assert am.drain(timeout=60)

    turn("hello")
    model.fail_next = True
    turn("I moved to Paris")
    turn("I moved to Rome now", remember="Alice lives in Rome")
    assert current(mem, **event.fields) == ["Alice lives in Rome"]
    am.close()


def test_the_tools_date_what_they_remember_by_the_agents_clock(make_store: StoreFactory) -> None:
    # A conversation replayed at its own dates: a fact the tools remembered at the wall
    # clock's time was after every window, and no reflection could update it.
    mem = make_store("replayed", WordHashEmbedder())
    now = [1_000_000.0]
    model = Careful()
    am = agent(mem, model, upkeep="inline", clock=lambda: now[0])
    event = am.event("telegram", 42, chat_id=7)
    tools = am.memory_tools(event)
    long = "Alice lives in Oslo. " + "She likes tea. " * 120
    for content in ("Alice lives in Oslo", long):
        assert tools.handle_tool_call("remember", {"content": content})["ok"]
    dated = {r.created_at for r in mem.list("memories", limit=50, **event.fields)}
    assert dated == {1_000_000.0}
    for n, text in enumerate(["hello", "I moved to Paris"], 1):
        now[0] = 1_000_000.0 + 60 * n
        am.after(event, am.before(event, [{"role": "user", "content": text}]), "ok")
    assert "Alice lives in Paris" in current(mem, **event.fields)
    assert "Alice lives in Oslo" not in current(mem, **event.fields)
    am.close()
