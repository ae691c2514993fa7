"""A waiting reflection that a later turn's job takes the place of (coalescing), with the
store failing around it. The job taken the place of stayed recorded, held by the live
agent and run by no one, and the next AgentMemory reflected its turns a second time:
after a failed lease renewal (the drop named the text the holder had tried, which the
record did not hold) and when the coalescing write failed. Both backends."""

from __future__ import annotations

import collections
import json
import re
import threading
from typing import Any

import pytest

from conftest import StoreFactory, WordHashEmbedder
from memlane._memory.job_book import JobBook
from memlane.agent import Reflection
from memlane.errors import StorageError
from upkeep_scripts import Model, agent, turn

EVERY = Reflection(every=2, window=4)


def shown(model: Model) -> list[list[int]]:
    """The turns each reflection prompt showed."""
    return [sorted({int(t) for t in re.findall(r"T(\d+)x", p)}) for p in model.prompts]


def twice(model: Model) -> dict[int, int]:
    counts = collections.Counter(t for turns in shown(model) for t in turns)
    return {t: n for t, n in counts.items() if n > 1}


@pytest.mark.parametrize("fault", ["renewal", "coalescing"])
def test_a_job_taken_the_place_of_is_reflected_once(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch, fault: str
) -> None:
    mem = make_store("coalesce", WordHashEmbedder())
    gate = threading.Event()
    model = Model(json.dumps({"operations": []}), gate=gate)
    am = agent(mem, model, reflection=EVERY)
    event = am.event("telegram", 42, 7)
    holding = am._upkeep.holding  # type: ignore[attr-defined]
    for i in range(2):  # the first reflection runs, held at the gate
        turn(am, event, f"hello T{i}x")
    assert model.entered.wait(30)
    for i in range(2, 4):  # the second waits
        turn(am, event, f"hello T{i}x")
    running = am._upkeep.model.pending()[0].key  # type: ignore[attr-defined]
    (waiting,) = [key for key in holding._held if key != running]
    swap, failed = JobBook.swap, []

    def failing(self: JobBook, key: str, old: str, new: str, **kw: Any) -> bool:
        ends = json.loads(new).get("ends")
        if not failed and (key == waiting if fault == "renewal" else bool(ends)):
            failed.append(key)
            raise StorageError("the server closed the connection")  # nothing written
        return swap(self, key, old, new, **kw)

    monkeypatch.setattr(JobBook, "swap", failing)
    if fault == "renewal":
        holding.renew()  # the waiting one's renewal fails
        monkeypatch.undo()
    for i in range(4, 6):  # the third takes the second's place
        turn(am, event, f"hello T{i}x")
    monkeypatch.undo()
    assert failed
    gate.set()
    assert am.drain(60)
    assert shown(model) == [[0, 1], [2, 3, 4, 5]]
    assert mem.jobs.items() == []  # nothing left held by the live agent
    am.close(30)
    again = agent(mem, model, reflection=EVERY)
    turn(again, event, "hello T6x")
    assert again.drain(60)
    again.close(30)
    assert twice(model) == {}
    assert mem.jobs.items() == []
