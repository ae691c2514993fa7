"""``memlane demo``: the README's main job, end to end on the default model.

It creates a store in a temporary folder, ingests the short documents about
memlane that the package ships as shared knowledge, adds the sample memories
for two agents and two users, then runs hybrid searches, a scoped recall and a
knowledge search, and prints the results with their scores, the explanation
of one result and the time each step took. Everything runs offline.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any

from memlane.cli._command import at_least, command
from memlane.errors import InvalidArgumentError
from memlane.memory import Memory
from memlane.printable import printable
from memlane.records import SearchHit

__all__ = ["AGENTS", "QUESTIONS", "USERS", "demo_items", "knowledge_dir", "run"]

#: The two agents: a personal assistant that remembers people, an ops bot that remembers work.
AGENTS = ("assistant", "ops-bot")
USERS = ("alice", "bob")

QUESTIONS = (
    "What display theme does Alice like?",
    "How do we ship a new release?",
    "Does anyone have a nut allergy?",
    "Was anything wrong with the backups?",
)


def demo_texts() -> list[str]:
    """The sample memories the package ships, one per line."""
    data = resources.files("memlane") / "data" / "demo_memories.txt"
    return [line for line in data.read_text(encoding="utf-8").splitlines() if line.strip()]


def knowledge_dir() -> Path:
    """The folder of sample knowledge (short markdown documents about memlane)."""
    return Path(str(resources.files("memlane") / "data" / "knowledge"))


def _is_work(text: str) -> bool:
    starts = ("To ", "Checklist", "The ", "A ", "Support ", "Legal ")
    return text.startswith(starts)


def demo_items() -> list[dict[str, Any]]:
    """The sample memories with their scope: people to the assistant, work to the ops bot.

    Users alternate, so each agent holds memories about both users.
    """
    items = []
    for i, text in enumerate(demo_texts()):
        items.append(
            {
                "text": text,
                "agent_id": AGENTS[1] if _is_work(text) else AGENTS[0],
                "user_id": USERS[i % 2],
                "type": "procedure" if text.startswith(("To ", "Checklist")) else "semantic",
            }
        )
    return items


@contextmanager
def _store(keep: str | None) -> Iterator[Path]:
    if keep is not None:
        folder = Path(keep)
        # Its own new store only: the demo's 200 memories are nobody's data to add to.
        if os.path.lexists(folder) and (not folder.is_dir() or any(folder.iterdir())):
            raise InvalidArgumentError(f"--keep {printable(keep)}: give a new or empty folder")
        yield folder
        return
    with tempfile.TemporaryDirectory(prefix="memlane-demo-") as tmp:
        yield Path(tmp) / "store"


def _scope(hit: SearchHit) -> str:
    r = hit.record
    who = " ".join(f"{k.removesuffix('_id')}={v}" for k, v in r.scope.items())
    return f"[{r.table}{' ' + who if who else ''}]"


def _print_hits(hits: list[SearchHit]) -> None:
    for hit in hits:
        text = " ".join(hit.record.text.split())
        if len(text) > 90:
            text = text[:87].rstrip() + "..."
        print(printable(f"  {hit.score:.3f}  {_scope(hit)} {text}"))


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms"


def run(k: int = 3, keep: str | None = None) -> None:
    """Runs the demo, printing as it goes; ``keep`` builds the store there and leaves it."""
    with _store(keep) as path:
        t0 = time.perf_counter()
        mem = Memory(path)
        try:
            _run(mem, path, k, t0)
        finally:
            mem.close()
        if keep is not None:
            print()
            print(printable(f"the store is in {path}; try: memlane search {path} 'dark mode'"))


def _demo_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--k", type=at_least(1), default=3, help="results per search (default 3)")
    p.add_argument("--keep", metavar="DIR", help="build the store in DIR and keep it")


@command(
    "demo",
    "a store in a temporary folder: knowledge, agents' memories, searches, timings",
    arguments=_demo_arguments,
)
def demo(args: argparse.Namespace) -> int:
    run(k=args.k, keep=args.keep)
    return 0


def _run(mem: Memory, path: Path, k: int, t0: float) -> None:
    print(f"store: {path} (opened in {_ms(time.perf_counter() - t0)})\n")

    t0 = time.perf_counter()
    report = mem.ingest(knowledge_dir(), shared=True, progress=False)
    print("1. shared knowledge: the package's own docs")
    print(f"   {report.summary()}")
    print(f"   (model load included: {_ms(time.perf_counter() - t0)})\n")

    items = demo_items()
    t0 = time.perf_counter()
    mem.add_many(items)
    seconds = time.perf_counter() - t0
    print(f"2. memories: {len(items)} added in {_ms(seconds)} ({len(items) / seconds:.0f}/s)")
    for agent in AGENTS:
        counts = ", ".join(f"{user} {mem.count(agent_id=agent, user_id=user)}" for user in USERS)
        print(f"   {agent}: {counts}")
    print()

    print(f"3. hybrid search over every memory (k={k})")
    for question in QUESTIONS:
        t0 = time.perf_counter()
        hits = mem.search(question, k, table="memories")
        print(f"? {question}  ({_ms(time.perf_counter() - t0)})")
        _print_hits(hits)
    print()

    question = "Which pets do people have?"
    print(f"4. scoped recall: the same question, agent={AGENTS[0]}, one user at a time")
    for user in USERS:
        t0 = time.perf_counter()
        hits = mem.search(question, k, agent_id=AGENTS[0], user_id=user)
        print(f"? {question}  [user={user}]  ({_ms(time.perf_counter() - t0)})")
        _print_hits(hits)
    print()

    question = "How does hybrid search combine BM25 and vectors?"
    print(f"5. knowledge search for agent={AGENTS[1]} (shared documents and its own)")
    t0 = time.perf_counter()
    hits = mem.search_knowledge(question, agent_id=AGENTS[1], k=k, explain=True)
    print(f"? {question}  ({_ms(time.perf_counter() - t0)})")
    _print_hits(hits)
    print()

    hits = mem.search(QUESTIONS[2], 1, table="memories", explain=True)
    if hits and hits[0].explain is not None:
        print(printable(f"6. why '{hits[0].record.text}' came first for '{QUESTIONS[2]}':"))
        for name, value in hits[0].explain.items():
            shown = "not retrieved" if value is None else f"{value:.4g}"
            print(f"   {name:<12} {shown}")
        print()

    timings = []
    for _ in range(200):
        t0 = time.perf_counter()
        mem.search(QUESTIONS[0], k, track_access=False)
        timings.append(time.perf_counter() - t0)
    timings.sort()
    print(
        f"7. a repeated question over {len(mem)} records (k={k}, from Python; its embedding "
        f"and retrieval are reused, the scoring runs): median "
        f"{statistics.median(timings) * 1e6:.0f} us, "
        f"p99 {timings[int(len(timings) * 0.99)] * 1e6:.0f} us"
    )
