"""The fact check sees the pending facts other processes stored, even while this
process's follower lags (its listening connection being made again after a server
restart): it refreshes first (``Memory.refresh``). Before, two processes stored one fact
twice: each check saw neither the other's pending fact nor a stored one, and each kept
its own. PostgreSQL only: an embedded store has one process."""

from __future__ import annotations

import json
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
