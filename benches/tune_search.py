"""Choosing ``Memory.search``'s defaults on SciFact's *train* queries.

What it does: stores SciFact's 5,183 abstracts with ``created_at`` spread uniformly
over the past 730 days (seeded), collects for every query the engine's whole
candidate pool once (BM25 and cosine of every candidate, both ranks, age), then
replays the documented formula in numpy over a grid of settings:

- fusion: RRF (``rrf_k``) or weighted (``alpha``), with BM25 normalised by the best
  candidate's score (``bm25 / best``) or by the query's own ceiling (``bm25 / Σ idf``,
  the score a document would reach with every query term at unbounded frequency);
- the candidate pool per retriever;
- the weights of importance and recency and the recency half-life (age relative to
  the newest candidate).

Each setting's nDCG@10 is computed on train; the best few are then reported on
test, beside relevance alone. The formula replayed here is the one in
``rust/core/src/scoring.rs``; ``tests/memory/test_scoring.py`` holds the engine to it.

    python benches/tune_search.py [--seed 7]
"""

from __future__ import annotations

import argparse
import math
import time
from collections import Counter
from itertools import product
from typing import Any

import numpy as np

from bench_ingest import document_text
from bench_quality import embed_all, load_scifact, ndcg_at
from memlane import Memory, analyze

DAY = 86400.0
POOL = 200


class Pool:
    """One query's candidates, as numpy columns."""

    def __init__(self, hits: list[Any], ceiling: float) -> None:
        def col(name: str, missing: float) -> np.ndarray:
            return np.array(
                [missing if h.explain[name] is None else h.explain[name] for h in hits], float
            )

        self.ids = [h.record.id for h in hits]
        self.bm25 = col("bm25", 0.0)
        self.cos = col("cosine", 0.0)
        self.bm25_rank = col("bm25_rank", math.inf)
        self.vector_rank = col("vector_rank", math.inf)
        self.created = np.array([h.record.last_accessed_at for h in hits])
        self.ceiling = ceiling


def relevance(p: Pool, pool: int, fusion: str, param: float, norm: str) -> np.ndarray:
    inside = (p.bm25_rank <= pool) | (p.vector_rank <= pool)
    in_bm = p.bm25_rank <= pool
    in_vec = p.vector_rank <= pool
    if fusion == "rrf":
        lists = int(in_bm.any()) + int(in_vec.any())
        s = np.where(in_bm, 1.0 / (param + p.bm25_rank), 0.0) + np.where(
            in_vec, 1.0 / (param + p.vector_rank), 0.0
        )
        rel = s * (param + 1.0) / max(lists, 1)
    else:
        best = p.bm25[in_bm].max() if in_bm.any() else 0.0
        denom = best if norm == "best" else p.ceiling
        bm = np.clip(p.bm25 / denom, 0, 1) if denom > 0 else np.zeros_like(p.bm25)
        cos = np.clip(p.cos, 0, 1)
        rel = param * cos + (1 - param) * bm if best > 0 else cos
    return np.where(inside, rel, -1.0)


def final(p: Pool, rel: np.ndarray, w_imp: float, w_rec: float, half_life_h: float) -> np.ndarray:
    age_h = (p.created.max() - p.created) / 3600.0
    rec = 0.5 ** (age_h / half_life_h)
    imp = 0.5  # every abstract has the default importance
    mult = (1.0 + w_imp * imp + w_rec * rec) / (1.0 + w_imp + w_rec)
    return rel * mult


def ndcg(pools: dict[str, Pool], qrels: dict[str, dict[str, int]], score: Any) -> float:
    out = []
    for qid, gains in qrels.items():
        p = pools[qid]
        s = score(p)
        order = np.lexsort((np.arange(len(s)), -s))
        ranked = [p.ids[i] for i in order[:10] if s[i] >= 0]
        out.append(ndcg_at(ranked, gains))
    return float(np.mean(out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    data = load_scifact()
    docs, queries, train, test, model = data.docs, data.queries, data.train, data.test, data.model
    texts = [document_text(d) for d in docs]
    dvec = embed_all(model, texts, "documents")
    qids = sorted(set(test) | set(train))
    qvec = dict(zip(qids, embed_all(model, [queries[q] for q in qids], "queries"), strict=True))

    # Document frequencies with the engine's own analyzer, for the BM25 ceiling.
    df: Counter[str] = Counter()
    for t in texts:
        df.update(set(analyze(t)))
    n = len(texts)

    def ceiling(q: str) -> float:
        return sum(math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5)) for t in analyze(q))

    rng = np.random.default_rng(args.seed)
    now = time.time()
    created = now - rng.uniform(0, 730 * DAY, size=n)
    mem = Memory(None, model, track_access=False)
    mem.add_many(
        {"id": d["_id"], "text": t, "embedding": v, "created_at": float(c)}
        for d, t, v, c in zip(docs, texts, dvec, created, strict=True)
    )
    mem.wait_indexed()
    pools: dict[str, Pool] = {}
    for qid in qids:
        hits = mem.search(
            queries[qid],
            2 * POOL,
            query_embedding=qvec[qid],
            fusion="weighted",
            candidates=POOL,
            weights={"relevance": 1.0},
            explain=True,
            track_access=False,
        )
        pools[qid] = Pool(hits, ceiling(queries[qid]))
    mem.close()

    grid: list[tuple[str, dict[str, Any], float]] = []
    for pool, k in product((20, 50, 100, 200), (20, 60)):
        cfg = {"pool": pool, "fusion": "rrf", "param": float(k), "norm": "-"}
        grid.append(("rrf", cfg, 0.0))
    for pool, alpha, norm in product(
        (20, 50, 100, 200), (0.3, 0.4, 0.5, 0.6, 0.7, 0.8), ("best", "ceiling")
    ):
        cfg = {"pool": pool, "fusion": "weighted", "param": alpha, "norm": norm}
        grid.append(("weighted", cfg, 0.0))

    def rel_of(cfg: dict[str, Any]) -> Any:
        return lambda p: relevance(p, cfg["pool"], cfg["fusion"], cfg["param"], cfg["norm"])

    print("\nrelevance alone, train nDCG@10:")
    scored = []
    for _, cfg, _ in grid:
        s = ndcg(pools, train, rel_of(cfg))
        scored.append((s, cfg))
        print(f"  {cfg}: {s:.4f}")
    scored.sort(key=lambda x: -x[0])
    best_rel = scored[0][1]
    best_ceiling = max((x for x in scored if x[1]["norm"] == "ceiling"), key=lambda x: x[0])[1]
    print(f"best: {best_rel}; best with the ceiling: {best_ceiling}")

    print("\nboosts on top of the best relevance with the ceiling, train nDCG@10:")
    boosts = []
    for w_imp, w_rec, hl in product((0.0, 0.1, 0.2), (0.0, 0.05, 0.1, 0.2, 0.3), (168, 720)):
        r = rel_of(best_ceiling)
        s = ndcg(pools, train, lambda p, r=r, a=w_imp, b=w_rec, c=hl: final(p, r(p), a, b, c))
        boosts.append((s, w_imp, w_rec, hl))
        print(f"  importance {w_imp}, recency {w_rec}, half-life {hl} h: {s:.4f}")

    print("\ntest nDCG@10 (dated store):")
    for label, cfg in (("best on train", best_rel), ("best with the ceiling", best_ceiling)):
        print(f"  {label} {cfg}: {ndcg(pools, test, rel_of(cfg)):.4f}")
    for _, w_imp, w_rec, hl in (b for b in boosts if b[2] in (0.1, 0.2) and b[1] == 0.1):
        r = rel_of(best_ceiling)
        s = ndcg(pools, test, lambda p, r=r, a=w_imp, b=w_rec, c=hl: final(p, r(p), a, b, c))
        print(f"  ceiling + importance {w_imp}, recency {w_rec}, half-life {hl} h: {s:.4f}")


if __name__ == "__main__":
    main()
