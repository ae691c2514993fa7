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
from memlane.agent.facts import LEARNED, RESTATED, check_facts, parse_decisions, pending
from memlane.agent.llm import ChatMessage

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
