"""Upkeep under attack: kill -9 during reflection, two agents on one store, and a model
that never answers. docs/reliability.md's "Upkeep, attacked" table comes from it.

- **kill -9 during reflection**: a process whose model answers 3 to 10 facts is killed
  while it embeds one of them (chosen at random: the ones before it are committed) or at
  a random instant after its turn returned; the store is reopened by an agent of the
  same owner whose model answers the same facts. Counted: facts missing (lost), facts
  stored more than once, job records left, model calls after the crash.
- **two agents, one store**: agent A (its own table) reflects with a slow model while
  agent B (another table) runs its turns and its own reflection; counted: prompts of
  B's model that hold A's messages, and A's facts stored other than once.
- **a model that never answers**: ``--turns`` turns beside it (reflection every turn,
  consolidation, profiles); reported: the most jobs pending and recorded at once, the
  model calls made, and whether the contact profile counted every message.

On SQLite and, with ``MEMLANE_PG_BIN`` set, PostgreSQL.

    python benches/upkeep_faults.py [--trials 50] [--turns 1000] [--seed 0]
        [--backend all|sqlite|postgres]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parents[1] / "tests"
sys.path.insert(0, str(TESTS))

from conftest import WordHashEmbedder  # noqa: E402
from memlane import Memory  # noqa: E402
from memlane.agent import (  # noqa: E402
    CONTACTS,
    Consolidation,
    Profiles,
    Reflection,
)
from upkeep_scripts import KILLED_REFLECTION, Hung, Model, agent, said, turn  # noqa: E402


class Backend:
    def __init__(self, name: str, work: Path, server: Any) -> None:
        self.name, self.work, self.server = name, work, server
        self.n = 0

    def location(self) -> tuple[str, str, dict[str, Any]]:
        self.n += 1
        if self.server is None:
            return str(self.work / f"s{self.n}"), "-", {}
        url = self.server.url(schema=f"upkeep_{os.getpid()}_{self.n}")
        cache = self.work / f"c{self.n}"
        return url, str(cache / "child"), {"cache_dir": cache / "parent"}


def kill_trial(backend: Backend, rng: random.Random) -> Counter[str]:
    facts = [f"Alice fact number {i} is {rng.randrange(10**6)}" for i in range(rng.randint(3, 10))]
    answer = json.dumps({"operations": [{"op": "remember", "content": f} for f in facts]})
    at_embed = rng.random() < 0.5
    stall = facts[rng.randrange(len(facts))] if at_embed else ""
    location, cache, options = backend.location()
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_REFLECTION, location, cache, str(TESTS), stall, answer],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines = said(child, 2 if at_embed else 1)
        if not at_embed:
            time.sleep(rng.uniform(0.0, 0.15))
    finally:
        os.kill(child.pid, signal.SIGKILL)
        _, err = child.communicate(timeout=60)
    if sorted(lines) != sorted(["TURNS", "EMBEDDING"][: 2 if at_embed else 1]):
        raise SystemExit(f"the child process said {lines}:\n{err}")
    mem = Memory(location, WordHashEmbedder(), **options)
    try:
        model = Model(answer)
        am = agent(mem, model)
        alice = am.event("telegram", 42, 7)
        turn(am, alice, "good morning")
        am.drain(timeout=120)
        am.close()
        texts = Counter(r.text for r in mem.list("memories", limit=1000, **alice.fields))
        return Counter(
            trials=1,
            lost=sum(1 for f in facts if texts[f] == 0),
            twice=sum(1 for f in facts if texts[f] > 1),
            left=len(mem.jobs.items()),
            calls=len(model.prompts),  # reflection's (the check of new facts is apart)
        )
    finally:
        mem.close()


def two_agents_trial(backend: Backend, rng: random.Random) -> Counter[str]:
    location, _, options = backend.location()
    mem = Memory(location, WordHashEmbedder(), **options)
    try:
        facts = [f"the secret code is {rng.randrange(10**6)}"]
        answer = json.dumps({"operations": [{"op": "remember", "content": f} for f in facts]})
        gate = threading.Event()
        model_a, model_b = Model(answer, gate), Model(json.dumps({"operations": []}))
        a, b = agent(mem, model_a, "memories_a"), agent(mem, model_b, "memories_b")
        alice, bob = a.event("telegram", 42, 7), b.event("telegram", 99, 8)
        secret = f"my code is {rng.randrange(10**6)}"
        turn(a, alice, secret)
        turn(a, alice, "remember it")
        model_a.entered.wait(60)
        for i in range(rng.randint(2, 6)):
            turn(b, bob, f"hello {i}")
        b.drain(timeout=60)
        gate.set()
        a.drain(timeout=60)
        a.close()
        b.close()
        stored = Counter(r.text for r in mem.list("memories_a", limit=100))
        return Counter(
            trials=1,
            crossed=sum(secret in p for p in model_b.seen),
            wrong=sum(1 for f in facts if stored[f] != 1) + mem.count("memories_b"),
        )
    finally:
        mem.close()


def hung_run(backend: Backend, turns: int) -> dict[str, Any]:
    location, _, options = backend.location()
    mem = Memory(location, WordHashEmbedder(), **options)
    hung = Hung()
    am = agent(
        mem,
        hung,
        reflection=Reflection(every=1),
        consolidation=Consolidation(threshold=3, batch=2),
        profiles=Profiles(),
        upkeep_timeout=1.0,
    )
    try:
        alice = am.event("telegram", 42, 7, name="Alice")
        pending = recorded = 0
        for i in range(turns):
            turn(am, alice, f"message {i}")
            pending = max(pending, len(am.pending_upkeep()))
            if i % 25 == 0:
                recorded = max(recorded, len(mem.jobs.items()))
        am.drain(timeout=120)
        (profile,) = mem.list(CONTACTS, **alice.fields)
        return {
            "turns": turns,
            "pending": pending,
            "recorded": recorded,
            "calls": hung.calls,
            "counted": profile.metadata["message_count"],
        }
    finally:
        hung.release.set()
        am.close(timeout=60)
        mem.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--backend", choices=("all", "sqlite", "postgres"), default="all")
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # a hung model's failures are counted, not logged
    # A killed process leaves no snapshot: the rebuild is expected.
    warnings.filterwarnings("ignore", "memlane.*snapshot", RuntimeWarning)
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp())
    server = None
    backends = [Backend("sqlite", work, None)] if args.backend != "postgres" else []
    pg_bin = os.environ.get("MEMLANE_PG_BIN")
    if args.backend == "postgres" and not pg_bin:
        raise SystemExit("no PostgreSQL server binaries: set MEMLANE_PG_BIN")
    if pg_bin and args.backend != "sqlite":
        from pg_server import PgServer

        server = PgServer(Path(pg_bin)).start()
        backends.append(Backend("postgres", work, server))
    bad = 0
    try:
        print(
            "| backend | trials | facts lost | facts stored twice | job records left |"
            " model calls after the crash | prompts crossed | A's facts not stored once |"
        )
        print("| --- |" + " ---: |" * 7)
        for be in backends:
            kill = sum((kill_trial(be, rng) for _ in range(args.trials)), Counter())
            two = sum((two_agents_trial(be, rng) for _ in range(args.trials)), Counter())
            print(
                f"| {be.name} | {kill['trials']} | {kill['lost']} | {kill['twice']} |"
                f" {kill['left']} | {kill['calls']} | {two['crossed']} | {two['wrong']} |"
            )
            bad += kill["lost"] + kill["twice"] + kill["left"] + two["crossed"] + two["wrong"]
        print()
        print(
            "| backend | turns beside a hung model | most jobs pending | most job records |"
            " model calls | messages the profile counted |"
        )
        print("| --- |" + " ---: |" * 5)
        for be in backends:
            h = hung_run(be, args.turns)
            print(
                f"| {be.name} | {h['turns']} | {h['pending']} | {h['recorded']} | {h['calls']} |"
                f" {h['counted']} |"
            )
            bad += int(h["counted"] != h["turns"])
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
