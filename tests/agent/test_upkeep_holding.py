"""Whose an upkeep job is, and for how long: a job's owner includes its store's
``default_scope``, a job's windows (``span``) survive a crash and a coalescing, a holder
writes and applies a job only while its record is still as it wrote it (so a job taken
over from a holder that only seemed gone is applied once), and the upkeep calls an async
model on a loop of its own, never on a turn's loop that may be closed by then."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest

from conftest import StoreFactory, WordHashEmbedder
from memlane import AgentMemory, Memory
from memlane.agent import Consolidation, OpenAIChat, Reflection, SessionScope, UpkeepResult
from memlane.agent.upkeep import Job
from memlane.agent.upkeep.jobs import Holder
from memlane.errors import StorageError
from upkeep_scripts import QUIET, Model, agent, turn

SCOPES = SessionScope("per-peer")
ALICE = SCOPES.resolve("telegram", 42, 7)
BOB = SCOPES.resolve("telegram", 99, 8)
REMEMBER = json.dumps({"operations": [{"op": "remember", "content": "Alice keeps bees"}]})


def _gone() -> Holder:
    """A holder on another host whose lease has passed."""
    return Holder("elsewhere/boot/pid:[1]", 4321, "99", "dead", time.time() - 1)


def _texts(mem: Memory, **scope: Any) -> list[str]:
    return [r.text for r in mem.list("memories", limit=100, **scope)]


# -- the owner ------------------------------------------------------------------------------


def test_agents_kept_apart_by_default_scope_do_not_run_each_others_jobs(
    make_store: StoreFactory,
) -> None:
    """A's reflection, killed with its plan kept, is not B's to run (B's model, B's
    scope) though both have the same table and scope settings; A finishes it in A."""
    plan = {"raw": REMEMBER, "shown": [], "versions": []}
    mem_a = make_store("apart", WordHashEmbedder(), default_scope={"agent_id": "A"})
    probe = agent(mem_a, Model(REMEMBER))
    owner = probe._upkeep.owner
    probe.close()
    killed = Job("reflection", ALICE, time.time() - 60, owner=owner, plan=plan)
    mem_a.jobs.put(killed.key, killed.held_by(_gone()).dumps())
    mem_a.close()

    mem_b = make_store("apart", WordHashEmbedder(), default_scope={"agent_id": "B"})
    b = agent(mem_b, Model(json.dumps({"operations": []})))
    turn(b, ALICE, "hello from B's user")
    assert b.drain(60)
    assert [k for k, _ in mem_b.jobs.items()] == [killed.key]  # left for A
    assert _texts(mem_b, agent_id="B") == []
    b.close()
    mem_b.close()

    mem_a = make_store("apart", WordHashEmbedder(), default_scope={"agent_id": "A"})
    a = agent(mem_a, Model(REMEMBER))
    turn(a, ALICE, "hello again")
    assert a.drain(60)
    assert "Alice keeps bees" in _texts(mem_a, agent_id="A")
    assert mem_a.jobs.items() == []
    a.close()


# -- the span -------------------------------------------------------------------------------


def test_a_resumed_reflection_shows_every_window_it_had_taken_over(
    make_store: StoreFactory,
) -> None:
    mem = make_store("span", WordHashEmbedder())
    model = Model(json.dumps({"operations": []}))
    am = agent(mem, model, reflection=Reflection(every=50, window=4))
    for i in range(1, 11):  # what a span of 5 shows, and not one
        turn(am, ALICE, f"news item{i}")
    killed = Job("reflection", ALICE, time.time(), owner=am._upkeep.owner, span=5)
    mem.jobs.put(killed.key, killed.held_by(_gone()).dumps())
    am._upkeep._scanned = None  # look for jobs left now rather than in a minute
    turn(am, BOB, "hello")
    assert am.drain(60)
    shown = " ".join(model.prompts)
    assert [i for i in range(1, 11) if not re.search(rf"news item{i}\b", shown)] == []
    am.close()


def test_a_coalesced_reflection_keeps_the_windows_it_replaced_when_its_write_fails(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The newer job's windows and the older's record change in one transaction: a
    failure between them loses neither (the older, recorded, still covers its windows)."""
    mem = make_store("coalesce", WordHashEmbedder())
    gate = threading.Event()
    model = Model(json.dumps({"operations": []}), gate)
    am = agent(mem, model, reflection=Reflection(every=1))
    turn(am, BOB, "Bob is first")  # the worker: busy with Bob's reflection
    assert model.entered.wait(30)
    turn(am, ALICE, "one")
    db = mem._db
    swap, put = db.swap_tenant_meta, db.set_tenant_meta

    def failing(write: Any) -> Any:
        def write_unless_coalescing(conn: Any, key: str, *values: str) -> Any:
            if '"span": 2' in values[-1]:
                raise StorageError("the disk is full")
            return write(conn, key, *values)

        return write_unless_coalescing

    monkeypatch.setattr(db, "swap_tenant_meta", failing(swap))
    monkeypatch.setattr(db, "set_tenant_meta", failing(put))
    turn(am, ALICE, "two")  # takes the place of the job of "one"
    monkeypatch.undo()
    alice = [Job.loads(v) for _, v in mem.jobs.items()]
    assert sum(j.span for j in alice if j.event.contact == ALICE.contact) == 2
    gate.set()
    assert am.drain(60)
    am.close()


# -- holding a job --------------------------------------------------------------------------


def _take_over(mem: Memory, key: str) -> str:
    """What another host's resume writes: the job, held by it."""
    text = dict(mem.jobs.items())[key]
    taken = Job.loads(text).held_by(Holder("other/boot/ns", 7, "1", "theirs", 1e12)).dumps()
    assert mem.jobs.swap(key, text, taken)
    return taken


def test_a_job_taken_over_while_its_holder_runs_is_applied_by_neither_twice(
    make_store: StoreFactory,
) -> None:
    """Taken over while its model thinks (and the next job while it waits): the first
    holder applies nothing of either, runs the waiting one not at all, and leaves both
    records to the process that took them."""
    mem = make_store("taken", WordHashEmbedder())
    gate = threading.Event()
    model = Model(REMEMBER, gate)
    am = agent(mem, model, reflection=Reflection(every=1))
    turn(am, ALICE, "I keep bees")
    assert model.entered.wait(30)
    turn(am, BOB, "I keep goats")  # waits behind Alice's
    taken = {key: _take_over(mem, key) for key, _ in mem.jobs.items()}
    assert len(taken) == 2
    gate.set()
    assert am.drain(60)
    assert _texts(mem) == []
    assert len(model.prompts) == 1  # Bob's job never reached the model here
    assert dict(mem.jobs.items()) == taken
    am.close()


def test_a_consolidation_taken_over_while_its_model_thinks_stores_nothing(
    make_store: StoreFactory,
) -> None:
    mem = make_store("taken-consolidation", WordHashEmbedder())
    gate = threading.Event()
    summary = json.dumps({"summary": "Alice talked about bees", "facts": []})
    model = Model(summary, gate)
    am = agent(
        mem, model, reflection=Reflection(enabled=False), consolidation=Consolidation(threshold=2)
    )
    turn(am, ALICE, "I keep bees")
    turn(am, ALICE, "three hives")
    assert model.entered.wait(30)
    taken = {key: _take_over(mem, key) for key, _ in mem.jobs.items()}
    gate.set()
    assert am.drain(60)
    assert _texts(mem) == []
    assert mem.count("short_term", **ALICE.fields) == 2
    assert dict(mem.jobs.items()) == taken
    am.close()


def test_a_holder_renews_the_lease_of_the_jobs_it_holds(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Running or waiting, a job's lease is renewed, so another host does not take it
    for gone while its holder lives."""
    mem = make_store("renewed", WordHashEmbedder())
    gate = threading.Event()
    model = Model(REMEMBER, gate)
    am = agent(mem, model, reflection=Reflection(every=1))
    turn(am, ALICE, "I keep bees")
    assert model.entered.wait(30)
    turn(am, BOB, "I keep goats")
    token = am._upkeep.token
    before = {k: Job.loads(v).holder for k, v in mem.jobs.items()}
    later = time.time() + 10_000  # past the lease each was recorded with
    assert all(h is not None and h.until < later for h in before.values())
    monkeypatch.setattr(am._upkeep.holding, "holder", lambda: Holder.here(token, later + 900))
    am._upkeep.holding.renew()
    monkeypatch.undo()
    after = {k: Job.loads(v).holder for k, v in mem.jobs.items()}
    assert after.keys() == before.keys()
    assert all(h is not None and h.until > later and h.token == token for h in after.values())
    gate.set()
    assert am.drain(60)
    assert _texts(mem).count("Alice keeps bees") == 2  # each room's job, applied once
    assert mem.jobs.items() == []
    am.close()


# -- async models ---------------------------------------------------------------------------


class AsyncOnly:
    """An async model (no sync ``complete``)."""

    def __init__(self) -> None:
        self.asked = 0

    async def acomplete(self, messages: Sequence[Any]) -> str:
        await asyncio.sleep(0)
        self.asked += 1
        if "New facts:" in messages[-1]["content"]:
            return json.dumps({"decisions": []})
        return REMEMBER


def _async_turns(am: AgentMemory, texts: Sequence[str], one_loop: bool) -> None:
    async def one(text: str) -> None:
        msgs = await am.abefore(ALICE, [{"role": "user", "content": text}])
        await am.aafter(ALICE, msgs, "ok")

    if one_loop:  # a loop left alive but idle between the turns (and after them)
        loop = asyncio.new_event_loop()
        for text in texts:
            loop.run_until_complete(one(text))
        assert am.drain(60)
        loop.close()
        return
    for text in texts:
        asyncio.run(one(text))  # a loop per turn, closed when it returns
    assert am.drain(60)


@pytest.mark.parametrize("one_loop", [False, True], ids=["loop-per-turn", "idle-loop"])
def test_the_upkeep_of_async_turns_reaches_an_async_model(tmp_path: Any, one_loop: bool) -> None:
    mem = Memory(tmp_path / "s", WordHashEmbedder())
    results: list[UpkeepResult] = []
    llm = AsyncOnly()
    am = AgentMemory(
        mem,
        SCOPES,
        llm,
        reflection=Reflection(every=2),
        on_upkeep=results.append,
        upkeep_timeout=30,
        **QUIET,
    )
    _async_turns(am, ["I keep bees", "three hives"], one_loop)
    assert [f.error for r in results for f in r.report.failures] == []
    assert "Alice keeps bees" in _texts(mem)
    am.close()
    mem.close()


def test_the_upkeep_of_async_turns_calls_openai_chat_off_the_turns_loop(tmp_path: Any) -> None:
    from chat_server import ScriptedChatServer

    with ScriptedChatServer([REMEMBER, json.dumps({"decisions": []})]) as server:
        llm = OpenAIChat("m", base_url=server.base_url, max_retries=0, timeout=30)
        mem = Memory(tmp_path / "s", WordHashEmbedder())
        am = AgentMemory(mem, SCOPES, llm, reflection=Reflection(every=2), **QUIET)
        _async_turns(am, ["I keep bees", "three hives"], one_loop=False)
        assert "Alice keeps bees" in _texts(mem)
        am.close()
        mem.close()
        llm.close()


# -- exact scope ----------------------------------------------------------------------------


def test_an_agent_without_agent_id_queues_no_upkeep_for_another_agents_records(
    make_store: StoreFactory,
) -> None:
    """Agent A's pending fact and short-term entries are not X's (no agent_id) to check
    or consolidate: X's turns queue neither for them."""
    mem = make_store("exact", WordHashEmbedder())
    options: dict[str, Any] = {
        **QUIET,
        "reflection": Reflection(enabled=False),
        "consolidation": Consolidation(threshold=3, batch=3),
    }
    model_a = Model(json.dumps({"operations": []}))
    a = AgentMemory(mem, SessionScope("per-peer", agent_id="A"), model_a, **options)
    ea = a.event("telegram", 42, 7)
    turn(a, ea, "secret plan alpha")
    turn(a, ea, "secret plan beta")
    a.memory_tools(ea).handle_tool_call("remember", {"content": "Alice's code is 4711"})
    ran: list[str] = []
    x = AgentMemory(
        mem,
        SessionScope("per-peer"),
        Model(json.dumps({"decisions": []})),
        on_upkeep=lambda r: ran.append(r.kind),
        **options,
    )
    turn(x, x.event("telegram", 42, 7), "hello X")
    assert x.drain(60)
    assert ran == []
    assert mem.count("short_term", agent_id="A") == 2
    x.close()
    a.close()
