"""The windows a reflection shows: one that takes the place of waiting or failed
reflections shows each of their windows, and no window between them again, so no turn
goes unreflected and none is reflected twice; a failed reflection left recorded beside
the one that covers it (a process killed between the two) is not run again. On both
backends."""

from __future__ import annotations

import json
import re
import threading
import time
from typing import Any

import pytest

from conftest import StoreFactory, WordHashEmbedder
from memlane.agent import Reflection, SessionScope
from memlane.agent.history import MESSAGES
from memlane.agent.upkeep import Job
from memlane.agent.upkeep.jobs import Holder, JobRecordError, coalesce, owner_of
from upkeep_scripts import agent, turn


class Shown:
    """Remembers each message its reflections are shown (``msgN``) and keeps which
    those were; with ``gated``, its first reflection waits for ``gate``, then fails."""

    def __init__(self, gated: bool = False) -> None:
        self.gated = gated
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.shown: list[list[str]] = []

    def complete(self, messages: Any) -> str:
        last = messages[-1]["content"]
        if "New facts:" in last:  # the fact check: keep each
            n = len(re.findall(r"^F\d+\.", last, re.M))
            return json.dumps(
                {"decisions": [{"fact": f"F{i + 1}", "decision": "add"} for i in range(n)]}
            )
        # The conversation alone: the stored memories shown above it name messages too.
        said = re.findall(r"msg(\d+)", last.split("Conversation:", 1)[1])
        self.shown.append(sorted(set(said), key=int))
        if self.gated and len(self.shown) == 1:
            self.entered.set()
            if not self.gate.wait(60):
                raise TimeoutError("the test never opened the gate")
            raise ConnectionError("the model is down")
        return json.dumps(
            {"operations": [{"op": "remember", "content": f"reflected msg{n}"} for n in said]}
        )


def test_a_reflection_failing_after_a_later_one_was_queued_loses_no_window(
    make_store: StoreFactory,
) -> None:
    # A reflection every turn over that turn's two messages. The first fails once the
    # second waits behind it; the second then runs. The third turn's reflection shows
    # the first window again, not the second's (reflected) as counted back from its own.
    mem = make_store("late", WordHashEmbedder())
    model = Shown(gated=True)
    am = agent(mem, model, reflection=Reflection(every=1, window=2))
    event = am.event("telegram", 7, chat_id=1)
    turn(am, event, "user says msg1")
    assert model.entered.wait(60)
    turn(am, event, "user says msg2")
    model.gate.set()
    assert am.drain(timeout=60)
    turn(am, event, "user says msg3")
    assert am.drain(timeout=60)
    assert model.shown == [["1"], ["2"], ["1", "3"]]
    reflected = {r.text for r in mem.list("memories", limit=100)}
    assert {f"reflected msg{i}" for i in range(1, 4)} <= reflected
    assert mem.jobs.items() == []
    am.close()


def test_a_failed_reflection_recorded_beside_the_one_covering_it_runs_once(
    make_store: StoreFactory,
) -> None:
    # What a process killed between recording a reflection and dropping the failed one
    # it covers leaves: both recorded, their holder gone. The next AgentMemory runs the
    # covering one (the failed window and its own) and drops the other unrun.
    mem = make_store("covered", WordHashEmbedder())
    scopes = SessionScope("per-peer")
    event = scopes.resolve("telegram", 7, 1)
    owner = owner_of("memories", scopes)
    t0 = time.time() - 100
    for i, at in ((1, t0), (2, t0 + 10), (3, t0 + 20)):
        mem.add(f"user says msg{i}", table=MESSAGES, created_at=at, **event.history)
    gone = Holder("elsewhere/boot/pid:[1]", 4321, "99", "dead", time.time() - 1)
    failed = Job("reflection", event, t0 + 1, owner=owner)
    covering = Job("reflection", event, t0 + 21, owner=owner, ends=(t0 + 1,))
    for job in (failed, covering):
        mem.jobs.put(job.key, job.held_by(gone).dumps())
    model = Shown()
    am = agent(mem, model, reflection=Reflection(every=100, window=1))
    turn(am, event, "hello again")  # the first turn looks for jobs left
    assert am.drain(timeout=60)
    assert model.shown == [["1", "3"]]
    assert mem.jobs.items() == []
    am.close()


# -- the record --------------------------------------------------------------------------

ALICE = SessionScope("per-peer").resolve("telegram", 42, 7)


def test_a_jobs_windows_are_kept_in_its_record() -> None:
    job = Job("reflection", ALICE, 100.0, owner="o", ends=(10.0, 50.0))
    record = json.loads(job.dumps())
    assert record["span"] == 3  # what an older version, which reads no "ends", counts back
    assert Job.loads(job.dumps()).ends == (10.0, 50.0)
    assert Job.loads(job.dumps()).span == 1
    older = {k: v for k, v in record.items() if k != "ends"}
    assert (Job.loads(json.dumps(older)).span, Job.loads(json.dumps(older)).ends) == (3, ())


@pytest.mark.parametrize(
    "ends",
    [
        "10",
        [10.0, 20.0, 30.0, 40.0, 50.0],  # more than MAX_SPAN - 1
        [10.0, 100.0],  # not before the job's own
        [50.0, 10.0],  # not oldest first
        [10.0, 10.0],
        [True],
        [float("nan")],
        [1e400],
    ],
)
def test_a_record_with_windows_that_cannot_be_is_refused(ends: object) -> None:
    record = json.loads(Job("reflection", ALICE, 100.0, owner="o").dumps())
    record.update(ends=ends, span=min(5, 1 + len(ends)) if isinstance(ends, list) else 2)
    with pytest.raises(JobRecordError, match="'ends'"):
        Job.loads(json.dumps(record))
    record.update(ends=[10.0], span=1)
    with pytest.raises(JobRecordError, match="'span' must count"):
        Job.loads(json.dumps(record))


def test_a_reflection_taking_the_place_of_another_shows_its_windows(
    caplog: pytest.LogCaptureFixture,
) -> None:
    newer = Job("reflection", ALICE, 100.0, ends=(60.0,))
    coalesce(newer, Job("reflection", ALICE, 50.0, ends=(20.0,)))
    assert newer.ends == (20.0, 50.0, 60.0)
    assert not caplog.records
    coalesce(newer, Job("reflection", ALICE, 40.0, ends=(10.0,)))
    assert newer.ends == (20.0, 40.0, 50.0, 60.0)  # the oldest goes, said
    assert "the oldest 1 are not reflected" in caplog.text
    # A time not before the job's own (the clock set back) is in its own window.
    later = Job("reflection", ALICE, 30.0)
    coalesce(later, Job("reflection", ALICE, 35.0))
    assert later.ends == ()
