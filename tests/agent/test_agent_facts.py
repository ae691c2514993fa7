"""Facts that stay right: every fact the agent layer learns (the remember tool, reflection)
is checked against what the scope already knows, off the turn, and the decision is kept
in the history. A careful scripted model; both backends."""

from __future__ import annotations

import json
import re
import threading
import time
from typing import Any

import pytest

from conftest import StoreFactory, WordHashEmbedder
from memlane import AgentMemory
from memlane.agent import (
    Reflection,
    facts,
)
from memlane.agent.facts import CHECK, FactReport, parse_decisions
from memlane.agent.statements import RESTATED
from upkeep_scripts import agent as scripted_agent

FACT = re.compile(r"Alice's (\w+) is (\w+)")


class Careful:
    """Decides as a careful model would: a new "Alice's X is V" updates the stored fact
    about X when V differs, is dropped when it is the same, and is added otherwise."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.checks = 0
        self.lock = threading.Lock()

    def complete(self, messages: Any) -> str:
        prompt = messages[-1]["content"]
        if "New facts:" not in prompt:
            return json.dumps({"operations": []})
        with self.lock:
            self.checks += 1
        if self.fail:
            raise ConnectionError("the model is down")
        stored_part, _, new_part = prompt.partition("New facts:")
        stored = {}
        for line in stored_part.splitlines():
            number, _, rest = line.partition(". ")
            m = FACT.search(rest)
            if number.isdigit() and m:
                stored[m.group(1)] = (int(number), m.group(2))
        decisions = []
        for line in new_part.strip().splitlines():
            label, _, rest = line.partition(". ")
            m = FACT.search(rest)
            if not m or m.group(1) not in stored:
                decisions.append({"fact": label, "decision": "add", "reason": "new"})
                continue
            number, value = stored[m.group(1)]
            if value == m.group(2):
                decisions.append({"fact": label, "decision": "none", "reason": "known"})
            else:
                decisions.append(
                    {"fact": label, "decision": "update", "memory": number, "reason": "moved"}
                )
        return json.dumps({"decisions": decisions})


def agent(mem: Any, llm: Any, **options: Any) -> AgentMemory:
    return scripted_agent(mem, llm, **{"reflection": Reflection(enabled=False), **options})


def remember_turn(am: AgentMemory, event: Any, text: str, fact: str | None) -> Any:
    msgs = am.before(event, [{"role": "user", "content": text}])
    if fact is not None:
        out = am.memory_tools(event).handle_tool_call("remember", {"content": fact})
        assert out["ok"], out
    return am.after(event, msgs, "noted")


def test_changed_facts_leave_only_the_current_version(make_store: StoreFactory) -> None:
    """200 turns; 20 facts stated, then each changed once (and some repeated): the store
    and the context hold the current version of each, as_of the old one."""
    mem = make_store("facts", WordHashEmbedder())
    model = Careful()
    am = agent(mem, model)
    alice = am.event("telegram", 42, 7)
    attrs = [f"attr{i}" for i in range(20)]
    for turn in range(200):
        fact = None
        if turn < 20:
            fact = f"Alice's {attrs[turn]} is first{turn}"
        elif 100 <= turn < 120:
            fact = f"Alice's {attrs[turn - 100]} is second{turn - 100}"
        elif 150 <= turn < 155:  # said again: nothing new
            fact = f"Alice's {attrs[turn - 150]} is second{turn - 150}"
        remember_turn(am, alice, f"chat {turn}", fact)
        if turn == 60:
            assert am.drain(timeout=60)
            between = time.time()
    assert am.drain(timeout=60)
    listed = mem.list("memories", limit=100, **alice.fields)
    current = sorted(r.text for r in listed if r.valid_to is None)
    assert current == sorted(f"Alice's {a} is second{i}" for i, a in enumerate(attrs))
    assert mem.count("memories", filters={CHECK: "pending"}) == 0
    for i, a in enumerate(attrs):
        ctx = am.context(alice, f"what is Alice's {a}?").text
        assert f"second{i}" in ctx and f"first{i}" not in ctx
        (old,) = mem.search(f"Alice's {a}", 1, as_of=between, **alice.fields)
        assert old.record.text == f"Alice's {a} is first{i}"
    (hit,) = mem.search("Alice's attr3 is second3", 1, **alice.fields)
    steps = [
        (v.event, v.by, v.record.metadata.get("fact_decision")) for v in mem.history(hit.record.id)
    ]
    # Superseded by the second statement, then said again word for word (turn 153).
    assert steps[-2:] == [("supersede", "fact-check", "update"), ("update", "fact-check", "update")]
    assert hit.record.metadata[RESTATED] > hit.record.created_at
    assert model.checks <= 45  # a check per new fact at most, none per chat turn
    am.close()


def test_without_a_model_the_rules_of_add_decide(make_store: StoreFactory) -> None:
    mem = make_store("rules", WordHashEmbedder())
    am = agent(mem, None)
    alice = am.event("telegram", 42, 7)
    for fact in ("Alice's city is Oslo", "Alice's city is Oslo", "Alice's city is Rome"):
        remember_turn(am, alice, "chat", fact)
    assert am.drain(timeout=60)
    texts = sorted(r.text for r in mem.list("memories", **alice.fields))
    assert texts == ["Alice's city is Oslo", "Alice's city is Rome"]  # exact repeat dropped
    assert all(CHECK not in r.metadata for r in mem.list("memories", **alice.fields))
    am.close()


def test_a_failed_check_leaves_its_facts_pending_and_runs_again(
    make_store: StoreFactory,
) -> None:
    mem = make_store("retry", WordHashEmbedder())
    model = Careful(fail=True)
    done: list[Any] = []
    am = agent(mem, model, on_upkeep=done.append)
    alice = am.event("telegram", 42, 7)
    remember_turn(am, alice, "chat", "Alice's city is Oslo")
    assert am.drain(timeout=60)  # kept: nothing to compare it with, no model call
    remember_turn(am, alice, "chat", "Alice's city is Rome")
    assert am.drain(timeout=60)
    assert any(f.trigger == "facts" for d in done for f in d.report.failures)
    assert mem.count("memories", filters={CHECK: "pending"}, **alice.fields) == 1
    model.fail = False
    remember_turn(am, alice, "chat", None)  # no check waits: this turn asks for one
    assert am.drain(timeout=60)
    listed = mem.list("memories", **alice.fields)
    assert [r.text for r in listed if r.valid_to is None] == ["Alice's city is Rome"]
    am.close()


def test_reflection_shows_memories_in_a_store_without_vectors(make_store: StoreFactory) -> None:
    """Without an embedder a search by the conversation finds nothing by meaning; the
    scope's newest memories are shown all the same."""
    mem = make_store("novec")
    mem.add("Alice's pet is a cat", user_id="telegram:42", session_id="peer:telegram:42")
    prompts: list[str] = []

    class Reflects:
        def complete(self, messages: Any) -> str:
            prompts.append(messages[-1]["content"])
            return json.dumps({"operations": []})

    am = agent(mem, Reflects(), reflection=Reflection(every=1))
    alice = am.event("telegram", 42, 7)
    remember_turn(am, alice, "we adopted a dog yesterday", None)
    assert am.drain(timeout=60)
    assert prompts and "Alice's pet is a cat" in prompts[0]
    am.close()


def test_reflection_prompt_and_categories(make_store: StoreFactory) -> None:
    seen: list[str] = []

    class Extracts:
        def complete(self, messages: Any) -> str:
            if "New facts:" in messages[-1]["content"]:
                return json.dumps({"decisions": []})
            seen.append(messages[0]["content"])
            ops = [
                {"op": "remember", "content": "Alice is vegan", "category": "diet"},
                {"op": "remember", "content": "Alice likes jazz", "category": "weather"},
            ]
            return json.dumps({"operations": ops})

    mem = make_store("extract", WordHashEmbedder())
    cfg = Reflection(every=1, prompt="Remember only food and music.", categories=["diet", "music"])
    am = agent(mem, Extracts(), reflection=cfg)
    alice = am.event("telegram", 42, 7)
    remember_turn(am, alice, "I am vegan and like jazz", None)
    assert am.drain(timeout=60)
    assert seen[0].startswith("Remember only food and music.")
    assert '"diet", "music"' in seen[0]
    (rec,) = mem.list("memories", **alice.fields)
    assert rec.text == "Alice is vegan" and rec.metadata["category"] == "diet"
    am.close()


def test_decisions_are_parsed_strictly() -> None:
    answer = json.dumps(
        {
            "decisions": [
                {"fact": "F1", "decision": "update", "memory": 2, "reason": "moved"},
                {"fact": "F2", "decision": "update", "memory": 9},
                {"fact": "f3", "decision": "NONE"},
                {"fact": "F9", "decision": "add"},
                "junk",
            ]
        }
    )
    got = parse_decisions(answer, 3, 3)
    assert got == {0: ("update", 1, "moved"), 2: ("none", None, "(none given)")}
    # A reason is kept in the fact and its successor: a model's megabytes are cut.
    long = json.dumps({"decisions": [{"fact": "F1", "decision": "add", "reason": "x" * 10**6}]})
    assert parse_decisions(long, 1, 1)[0] == ("add", None, "x" * 1000)


def _raises(memory: Any, marked: Any) -> None:
    """A drop that dies, as a kill would, after the step before it."""
    raise RuntimeError("killed")


ALICE = {"user_id": "alice"}


def stopped_update(make_store: StoreFactory, monkeypatch: Any, name: str) -> tuple[Any, Any]:
    """A store whose check of "Alice's city is Rome" (updating Oslo) died after the
    update's supersede, before the fact's drop; and the fact, still pending."""
    from memlane.agent import facts
    from memlane.agent.facts import check_facts

    mem = make_store(name, WordHashEmbedder())
    mem.add("Alice's city is Oslo", **ALICE)
    fact = mem.add("Alice's city is Rome", metadata={CHECK: "pending"}, **ALICE)
    with monkeypatch.context() as m:
        m.setattr(facts, "_drop", _raises)
        report = check_facts(mem, Careful(), "memories", ALICE)
    assert report.error is not None and "killed" in report.error
    assert mem.get(fact.id).metadata[CHECK] == "pending"
    return mem, fact


def test_a_check_cut_off_before_its_delete_leaves_no_duplicate(
    make_store: StoreFactory, monkeypatch: Any
) -> None:
    """The check stores an update, then dies before deleting the fact (as a kill would):
    the fact is still pending, and the next check finishes the drop itself, asking no
    model (one that kept every fact stored it twice: beside its own successor)."""
    from memlane.agent.facts import check_facts

    mem, fact = stopped_update(make_store, monkeypatch, "cut")
    keeps = Careful()
    monkeypatch.setattr(keeps, "complete", lambda messages: pytest.fail("a model was asked"))
    report = check_facts(mem, keeps, "memories", ALICE)
    assert [(d.fact, d.decision) for d in report.decisions] == [(fact.id, "update")]
    current = [r.text for r in mem.list("memories", **ALICE) if r.valid_to is None]
    assert current == ["Alice's city is Rome"] and fact.id not in mem


def test_only_a_successor_of_its_very_words_finishes_a_stopped_update(
    make_store: StoreFactory, monkeypatch: Any
) -> None:
    """A fact rewritten after its check stopped halfway, and a fact a record merely names
    as merged (any writer may write the key): both checked again by the model, neither
    dropped unseen."""
    from memlane.agent.facts import check_facts

    mem, fact = stopped_update(make_store, monkeypatch, "named")
    scope = ALICE
    mem.update(fact.id, text="Alice's city is Milan")  # corrected before the next check
    asked = Careful()
    report = check_facts(mem, asked, "memories", scope)
    assert asked.checks == 1 and [d.decision for d in report.decisions] == ["update"]
    current = [r.text for r in mem.list("memories", **scope) if r.valid_to is None]
    assert current == ["Alice's city is Milan"]

    # A pending fact left marked "update" (its supersede refused), and a record naming it.
    pending_fact = mem.add("Alice's pet is a cat", metadata={CHECK: "pending"}, **scope)
    marked = {**pending_fact.metadata, "fact_decision": "update"}
    mem.update(pending_fact.id, metadata=marked)
    mem.add("a note", metadata={"fact_merged_from": pending_fact.id, CHECK: "kept"}, **scope)
    asked = Careful()
    check_facts(mem, asked, "memories", scope)
    assert asked.checks == 1 and "Alice's pet is a cat" in [
        r.text for r in mem.list("memories", **scope) if r.valid_to is None
    ]


def test_an_answer_applies_at_most_100_operations() -> None:
    from memlane.agent.reflection import MAX_OPERATIONS, parse_operations

    answer = json.dumps(
        {"operations": [{"op": "remember", "content": f"f{i}"} for i in range(150)]}
    )
    kept, rejected = parse_operations(answer, 0)
    assert len(kept) == MAX_OPERATIONS == 100 and len(rejected) == 50


class UpdatesTheFirst:
    """A model that says every new fact updates memory 1."""

    def complete(self, messages: Any) -> str:
        new = messages[-1]["content"].partition("New facts:")[2].strip().splitlines()
        labels = [line.partition(". ")[0] for line in new]
        return json.dumps(
            {"decisions": [{"fact": f, "decision": "update", "memory": 1} for f in labels]}
        )


def test_a_second_fact_for_a_memory_another_replaced_waits_for_the_next_call(
    make_store: StoreFactory,
) -> None:
    # Two facts of one call that both replace "Alice lives in Oslo" (facts that are not
    # each other's candidates share a call): the first supersedes it; kept beside it, the
    # second would be current too. It waits, pending, for a call that shows it the first.
    mem = make_store("two", WordHashEmbedder())
    scope = {"user_id": "alice"}
    oslo = mem.add("Alice lives in Oslo", **scope)
    rome, paris = (
        mem.add(f"Alice lives in {city}", metadata={CHECK: "pending"}, **scope)
        for city in ("Rome", "Paris")
    )
    report = FactReport()
    later = facts._decide(mem, UpdatesTheFirst(), [rome, paris], [oslo], report)
    assert [f.id for f in later] == [paris.id]
    assert [(d.fact, d.decision) for d in report.decisions] == [(rome.id, "update")]
    assert mem.get(paris.id).metadata[CHECK] == "pending"
    current = [r.text for r in mem.list("memories", **scope) if r.valid_to is None]
    assert sorted(current) == ["Alice lives in Paris", "Alice lives in Rome"]
    (now,) = [r for r in mem.list("memories", **scope) if r.text.endswith("Rome")]
    facts._decide(mem, UpdatesTheFirst(), later, [now], report)
    current = [r.text for r in mem.list("memories", **scope) if r.valid_to is None]
    assert current == ["Alice lives in Paris"]
    texts = [v.record.text for v in mem.history(oslo.id)]
    assert texts == ["Alice lives in Oslo", "Alice lives in Rome", "Alice lives in Paris"]
