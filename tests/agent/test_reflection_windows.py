"""The windows a reflection shows. A failed reflection's window is retried alone at the
room's next turn, and shown again by the room's next reflection if the retry fails too,
so no turn goes unreflected and, where windows tile, none is reflected twice; a failed
reflection left recorded beside the one that covers it (a process killed between the
two) is not run again; a failed window survives the next turn sharing its clock
reading, or coming after the clock was set back. On both backends."""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter
from typing import Any

import pytest

from conftest import StoreFactory, WordHashEmbedder
from memlane.agent import Reflection, SessionScope
from memlane.agent.history import MESSAGES
from memlane.agent.upkeep import Job
from memlane.agent.upkeep.jobs import Holder, JobRecordError, JobSkippedWarning, coalesce, owner_of
from memlane.errors import StorageError
from upkeep_scripts import agent, keep_every_fact, turn

SCOPES = SessionScope("per-peer")
ALICE = SCOPES.resolve("telegram", 42, 7)
OWNER = owner_of("memories", SCOPES)
GONE = Holder("elsewhere/boot/pid:[1]", 4321, "99", "dead", time.time() - 1)


class Shown:
    """Remembers each message its reflections are shown (``msgN``) and keeps which
    those were, and whether it answered; the calls in ``failing`` fail, and call
    ``gated`` waits for ``gate`` first."""

    def __init__(self, failing: frozenset[int] = frozenset(), gated: int | None = None) -> None:
        self.failing = failing
        self.gated = gated
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.calls: list[tuple[list[str], bool]] = []

    def complete(self, messages: Any) -> str:
        last = messages[-1]["content"]
        if (kept := keep_every_fact(last)) is not None:
            return kept
        # The conversation alone: the stored memories shown above it name messages too.
        said = sorted(set(re.findall(r"msg(\d+)", last.split("Conversation:", 1)[1])), key=int)
        call = len(self.calls)
        fails = call in self.failing
        self.calls.append((said, not fails))
        if call == self.gated:
            self.entered.set()
            if not self.gate.wait(60):
                raise TimeoutError("the test never opened the gate")
        if fails:
            raise ConnectionError("the model is down")
        return json.dumps(
            {"operations": [{"op": "remember", "content": f"reflected msg{n}"} for n in said]}
        )

    def answered(self) -> Counter[str]:
        """How many answered reflections showed each message."""
        return Counter(m for said, ok in self.calls if ok for m in said)


@pytest.mark.parametrize(("every", "window"), [(1, 2), (2, 4)])
def test_a_reflection_failing_after_a_later_one_was_queued_loses_no_window(
    make_store: StoreFactory, every: int, window: int
) -> None:
    # Windows tile (a turn is two messages). The first reflection fails once the second
    # waits behind it; the second then runs; the next turn retries the first's window,
    # and no reflection shows another's again.
    mem = make_store("late", WordHashEmbedder())
    model = Shown(failing=frozenset({0}), gated=0)
    am = agent(mem, model, reflection=Reflection(every=every, window=window))
    event = am.event("telegram", 7, chat_id=1)
    for n in range(1, every + 1):
        turn(am, event, f"user says msg{n}")
    assert model.entered.wait(60)
    for n in range(every + 1, 2 * every + 1):
        turn(am, event, f"user says msg{n}")
    model.gate.set()
    assert am.drain(timeout=60)
    for n in range(2 * every + 1, 4 * every + 1):
        turn(am, event, f"user says msg{n}")
        assert am.drain(timeout=60)
    assert model.answered() == Counter(str(n) for n in range(1, 4 * every + 1))
    assert mem.jobs.items() == []
    am.close()


def test_an_outage_shows_each_window_once_when_the_model_is_back(
    make_store: StoreFactory,
) -> None:
    # Down for its first six calls: the retries between two reflections add no window,
    # so the fourth reflection's turn shows the three failed windows and its own.
    mem = make_store("outage", WordHashEmbedder())
    model = Shown(failing=frozenset(range(6)))
    am = agent(mem, model, reflection=Reflection(every=3, window=6))
    event = am.event("telegram", 7, chat_id=1)
    for n in range(1, 13):
        turn(am, event, f"user says msg{n}")
        assert am.drain(timeout=60)
    assert model.answered() == Counter(str(n) for n in range(1, 13))
    assert mem.jobs.items() == []
    am.close()


def test_an_inline_reflection_that_failed_is_retried_at_the_next_turn(
    make_store: StoreFactory,
) -> None:
    mem = make_store("inline", WordHashEmbedder())
    model = Shown(failing=frozenset({0}))
    am = agent(mem, model, reflection=Reflection(every=2, window=4), upkeep="inline")
    event = am.event("telegram", 7, chat_id=1)
    for n in (1, 2, 3, 4):
        turn(am, event, f"user says msg{n}")
    assert model.calls == [(["1", "2"], False), (["1", "2"], True), (["3", "4"], True)]
    am.close()


def test_an_inline_reflection_that_met_a_store_error_is_retried_at_the_next_turn(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    mem = make_store("inline-error", WordHashEmbedder())
    model = Shown()
    am = agent(mem, model, reflection=Reflection(every=2, window=4), upkeep="inline")
    event = am.event("telegram", 7, chat_id=1)
    listed = mem.list
    failing = [True]

    def list_once_failing(*args: Any, **kwargs: Any) -> Any:
        if "end" in kwargs and failing:  # the window's read
            failing.clear()
            raise StorageError("the disk is gone for a moment")
        return listed(*args, **kwargs)

    monkeypatch.setattr(mem, "list", list_once_failing)
    for n in (1, 2, 3, 4):
        turn(am, event, f"user says msg{n}")
    assert model.calls == [(["1", "2"], True), (["3", "4"], True)]
    am.close()


@pytest.mark.parametrize("second", [0.0, -3600.0], ids=["one-reading", "set-back"])
def test_a_failed_window_survives_a_clock_that_stands_or_goes_back_once(
    make_store: StoreFactory, second: float
) -> None:
    mem = make_store("clock", WordHashEmbedder())
    model = Shown(failing=frozenset({0}))
    at = [1_000_000.0]
    am = agent(mem, model, reflection=Reflection(every=1, window=2), clock=lambda: at[0])
    event = am.event("telegram", 7, chat_id=1)
    turn(am, event, "user says msg1")
    assert am.drain(timeout=60)
    at[0] += second
    turn(am, event, "user says msg2")
    assert am.drain(timeout=60)
    assert model.answered() == Counter(["1", "2"])
    am.close()


# -- jobs left recorded --------------------------------------------------------------------


def _left(mem: Any, *jobs: Job) -> None:
    for i in (1, 2, 3):
        mem.add(f"user says msg{i}", table=MESSAGES, created_at=100.0 * i, **ALICE.history)
    for job in jobs:
        mem.jobs.put(job.key, job.held_by(GONE).dumps())


def test_a_failed_reflection_recorded_beside_the_one_covering_it_runs_once(
    make_store: StoreFactory,
) -> None:
    # What a process killed between recording a reflection and dropping the failed one
    # it covers leaves: both recorded, their holder gone. The next AgentMemory runs the
    # covering one (the failed window and its own) and drops the other unrun.
    mem = make_store("covered", WordHashEmbedder())
    failed = Job("reflection", ALICE, 101.0, owner=OWNER)
    _left(mem, failed, Job("reflection", ALICE, 301.0, owner=OWNER, ends=(101.0,)))
    model = Shown()
    am = agent(mem, model, reflection=Reflection(every=100, window=1))
    turn(am, ALICE, "hello again")  # the first turn looks for jobs left
    assert am.drain(timeout=60)
    assert model.calls == [(["1", "3"], True)]
    assert mem.jobs.items() == []
    am.close()


def test_a_failed_retry_recorded_beside_a_reflection_showing_its_window_runs_once(
    make_store: StoreFactory,
) -> None:
    # A retry of the first window failed, then the next reflection at the cadence took
    # that window too; the process died before it dropped the retry's record.
    mem = make_store("retry-covered", WordHashEmbedder())
    retry = Job("reflection", ALICE, 201.0, owner=OWNER, span=0, ends=(101.0,))
    _left(mem, retry, Job("reflection", ALICE, 301.0, owner=OWNER, ends=(101.0,)))
    model = Shown()
    am = agent(mem, model, reflection=Reflection(every=100, window=1))
    turn(am, ALICE, "hello again")
    assert am.drain(timeout=60)
    assert model.calls == [(["1", "3"], True)]
    assert mem.jobs.items() == []
    am.close()


def test_a_failed_record_is_dropped_before_the_reflection_covering_it_can_finish(
    make_store: StoreFactory,
) -> None:
    # The worker may finish the covering reflection before the turn that handed it over
    # goes on: a process killed there must not leave the failed record to run again.
    mem = make_store("dropped-first", WordHashEmbedder())
    model = Shown(failing=frozenset({0}))
    am = agent(mem, model, reflection=Reflection(every=1, window=2))
    event = am.event("telegram", 7, chat_id=1)
    turn(am, event, "user says msg1")
    assert am.drain(timeout=60)
    assert len(mem.jobs.items()) == 1  # the failed reflection, held
    submit = am._upkeep.model.submit
    left: list[int] = []

    def finish_first(job: Job, call: Any) -> Any:
        skipped = submit(job, call)
        assert am._upkeep.model.wait(60)
        left.append(len(mem.jobs.items()))  # what a kill -9 here would leave
        return skipped

    am._upkeep.model.submit = finish_first  # type: ignore[method-assign]
    turn(am, event, "user says msg2")
    assert am.drain(timeout=60)
    assert left == [0]
    assert model.answered() == Counter(["1", "2"])
    am.close()


def test_a_reflection_finding_the_queue_full_stays_recorded_until_its_retry(
    make_store: StoreFactory,
) -> None:
    # One model call at a time and one job waiting: the third room's reflection finds the
    # queue full. Its record stays (a process killed now leaves its window to the next
    # AgentMemory), and the room's next turn retries it and drops it.
    mem = make_store("full-new", WordHashEmbedder())
    model = Shown(gated=0)
    am = agent(mem, model, reflection=Reflection(every=1, window=2), max_pending=1)
    rooms = [am.event("telegram", 7, chat_id=r) for r in (1, 2, 3)]
    turn(am, rooms[0], "user says msg1")
    assert model.entered.wait(60)
    turn(am, rooms[1], "user says msg2")
    report = turn(am, rooms[2], "user says msg3")
    assert [f.trigger for f in report.failures] == ["reflection"]
    assert len(mem.jobs.items()) == 3
    model.gate.set()
    assert am.drain(timeout=60)
    turn(am, rooms[2], "user says msg4")
    assert am.drain(timeout=60)
    assert model.answered() == Counter(["1", "2", "3", "4"])
    assert mem.jobs.items() == []
    am.close()


def test_a_record_that_is_not_taken_up_covers_no_window(make_store: StoreFactory) -> None:
    mem = make_store("not-taken", WordHashEmbedder())
    failed = Job("reflection", ALICE, 101.0, owner=OWNER)
    misfiled = Job("reflection", ALICE, 301.0, owner=OWNER, ends=(101.0,))
    live = Holder("elsewhere/boot/pid:[1]", 4321, "99", "live", 1e18)
    _left(mem, failed)
    mem.jobs.put("0000000000000302.000000:x", misfiled.held_by(GONE).dumps())  # not its key
    mem.jobs.put(misfiled.key, misfiled.held_by(live).dumps())  # another host's, alive
    model = Shown()
    am = agent(mem, model, reflection=Reflection(every=100, window=1))
    with pytest.warns(JobSkippedWarning):
        turn(am, ALICE, "hello again")
    assert am.drain(timeout=60)
    assert model.calls == [(["1"], True)]
    am.close()


def test_a_job_found_again_that_finds_the_queue_full_is_not_also_retried_by_its_room(
    make_store: StoreFactory,
) -> None:
    # Three rooms' reflections left by a dead process, one model call at a time and one
    # job waiting: the third is left recorded for a later look, and its room's next turn
    # does not also retry its window (which that later look then showed a second time).
    mem = make_store("queue-full", WordHashEmbedder())
    rooms = {r: SCOPES.resolve("telegram", 7, r) for r in (1, 2, 3)}
    for r, event in rooms.items():
        mem.add(f"user says msg{r}", table=MESSAGES, created_at=100.0 * r, **event.history)
        left = Job("reflection", event, 100.0 * r + 1, owner=OWNER)
        mem.jobs.put(left.key, left.held_by(GONE).dumps())
    model = Shown(gated=0)
    am = agent(mem, model, reflection=Reflection(every=100, window=1), max_pending=1)
    report = turn(am, rooms[1], "hello")
    assert [f.trigger for f in report.failures] == []
    model.gate.set()
    assert am.drain(timeout=60)
    turn(am, rooms[3], "room three again")
    assert am.drain(timeout=60)
    am._upkeep._scanned = None  # a minute later: the next look for jobs left
    turn(am, rooms[2], "room two again")
    assert am.drain(timeout=60)
    assert model.answered() == Counter(["1", "2", "3"])
    assert mem.jobs.items() == []
    am.close()


def test_an_older_versions_record_that_fails_is_retried_with_all_its_windows(
    make_store: StoreFactory,
) -> None:
    mem = make_store("older", WordHashEmbedder())
    record = json.loads(Job("reflection", ALICE, 301.0, owner=OWNER).held_by(GONE).dumps())
    record.update(span=3)
    del record["ends"]  # as an older version wrote it, after coalescing three
    _left(mem)
    mem.jobs.put(Job.loads(json.dumps(record)).key, json.dumps(record))
    model = Shown(failing=frozenset({0}))
    am = agent(mem, model, reflection=Reflection(every=100, window=1))
    for n in (4, 5):
        turn(am, ALICE, f"user says msg{n}")
        assert am.drain(timeout=60)
    assert model.calls == [(["1", "2", "3"], False), (["1", "2", "3"], True)]
    am.close()


# -- the record ----------------------------------------------------------------------------


def test_a_jobs_windows_are_kept_in_its_record() -> None:
    job = Job("reflection", ALICE, 100.0, owner="o", ends=(10.0, 50.0))
    record = json.loads(job.dumps())
    assert record["span"] == 3  # what an older version, which reads no "ends", counts back
    assert (Job.loads(job.dumps()).span, Job.loads(job.dumps()).ends) == (1, (10.0, 50.0))
    retry = Job("reflection", ALICE, 100.0, owner="o", span=0, ends=(10.0, 10.0))
    assert (Job.loads(retry.dumps()).span, Job.loads(retry.dumps()).ends) == (0, (10.0, 10.0))
    older = {k: v for k, v in record.items() if k != "ends"}
    assert (Job.loads(json.dumps(older)).span, Job.loads(json.dumps(older)).ends) == (3, ())


@pytest.mark.parametrize(
    "ends",
    ["10", [10.0, 20.0, 30.0, 40.0, 50.0], [50.0, 10.0], [True], [float("nan")], [10**400]],
)
def test_a_record_with_windows_that_cannot_be_is_refused(ends: object) -> None:
    record = json.loads(Job("reflection", ALICE, 100.0, owner="o").dumps())
    record.update(ends=ends, span=min(5, 1 + len(ends)) if isinstance(ends, list) else 2)
    with pytest.raises(JobRecordError, match="'ends'"):
        Job.loads(json.dumps(record))
    record.update(ends=[10.0, 20.0], span=1)
    with pytest.raises(JobRecordError, match="'span' must count"):
        Job.loads(json.dumps(record))
    record.update(ends=[], now=-(10**400))
    with pytest.raises(JobRecordError, match="'now'"):
        Job.loads(json.dumps(record))


def test_a_reflection_taking_the_place_of_another_shows_its_windows(
    caplog: pytest.LogCaptureFixture,
) -> None:
    newer = Job("reflection", ALICE, 100.0, ends=(60.0,))
    coalesce(newer, Job("reflection", ALICE, 50.0, ends=(20.0,)))
    assert newer.ends == (20.0, 50.0, 60.0)
    retry = Job("reflection", ALICE, 55.0, span=0, ends=(5.0,))
    coalesce(newer, retry)  # a retry's own turn is no window
    assert newer.ends == (5.0, 20.0, 50.0, 60.0)
    assert not caplog.records
    coalesce(newer, Job("reflection", ALICE, 40.0))
    assert newer.ends == (20.0, 40.0, 50.0, 60.0)  # the oldest goes, said
    assert "the oldest 1 are not reflected" in caplog.text


@pytest.mark.parametrize("upkeep", ["inline", "background"])
def test_an_agent_made_anew_for_each_turn_keeps_the_rooms_cadence(
    make_store: StoreFactory, upkeep: str
) -> None:
    # A process a turn (a CLI, a serverless function): counted in memory, the cadence
    # began again with each, and no reflection ever ran.
    mem = make_store(f"anew-{upkeep}", WordHashEmbedder())
    model = Shown()
    for n in range(1, 7):
        am = agent(mem, model, reflection=Reflection(every=3, window=6), upkeep=upkeep)
        turn(am, am.event("telegram", 7, chat_id=1), f"user says msg{n}")
        assert am.drain(timeout=60)
        am.close()
    assert model.answered() == Counter(str(n) for n in range(1, 7))
    assert [said for said, _ in model.calls] == [["1", "2", "3"], ["4", "5", "6"]]


@pytest.mark.parametrize("upkeep", ["inline", "background"])
def test_two_agents_taking_turns_in_one_room_follow_each_others_reflections(
    make_store: StoreFactory, upkeep: str
) -> None:
    # Each counted its own turns after its first: nearly half the room's turns were
    # shown to no reflection, and some to two.
    mem = make_store(f"alternate-{upkeep}", WordHashEmbedder())
    model = Shown()
    agents = [
        agent(mem, model, reflection=Reflection(every=3, window=6), upkeep=upkeep) for _ in range(2)
    ]
    for n in range(1, 13):
        am = agents[n % 2]
        turn(am, am.event("telegram", 7, chat_id=1), f"user says msg{n}")
        for each in agents:
            assert each.drain(timeout=60)
    assert model.answered() == Counter(str(n) for n in range(1, 13))
    for am in agents:
        am.close()


def test_a_reflection_not_recorded_in_a_process_a_turn_is_shown_by_the_next(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The room's mark was written when the reflection was due, before it was recorded:
    # the next process counted no turn since, and the window was never shown.
    from memlane.agent.upkeep.holding import Holding

    mem = make_store("not-recorded-anew", WordHashEmbedder())
    model = Shown()
    record, calls = Holding.record, []

    def refused(self: Holding, job: Job) -> None:  # a full disk, or a kill
        calls.append(job)
        if len(calls) == 1:
            raise StorageError("disk full")
        record(self, job)

    monkeypatch.setattr(Holding, "record", refused)
    for n in range(1, 8):
        am = agent(mem, model, reflection=Reflection(every=3, window=6))
        turn(am, am.event("telegram", 7, chat_id=1), f"user says msg{n}")
        assert am.drain(timeout=60)
        am.close()
    assert model.answered() == Counter(str(n) for n in range(1, 8))


def test_turns_without_user_text_count_towards_the_cadence(make_store: StoreFactory) -> None:
    # A photo, a sticker: the turn stores the reply alone. Counting user messages left
    # such turns out, and a window counted in messages then fell short of earlier turns.
    mem = make_store("photos", WordHashEmbedder())
    model = Shown()
    am = agent(mem, model, reflection=Reflection(every=3, window=6))
    event = am.event("telegram", 7, chat_id=1)
    photo = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x.png"}}]}]
    for n in range(1, 13):
        if n % 3 == 1:
            turn(am, event, f"user says msg{n}")
        else:
            am.after(event, am.before(event, photo), "nice photo")
        assert am.drain(timeout=60)
    assert model.answered() == Counter(["1", "4", "7", "10"])
    am.close()


def test_a_rooms_mark_is_its_stores_default_scopes_own(make_store: StoreFactory) -> None:
    # Two agents told apart by their stores' default_scope shared one mark: each one's
    # reflection moved the other's, and turns went unshown.
    from memlane.agent.upkeep import cadence

    room = {"user_id": "telegram:7", "room_id": "telegram:1"}
    keys = {
        cadence._key(make_store(f"scope-{a}", default_scope={"agent_id": a}), "memories", room)
        for a in ("a", "b")
    }
    assert len(keys) == 2


def test_turns_stored_by_an_earlier_version_are_counted(make_store: StoreFactory) -> None:
    # Only marked first messages were counted: a room's turns from before the upgrade
    # (or from an older process sharing the store) went unshown.
    mem = make_store("upgraded", WordHashEmbedder())
    model = Shown()
    am = agent(mem, model, reflection=Reflection(every=3, window=6))
    event = am.event("telegram", 7, chat_id=1)
    for n in (1, 2):  # as an earlier version stored a turn: no mark on its first message
        for role, text in (("user", f"user says msg{n}"), ("assistant", "ok")):
            meta = {"role": role, "identity": event.identity, "source": event.source}
            mem.add(text, table=MESSAGES, metadata=meta, created_at=100.0 + n, **event.history)
    turn(am, event, "user says msg3")
    assert am.drain(timeout=60)
    assert model.answered() == Counter(["1", "2", "3"])
    am.close()


def test_a_message_added_with_the_turn_mark_is_stored_without_it(
    make_store: StoreFactory,
) -> None:
    from memlane.agent.history import TURN, add_message

    mem = make_store("forged-turn", WordHashEmbedder())
    event = SCOPES.resolve("telegram", 7, 1)
    rec = add_message(mem, "a note", event, role="system", metadata={TURN: True, "k": 1})
    assert TURN not in rec.metadata and rec.metadata["k"] == 1
