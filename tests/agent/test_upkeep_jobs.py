"""Upkeep attacked: a reflection killed halfway finishes every fact once; a job is run only
by an AgentMemory of its owner and only once its holder is gone; hostile job records are
skipped and kept; a model that never answers leaves a bounded queue and current
profiles; ``after`` on a closed AgentMemory stores nothing. On both backends."""

from __future__ import annotations

import contextlib
import gc
import json
import os
import signal
import subprocess
import sys
import threading
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import TESTS, StoreFactory, WordHashEmbedder
from memlane import ClosedError, Memory
from memlane.agent import (
    CONTACTS,
    MESSAGES,
    Consolidation,
    Profiles,
    Reflection,
    SessionScope,
)
from memlane.agent.upkeep import Job
from memlane.agent.upkeep.jobs import MAX_SPAN, JobRecordError, JobSkippedWarning, owner_of
from memlane.errors import InvalidArgumentError, StoreLockedError
from upkeep_scripts import KILLED_REFLECTION, Hung, Model, agent, said, turn

FACTS = ["Alice keeps bees", "Alice plays the oboe", "Alice was born in Quito"]
ANSWER = json.dumps({"operations": [{"op": "remember", "content": f} for f in FACTS]})


# -- a reflection killed halfway ------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:memlane.*snapshot:RuntimeWarning")
@pytest.mark.parametrize("stall_at", [1, 2])
def test_a_reflection_killed_halfway_stores_every_fact_once(
    make_store: StoreFactory, tmp_path: Path, stall_at: int
) -> None:
    """Killed while fact ``stall_at`` (0-based) is embedded, after the ones before it were
    committed: the next AgentMemory stores the rest from the answer the job kept, without
    asking the model again, and none twice."""
    location = make_store.location("killed")
    cache = "-" if make_store.server is None else str(tmp_path / "child-cache")
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            KILLED_REFLECTION,
            str(location),
            cache,
            str(TESTS),
            FACTS[stall_at],
            ANSWER,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert sorted(said(child, 2)) == ["EMBEDDING", "TURNS"]
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.communicate(timeout=60)
    mem = make_store("killed", WordHashEmbedder())
    alice = SessionScope("per-peer").resolve("telegram", 42, 7)
    stored = [r.text for r in mem.list("memories", order="asc", **alice.fields)]
    assert stored == FACTS[:stall_at]
    (record,) = [json.loads(v) for _, v in mem.jobs.items()]
    assert record["plan"]["raw"] == ANSWER
    model = Model(ANSWER)
    am = agent(mem, model)
    turn(am, alice, "good morning")  # the 1st turn of a window: only the job found runs
    assert am.drain(timeout=60)
    assert model.prompts == []  # the answer kept in the job was used
    assert mem.jobs.items() == []
    texts = [r.text for r in mem.list("memories", **alice.fields)]
    assert sorted(texts) == sorted(FACTS)
    am.close()


# -- owners -----------------------------------------------------------------------------------


def test_another_agents_job_in_flight_is_not_resumed(make_store: StoreFactory) -> None:
    """Agent A's reflection waits for its slow model; agent B (another table) on the same
    store never sends A's conversation to its model, and A's facts are stored once."""
    mem = make_store("two", WordHashEmbedder())
    gate = threading.Event()
    model_a = Model(ANSWER, gate=gate)
    model_b = Model(json.dumps({"operations": []}))
    a = agent(mem, model_a, table="memories_a")
    b = agent(mem, model_b, table="memories_b")
    alice = a.event("telegram", 42, 7)
    turn(a, alice, "my secret code is 1234")
    turn(a, alice, "remember it")
    assert model_a.entered.wait(30)
    bob = b.event("telegram", 99, 8)
    turn(b, bob, "hello")
    turn(b, bob, "how are you")
    assert b.drain(timeout=60)
    gate.set()
    assert a.drain(timeout=60)
    assert not any("1234" in p for p in model_b.seen)
    assert len(model_b.prompts) == 1  # its own reflection
    assert sorted(r.text for r in mem.list("memories_a")) == sorted(FACTS)
    assert mem.count("memories_b") == 0
    assert mem.jobs.items() == []
    a.close()
    b.close()


def test_a_closed_agents_job_is_resumed_by_its_owner_only(make_store: StoreFactory) -> None:
    """A job a closed AgentMemory never started (its holder gone once its running job
    ended): an agent of another table never runs it; one of the same table and scopes
    does, once."""
    mem = make_store("left", WordHashEmbedder())
    hung = Hung()
    first = agent(mem, hung)
    alice = first.event("telegram", 42, 7)
    bob = first.event("telegram", 99, 8)
    for event, text in ((alice, "hi"), (alice, "there"), (bob, "my code is 1234"), (bob, "ok")):
        turn(first, event, text)
    left = first.close(timeout=0.05)
    assert [j.kind for j in left] == ["reflection", "reflection"]
    other = Model(json.dumps({"operations": []}))
    # Its own cadence is not due: the room's turns so far are 3 of its 10.
    stranger = agent(mem, other, table="elsewhere", reflection=Reflection(every=10))
    turn(stranger, alice, "hi")
    assert stranger.drain(timeout=60)
    assert other.prompts == [] and len(mem.jobs.items()) == 2
    owner = Model(ANSWER)
    again = agent(mem, owner, reflection=Reflection(every=10))  # none of its own due
    turn(again, bob, "first try")  # the first agent still runs a job: its holder lives
    assert again.drain(timeout=60)
    assert owner.prompts == [] and len(mem.jobs.items()) == 2
    hung.release.set()  # the running job ends (its record goes), and with it the holder
    assert first.drain(timeout=60)
    again._upkeep._scanned = None  # look again now rather than in a minute
    turn(again, alice, "hello again")
    assert again.drain(timeout=60)
    assert len(owner.prompts) == 1 and "1234" in owner.prompts[0]
    assert sorted(r.text for r in mem.list("memories", **bob.fields)) == sorted(FACTS)
    assert mem.count("memories", **alice.fields) == 0
    assert mem.jobs.items() == []
    for am in (stranger, again):
        am.close()


_HOLDER = """
import sys, time, threading
from memlane import AgentMemory, Memory
from memlane.agent import (Compaction, Consolidation, DailyLog, FlushReminder, Profiles,
                           Reflection, SessionScope)
sys.path.insert(0, sys.argv[3])
from conftest import WordHashEmbedder

class Slow:
    def complete(self, messages):
        if "New facts:" in messages[-1]["content"]:
            return '{"decisions": []}'
        print("REFLECTING", flush=True)
        sys.stdin.readline()
        return sys.argv[4]

mem = Memory(sys.argv[1], WordHashEmbedder(), cache_dir=sys.argv[2])
am = AgentMemory(mem, SessionScope("per-peer"), Slow(), reflection=Reflection(every=2),
                 consolidation=Consolidation(enabled=False), flush=FlushReminder(enabled=False),
                 compaction=Compaction(enabled=False), daily=DailyLog(enabled=False),
                 profiles=Profiles(enabled=False), context={"min_score": None})
alice = am.event("telegram", 42, 7)
for text in ("my secret code is 1234", "remember it"):
    msgs = am.before(alice, [{"role": "user", "content": text}])
    am.after(alice, msgs, "ok")
am.drain(120)
am.close()
mem.close()
print("DONE", flush=True)
"""


def test_a_job_held_by_a_live_process_is_not_taken(
    make_store: StoreFactory, tmp_path: Path
) -> None:
    """Two processes on one PostgreSQL store, the same agent: while the first waits for
    its model, the second does not run its job; the job runs once."""
    if make_store.server is None:
        pytest.skip("one process at a time opens an embedded store (its lock)")
    location = make_store.location("shared")
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _HOLDER,
            str(location),
            str(tmp_path / "c1"),
            str(TESTS),
            ANSWER,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdin is not None
        assert said(child, 1) == ["REFLECTING"]
        mem = make_store("shared", WordHashEmbedder())
        model = Model(ANSWER)
        second = agent(mem, model)
        alice = second.event("telegram", 42, 7)
        turn(second, alice, "hello from elsewhere")
        assert second.drain(timeout=60)
        assert model.prompts == [] and len(mem.jobs.items()) == 1
        child.stdin.write("go\n")
        child.stdin.flush()
        assert said(child, 1) == ["DONE"]
    finally:
        child.kill()
        child.communicate(timeout=60)
    assert mem.jobs.items() == []
    assert sorted(r.text for r in mem.list("memories", **alice.fields)) == sorted(FACTS)
    second.close()


# -- hostile records --------------------------------------------------------------------------


def _record(mem: Memory, job: Job) -> None:
    mem.jobs.put(job.key, job.dumps())


def test_records_that_are_not_jobs_are_skipped_and_kept(make_store: StoreFactory) -> None:
    mem = make_store("junk", WordHashEmbedder())
    scopes = SessionScope("per-peer")
    alice = scopes.resolve("telegram", 42, 7)
    owner = owner_of("memories", scopes)
    good = Job("reflection", alice, 1_000.0, owner=owner)
    junk = {
        "0000000000000000.000001:a": "{not json",
        "0000000000000000.000002:b": json.dumps({"event": "x"}),
        "0000000000000000.000003:c": json.dumps({"v": 2, "kind": "reflection"}),
        "0000000000000000.000004:d": json.dumps(
            {**json.loads(good.dumps()), "kind": "launch-missiles"}
        ),
        "0000000000000000.000005:e": "[" * 50_000 + "]" * 50_000,
        "0000000000000000.000006:f": json.dumps({**json.loads(good.dumps()), "now": "soon"}),
        "0000000000000000.000007:g": json.dumps({**json.loads(good.dumps()), "v": 1}),
    }
    for key, value in junk.items():
        mem.jobs.put(key, value)
    _record(mem, good)
    model = Model(ANSWER)
    am = agent(mem, model)
    with pytest.warns(JobSkippedWarning) as caught:
        turn(am, alice, "hello")
    assert am.drain(timeout=60)
    assert len({str(w.message) for w in caught}) == len(junk)
    assert len(model.prompts) == 1  # the good job after them ran
    assert dict(mem.jobs.items()) == junk  # kept for inspection
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        turn(am, alice, "again")  # reported once
    am.close()


def test_a_forged_job_cannot_reach_another_scope(make_store: StoreFactory) -> None:
    """A record naming Alice's contact with Bob's scope fields (or a room on another
    platform) is not run: the agent resolves the contact itself."""
    mem = make_store("forged", WordHashEmbedder())
    scopes = SessionScope("per-peer")
    owner = owner_of("memories", scopes)
    alice = scopes.resolve("telegram", 42, 7)
    bob = scopes.resolve("telegram", 99, 8)
    forged = Job("reflection", alice, 1_000.0, owner=owner)
    record = json.loads(forged.dumps())
    record["event"]["fields"] = bob.fields
    mem.jobs.put(forged.key, json.dumps(record))
    model = Model(ANSWER)
    am = agent(mem, model)
    with pytest.warns(JobSkippedWarning, match="scope"):
        turn(am, bob, "hi")
    assert am.drain(timeout=60)
    assert model.prompts == []
    assert mem.count("memories") == 0
    am.close()
    with pytest.raises(JobRecordError):
        Job.loads(json.dumps(record)).resolved(SessionScope("per-peer", agent_id="other"))


# -- a model that never answers -------------------------------------------------------------


def test_a_hung_model_leaves_a_bounded_queue_and_current_profiles(
    make_store: StoreFactory,
) -> None:
    mem = make_store("hung", WordHashEmbedder())
    hung = Hung()
    am = agent(
        mem,
        hung,
        reflection=Reflection(every=1),
        consolidation=Consolidation(threshold=3, batch=2),
        profiles=Profiles(),
        upkeep_timeout=0.05,
    )
    alice = am.event("telegram", 42, 7, name="Alice")
    most_pending = most_recorded = 0
    for i in range(300):
        turn(am, alice, f"message {i}")
        most_pending = max(most_pending, len(am.pending_upkeep()))
        if i % 50 == 0:
            most_recorded = max(most_recorded, len(mem.jobs.items()))
    # One job runs and one waits per kind and room, on each worker; a record outlives its
    # job by the moment its worker takes to drop it, so on busy cores a kind may briefly
    # hold three (reflection, consolidation and profiles here). Without the bound, 300
    # turns against a hung model would leave hundreds.
    assert most_pending <= 5, most_pending
    assert most_recorded <= 3 * 3, most_recorded
    assert hung.calls == 1  # the hung call holds off the next ones
    assert am.drain(timeout=60)
    (profile,) = mem.list(CONTACTS, **alice.fields)
    assert profile.metadata["message_count"] == 300
    assert mem.count(MESSAGES, **alice.history) == 600
    hung.release.set()
    am.close(timeout=60)


def test_the_queue_bound_is_said_in_the_report(make_store: StoreFactory) -> None:
    mem = make_store("full", WordHashEmbedder())
    hung = Hung()
    am = agent(mem, hung, reflection=Reflection(every=1), max_pending=2)
    reports = [turn(am, am.event("telegram", n, n), f"hello {n}") for n in range(6)]
    full = [f for r in reports for f in r.failures if "queue full" in f.error]
    assert full and all(f.trigger == "reflection" for f in full)
    assert len(am.pending_upkeep()) <= 3  # the running one and max_pending waiting
    # A refused reflection stays recorded, held, as a failed one does (its room's next
    # turn retries its window): no more than one a room is added.
    assert len(mem.jobs.items()) <= 3 + len(full)
    hung.release.set()
    am.close(timeout=60)


# -- closed --------------------------------------------------------------------------------


def test_after_on_a_closed_agent_stores_nothing(make_store: StoreFactory) -> None:
    mem = make_store("closed", WordHashEmbedder())
    am = agent(mem, Model(ANSWER))
    alice = am.event("telegram", 42, 7)
    turn(am, alice, "hello")
    am.close()
    before = mem.count(MESSAGES)
    with pytest.raises(ClosedError, match="closed"):
        am.after(alice, [{"role": "user", "content": "anyone?"}], "ok")
    with pytest.raises(ClosedError):
        am.before(alice, [{"role": "user", "content": "anyone?"}])
    assert mem.count(MESSAGES) == before


def test_upkeep_settings_are_checked(make_store: StoreFactory) -> None:
    mem = make_store("settings", WordHashEmbedder())
    for bad in ({"upkeep_timeout": 0}, {"upkeep_timeout": -1}, {"max_pending": 0}):
        with pytest.raises(InvalidArgumentError):
            agent(mem, Model(ANSWER), **bad)


def test_a_dropped_agent_releases_its_store(tmp_path: Path) -> None:
    """An AgentMemory and its Memory nobody holds release the store at once (the workers'
    threads hold neither), and a durable job left is resumed by the next one."""
    gc.disable()
    try:
        mem = Memory(tmp_path / "dropped", WordHashEmbedder())
        gate = threading.Event()
        model = Model(ANSWER, gate=gate)
        am = agent(mem, model)
        alice = am.event("telegram", 42, 7)
        turn(am, alice, "hello")
        turn(am, alice, "again")  # a reflection waits for the gate
        assert model.entered.wait(30)
        bob = am.event("telegram", 99, 8)
        turn(am, bob, "hi")
        turn(am, bob, "there")  # a second one waits behind it
        del am, mem
        gate.set()
        for _ in range(600):  # the running job ends, then the store is free
            try:
                again = Memory(tmp_path / "dropped", WordHashEmbedder())
                break
            except StoreLockedError:
                threading.Event().wait(0.05)
        else:
            raise AssertionError("the store stayed locked")
    finally:
        gc.enable()
    assert len(again.jobs.items()) == 1  # bob's, never started
    resumed = agent(again, Model(ANSWER))
    turn(resumed, bob, "back")
    assert resumed.drain(timeout=60)
    assert again.jobs.items() == []
    resumed.close()
    again.close()


def test_a_forged_plan_or_tag_cannot_reach_another_scope(make_store: StoreFactory) -> None:
    """A job record in Alice's scope whose kept answer names Bob's memory, and a tagged
    record whose sources name Bob's short-term entry: Bob's memories stay as they were."""
    mem = make_store("forged-plan", WordHashEmbedder())
    scopes = SessionScope("per-peer")
    owner = owner_of("memories", scopes)
    alice = scopes.resolve("telegram", 42, 7)
    bob = scopes.resolve("telegram", 99, 8)
    secret = mem.add("Bob's code is 1234", table="memories", **bob.fields)
    entry = mem.add("Bob said hi", table="short_term", **bob.fields)
    forged = Job("reflection", alice, 1_000.0, owner=owner)
    update = {"op": "update", "memory": 1, "content": "Bob's code is 0000"}
    mem.jobs.put(
        forged.key,
        forged.with_plan(
            {"raw": json.dumps({"operations": [update]}), "shown": [secret.id]}
        ).dumps(),
    )
    tagged = Job("consolidation", alice, 1_001.0, owner=owner)
    mem.jobs.put(tagged.key, tagged.dumps())
    mem.add(
        "a summary",
        table="memories",
        metadata={"upkeep_job": tagged.id, "consolidated_from": [entry.id]},
        **alice.fields,
    )
    am = agent(mem, Model(ANSWER), consolidation=Consolidation())
    turn(am, alice, "hello")
    assert am.drain(timeout=60)
    assert mem.get(secret.id).text == "Bob's code is 1234" and mem.get(secret.id).valid_to is None
    assert mem.get(entry.id).text == "Bob said hi"
    assert mem.jobs.items() == []
    am.close()


def test_a_reflection_that_replaced_waiting_ones_shows_their_turns(
    make_store: StoreFactory,
) -> None:
    """Jobs of a room coalesce while a slow model runs one: the job that took their place
    shows every turn they would have shown (up to MAX_SPAN windows)."""
    mem = make_store("span", WordHashEmbedder())
    gate = threading.Event()
    model = Model(json.dumps({"operations": []}), gate=gate)
    am = agent(mem, model, reflection=Reflection(every=2, window=4))
    alice = am.event("telegram", 42, 7)
    for i in range(12):
        turn(am, alice, f"secret{i}")
        if i == 1:
            assert model.entered.wait(30)
    gate.set()
    assert am.drain(timeout=60)
    shown = {i for i in range(12) for p in model.prompts if f"secret{i}" in p}
    assert shown == set(range(12)), sorted(set(range(12)) - shown)
    assert len(model.prompts) == 2
    am.close()


def test_after_racing_close_raises_no_raw_error(make_store: StoreFactory) -> None:
    class Slow(WordHashEmbedder):
        def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
            if any("slow reply" in t for t in texts):
                threading.Event().wait(0.5)
            return super().embed_batch(texts)

    mem = make_store("race", Slow())
    am = agent(mem, Model(ANSWER), reflection=Reflection(every=1))
    alice = am.event("telegram", 42, 7)
    closer = threading.Timer(0.2, am.close)
    closer.start()
    with contextlib.suppress(ClosedError):  # closed before the turn began: nothing stored
        am.after(alice, [{"role": "user", "content": "hello"}], "slow reply")
    closer.join()
    assert not am.pending_upkeep()


def test_a_reflection_far_behind_keeps_a_record_it_can_read(make_store: StoreFactory) -> None:
    """Windows that failed reflections left, then more turns than one window taken by
    another object of the room: the job that shows them all writes a record this version
    reads back (a crash finds it again instead of skipping it), and it shows at most
    MAX_SPAN windows, the newest."""

    class FailsThenWaits(Model):
        def __init__(self) -> None:
            super().__init__(json.dumps({"operations": []}), gate=threading.Event())
            self.down = True

        def complete(self, messages: Any) -> str:
            if self.down and "New facts:" not in messages[-1]["content"]:
                raise ConnectionError("the model is down")
            return super().complete(messages)

    mem = make_store("behind", WordHashEmbedder())
    model = FailsThenWaits()
    am = agent(mem, model, reflection=Reflection(every=2, window=2))
    alice = am.event("telegram", 42, 7)
    for i in range(8):  # every reflection fails; their windows are left
        turn(am, alice, f"early{i}")
        assert am.drain(timeout=60)
    other = agent(mem, None, reflection=Reflection(every=2, window=2))
    for i in range(6):  # three windows more, taken by an object without a model
        turn(other, other.event("telegram", 42, 7), f"middle{i}")
    other.close()
    model.down = False
    turn(am, alice, "late")
    assert model.entered.wait(30)
    records = [v for _, v in mem.jobs.items()]
    assert records
    for text in records:
        job = Job.loads(text)  # raised JobRecordError: a span past MAX_SPAN was written
        assert job.span + len(job.ends) <= MAX_SPAN
    model.gate.set()
    assert am.drain(timeout=60)
    (prompt,) = model.prompts
    assert "late" in prompt and "middle5" in prompt
    am.close()


def test_a_record_past_the_span_an_older_version_wrote_shows_its_newest_windows() -> None:
    """A version before the limit wrote a job's own windows and up to four more: such a
    record is read, showing its newest MAX_SPAN windows; more than it could write is no
    job."""
    alice = SessionScope("per-peer").resolve("telegram", 42, 7)
    job = Job("reflection", alice, 100.0, owner="o" * 32, span=3, ends=(10.0, 20.0, 30.0, 40.0))
    record = json.loads(job.dumps())
    assert record["span"] == 7
    loaded = Job.loads(json.dumps(record))
    assert (loaded.span, loaded.ends) == (3, (30.0, 40.0))
    assert loaded.span + len(loaded.ends) == MAX_SPAN
    record["span"] = 2 * MAX_SPAN
    with pytest.raises(JobRecordError, match="span"):
        Job.loads(json.dumps(record))
    record["span"], record["ends"] = MAX_SPAN + 1, []
    with pytest.raises(JobRecordError, match="span"):
        Job.loads(json.dumps(record))
