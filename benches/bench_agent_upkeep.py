"""What a turn of ``AgentMemory`` costs when upkeep runs on the background worker, against
the inline upkeep, with an LLM that takes seconds (issue 34's benchmark).

Each LLM latency (``--llm-latency``, default 2 s and 0.5 s) gets a run of ``--turns``
turns (default 200) through two ``AgentMemory`` objects, ``upkeep="background"`` and
``upkeep="inline"``, each on its own on-disk store in a temporary folder opened as
``memlane.Memory(path)`` (the default embedder, the real ONNX MiniLM), with default
settings but ``Reflection(every=10)`` (which is the default too) and the stub LLM. A
turn is ``before(event, [system, user])`` then ``after(event, messages, reply)``, both
timed; the texts are the user and assistant turns of one user of the seeded dated
conversations (``_conversations.py``), the same for both modes. The two modes and the
embedder alone take turns, turn by turn (their order rotating), so the shared cores'
noise falls on all of them alike.

- The stub LLM sleeps its latency at every call, then answers as a model would:
  reflection remembers the last two user lines of its window, consolidation returns a
  summary with one fact, the check of new facts keeps each, the daily log and step
  summaries get a sentence. Reflection fires every 10th turn; consolidation (12
  short-term entries) and the check of the facts they store also call it, so the inline
  turns that wait for it are the triggering turns and a few more.
- The embedder alone: the default embedder (its own instance, no cache) on the texts the
  store embeds in that turn, each alone by the path the store takes: ``before()`` embeds
  the user's text (its search; ``after()`` then finds it in the store's cache);
  ``after()`` embeds the reply and the turn's short-term entry (``user: ...`` /
  ``assistant: ...``, one ``embed_batch`` of one text each). The goal is ``after()``
  p99 <= that embedder time + 10 ms, whatever the LLM's latency.
- Trigger to done: from the return of the ``after()`` that triggered a reflection to
  the ``on_upkeep`` callback of that job, with the worker free (the benchmark waits,
  untimed, for the worker's earlier jobs before each triggering turn, and reports how
  long). The goal: within one LLM latency of the trigger, so the figure is shown with
  the latency beside it and less it. Inline upkeep is done when ``after()`` returns.

Results are checked, untimed: every turn stored, one reflection per window with the facts
stored, no upkeep failure, no job left at the end.

    python benches/bench_agent_upkeep.py [--turns 200] [--llm-latency 2,0.5] [--json]

About 6 minutes on 2 busy cores at the defaults. Each mode calls the LLM 71 times per
latency: 20 reflections, 16 consolidations (12 entries each) and 35 checks of the facts
they stored (counted at 0.05 s); before consolidation took OrcBot's batches of 12 and facts
were checked, 29 (the inline runs then waited about 60 s and 15 s for them).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import threading
import time
import warnings
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import memlane
from _conversations import generate
from _timing import percentiles
from memlane import AgentMemory
from memlane.agent import MESSAGES, Reflection, UpkeepResult
from memlane.embeddings import TextTruncatedWarning
from memlane.embeddings.lazy import default_embedder

EVERY = 10
MODES = ("background", "inline")
SYSTEM = "You are a helpful assistant. Keep answers short."
#: How long the benchmark waits for the worker at the end of a run, in LLM latencies,
#: and at least DRAIN_SECONDS: a bound for a hang, not a timing (a drain returns once the
#: worker is done), which the short stub of the test run would put within a busy
#: machine's reach.
DRAIN_LATENCIES = 200
DRAIN_SECONDS = 120.0


# -- the stub LLM -----------------------------------------------------------------------------


class SleepyLLM:
    """An LLM that takes ``latency`` seconds per call (``time.sleep``) and answers each of
    the agent's prompts in the form it asks for; counts its calls by kind."""

    def __init__(self, latency: float) -> None:
        self.latency = latency
        self.calls: Counter[str] = Counter()
        self._lock = threading.Lock()

    def complete(self, messages: Sequence[Any]) -> str:
        system = str(messages[0].get("content", "")) if messages else ""
        last = str(messages[-1].get("content", "")) if messages else ""
        kind = (
            "reflection"
            if "long-term memory about a user" in system
            else "consolidation"
            if "consolidate an AI agent's short-term memory" in system
            else "daily"
            if "daily log" in system
            else "facts"
            if "keep an AI agent's memory consistent" in system
            else "other"
        )
        with self._lock:
            self.calls[kind] += 1
        time.sleep(self.latency)
        if kind == "reflection":
            said = re.findall(r"^user: (.+)$", last.split("Conversation:", 1)[-1], re.M)
            ops = [
                {"op": "remember", "content": f"The user said: {s}", "importance": 0.5}
                for s in said[-2:]
            ]
            return json.dumps({"operations": ops})
        if kind == "facts":
            return json.dumps({"decisions": []})  # every new fact kept
        if kind == "consolidation":
            entries = re.findall(r"^\[[^\]]+\] (.+)$", last, re.M)
            fact = entries[0] if entries else "The user talked about their week."
            return json.dumps(
                {
                    "summary": f"{len(entries)} exchanges about work, plans and home.",
                    "facts": [fact[:200]],
                    "pending": [],
                    "tone": "friendly",
                    "preferences": [],
                    "confidence": 0.6,
                }
            )
        return "The user talked about work, plans and home; nothing remains open."


# -- one agent --------------------------------------------------------------------------------


@dataclass
class Agent:
    """One ``AgentMemory`` on its own store, and what its turns measured."""

    mode: str
    latency: float
    path: Path
    llm: SleepyLLM = field(init=False)
    mem: memlane.Memory = field(init=False)
    am: AgentMemory = field(init=False)
    before_s: list[float] = field(default_factory=list)
    after_s: list[float] = field(default_factory=list)
    triggering: list[bool] = field(default_factory=list)
    worker_busy: list[bool] = field(default_factory=list)
    #: Per triggering turn: wall clock before and after ``after()``, perf_counter at its end.
    triggers: list[tuple[float, float, float]] = field(default_factory=list)
    waited_s: list[float] = field(default_factory=list)
    done: list[tuple[float, UpkeepResult]] = field(default_factory=list)
    inline_reflections: list[int] = field(default_factory=list)  # facts added, per reflection
    failures: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.llm = SleepyLLM(self.latency)
        self.mem = memlane.Memory(str(self.path))
        self.am = AgentMemory(
            self.mem,
            llm=self.llm,
            reflection=Reflection(every=EVERY),
            upkeep="background" if self.mode == "background" else "inline",
            on_upkeep=self._on_upkeep,
        )
        self.event = self.am.event("telegram", 42, 7, name="Alice")
        embedder = self.mem.embedder
        assert embedder is not None
        embedder.embed("warm-up: the model loads here, outside the timings")

    def _on_upkeep(self, result: UpkeepResult) -> None:
        self.done.append((time.perf_counter(), result))

    def turn(self, index: int, user: str, reply: str) -> None:
        trigger = (index + 1) % EVERY == 0
        if trigger and self.mode == "background":
            t = time.perf_counter()  # a free worker at the trigger, as the goal says
            if not self.am.drain(timeout=self.patience()):
                raise RuntimeError(f"the upkeep worker did not finish: {self.am.pending_upkeep()}")
            self.waited_s.append(time.perf_counter() - t)
        busy = bool(self.am.pending_upkeep())
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]
        t0 = time.perf_counter()
        msgs = self.am.before(self.event, messages)
        t1 = time.perf_counter()
        w0 = time.time()
        report = self.am.after(self.event, msgs, reply)
        t2 = time.perf_counter()
        w1 = time.time()
        self.before_s.append(t1 - t0)
        self.after_s.append(t2 - t1)
        self.triggering.append(trigger)
        self.worker_busy.append(busy)
        if trigger:
            self.triggers.append((w0, w1, t2))
        if report.reflection is not None:
            self.inline_reflections.append(len(report.reflection.added))
        self.failures += [f"{f.trigger}: {f.error}" for f in report.failures]

    def patience(self) -> float:
        """How long to wait for the worker (see DRAIN_LATENCIES)."""
        return max(self.latency * DRAIN_LATENCIES, DRAIN_SECONDS)

    def finish(self) -> dict[str, Any]:
        """Waits for the worker, checks what was stored, closes; returns the results."""
        drained = self.am.drain(timeout=self.patience())
        left = self.am.close(timeout=self.patience())
        stored = self.mem.count(MESSAGES, **self.event.history)
        facts = self.mem.count("memories", **self.event.fields)
        jobs_left = len(self.mem.jobs.items())
        self.mem.close()
        self.failures += [
            f"{f.trigger}: {f.error}" for _, r in self.done for f in r.report.failures
        ]
        reflections = [r for _, r in self.done if r.kind == "reflection"]
        delays = []
        for w0, w1, end in self.triggers:
            for at, r in self.done:
                if r.kind == "reflection" and w0 <= r.asked_at <= w1:
                    delays.append(at - end)
        return {
            "mode": self.mode,
            "before_ms": percentile_pair(self.before_s),
            "after_ms": percentile_pair(self.after_s),
            "after_triggering_ms": percentile_pair(
                [s for s, t in zip(self.after_s, self.triggering, strict=True) if t]
            ),
            "after_other_ms": percentile_pair(
                [s for s, t in zip(self.after_s, self.triggering, strict=True) if not t]
            ),
            "after_worker_busy_ms": percentile_pair(
                [s for s, b in zip(self.after_s, self.worker_busy, strict=True) if b]
            ),
            "turns_worker_busy": sum(self.worker_busy),
            "after_s": self.after_s,
            "before_s": self.before_s,
            "trigger_to_done_s": delays,
            "waited_for_worker_s": self.waited_s,
            "llm_calls": dict(self.llm.calls),
            "upkeep_jobs": dict(Counter(r.kind for _, r in self.done)),
            "reflections": len(reflections) + len(self.inline_reflections),
            "reflection_facts": [
                len(r.report.reflection.added) for r in reflections if r.report.reflection
            ]
            + self.inline_reflections,
            "messages_stored": stored,
            "memories": facts,
            "drained": drained,
            "jobs_left": [j.kind for j in left] + (["(in store)"] * jobs_left),
            "failures": self.failures,
        }


def percentile_pair(samples: Sequence[float]) -> dict[str, float] | None:
    if not samples:
        return None
    p50, p99 = percentiles(list(samples))
    return {"p50": p50, "p99": p99, "max": max(samples) * 1e3, "n": len(samples)}


# -- a run ------------------------------------------------------------------------------------


def conversation(turns: int) -> list[tuple[str, str]]:
    """``turns`` (user, assistant) pairs of distinct texts, in the order they were said."""
    users = 1
    while True:
        data = generate(seed=0, users=users, sessions=30)
        pairs = [
            (a.text, b.text)
            for a, b in zip(data.turns, data.turns[1:], strict=False)
            if a.role == "user" and b.role == "assistant" and a.session == b.session
        ]
        distinct = list(dict.fromkeys(pairs))
        if len(distinct) >= turns:
            return distinct[:turns]
        users *= 2


def short_term_text(user: str, reply: str) -> str:
    """The short-term entry ``after()`` stores for a turn (as ``AgentMemory`` writes it)."""
    return "\n".join(
        f"{who}: {' '.join(t.split())}" for who, t in (("user", user), ("assistant", reply)) if t
    )


def run(latency: float, turns: int, root: Path, progress: bool = True) -> dict[str, Any]:
    pairs = conversation(turns)
    agents = {m: Agent(m, latency, root / f"{m}-{latency:g}s") for m in MODES}
    alone = default_embedder()
    alone.embed("warm-up: the model loads here, outside the timings")
    embed_before: list[float] = []
    embed_after: list[float] = []
    embed_calls: list[float] = []

    def embedder_alone(user: str, reply: str) -> None:
        t0 = time.perf_counter()
        alone.embed(user)
        t1 = time.perf_counter()
        alone.embed_batch([reply])
        t2 = time.perf_counter()
        alone.embed_batch([short_term_text(user, reply)])
        t3 = time.perf_counter()
        embed_before.append(t1 - t0)
        embed_after.append(t3 - t1)
        embed_calls.extend([t2 - t1, t3 - t2])

    steps = [*MODES, "embedder"]
    started = time.perf_counter()
    for i, (user, reply) in enumerate(pairs):
        shift = i % len(steps)
        for step in steps[shift:] + steps[:shift]:
            if step == "embedder":
                embedder_alone(user, reply)
            else:
                agents[step].turn(i, user, reply)
        if progress and (i + 1) % 50 == 0:
            took = time.perf_counter() - started
            print(f"  llm {latency:g} s: {i + 1}/{turns} turns, {took:.0f} s", file=sys.stderr)
    modes = {m: a.finish() for m, a in agents.items()}
    for m in MODES:
        after = np.asarray(modes[m]["after_s"])
        modes[m]["after_minus_embed_ms"] = percentile_pair(list(after - np.asarray(embed_after)))
    return {
        "llm_latency_s": latency,
        "turns": turns,
        "modes": modes,
        "embed_before_ms": percentile_pair(embed_before),
        "embed_after_ms": percentile_pair(embed_after),
        "embed_call_ms": percentile_pair(embed_calls),
        "seconds": time.perf_counter() - started,
    }


# -- report -----------------------------------------------------------------------------------


def _ms(p: dict[str, float] | None, key: str) -> str:
    return "-" if p is None else f"{p[key]:.1f}"


def _ratio(a: dict[str, float] | None, b: dict[str, float] | None, key: str) -> str:
    return "-" if a is None or b is None or b[key] == 0 else f"{a[key] / b[key]:.1f}x"


def print_tables(runs: list[dict[str, Any]]) -> None:
    print("\nturn latency, ms (background: upkeep on the worker; inline: upkeep in after())")
    print(
        "| LLM | call | background p50 | background p99 | inline p50 | inline p99 "
        "| inline/background p50 | inline/background p99 |"
    )
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in runs:
        bg, il = r["modes"]["background"], r["modes"]["inline"]
        lat = f"{r['llm_latency_s']:g} s"
        n = bg["after_triggering_ms"]["n"] if bg["after_triggering_ms"] else 0
        for label, key in (
            ("before()", "before_ms"),
            ("after()", "after_ms"),
            (f"after(), the {n} reflection turns", "after_triggering_ms"),
            ("after(), the other turns", "after_other_ms"),
            ("after() - embedder, per turn", "after_minus_embed_ms"),
        ):
            a, b = bg[key], il[key]
            print(
                f"| {lat} | {label} | {_ms(a, 'p50')} | {_ms(a, 'p99')} | {_ms(b, 'p50')} "
                f"| {_ms(b, 'p99')} | {_ratio(b, a, 'p50')} | {_ratio(b, a, 'p99')} |"
            )
        for label, key in (
            ("embedder alone, before()'s text", "embed_before_ms"),
            ("embedder alone, after()'s 2 texts", "embed_after_ms"),
        ):
            p = r[key]
            print(f"| {lat} | {label} | {_ms(p, 'p50')} | {_ms(p, 'p99')} | | | | |")

    print("\ngoal: background after() p99 <= embedder (after()'s texts) p99 + 10 ms")
    print(
        "| LLM | after() p99 | embedder p99 + 10 | met | after() - embedder p50 / p99 "
        "| turns with the worker busy | their after() p99 |"
    )
    print("| ---: | ---: | ---: | --- | ---: | ---: | ---: |")
    for r in runs:
        bg = r["modes"]["background"]
        p99, goal = bg["after_ms"]["p99"], r["embed_after_ms"]["p99"] + 10
        less, met = bg["after_minus_embed_ms"], "yes" if p99 <= goal else "no"
        print(
            f"| {r['llm_latency_s']:g} s | {p99:.1f} | {goal:.1f} | {met} "
            f"| {less['p50']:.1f} / {less['p99']:.1f} | {bg['turns_worker_busy']} "
            f"| {_ms(bg['after_worker_busy_ms'], 'p99')} |"
        )

    print("\nreflection, trigger to done (background: after() returned -> on_upkeep), s")
    print(
        "| LLM | reflections | p50 | max | p50 - LLM | max - LLM | waited for a free worker, "
        "max | inline: the triggering after(), p50 |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in runs:
        bg, il, lat = r["modes"]["background"], r["modes"]["inline"], r["llm_latency_s"]
        d = bg["trigger_to_done_s"]
        waited = max(bg["waited_for_worker_s"], default=0.0)
        trig = il["after_triggering_ms"]
        inline = "-" if trig is None else f"{trig['p50'] / 1e3:.2f}"
        if not d:
            print(f"| {lat:g} s | 0 | - | - | - | - | {waited:.2f} | {inline} |")
            continue
        med, top = statistics.median(d), max(d)
        print(
            f"| {lat:g} s | {len(d)} | {med:.2f} | {top:.2f} | {med - lat:.2f} | {top - lat:.2f} "
            f"| {waited:.2f} | {inline} |"
        )

    print("\nchecks")
    for r in runs:
        for m in MODES:
            x = r["modes"][m]
            print(
                f"- LLM {r['llm_latency_s']:g} s, {m}: {x['messages_stored']} messages stored "
                f"of {2 * r['turns']}; {x['reflections']} reflections storing "
                f"{sum(x['reflection_facts'])} facts; LLM calls {x['llm_calls']}; upkeep jobs "
                f"{x['upkeep_jobs'] or '-'}; failures {len(x['failures'])}; "
                f"left {x['jobs_left'] or 'none'}"
            )


def check(runs: list[dict[str, Any]]) -> list[str]:
    """What is wrong with the results (untimed): an empty list when all is well."""
    problems = []
    for r in runs:
        windows = r["turns"] // EVERY
        for m in MODES:
            x = r["modes"][m]
            where = f"LLM {r['llm_latency_s']:g} s, {m}"
            if x["messages_stored"] != 2 * r["turns"]:
                problems.append(f"{where}: {x['messages_stored']} messages of {2 * r['turns']}")
            if x["reflections"] != windows or not all(x["reflection_facts"]):
                problems.append(f"{where}: reflections {x['reflection_facts']} of {windows}")
            if x["failures"] or x["jobs_left"] or not x["drained"]:
                problems.append(f"{where}: failures {x['failures']}, left {x['jobs_left']}")
        if len(r["modes"]["background"]["trigger_to_done_s"]) != windows:
            problems.append(f"LLM {r['llm_latency_s']:g} s: a reflection's result went missing")
    return problems


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=200, help="turns per mode and latency")
    parser.add_argument(
        "--llm-latency",
        default="2,0.5",
        help="the stub LLM's seconds per call, comma-separated (one run each)",
    )
    parser.add_argument("--json", action="store_true", help="also print the results as JSON")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    args = parser.parse_args(argv)
    latencies = [float(s) for s in args.llm_latency.split(",") if s.strip()]
    if args.turns < EVERY or not latencies or min(latencies) < 0:
        parser.error(f"--turns must be >= {EVERY} and latencies >= 0")
    runs = []
    with tempfile.TemporaryDirectory(prefix="memlane-upkeep-") as root, warnings.catch_warnings():
        # Reflection searches with its window's text, longer than the model's 256 tokens.
        warnings.simplefilter("ignore", TextTruncatedWarning)
        for latency in latencies:
            runs.append(run(latency, args.turns, Path(root), progress=not args.quiet))
    print_tables(runs)
    problems = check(runs)
    for p in problems:
        print(f"PROBLEM: {p}")
    if args.json:
        slim = [
            {
                **r,
                "modes": {
                    m: {k: v for k, v in x.items() if k not in ("after_s", "before_s")}
                    for m, x in r["modes"].items()
                },
            }
            for r in runs
        ]
        print(json.dumps(slim, indent=1))
    return runs


if __name__ == "__main__":
    sys.exit(1 if check(main()) else 0)
