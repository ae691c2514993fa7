"""Background upkeep (the default): no turn waits for the LLM; the turn is stored before
``after`` returns; reflection and consolidation jobs are kept in the store until done,
resumed after a kill -9 and never done twice; ``drain`` waits for them, ``close`` says
what was left; a failing LLM never breaks or blocks a turn. On both backends."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import memlane._memory.job_book
from conftest import TESTS, StoreFactory, WordHashEmbedder
from memlane import AgentMemory, Memory
from memlane.agent import (
    MESSAGES,
    Compaction,
    Consolidation,
    DailyLog,
    FlushReminder,
    Profiles,
    Reflection,
    SessionScope,
    UpkeepResult,
)
from memlane.agent.upkeep import Job
from memlane.agent.upkeep.jobs import owner_of
from memlane.errors import InvalidArgumentError
from memlane.store import JobOutcome
from upkeep_scripts import keep_every_fact

QUIET = {
    "consolidation": Consolidation(enabled=False),
    "flush": FlushReminder(enabled=False),
    "compaction": Compaction(enabled=False),
    "daily": DailyLog(enabled=False),
    "profiles": Profiles(enabled=False),
}
FACT = json.dumps({"operations": [{"op": "remember", "content": "Alice lives in Lisbon"}]})


class GatedLLM:
    """Answers reflection with ``FACT`` once the test opens the gate; counts its calls."""

    def __init__(self, answer: str = FACT, fail: bool = False) -> None:
        self.answer = answer
        self.fail = fail
        self.entered = threading.Event()
        self.gate = threading.Event()
        self.calls = 0

    def complete(self, messages: Any) -> str:
        self.calls += 1
        self.entered.set()
        if not self.gate.wait(60):
            raise TimeoutError("the test never opened the gate")
        if self.fail:
            raise ConnectionError("the model is down")
        return self.answer


def agent(mem: Memory, llm: Any, **options: Any) -> AgentMemory:
    settings = {**QUIET, "reflection": Reflection(every=2), **options}
    return AgentMemory(mem, SessionScope("per-peer"), llm, context={"min_score": None}, **settings)


def turn(am: AgentMemory, event: Any, text: str) -> Any:
    msgs = am.before(event, [{"role": "user", "content": text}])
    return am.after(event, msgs, "ok")


def test_after_returns_while_the_llm_reflects(make_store: StoreFactory) -> None:
    mem = make_store("bg", WordHashEmbedder())
    llm = GatedLLM()
    done: list[UpkeepResult] = []
    am = agent(mem, llm, on_upkeep=done.append)
    alice = am.event("telegram", 42, 7)
    turn(am, alice, "I moved to Lisbon")
    report = turn(am, alice, "it is sunny here")  # the 2nd turn: reflection is due
    # after() returned with the LLM still answering: the turn did not wait for it.
    assert llm.entered.wait(30) and not llm.gate.is_set()
    assert report.reflection is None and report.ok
    assert mem.count(MESSAGES, **alice.history) == 4  # the turn is stored already
    assert [k for k, _ in mem.jobs.items()] != []  # the job is recorded until done
    # A turn while reflection runs goes through, and sees the store as it is.
    third = turn(am, alice, "what is the weather?")
    assert third.ok and mem.count(MESSAGES, **alice.history) == 6
    assert [j.kind for j in am.pending_upkeep()] == ["reflection"]
    llm.gate.set()
    assert am.drain(timeout=60)
    assert am.pending_upkeep() == [] and mem.jobs.items() == []
    (result,) = done
    assert result.kind == "reflection" and result.report.reflection is not None
    assert [r.text for r in result.report.reflection.added] == ["Alice lives in Lisbon"]
    fact = mem.list("memories", **alice.fields)[0]
    assert fact.metadata["upkeep_job"]  # names the job that stored it
    # The next turn's report carries what the upkeep did since the last one.
    fourth = turn(am, alice, "thanks")
    assert [u.kind for u in fourth.upkeep] == ["reflection"]
    assert am.drain(timeout=60)
    assert llm.calls == 2  # the 4th turn asked for the next reflection
    assert am.close(timeout=60) == []


def test_a_failing_llm_never_breaks_a_turn(make_store: StoreFactory) -> None:
    mem = make_store("bg", WordHashEmbedder())
    llm = GatedLLM(fail=True)
    llm.gate.set()
    done: list[UpkeepResult] = []
    am = agent(mem, llm, on_upkeep=done.append)
    alice = am.event("telegram", 42, 7)
    turn(am, alice, "I moved to Lisbon")
    assert turn(am, alice, "it is sunny").ok
    assert am.drain(timeout=60)
    assert [f.trigger for f in done[0].report.failures] == ["reflection"]
    assert "the model is down" in done[0].report.failures[0].error
    # The failure reaches the next turn's report, and reflection is due again there.
    nxt = turn(am, alice, "hello again")
    assert [f.trigger for f in nxt.failures] == ["reflection"]
    assert am.drain(timeout=60)
    assert llm.calls == 2
    assert mem.count(MESSAGES, **alice.history) == 6
    # The second failure, a retry of the first's window alone, stays recorded with it:
    # the first was dropped once the second, which covers it, was recorded.
    (left,) = [json.loads(job) for _, job in mem.jobs.items()]
    assert (left["kind"], left["span"], len(left["ends"])) == ("reflection", 1, 1)
    am.close()
    # Whatever ends the process before the room's next turn, the next AgentMemory
    # reflects the turns the failures left.
    up = GatedLLM()
    up.gate.set()
    again = agent(mem, up)
    turn(again, alice, "back again")
    assert again.drain(timeout=60)
    assert up.calls >= 1 and mem.jobs.items() == []
    assert [r.text for r in mem.list("memories", **alice.fields)] == ["Alice lives in Lisbon"]
    again.close()


class CheckFails:
    """Reflects each turn it is shown into a fact of its own (``msg-N``), and fails the
    check of new facts that follows (the same job, the same model)."""

    def __init__(self) -> None:
        self.shown: list[int] = []

    def complete(self, messages: Any) -> str:
        text = messages[-1]["content"]
        if "New facts:" in text:
            raise ConnectionError("the model is down for checks")
        turns = sorted({int(n) for n in re.findall(r"msg-(\d+)", text)})
        self.shown += turns
        ops = [{"op": "remember", "content": f"Item {n}"} for n in turns]
        return json.dumps({"operations": ops})


def test_a_reflection_applied_is_not_asked_again_when_a_later_step_fails(
    make_store: StoreFactory,
) -> None:
    """Only the reflection's own failure makes it due again: a failed fact check after
    its answer was stored would have each turn reflected, and its facts stored, twice."""
    mem = make_store("check", WordHashEmbedder())
    llm = CheckFails()
    am = agent(mem, llm, reflection=Reflection(every=2, window=4))
    alice = am.event("telegram", 42, 7)
    for n in range(1, 7):
        turn(am, alice, f"msg-{n} hello")
        assert am.drain(timeout=60)
    assert sorted(llm.shown) == [1, 2, 3, 4, 5, 6]
    assert mem.jobs.items() == []
    am.close()


def test_each_jobs_outcome_is_kept_in_the_store(make_store: StoreFactory) -> None:
    """What each job cost and what failed is in the store, where another process reads
    it (memlane serve's inspector): the counts of its UpkeepResult."""
    mem = make_store("bg", WordHashEmbedder())
    llm = GatedLLM()
    llm.gate.set()
    done: list[UpkeepResult] = []
    am = agent(mem, llm, on_upkeep=done.append)
    alice = am.event("telegram", 42, 7)
    turn(am, alice, "I moved to Lisbon")
    turn(am, alice, "it is sunny")
    assert am.drain(timeout=60)
    llm.fail = True
    turn(am, alice, "and warm")
    turn(am, alice, "very warm")
    assert am.drain(timeout=60)
    am.close()

    def key(kind: str, asked: float, calls: int, t_in: int, t_out: int, failed: Any) -> Any:
        return (asked, kind, calls, t_in, t_out, tuple(failed))

    kept = [
        key(o.kind, o.asked_at, o.calls, o.tokens_in, o.tokens_out, o.failures)
        for o in mem.jobs.outcomes()
    ]
    reported = [
        key(
            r.kind,
            r.asked_at,
            r.calls,
            r.tokens_in,
            r.tokens_out,
            ((f.trigger, f.error) for f in r.report.failures),
        )
        for r in done
    ]
    assert sorted(kept) == sorted(reported)
    reflections = [o for o in mem.jobs.outcomes() if o.kind == "reflection"]
    assert len(reflections) == 2
    assert reflections[0].calls == 1 and reflections[0].tokens_in > 0
    assert not reflections[0].failed
    assert [what for what, _ in reflections[1].failures] == ["reflection"]
    assert "the model is down" in reflections[1].failures[0][1]
    assert all(o.done_at >= o.asked_at for o in mem.jobs.outcomes())


def test_the_store_keeps_the_newest_outcomes(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(memlane._memory.job_book, "OUTCOMES_KEPT", 3)
    mem = make_store("kept", WordHashEmbedder())
    for i in range(5):
        mem.jobs.record_outcome(JobOutcome("facts", float(i), float(i) + 0.5, calls=i))
    assert [o.calls for o in mem.jobs.outcomes()] == [2, 3, 4]
    assert mem.jobs.items() == []  # the jobs waiting are apart from the outcomes
    with pytest.raises(InvalidArgumentError, match="tokens_in must be an int"):
        JobOutcome("facts", 1.0, 2.0, tokens_in=-1)
    assert JobOutcome("facts", 0, 1, tokens_in=2_000_000, tokens_out=500_000).cost(
        0.15, 0.6
    ) == pytest.approx(0.6)


def test_close_says_what_was_left_and_keeps_it_recorded(make_store: StoreFactory) -> None:
    mem = make_store("bg", WordHashEmbedder())
    llm = GatedLLM()
    am = agent(mem, llm)
    alice = am.event("telegram", 42, 7)
    turn(am, alice, "I moved to Lisbon")
    turn(am, alice, "it is sunny")
    assert llm.entered.wait(30)
    left = am.close(timeout=0.05)
    assert [j.kind for j in left] == ["reflection"]
    assert len(mem.jobs.items()) == 1
    llm.gate.set()  # the job running goes on to its end, and is then dropped
    for _ in range(600):
        if not mem.jobs.items():
            break
        threading.Event().wait(0.05)
    assert mem.jobs.items() == []
    assert [r.text for r in mem.list("memories", **alice.fields)] == ["Alice lives in Lisbon"]


def test_a_job_that_stored_its_work_is_not_done_again(make_store: StoreFactory) -> None:
    """A process killed after the job's facts were committed and before the job was
    dropped: the next AgentMemory finds it, sees its facts, and does not ask the LLM."""
    mem = make_store("bg", WordHashEmbedder())
    llm = GatedLLM()
    llm.gate.set()
    am = agent(mem, llm)
    alice = am.event("telegram", 42, 7)
    turn(am, alice, "I moved to Lisbon")
    turn(am, alice, "it is sunny")
    assert am.drain(timeout=60)
    am.close()
    (fact,) = mem.list("memories", **alice.fields)
    assert fact.metadata["upkeep_op"] == 0
    owner = owner_of("memories", SessionScope("per-peer"))
    plan = {"raw": FACT, "shown": []}
    job = Job("reflection", alice, fact.created_at, id=fact.metadata["upkeep_job"], owner=owner)
    mem.jobs.put(job.key, job.with_plan(plan).dumps())  # as if the drop had not happened
    again = GatedLLM()
    again.gate.set()
    am2 = agent(mem, again)
    turn(am2, alice, "good morning")  # the first turn hands the job found to the worker
    assert am2.drain(timeout=60)
    assert again.calls == 0 and mem.jobs.items() == []
    assert mem.count("memories", **alice.fields) == 1
    am2.close()


_CHILD = """
import os, sys, threading, time
from memlane import AgentMemory, Memory
from memlane.agent import (Compaction, Consolidation, DailyLog, FlushReminder, Profiles,
                           Reflection, SessionScope)
sys.path.insert(0, sys.argv[3])
from conftest import WordHashEmbedder

class Stuck:
    def complete(self, messages):
        os.write(1, b"REFLECTING\\n")  # one write: the turn's thread prints too
        time.sleep(600)

location, cache = sys.argv[1], sys.argv[2]
options = {} if cache == "-" else {"cache_dir": cache}
mem = Memory(location, WordHashEmbedder(), **options)
am = AgentMemory(mem, SessionScope("per-peer"), Stuck(), reflection=Reflection(every=2),
                 consolidation=Consolidation(enabled=False), flush=FlushReminder(enabled=False),
                 compaction=Compaction(enabled=False), daily=DailyLog(enabled=False),
                 profiles=Profiles(enabled=False), context={"min_score": None})
alice = am.event("telegram", 42, 7)
for text in ("I moved to Lisbon", "it is sunny"):
    msgs = am.before(alice, [{"role": "user", "content": text}])
    am.after(alice, msgs, "ok")
    os.write(1, b"TURN\\n")
time.sleep(600)
"""


@pytest.mark.filterwarnings("ignore:memlane.*snapshot:RuntimeWarning")
def test_kill_9_during_background_reflection(make_store: StoreFactory, tmp_path: Path) -> None:
    """No turn is lost, and the window is reflected once, by the next AgentMemory."""
    location = make_store.location("killed")
    cache = "-" if make_store.server is None else str(tmp_path / "child-cache")
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(location), cache, str(TESTS)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        lines = [child.stdout.readline().strip() for _ in range(3)]
        assert sorted(lines) == ["REFLECTING", "TURN", "TURN"], lines
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.communicate(timeout=60)
    mem = make_store("killed", WordHashEmbedder())
    alice = SessionScope("per-peer").resolve("telegram", 42, 7)
    assert mem.count(MESSAGES, **alice.history) == 4  # both turns kept
    assert [json.loads(v)["kind"] for _, v in mem.jobs.items()] == ["reflection"]
    llm = GatedLLM()
    llm.gate.set()
    am = agent(mem, llm)
    turn(am, alice, "good morning")  # resumes the job; this turn is the 1st of a window
    assert am.drain(timeout=60)
    assert llm.calls == 1 and mem.jobs.items() == []
    assert [r.text for r in mem.list("memories", **alice.fields)] == ["Alice lives in Lisbon"]
    am.close()


def test_step_summaries_are_written_in_the_background(make_store: StoreFactory) -> None:
    mem = make_store("bg", WordHashEmbedder())
    llm = GatedLLM(answer="They looked up the weather twice.")
    am = agent(mem, llm, compaction=Compaction(max_steps=4, keep_first=1, keep_last=1))
    alice = am.event("telegram", 42, 7)
    steps = [{"role": "user", "content": "plan a trip"}]
    for i in range(6):
        steps.append({"role": "assistant", "content": f"step {i}"})
    first = am.before(alice, steps)
    assert [m["content"] for m in first[1:]] == [m["content"] for m in steps]  # not waited for
    assert llm.entered.wait(30)
    llm.gate.set()
    assert am.drain(timeout=60)
    again = am.before(alice, [*steps, {"role": "assistant", "content": "step 6"}])
    contents = [m["content"] for m in again[1:]]
    # The summary of the first middle steps, then the step that came after it.
    assert any("They looked up the weather twice." in c for c in contents)
    assert "step 5" in contents and "step 6" in contents and "step 1" not in contents
    assert llm.calls <= 2
    am.close()


def test_upkeep_must_be_known(make_store: StoreFactory) -> None:
    mem = make_store("bg", WordHashEmbedder())
    with pytest.raises(Exception, match="upkeep must be"):
        AgentMemory(mem, upkeep="sometimes")  # type: ignore[arg-type]


def test_a_waiting_consolidation_is_not_queued_again(make_store: StoreFactory) -> None:
    """While a consolidation waits for the LLM, later turns that still find the tier full
    do not record and queue more of them (each cost a commit in after())."""
    mem = make_store("bg", WordHashEmbedder())
    summary = json.dumps({"summary": "chat", "facts": [], "confidence": 0.5})
    llm = GatedLLM(answer=summary)
    am = agent(
        mem,
        llm,
        reflection=Reflection(enabled=False),
        consolidation=Consolidation(threshold=2, batch=2),
    )
    alice = am.event("telegram", 42, 7)
    for i in range(6):
        turn(am, alice, f"message {i}")
    assert llm.entered.wait(30)
    assert [j.kind for j in am.pending_upkeep()] == ["consolidation"]
    assert len(mem.jobs.items()) == 1
    llm.gate.set()
    assert am.drain(timeout=60)
    am.close()


def test_a_turn_is_stored_in_one_transaction(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The user's message, the reply and the short-term entry: one add_many (one commit,
    one embedding batch), so after() pays one durable commit, not three."""
    mem = make_store("bg", WordHashEmbedder())
    am = agent(mem, None, consolidation=Consolidation(enabled=False))
    alice = am.event("telegram", 42, 7)
    calls: list[int] = []
    inner = mem._writer.add

    def counting(items: Any, *args: Any, **kwargs: Any) -> Any:
        items = list(items)
        calls.append(len(items))
        return inner(items, *args, **kwargs)

    monkeypatch.setattr(mem._writer, "add", counting)
    report = turn(am, alice, "I moved to Lisbon")
    assert calls == [3]
    assert [r.text for r in report.stored] == ["I moved to Lisbon", "ok"]
    assert [r.table for r in report.short_term] == ["short_term"]


def test_settings_refuse_a_count_no_database_holds() -> None:
    # The agent's settings take counts through the same check as the store's arguments.
    with pytest.raises(InvalidArgumentError, match=r"Consolidation\.batch must be at most"):
        Consolidation(batch=2**63)
    with pytest.raises(InvalidArgumentError, match=r"FlushReminder\.cooldown must be a number of"):
        FlushReminder(cooldown=-1)


class FailsFirstReflection:
    """Fails its first reflection with prose; then remembers each message it is shown."""

    def __init__(self) -> None:
        self.failures_left = 1

    def complete(self, messages: Any) -> str:
        last = messages[-1]["content"]
        if (kept := keep_every_fact(last)) is not None:
            return kept
        if self.failures_left:
            self.failures_left -= 1
            return "Sorry, I cannot help with that."
        said = sorted(set(re.findall(r"msg(\d+)", last)), key=int)
        return json.dumps(
            {"operations": [{"op": "remember", "content": f"reflected msg{n}"} for n in said]}
        )


def test_a_failed_reflection_is_retried_with_its_own_messages(make_store: StoreFactory) -> None:
    # Every 3 turns over the last 6 messages: the retry at turn 4 shows the failed
    # window's messages, so the first turn is reflected (it falls out of turn 6's own).
    mem = make_store("retry", WordHashEmbedder())
    am = AgentMemory(
        mem,
        SessionScope(agent_id="a"),
        FailsFirstReflection(),
        reflection=Reflection(every=3, window=6),
        consolidation=Consolidation(enabled=False),
        flush=FlushReminder(enabled=False),
        compaction=Compaction(enabled=False),
        daily=DailyLog(enabled=False),
        profiles=Profiles(enabled=False),
    )
    event = am.event("telegram", 7, chat_id=1)
    for i in range(1, 7):
        am.after(event, am.before(event, [{"role": "user", "content": f"user says msg{i}"}]), "ok")
        assert am.drain(timeout=60)
    reflected = {r.text for r in mem.list("memories", limit=100)}
    assert {f"reflected msg{i}" for i in range(1, 7)} <= reflected
    am.close()
