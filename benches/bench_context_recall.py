"""Recall of the right turn in ``build_context``'s text, on the dated conversation set.

The data is ``benches/_conversations.py`` (seed 0: 20 users x 30 sessions over nine
months, about 15,000 turns, 200 questions asked now). Every turn is stored as a memory
in its user's room (``add_many`` through ``bench_conversations.fill``, default
embedder, as ``Memory(path)`` opens it), and each user's last 20 turns are also the
room's recent history (``messages`` table). Each question is answered with
``build_context(mem, question, {"room_id": user}, max_tokens)`` and its defaults
otherwise (no knowledge was ingested, so that section is empty). Reported per budget:
the share of questions whose evidence turn (for a changed fact, the turn stating the
change) is in the context's text in full, the share with no memory injected at all,
and the median tokens the text takes. Run it before and after a change to the
defaults (floor, shares, knowledge limit) to compare.

    python benches/bench_context_recall.py [--budgets 2000 1000 500]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from _conversations import generate
from bench_conversations import fill
from memlane import Memory
from memlane.agent.context import build_context
from memlane.agent.history import MESSAGES

HISTORY = 20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--budgets", type=int, nargs="+", default=[2000, 1000, 500])
    args = parser.parse_args()
    data = generate(seed=args.seed)
    root = Path(tempfile.mkdtemp(prefix="memlane-bench-context-"))
    try:
        mem = Memory(root / "memlane")
        fill(mem, data, lambda m: print(f"\r{m}", end="", file=sys.stderr, flush=True))
        print(file=sys.stderr)
        by_user: dict[str, list[Any]] = {}
        for turn in data.turns:
            by_user.setdefault(turn.user, []).append(turn)
        mem.add_many(
            {
                "text": t.text,
                "table": MESSAGES,
                "type": "message",
                "room_id": user,
                "created_at": t.at,
                "metadata": {"role": t.role},
            }
            for user, turns in by_user.items()
            for t in turns[-HISTORY:]
        )
        text_of = {t.id: " ".join(t.text.split()) for t in data.turns}
        print("| max_tokens | evidence in the text | no memory injected | tokens, median |")
        print("| ---: | ---: | ---: | ---: |")
        for budget in args.budgets:
            found = empty = 0
            used = []
            for q in data.questions:
                ctx = build_context(mem, q.text, {"room_id": q.user}, budget, track_access=False)
                found += any(text_of[e] in ctx.text for e in q.evidence)
                empty += not ctx.records["memories"]
                used.append(ctx.total_tokens)
            n = len(data.questions)
            print(
                f"| {budget} | {found / n:.3f} | {empty / n:.3f} | {statistics.median(used):.0f} |"
            )
        mem.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
