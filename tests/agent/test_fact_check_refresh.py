"""The fact check sees the pending facts other processes stored, even while this
process's follower lags (its listening connection being made again after a server
restart): it refreshes first (``Memory.refresh``). Before, two processes stored one fact
twice: each check saw neither the other's pending fact nor a stored one, and each kept
its own. PostgreSQL only: an embedded store has one process."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import StoreFactory, WordHashEmbedder
from memlane import Memory
from memlane.agent.facts import CHECK, check_facts, pending

ALICE = {"user_id": "alice"}


class Keeps:
    """Keeps every new fact; keeps its prompts."""

    def __init__(self) -> None:
        self.prompts: list[str] = []

    def complete(self, messages: Any) -> str:
        prompt = messages[-1]["content"]
        self.prompts.append(prompt)
        n = prompt.split("New facts:")[1].count("\nF") + 1
        decisions = [{"fact": f"F{i + 1}", "decision": "add"} for i in range(n)]
        return json.dumps({"decisions": decisions})


@pytest.fixture
def two(make_store: StoreFactory, tmp_path: Path) -> Iterator[tuple[Memory, Memory]]:
    if make_store.server is None:
        pytest.skip("one process at a time opens an embedded store")
    first = make_store("refresh", WordHashEmbedder(), cache_dir=tmp_path / "c1")
    lagging = make_store("refresh", WordHashEmbedder(), cache_dir=tmp_path / "c2")
    # This one follows nothing by itself, as while its listening connection is down.
    lagging._sync.db._listener._on_change = lambda: None  # type: ignore[attr-defined]
    yield first, lagging
    lagging.close()
    first.close()


def test_refresh_applies_what_other_processes_committed(two: tuple[Memory, Memory]) -> None:
    first, lagging = two
    added = first.add("Alice keeps bees in Lyon", **ALICE)
    lagging.refresh()
    assert [h.record.id for h in lagging.search("bees", k=3, mode="text")] == [added.id]
    assert lagging.count() == 1


def test_the_check_compares_with_another_process_s_older_fact(
    two: tuple[Memory, Memory],
) -> None:
    """The other process's older fact is checked first, then shown to the model beside
    the newer one (it said "no memory to compare with" and kept both)."""
    first, lagging = two
    older = first.add("Alice lives in Oslo", metadata=pending(None), **ALICE)
    newer = lagging.add("Alice lives in Oslo now", metadata=pending(None), **ALICE)
    model = Keeps()
    report = check_facts(lagging, model, "memories", ALICE)
    assert report.error is None, report
    assert [d.fact for d in report.decisions] == [older.id, newer.id]
    (prompt,) = model.prompts
    stored, new = prompt.split("New facts:")
    assert "Alice lives in Oslo" in stored and "Oslo now" in new, prompt
    assert lagging.get(newer.id).metadata[CHECK] == "kept"


class Concurrent:
    """Says ``add`` for a new fact unless a stored memory shown names it, ``none`` then;
    the first process's model answers only once the second's is asked."""

    def __init__(self, gate: threading.Event, entered: threading.Event | None = None) -> None:
        self.gate, self.entered = gate, entered

    def complete(self, messages: Any) -> str:
        stored, _ = messages[-1]["content"].split("New facts:")
        if self.entered is not None:  # the first process: its answer comes late
            self.entered.set()
            assert self.gate.wait(30)
        else:
            self.gate.set()  # the first process's answer lands while this one is asked
        seen = re.findall(r"^(\d+)\. .*fact 11", stored, re.M)
        if seen:
            return json.dumps(
                {"decisions": [{"fact": "F1", "decision": "none", "memory": int(seen[0])}]}
            )
        return json.dumps({"decisions": [{"fact": "F1", "decision": "add"}]})


def test_two_checks_at_once_keep_one_fact_once(two: tuple[Memory, Memory]) -> None:
    """One process's check of a fact waits for its model; meanwhile another process
    stores an older copy of that fact (a consolidation dates its facts at older turns)
    and checks it. Neither was shown the other (a pending fact is never shown): both
    added theirs. One check of a scope runs at a time now: the second leaves its fact
    for the next check, which keeps one of the two."""
    first, second = two
    first.add("Alice likes green tea", created_at=900.0, **ALICE)
    younger = first.add("Alice fact 11", created_at=1010.0, metadata=pending(None), **ALICE)
    gate, entered = threading.Event(), threading.Event()
    reports: list[Any] = []
    slow = threading.Thread(
        target=lambda: reports.append(
            check_facts(first, Concurrent(gate, entered), "memories", ALICE)
        )
    )
    slow.start()
    assert entered.wait(30)
    older = second.add(
        "Alice consolidated fact 11", created_at=1000.0, metadata=pending(None), **ALICE
    )
    waited = check_facts(second, Concurrent(threading.Event()), "memories", ALICE)
    assert waited.waited and waited.decisions == [] and waited.error is None
    gate.set()
    slow.join(60)
    reports.append(check_facts(second, Concurrent(gate), "memories", ALICE))
    assert all(r.error is None and not r.waited for r in reports), reports
    second.refresh()
    current = [r.id for r in second.list("memories", **ALICE) if "fact 11" in r.text]
    assert current == [older.id], (current, younger.id, reports)
