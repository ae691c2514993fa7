"""Conversation-aware retrieval options, prototyped over ``Memory.search``'s lists (issue 37).

Every option is replayed in numpy over one query's whole scope (its ``room_id``, or the
whole store for SciFact): the cosine of every record to the query (exact, from the
cached vectors) and the engine's BM25 score of its top 200 by BM25 (``mode="text"``,
``explain=True``; a record outside them scores 0), fused as the engine fuses, relevance
only (``alpha * cosine + (1 - alpha) * bm25 / ceiling``, the ceiling the sum of the query
terms' idf). The options, each a small grid:

- ``fixed``: the engine's fusion at other fixed weights.
- ``adaptive``: the query-weighted fusion of ``bench_quality.py`` (``alpha_q = alpha / (alpha + (1
  - alpha) * best^p)``, best = BM25's top score over the ceiling).
- ``spread``: the same with the BM25 list's top-ten spread (top score minus the 10th,
  over the ceiling) in place of its best: ``alpha_q = alpha / (alpha + (1 - alpha) *
  (spread / s0)^p)``.
- ``context-vector``: a turn's cosine plus ``w`` times the mean cosine of its two
  neighbours in the same session (a turn indexed with its neighbours, no LLM).
- ``context-bm25``: BM25 over the turn with its neighbours' text (a second store of
  ``previous + turn + next``), mixed into the turn's own: ``(1 - w) * own + w * context``,
  each over its ceiling.
- ``neighbours``: query-time expansion: a turn's fused score becomes at least ``beta``
  times its best same-session neighbour's (a hit pulls its adjacent turns up).
- ``speaker``: a speaker field in BM25: a question in the first person ("I", "my")
  matches a token every turn of the store's own person carries, worth ``gamma`` of the
  ceiling (turns of the other party get nothing).
- ``rm3``: pseudo-relevance feedback for BM25: the first round's top ``d`` by BM25 give
  ``t`` expansion terms (RM3's weights: the term's share of each document, weighted by
  the document's BM25 share); a second BM25 search with the query plus those terms,
  mixed ``(1 - lambda) * first + lambda * second``.
- ``rocchio``: the query vector plus ``beta`` times the mean vector of the fused top ``d``.
- ``multihop``: a second round seeded by the first: the fused top hit's vector is a
  second query, its cosine added with weight ``mu``.

Settings are chosen on the train halves of every set at once (the highest mean nDCG@10
among those that lose no set more than 0.005 nDCG@10 against the base, the fixed alpha
0.5) and reported on the test halves beside the anchors (BM25 alone, vectors alone, the
base, the query-weighted fusion as once built); then the options that gain on train are
stacked greedily, and the two benches/README.md recommends are shown together.
Sessions: a conversation set's ``session`` field (a chat for chitchat); SciFact has
none, so the context and neighbour options leave it as it is.

    python benches/bench_conversation_options.py [--sets ...] [--pools FILE] [--json FILE]

``--pools`` keeps the collected columns (about 0.7 GB for the four sets) so that a second
run replays without building the stores again.
"""

from __future__ import annotations

import argparse
import json
import pickle
import re
import warnings
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench_ingest import CachedModel, VectorCache
from bench_quality import SETS, Bench, QualitySet, metrics
from memlane import Memory, OnnxEmbedder
from memlane.embeddings import TextTruncatedWarning

BM25_DEPTH = 200
_WORD = re.compile(r"[a-z0-9]+")
_FIRST_PERSON = re.compile(r"\b(i|my|me|mine|i'm|i've|myself)\b", re.IGNORECASE)
# Terms that feedback must not add (English function words, as the engine's stop list).
_STOP = frozenset(
    [
        "a",
        "about",
        "after",
        "all",
        "also",
        "am",
        "an",
        "and",
        "any",
        "are",
        "as",
        "at",
        "be",
        "because",
        "been",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "doing",
        "don",
        "for",
        "from",
        "get",
        "got",
        "had",
        "has",
        "have",
        "he",
        "her",
        "him",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "just",
        "like",
        "me",
        "more",
        "my",
        "no",
        "not",
        "now",
        "of",
        "on",
        "one",
        "or",
        "our",
        "out",
        "she",
        "so",
        "some",
        "than",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "these",
        "they",
        "this",
        "to",
        "too",
        "up",
        "us",
        "very",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "yeah",
        "really",
        "im",
        "its",
        "dont",
        "thats",
    ]
)


def terms(text: str) -> list[str]:
    return [w for w in _WORD.findall(text.lower()) if w not in _STOP and len(w) > 2]


@dataclass
class Scoped:
    """One query's scope: every record's columns the options read."""

    gains: dict[str, int]
    ids: list[str]
    cos: np.ndarray  # exact cosine to the query
    bm: np.ndarray  # the engine's BM25 over its ceiling (0 outside its top 200)
    bm_ctx: np.ndarray  # the same over the turn-with-neighbours texts
    bm_rm3: dict[tuple[int, int], np.ndarray]  # second-round BM25 per (docs, terms)
    prev: np.ndarray  # the same-session neighbour's index in ``ids``, or -1
    next: np.ndarray
    own: np.ndarray  # 1.0 for a turn of the store's own person
    first_person: bool
    unit: np.ndarray  # the set's unit vectors (one array shared by every query)
    idx: np.ndarray  # the scope's rows of ``unit``
    qvec: np.ndarray

    @property
    def vecs(self) -> np.ndarray:
        return self.unit[self.idx]


RM3_GRID = ((5, 5), (5, 10), (10, 10))


class Collector:
    """Builds a set's stores (turns, and turns with their neighbours) and the ``Scoped``
    columns of every query."""

    def __init__(self, qs: QualitySet, model: CachedModel) -> None:
        self.bench = Bench(qs, model)
        self.qs = qs
        docs = qs.docs
        self.pos = {d.id: i for i, d in enumerate(docs)}
        n = len(docs)
        self.prev = np.full(n, -1)
        self.next = np.full(n, -1)
        for i in range(1, n):
            a, b = docs[i - 1], docs[i]
            if a.session is not None and a.session == b.session and a.room == b.room:
                self.prev[i], self.next[i - 1] = i - 1, i
        self.unit = self.bench.dvec / np.linalg.norm(self.bench.dvec, axis=1, keepdims=True)
        self.ctx: Memory | None = None
        if any(d.session is not None for d in docs):
            self.ctx = Memory(None, model, track_access=False)
            rows = []
            for i, d in enumerate(docs):
                around = [docs[j].text for j in (self.prev[i], i, self.next[i]) if j >= 0]
                row: dict[str, Any] = {"id": d.id, "text": "\n".join(around)}
                row["embedding"] = self.bench.dvec[i]
                if d.room is not None:
                    row["room_id"] = d.room
                rows.append(row)
            for start in range(0, len(rows), 2000):
                self.ctx.add_many(rows[start : start + 2000])
            self.ctx.wait_indexed()

    def bm25(self, mem: Memory, text: str, room: str | None) -> dict[str, float]:
        """Each of the top BM25 hits' score over the query's ceiling."""
        scope = {} if room is None else {"room_id": room}
        hits = mem.search(
            text,
            BM25_DEPTH,
            mode="text",
            explain=True,
            weights={"relevance": 1.0},
            track_access=False,
            **scope,
        )
        return {h.record.id: float(h.explain["relevance"]) for h in hits}

    def scoped(self) -> Iterator[Scoped]:
        b = self.bench
        for q, v in zip(self.qs.queries, b.qvec, strict=True):
            idx = np.array(b.rooms[q.room])
            ids = [self.qs.docs[i].id for i in idx]
            local = {gi: li for li, gi in enumerate(idx)}
            qv = v / np.linalg.norm(v)
            vecs = self.unit[idx]

            def column(
                scores: dict[str, float], idx: np.ndarray = idx, local: dict[int, int] = local
            ) -> np.ndarray:
                out = np.zeros(len(idx))
                for rid, s in scores.items():
                    out[local[self.pos[rid]]] = s
                return out

            first = self.bm25(b.mem, q.text, q.room)
            bm = column(first)
            bm_ctx = column(self.bm25(self.ctx, q.text, q.room)) if self.ctx else bm
            rm3: dict[tuple[int, int], np.ndarray] = {}
            ranked = sorted(first, key=lambda r: -first[r])
            for fb_docs, fb_terms in RM3_GRID:
                extra = feedback_terms(
                    q.text, [(self.qs.docs[self.pos[r]].text, first[r]) for r in ranked[:fb_docs]]
                )
                rm3[(fb_docs, fb_terms)] = (
                    column(self.bm25(b.mem, q.text + " " + " ".join(extra[:fb_terms]), q.room))
                    if extra
                    else bm
                )

            def neighbour(
                arr: np.ndarray, idx: np.ndarray = idx, local: dict[int, int] = local
            ) -> np.ndarray:
                return np.array([local.get(int(arr[gi]), -1) if arr[gi] >= 0 else -1 for gi in idx])

            yield Scoped(
                q.gains,
                ids,
                np.clip(vecs @ qv, 0.0, 1.0),
                bm,
                bm_ctx,
                rm3,
                neighbour(self.prev),
                neighbour(self.next),
                np.array([1.0 if self.qs.docs[i].speaker == "user" else 0.0 for i in idx]),
                bool(_FIRST_PERSON.search(q.text)),
                self.unit,
                idx,
                qv,
            )

    def close(self) -> None:
        self.bench.mem.close()
        if self.ctx is not None:
            self.ctx.close()


def feedback_terms(query: str, docs: list[tuple[str, float]]) -> list[str]:
    """RM3's expansion terms, best first: sum over feedback documents of the term's share
    of the document times the document's share of the BM25 mass; query terms left out."""
    mass = sum(s for _, s in docs)
    if mass <= 0:
        return []
    weight: Counter[str] = Counter()
    for text, score in docs:
        words = terms(text)
        for w, c in Counter(words).items():
            weight[w] += (c / len(words)) * (score / mass)
    asked = set(terms(query))
    return [w for w, _ in weight.most_common() if w not in asked]


# -- the options, replayed -----------------------------------------------------------------

# One setting of every option; the base is the engine's fixed alpha 0.5 with none on.
Config = dict[str, Any]
BASE: Config = {
    "alpha": 0.5,
    "power": None,  # adaptive fusion: alpha_q = alpha / (alpha + (1 - alpha) * best^power)
    "spread": None,  # (s0, p): alpha_q = alpha / (alpha + (1 - alpha) * (spread / s0)^p)
    "ctx_vec": 0.0,
    "ctx_bm25": 0.0,
    "neighbours": 0.0,
    "speaker": 0.0,
    "rm3": None,  # (docs, terms, lambda)
    "rocchio": None,  # (beta, top)
    "multihop": 0.0,
}


def neighbour_mean(s: Scoped, x: np.ndarray) -> np.ndarray:
    total = np.zeros_like(x)
    count = np.zeros_like(x)
    for arr in (s.prev, s.next):
        has = arr >= 0
        total[has] += x[arr[has]]
        count[has] += 1
    return np.where(count > 0, total / np.maximum(count, 1), 0.0)


def neighbour_max(s: Scoped, x: np.ndarray) -> np.ndarray:
    out = np.zeros_like(x)
    for arr in (s.prev, s.next):
        has = arr >= 0
        out[has] = np.maximum(out[has], x[arr[has]])
    return out


def fuse(alpha: float, bm: np.ndarray, cos: np.ndarray) -> np.ndarray:
    return alpha * cos + (1 - alpha) * bm if (bm > 0).any() else cos


def relevance(s: Scoped, c: Config) -> np.ndarray:
    """Every record's score in the scope under one configuration."""
    bm = s.bm
    if c["ctx_bm25"]:
        bm = (1 - c["ctx_bm25"]) * bm + c["ctx_bm25"] * s.bm_ctx
    if c["rm3"] is not None:
        docs, n_terms, lam = c["rm3"]
        bm = (1 - lam) * bm + lam * s.bm_rm3[(docs, n_terms)]
    if c["speaker"] and s.first_person:
        bm = bm + c["speaker"] * s.own
    alpha = c["alpha"]
    if c["power"] is not None:
        best = float(s.bm.max())
        alpha = alpha / (alpha + (1 - alpha) * best ** c["power"])
    if c["spread"] is not None:
        s0, p = c["spread"]
        top = np.sort(s.bm)[::-1][:10]
        alpha = alpha / (alpha + (1 - alpha) * (float(top[0] - top[-1]) / s0) ** p)
    cos = s.cos
    if c["rocchio"] is not None:
        beta, top = c["rocchio"]
        first = np.argsort(-fuse(alpha, bm, cos), kind="stable")[:top]
        vecs = s.vecs
        q = s.qvec + beta * vecs[first].mean(axis=0)
        cos = np.clip(vecs @ (q / np.linalg.norm(q)), 0.0, 1.0)
    if c["ctx_vec"]:
        cos = (cos + c["ctx_vec"] * neighbour_mean(s, cos)) / (1 + c["ctx_vec"])
    x = fuse(alpha, bm, cos)
    if c["multihop"]:
        seed = int(np.argmax(x))
        vecs = s.vecs
        x = x + c["multihop"] * np.clip(vecs @ vecs[seed], 0.0, 1.0)
    if c["neighbours"]:
        x = np.maximum(x, c["neighbours"] * neighbour_max(s, x))
    return x


def grids() -> dict[str, list[Config]]:
    """Each option's settings (every other option off)."""
    one: dict[str, list[Config]] = {
        "fixed fusion (alpha)": [{"alpha": a} for a in (0.3, 0.4, 0.6, 0.7)],
        "adaptive fusion (alpha, power)": [
            {"alpha": a, "power": p} for a in (0.3, 0.4, 0.5, 0.6) for p in (1.0, 1.5, 2.0)
        ],
        "adaptive fusion by BM25's top-ten spread (alpha, (s0, p))": [
            {"alpha": a, "spread": (s0, 2.0)} for a in (0.3, 0.4, 0.5) for s0 in (0.08, 0.1)
        ],
        "contextual vector (w)": [{"ctx_vec": w} for w in (0.05, 0.1, 0.2, 0.3, 0.5)],
        "contextual BM25 (w)": [{"ctx_bm25": w} for w in (0.1, 0.2, 0.4, 0.6, 0.8, 1.0)],
        "neighbour expansion (beta)": [{"neighbours": b} for b in (0.3, 0.5, 0.7, 0.8, 0.9)],
        "speaker field (gamma)": [{"speaker": g} for g in (0.05, 0.1, 0.2, 0.3, 0.5, 1.0)],
        "RM3 (docs, terms, lambda)": [
            {"rm3": (d, t, lam)} for d, t in RM3_GRID for lam in (0.1, 0.2, 0.4, 0.6)
        ],
        "Rocchio (beta, top)": [{"rocchio": (b, d)} for b in (0.1, 0.2, 0.4) for d in (1, 3, 5)],
        "multi-hop (mu)": [{"multihop": m} for m in (0.02, 0.05, 0.1, 0.2, 0.3)],
    }
    return {name: [{**BASE, **c} for c in settings] for name, settings in one.items()}


def setting(c: Config) -> str:
    diff = {k: v for k, v in c.items() if v != BASE[k]}
    return ", ".join(f"{k} {v}" for k, v in diff.items()) or "-"


Figures = dict[str, tuple[float, float, float]]


def score(scoped: list[Scoped], c: Config) -> tuple[float, float, float]:
    out = []
    for s in scoped:
        x = relevance(s, c)
        top = np.argpartition(-x, 10)[:10] if len(x) > 10 else np.arange(len(x))
        order = top[np.lexsort((top, -x[top]))]
        out.append(metrics([s.ids[j] for j in order if x[j] > 0], s.gains))
    return tuple(float(v) for v in np.mean(out, axis=0))  # type: ignore[return-value]


def figures(sets: dict[str, list[Scoped]], c: Config) -> Figures:
    return {n: score(sc, c) for n, sc in sets.items()}


TOLERANCE = 0.005  # nDCG@10 a setting may lose on a train set against the base


def choose(settings: list[Config], train: dict[str, list[Scoped]], base: Figures):
    """The setting with the best mean train nDCG@10 among those that lose no set more than
    TOLERANCE against the base; None when every setting loses somewhere."""
    best: tuple[float, Config, Figures] | None = None
    for c in settings:
        per = figures(train, c)
        if any(per[n][2] < base[n][2] - TOLERANCE for n in per):
            continue
        mean = float(np.mean([v[2] for v in per.values()]))
        if best is None or mean > best[0]:
            best = (mean, c, per)
    return best


def row(name: str, label: str, split: str, figs: Figures, names: list[str]) -> None:
    cells = " | ".join("{:.3f}/{:.3f}/{:.3f}".format(*figs[n]) for n in names)
    print(f"| {name} | {label} | {split} | {cells} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", default="scifact,conversations,chitchat,chitchat-keyword")
    parser.add_argument("--pools", type=Path, help="keep the collected columns here (pickle)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    warnings.simplefilter("ignore", TextTruncatedWarning)
    names = [n.strip() for n in args.sets.split(",") if n.strip()]
    if args.pools and args.pools.exists():
        with args.pools.open("rb") as f:
            train, test = pickle.load(f)
    else:
        embedder = OnnxEmbedder()
        model = CachedModel(embedder, VectorCache(embedder.name, embedder.dimension))

        def collect(split: str) -> dict[str, list[Scoped]]:
            out = {}
            for n in names:
                c = Collector(SETS[n](split), model)
                out[n] = list(c.scoped())
                c.close()
                model.cache.save()
            return out

        train, test = collect("train"), collect("test")
        if args.pools:
            with args.pools.open("wb") as f:
                pickle.dump((train, test), f)
    base = figures(train, BASE)
    report: dict[str, Any] = {}
    anchors = {
        "BM25 alone": {**BASE, "alpha": 0.0},
        "vectors alone": {**BASE, "alpha": 1.0},
        "base: fixed alpha 0.5 (the engine's)": BASE,
        "the query-weighted fusion once built (alpha 0.4, power 1.5)": {
            **BASE,
            "alpha": 0.4,
            "power": 1.5,
        },
    }
    print("\nBM25 over its ceiling per train query, medians: best match, top-ten spread")
    for n, sc in train.items():
        tops = [np.sort(s.bm)[::-1][:10] for s in sc]
        best_match = np.median([t[0] for t in tops])
        spread = np.median([t[0] - t[-1] for t in tops])
        print(f"  {n}: {best_match:.3f}, {spread:.3f}")
    print("\nrecall@5 / recall@10 / nDCG@10; each option at its setting chosen on train")
    print(f"| option | setting | split | {' | '.join(names)} |")
    print("|---|---|---|" + "---|" * len(names))
    for name, c in anchors.items():
        for split, sets in (("train", train), ("test", test)):
            figs = figures(sets, c)
            report.setdefault(name, {})[split] = figs
            row(name, "-", split, figs, names)
    paying: list[tuple[float, Config]] = []
    for name, settings in grids().items():
        chosen = choose(settings, train, base)
        if chosen is None:
            best = max(settings, key=lambda c: np.mean([v[2] for v in figures(train, c).values()]))
            label = f"none safe; best mean: {setting(best)}"
            c, per = best, figures(train, best)
        else:
            mean, c, per = chosen
            label = setting(c)
            gain = mean - float(np.mean([v[2] for v in base.values()]))
            if gain > 0:
                paying.append((gain, c))
        test_per = figures(test, c)
        report[name] = {"setting": label, "train": per, "test": test_per}
        row(name, label, "train", per, names)
        row(name, label, "test", test_per, names)
    # The paying options stacked greedily, the best first, each kept if the stack's mean
    # train nDCG@10 rises and no set loses against the base.
    stack = dict(BASE)
    stack_mean = float(np.mean([v[2] for v in base.values()]))
    for _, c in sorted(paying, key=lambda gc: -gc[0]):
        trial = {**stack, **{k: v for k, v in c.items() if v != BASE[k]}}
        per = figures(train, trial)
        mean = float(np.mean([v[2] for v in per.values()]))
        if mean > stack_mean and all(per[n][2] >= base[n][2] - TOLERANCE for n in per):
            stack, stack_mean = trial, mean
    for split, sets in (("train", train), ("test", test)):
        figs = figures(sets, stack)
        report.setdefault("stack", {"setting": setting(stack)})[split] = figs
        row("the paying options stacked", setting(stack), split, figs, names)
    # The two options benches/README.md recommends building, without the others.
    chosen = {**BASE, "speaker": 0.5, "ctx_bm25": 0.2}
    for split, sets in (("train", train), ("test", test)):
        figs = figures(sets, chosen)
        report.setdefault("recommended", {"setting": setting(chosen)})[split] = figs
        row("recommended: speaker field + contextual BM25", setting(chosen), split, figs, names)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
