"""What the agent stores in pieces is stored in one transaction: a turn (its messages, a
long one's pieces, its short-term entry) and a long fact split by the length cap. A
process killed while it stores leaves all of it or none, and what comes after (the
platform's delivery again, the job's resume) makes it whole."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from conftest import StoreFactory, WordHashEmbedder
from memlane import AgentMemory, Memory
from memlane.agent import Limits, SessionScope
from memlane.agent.caps import cap_record
from memlane.agent.history import MESSAGES, add_message
from memlane.agent.reports import TurnReport
from upkeep_scripts import QUIET, agent, said, turn

TESTS = Path(__file__).resolve().parent.parent

#: The embedder of the processes below: it stalls (after saying STALL) while it embeds a
#: batch holding ``stall`` but not ``unless``, to be killed there.
_STALLS = """
class Stalls(WordHashEmbedder):
    def embed_batch(self, texts):
        if any(stall in t and unless not in t for t in texts):
            os.write(1, b"STALL\\n")
            time.sleep(600)
        return super().embed_batch(texts)

    def embed(self, text):
        return self.embed_batch([text])[0]
"""

#: A process that stores a turn with a platform message id (argv[4]: the user's text)
#: and stalls while it embeds a batch holding argv[5] but not argv[6] (after saying
#: STALL), to be killed there. argv: store, cache folder ("-": none), the tests folder.
_KILLED_TURN = (
    """
import os, sys, time
sys.path.insert(0, sys.argv[3])
from conftest import WordHashEmbedder
from memlane import AgentMemory, Memory
from memlane.agent import SessionScope
from upkeep_scripts import QUIET

text, stall, unless = sys.argv[4], sys.argv[5], sys.argv[6]
"""
    + _STALLS
    + """
options = {} if sys.argv[2] == "-" else {"cache_dir": sys.argv[2]}
am = AgentMemory(Memory(sys.argv[1], Stalls(), **options), SessionScope("per-peer"), None, **QUIET)
am.after(am.event("telegram", 42, 7, message_id=555), [{"role": "user", "content": text}], "noted")
os.write(1, b"RETURNED\\n")
time.sleep(600)
"""
)

#: A process whose agent reflects a fact longer than the cap at its second turn and
#: stalls while it embeds a batch holding argv[4] but not argv[5] (after saying STALL),
#: to be killed there. argv: store, cache folder ("-": none), the tests folder, the
#: text to stall at, the text that spares a batch, the fact.
_KILLED_SPLIT = (
    """
import json, os, sys, time
sys.path.insert(0, sys.argv[3])
from conftest import WordHashEmbedder
from memlane import Memory
from upkeep_scripts import agent, turn

stall, unless, fact = sys.argv[4], sys.argv[5], sys.argv[6]
"""
    + _STALLS
    + """
class Answers:
    def complete(self, messages):
        if "New facts:" in messages[-1]["content"]:
            return '{"decisions": []}'
        return json.dumps({"operations": [{"op": "remember", "content": fact}]})

options = {} if sys.argv[2] == "-" else {"cache_dir": sys.argv[2]}
am = agent(Memory(sys.argv[1], Stalls(), **options), Answers())
alice = am.event("telegram", 42, 7)
for text in ("I have news", "lots of news"):
    turn(am, alice, text)
time.sleep(600)
"""
)


def _killed(script: str, make_store: StoreFactory, name: str, tmp_path: Path, *args: str) -> None:
    """Runs ``script`` on store ``name`` and kills it (kill -9) once it says STALL."""
    cache = "-" if make_store.server is None else str(tmp_path / f"{name}-child")
    location = str(make_store.location(name))
    child = subprocess.Popen(
        [sys.executable, "-c", script, location, cache, str(TESTS), *args],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert said(child, 1) == ["STALL"]
    finally:
        child.kill()
        child.communicate(timeout=60)


def _deliver(mem: Memory, text: str) -> Any:
    am = AgentMemory(mem, SessionScope("per-peer"), None, **QUIET)
    event = am.event("telegram", 42, 7, message_id=555)
    report = am.after(event, [{"role": "user", "content": text}], "noted")
    am.close()
    return report


def _users(mem: Memory) -> list[str]:
    return [r.text for r in mem.list(MESSAGES, order="asc") if r.metadata["role"] == "user"]


# -- a turn ---------------------------------------------------------------------------------


def test_a_turn_killed_before_its_entry_is_stored_whole_when_delivered_again(
    make_store: StoreFactory, tmp_path: Path
) -> None:
    # The message (and its dedup key) went in a transaction of its own, before the
    # entry: the delivery again was taken for a duplicate and the turn never got one.
    _killed(_KILLED_TURN, make_store, "entry", tmp_path, "I booked Lisbon", "user: ", "never")
    mem = make_store("entry", WordHashEmbedder())
    report = _deliver(mem, "I booked Lisbon")
    assert report.stored[0].duplicate is None
    assert _users(mem) == ["I booked Lisbon"]
    assert [r.text for r in mem.list("short_term")] == ["user: I booked Lisbon\nassistant: noted"]


def test_a_long_message_killed_between_its_pieces_is_stored_whole_when_delivered_again(
    make_store: StoreFactory, tmp_path: Path
) -> None:
    # The first piece (holding the dedup key) was stored before the others: delivered
    # again, the message kept its first piece only.
    long = " ".join(f"Sentence {i} of my story about place{i}." for i in range(80)) + " Endmark."
    _killed(_KILLED_TURN, make_store, "pieces", tmp_path, long, "Endmark", "Sentence 0 ")
    mem = make_store("pieces", WordHashEmbedder())
    report = _deliver(mem, long)
    assert ("user message", 3) in report.splits
    assert " ".join(_users(mem)) == long
    assert len(report.short_term) > 1 and mem.count("short_term") == len(report.short_term)


def test_a_turn_delivered_again_stores_no_piece_and_no_entry_however_late(
    make_store: StoreFactory,
) -> None:
    long = " ".join(f"Sentence {i} of my story about place{i}." for i in range(80))
    # A window of no length: the message's id alone says it is stored already.
    mem = make_store("late", WordHashEmbedder(), dedup_window=0)
    first = _deliver(mem, long)
    entries = mem.count("short_term")
    again = _deliver(mem, long)
    assert again.stored[0].duplicate == "window" and again.stored[0].id == first.stored[0].id
    assert again.short_term == [] and mem.count("short_term") == entries
    assert " ".join(_users(mem)) == long
    # The reply to the delivery again is a message of its own.
    replies = [r for r in mem.list(MESSAGES) if r.metadata["role"] == "assistant"]
    assert len(replies) == 2 and again.stored[1].text == "noted"
    mem.close()


def test_a_message_stored_by_add_message_delivered_to_the_loop_adds_no_entry(
    make_store: StoreFactory,
) -> None:
    """A message stored under an id not derived from it (``add_message``, an earlier
    memlane) is known by the dedup window only: what the turn stored beside it goes."""
    mem = make_store("window", WordHashEmbedder())
    am = AgentMemory(mem, SessionScope("per-peer"), None, **QUIET)
    event = am.event("telegram", 42, 7, message_id=555)
    long = " ".join(f"Sentence {i} of my story about place{i}." for i in range(80))
    stored = add_message(mem, "the story follows", event)
    report = am.after(event, [{"role": "user", "content": long}], "noted")
    am.close()
    assert report.stored[0].id == stored.id and report.stored[0].duplicate == "window"
    assert report.short_term == [] and mem.count("short_term") == 0
    assert _users(mem) == ["the story follows"]
    mem.close()


# -- a fact split by the length cap ---------------------------------------------------------


def test_a_fact_split_killed_midway_keeps_every_sentence(
    make_store: StoreFactory, tmp_path: Path
) -> None:
    # The first piece was written over the fact (update) before the others were added:
    # killed between, the job found again counted the operation done and the tail was lost.
    sentences = [f"Fact sentence {i} says alice keeps item{i} in drawer{i}." for i in range(59)]
    fact = " ".join([*sentences, "Tailmark: the spare key is under the blue pot."])
    args = ("Tailmark", "Fact sentence 0 ", fact)
    _killed(_KILLED_SPLIT, make_store, "split", tmp_path, *args)
    mem = make_store("split", WordHashEmbedder())
    am = agent(mem, _NoOps())
    turn(am, am.event("telegram", 42, 7), "hello again")  # resumes the job left
    assert am.drain(60)
    am.close()
    (kept,) = [r for r in mem.list("memories") if r.valid_to is None]
    assert kept.text == fact  # whole: neither cut nor split
    mem.close()


class _NoOps:
    def complete(self, messages: Any) -> str:
        if "New facts:" in messages[-1]["content"]:
            return json.dumps({"decisions": []})
        return json.dumps({"operations": []})


def test_a_split_keeps_the_facts_fields_and_its_id(mem: Memory) -> None:
    fact = " ".join(f"Sentence {i} of a long fact." for i in range(20))
    rec = mem.add(fact, importance=0.8, created_at=1000.0, metadata={"k": 1}, agent_id="a")
    report = TurnReport()
    cap_record(mem, Limits(max_entry_chars=200), rec, None, report)
    parts = sorted(mem.list("memories", agent_id="a"), key=lambda r: r.metadata["part"])
    assert parts[0].id == rec.id and len(parts) == report.splits[0][1] > 1
    assert " ".join(p.text for p in parts) == fact
    assert {(p.importance, p.created_at, p.metadata["k"]) for p in parts} == {(0.8, 1000.0, 1)}


def test_a_split_follows_a_change_of_the_fact_and_leaves_a_rewrite(mem: Memory) -> None:
    fact = " ".join(f"Sentence {i} of a long fact." for i in range(20))
    limits = Limits(max_entry_chars=200)
    marked = mem.add(fact, metadata={"fact_check": "pending"})
    mem.update(marked.id, metadata={"fact_check": "kept"})  # after the trigger read it
    cap_record(mem, limits, marked, None, TurnReport())
    parts = mem.list("memories")
    assert len(parts) > 1 and {p.metadata["fact_check"] for p in parts} == {"kept"}
    mem.delete_all()
    rewritten = mem.add(fact)
    mem.update(rewritten.id, text=fact + " Corrected.")
    report = TurnReport()
    cap_record(mem, limits, rewritten, None, report)
    assert report.splits == [] and [r.text for r in mem.list("memories")] == [fact + " Corrected."]
