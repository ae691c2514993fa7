"""The fact check keeps one current version of a fact, the newest, whatever the order its
facts were learnt in and however many checks of a scope run at once: facts learnt together
are compared with each other; the model is never shown a pending fact as a stored memory;
an older fact never replaces a newer memory; a superseded version is not checked. The
model's unusable answers (an index int() cannot read, a reason no store can hold) are
left out or cleaned, and a refusal of the store is reported, with nothing half done.
Both backends; the concurrent checks in two threads, and in two processes on PostgreSQL,
are ordered by events, not by timing."""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import re
import threading
from collections.abc import Sequence
from typing import Any

import pytest

from conftest import StoreFactory, WordHashEmbedder
from memlane import Memory
from memlane.agent import Reflection, facts
from memlane.agent.facts import CHECK, candidates, check_facts, parse_decisions, pending
from memlane.agent.llm import ChatMessage
from upkeep_scripts import Model, agent, turn

SCOPE = {"user_id": "alice"}
LIVES = re.compile(r"Alice lives in (\w+)")
#: How long a test waits for the other side of a concurrent check (it never sleeps).
PATIENCE = 60


class Movers:
    """A careful model: a new "Alice lives in X" updates the listed memory of where Alice
    lives (the last listed, as a model reading down the list would take it) when X is
    another city, is known when it is the same, and anything else is new. It records the
    prompts it is given."""

    def __init__(self) -> None:
        self.prompts: list[str] = []

    def complete(self, messages: Sequence[ChatMessage]) -> str:
        prompt = messages[-1]["content"]
        self.prompts.append(prompt)
        stored_part, _, new_part = prompt.partition("New facts:")
        home: tuple[int, str] | None = None
        for line in stored_part.splitlines():
            number, _, rest = line.partition(". ")
            if number.isdigit() and (m := LIVES.search(rest)):
                home = (int(number), m.group(1))
        decisions = []
        for line in new_part.strip().splitlines():
            label, _, rest = line.partition(". ")
            m = LIVES.search(rest)
            if m is None or home is None:
                decisions.append({"fact": label, "decision": "add", "reason": "new"})
            elif m.group(1) == home[1]:
                decisions.append({"fact": label, "decision": "none", "reason": "known"})
            else:
                decisions.append(
                    {"fact": label, "decision": "update", "memory": home[0], "reason": "moved"}
                )
        return json.dumps({"decisions": decisions})

    def new_facts(self) -> list[str]:
        return [p.partition("New facts:")[2] for p in self.prompts]


def current(mem: Memory) -> list[str]:
    return sorted(r.text for r in mem.list("memories", **SCOPE) if r.valid_to is None)


def settled(mem: Memory) -> bool:
    """No version, current or closed, is still marked pending."""
    return mem.count("memories", filters={CHECK: "pending"}, **SCOPE) == 0


# -- facts learnt together ----------------------------------------------------------------------


def test_facts_learnt_together_are_compared_with_each_other(make_store: StoreFactory) -> None:
    """One add_many (a consolidation's facts) gives its facts one created_at: the later of
    two that contradict each other is checked once the earlier is decided, and replaces it."""
    mem = make_store("together", WordHashEmbedder())
    mem.add("Alice likes green tea", created_at=1000.0, **SCOPE)
    learnt = ["Alice lives in Paris", "Alice lives in Berlin now"]
    mem.add_many(
        [{"text": t, "metadata": pending(None), "created_at": 2000.0} | SCOPE for t in learnt]
    )
    model = Movers()
    report = check_facts(mem, model, "memories", SCOPE)
    assert report.error is None
    assert [d.decision for d in report.decisions] == ["add", "update"]
    assert current(mem) == ["Alice likes green tea", "Alice lives in Berlin now"]
    assert settled(mem)
    # Paris was decided alone; Berlin was shown it as a stored memory.
    assert "Berlin" not in model.prompts[0]
    assert "Alice lives in Paris" in model.prompts[1].partition("New facts:")[0]


# -- what the model is shown --------------------------------------------------------------------


def test_a_pending_fact_is_never_shown_as_a_stored_memory(make_store: StoreFactory) -> None:
    """An older pending fact may be one another check is settling: shown, it could become
    what a newer fact updates."""
    mem = make_store("hidden", WordHashEmbedder())
    stored = mem.add("Alice lives in Paris", created_at=1000.0, **SCOPE)
    older = mem.add("Alice lives in Rome", metadata=pending(None), created_at=2000.0, **SCOPE)
    fact = mem.add("Alice lives in Oslo", metadata=pending(None), created_at=3000.0, **SCOPE)
    found = [r.id for r in candidates(mem, fact, "memories", SCOPE)]
    assert stored.id in found and older.id not in found and fact.id not in found


def test_a_superseded_pending_fact_is_not_checked(make_store: StoreFactory) -> None:
    """A pending fact superseded before its check (by reflection, by the user) is history:
    the model is not asked about it, and its successor, pending too, is checked."""
    mem = make_store("closed", WordHashEmbedder())
    mem.add("Alice likes tea", created_at=1000.0, **SCOPE)
    first = mem.add("Alice lives in Berlin", metadata=pending(None), created_at=2000.0, **SCOPE)
    mem.supersede(first.id, "Alice lives in Rome", at=2001.0, by="reflection")
    model = Movers()
    for _ in range(3):
        report = check_facts(mem, model, "memories", SCOPE)
        assert report.error is None
    assert len(model.prompts) == 1 and "Berlin" not in model.new_facts()[0]
    assert current(mem) == ["Alice likes tea", "Alice lives in Rome"]
    still = {CHECK: "pending", "valid_to": None}
    assert mem.count("memories", filters=still, **SCOPE) == 0


def test_the_successor_of_an_update_carries_no_mark_of_the_check(
    make_store: StoreFactory,
) -> None:
    """The memory a fact updates was a fact kept by an earlier check: its version made of
    the new fact is marked by neither."""
    mem = make_store("successor", WordHashEmbedder())
    mem.add("Alice likes tea", created_at=1000.0, **SCOPE)
    mem.add("Alice lives in Paris", metadata=pending(None), created_at=2000.0, **SCOPE)
    assert check_facts(mem, Movers(), "memories", SCOPE).error is None
    mem.add("Alice lives in Oslo", metadata=pending(None), created_at=3000.0, **SCOPE)
    report = check_facts(mem, Movers(), "memories", SCOPE)
    assert [d.decision for d in report.decisions] == ["update"]
    (oslo,) = [r for r in mem.list("memories", **SCOPE) if r.text == "Alice lives in Oslo"]
    assert oslo.valid_to is None and CHECK not in oslo.metadata
    assert oslo.metadata["fact_decision"] == "update"


# -- the newest statement wins ------------------------------------------------------------------


def test_an_older_fact_does_not_replace_a_newer_memory(make_store: StoreFactory) -> None:
    """The model says the fact updates a memory stated after it: the memory stays, and the
    fact settles as a repeat (its decision and the reason are in its history)."""
    mem = make_store("older", WordHashEmbedder())
    newer = mem.add("Alice lives in Oslo", created_at=3000.0, **SCOPE)
    fact = mem.add("Alice lives in Rome", metadata=pending(None), created_at=2000.0, **SCOPE)
    report = check_facts(mem, Movers(), "memories", SCOPE)
    assert report.error is None
    (decision,) = report.decisions
    assert decision.decision == "none" and newer.id in decision.reason
    assert current(mem) == ["Alice lives in Oslo"] and mem.get(newer.id).valid_to is None
    assert fact.id not in mem and settled(mem)
    last = mem.history(fact.id)[-1].record.metadata
    assert last["fact_decision"] == "none" and "moved" in last["fact_reason"]


class Held(Movers):
    """``Movers`` whose first answer waits until ``go`` is set (after saying it was asked,
    in ``asked``), then takes in what other processes committed meanwhile: a check that
    lists its facts, asks the model, and finds the scope changed by another check."""

    def __init__(self, memory: Memory | None, asked: Any, go: Any) -> None:
        super().__init__()
        self.memory, self.asked, self.go = memory, asked, go

    def complete(self, messages: Sequence[ChatMessage]) -> str:
        if not self.prompts:
            self.asked.set()
            assert self.go.wait(PATIENCE)
            if self.memory is not None:
                self.memory._sync.follow()  # else it arrives by NOTIFY, at its own time
        return super().complete(messages)


def _start(memory_b: Memory, model_b: Held) -> tuple[threading.Thread, list[Any]]:
    """Check B, in a thread of its own; its report is put in the list returned."""
    out: list[Any] = []

    def check() -> None:
        out.append(check_facts(memory_b, model_b, "memories", SCOPE))

    thread = threading.Thread(target=check, daemon=True)
    thread.start()
    return thread, out


def _three_facts(mem: Memory) -> None:
    """Paris stored; tea, then Berlin, then Rome learnt. Berlin waits for tea (its older
    pending neighbour), so a check's first model call is about tea alone."""
    mem.add("Alice lives in Paris", created_at=1000.0, **SCOPE)
    for at, text in ((1999.0, "Alice likes green tea"), (2000.0, "Alice lives in Berlin")):
        mem.add(text, metadata=pending(None), created_at=at, **SCOPE)
    mem.add("Alice lives in Rome", metadata=pending(None), created_at=2001.0, **SCOPE)


class _Unleased:
    """A check run without the scope's lease: one round."""

    held = True

    def __init__(self) -> None:
        self.rounds = 0

    def next_round(self, more: bool = False) -> bool:
        self.rounds += 1
        return self.rounds == 1


def test_a_check_that_another_overtook_leaves_the_newest_fact_current(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Check B lists the facts and asks about tea; check A, meanwhile, settles all three
    (Berlin, then Rome, replace Paris). B then finds Rome current and its own Berlin,
    stale, an update of it: refused, Rome stays. Two workers of one process (one store on
    SQLite, two on PostgreSQL, as two processes). The scope's lease is left out, as for
    a check that ran past it while another took it over: the writes' own checks hold."""
    monkeypatch.setattr(facts, "one_check", lambda *args: contextlib.nullcontext(_Unleased()))
    mem = make_store("race", WordHashEmbedder())
    _three_facts(mem)
    shared = make_store.backend == "embedded"  # one open store per directory
    cache_b = make_store.tmp_path / "cache-b"  # a snapshot cache of its own
    memory_b = mem if shared else make_store("race", WordHashEmbedder(), cache_dir=cache_b)
    asked, go = threading.Event(), threading.Event()
    thread, out = _start(memory_b, Held(None if shared else memory_b, asked, go))
    try:
        assert asked.wait(PATIENCE)
        report_a = check_facts(mem, Movers(), "memories", SCOPE)
    finally:
        go.set()
        thread.join(PATIENCE)
    assert report_a.error is None
    assert [d.decision for d in report_a.decisions] == ["add", "update", "update"]
    (report_b,) = out
    assert report_b.error is None
    mem._sync.follow()  # what B committed
    assert current(mem) == ["Alice likes green tea", "Alice lives in Rome"]
    assert settled(mem)


def _check_in_process(location: str, cache: str, asked: Any, go: Any, out: Any) -> None:
    """Check B of ``test_checks_of_two_processes_leave_the_newest_fact_current``."""
    try:
        with Memory(location, WordHashEmbedder(), cache_dir=cache) as memory:
            report = check_facts(memory, Held(memory, asked, go), "memories", SCOPE)
        out.put(("ok", report.error, [d.decision for d in report.decisions]))
    except BaseException as e:
        asked.set()
        out.put(("raised", repr(e), []))


def test_checks_of_two_processes_leave_the_newest_fact_current(
    make_store: StoreFactory,
) -> None:
    """The race above, check B in a process of its own and the scope's lease kept: A
    finds B holding it and leaves the facts to B, which keeps the newest current. A's own
    fact, stored while B's model answered, B checks in a round more that A asked for:
    it replaced Rome, where it stayed pending beside it until another check came."""
    if make_store.backend != "postgres":
        pytest.skip("an embedded store is open in one process at a time")
    mem = make_store("processes", WordHashEmbedder())
    _three_facts(mem)
    ctx = multiprocessing.get_context("spawn")
    asked, go, out = ctx.Event(), ctx.Event(), ctx.Queue()
    cache = str(make_store.tmp_path / "cache-b")
    location = str(make_store.location("processes"))
    proc = ctx.Process(target=_check_in_process, args=(location, cache, asked, go, out))
    proc.start()
    try:
        assert asked.wait(PATIENCE)
        mem.add("Alice lives in Lisbon", metadata=pending(None), created_at=2002.0, **SCOPE)
        report_a = check_facts(mem, Movers(), "memories", SCOPE)
    finally:
        go.set()
    status, error, decided = out.get(timeout=PATIENCE)
    proc.join(PATIENCE)
    assert (status, error) == ("ok", None) and proc.exitcode == 0
    assert report_a.error is None and report_a.waited and report_a.decisions == []
    assert decided == ["add", "update", "update", "update"]
    mem._sync.follow()
    assert current(mem) == ["Alice likes green tea", "Alice lives in Lisbon"]
    assert settled(mem)


# -- the model's unusable answers ---------------------------------------------------------------


@pytest.mark.parametrize("index", ["\u00b2", "\u2460", "1" * 5000, " 2 "])
def test_an_index_int_cannot_read_is_left_out(index: str) -> None:
    answer = json.dumps(
        {
            "decisions": [
                {"fact": "F1", "decision": "add"},
                {"fact": "F2", "decision": "update", "memory": index, "reason": "moved"},
            ]
        }
    )
    got = parse_decisions(answer, 2, 3)
    wanted = {0: ("add", None, "(none given)")}
    if index == " 2 ":
        wanted[1] = ("update", 1, "moved")
    assert got == wanted


def _surrogate(decision: str) -> str:
    item = f'{{"fact": "F1", "decision": "{decision}", "memory": 1, "reason": "moved \\ud800"}}'
    return f'{{"decisions": [{item}]}}'


def test_a_reason_no_store_can_hold_is_cleaned() -> None:
    ((_, _, reason),) = parse_decisions(_surrogate("none"), 1, 1).values()
    assert reason == "moved \ufffd"


class Answers:
    """A model that gives ``answer`` every time."""

    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.calls = 0

    def complete(self, messages: Sequence[ChatMessage]) -> str:
        self.calls += 1
        return self.answer


@pytest.mark.parametrize("decision", ["add", "update", "delete", "none"])
def test_a_reason_holding_a_lone_surrogate_is_stored_once(
    make_store: StoreFactory, decision: str
) -> None:
    mem = make_store("surrogate", WordHashEmbedder())
    old = mem.add("Alice lives in Paris", created_at=1000.0, **SCOPE)
    fact = mem.add("Alice lives in Berlin", metadata=pending(None), created_at=2000.0, **SCOPE)
    model = Answers(_surrogate(decision))
    reports = [check_facts(mem, model, "memories", SCOPE) for _ in range(2)]
    assert [r.error for r in reports] == [None, None]
    assert [[d.decision for d in r.decisions] for r in reports] == [[decision], []]
    assert model.calls == 1 and settled(mem)
    assert (old.id in mem) is (decision != "delete")
    after = mem.history(fact.id)[-1].record.metadata
    assert after["fact_decision"] == decision and "\ufffd" in after["fact_reason"]


@pytest.mark.parametrize("decision", ["add", "update", "delete", "none"])
def test_a_decision_the_store_refuses_is_reported_and_changes_nothing(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch, decision: str
) -> None:
    """A refusal that is no change of another writer is the check's failure, reported;
    the fact stays pending and the memory it names as it was."""
    mem = make_store("refused", WordHashEmbedder())
    old = mem.add("Alice lives in Paris", created_at=1000.0, **SCOPE)
    fact = mem.add("Alice lives in Berlin", metadata=pending(None), created_at=2000.0, **SCOPE)
    target = 0 if decision in ("update", "delete") else None
    monkeypatch.setattr(
        facts, "parse_decisions", lambda *a: {0: (decision, target, "moved \ud800")}
    )
    report = check_facts(mem, Answers("{}"), "memories", SCOPE)
    assert report.error is not None and "InvalidArgumentError" in report.error
    assert report.decisions == []
    assert mem.get(fact.id).metadata == fact.metadata  # pending, as stored
    assert mem.get(old.id).valid_to is None and current(mem) == sorted([old.text, fact.text])


def test_a_memory_superseded_while_the_model_answers_is_no_failure(
    make_store: StoreFactory,
) -> None:
    """Another writer supersedes the memory the fact updates while the model answers (the
    store refuses the supersede of a closed version): the fact waits, pending, for the next
    check, which compares it with the new version; no error."""
    mem = make_store("overtaken", WordHashEmbedder())
    old = mem.add("Alice lives in Paris", created_at=1000.0, **SCOPE)
    mem.add("Alice lives in Oslo", metadata=pending(None), created_at=3000.0, **SCOPE)

    class Overtaken(Movers):
        def complete(self, messages: Sequence[ChatMessage]) -> str:
            answer = super().complete(messages)
            if len(self.prompts) == 1:
                mem.supersede(old.id, "Alice lives in Rome", at=2000.0, by="user")
            return answer

    model = Overtaken()
    first = check_facts(mem, model, "memories", SCOPE)
    assert first.error is None and first.decisions == []
    assert current(mem) == ["Alice lives in Oslo", "Alice lives in Rome"]
    second = check_facts(mem, model, "memories", SCOPE)
    assert second.error is None and [d.decision for d in second.decisions] == ["update"]
    assert current(mem) == ["Alice lives in Oslo"] and settled(mem)


@pytest.mark.parametrize("change", ["update", "supersede"])
def test_a_delete_leaves_a_memory_rewritten_while_the_model_answers(
    make_store: StoreFactory, change: str
) -> None:
    """The model says the fact makes the memory false; meanwhile another writer rewrote
    the memory. What the model judged is not what is stored now: it stays, and the fact
    waits, pending, for the next check (the delete removed the rewritten memory, or the
    closed version, before)."""
    mem = make_store("rewritten", WordHashEmbedder())
    old = mem.add("Alice has a cat", created_at=1000.0, **SCOPE)
    fact = mem.add("Alice never had a cat", metadata=pending(None), created_at=3000.0, **SCOPE)

    class Meanwhile(Answers):
        def complete(self, messages: Sequence[ChatMessage]) -> str:
            if change == "update":
                mem.update(old.id, text="Alice has a cat and a dog")
            else:
                mem.supersede(old.id, "Alice has a dog", at=2000.0, by="user")
            return super().complete(messages)

    decision = {"fact": "F1", "decision": "delete", "memory": 1, "reason": "false"}
    report = check_facts(mem, Meanwhile(json.dumps({"decisions": [decision]})), "memories", SCOPE)
    assert report.error is None and report.decisions == []
    kept = ["Alice has a cat and a dog"] if change == "update" else ["Alice has a dog"]
    assert current(mem) == sorted([*kept, fact.text])
    assert old.id in mem and mem.get(fact.id).metadata[CHECK] == "pending"


def test_a_superseded_pending_version_queues_no_check(make_store: StoreFactory) -> None:
    """A version superseded while still pending is history: the turn that sees it queues
    no fact check (one ran at every turn, with nothing to check)."""
    mem = make_store("queued", WordHashEmbedder())
    kinds: list[str] = []
    am = agent(
        mem, Model("{}"), reflection=Reflection(every=100), on_upkeep=lambda r: kinds.append(r.kind)
    )
    alice = am.event("telegram", 42, 7)
    old = mem.add("Alice lives in Paris", metadata=pending(None), **alice.fields)
    mem.supersede(old.id, "Alice lives in Rome", by="user", metadata={})
    for text in ("hello", "and again"):
        turn(am, alice, text)
    assert am.drain(timeout=60)
    assert "facts" not in kinds
    am.close()
