"""Recall of months-old facts in long dated conversations, under memlane's search settings.

The data (``benches/_conversations.py``) is a seeded synthetic set shaped like
LongMemEval / LoCoMo: by default 20 users x 30 sessions over the nine months before
today (the last a day or more ago), about 15,000 ``user`` / ``assistant`` turns, mostly
chit-chat in which the users' own people, places and things recur. Early sessions
state personal facts ("My sister Ana lives in Porto."); some change later ("Ana moved
to Lisbon last week."). 200 paraphrased questions ("Which city is my sister based in
these days?") are asked *now*, each with the id of the turn that answers it: for a
changed fact, the turn stating the change. The turns are a function of ``--seed``;
their dates move with the day of the run, so the figures repeat from day to day.

Every turn is stored with ``Memory.add_many`` (default embedder, ``type="episodic"``,
``room_id`` = the user, ``created_at`` = when it was said), then each question is
searched with ``mem.search(question, k=10, room_id=user)`` under:

- (a) the ``Memory.search`` defaults;
- (b) relevance only, ``weights={"relevance": 1}``, RRF fusion (``fusion="rrf"``
  given, as the default fusion may change);
- (c) relevance only with ``fusion="weighted", alpha=0.5``;
- (d) text mode (BM25) relevance only;
- (e) ``decay=0.001`` given explicitly (the rest default), so the figure stays
  comparable if the default changes;
- (f) for reference, relevance only with ``decay=0``: retrieval alone, age ignored
  (the same as (b) since ages became a bounded boost; kept to compare with older runs).

Reported per setting: recall@10 of the evidence turn over all questions, over facts
that never changed and over changed facts (the *new* turn in the top 10); how often
the new turn ranks above the old one (the old turn absent counts as below); how often
the stale turn is in the top 10; and the median age of the top hit.

Searches pass ``track_access=False``: with access tracking on, a search would make
what it returns the newest candidates, and the settings run later would see a
different store. Caveat: this set is ours (templates written alongside memlane), not a held-out
benchmark; treat it as a regression check for dated recall, not as a claim against
LongMemEval or LoCoMo.

    python benches/bench_conversations.py [--seed 0] [--users 20] [--sessions 30] [--json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _conversations import Dataset, Question, generate
from memlane import Memory

K = 10

SETTINGS: list[tuple[str, dict[str, Any]]] = [
    ("(a) defaults", {}),
    ("(b) relevance only, RRF", {"weights": {"relevance": 1.0}, "fusion": "rrf"}),
    (
        "(c) relevance only, weighted alpha=0.5",
        {"weights": {"relevance": 1.0}, "fusion": "weighted", "alpha": 0.5},
    ),
    ("(d) text (BM25), relevance only", {"mode": "text", "weights": {"relevance": 1.0}}),
    ("(e) decay=0.001", {"decay": 0.001}),
    # Not in the list above: retrieval alone, age ignored (what decay costs).
    (
        "(f) relevance only, RRF, decay=0",
        {"weights": {"relevance": 1.0}, "fusion": "rrf", "decay": 0.0},
    ),
]


def fill(mem: Memory, data: Dataset, progress: Callable[[str], None]) -> float:
    """Stores every turn, one add_many per session; returns the seconds taken."""
    started = time.perf_counter()
    batch: list[dict[str, Any]] = []
    sessions = 0
    for i, turn in enumerate(data.turns):
        batch.append(
            {
                "id": turn.id,
                "text": turn.text,
                "type": "episodic",
                "agent_id": "assistant",
                "room_id": turn.user,
                "session_id": turn.session,
                "created_at": turn.at,
                "metadata": {"role": turn.role},
            }
        )
        last = i + 1 == len(data.turns)
        if last or data.turns[i + 1].session != turn.session:
            mem.add_many(batch)
            batch = []
            sessions += 1
            if sessions % 50 == 0 or last:
                rate = (i + 1) / (time.perf_counter() - started)
                progress(f"stored {i + 1}/{len(data.turns)} turns ({rate:.0f}/s)")
    mem.wait_indexed()
    return time.perf_counter() - started


def evaluate(mem: Memory, questions: list[Question], options: dict[str, Any]) -> dict[str, Any]:
    hit_all: list[bool] = []
    hit_stable: list[bool] = []
    hit_changed: list[bool] = []
    new_above_old: list[bool] = []
    stale_in_top: list[bool] = []
    top_age_days: list[float] = []
    latencies: list[float] = []
    for q in questions:
        t = time.perf_counter()
        hits = mem.search(q.text, k=K, room_id=q.user, track_access=False, **options)
        latencies.append(time.perf_counter() - t)
        ranked = [h.record.id for h in hits]
        rank = {rid: i for i, rid in enumerate(ranked)}
        found = any(e in rank for e in q.evidence)
        hit_all.append(found)
        if hits:
            top_age_days.append((time.time() - hits[0].record.created_at) / 86400)
        if q.changed:
            hit_changed.append(found)
            new = min((rank[e] for e in q.evidence if e in rank), default=K)
            old = min((rank[e] for e in q.superseded if e in rank), default=K)
            new_above_old.append(new < old)
            stale_in_top.append(old < K)
        else:
            hit_stable.append(found)

    def rate(xs: list[bool]) -> float:
        return sum(xs) / len(xs) if xs else float("nan")

    return {
        "recall@10": rate(hit_all),
        "recall@10 stable": rate(hit_stable),
        "recall@10 changed (new turn)": rate(hit_changed),
        "new above old": rate(new_above_old),
        "old in top 10": rate(stale_in_top),
        "top hit age, median days": statistics.median(top_age_days) if top_age_days else None,
        "ms/query, median": statistics.median(latencies) * 1e3,
        "hits": sum(hit_all),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--sessions", type=int, default=30, help="sessions per user")
    parser.add_argument("--days", type=int, default=270, help="days the sessions span")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()

    def progress(message: str) -> None:
        print(f"\r{message}", end="", file=sys.stderr, flush=True)

    started = time.perf_counter()
    data = generate(seed=args.seed, users=args.users, sessions=args.sessions, days=args.days)
    questions = data.questions
    changed = sum(q.changed for q in questions)
    first = min(t.at for t in data.turns)
    last = max(t.at for t in data.turns)
    ages = [(data.end - q.stated_at).days for q in questions if q.stated_at is not None]

    root = Path(tempfile.mkdtemp(prefix="memlane-bench-conv-"))
    try:
        mem = Memory(root / "memlane")
        fill_s = fill(mem, data, progress)
        print(file=sys.stderr)
        for q in questions:  # embeds the questions once, so no setting pays for it
            mem.search(q.text, k=K, room_id=q.user, track_access=False)
        results: dict[str, dict[str, Any]] = {}
        for label, options in SETTINGS:
            results[label] = evaluate(mem, questions, options)
        mem.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    total_s = time.perf_counter() - started

    summary = {
        "seed": args.seed,
        "users": args.users,
        "sessions_per_user": args.sessions,
        "turns": len(data.turns),
        "questions": len(questions),
        "changed_facts": changed,
        "first_turn": first.isoformat(),
        "last_turn": last.isoformat(),
        "asked_at": data.end.isoformat(),
        "evidence_age_days_median": statistics.median(ages),
        "fill_seconds": round(fill_s, 1),
        "total_seconds": round(total_s, 1),
        "settings": {label: options for label, options in SETTINGS},
        "results": results,
    }
    if args.json:
        print(json.dumps(summary, indent=2))
        return

    print(
        f"\n{len(data.turns):,} turns ({args.users} users x {args.sessions} sessions, "
        f"{first:%Y-%m-%d} to {last:%Y-%m-%d}), {len(questions)} questions asked now "
        f"({changed} about changed facts), evidence median {statistics.median(ages):.0f} days "
        f"old; seed {args.seed}; stored in {fill_s:.0f} s, total {total_s:.0f} s"
    )
    cols = [
        "recall@10",
        "recall@10 stable",
        "recall@10 changed (new turn)",
        "new above old",
        "old in top 10",
    ]
    print(f"| setting | {' | '.join(cols)} | top hit age (days) | ms/query |")
    print("| --- |" + " ---: |" * (len(cols) + 2))
    for label, r in results.items():
        age = r["top hit age, median days"]
        cells = " | ".join(f"{r[c]:.3f}" for c in cols)
        age_cell = "-" if age is None else f"{age:.0f}"
        print(f"| {label} | {cells} | {age_cell} | {r['ms/query, median']:.1f} |")


if __name__ == "__main__":
    main()
