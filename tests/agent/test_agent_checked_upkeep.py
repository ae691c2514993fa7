"""The agent's upkeep changes what it judged, or nothing: consolidation stores a summary
only while its entries are there (two agents of one owner consolidating the same
entries store one summary), eviction spares a memory pinned while it ran and two
evictions of a scope leave its cap, and reflection forgets a memory only in the version
the model was shown. On both backends; races with two threads, and two processes on
PostgreSQL."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from conftest import StoreFactory, WordHashEmbedder
from memlane import Memory
from memlane.agent import SessionScope
from memlane.agent.caps import evict
from memlane.agent.consolidation import SHORT_TERM, add_short_term, consolidate
from memlane.agent.reflection import Resume, reflect, reflect_planned
from memlane.agent.reports import TurnReport

SCOPE = {"user_id": "alice"}
SUMMARY = json.dumps({"summary": "Alice talked about bees", "facts": [], "confidence": 0.9})


class Model:
    """Answers ``answer``; ``meanwhile`` runs while it is asked (another writer acts)."""

    def __init__(self, answer: str, meanwhile: Any = None) -> None:
        self.answer, self.meanwhile = answer, meanwhile
        self.asked = threading.Event()
        self.gate = threading.Event()
        self.gate.set()

    def complete(self, messages: Any) -> str:
        self.asked.set()
        if self.meanwhile is not None:
            self.meanwhile()
        assert self.gate.wait(60)
        return self.answer


def _entries(mem: Memory, n: int) -> list[str]:
    return [add_short_term(mem, f"turn {i}: bees", "a1", scope=SCOPE).id for i in range(n)]


def _episodes(mem: Memory) -> list[Any]:
    return [r for r in mem.list("memories", **SCOPE) if r.type == "episodic"]


# -- consolidation ----------------------------------------------------------------------------


def test_a_consolidation_of_entries_consolidated_meanwhile_stores_nothing(
    make_store: StoreFactory,
) -> None:
    mem = make_store("twice", WordHashEmbedder())
    ids = _entries(mem, 4)
    inner: list[Any] = []
    other = Model(SUMMARY)
    outer = Model(
        SUMMARY,
        meanwhile=lambda: inner.append(consolidate(mem, other, scope=SCOPE, threshold=3, batch=3)),
    )
    report = consolidate(mem, outer, scope=SCOPE, threshold=3, batch=3)
    assert inner[0].status == "consolidated" and inner[0].removed == ids[:3]
    assert report.status == "skipped" and report.episodic is None and report.removed == []
    assert "consolidated or removed meanwhile" in (report.error or "")
    (episode,) = _episodes(mem)
    assert episode.metadata["consolidated_from"] == ids[:3]
    assert [r.id for r in mem.list(SHORT_TERM, **SCOPE)] == ids[3:]


def test_a_consolidation_of_an_entry_rewritten_meanwhile_stores_nothing(
    make_store: StoreFactory,
) -> None:
    """An entry rewritten while the model summarised it (the summary never saw its new
    text) is not deleted: nothing is stored, every entry stays, the new text too."""
    mem = make_store("rewritten", WordHashEmbedder())
    ids = _entries(mem, 3)
    model = Model(SUMMARY, meanwhile=lambda: mem.update(ids[0], text="turn 0: wasps, not bees"))
    report = consolidate(mem, model, scope=SCOPE, threshold=3, batch=3)
    assert report.status == "skipped" and report.removed == [] and _episodes(mem) == []
    assert "rewritten since it was read" in (report.error or "")
    assert mem.get(ids[0]).text == "turn 0: wasps, not bees"
    assert sorted(r.id for r in mem.list(SHORT_TERM, **SCOPE)) == sorted(ids)
    # Read again, the entries consolidate.
    report = consolidate(mem, Model(SUMMARY), scope=SCOPE, threshold=3, batch=3)
    assert report.status == "consolidated" and sorted(report.removed) == sorted(ids)


def test_a_consolidation_removes_its_entries_with_its_summary(make_store: StoreFactory) -> None:
    mem = make_store("once", WordHashEmbedder())
    ids = _entries(mem, 3)
    seq = mem._sync.seq
    report = consolidate(mem, Model(SUMMARY), scope=SCOPE, threshold=3, batch=3)
    assert report.status == "consolidated" and report.removed == ids
    assert report.pending_entries == 0 and mem.count(SHORT_TERM) == 0
    assert mem._sync.seq == seq + 1  # the summary and the removals: one change
    assert [v.ended_by for v in mem.history(ids[0])] == ["add_many"]


def test_two_threads_consolidating_the_same_entries(make_store: StoreFactory) -> None:
    """Both select the same entries, then answer: one summary, the other skipped."""
    mem = make_store("threads", WordHashEmbedder())
    ids = _entries(mem, 4)
    models = [Model(SUMMARY), Model(SUMMARY)]
    for m in models:
        m.gate.clear()
    reports: list[Any] = [None, None]

    def run(w: int) -> None:
        reports[w] = consolidate(mem, models[w], scope=SCOPE, threshold=3, batch=3)

    threads = [threading.Thread(target=run, args=(w,)) for w in range(2)]
    for t in threads:
        t.start()
    for m in models:
        assert m.asked.wait(60)
    for m in models:
        m.gate.set()
    for t in threads:
        t.join()
    assert sorted(r.status for r in reports) == ["consolidated", "skipped"]
    (episode,) = _episodes(mem)
    assert episode.metadata["consolidated_from"] == ids[:3]
    assert mem.count(SHORT_TERM, **SCOPE) == 1


_CONSOLIDATOR = """
import json, sys, time
from pathlib import Path
from memlane import Memory
from memlane.agent.consolidation import consolidate
url, cache, go, answer = sys.argv[1:5]
mem = Memory(url, None, cache_dir=cache)

class Model:
    def complete(self, messages):
        print("ASKED", flush=True)
        while not Path(go).exists():
            time.sleep(0.002)
        return answer

report = consolidate(mem, Model(), scope={"user_id": "alice"}, threshold=3, batch=3)
mem.close()
print(json.dumps(report.status), flush=True)
"""


def test_two_processes_consolidating_the_same_entries_on_postgres(
    pg_server: Any, tmp_path: Path
) -> None:
    factory = StoreFactory("postgres", tmp_path, pg_server)
    try:
        mem = factory("procs")
        ids = _entries(mem, 4)
        url, go = str(factory.location("procs")), tmp_path / "go"
        children = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    _CONSOLIDATOR,
                    url,
                    str(tmp_path / f"c{w}"),
                    str(go),
                    SUMMARY,
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for w in range(2)
        ]
        for child in children:  # both selected their entries and wait for their answer
            assert child.stdout is not None
            line = child.stdout.readline()
            assert line.strip() == "ASKED", child.stderr.read() if child.stderr else ""
        go.touch()
        statuses = []
        for child in children:
            out, err = child.communicate(timeout=300)
            assert child.returncode == 0, err
            statuses.append(json.loads(out.strip().splitlines()[-1]))
        assert sorted(statuses) == ["consolidated", "skipped"]
        mem._sync.follow()
        (episode,) = _episodes(mem)
        assert episode.metadata["consolidated_from"] == ids[:3]
        assert [r.id for r in mem.list(SHORT_TERM)] == ids[3:]
    finally:
        factory.close_all()


# -- eviction ---------------------------------------------------------------------------------


def _facts(mem: Memory, fields: dict[str, str]) -> list[str]:
    return [
        mem.add(f"fact number {i}", importance=0.1 * (i + 1) if i < 9 else 0.95, **fields).id
        for i in range(12)
    ]


def test_eviction_spares_a_memory_pinned_while_it_ran(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lowest memory is pinned evergreen once the eviction counted the records, before
    its transaction began."""
    mem = make_store("pin", WordHashEmbedder())
    event = SessionScope("per-peer").resolve("telegram", 42, 7)
    ids = _facts(mem, event.fields)
    db = mem._sync.db
    transaction = db.transaction
    caller = threading.current_thread()
    done: list[int] = []

    def pin_once() -> Any:
        if not done and threading.current_thread() is caller:
            done.append(1)
            mem.update(ids[0], evergreen=True)
        return transaction()

    monkeypatch.setattr(db, "transaction", pin_once)
    report = TurnReport()
    evict(mem, "memories", 10, event, report)
    assert done and mem.get(ids[0]).evergreen is True
    assert [r.id for r in report.evicted] == ids[1:3]
    assert mem.count("memories", **event.fields) == 10


def test_two_evictions_of_one_scope_leave_its_cap(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second eviction runs while the first counts: together they evict what the cap
    asks, once."""
    mem = make_store("two", WordHashEmbedder())
    event = SessionScope("per-peer").resolve("telegram", 42, 7)
    _facts(mem, event.fields)
    count = Memory.count
    other = TurnReport()
    ran: list[int] = []

    def count_then_evict(self: Memory, *args: Any, **kwargs: Any) -> int:
        n = count(self, *args, **kwargs)
        if not ran:
            ran.append(1)
            evict(self, "memories", 10, event, other)
        return n

    monkeypatch.setattr(Memory, "count", count_then_evict)
    mine = TurnReport()
    evict(mem, "memories", 10, event, mine)
    monkeypatch.setattr(Memory, "count", count)
    assert mem.count("memories", **event.fields) == 10
    assert len(mine.evicted) + len(other.evicted) == 2


# -- reflection -------------------------------------------------------------------------------


def _forget(mem: Memory, meanwhile: Any = None) -> Any:
    answer = json.dumps({"operations": [{"op": "forget", "memory": 1}]})
    return reflect(mem, Model(answer, meanwhile), ["user: forget the gate code"], scope=SCOPE)


def test_reflection_does_not_forget_a_memory_rewritten_while_the_model_answered(
    make_store: StoreFactory,
) -> None:
    mem = make_store("rewritten", WordHashEmbedder())
    rec = mem.add("Alice has a temporary gate code 0000", **SCOPE)
    new_text = "Alice's permanent home address is 12 Elm Avenue"
    report = _forget(mem, lambda: mem.update(rec.id, text=new_text))
    assert report.forgotten == []
    assert report.rejected == [("forget", "the memory changed meanwhile " + _WHY)]
    assert mem.get(rec.id).text == new_text
    # Unchanged, it is forgotten.
    report = _forget(mem)
    assert report.forgotten == [rec.id] and rec.id not in mem


_WHY = "(the model judged a version it no longer has)"


def test_reflection_does_not_update_a_memory_rewritten_while_the_model_answered(
    make_store: StoreFactory,
) -> None:
    """The update superseded whatever version was current: the user's correction made
    while the model answered went to the history, replaced by what the model wrote from
    the old text."""
    mem = make_store("updated", WordHashEmbedder())
    rec = mem.add("Alice works at Initech", **SCOPE)
    answer = json.dumps({"operations": [{"op": "update", "memory": 1, "content": "Globex"}]})
    fix = "Alice works at Initech, in Lisbon"
    model = Model(answer, lambda: mem.update(rec.id, text=fix))
    report = reflect(mem, model, ["user: I moved to Globex"], scope=SCOPE)
    assert report.updated == []
    assert report.rejected == [("update", "the memory changed meanwhile " + _WHY)]
    assert mem.get(rec.id).text == fix and mem.get(rec.id).valid_to is None
    # Unchanged, it is updated.
    report = reflect(mem, Model(answer), ["user: I moved to Globex"], scope=SCOPE)
    assert [r.text for r in report.updated] == ["Globex"]


def test_reflection_does_not_forget_a_memory_superseded_or_deleted_meanwhile(
    make_store: StoreFactory,
) -> None:
    mem = make_store("superseded", WordHashEmbedder())
    rec = mem.add("Alice has a temporary gate code 0000", **SCOPE)
    new: list[Any] = []
    report = _forget(mem, lambda: new.append(mem.supersede(rec.id, "the gate code is 1111")))
    assert report.forgotten == [] and report.rejected[0][0] == "forget"
    assert mem.get(new[0].id).valid_to is None and rec.id in mem
    mem.delete(new[0].id)
    other = mem.add("Alice has a temporary gate code 2222", **SCOPE)
    report = _forget(mem, lambda: mem.delete(other.id))
    assert report.rejected == [("forget", "the memory was deleted meanwhile")]


def test_reflection_forget_checks_a_change_made_by_another_process(
    pg_server: Any, tmp_path: Path
) -> None:
    factory = StoreFactory("postgres", tmp_path, pg_server)
    try:
        a = factory("other", WordHashEmbedder(), cache_dir=tmp_path / "ca")
        b = factory("other", WordHashEmbedder(), cache_dir=tmp_path / "cb")
        rec = a.add("Alice has a temporary gate code 0000", **SCOPE)
        b._sync.follow()
        report = _forget(a, lambda: b.update(rec.id, text="Alice lives at 12 Elm Avenue"))
        assert report.forgotten == [] and rec.id in a
    finally:
        factory.close_all()


def test_a_resumed_reflection_forgets_only_the_version_shown(make_store: StoreFactory) -> None:
    """The kept answer names the versions shown: applied again after a crash, its forget
    of a memory rewritten since is not applied; one kept without them forgets nothing."""
    mem = make_store("resumed", WordHashEmbedder())
    kept: list[dict[str, Any]] = []
    answer = json.dumps({"operations": [{"op": "forget", "memory": 1}]})

    class Crash(Exception):
        pass

    def save(plan: dict[str, Any]) -> None:
        kept.append(plan)
        raise Crash  # the process dies once the answer is kept

    rec = mem.add("Alice has a temporary gate code 0000", **SCOPE)
    with pytest.raises(Crash):
        reflect(mem, Model(answer), ["user: forget it"], scope=SCOPE, resume=Resume("op", save))
    plan = json.loads(json.dumps(kept[0]))  # as a job record keeps it
    assert plan["shown"] == [rec.id] and plan["versions"] == [rec.updated_at]
    mem.update(rec.id, text="Alice's permanent home address is 12 Elm Avenue")
    report = reflect_planned(mem, plan, scope=SCOPE, resume=Resume("op"))
    assert report.forgotten == [] and rec.id in mem
    plan["versions"] = [mem.get(rec.id).updated_at]  # the version it holds now
    report = reflect_planned(mem, plan, scope=SCOPE, resume=Resume("op"))
    assert report.forgotten == [rec.id] and rec.id not in mem
    again = mem.add("Alice has a temporary gate code 0000", **SCOPE)
    for versions in (None, [], ["x"], [True], [float("nan")]):
        unknown = {"raw": answer, "shown": [again.id], "versions": versions}
        report = reflect_planned(mem, unknown, scope=SCOPE, resume=Resume("op"))
        assert report.forgotten == [] and again.id in mem
        assert report.rejected == [
            ("forget", "the version of the memory shown is not known: not forgotten")
        ]
