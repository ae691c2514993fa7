"""A reflection whose job record was written with the commit's answer lost (a
PostgreSQL connection cut right after ``COMMIT``). The lease renewed after the model's
answer, taken for unwritten, made the holder take its own record for another's: the
reflection stored nothing and its record stayed held until the agent closed. The plan
saved that way was asked of the model again, and the record left behind applied the
first answer a second time at the next start. Both backends; the cut is made in the
store's transaction, after its commit."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from conftest import StoreFactory, WordHashEmbedder
from memlane._memory.job_book import JobBook
from memlane.agent import Reflection, SessionScope
from memlane.errors import StorageError
from upkeep_scripts import Model, agent, turn

ALICE = SessionScope("per-peer").resolve("telegram", 42, 7)
REMEMBER = json.dumps({"operations": [{"op": "remember", "content": "Alice keeps bees"}]})


class Arming(Model):
    """Answers reflection, then has the store lose the answer of the ``nth`` job write
    that follows (1: the lease renewed after the answer; 2: the plan saved)."""

    def __init__(self, nth: int, armed: list[int]) -> None:
        super().__init__(REMEMBER)
        self.nth, self.armed = nth, armed

    def complete(self, messages: Any) -> str:
        answer = super().complete(messages)
        if "New facts:" not in messages[-1]["content"] and len(self.prompts) == 1:
            self.armed[0] = self.nth
        return answer


@pytest.mark.parametrize("nth", [1, 2], ids=["lease", "plan"])
def test_a_job_write_whose_answer_was_lost_is_taken_as_written(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch, nth: int
) -> None:
    mem = make_store("lost_answer", WordHashEmbedder())
    db = mem._sync.db  # type: ignore[attr-defined]
    armed, local = [0], threading.local()
    swap, transaction = db.swap_tenant_meta, db.transaction

    def job_swap(conn: Any, *args: Any) -> bool:
        local.job = True
        return bool(swap(conn, *args))

    @contextlib.contextmanager
    def cut() -> Iterator[Any]:
        local.job = False
        with transaction() as conn:
            yield conn
        if local.job and armed[0]:
            armed[0] -= 1
            if armed[0] == 0:
                raise StorageError(
                    "commit failed (if the connection was lost, the write may or may not "
                    "have been stored)"
                )

    monkeypatch.setattr(db, "swap_tenant_meta", job_swap)
    monkeypatch.setattr(db, "transaction", cut)
    model = Arming(nth, armed)
    am = agent(mem, model)
    reports = [turn(am, ALICE, "I keep bees"), turn(am, ALICE, "and hives")]
    assert am.drain(60)
    assert armed == [0]  # the cut was made
    stored = [r.text for r in mem.list("memories", limit=10, **ALICE.fields)]
    assert stored == ["Alice keeps bees"], (stored, [r.failures for r in reports])
    assert mem.jobs.items() == []  # nothing left held
    assert len(model.prompts) == 1  # asked once
    am.close(30)


def test_a_renewal_seen_stored_only_later_is_the_holders_own(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lease renewal whose commit is applied but visible only after the read that
    follows the error (the cut backend still committing) was taken for unwritten: the
    next renewal found the record changed and gave the job up as taken over. A holder
    now writes over any text its record may hold as it wrote it."""
    gate = threading.Event()
    mem = make_store("late_commit", WordHashEmbedder())
    model = Model(REMEMBER, gate)
    am = agent(mem, model, reflection=Reflection(every=1))
    turn(am, ALICE, "I keep bees")
    assert model.entered.wait(30)
    late: list[tuple[str, str, str]] = []

    def lost(self: JobBook, key: str, old: str, new: str, **kw: Any) -> bool:
        late.append((key, old, new))
        raise StorageError("commit failed (the write may or may not have been stored)")

    monkeypatch.setattr(JobBook, "swap", lost)
    holding = am._upkeep.holding  # type: ignore[attr-defined]
    holding.renew()  # each renewal fails as it is made
    monkeypatch.undo()
    assert late
    for key, old, new in late:  # and becomes visible now
        assert mem.jobs.swap(key, old, new)
    holding.renew()
    assert all(holding.holds(key) for key, _, _ in late)
    gate.set()
    assert am.drain(60)
    stored = [r.text for r in mem.list("memories", limit=10, **ALICE.fields)]
    assert stored == ["Alice keeps bees"] and mem.jobs.items() == []
    am.close(30)


@pytest.mark.parametrize("then", ["next job", "next agent"])
def test_a_record_whose_drop_failed_is_dropped_later(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch, then: str
) -> None:
    """A done job whose record's drop met a store error stayed held by the live agent,
    run by no one, until the agent closed (a job left for others the same): its release
    is now tried again at the holder's next release and renewal. ``close`` waits for no
    store: a record still there is the next AgentMemory's, which asks no model again."""
    mem = make_store("drop_failed", WordHashEmbedder())
    failures = [1]
    drop = JobBook.drop

    def flaky(self: JobBook, key: str, held: str | None = None) -> bool:
        if failures[0]:
            failures[0] -= 1
            raise StorageError("the server closed the connection")
        return drop(self, key, held)

    monkeypatch.setattr(JobBook, "drop", flaky)
    model = Model(REMEMBER)
    am = agent(mem, model)
    turn(am, ALICE, "I keep bees")
    turn(am, ALICE, "and hives")
    assert am.drain(60)
    assert failures == [0] and len(mem.jobs.items()) == 1  # the drop failed
    if then == "next job":
        turn(am, ALICE, "I sell honey")
        turn(am, ALICE, "at the market")
        assert am.drain(60)
        assert mem.jobs.items() == []  # dropped while the agent lives
        assert len(model.prompts) == 2
    am.close(30)
    if then == "next agent":
        assert len(mem.jobs.items()) == 1
        again = agent(mem, model)
        turn(again, ALICE, "good morning")
        assert again.drain(60)
        again.close(30)
        assert len(model.prompts) == 1
    assert mem.jobs.items() == []
    stored = [r.text for r in mem.list("memories", limit=10, **ALICE.fields)]
    assert stored == ["Alice keeps bees"]
