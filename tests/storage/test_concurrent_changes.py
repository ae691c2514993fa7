"""Facts never fork: two writers changing one record at once (update, supersede, delete)
leave exactly one current version of it (none once deleted), ``history`` shows every
version, and search returns only the current one. The loser of a race raises a memlane
error naming it and stores nothing.

Threads share one ``Memory`` on both backends; processes share one PostgreSQL schema
(an embedded store is open in one process at a time: its lock refuses a second)."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from conftest import StoreFactory, WordHashEmbedder
from memlane import ConflictError, InvalidArgumentError, MemlaneError, Memory, UnknownIdError

_names = itertools.count()

#: What a race's loser may raise: a conflict, or (when the other call ended before this
#: one read the record) the plain refusal of a superseded or deleted record.
LOSING = (ConflictError, UnknownIdError, InvalidArgumentError)


class SlowEmbedder(WordHashEmbedder):
    """Embeds a text starting with "slow:" only once ``go`` is set, having set
    ``embedding``: another writer acts while a write waits for its embedding, whatever
    the machine's speed or load."""

    def __init__(self) -> None:
        super().__init__()
        self.embedding, self.go = threading.Event(), threading.Event()

    def embed_batch(self, texts: list[str]) -> np.ndarray:
        if any(t.startswith("slow:") for t in texts):
            self.embedding.set()
            self.go.wait()
        return super().embed_batch(texts)


def meanwhile(emb: SlowEmbedder, slow: Callable[[], object], other: Callable[[], Any]) -> Any:
    """Runs ``slow`` on a thread and ``other`` while ``slow`` waits for its embedding;
    returns what ``other`` returned and what ``slow`` raised."""
    errors: list[BaseException] = []

    def slowly() -> None:
        try:
            slow()
        except BaseException as e:
            errors.append(e)

    t = threading.Thread(target=slowly)
    t.start()
    try:
        assert emb.embedding.wait(60), "the write never asked for its embedding"
        done = other()
    finally:
        emb.go.set()
        t.join()
    return done, errors


def current_versions(mem: Memory, first: str) -> list[str]:
    """The ids of the versions of ``first``'s fact that are current."""
    ids = {v.record.id for v in mem.history(first)}
    return [
        r.id
        for r in mem.list(filters={"valid_to": None}, limit=10_000)
        if r.id in ids or r.id == first
    ]


def test_update_racing_supersede_does_not_reopen_the_old_version(
    make_store: StoreFactory,
) -> None:
    """The issue's reproducer: a supersede while an update waits for its embedding. The
    update used to write back the version's stale ``valid_to=None``."""
    emb = SlowEmbedder()
    mem = make_store("race", emb)
    a = mem.add("Alice lives in Paris", user_id="alice")
    berlin, errors = meanwhile(
        emb,
        lambda: mem.update(a.id, text="slow: Alice lives in Paris, France"),
        lambda: mem.supersede(a.id, "Alice lives in Berlin"),
    )
    assert len(errors) == 1 and isinstance(errors[0], ConflictError), errors
    assert "superseded by another writer" in str(errors[0])
    assert current_versions(mem, a.id) == [berlin.id]
    assert mem.get(a.id).valid_to is not None
    hits = mem.search("where does Alice live", 5, user_id="alice")
    assert [h.record.id for h in hits] == [berlin.id]
    assert [v.record.text for v in mem.history(a.id)] == [
        "Alice lives in Paris",
        "Alice lives in Berlin",
    ]


def test_an_update_after_a_delete_does_not_bring_the_record_back(
    make_store: StoreFactory,
) -> None:
    emb = SlowEmbedder()
    mem = make_store("race", emb)
    a = mem.add("the door code is 1234")
    _, errors = meanwhile(
        emb,
        lambda: mem.update(a.id, text="slow: the door code is 4321"),
        lambda: mem.delete(a.id),
    )
    assert len(errors) == 1 and isinstance(errors[0], ConflictError), errors
    assert mem.count() == 0
    assert mem.search("door code", 5) == []
    assert [v.ended for v in mem.history(a.id)] == ["delete"]


Op = Callable[[Memory, str, int], Any]

OPS: dict[str, Op] = {
    "supersede": lambda mem, rid, w: mem.supersede(rid, f"fact {rid[:8]} as writer {w} has it"),
    "update": lambda mem, rid, w: mem.update(rid, text=f"fact {rid[:8]} updated by {w}"),
    "delete": lambda mem, rid, w: mem.delete(rid),
}
PAIRS = [
    ("supersede", "supersede"),
    ("update", "supersede"),
    ("delete", "supersede"),
    ("update", "delete"),
]


def check_facts(mem: Memory, firsts: list[str], deleting: bool) -> None:
    """At most one current version per fact (exactly one when nothing deletes); every
    version in the history; search finds only current versions."""
    for first in firsts:
        current = current_versions(mem, first)
        assert len(current) <= 1, (first, current)
        if not deleting:
            assert len(current) == 1, first
        versions = mem.history(first)
        assert versions[0].record.id == first
        assert sum(v.ended is None for v in versions) == len(current)
    live = mem.count(filters={"valid_to": None})
    hits = mem.search("fact", 500, track_access=False)
    assert all(h.record.valid_to is None for h in hits)
    assert len(hits) == live


@pytest.mark.parametrize(("first", "second"), PAIRS, ids=[f"{a}-{b}" for a, b in PAIRS])
def test_two_threads_changing_one_fact(make_store: StoreFactory, first: str, second: str) -> None:
    mem = make_store("threads", WordHashEmbedder())
    facts = [mem.add(f"fact number {i} is true").id for i in range(12)]
    barrier = threading.Barrier(2)
    outcomes: dict[int, list[str]] = {0: [], 1: []}

    def writer(w: int, op: Op) -> None:
        for rid in facts:
            barrier.wait()
            try:
                op(mem, rid, w)
                outcomes[w].append("ok")
            except LOSING as e:
                outcomes[w].append(type(e).__name__)

    threads = [
        threading.Thread(target=writer, args=(w, OPS[name]))
        for w, name in enumerate((first, second))
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check_facts(mem, facts, "delete" in (first, second))
    if first == second == "supersede":  # one of each pair wins, the other loses
        for i in range(len(facts)):
            assert (outcomes[0][i], outcomes[1][i]).count("ok") == 1


_CHILD = """
import json, sys, time
from pathlib import Path
from memlane import Memory, ConflictError, UnknownIdError, InvalidArgumentError
url, cache, op, writer, ids, go = sys.argv[1:7]
ids = json.loads(ids)
mem = Memory(url, None, cache_dir=cache)
print("READY", flush=True)
while not Path(go).exists():
    time.sleep(0.005)
out = []
for rid in ids:
    try:
        if op == "supersede":
            mem.supersede(rid, f"fact {rid[:8]} as writer {writer} has it")
        elif op == "update":
            mem.update(rid, text=f"fact {rid[:8]} updated by {writer}")
        else:
            mem.delete(rid)
        out.append("ok")
    except (ConflictError, UnknownIdError, InvalidArgumentError) as e:
        out.append(type(e).__name__)
mem.close()
print(json.dumps(out), flush=True)
"""


@pytest.mark.parametrize(("first", "second"), PAIRS, ids=[f"{a}-{b}" for a, b in PAIRS])
def test_two_processes_changing_one_fact_on_postgres(
    pg_server: Any, tmp_path: Path, first: str, second: str
) -> None:
    """The issue's trial: two processes superseding the same 150 ids forked 101 of them."""
    factory = StoreFactory("postgres", tmp_path, pg_server)
    try:
        mem = factory("procs")
        facts = [r.id for r in mem.add_many([{"text": f"fact {i}"} for i in range(150)])]
        url = str(factory.location("procs"))
        go = tmp_path / "go"
        children = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    _CHILD,
                    url,
                    str(tmp_path / f"cache{w}"),
                    op,
                    str(w),
                    json.dumps(facts),
                    str(go),
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for w, op in enumerate((first, second))
        ]
        for child in children:
            assert child.stdout is not None
            line = child.stdout.readline()
            assert line.strip() == "READY", child.stderr.read() if child.stderr else ""
        go.touch()
        results = []
        for child in children:
            out, err = child.communicate(timeout=300)
            assert child.returncode == 0, err
            results.append(json.loads(out.strip().splitlines()[-1]))
        assert all(len(r) == len(facts) for r in results)
        if first == second == "supersede":
            assert all((a, b).count("ok") == 1 for a, b in zip(*results, strict=True))
        mem.close()
        mem = factory("procs")  # a fresh look at what the two wrote
        check_facts(mem, facts, "delete" in (first, second))
        if "delete" not in (first, second):
            assert mem.count(filters={"valid_to": None}) == len(facts)
    finally:
        factory.close_all()


def test_a_conflict_is_a_memlane_error() -> None:
    assert issubclass(ConflictError, MemlaneError)


class TwoWriters(RuleBasedStateMachine):
    """Two ``Memory`` objects on one PostgreSQL schema, each with its own engine, change
    facts in turn, often through a view the other just made stale. The model holds each
    fact's current version; after every step both see exactly the model's current
    versions, and a change of a version that is no longer current stores nothing."""

    factory: StoreFactory

    def __init__(self) -> None:
        super().__init__()
        name = f"two{next(_names)}"
        cache = self.factory.tmp_path / "caches" / name
        self.mems = [self.factory(name, cache_dir=cache / str(i)) for i in range(2)]
        self.current: dict[int, str | None] = {}  # fact -> its current version's id
        self.closed: list[str] = []  # versions superseded
        self.words = itertools.count()

    def teardown(self) -> None:
        for mem in self.mems:
            mem.close()

    def _fact(self, data: st.DataObject) -> tuple[int, str] | None:
        live = sorted(f for f, rid in self.current.items() if rid is not None)
        if not live:
            return None
        fact = data.draw(st.sampled_from(live))
        rid = self.current[fact]
        assert rid is not None
        return fact, rid

    @rule(via=st.integers(0, 1))
    def add(self, via: int) -> None:
        fact = len(self.current)
        self.current[fact] = self.mems[via].add(f"fact {fact} version {next(self.words)}").id

    @rule(via=st.integers(0, 1), data=st.data())
    def supersede(self, via: int, data: st.DataObject) -> None:
        picked = self._fact(data)
        if picked is not None:
            fact, rid = picked
            new = self.mems[via].supersede(rid, f"fact {fact} version {next(self.words)}")
            self.current[fact] = new.id
            self.closed.append(rid)

    @rule(via=st.integers(0, 1), data=st.data())
    def update(self, via: int, data: st.DataObject) -> None:
        picked = self._fact(data)
        if picked is not None:
            fact, rid = picked
            self.mems[via].update(rid, text=f"fact {fact} version {next(self.words)}")

    @rule(via=st.integers(0, 1), data=st.data())
    def delete(self, via: int, data: st.DataObject) -> None:
        picked = self._fact(data)
        if picked is not None:
            self.mems[via].delete(picked[1])
            self.current[picked[0]] = None

    @rule(via=st.integers(0, 1), data=st.data(), then=st.sampled_from(["update", "supersede"]))
    def change_through_a_stale_view(self, via: int, data: st.DataObject, then: str) -> None:
        """One Memory supersedes a fact; the other, before it heard of that, changes the
        version it still takes for current: both raise (a superseded version is
        history), and neither forks the fact."""
        picked = self._fact(data)
        if picked is None:
            return
        fact, rid = picked
        other = self.mems[1 - via]
        other.get(rid)  # the other's view of the version, before the supersede
        new = self.mems[via].supersede(rid, f"fact {fact} version {next(self.words)}")
        self.current[fact] = new.id
        self.closed.append(rid)
        change = "a fork"
        with pytest.raises((ConflictError, InvalidArgumentError)):
            if then == "update":
                other.update(rid, text=change)
            else:
                other.supersede(rid, change)

    @rule(via=st.integers(0, 1), data=st.data())
    def supersede_a_closed_version(self, via: int, data: st.DataObject) -> None:
        if self.closed:
            rid = data.draw(st.sampled_from(self.closed))
            before = self.mems[via].count()
            with pytest.raises((ConflictError, InvalidArgumentError, UnknownIdError)):
                self.mems[via].supersede(rid, "a fork")
            assert self.mems[via].count() == before

    @invariant()
    def both_see_one_current_version_per_fact(self) -> None:
        want = {rid for rid in self.current.values() if rid is not None}
        for mem in self.mems:
            mem._sync.follow()  # what the other committed (else it arrives by NOTIFY)
            got = {r.id for r in mem.list(filters={"valid_to": None}, limit=10_000)}
            assert got == want
            if want:
                hits = mem.search("fact version", 100, track_access=False)
                assert {h.record.id for h in hits} <= want


def test_two_memories_on_one_postgres_schema_follow_the_model(
    pg_server: Any, tmp_path: Path
) -> None:
    TwoWriters.factory = StoreFactory("postgres", tmp_path, pg_server)
    run = TwoWriters.TestCase
    run.settings = settings(
        max_examples=15,
        stateful_step_count=25,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    try:
        run().runTest()
    finally:
        TwoWriters.factory.close_all()


def test_a_superseded_version_is_history_and_is_not_updated(make_store: StoreFactory) -> None:
    mem = make_store("history", None)
    paris = mem.add("Alice lives in Paris")
    berlin = mem.supersede(paris.id, "Alice lives in Berlin")
    with pytest.raises(InvalidArgumentError, match="superseded already"):
        mem.update(paris.id, text="Alice lives in Paris, France")
    assert mem.get(paris.id).text == "Alice lives in Paris"
    assert [v.record.text for v in mem.history(berlin.id)] == [
        "Alice lives in Paris",
        "Alice lives in Berlin",
    ]
