"""Which statement of a fact stays current, and whose upkeep reads which records: the
fact check and consolidation read exactly their scope (an agent without an agent_id does
not summarise, decide or show another agent's records); a fact consolidated late from old
turns is dated and ordered as those turns, so it does not replace what was said since; a
correction learnt after a clock was stepped back still replaces what was stored while it
ran ahead; a backlog of pending facts never hides the memory a fact contradicts. Both
backends."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence

import pytest

from conftest import StoreFactory, WordHashEmbedder
from memlane import Memory
from memlane.agent.consolidation import add_short_term, consolidate
from memlane.agent.facts import CHECK, check_facts, pending
from memlane.agent.llm import ChatMessage
from memlane.agent.reflection import reflect
from memlane.agent.statements import LEARNED, apart

LIVES = re.compile(r"Alice lives in \w+")


class Movers:
    """A model: a new "Alice lives in X" updates a listed "Alice lives in Y" (Y not X), a
    consolidation draws the one fact its entries name; it records what it is shown."""

    def __init__(self) -> None:
        self.prompts: list[str] = []

    def complete(self, messages: Sequence[ChatMessage]) -> str:
        prompt = messages[-1]["content"]
        self.prompts.append(prompt)
        if "Short-term entries" in prompt:
            city = re.findall(r"I live in (\w+)", prompt)[-1]
            return json.dumps({"summary": "where Alice lives", "facts": [f"Alice lives in {city}"]})
        stored, _, new = prompt.partition("New facts:")
        listed = re.findall(r"^(\d+)\. \[[^\]]*\] (.*)$", stored, re.M)
        out = []
        for label, text in re.findall(r"^(F\d+)\. \[[^\]]*\] (.*)$", new, re.M):
            d: dict[str, object] = {"fact": label, "decision": "add", "reason": "new"}
            for n, m in listed:
                if LIVES.fullmatch(m) and LIVES.fullmatch(text) and m != text:
                    d = {"fact": label, "decision": "update", "memory": int(n), "reason": "moved"}
            out.append(d)
        return json.dumps({"decisions": out})


def homes(mem: Memory) -> list[str]:
    """Alice's current homes."""
    recs = mem.list("memories", limit=200, user_id="alice")
    return sorted(r.text for r in recs if r.valid_to is None and LIVES.fullmatch(r.text))


def test_a_scope_without_agent_id_leaves_an_agents_entries_and_facts(
    make_store: StoreFactory,
) -> None:
    mem = make_store("exact", WordHashEmbedder())
    agent = {"user_id": "alice", "agent_id": "A"}
    for i in range(3):
        add_short_term(mem, f"secret plan {i}", "conv", scope=agent)
    theirs = mem.add("Alice's locker code is 4711", metadata=pending(None), **agent)
    model = Movers()
    loose = {"user_id": "alice"}
    report = consolidate(mem, model, scope=loose, threshold=3, batch=3, force=True)
    assert report.status == "skipped" and report.pending_entries == 0
    assert check_facts(mem, model, "memories", loose).decisions == []
    assert model.prompts == []
    assert mem.count("short_term", agent_id="A") == 3
    assert mem.get(theirs.id).metadata == theirs.metadata  # pending, as stored


def test_a_late_consolidation_does_not_replace_what_was_said_since(
    make_store: StoreFactory,
) -> None:
    """The turns saying Paris were stored before the fact saying Oslo; their consolidation
    runs after it: its fact is dated and ordered as the last of those turns."""
    mem = make_store("late", WordHashEmbedder())
    scope = {"user_id": "alice"}
    said = [
        add_short_term(mem, f"I live in Paris ({i})", "conv", scope=scope, created_at=1000.0 + i)
        for i in range(3)
    ]
    oslo = mem.add("Alice lives in Oslo", metadata=pending(None), created_at=2000.0, **scope)
    model = Movers()
    assert [d.decision for d in check_facts(mem, model, "memories", scope).decisions] == ["add"]
    report = consolidate(mem, model, scope=scope, threshold=3, batch=3, marks=pending(None))
    assert report.status == "consolidated"
    (paris,) = report.semantic
    assert paris.created_at == said[-1].created_at
    assert paris.metadata[LEARNED] == [*said[-1].metadata[LEARNED], 0]  # the first fact
    check_facts(mem, model, "memories", scope)
    assert homes(mem) == ["Alice lives in Oslo"]
    assert mem.get(oslo.id).valid_to is None


def test_a_correction_after_the_clock_steps_back_replaces_the_old_value(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    mem = make_store("clock", WordHashEmbedder())
    scope = {"user_id": "alice"}
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 3600.0)  # the clock runs ahead
    mem.add("Alice lives in Paris", metadata=pending(None), **scope)
    model = Movers()
    check_facts(mem, model, "memories", scope)
    monkeypatch.setattr(time, "time", real)  # ... until it is stepped back
    mem.add("Alice lives in Oslo", metadata=pending(None), **scope)
    report = check_facts(mem, model, "memories", scope)
    assert report.error is None
    assert [d.decision for d in report.decisions] == ["update"]
    assert homes(mem) == ["Alice lives in Oslo"]


def test_a_backlog_of_pending_facts_does_not_hide_the_contradicted_memory(
    make_store: StoreFactory,
) -> None:
    mem = make_store("backlog", WordHashEmbedder())
    scope = {"user_id": "alice"}
    mem.add("Alice lives in Paris", created_at=1000.0, **scope)
    mem.add("Alice lives in Oslo", metadata=pending(None), created_at=2000.0, **scope)
    for i in range(30):
        text = f"Alice lives in Oslo near landmark{i}"
        mem.add(text, metadata=pending(None), created_at=2001.0 + i, **scope)
    model = Movers()
    report = check_facts(mem, model, "memories", scope)
    assert report.error is None
    assert "1. [1970-01-01] Alice lives in Paris" in model.prompts[0]
    assert homes(mem) == ["Alice lives in Oslo"]


class Reflecting(Movers):
    """``Movers``, that as a reflection updates the stored "Alice lives in ``old``" to
    the city the conversation names."""

    def __init__(self, old: str = "Oslo") -> None:
        super().__init__()
        self.old = old

    def complete(self, messages: Sequence[ChatMessage]) -> str:
        prompt = messages[-1]["content"]
        if "Conversation:" not in prompt:
            return super().complete(messages)
        self.prompts.append(prompt)
        (n,) = re.findall(rf"^(\d+)\. Alice lives in {self.old}$", prompt, re.M)
        city = re.findall(r"I live in (\w+)", prompt)[-1]
        op = {"op": "update", "memory": int(n), "content": f"Alice lives in {city}"}
        return json.dumps({"operations": [op]})


@pytest.mark.parametrize("checked", [True, False], ids=["checked", "unchecked"])
def test_a_reflections_update_is_newer_than_a_fact_stated_before_it(
    make_store: StoreFactory, checked: bool
) -> None:
    """The successor a reflection's update makes is the reflection's statement: it does
    not take the order the memory it replaces was learnt in, which would make a fact
    learnt after that memory but stated before the reflection the newer one."""
    mem = make_store("reflected", WordHashEmbedder())
    scope = {"user_id": "alice"}
    model = Reflecting()
    oslo = mem.add("Alice lives in Oslo", metadata=pending(None), created_at=1000.0, **scope)
    assert [d.decision for d in check_facts(mem, model, "memories", scope).decisions] == ["add"]
    mem.add("Alice lives in Paris", metadata=pending(None), created_at=2000.0, **scope)
    marks = pending({LEARNED: apart()}) if checked else None
    said = ["I moved again: I live in Berlin"]
    report = reflect(mem, model, said, scope=scope, now=3000.0, marks=marks)
    assert report.error is None and report.rejected == []
    (berlin,) = report.updated
    assert berlin.text == "Alice lives in Berlin" and mem.get(oslo.id).valid_to is not None
    assert berlin.metadata.get(LEARNED) != mem.get(oslo.id).metadata[LEARNED]
    check_facts(mem, model, "memories", scope)
    assert homes(mem) == ["Alice lives in Berlin"]


def test_a_fact_waiting_for_its_check_still_waits_once_a_reflection_updates_it(
    make_store: StoreFactory,
) -> None:
    """A reflection without marks (``memlane reflect``, a direct call) that rewrites a
    fact not yet checked: the successor is checked, and replaces what it contradicts."""
    mem = make_store("waiting", WordHashEmbedder())
    scope = {"user_id": "alice"}
    model = Reflecting(old="Paris")
    mem.add("Alice lives in Oslo", created_at=1000.0, **scope)
    mem.add("Alice lives in Paris", metadata=pending(None), created_at=2000.0, **scope)
    report = reflect(mem, model, ["I live in Lyon now"], scope=scope, now=3000.0)
    (lyon,) = report.updated
    assert lyon.text == "Alice lives in Lyon" and lyon.metadata[CHECK] == "pending"
    check_facts(mem, model, "memories", scope)
    assert homes(mem) == ["Alice lives in Lyon"]
