"""The fact check's ``update`` supersedes only the version of the memory the model was
shown: a memory rewritten in place (``update``, the user's correction) while the model
answered stays current, and the fact waits, pending, for the next check, which shows the
rewrite. Before, the older fact superseded the rewrite, which went to the history unseen.
Both backends; the rewrite is made from inside the scripted model's answer."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest

from conftest import StoreFactory, WordHashEmbedder
from memlane import Memory
from memlane.agent.facts import CHECK, check_facts, pending
from memlane.agent.llm import ChatMessage

SCOPE = {"user_id": "alice"}
CORRECTION = "Alice works at Initech since yesterday (her correction)"
UPDATE = json.dumps(
    {"decisions": [{"fact": "F1", "decision": "update", "memory": 1, "reason": "job changed"}]}
)


def current(mem: Memory) -> list[str]:
    return sorted(r.text for r in mem.list("memories", filters={"valid_to": None}, **SCOPE))


class Rewrites:
    """A model that answers ``update`` of the first listed memory; at its first answer
    another writer rewrites ``target`` meanwhile (when given). It records the prompts."""

    def __init__(self, mem: Memory, target: str | None) -> None:
        self.mem, self.target = mem, target
        self.prompts: list[str] = []

    def complete(self, messages: Sequence[ChatMessage]) -> str:
        self.prompts.append(messages[-1]["content"])
        if self.target is not None:
            self.mem.update(self.target, text=CORRECTION, by="user")
            self.target = None
        return UPDATE


def test_a_memory_rewritten_while_the_model_answers_stays_current(
    make_store: StoreFactory,
) -> None:
    mem = make_store("rewritten", WordHashEmbedder())
    old = mem.add("Alice works at Acme as an engineer", created_at=1000.0, **SCOPE)
    fact = mem.add("Alice works at Globex", metadata=pending(None), created_at=3000.0, **SCOPE)
    model = Rewrites(mem, old.id)

    report = check_facts(mem, model, "memories", SCOPE)
    assert report.error is None and report.decisions == []
    # The rewrite the model never saw is current, not history; the fact waits.
    assert current(mem) == sorted([CORRECTION, fact.text])
    assert mem.get(old.id).valid_to is None and mem.get(old.id).text == CORRECTION
    assert [v.event for v in mem.history(old.id)] == ["add", "update"]
    assert mem.get(fact.id).metadata[CHECK] == "pending"

    # The next check shows the rewrite, and the model's update of it is applied.
    second = check_facts(mem, model, "memories", SCOPE)
    assert CORRECTION in model.prompts[-1]
    assert second.error is None and [d.decision for d in second.decisions] == ["update"]
    assert current(mem) == [fact.text]
    assert fact.id not in mem
    assert [v.record.text for v in mem.history(old.id)] == [
        "Alice works at Acme as an engineer",
        CORRECTION,
        fact.text,
    ]


def test_an_update_of_the_version_shown_is_applied(make_store: StoreFactory) -> None:
    mem = make_store("shown", WordHashEmbedder())
    old = mem.add("Alice works at Acme as an engineer", created_at=1000.0, **SCOPE)
    fact = mem.add("Alice works at Globex", metadata=pending(None), created_at=3000.0, **SCOPE)
    report = check_facts(mem, Rewrites(mem, None), "memories", SCOPE)
    assert report.error is None and [d.decision for d in report.decisions] == ["update"]
    assert report.decisions[0].target == old.id
    assert current(mem) == [fact.text] and mem.get(old.id).valid_to == 3000.0


class Decides:
    """A model that answers ``decision`` for the first fact (of the first listed memory,
    for an update) while another writer rewrites the fact itself."""

    def __init__(self, mem: Memory, fact: str, decision: str) -> None:
        self.mem, self.fact, self.decision = mem, fact, decision

    def complete(self, messages: Sequence[ChatMessage]) -> str:
        self.mem.update(self.fact, text="Alice works at Initech (rewritten)", by="user")
        said = {"fact": "F1", "decision": self.decision, "memory": 1, "reason": "judged"}
        return json.dumps({"decisions": [said]})


@pytest.mark.parametrize("decision", ["none", "update", "delete", "add"])
def test_a_fact_rewritten_while_the_model_answers_waits_for_its_new_text(
    make_store: StoreFactory, decision: str
) -> None:
    # The decision was made on the fact's old text: it changes nothing, and the rewrite
    # stays pending for a check that shows it. Before, "none" deleted the rewrite and
    # "update" put the old text in the memory's place.
    mem = make_store(f"fact-rewritten-{decision}", WordHashEmbedder())
    mem.add("Alice works at Acme as an engineer", created_at=1000.0, **SCOPE)
    fact = mem.add("Alice works at Globex", metadata=pending(None), created_at=3000.0, **SCOPE)
    report = check_facts(mem, Decides(mem, fact.id, decision), "memories", SCOPE)
    assert report.error is None and report.decisions == []
    assert current(mem) == sorted(["Alice works at Acme as an engineer", mem.get(fact.id).text])
    assert mem.get(fact.id).metadata[CHECK] == "pending"
    assert mem.get(fact.id).text == "Alice works at Initech (rewritten)"


def test_a_fact_settled_as_it_was_listed_is_not_checked_again(make_store: StoreFactory) -> None:
    # A row rewritten after the engine matched the filter comes as it is now: a fact
    # another check kept just then was decided again, and the fact beside it was shown
    # no memory (the kept one was left out as pending) and kept beside it: a fork.
    mem = make_store("settled", WordHashEmbedder())
    kept = mem.add("Alice works at Acme", metadata={CHECK: "kept"}, created_at=1000.0, **SCOPE)
    fact = mem.add("Alice works at Globex", metadata=pending(None), created_at=3000.0, **SCOPE)
    listed = mem.list

    def stale(*args: object, **kwargs: Any) -> Any:
        out = listed(*args, **kwargs)  # type: ignore[arg-type]
        return [mem.get(kept.id), *out] if kwargs.get("order") == "asc" else out

    mem.list = stale  # type: ignore[method-assign]
    model = Rewrites(mem, None)
    report = check_facts(mem, model, "memories", SCOPE)
    assert [d.fact for d in report.decisions] == [fact.id]
    assert "Alice works at Acme" in model.prompts[0]  # shown, not taken for a fact
    assert mem.get(kept.id).metadata[CHECK] == "kept"
