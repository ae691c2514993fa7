"""A fact the check drops as a repeat of a memory leaves that memory as new as the repeat:
a fact stated between the memory and its repeat, and checked later (a consolidation that
runs late), does not replace it. Before, the repeat went with its time, and the late
fact replaced what was said last. By the process's order and, across processes, by
time. Both backends."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence

import pytest

from conftest import StoreFactory, WordHashEmbedder
from memlane.agent.consolidation import add_short_term, consolidate
from memlane.agent.facts import check_facts, parse_decisions, pending
from memlane.agent.llm import ChatMessage
from memlane.agent.statements import LEARNED, RESTATED

SCOPE = {"user_id": "alice"}


class Judges:
    """Consolidation draws "Alice lives in X" from "I moved to X"; the check updates a
    listed home of another city and names the listed home a new fact repeats."""

    def complete(self, messages: Sequence[ChatMessage]) -> str:
        prompt = messages[-1]["content"]
        if "Short-term entries" in prompt:
            city = re.findall(r"I moved to (\w+)", prompt)[-1]
            return json.dumps({"summary": "a move", "facts": [f"Alice lives in {city}"]})
        stored, _, new = prompt.partition("New facts:")
        homes = [
            (int(n), c) for n, c in re.findall(r"^(\d+)\. .*Alice lives in (\w+)", stored, re.M)
        ]
        out = []
        for label, city in re.findall(r"^(F\d+)\. .*Alice lives in (\w+)", new, re.M):
            said: dict[str, object] = {"fact": label, "decision": "add", "reason": "new"}
            for n, home in homes:
                same = "none" if home == city else "update"
                said = {"fact": label, "decision": same, "memory": n, "reason": same}
            out.append(said)
        return json.dumps({"decisions": out})


@pytest.mark.parametrize("order", ["this process", "another process"])
def test_a_repeat_keeps_its_memory_newer_than_a_late_fact(
    make_store: StoreFactory, order: str
) -> None:
    mem = make_store("restated", WordHashEmbedder())
    now = time.time()
    oslo = mem.add("Alice lives in Oslo", created_at=now - 30 * 86400, **SCOPE)
    # A turn says Paris (an entry, consolidated later); then Oslo is said again.
    add_short_term(mem, "user: I moved to Paris", "turn-1", scope=SCOPE, created_at=now - 120)
    marks = pending(None) if order == "this process" else pending({LEARNED: ["elsewhere", 1]})
    mem.add("Alice lives in Oslo", created_at=now - 60, metadata=marks, **SCOPE)
    model = Judges()
    first = check_facts(mem, model, "memories", SCOPE)
    assert [(d.decision, d.target) for d in first.decisions] == [("none", oslo.id)]
    assert mem.get(oslo.id).metadata[RESTATED] == now - 60
    report = consolidate(mem, model, scope=SCOPE, force=True, batch=1, marks=pending(None))
    assert report.status == "consolidated"
    second = check_facts(mem, model, "memories", SCOPE)
    assert [d.decision for d in second.decisions] == ["none"]  # the Oslo said since stays
    current = mem.list("memories", filters={"valid_to": None, "type": "semantic"}, **SCOPE)
    assert [r.text for r in current] == ["Alice lives in Oslo"]


def test_a_repeat_names_the_memory_it_repeats_when_it_can() -> None:
    answer = json.dumps(
        {
            "decisions": [
                {"fact": "F1", "decision": "none", "memory": 2},
                {"fact": "F2", "decision": "none", "memory": 9},
                {"fact": "F3", "decision": "none", "memory": "x"},
            ]
        }
    )
    got = parse_decisions(answer, 3, 2)
    assert {i: (d, m) for i, (d, m, _) in got.items()} == {
        0: ("none", 1),
        1: ("none", None),
        2: ("none", None),
    }


def test_a_model_cannot_claim_when_its_fact_was_said(make_store: StoreFactory) -> None:
    # A remember sending restated_at (and a learned order) far ahead pinned its fact:
    # every later correction was judged older and deleted.
    from upkeep_scripts import agent

    mem = make_store("claimed", WordHashEmbedder())
    am = agent(mem, Judges(), upkeep="inline")
    event = am.event("telegram", 42, chat_id=7)
    tools = am.memory_tools(event)
    forged = {RESTATED: 253402300000.0, LEARNED: ["x", 0]}
    tools.handle_tool_call("remember", {"content": "Alice lives in Oslo", "metadata": forged})
    stored = mem.list("memories", **event.fields)
    assert [sorted(set(r.metadata) & {RESTATED}) for r in stored] == [[]]
    assert all(r.metadata[LEARNED][0] != "x" for r in stored)
    am.after(event, am.before(event, [{"role": "user", "content": "hi"}]), "ok")
    tools.handle_tool_call("remember", {"content": "Alice lives in Paris"})
    am.after(event, am.before(event, [{"role": "user", "content": "I moved"}]), "ok")
    current = mem.list("memories", filters={"valid_to": None}, **event.fields)
    assert [r.text for r in current] == ["Alice lives in Paris"]
    am.close()


def test_a_word_for_word_repeat_is_kept_in_the_memory_it_repeats(make_store: StoreFactory) -> None:
    from upkeep_scripts import agent

    mem = make_store("word-for-word", WordHashEmbedder())
    now = [1_000_000.0]
    am = agent(mem, Judges(), upkeep="inline", clock=lambda: now[0])
    event = am.event("telegram", 42, chat_id=7)
    tools = am.memory_tools(event)
    first = tools.handle_tool_call("remember", {"content": "Alice lives in Oslo"})
    now[0] = 1_000_400.0
    am.after(event, am.before(event, [{"role": "user", "content": "hi"}]), "ok")
    now[0] = 1_000_500.0
    again = tools.handle_tool_call("remember", {"content": "Alice lives in Oslo"})
    assert again["duplicate"] == "exact" and again["duplicate_of"] == first["id"]
    assert mem.get(first["id"]).metadata[RESTATED] == 1_000_500.0
    am.close()


def test_a_reflection_leaves_a_memory_said_again_after_its_conversation(
    make_store: StoreFactory,
) -> None:
    from memlane import reflect

    mem = make_store("said-again", WordHashEmbedder())
    oslo = mem.add("Alice lives in Oslo", created_at=1_000.0, metadata={RESTATED: 3_000.0}, **SCOPE)

    class Moves:
        def complete(self, messages: Sequence[ChatMessage]) -> str:
            op = {"op": "update", "memory": 1, "content": "Alice lives in Paris"}
            return json.dumps({"operations": [op]})

    report = reflect(mem, Moves(), ["user: I moved to Paris"], scope=SCOPE, now=2_000.0)
    assert report.updated == [] and "stated after" in report.rejected[0][1]
    assert mem.get(oslo.id).valid_to is None
    later = reflect(mem, Moves(), ["user: I moved to Paris"], scope=SCOPE, now=4_000.0)
    assert [r.text for r in later.updated] == ["Alice lives in Paris"]
    assert RESTATED not in later.updated[0].metadata  # the successor is said at 4,000


def test_repeats_since_the_last_turn_add_no_version(make_store: StoreFactory) -> None:
    # A model repeating one fact in a loop added a version at each call.
    from upkeep_scripts import agent

    mem = make_store("looping", WordHashEmbedder())
    now = [1_000_000.0]
    am = agent(mem, Judges(), upkeep="inline", clock=lambda: now[0])
    event = am.event("telegram", 42, chat_id=7)
    tools = am.memory_tools(event)
    first = tools.handle_tool_call("remember", {"content": "Alice lives in Oslo"})
    now[0] = 1_000_010.0
    am.after(event, am.before(event, [{"role": "user", "content": "hi"}]), "ok")
    versions = len(mem.history(first["id"]))
    for n in range(100):  # a turn's loop, a call every 2 s: kept once
        now[0] = 1_000_012.0 + 2 * n
        tools.handle_tool_call("remember", {"content": "Alice lives in Oslo"})
    assert len(mem.history(first["id"])) == versions + 1
    assert mem.get(first["id"]).metadata[RESTATED] == 1_000_012.0
    am.close()
