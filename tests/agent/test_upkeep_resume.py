"""Jobs found again after a crash, and whose they are: a resumed job is never coalesced
away by a job of its slot (it may have done part of its work), and a holder in another
PID namespace of the same host (a container with host networking) is left to its lease,
its pid meaning nothing to this process."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from conftest import TESTS, StoreFactory, WordHashEmbedder
from memlane.agent import Consolidation, Reflection, SessionScope
from memlane.agent.callers import Caller
from memlane.agent.upkeep import Job
from memlane.agent.upkeep.jobs import Holder, JobKind, JobRecordError, coalesce, owner_of
from memlane.agent.upkeep.worker import Worker
from memlane.errors import UnknownIdError
from upkeep_scripts import Model, agent, said, turn

SCOPES = SessionScope("per-peer")
ALICE = SCOPES.resolve("telegram", 42, 7)
BOB = SCOPES.resolve("telegram", 99, 8)

# -- a resumed job and its slot ------------------------------------------------------------


class Runs:
    """A worker's ``run`` that keeps the order of the jobs it ran; the first waits for
    ``gate``, so the others wait in the queue meanwhile."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.ran: list[str] = []

    def __call__(self, job: Job, call: Caller | None) -> None:
        self.entered.set()
        assert self.gate.wait(30)
        self.ran.append(job.id)


def _worker(runs: Runs) -> Worker:
    return Worker(lambda: runs, "test-upkeep", 10, merge=coalesce)


def _job(kind: JobKind, now: float, resumed: bool = False, **payload: Any) -> Job:
    if resumed:
        payload["resumed"] = True
    return Job(kind, ALICE, now, id=f"{kind}@{now}", payload=payload)


def test_a_resumed_job_runs_ahead_of_the_waiting_job_of_its_slot() -> None:
    runs = Runs()
    worker = _worker(runs)
    assert worker.submit(Job("daily", BOB, 0.0, id="busy"), None) is None
    assert runs.entered.wait(30)
    fresh = _job("consolidation", 20.0)
    assert worker.submit(fresh, None) is None
    found = _job("consolidation", 10.0, resumed=True)
    assert worker.submit(found, None) is None  # not coalesced away
    newer = _job("consolidation", 30.0)
    assert worker.submit(newer, None) is fresh  # fresh jobs still coalesce
    runs.gate.set()
    assert worker.wait(30)
    assert runs.ran == ["busy", found.id, newer.id]
    worker.close(0)


def test_a_resumed_job_is_not_replaced_by_a_job_of_its_slot_asked_later() -> None:
    runs = Runs()
    worker = _worker(runs)
    assert worker.submit(Job("daily", BOB, 0.0, id="busy"), None) is None
    assert runs.entered.wait(30)
    found = _job("reflection", 10.0, resumed=True)
    assert worker.submit(found, None) is None
    later = _job("reflection", 20.0)
    assert worker.submit(later, None) is None
    latest = _job("reflection", 30.0)
    assert worker.submit(latest, None) is later  # the fresh one waiting still coalesces
    assert latest.ends == (20.0,)  # it shows the window of the one it replaced
    runs.gate.set()
    assert worker.wait(30)
    assert runs.ran == ["busy", found.id, latest.id]
    worker.close(0)


def test_a_job_asked_before_the_one_waiting_hands_it_its_count() -> None:
    """Two turns of a room racing (or a clock set back): the profile job that waits takes
    over the count of the one asked before it, as it does the other way round."""
    runs = Runs()
    worker = _worker(runs)
    assert worker.submit(Job("daily", BOB, 0.0, id="busy"), None) is None
    assert runs.entered.wait(30)
    waiting = _job("profile", 20.0, count=1, names=["Al"])
    assert worker.submit(waiting, None) is None
    earlier = _job("profile", 10.0, count=2, names=["Alice"])
    assert worker.submit(earlier, None) is earlier
    assert waiting.payload == {"count": 3, "names": ["Alice", "Al"]}
    runs.gate.set()
    assert worker.wait(30)
    assert runs.ran == ["busy", waiting.id]
    worker.close(0)


class Gated:
    """Summarises every consolidation; Bob's waits for ``gate``, so the model worker is
    busy while the test queues Alice's."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.summaries = 0

    def complete(self, messages: Any) -> str:
        content = messages[-1]["content"]
        if "New facts:" in content:
            return json.dumps({"decisions": []})
        self.summaries += 1
        if "Bob" in content:
            self.entered.set()
            assert self.gate.wait(60)
        return json.dumps({"summary": "they talked", "facts": [], "confidence": 0.9})


def test_a_consolidation_found_again_is_finished_not_coalesced(
    make_store: StoreFactory,
) -> None:
    """A job found again that did part of its work (here a consolidation whose summary
    is stored and whose sources are not gone, as a process killed between the two left
    it before they became one transaction): another process of the agent, with a
    consolidation of that room waiting, finishes it (its sources go) before the waiting
    one runs, so no turn is summarised twice."""
    mem = make_store("resumed-consolidation", WordHashEmbedder())
    model = Gated()
    am = agent(
        mem,
        model,
        reflection=Reflection(enabled=False),
        consolidation=Consolidation(threshold=3, batch=3),
    )
    for text in ("Bob here", "Bob again", "Bob thrice"):  # the model worker: busy with Bob's
        turn(am, BOB, text)
    assert model.entered.wait(30)
    # What the killed process left: its job, its summary, the entries it summarised.
    sources = [
        mem.add(f"Alice said {t}", table="short_term", **ALICE.fields).id
        for t in ("I keep bees", "three hives", "in the garden")
    ]
    gone = Holder("elsewhere/boot/pid:[1]", 4321, "99", "dead", time.time() - 1)
    killed = Job("consolidation", ALICE, time.time() - 60, owner=owner_of("memories", SCOPES))
    mem.jobs.put(killed.key, killed.held_by(gone).dumps())
    mem.add(
        "Alice talked about bees",
        table="memories",
        metadata={"upkeep_job": killed.id, "consolidated_from": sources},
        **ALICE.fields,
    )
    turn(am, ALICE, "honey is great")  # Alice's own consolidation waits behind Bob's
    waiting = [j.kind for j in am.pending_upkeep() if j.event.fields == ALICE.fields]
    assert waiting == ["consolidation"]
    am._upkeep._scanned = None  # look for jobs left now rather than in a minute
    turn(am, BOB, "Bob once more")  # finds the killed job
    model.gate.set()
    assert am.drain(timeout=60)
    summaries = [
        set(r.metadata["consolidated_from"])
        for r in mem.list("memories", **ALICE.fields)
        if r.metadata.get("consolidated_from")
    ]
    assert all(not a & b for i, a in enumerate(summaries) for b in summaries[i + 1 :])
    for source in sources:
        with pytest.raises(UnknownIdError):
            mem.get(source)
    assert mem.jobs.items() == []
    am.close()


# -- holders in other PID namespaces --------------------------------------------------------


def _namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        pytest.skip("no PID namespace to read here (/proc/self/ns/pid)")


def _boot_id() -> str:
    return Path("/proc/sys/kernel/random/boot_id").read_text().strip()


def _started() -> str:
    return Holder.here("t", 0.0).started


def test_a_holder_names_its_pid_namespace() -> None:
    namespace = _namespace()
    assert Holder.here("t", 0.0).host == f"{socket.gethostname()}/{_boot_id()}/{namespace}"


@pytest.mark.parametrize("pid", ["mine", "dead", "init"])
def test_a_holder_in_another_pid_namespace_is_left_to_its_lease(pid: str) -> None:
    """A process of another container of this host: its pid may be this process's, no
    process's here, or another one's; none of them says whether it lives."""
    namespace = _namespace()
    assert namespace != "pid:[1]"
    host = f"{socket.gethostname()}/{_boot_id()}/pid:[1]"
    number = {"mine": os.getpid(), "dead": 1 << 30, "init": 1}[pid]
    started = _started() if pid == "mine" else "12345"
    now = time.time()
    assert not Holder(host, number, started, "theirs", now + 60).gone(frozenset(), now)
    assert Holder(host, number, started, "theirs", now - 1).gone(frozenset(), now)


def test_a_record_from_before_the_namespace_was_kept_is_left_to_its_lease() -> None:
    """A job recorded by an older memlane names the host without its namespace: it is
    read, and its holder (which may be in another container) is left to its lease."""
    _namespace()
    old = Holder(f"{socket.gethostname()}/{_boot_id()}", os.getpid(), _started(), "x", 0.0)
    now = time.time()
    for until, gone in ((now + 60, False), (now - 1, True)):
        job = Job("reflection", ALICE, now, owner=owner_of("memories", SCOPES))
        read = Job.loads(job.held_by(Holder(**{**old.as_dict(), "until": until})).dumps())
        assert read.holder is not None
        assert read.holder.gone(frozenset(), now) is gone


def test_this_processs_pid_with_another_start_is_a_process_gone() -> None:
    """A record of this host and namespace with this process's pid and another start
    time: a process that had this pid before and is gone."""
    here = Holder.here("closed", time.time() + 60)
    now = time.time()
    assert here.gone(frozenset(), now)  # this process, its AgentMemory closed
    assert not here.gone(frozenset({"closed"}), now)
    other = Holder(here.host, here.pid, "1", "before", here.until)
    assert other.gone(frozenset(), now)


_HOLDER = """
import sys
sys.path.insert(0, sys.argv[3])
from conftest import WordHashEmbedder
from memlane import Memory
from upkeep_scripts import agent, turn

class Slow:
    def complete(self, messages):
        if "New facts:" in messages[-1]["content"]:
            return '{"decisions": []}'
        print("REFLECTING", flush=True)
        sys.stdin.readline()
        return sys.argv[4]

mem = Memory(sys.argv[1], WordHashEmbedder(), cache_dir=sys.argv[2])
am = agent(mem, Slow())
alice = am.event("telegram", 42, 7)
for text in ("my secret code is 1234", "remember it"):
    turn(am, alice, text)
am.drain(120)
am.close()
mem.close()
print("DONE", flush=True)
"""


def _unshare() -> list[str]:
    """A command prefix that runs a process in a PID namespace of its own (as root, or
    in a user namespace of its own where the system lets users make one)."""
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("no unshare(1)")
    for extra in ([], ["--user", "--map-root-user"]):
        prefix = [unshare, *extra, "--pid", "--fork", "--mount-proc"]
        probe = subprocess.run([*prefix, "true"], capture_output=True, check=False)
        if probe.returncode == 0:
            return prefix
    pytest.skip("no PID namespace can be made here (needs root or user namespaces)")


def test_a_job_held_in_another_pid_namespace_is_not_taken(
    make_store: StoreFactory, tmp_path: Path
) -> None:
    """Two processes of one agent on one host name and PostgreSQL store, the first in a
    PID namespace of its own (where its pid is 1): while it waits for its model, the
    second does not run its job; the job runs once."""
    if make_store.server is None:
        pytest.skip("one process at a time opens an embedded store (its lock)")
    prefix = _unshare()
    answer = json.dumps({"operations": [{"op": "remember", "content": "Alice keeps bees"}]})
    location = make_store.location("namespaced")
    child = subprocess.Popen(
        [
            *prefix,
            sys.executable,
            "-c",
            _HOLDER,
            str(location),
            str(tmp_path / "c1"),
            str(TESTS),
            answer,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdin is not None
        assert said(child, 1) == ["REFLECTING"]
        mem = make_store("namespaced", WordHashEmbedder())
        ((_, record),) = mem.jobs.items()
        assert json.loads(record)["holder"]["pid"] == 1
        model = Model(answer)
        second = agent(mem, model)
        turn(second, ALICE, "hello from the other container")
        assert second.drain(timeout=60)
        assert model.prompts == [] and len(mem.jobs.items()) == 1
        child.stdin.write("go\n")
        child.stdin.flush()
        assert said(child, 1) == ["DONE"]
    finally:
        child.kill()
        child.communicate(timeout=60)
    assert mem.jobs.items() == []
    assert [r.text for r in mem.list("memories", **ALICE.fields)] == ["Alice keeps bees"]
    second.close()


def test_a_recorded_plan_keeps_the_versions_it_showed() -> None:
    # Reflection's forget deletes a memory only at the version shown; a plan read back
    # without them made a resumed reflection refuse every forget.
    plan = {"raw": "{}", "shown": ["m1", "m2"], "versions": [12.5, None]}
    recorded = replace(_job("reflection", 1.0), owner="agent").with_plan(plan)
    job = Job.loads(recorded.dumps())
    assert job.plan == plan


def test_a_plan_too_long_to_record_is_refused_before_anything_is_stored(
    make_store: StoreFactory,
) -> None:
    # An answer within the reflection's limit, kept as the plan with each emoji escaped
    # to 12 characters, made a record over the 1 MiB a record is read at: its facts were
    # stored one by one, and after a kill the job was skipped at every scan, never done.
    mem = make_store("big-plan", WordHashEmbedder())
    ops = [{"op": "remember", "content": f"fact {i} " + "\U0001f600" * 1500} for i in range(60)]
    model = Model(json.dumps({"operations": ops}, ensure_ascii=False))
    am = agent(mem, model, reflection=Reflection(every=1, max_output_tokens=20000))
    first = turn(am, ALICE, "tell me about you")
    assert am.drain(30)
    done = [o for o in turn(am, ALICE, "hi").upkeep + first.upkeep if o.kind == "reflection"]
    assert done and "too long to keep" in done[0].report.failures[0].error
    assert mem.count("memories", **ALICE.fields) == 0
    assert all(len(text) <= 1 << 20 for _, text in mem.jobs.items())
    am.close()
    too_long = replace(_job("reflection", 1.0), owner="agent", plan={"raw": "\U0001f600" * 90_000})
    with pytest.raises(JobRecordError, match="too long to keep"):
        too_long.dumps()


def test_a_record_with_no_room_for_a_new_holder_is_skipped_not_raised_in_a_turn(
    make_store: StoreFactory,
) -> None:
    # A released job whose record was within the 1 MiB a record is read at, but not with
    # the holder taking it over adds: the turn that took it over raised JobRecordError.
    import warnings

    from memlane.agent.upkeep.jobs import _MAX_RECORD, JobSkippedWarning
    from upkeep_scripts import Hung

    mem = make_store("no-room", WordHashEmbedder())
    hung = Hung()
    first = agent(mem, hung)
    for event, text in ((ALICE, "hi"), (ALICE, "there"), (BOB, "my code is 1234"), (BOB, "ok")):
        turn(first, event, text)
    first.close(timeout=0.05)
    # Bob's job, never started (Alice's runs, held by the hung model), as released.
    bob = BOB.fields["user_id"]
    key, text = next(
        (k, t) for k, t in mem.jobs.items() if json.loads(t)["event"]["fields"]["user_id"] == bob
    )
    record = json.loads(text)
    record["holder"] = None
    record["plan"] = {"raw": "", "shown": [], "versions": None}
    pad = _MAX_RECORD - len(json.dumps(record)) - 10
    record["plan"]["raw"] = "x" * pad
    assert mem.jobs.swap(key, text, json.dumps(record))
    again = agent(mem, Model(json.dumps({"operations": []})))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        turn(again, BOB, "hello again")
        turn(again, BOB, "and again")
    skipped = [w for w in caught if issubclass(w.category, JobSkippedWarning)]
    assert len(skipped) == 1 and "too long to keep" in str(skipped[0].message)
    again.close(timeout=5)
    hung.release.set()
