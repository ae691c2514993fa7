"""How the default fusion's per-query weight was chosen: a replay over every query's candidates.

For each query of a set (``bench_quality.py``'s sets), ``Memory.search`` is asked twice
with ``explain=True``, at alpha 0 and at alpha 1 with the default depth, which returns
the BM25 list and the vector list whole, each candidate with every signal the engine
fuses (BM25, its contextual BM25, whether the query names its speaker, cosine, its
neighbours' best cosine, the cosine of the question it answers, how much of its text
asks, ranks), the query's BM25 ceiling, and each record's importance and last access. The
engine's score is then replayed in numpy (the BM25 share with the session and speaker
passes, the cosine with its neighbours' and its question's, the fusion, the question
pass, the boost), checked against the engine's own ranking of the same query, and every
rule of the grid ranks the same candidates:

- ``fixed``: a fixed alpha (0.5 the default before);
- ``adaptive``: the default (``low`` 0.4, ``high`` 0.55, ``rank`` 30), ``alpha = low +
  (high - low) * sc / (sc + sb)``, ``sc`` and ``sb`` each list's best relevance minus the
  one at ``rank`` (the cosines, and the BM25 shares over the ceiling after the passes);
  ``--grid`` tries ``low``, ``high``, ``rank`` and a power on the spreads
  (``sc^p / (sc^p + sb^p)``);
- ``minmax``, ``z``, ``dbsf``: each list's scores normalised over the candidates
  (min-max; z-score; Qdrant's distribution-based ``(x - mu + 3 sd) / 6 sd``), fixed alpha;
- ``date``: on top of a fusion, a turn created in the window a date the question names
  ("on 3 June, 2023", "in July 2022") gets ``(relevance + w) / (1 + w)``: the window is
  that day (or month, or year) from two days before to seven after, since a session
  tells of what happened in the days before it.

Prints recall@5 / recall@10 / nDCG@10 per set and each rule's worst nDCG@10 difference
to the fixed 0.5 over the sets; LoCoMo's by category too. Pools are cached in
``benches/.cache/pools-SET-SPLIT.pkl`` (``--fresh`` collects them again).

    python benches/tune_fusion.py [--sets ...] [--split train] [--grid] [--fresh]
"""

from __future__ import annotations

import argparse
import calendar
import itertools
import math
import pickle
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from bench_quality import SETS, Bench, CachedModel, Metrics, Query, mean, metrics

CACHE = Path(__file__).resolve().parent / ".cache"
LN2 = math.log(2)
#: The engine's defaults the replay follows (rust/core/src/fusion.rs, scoring.rs).
CONTEXT_WEIGHT, ANSWER_WEIGHT, SPEAKER_WEIGHT, QUESTION_WEIGHT = 0.2, 0.4, 0.5, 0.08
IMPORTANCE_WEIGHT, RECENCY_WEIGHT, HALF_LIFE = 0.1, 0.02, 168.0

Rule = Callable[["Pool"], np.ndarray]


@dataclass
class Pool:
    """One query's candidates (both lists) as numpy columns."""

    q: Query
    ids: list[str]
    bm25: np.ndarray
    context: np.ndarray  # NaN where the turn has no session
    speaker: np.ndarray  # bool
    cos: np.ndarray
    cos_context: np.ndarray  # NaN where the turn has no session
    cos_asked: np.ndarray  # NaN where the turn answers no question before it
    question: np.ndarray  # how much of the text asks, in [0, 1]
    created: np.ndarray
    boost: np.ndarray
    ceiling: float
    text_found: bool
    engine: list[str]  # the engine's own default ranking

    def share(self) -> np.ndarray:
        """BM25 over the ceiling, with the session and speaker passes."""
        s = np.where(
            np.isnan(self.context),
            self.bm25,
            (1 - CONTEXT_WEIGHT) * self.bm25 + CONTEXT_WEIGHT * np.nan_to_num(self.context),
        )
        s = np.clip(s / self.ceiling, 0, 1) if self.ceiling > 0 else np.zeros_like(s)
        if self.speaker.any():
            s = (s + SPEAKER_WEIGHT * self.speaker) / (1 + SPEAKER_WEIGHT)
        return s

    def cosine(self) -> np.ndarray:
        """The cosine, with a nearer neighbour's lending it the context's share."""
        gap = np.nan_to_num(np.maximum(self.cos_context - self.cos, 0))
        asked = np.nan_to_num(np.maximum(self.cos_asked - self.cos, 0))
        return np.clip(self.cos + np.maximum(CONTEXT_WEIGHT * gap, ANSWER_WEIGHT * asked), 0, 1)


def collect(b: Bench) -> list[Pool]:
    turns = any(d.session or d.speaker for d in b.qs.docs)
    depth = 100 if turns else 50  # the engine's default depth (options.rs)
    pools = []
    for q in b.qs.queries:
        # The vector the default search embeds, also where the speaker pass is off here.
        v = b.query_vector(q)
        cands: dict[str, dict[str, Any]] = {}
        ceiling, ranked = 0.0, False
        for alpha in (0.0, 1.0):
            hits = b.search(
                q, k=depth, candidates=depth, alpha=alpha, explain=True,
                context_weight=0.0, speaker_weight=0.0, query_embedding=v,
            )  # fmt: skip
            for h in hits:
                e, c = h.explain, cands.setdefault(h.record.id, {"record": h.record})
                c.update({key: val for key, val in e.items() if val is not None})
                ranked |= e["bm25_rank"] is not None
                if alpha == 0.0 and 0 < e["relevance"] < 1 and e["bm25"]:
                    # The relevance before the question pass, which the replay applies.
                    kept = 1 - QUESTION_WEIGHT * (e["question"] or 0.0)
                    ceiling = e["bm25"] * kept / e["relevance"]
        ids = list(cands)

        def col(key: str, missing: float) -> np.ndarray:
            return np.array([float(cands[i].get(key, missing)) for i in ids])  # noqa: B023

        recs = [cands[i]["record"] for i in ids]
        accessed = np.array([r.last_accessed_at for r in recs])
        age = (accessed.max() - accessed) / 3600.0 if ids else accessed
        recency = np.where([r.evergreen for r in recs], 1.0, np.exp(-LN2 / HALF_LIFE * age))
        importance = np.array([r.importance for r in recs])
        boost = (1 + IMPORTANCE_WEIGHT * importance + RECENCY_WEIGHT * recency) / (
            1 + IMPORTANCE_WEIGHT + RECENCY_WEIGHT
        )
        engine = [h.record.id for h in b.search(q, alpha=0.5)]
        pools.append(
            Pool(
                q, ids, col("bm25", 0.0), col("bm25_context", math.nan),
                col("bm25_speaker", 0.0) > 0, col("cosine", 0.0),
                col("cosine_context", math.nan), col("cosine_asked", math.nan),
                col("question", 0.0),
                np.array([r.created_at for r in recs]),
                boost, ceiling, ranked, engine,
            )
        )  # fmt: skip
    return pools


def pools_of(name: str, split: str, model: CachedModel, fresh: bool) -> list[Pool]:
    path = CACHE / f"pools-v4-{name}-{split}.pkl"
    if path.exists() and not fresh:
        with path.open("rb") as f:
            return pickle.load(f)  # type: ignore[no-any-return]
    b = Bench(SETS[name](split), model)
    pools = collect(b)
    b.mem.close()
    CACHE.mkdir(exist_ok=True)
    with path.open("wb") as f:
        pickle.dump(pools, f)
    return pools


def ranked(p: Pool, relevance: np.ndarray, k: int) -> list[str]:
    s = relevance * (1 - QUESTION_WEIGHT * p.question) * p.boost
    order = np.lexsort((np.arange(len(s)), -s))
    return [p.ids[j] for j in order[:k]]


# -- rules ------------------------------------------------------------------------------


def fixed(alpha: float) -> Rule:
    def rule(p: Pool) -> np.ndarray:
        c = p.cosine()
        return alpha * c + (1 - alpha) * p.share() if p.text_found else c

    return rule


def spread(x: np.ndarray, rank: int) -> float:
    if len(x) == 0:
        return 0.0
    return float(x.max() - np.partition(x, len(x) - min(rank, len(x)))[len(x) - min(rank, len(x))])


def adaptive(low: float = 0.4, high: float = 0.55, rank: int = 30, power: float = 1.0) -> Rule:
    def rule(p: Pool) -> np.ndarray:
        c, b = p.cosine(), p.share()
        if not p.text_found:
            return c
        sc, sb = spread(c, rank) ** power, spread(b, rank) ** power
        alpha = low + (high - low) * (sc / (sc + sb) if sc + sb > 0 else 0.5)
        return alpha * c + (1 - alpha) * b

    return rule


def normalised(kind: str, alpha: float) -> Rule:
    def norm(x: np.ndarray) -> np.ndarray:
        lo, hi, mu, sd = x.min(), x.max(), x.mean(), x.std()
        if kind == "minmax":
            return (x - lo) / (hi - lo) if hi > lo else x * 0
        if kind == "z":
            return (x - mu) / sd if sd > 0 else x * 0
        return np.clip((x - mu + 3 * sd) / (6 * sd), 0, 1) if sd > 0 else x * 0  # dbsf

    def rule(p: Pool) -> np.ndarray:
        c = p.cosine()
        return alpha * norm(c) + (1 - alpha) * norm(p.share()) if p.text_found else c

    return rule


_MONTHS = {m.lower(): i for i, m in enumerate(calendar.month_name) if m}
_M = "|".join(_MONTHS)
_DAY_MONTH_YEAR = re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+({_M}),?\s*(\d{{4}})", re.I)
_MONTH_DAY_YEAR = re.compile(rf"\b({_M})\s+(\d{{1,2}})(?:st|nd|rd|th)?,?\s*(\d{{4}})", re.I)
_MONTH_YEAR = re.compile(rf"\b({_M}),?\s+(\d{{4}})", re.I)
_YEAR = re.compile(r"\b(19\d\d|20\d\d)\b")
DAY = 86400.0


def named_window(text: str, before: float = 2, after: float = 7) -> tuple[float, float] | None:
    """The times a date the text names covers, widened by ``before`` and ``after`` days."""

    def at(y: int, m: int, d: int = 1) -> float:
        return datetime(y, m, d, tzinfo=UTC).timestamp()

    if m := _DAY_MONTH_YEAR.search(text):
        start = at(int(m[3]), _MONTHS[m[2].lower()], int(m[1]))
        return start - before * DAY, start + (1 + after) * DAY
    if m := _MONTH_DAY_YEAR.search(text):
        start = at(int(m[3]), _MONTHS[m[1].lower()], int(m[2]))
        return start - before * DAY, start + (1 + after) * DAY
    if m := _MONTH_YEAR.search(text):
        y, mo = int(m[2]), _MONTHS[m[1].lower()]
        return at(y, mo) - before * DAY, at(y + mo // 12, mo % 12 + 1) + after * DAY
    if m := _YEAR.search(text):
        y = int(m[1])
        return at(y, 1), at(y + 1, 1) + after * DAY
    return None


def dated(base: Rule, weight: float) -> Rule:
    def rule(p: Pool) -> np.ndarray:
        rel = base(p)
        window = named_window(p.q.text)
        if window is None:
            return rel
        inside = (p.created >= window[0]) & (p.created < window[1])
        return (rel + weight * inside) / (1 + weight)

    return rule


# -- reports ----------------------------------------------------------------------------


def run(pools: list[Pool], rule: Rule, k: int) -> list[Metrics]:
    return [metrics(ranked(p, rule(p), k), p.q.gains) for p in pools]


def report(sets: dict[str, tuple[list[Pool], int]], rules: list[tuple[str, Rule]]) -> None:
    base = {n: mean(run(p, fixed(0.5), k)) for n, (p, k) in sets.items()}
    print("\n| rule | " + " | ".join(sets) + " | worst nDCG@10 vs fixed 0.5 |")
    print("|---|" + "---|" * len(sets) + "---:|")
    for label, rule in rules:
        cells, worst = [], math.inf
        for n, (pools, k) in sets.items():
            m = mean(run(pools, rule, k))
            worst = min(worst, m[2] - base[n][2])
            cells.append(f"{m[0]:.3f}/{m[1]:.3f}/{m[2]:.3f}")
        print(f"| {label} | " + " | ".join(cells) + f" | {worst:+.3f} |", flush=True)


def by_category(pools: list[Pool], k: int, rules: list[tuple[str, Rule]]) -> None:
    cats = sorted({p.q.category for p in pools if p.q.category})
    if not cats:
        return
    print("\nrecall@5 / @10 / @20 by category")
    print(
        "| rule | "
        + " | ".join(f"{c} ({sum(p.q.category == c for p in pools)})" for c in cats)
        + " |"
    )
    print("|---|" + "---|" * len(cats))
    for label, rule in rules:
        rows = run(pools, rule, k)
        cells = []
        for c in cats:
            m = mean([r for r, p in zip(rows, pools, strict=True) if p.q.category == c])
            cells.append(f"{m[0]:.3f} / {m[1]:.3f} / {m[3]:.3f}")
        print(f"| {label} | " + " | ".join(cells) + " |", flush=True)


def grid(sets: dict[str, tuple[list[Pool], int]], top: int = 20) -> None:
    """Every adaptive setting; the safe ones (no set loses more than 0.005 nDCG@10 to
    the fixed 0.5), best first by their summed gain. Each query is ranked once at every
    alpha on a grid of 0.025 and a setting looks its queries' weights up there."""
    alphas = np.linspace(0, 1, 41)
    tables = {}
    for n, (pools, k) in sets.items():
        table = np.array(
            [[metrics(ranked(p, fixed(a)(p), k), p.q.gains)[2] for a in alphas] for p in pools]
        )
        spreads = [
            (p.cosine(), p.share(), p.text_found) for p in pools
        ]  # the lists each setting measures
        tables[n] = (table, spreads)
    base = {n: t[:, 20].mean() for n, (t, _) in tables.items()}
    rows = []
    for low, high, rank, power in itertools.product(
        (0.1, 0.2, 0.3, 0.35, 0.4), (0.5, 0.55, 0.6, 0.7), (10, 20, 30), (0.5, 1.0, 1.5)
    ):
        gains = {}
        for n, (table, spreads) in tables.items():
            picked = []
            for i, (c, b, text) in enumerate(spreads):
                sc, sb = spread(c, rank) ** power, spread(b, rank) ** power
                alpha = low + (high - low) * (sc / (sc + sb) if sc + sb > 0 else 0.5)
                picked.append(table[i, round((alpha if text else 1.0) * 40)])
            gains[n] = float(np.mean(picked)) - base[n]
        rows.append(((low, high, rank, power), gains))
    safe = [r for r in rows if min(r[1].values()) >= -0.005]
    print(f"\n{len(safe)} of {len(rows)} adaptive settings safe; nDCG@10 gain per set")
    print("| low, high, rank, power | " + " | ".join(sets) + " |")
    print("|---|" + "---|" * len(sets))
    for key, gains in sorted(safe, key=lambda r: -sum(r[1].values()))[:top]:
        print(f"| {key} | " + " | ".join(f"{gains[n]:+.3f}" for n in sets) + " |")


def main() -> None:
    from bench_quality import OnnxEmbedder, TextTruncatedWarning, VectorCache

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sets", default="scifact,conversations,chitchat,chitchat-keyword,locomo,locomo-plain"
    )
    parser.add_argument("--split", default="train", choices=("train", "test"))
    parser.add_argument("--grid", action="store_true", help="every adaptive setting")
    parser.add_argument("--fresh", action="store_true", help="collect the pools again")
    args = parser.parse_args()
    import warnings

    warnings.simplefilter("ignore", TextTruncatedWarning)
    embedder = OnnxEmbedder()
    model = CachedModel(embedder, VectorCache(embedder.name, embedder.dimension))
    sets: dict[str, tuple[list[Pool], int]] = {}
    for name in (n.strip() for n in args.sets.split(",") if n.strip()):
        pools = pools_of(name, args.split, model, args.fresh)
        k = 20 if name.startswith("locomo") else 10
        same = sum(ranked(p, fixed(0.5)(p), k) == p.engine[:k] for p in pools)
        print(f"{name} {args.split}: {len(pools)} queries, replay = engine on {same}")
        sets[name] = (pools, k)
    rules: list[tuple[str, Rule]] = [
        ("BM25 alone", fixed(0.0)),
        ("vectors alone", fixed(1.0)),
        ("fixed 0.5 (the default before)", fixed(0.5)),
        ("fixed 0.4", fixed(0.4)),
        ("fixed 0.3", fixed(0.3)),
        ("adaptive 0.4-0.55, rank 30 (the default)", adaptive()),
        ("adaptive 0.35-0.55, rank 30", adaptive(0.35, 0.55)),
        ("adaptive 0.1-0.6, rank 20 (the first choice)", adaptive(0.1, 0.6, 20)),
        ("adaptive 0.2-0.6, rank 10, power 0.5 (the lead)", adaptive(0.2, 0.6, 10, 0.5)),
        *(
            (f"{kind} {a}", normalised(kind, a))
            for kind in ("minmax", "z", "dbsf")
            for a in (0.3, 0.5)
        ),
        ("the default + date 0.1", dated(adaptive(), 0.1)),
        ("the default + date 0.2", dated(adaptive(), 0.2)),
    ]
    report(sets, rules)
    for name in ("locomo", "locomo-plain"):
        if name in sets:
            print(f"\n{name}:", end="")
            by_category(*sets[name], rules[:3] + rules[5:6] + rules[-2:])
    if args.grid:
        grid(sets)


if __name__ == "__main__":
    main()
