"""Retrieval quality of ``Memory.search`` on its sets, every configuration beside its peers.

The sets (each with a train half to choose settings on and a test half to report on):

- **SciFact** (BEIR, from ``../shared/data/scifact``): 5,183 abstracts (title, blank
  line, text), one record each; 809 train and 300 test queries with graded qrels.
  ``scifact-dated`` is the same store with ``created_at`` spread over 730 days
  (seeded), so age and importance take part in the default score.
- **conversations** (``_conversations.py``, ours): dated multi-session chats, one
  memory per turn scoped to its user (``room_id``), questions asked now about facts
  stated months ago; train is seed 1 (10 users), test is seed 0 (20 users, 200
  questions: the set ``bench_conversations.py`` reports).
- **chitchat** (``_chitchat.py``): real chats between people from the Chit-Chat
  Challenge (MIT, shipped in the PyPI package ``chitchat-dataset``); one store per
  person, a partner's question is the query and the person's answer turn the
  evidence; people split into train and test halves by a hash of their id.
- **chitchat-keyword** (``_chitchat.py``'s ``load_keyword``): the same stores asked
  questions written from the evidence turn's rarest word and a topic word ("What did I
  say about mermaid and guess?"), as LoCoMo's annotators reuse the evidence's words:
  the set where BM25 is the stronger retriever.
- **locomo** and **locomo-plain** (``_locomo.py``): LoCoMo's train half (five long
  conversations, 2,760 turns, 760 questions with evidence), stored and searched as the
  data's README says the held-out figure is taken (``k=20``): as a conversation store
  keeps it (the text, ``speaker``, ``session_id``) and plainly (``"Speaker: text"``).
  Train only (``--split test`` runs the same half: its held-out half is measured outside
  the repository); recall is also given by question category.

Configurations, each through ``Memory.search(text, k=10, room_id=...)`` as a user
calls it, the store embedding the question (through the vector cache): the defaults;
BM25 alone (``mode="text"``); vectors alone (``mode="vector"``); the fusions tried
(named in ``CONFIGS``). Peers computed outside memlane on the same texts: bm25s
(Lucene BM25, k1=1.2, b=0.75, English stopwords and Snowball stemmer, as
``bench_bm25.py``), the dense model alone (exact cosine in numpy), and RRF as elizaOS
fuses its lists (``1 / (60 + rank)`` summed over the two top-100 lists, equal
weights; here bm25s and the exact dense list).

Reported: recall@5, recall@10, recall@20 (share of the relevant records in the top k)
and nDCG@10 (graded gains for SciFact, 1 for an evidence turn), mean over test queries.
``--tune`` first collects every train query's candidate pool once (BM25 and cosine
of each candidate, ``explain=True``) and replays the fusions in numpy over a grid,
printing each set's best and the setting best on all three train sets at once (without
the speaker and session passes; ``tune_fusion.py`` replays the engine's whole score,
the default adaptive fusion among its rules).

Vectors are cached under ``benches/.cache/`` (shared with ``bench_ingest.py``); the
first run embeds every text (tens of minutes on two busy cores).

    python benches/bench_quality.py [--sets scifact,conversations,chitchat] [--tune]
        [--split test] [--knowledge] [--json FILE]
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import tempfile
import time
import warnings
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bench_ingest import (
    SCIFACT,
    CachedModel,
    DataUnavailableError,
    VectorCache,
    document_text,
    scifact_corpus,
    write_corpus,
)
from memlane import Memory, OnnxEmbedder, _core
from memlane.embeddings import TextTruncatedWarning

Qrels = dict[str, dict[str, int]]
Metrics = tuple[float, float, float, float]


def load_queries() -> dict[str, str]:
    with (SCIFACT / "queries.jsonl").open(encoding="utf-8") as f:
        return {q["_id"]: q["text"] for q in map(json.loads, f) if q}


def load_qrels(split: str) -> Qrels:
    qrels: Qrels = defaultdict(dict)
    with (SCIFACT / "qrels" / f"{split}.tsv").open(encoding="utf-8") as f:
        rows = csv.reader(f, delimiter="\t")
        next(rows)  # header
        for qid, did, score in rows:
            qrels[qid][did] = int(score)
    return dict(qrels)


@dataclass(frozen=True)
class SciFact:
    """SciFact as the quality benchmarks read it, and the default model behind the
    vector cache of ``benches/.cache/``."""

    docs: list[dict[str, str]]
    queries: dict[str, str]
    train: Qrels
    test: Qrels
    model: CachedModel


def load_scifact() -> SciFact:
    """The corpus, queries and both qrels splits (raises DataUnavailableError without
    ``../shared``). Abstracts longer than the model's 256 tokens are embedded from
    their start, as in the reference figures, so the truncation warning is off."""
    warnings.simplefilter("ignore", TextTruncatedWarning)
    docs = scifact_corpus()
    embedder = OnnxEmbedder()
    model = CachedModel(embedder, VectorCache(embedder.name, embedder.dimension))
    return SciFact(docs, load_queries(), load_qrels("train"), load_qrels("test"), model)


def ndcg_at(ranked: list[str], gains: dict[str, int], k: int = 10) -> float:
    dcg = sum(gains.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranked[:k]))
    ideal = sorted(gains.values(), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg else 0.0


def recall_at(ranked: list[str], gains: dict[str, int], k: int = 100) -> float:
    relevant = {d for d, g in gains.items() if g > 0}
    return len(relevant & set(ranked[:k])) / len(relevant) if relevant else 0.0


def embed_all(model: CachedModel, texts: list[str], what: str) -> np.ndarray:
    out = np.empty((len(texts), model.dimension), dtype=np.float32)
    started = time.perf_counter()
    for start in range(0, len(texts), 512):
        out[start : start + 512] = model.embed_batch(texts[start : start + 512])
        model.cache.save()
        done = min(start + 512, len(texts))
        print(
            f"\r  {what}: {done}/{len(texts)} ({time.perf_counter() - started:.0f} s)",
            end="",
            flush=True,
        )
    print()
    return out


def evaluate(
    search: Any, queries: dict[str, str], qrels: Qrels, qvec: dict[str, np.ndarray]
) -> tuple[float, float]:
    ndcg, recall = [], []
    for qid, gains in qrels.items():
        ranked = search(queries[qid], qvec[qid])
        ndcg.append(ndcg_at(ranked, gains))
        recall.append(recall_at(ranked, gains))
    return float(np.mean(ndcg)), float(np.mean(recall))


# -- sets --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Doc:
    id: str
    text: str
    room: str | None = None
    at: float | None = None
    session: str | None = None
    speaker: str | None = None  # "user" (whose memory this is) or the other party
    dia_id: str | None = None  # LoCoMo's turn id, kept in metadata


@dataclass(frozen=True)
class Query:
    id: str
    text: str
    gains: dict[str, int]
    room: str | None = None
    category: str | None = None


@dataclass
class QualitySet:
    name: str
    split: str
    docs: list[Doc]
    queries: list[Query]
    episodic: bool = False  # conversation turns: stored as agent memories would be
    meta: dict[str, Any] = field(default_factory=dict)
    k: int = 10  # the depth each query searches at
    table: str | None = None


def scifact_set(split: str, dated: bool = False, seed: int = 7) -> QualitySet:
    docs = scifact_corpus()
    queries = load_queries()
    qrels = load_qrels(split)
    dates: list[float | None] = [None] * len(docs)
    if dated:
        now = time.time()
        spread = np.random.default_rng(seed).uniform(0, 730 * 86400.0, size=len(docs))
        dates = [float(now - s) for s in spread]
    return QualitySet(
        "scifact-dated" if dated else "scifact",
        split,
        [Doc(d["_id"], document_text(d), None, at) for d, at in zip(docs, dates, strict=True)],
        [Query(q, queries[q], g) for q, g in sorted(qrels.items())],
    )


def conversations_set(split: str) -> QualitySet:
    from _conversations import generate

    seed, users = (1, 10) if split == "train" else (0, 20)
    data = generate(seed=seed, users=users)
    return QualitySet(
        "conversations",
        split,
        [Doc(t.id, t.text, t.user, t.at.timestamp(), t.session, t.role) for t in data.turns],
        [Query(q.id, q.text, dict.fromkeys(q.evidence, 1), q.user) for q in data.questions],
        episodic=True,
        meta={"seed": seed, "users": users},
    )


def chitchat_set(split: str, keyword: bool = False) -> QualitySet:
    from _chitchat import load, load_keyword

    data = load_keyword(split) if keyword else load(split)
    return QualitySet(
        "chitchat-keyword" if keyword else "chitchat",
        split,
        [Doc(t.id, t.text, t.user, t.at, t.chat, t.role) for t in data.turns],
        [Query(q.id, q.text, {q.evidence: 1}, q.user) for q in data.queries],
        episodic=True,
    )


def locomo_set(split: str, plain: bool = False, conversations: int | None = None) -> QualitySet:
    """LoCoMo's train half (whatever ``split`` says: the other half is not here)."""
    import _locomo

    if not _locomo.available():
        raise DataUnavailableError(f"no {_locomo.FILE}")
    turns, questions = _locomo.load(conversations)
    return QualitySet(
        "locomo-plain" if plain else "locomo",
        "train",
        [
            Doc(t.id, t.plain, t.conversation, t.at, dia_id=t.dia_id)
            if plain
            else Doc(t.id, t.text, t.conversation, t.at, t.session, t.speaker, t.dia_id)
            for t in turns
        ],
        [
            Query(q.id, q.text, dict.fromkeys(q.evidence, 1), q.conversation, q.category)
            for q in questions
        ],
        k=_locomo.K,
        table="messages",
    )


SETS: dict[str, Callable[[str], QualitySet]] = {
    "scifact": scifact_set,
    "scifact-dated": lambda split: scifact_set(split, dated=True),
    "conversations": conversations_set,
    "chitchat": chitchat_set,
    "chitchat-keyword": lambda split: chitchat_set(split, keyword=True),
    "locomo": locomo_set,
    "locomo-plain": lambda split: locomo_set(split, plain=True),
}


# -- configurations ----------------------------------------------------------------------

# (label, Memory.search options). The first three are the table's anchors.
CONFIGS: list[tuple[str, dict[str, Any]]] = [
    ("defaults", {}),
    ("BM25 alone (text)", {"mode": "text"}),
    ("vectors alone (vector)", {"mode": "vector"}),
    ("RRF k=60", {"fusion": "rrf", "rrf_k": 60.0}),
    ("fixed alpha=0.5 (the default before)", {"fusion": "weighted", "alpha": 0.5}),
    ("fixed alpha=0.3", {"fusion": "weighted", "alpha": 0.3}),
    ("context off: BM25 and cosine (context_weight=0)", {"context_weight": 0.0}),
    ("answer pass off (answer_weight=0)", {"answer_weight": 0.0}),
    ("question pass off (question_weight=0: the default before)", {"question_weight": 0.0}),
    ("speaker field off (speaker_weight=0)", {"speaker_weight": 0.0}),
    ("date pass off (date_weight=0: the default before)", {"date_weight": 0.0}),
    ("when pass off (when_weight=0: the default before)", {"when_weight": 0.0}),
]

#: The rows the headline compares: the defaults against each retriever alone.
HEADLINE = ("defaults", "BM25 alone (text)", "vectors alone (vector)")


def headline(results: dict[str, dict[str, Metrics]]) -> None:
    """One line a set: recall@10 and nDCG@10 of the defaults and of each retriever alone,
    and whether the defaults beat both at recall@5, recall@10 and nDCG@10."""
    print("\nheadline (the split run; LoCoMo: its train half): defaults / BM25 / vectors")
    print("| set | recall@10 | nDCG@10 | beats both at every metric |")
    print("|---|---|---|---|")
    for name, rows in results.items():
        if not all(h in rows for h in HEADLINE):
            continue
        d, b, v = (rows[h] for h in HEADLINE)
        beats = all(d[i] > max(b[i], v[i]) for i in range(3))
        print(
            f"| {name} | {d[1]:.3f} / {b[1]:.3f} / {v[1]:.3f} "
            f"| {d[2]:.3f} / {b[2]:.3f} / {v[2]:.3f} | {'yes' if beats else 'no'} |"
        )


def metrics(ranked: list[str], gains: dict[str, int]) -> Metrics:
    """recall@5, recall@10, nDCG@10, recall@20."""
    return (
        recall_at(ranked, gains, 5),
        recall_at(ranked, gains, 10),
        ndcg_at(ranked, gains),
        recall_at(ranked, gains, 20),
    )


def mean(rows: list[Metrics]) -> Metrics:
    return tuple(float(x) for x in np.mean(rows, axis=0))  # type: ignore[return-value]


class Bench:
    """One set's store, vectors and peers."""

    def __init__(self, qs: QualitySet, model: CachedModel) -> None:
        self.qs = qs
        self.model = model
        texts = [d.text for d in qs.docs]
        self.dvec = embed_all(model, texts, f"{qs.name} {qs.split} texts")
        self.qvec = embed_all(model, [q.text for q in qs.queries], f"{qs.name} {qs.split} queries")
        model.cache.save()
        self.mem = Memory(None, model, track_access=False)
        rows = []
        for d, v in zip(qs.docs, self.dvec, strict=True):
            row: dict[str, Any] = {"id": d.id, "text": d.text, "embedding": v}
            if d.room is not None:
                row["room_id"] = d.room
            if d.at is not None:
                row["created_at"] = d.at
            if qs.table is not None:
                row["table"] = qs.table
            if d.dia_id is not None:
                row["metadata"] = {"dia_id": d.dia_id}
            if qs.episodic:
                row.update(type="episodic", agent_id="assistant")
            if d.session is not None:
                row["session_id"] = d.session
            if d.speaker is not None:
                row["speaker"] = d.speaker
            rows.append(row)
        for start in range(0, len(rows), 2000):
            self.mem.add_many(rows[start : start + 2000])
        self.mem.wait_indexed()
        self.rooms: dict[str | None, list[int]] = defaultdict(list)
        for i, d in enumerate(qs.docs):
            self.rooms[d.room].append(i)
        # Each configuration's metrics per query, for the breakdown by category.
        self.per_query: dict[str, list[Metrics]] = {}
        # The questions' vectors to search with instead of the store's own embedding of
        # each question (bench_embedders.py's query models); None: as a user searches.
        self.given: np.ndarray | None = None

    def scope(self, q: Query) -> dict[str, Any]:
        return {} if q.room is None else {"room_id": q.room}

    def query_vector(self, q: Query) -> np.ndarray:
        """The vector a default search of ``q`` embeds: the question without the names of
        the speakers of its scope it holds (``Engine.vector_text``), through the cache."""
        request = _core.SearchRequest(scope=self.scope(q))
        text = self.mem._engine.vector_text(request, q.text, now=time.time()) or q.text
        return self.model.embed(text)

    def search(self, q: Query, k: int | None = None, **options: Any) -> list[Any]:
        """``q`` as a user searches it: the store embeds the text (through the cache)."""
        return self.mem.search(
            q.text,
            self.qs.k if k is None else k,
            track_access=False,
            **self.scope(q),
            **options,
        )

    def run(self, options: dict[str, Any], label: str = "") -> Metrics:
        out = []
        for i, q in enumerate(self.qs.queries):
            given = {} if self.given is None else {"query_embedding": self.given[i]}
            out.append(metrics([h.record.id for h in self.search(q, **given, **options)], q.gains))
        self.per_query[label] = out
        return mean(out)

    def by_category(self) -> None:
        """recall@10 of every configuration run, per question category (sets that have them)."""
        cats = sorted({q.category for q in self.qs.queries if q.category is not None})
        if not cats:
            return
        count = {c: sum(q.category == c for q in self.qs.queries) for c in cats}
        print(f"\n{self.qs.name}: recall@10 by category (recall@5 / @10 / @20)")
        print("| configuration | " + " | ".join(f"{c} ({count[c]})" for c in cats) + " |")
        print("|---|" + "---|" * len(cats))
        for label, rows in self.per_query.items():
            cells = []
            for c in cats:
                m = mean([r for r, q in zip(rows, self.qs.queries, strict=True) if q.category == c])
                cells.append(f"{m[0]:.3f} / {m[1]:.3f} / {m[3]:.3f}")
            print(f"| {label} | " + " | ".join(cells) + " |", flush=True)

    # -- peers ---------------------------------------------------------------------------

    def peers(self) -> dict[str, Metrics]:
        import bm25s
        import Stemmer

        stemmer = Stemmer.Stemmer("english")

        def tok(texts: list[str]) -> Any:
            return bm25s.tokenize(
                texts, stopwords="en", stemmer=stemmer, show_progress=False, return_ids=False
            )

        indexes: dict[str | None, Any] = {}
        for room, idx in self.rooms.items():
            r = bm25s.BM25(k1=1.2, b=0.75, method="lucene", backend="numpy")
            r.index(tok([self.qs.docs[i].text for i in idx]), show_progress=False)
            indexes[room] = r
        out: dict[str, list[Metrics]] = defaultdict(list)
        for q, v in zip(self.qs.queries, self.qvec, strict=True):
            idx = self.rooms[q.room]
            ids = [self.qs.docs[i].id for i in idx]
            qt = tok([q.text])
            bm_ranked: list[str] = []
            if qt[0]:
                n = min(100, len(idx))
                found, scores = indexes[q.room].retrieve(qt, k=n, show_progress=False)
                bm_ranked = [ids[j] for j, s in zip(found[0], scores[0], strict=True) if s > 0]
            cos = self.dvec[idx] @ (v / np.linalg.norm(v))
            order = np.argsort(-cos, kind="stable")[:100]
            dense_ranked = [ids[j] for j in order]
            fused: dict[str, float] = defaultdict(float)
            for ranked in (bm_ranked, dense_ranked):
                for r, d in enumerate(ranked):
                    fused[d] += 1.0 / (60 + r + 1)
            rrf = sorted(fused, key=lambda d: -fused[d])
            out["bm25s"].append(metrics(bm_ranked, q.gains))
            out["dense model alone (exact cosine)"].append(metrics(dense_ranked, q.gains))
            out["RRF k=60 as elizaOS (bm25s + dense)"].append(metrics(rrf, q.gains))
        for k, v in out.items():
            self.per_query[f"peer: {k}"] = v
        return {k: mean(v) for k, v in out.items()}

    # -- candidate pools for tuning ------------------------------------------------------

    def pools(self, depth: int) -> list[Pool]:
        out = []
        for q in self.qs.queries:
            hits = self.search(
                q,
                query_embedding=self.query_vector(q),
                k=2 * depth,
                candidates=depth,
                explain=True,
                weights={"relevance": 1.0},
                fusion="weighted",
            )
            top = self.search(q, k=1, mode="text", explain=True, weights={"relevance": 1.0})
            ceiling = 0.0
            if top and top[0].explain["relevance"] > 0:
                ceiling = top[0].explain["bm25"] / top[0].explain["relevance"]
            out.append(Pool(q, hits, ceiling))
        return out


class Pool:
    """One query's candidates (the union of both top lists), as numpy columns."""

    def __init__(self, q: Query, hits: list[Any], ceiling: float) -> None:
        def col(name: str, missing: float) -> np.ndarray:
            return np.array(
                [missing if h.explain[name] is None else h.explain[name] for h in hits], float
            )

        self.q = q
        self.ids = [h.record.id for h in hits]
        self.bm25 = col("bm25", 0.0)
        self.cos = col("cosine", 0.0)
        self.bm25_rank = col("bm25_rank", math.inf)
        self.vector_rank = col("vector_rank", math.inf)
        self.ceiling = ceiling


def fused(p: Pool, method: str, alpha: float, depth: int) -> list[str]:
    """The pool ranked by one fusion: replays the engine's formulas in numpy."""
    keep = (p.bm25_rank <= depth) | (p.vector_rank <= depth)
    if not keep.any():
        return []
    bm, cos = p.bm25[keep], np.clip(p.cos[keep], 0.0, 1.0)
    has_bm = bool((bm > 0).any())

    def minmax(x: np.ndarray) -> np.ndarray:
        lo, hi = x.min(), x.max()
        return (x - lo) / (hi - lo) if hi > lo else np.zeros_like(x)

    if method == "rrf":
        br = np.where(p.bm25_rank[keep] <= depth, p.bm25_rank[keep], np.inf)
        vr = np.where(p.vector_rank[keep] <= depth, p.vector_rank[keep], np.inf)
        lists = int(np.isfinite(br).any()) + int(np.isfinite(vr).any())
        s = (1 / (alpha + br) + 1 / (alpha + vr)) / max(lists, 1)
    else:
        if method == "ceiling":  # the weighted fusion before, a fixed alpha
            b = bm / p.ceiling if p.ceiling > 0 else np.zeros_like(bm)
            c = cos
        elif method.startswith("trust"):  # the engine's weighted fusion ("trust1.5")
            b = bm / p.ceiling if p.ceiling > 0 else np.zeros_like(bm)
            c = cos
            fade = (1 - alpha) * float(b.max()) ** float(method[5:] or 1.5)
            alpha = alpha / (alpha + fade) if alpha + fade > 0 else 1.0
        elif method == "max":
            b = bm / bm.max() if has_bm else bm
            c = cos
        elif method == "tm2c2":  # theoretical minimum (0), observed maximum
            b = bm / bm.max() if has_bm else bm
            c = cos / cos.max() if cos.max() > 0 else cos
        elif method == "minmax":
            b, c = minmax(bm), minmax(cos)
        elif method == "minmax-bm":  # BM25 min-max, cosine as is
            b, c = minmax(bm), cos
        elif method == "z":

            def z(x: np.ndarray) -> np.ndarray:
                sd = x.std()
                return (x - x.mean()) / sd if sd > 0 else np.zeros_like(x)

            b, c = z(bm), z(cos)
        elif method == "dbsf":  # Qdrant's: (x - (mu - 3 sd)) / 6 sd

            def d(x: np.ndarray) -> np.ndarray:
                sd = x.std()
                return np.clip((x - x.mean() + 3 * sd) / (6 * sd), 0, 1) if sd > 0 else x * 0

            b, c = d(bm), d(cos)
        else:
            raise ValueError(method)
        s = alpha * c + (1 - alpha) * b if has_bm else c
    order = np.lexsort((np.arange(len(s)), -s))
    ids = [i for i, k in zip(p.ids, keep, strict=True) if k]
    return [ids[j] for j in order[:20]]


GRID: list[tuple[str, float]] = [
    ("ceiling", 0.0),  # BM25 alone
    ("ceiling", 1.0),  # the vectors alone
    *((f"trust{e}", a) for e in (1.0, 1.5, 2.0) for a in (0.3, 0.4, 0.5, 0.6)),
    *(
        (m, a)
        for m in ("ceiling", "max", "tm2c2", "minmax", "minmax-bm", "z", "dbsf")
        for a in (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)
    ),
    *(("rrf", k) for k in (1.0, 5.0, 10.0, 20.0, 40.0, 60.0)),
]


def tune(benches: dict[str, Bench], depths: tuple[int, ...], top: int = 25) -> None:
    """Every fusion in GRID at every depth, on every set's train pools."""
    table: dict[tuple[str, float, int], dict[str, Metrics]] = defaultdict(dict)
    for name, b in benches.items():
        pools = b.pools(max(depths))
        for method, alpha in GRID:
            for depth in depths:
                scores = [metrics(fused(p, method, alpha, depth), p.q.gains) for p in pools]
                table[(method, alpha, depth)][name] = mean(scores)
    names = list(benches)
    anchors = {
        ("ceiling", 0.0): "BM25 alone",
        ("ceiling", 1.0): "vectors alone",
        ("ceiling", 0.5): "fixed alpha 0.5 (the default before the adaptive one)",
        ("trust1.5", 0.4): "the query-weighted fusion once built",
    }
    print("\ntrain replay (relevance only), recall@5 / recall@10 / nDCG@10 per set;")
    print(f"the best {top} by mean nDCG@10, then the anchors; margin: the worst difference")
    print("to the better of BM25 alone and the vectors alone over every set and metric")
    print(f"| fusion | param | depth | {' | '.join(names)} | mean nDCG@10 | margin |")
    print("|---|---:|---:|" + "---|" * len(names) + "---:|---:|")
    alone = {n: [table[("ceiling", a, max(depths))][n] for a in (0.0, 1.0)] for n in names}

    def margin(per: dict[str, Metrics]) -> float:
        return min(per[n][i] - max(alone[n][0][i], alone[n][1][i]) for n in names for i in range(3))

    ranked = sorted(table.items(), key=lambda kv: -np.mean([v[2] for v in kv[1].values()]))
    shown = ranked[:top] + [kv for kv in ranked if kv[0][:2] in anchors and kv[0][2] == depths[0]]
    seen: dict[tuple[str, float], dict[str, Metrics]] = {}
    for (method, alpha, depth), per in shown:
        if seen.get((method, alpha)) == per:
            continue  # the same at another depth
        seen[(method, alpha)] = per
        cells = " | ".join("{:.3f}/{:.3f}/{:.3f}".format(*per[n]) for n in names)
        avg = np.mean([per[n][2] for n in names])
        label = f"{method} ({anchors[(method, alpha)]})" if (method, alpha) in anchors else method
        print(f"| {label} | {alpha:g} | {depth} | {cells} | {avg:.4f} | {margin(per):+.3f} |")


def print_table(title: str, rows: list[tuple[str, Metrics]]) -> None:
    print(f"\n{title}")
    print("| configuration | recall@5 | recall@10 | nDCG@10 | recall@20 |")
    print("|---|---:|---:|---:|---:|")
    for label, (r5, r10, n10, r20) in rows:
        print(f"| {label} | {r5:.3f} | {r10:.3f} | {n10:.3f} | {r20:.3f} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sets",
        default="scifact,scifact-dated,conversations,chitchat,chitchat-keyword,locomo,locomo-plain",
    )
    parser.add_argument("--split", default="test", choices=("train", "test"))
    parser.add_argument("--tune", action="store_true", help="replay fusions on train first")
    parser.add_argument("--no-peers", action="store_true")
    parser.add_argument("--knowledge", action="store_true", help="SciFact via ingest too")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    warnings.simplefilter("ignore", TextTruncatedWarning)
    embedder = OnnxEmbedder()
    model = CachedModel(embedder, VectorCache(embedder.name, embedder.dimension))
    names = [n.strip() for n in args.sets.split(",") if n.strip()]
    results: dict[str, dict[str, Metrics]] = {}

    def build(name: str, split: str) -> Bench | None:
        try:
            return Bench(SETS[name](split), model)
        except (DataUnavailableError, ModuleNotFoundError) as e:
            print(f"{name}: skipped ({e})")
            return None

    if args.tune:
        train = {n: b for n in names if n != "scifact-dated" and (b := build(n, "train"))}
        tune(train, (50, 200))
        for b in train.values():
            b.mem.close()
    for name in names:
        b = build(name, args.split)
        if b is None:
            continue
        rows = [(label, b.run(options, label)) for label, options in CONFIGS]
        if not args.no_peers and name != "scifact-dated":
            rows += [(f"peer: {k}", v) for k, v in b.peers().items()]
        qs = b.qs
        print_table(
            f"{name} ({qs.split}: {len(qs.docs):,} records, {len(qs.queries)} queries)", rows
        )
        results[name] = dict(rows)
        b.by_category()
        b.mem.close()
    headline(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    if args.knowledge:
        data = load_scifact()
        qids = sorted(data.test)
        qmat = embed_all(data.model, [data.queries[q] for q in qids], "queries")
        knowledge(
            data.model, data.docs, data.queries, data.test, dict(zip(qids, qmat, strict=True))
        )
    model.cache.save()


def knowledge(
    model: CachedModel,
    docs: list[dict[str, str]],
    queries: dict[str, str],
    test: Qrels,
    qvec: dict[str, np.ndarray],
) -> None:
    """The same through ingest + search_knowledge: a document ranks by its best fragment."""
    with tempfile.TemporaryDirectory(prefix="memlane-bench-quality-") as tmp:
        folder = Path(tmp) / "scifact"
        write_corpus(docs, folder)
        mem = Memory(None, model, track_access=False)
        report = mem.ingest(folder, shared=True, progress=True)
        print(report.summary())
        mem.wait_indexed()
        model.cache.save()

        def searcher(mode: str) -> Any:
            def search(text: str, vector: np.ndarray) -> list[str]:
                hits = mem.search_knowledge(
                    text,
                    k=400,
                    mode=mode,  # type: ignore[arg-type]
                    threshold=None,  # a ranking measure: no cut-off
                    query_embedding=vector,
                )
                ranked: list[str] = []
                for h in hits:
                    doc = Path(h.record.metadata["source"]).stem
                    if doc not in ranked:
                        ranked.append(doc)
                return ranked

            return search

        print("\nSciFact test via ingest + search_knowledge (fragments, best per document):")
        print("| mode | nDCG@10 | Recall@100 |")
        print("|---|---:|---:|")
        for mode in ("text", "vector", "hybrid"):
            ndcg, recall = evaluate(searcher(mode), queries, test, qvec)
            print(f"| {mode} | {ndcg:.4f} | {recall:.4f} |", flush=True)
        mem.close()


if __name__ == "__main__":
    main()
