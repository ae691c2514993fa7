"""One fact check of a scope at a time, in every thread and process (``fact_lease``): two
checks at once each decided from what they read before their model answered, and a
pending fact is never shown to a check, so each kept its copy of one fact. A second
check now leaves its facts pending (``waited``); a lease whose holder is gone is taken
over. Both backends."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import StoreFactory, WordHashEmbedder
from memlane.agent import fact_lease, facts
from memlane.agent.fact_lease import _ask_key, _key
from memlane.agent.facts import CHECK, check_facts, pending
from memlane.agent.holder import Holder
from memlane.errors import StorageError

ALICE = {"user_id": "alice"}


class Adds:
    """Adds every new fact; waits for ``gate`` first when given."""

    def __init__(self, gate: threading.Event | None = None) -> None:
        self.gate, self.entered, self.calls = gate, threading.Event(), 0
        self.prompts: list[str] = []

    def complete(self, messages: Any) -> str:
        self.calls += 1
        self.prompts.append(messages[-1]["content"])
        self.entered.set()
        if self.gate is not None:
            assert self.gate.wait(30)
        n = messages[-1]["content"].split("New facts:")[1].count("\nF") + 1
        return json.dumps(
            {"decisions": [{"fact": f"F{i + 1}", "decision": "add"} for i in range(n)]}
        )


def test_a_second_check_of_a_scope_waits_for_the_first(make_store: StoreFactory) -> None:
    """The second check asks the first for one more round, which checks its fact."""
    mem = make_store("lease", WordHashEmbedder())
    mem.add("Alice likes green tea", created_at=900.0, **ALICE)
    first_fact = mem.add("Alice keeps bees", created_at=1000.0, metadata=pending(None), **ALICE)
    gate = threading.Event()
    slow = Adds(gate)
    reports: list[Any] = []
    thread = threading.Thread(
        target=lambda: reports.append(check_facts(mem, slow, "memories", ALICE))
    )
    thread.start()
    assert slow.entered.wait(30)
    copy = mem.add("Alice keeps bees", created_at=1005.0, metadata=pending(None), **ALICE)
    other = Adds()
    waited = check_facts(mem, other, "memories", ALICE)
    assert waited.waited and waited.decisions == [] and other.calls == 0
    assert check_facts(mem, other, "memories", {"user_id": "bob"}).waited is False  # apart
    gate.set()
    thread.join(60)
    assert reports[0].error is None and not reports[0].waited
    assert mem.get(first_fact.id).metadata[CHECK] == "kept"
    # The first check's second round, asked for by the second check, checked the copy
    # beside the first fact as kept (this model adds whatever it is shown).
    assert [d.fact for d in reports[0].decisions] == [first_fact.id, copy.id]
    assert slow.calls == 2 and "Alice keeps bees" in slow.prompts[1].split("New facts:")[0]
    assert mem.get(copy.id).metadata[CHECK] == "kept"
    assert mem.jobs.mark(_key(mem, "memories", ALICE)) is None  # let go
    assert mem.jobs.mark(_ask_key(_key(mem, "memories", ALICE))) is None  # answered


def test_an_ask_made_as_the_holder_lets_go_is_answered(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second check finds the lease held and asks after the holder last looked for an
    ask, just before it lets go: the holder, having let go, finds the ask and takes the
    lease again for the round (the fact stayed pending until another check came)."""
    mem = make_store("ask_late", WordHashEmbedder())
    mem.add("Alice keeps bees", created_at=1000.0, metadata=pending(None), **ALICE)
    key = _key(mem, "memories", ALICE)
    book, second = type(mem.jobs), []
    drop = book.drop_mark

    def late(self: Any, mark: str, held: str) -> bool:
        if mark == key and not second:
            fact = mem.add(
                "Alice plays the oboe", created_at=1005.0, metadata=pending(None), **ALICE
            )
            second.append((fact, check_facts(mem, Adds(), "memories", ALICE)))
        return drop(self, mark, held)

    monkeypatch.setattr(book, "drop_mark", late)
    first = Adds()
    report = check_facts(mem, first, "memories", ALICE)
    ((fact, waited),) = second
    assert waited.waited and waited.decisions == []
    assert report.error is None and first.calls == 1  # the first fact was shown nothing
    assert report.decisions[-1].fact == fact.id and mem.get(fact.id).metadata[CHECK] == "kept"
    assert mem.jobs.mark(key) is None and mem.jobs.mark(_ask_key(key)) is None


def test_a_check_asked_without_end_stops_after_its_rounds(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Asked again during every round, the holder runs ``ROUNDS`` and lets go, the last
    ask left for the next check, which answers it."""
    monkeypatch.setattr(fact_lease, "ROUNDS", 3)
    mem = make_store("ask_always", WordHashEmbedder())
    fact = mem.add("Alice keeps bees", metadata=pending(None), **ALICE)
    key = _key(mem, "memories", ALICE)
    rounds: list[int] = []

    def asked_again(memory: Any, *args: Any) -> None:
        rounds.append(len(rounds))
        memory.jobs.take_mark(_ask_key(key), "another check")

    monkeypatch.setattr(facts, "_check_all", asked_again)
    assert check_facts(mem, Adds(), "memories", ALICE).error is None
    assert rounds == [0, 1, 2] and mem.get(fact.id).metadata[CHECK] == "pending"
    assert mem.jobs.mark(key) is None and mem.jobs.mark(_ask_key(key)) == "another check"
    monkeypatch.undo()
    report = check_facts(mem, Adds(), "memories", ALICE)
    assert [d.fact for d in report.decisions] == [fact.id]
    assert mem.jobs.mark(_ask_key(key)) is None


def test_a_round_that_read_a_full_batch_is_followed_by_another(make_store: StoreFactory) -> None:
    """Facts past one round's batch, the asker's behind them: the holder's rounds go on
    while a round reads a full batch, up to ``ROUNDS`` (the asked round read the oldest
    batch alone, and the asker's fact stayed pending with nothing left to check it)."""
    mem = make_store("backlog", WordHashEmbedder())
    mem.add("Alice likes green tea", created_at=1.0, **ALICE)
    for i in range(5):
        mem.add(f"Alice visited city {i}", created_at=100.0 + i, metadata=pending(None), **ALICE)
    gate = threading.Event()
    slow, reports = Adds(gate), []
    thread = threading.Thread(
        target=lambda: reports.append(check_facts(mem, slow, "memories", ALICE, limit=2))
    )
    thread.start()
    assert slow.entered.wait(30)
    mine = mem.add("Alice plays the oboe", created_at=500.0, metadata=pending(None), **ALICE)
    assert check_facts(mem, Adds(), "memories", ALICE, limit=2).waited
    gate.set()
    thread.join(60)
    assert reports[0].error is None and len(reports[0].decisions) == 6
    assert mem.get(mine.id).metadata[CHECK] == "kept"
    assert mem.count("memories", filters={CHECK: "pending"}, **ALICE) == 0


def test_a_drop_the_store_fails_before_an_ask_is_reported(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The holder lets go to end, the store fails the drop, and an ask came meanwhile: the
    holder cannot take its own lease again, so the asker's fact waits; the report says so
    (it said nothing)."""
    mem = make_store("drop_failed", WordHashEmbedder())
    mem.add("Alice keeps bees", created_at=1000.0, metadata=pending(None), **ALICE)
    key = _key(mem, "memories", ALICE)
    book, asked = type(mem.jobs), []

    def failing(self: Any, mark: str, held: str) -> bool:
        if mark == key and not asked:
            fact = mem.add("Alice plays the oboe", metadata=pending(None), **ALICE)
            asked.append((fact, check_facts(mem, Adds(), "memories", ALICE)))
            raise StorageError("the server closed the connection")
        return drop(self, mark, held)

    drop = book.drop_mark
    monkeypatch.setattr(book, "drop_mark", failing)
    report = check_facts(mem, Adds(), "memories", ALICE)
    ((fact, waited),) = asked
    assert waited.waited and report.error is not None and "closed" in report.error
    assert mem.get(fact.id).metadata[CHECK] == "pending"
    monkeypatch.undo()
    later = check_facts(mem, Adds(), "memories", ALICE)  # takes the lease over at once
    assert later.error is None and [d.fact for d in later.decisions] == [fact.id]


def test_a_holder_whose_lease_was_taken_over_runs_no_more_rounds(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its lease taken over while its round ran (the renewals failed), the holder runs no
    round more for an ask: it ran one beside the new holder's."""
    mem = make_store("taken_over", WordHashEmbedder())
    mem.add("Alice likes green tea", created_at=900.0, **ALICE)
    mem.add("Alice keeps bees", created_at=1000.0, metadata=pending(None), **ALICE)
    key = _key(mem, "memories", ALICE)

    class TakenOver(Adds):
        def complete(self, messages: Any) -> str:
            mem.jobs.set_mark(key, "another holder")
            mem.jobs.take_mark(_ask_key(key), "a check that waited")
            return super().complete(messages)

    model = TakenOver()
    report = check_facts(mem, model, "memories", ALICE)
    assert report.error is None and model.calls == 1
    assert mem.jobs.mark(key) == "another holder"  # not dropped: not its own
    assert mem.jobs.mark(_ask_key(key)) == "a check that waited"  # the new holder's


def test_an_asker_takes_the_lease_let_go_before_its_ask(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The asker found the lease held; the holder then looked for an ask, let go and
    looked again before the ask was made: the asker's second try takes the lease and
    checks its fact (nobody else would)."""
    mem = make_store("ask_after", WordHashEmbedder())
    mem.add("Alice likes green tea", created_at=900.0, **ALICE)
    mem.add("Alice keeps bees", created_at=1000.0, metadata=pending(None), **ALICE)
    key, ask = _key(mem, "memories", ALICE), _ask_key(_key(mem, "memories", ALICE))
    book, holder, done = type(mem.jobs), threading.Event(), threading.Event()
    gate = threading.Event()
    slow, reports = Adds(gate), []
    take = book.take_mark

    def after_the_holder(self: Any, mark: str, value: str, held: str | None = None) -> bool:
        if mark == ask and not holder.is_set():
            holder.set()
            gate.set()
            assert done.wait(30)  # the holder ended its check before this ask
        return take(self, mark, value, held)

    def first() -> None:
        reports.append(check_facts(mem, slow, "memories", ALICE))
        done.set()

    thread = threading.Thread(target=first)
    thread.start()
    assert slow.entered.wait(30)
    mine = mem.add("Alice plays the oboe", created_at=1005.0, metadata=pending(None), **ALICE)
    monkeypatch.setattr(book, "take_mark", after_the_holder)
    report = check_facts(mem, Adds(), "memories", ALICE)
    thread.join(60)
    assert reports[0].error is None and len(reports[0].decisions) == 1
    assert not report.waited and [d.fact for d in report.decisions] == [mine.id]
    assert mem.jobs.mark(key) is None and mem.jobs.mark(ask) is None


def _lease(holder: Holder) -> str:
    return json.dumps(holder.as_dict())


@pytest.mark.parametrize("left_by", ["a dead process", "a lease past its time", "garbage"])
def test_a_lease_whose_holder_is_gone_is_taken_over(make_store: StoreFactory, left_by: str) -> None:
    mem = make_store("stale", WordHashEmbedder())
    fact = mem.add("Alice keeps bees", metadata=pending(None), **ALICE)
    key = _key(mem, "memories", ALICE)
    here = Holder.here("t", time.time() + 600)
    if left_by == "a dead process":
        child = subprocess.run(
            [sys.executable, "-c", "import os; print(os.getpid())"],
            capture_output=True,
            text=True,
            check=True,
        )
        value = _lease(Holder(here.host, int(child.stdout), "1", "t", time.time() + 600))
    elif left_by == "a lease past its time":
        value = _lease(Holder(here.host, os.getppid(), "", "t", time.time() - 1))
    else:
        value = "not a lease"
    mem.jobs.set_mark(key, value)
    report = check_facts(mem, Adds(), "memories", ALICE)
    assert not report.waited and report.error is None
    assert mem.get(fact.id).metadata[CHECK] != "pending"
    assert mem.jobs.mark(key) is None


def test_a_live_holder_keeps_its_lease(make_store: StoreFactory) -> None:
    """Another live process on this host, its time not past: the check waits."""
    mem = make_store("live", WordHashEmbedder())
    mem.add("Alice keeps bees", metadata=pending(None), **ALICE)
    key = _key(mem, "memories", ALICE)
    parent = Holder.here("t", 0.0)
    with open(f"/proc/{os.getppid()}/stat") as f:
        started = f.read().rsplit(")", 1)[1].split()[19]
    value = _lease(Holder(parent.host, os.getppid(), started, "t", time.time() + 600))
    mem.jobs.set_mark(key, value)
    assert check_facts(mem, Adds(), "memories", ALICE).waited
    assert mem.jobs.mark(key) == value


def test_a_lease_not_let_go_is_taken_over_by_the_next_check(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store failed the lease's drop: this process's next check takes it over."""
    mem = make_store("not_let_go", WordHashEmbedder())
    mem.add("Alice keeps bees", metadata=pending(None), **ALICE)
    book = type(mem.jobs)

    def failing(self: Any, key: str, held: str) -> bool:
        raise StorageError("the server closed the connection")

    monkeypatch.setattr(book, "drop_mark", failing)
    assert check_facts(mem, Adds(), "memories", ALICE).error is None
    monkeypatch.undo()
    assert mem.jobs.mark(_key(mem, "memories", ALICE)) is not None
    later = mem.add("Alice plays the oboe", metadata=pending(None), **ALICE)
    report = check_facts(mem, Adds(), "memories", ALICE)
    assert not report.waited and [d.fact for d in report.decisions] == [later.id]


def _outlasted(mem: Any) -> None:
    """A check whose model answers after four leases of 0.3 s: another check of the scope
    meanwhile waits; the lease is let go at its end."""
    gate = threading.Event()
    slow = Adds(gate)
    thread = threading.Thread(target=lambda: check_facts(mem, slow, "memories", ALICE))
    thread.start()
    assert slow.entered.wait(30)
    time.sleep(1.2)
    other = Adds()
    assert check_facts(mem, other, "memories", ALICE).waited and other.calls == 0
    gate.set()
    thread.join(60)
    assert mem.jobs.mark(_key(mem, "memories", ALICE)) is None


def test_a_check_longer_than_its_lease_keeps_it(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lease is renewed while its check runs: a check that outlasts it (a slow
    model) is not run beside another."""
    monkeypatch.setattr(fact_lease, "LEASE", 0.3)
    mem = make_store("renewed", WordHashEmbedder())
    mem.add("Alice likes green tea", created_at=900.0, **ALICE)
    mem.add("Alice keeps bees", created_at=1000.0, metadata=pending(None), **ALICE)
    _outlasted(mem)


def test_a_killed_holder_not_yet_reaped_is_gone(make_store: StoreFactory) -> None:
    """Killed, its parent not having reaped it yet: its pid still answers, but it runs
    nothing (it was taken for alive)."""
    mem = make_store("zombie", WordHashEmbedder())
    fact = mem.add("Alice keeps bees", metadata=pending(None), **ALICE)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with open(f"/proc/{child.pid}/stat") as f:
            started = f.read().rsplit(")", 1)[1].split()[19]
        here = Holder.here("t", 0.0)
        lease = Holder(here.host, child.pid, started, "t", time.time() + 600)
        mem.jobs.set_mark(_key(mem, "memories", ALICE), _lease(lease))
        os.kill(child.pid, signal.SIGKILL)
        stat = Path(f"/proc/{child.pid}/stat")
        while stat.read_text().rsplit(")", 1)[1].split()[0] != "Z":
            time.sleep(0.01)
        report = check_facts(mem, Adds(), "memories", ALICE)
        assert not report.waited and mem.get(fact.id).metadata[CHECK] != "pending"
    finally:
        child.kill()
        child.wait()


def test_a_renewal_whose_answer_was_lost_goes_on_renewing(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A renewal stored with its commit's answer lost (and the read-back failing too):
    the renewer kept the text before it, so its next renewal found the lease changed
    and stopped, and another check ran beside this one once it passed."""
    monkeypatch.setattr(fact_lease, "LEASE", 0.3)
    mem = make_store("renewal_lost", WordHashEmbedder())
    mem.add("Alice likes green tea", created_at=900.0, **ALICE)
    mem.add("Alice keeps bees", created_at=1000.0, metadata=pending(None), **ALICE)
    book, lost = type(mem.jobs), []
    take = book.take_mark

    def losing(self: Any, key: str, value: str, held: str | None = None) -> bool:
        took = take(self, key, value, held)
        if held is not None and not lost:
            lost.append(value)
            raise StorageError("commit failed (the write may or may not have been stored)")
        return took

    monkeypatch.setattr(book, "take_mark", losing)
    _outlasted(mem)
    assert lost


LEADER_EXITS = """
import ctypes, threading, time
threading.Thread(target=time.sleep, args=(60,)).start()
time.sleep(0.2)
print("running", flush=True)
ctypes.CDLL(None).syscall(60, 0)  # SYS_exit: the main thread alone ends
"""


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="SYS_exit is 60 on x86-64")
def test_a_process_whose_main_thread_ended_is_not_gone() -> None:
    """Its stat reads as a zombie's while its other threads run (an embedding
    application may end its main thread): it still holds what it held."""
    child = subprocess.Popen([sys.executable, "-c", LEADER_EXITS], stdout=subprocess.PIPE)
    try:
        with open(f"/proc/{child.pid}/stat") as f:
            started = f.read().rsplit(")", 1)[1].split()[19]
        assert child.stdout is not None and child.stdout.readline() == b"running\n"
        stat = Path(f"/proc/{child.pid}/stat")
        while stat.read_text().rsplit(")", 1)[1].split()[0] != "Z":
            time.sleep(0.01)
        here = Holder.here("t", 0.0)
        holder = Holder(here.host, child.pid, started, "t", time.time() + 600)
        assert not holder.gone(frozenset(), time.time())
        child.kill()
        child.wait()
        assert holder.gone(frozenset(), time.time())
    finally:
        child.kill()
        child.wait()
