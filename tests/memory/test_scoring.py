"""Search scores: the documented formula (docs/search.md, "How scores are computed") held
to a Python reference, and the behaviour it promises: relevance first at any age, recency
and importance reordering near-ties, evergreen memories that do not age."""

from __future__ import annotations

import math
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import WordHashEmbedder
from memlane import Memory, OnnxEmbedder, analyze
from memlane._core import (
    DEFAULT_ALPHA,
    DEFAULT_IMPORTANCE_WEIGHT,
    DEFAULT_RECENCY_HALF_LIFE_HOURS,
    DEFAULT_RECENCY_WEIGHT,
    DEFAULT_RELEVANCE_WEIGHT,
)

HOUR = 3600.0
YEAR = 365 * 24 * HOUR


@pytest.fixture
def mem() -> Any:
    # Exact vectors, so scores can be held to the formulas at 1e-5.
    m = Memory(None, WordHashEmbedder(), track_access=False, dedup_window=0, hnsw_precision="f32")
    yield m
    m.close()


def _add(mem: Memory, text: str, hours_ago: float, **kw: Any) -> str:
    return mem.add(text, created_at=time.time() - hours_ago * HOUR, **kw).id


def _by_id(hits: list[Any]) -> dict[str, Any]:
    return {h.record.id: h for h in hits}


def ceiling(texts: list[str], query: str) -> float:
    """The BM25 score no document reaches: Σ idf over the query's terms found in the store."""
    df: Counter[str] = Counter()
    for t in texts:
        df.update(set(analyze(t)))
    n = len(texts)
    return sum(math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5)) for t in analyze(query) if df[t] > 0)


def reference(
    records: list[dict[str, Any]],
    cos: dict[str, float],
    bm25: dict[str, float],
    ceil: float,
    *,
    mode: str,
    alpha: float,
    weights: dict[str, float] | None,
    rate: float,
    clock: float | None = None,
) -> dict[str, dict[str, float]]:
    """The documented formula, written out independently of the engine (``clock``: the
    search's time, where ages count to with an explicit decay)."""
    w = weights or {
        "relevance": DEFAULT_RELEVANCE_WEIGHT,
        "importance": DEFAULT_IMPORTANCE_WEIGHT,
        "recency": DEFAULT_RECENCY_WEIGHT,
    }
    w_rel, w_imp, w_rec = (w.get(k, 0.0) for k in ("relevance", "importance", "recency"))
    newest = clock if clock is not None else max(r["last_accessed_at"] for r in records)
    any_bm25 = any(v > 0 for v in bm25.values())
    out = {}
    for r in records:
        c = max(0.0, min(1.0, cos[r["id"]]))
        b = bm25[r["id"]] / ceil if ceil > 0 else 0.0
        if mode == "vector":
            rel = c
        elif mode == "text":
            rel = b
        else:
            rel = alpha * c + (1 - alpha) * b if any_bm25 else c
        age = max(0.0, newest - r["last_accessed_at"]) / HOUR
        rec = 1.0 if r["evergreen"] or rate == 0 else math.exp(-rate * age)
        boost = (w_rel + w_imp * r["importance"] + w_rec * rec) / (w_rel + w_imp + w_rec)
        out[r["id"]] = {"relevance": rel, "recency": rec, "age_hours": age, "boost": boost}
        out[r["id"]]["score"] = rel * boost
    return out


WORDS = ["red", "apple", "pie", "green", "tart", "wine", "sky", "blue", "stone", "river"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    docs=st.lists(
        st.tuples(
            st.lists(st.sampled_from(WORDS), min_size=1, max_size=6),
            st.floats(0, 1),  # importance
            st.booleans(),  # evergreen
            st.floats(0, 2000),  # hours ago
        ),
        min_size=1,
        max_size=12,
    ),
    query=st.lists(st.sampled_from([*WORDS, "absent"]), min_size=1, max_size=4),
    mode=st.sampled_from(["hybrid", "vector", "text"]),
    alpha=st.floats(0, 1),
    weights=st.one_of(
        st.none(),
        st.fixed_dictionaries(
            {"relevance": st.floats(0.01, 2)},
            optional={"importance": st.floats(0, 2), "recency": st.floats(0, 2)},
        ),
    ),
    decay=st.one_of(st.none(), st.floats(0, 0.1)),
    half_life=st.floats(1, 5000),
)
def test_scores_match_the_reference_formula(
    docs: list[tuple[list[str], float, bool, float]],
    query: list[str],
    mode: str,
    alpha: float,
    weights: dict[str, float] | None,
    decay: float | None,
    half_life: float,
) -> None:
    emb = WordHashEmbedder()
    now = time.time()
    q = " ".join(query)
    with Memory(None, emb, track_access=False, dedup_window=0, hnsw_precision="f32") as m:
        recs = m.add_many(
            [
                {
                    "text": " ".join(words),
                    "importance": imp,
                    "evergreen": ever,
                    "created_at": now - hours * HOUR,
                }
                for words, imp, ever, hours in docs
            ]
        )
        # Every record is a candidate: the vector list holds them all.
        before = time.time()
        hits = m.search(
            q,
            k=len(recs),
            mode=mode,  # type: ignore[arg-type]
            candidates=len(recs),
            alpha=alpha,
            weights=weights,
            decay=decay,
            recency_half_life=half_life,
            explain=True,
        )
        during = time.time() - before  # the search's clock lies in [before, before + during]
        if mode == "text":
            # Only documents with a query term are retrieved.
            assert {h.record.id for h in hits} <= {r.id for r in recs}
            if not hits:
                return
        else:
            assert len(hits) == len(recs)
        records = [
            {
                "id": r.id,
                "importance": r.importance,
                "evergreen": r.evergreen,
                "last_accessed_at": r.last_accessed_at,
            }
            for r in recs
            if mode != "text" or r.id in {h.record.id for h in hits}
        ]
        qv = emb.embed(q)
        cos = {r.id: float(emb.embed(r.text) @ qv) for r in recs}
        bm25 = {h.record.id: float(h.explain["bm25"] or 0.0) for h in hits}
        rate = decay if decay is not None else math.log(2) / half_life
        ref = reference(
            records,
            cos,
            bm25,
            ceiling([r.text for r in recs], q),
            mode=mode,
            alpha=alpha,
            weights=weights,
            rate=rate,
            clock=None if decay is None else before,
        )
    slack = 0.0 if decay is None else during / HOUR
    for h in hits:
        e, want = h.explain, ref[h.record.id]
        assert e is not None
        if mode != "text":
            assert e["cosine"] == pytest.approx(cos[h.record.id], abs=1e-5)
        assert want["age_hours"] - 1e-5 <= e["age_hours"] <= want["age_hours"] + slack + 1e-5
        for key in ("relevance", "recency", "boost", "score"):
            tol = 1e-5 + (rate * slack if key != "relevance" else 0.0)
            assert e[key] == pytest.approx(want[key], rel=1e-5, abs=tol), key
        assert h.score == pytest.approx(e["score"], abs=1e-12)
        assert e["score"] <= e["relevance"] + 1e-9
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True)


def test_newer_of_two_equally_relevant_ranks_first_and_evergreen_keeps_its_rank(
    mem: Memory,
) -> None:
    old = _add(mem, "the train leaves from platform nine", 24 * 200, agent_id="a")
    new = _add(mem, "the train leaves from platform nine", 24 * 2, agent_id="b")
    hits = mem.search("which platform does the train leave from", k=2)
    assert [h.record.id for h in hits] == [new, old]
    assert hits[0].explain is None and hits[0].score > hits[1].score
    # The same text stored as evergreen long ago does not age.
    pinned = _add(
        mem, "the train leaves from platform nine", 24 * 400, agent_id="c", evergreen=True
    )
    hits = mem.search("which platform does the train leave from", k=3, explain=True)
    top = _by_id(hits)
    assert top[pinned].explain["recency"] == 1.0
    assert top[pinned].score == pytest.approx(top[new].score, abs=1e-6)
    assert hits[-1].record.id == old


def test_ages_count_from_the_newest_candidate_not_the_clock(mem: Memory) -> None:
    a = _add(mem, "kappa lambda", 24 * 365 * 3)
    b = _add(mem, "kappa lambda mu", 24 * 365 * 3 + 720)
    hits = _by_id(mem.search("kappa lambda", k=2, explain=True))
    # Three years old, but the newest candidate: full recency.
    assert hits[a].explain["age_hours"] == pytest.approx(0.0, abs=1e-6)
    assert hits[a].explain["recency"] == pytest.approx(1.0)
    assert hits[b].explain["age_hours"] == pytest.approx(720.0, abs=1e-3)
    half = DEFAULT_RECENCY_HALF_LIFE_HOURS
    assert hits[b].explain["recency"] == pytest.approx(0.5 ** (720.0 / half), abs=1e-6)


def test_an_explicit_decay_is_nous_clock_decay_with_evergreen_exempt(mem: Memory) -> None:
    """Two identical memories 2,000 hours old, one evergreen: with ``decay=0.001`` the
    evergreen one ranks first (ages counted to now; counted from the newest candidate,
    both were 0 hours old and tied). Without a decay, the default still ties them."""
    plain = _add(mem, "the spare key is under the blue flowerpot", 2000, agent_id="a")
    pinned = _add(
        mem, "the spare key is under the blue flowerpot", 2000, agent_id="b", evergreen=True
    )
    hits = mem.search("where is the spare key", k=2, decay=0.001, explain=True)
    assert [h.record.id for h in hits] == [pinned, plain]
    by = _by_id(hits)
    assert by[plain].explain["age_hours"] == pytest.approx(2000.0, abs=1e-2)
    assert by[plain].explain["recency"] == pytest.approx(math.exp(-2.0), abs=1e-4)
    assert by[pinned].explain["recency"] == 1.0
    assert hits[0].score > hits[1].score
    tied = _by_id(mem.search("where is the spare key", k=2, explain=True))
    assert tied[plain].score == pytest.approx(tied[pinned].score, abs=1e-9)


def test_weights_decay_and_half_life_are_the_documented_knobs(mem: Memory) -> None:
    emb = WordHashEmbedder()
    a = _add(mem, "gamma delta", 48, importance=0.9)
    b = _add(mem, "gamma epsilon", 6, importance=0.2)
    q = emb.embed("gamma delta")
    cos_b = float(emb.embed("gamma epsilon") @ q)
    w = {"relevance": 0.5, "importance": 0.3, "recency": 0.2}
    common = {"mode": "vector", "query_embedding": q, "weights": w, "explain": True}
    by_half_life = _by_id(mem.search("gamma", recency_half_life=24, **common))
    by_decay = _by_id(mem.search("gamma", decay=0.01, **common))
    no_age = _by_id(mem.search("gamma", decay=0, **common))
    # a is 42 hours older than b, the newest candidate; with an explicit decay, ages
    # count to now, where a is 48 hours old.
    assert by_half_life[a].explain["recency"] == pytest.approx(0.5 ** (42 / 24), abs=1e-5)
    assert by_decay[a].explain["recency"] == pytest.approx(math.exp(-0.48), abs=1e-5)
    assert by_decay[b].explain["age_hours"] == pytest.approx(6.0, abs=1e-3)
    assert no_age[a].explain["recency"] == 1.0
    rec = 0.5 ** (42 / 24)
    assert by_half_life[a].score == pytest.approx(1.0 * (0.5 + 0.3 * 0.9 + 0.2 * rec), abs=1e-5)
    assert by_half_life[b].score == pytest.approx(cos_b * (0.5 + 0.3 * 0.2 + 0.2), abs=1e-5)
    # Relevance alone is exactly the relevance.
    only = mem.search("gamma", mode="vector", query_embedding=q, weights={"relevance": 1})
    assert [h.score for h in only] == pytest.approx([1.0, max(cos_b, 0.0)], abs=1e-5)


@pytest.mark.parametrize("scale", [0.1, 1e300, 3.5e307])
def test_only_the_ratio_of_the_weights_counts_however_large(mem: Memory, scale: float) -> None:
    """Each weight finite, their sum not: three of 1e308 made every score NaN."""
    emb = WordHashEmbedder()
    a = _add(mem, "gamma delta", 48, importance=0.9)
    b = _add(mem, "gamma epsilon", 6, importance=0.2)
    q = emb.embed("gamma delta")
    # At the last scale each is finite (1.75e308 at most) and their sum is not.
    w = {k: v * scale for k, v in {"relevance": 5, "importance": 3, "recency": 2}.items()}
    common = {"mode": "vector", "query_embedding": q, "recency_half_life": 24}
    hits = mem.search("gamma", weights=w, **common)
    assert [h.record.id for h in hits] == [a, b]
    ratio = {"relevance": 5, "importance": 3, "recency": 2}
    same = mem.search("gamma", weights=ratio, **common)
    assert [h.score for h in hits] == pytest.approx([h.score for h in same], abs=1e-9)


def test_importance_reorders_near_ties_and_relevance_alone_ignores_it(mem: Memory) -> None:
    emb = WordHashEmbedder()
    text = "omega sigma tau rho pi nu mu xi"
    q = emb.embed(text)
    plain = _add(mem, text, 1, importance=0.1)
    important = _add(mem, text + " chi", 1, importance=1.0)
    cos_important = float(emb.embed(text + " chi") @ q)
    # Similar, not equal: within the band importance may reorder (0.92 = 1.03 / 1.12).
    assert 0.92 < cos_important < 1.0
    hits = mem.search("omega", mode="vector", query_embedding=q, k=2)
    assert [h.record.id for h in hits] == [important, plain]
    hits = mem.search("omega", mode="vector", query_embedding=q, k=2, weights={"relevance": 1})
    assert [h.record.id for h in hits] == [plain, important]
    assert hits[0].score == pytest.approx(1.0, abs=1e-5)
    assert hits[1].score == pytest.approx(cos_important, abs=1e-5)


def test_hybrid_fusion_by_hand(mem: Memory) -> None:
    texts = ("red apple pie", "green apple tart", "red wine", "blue sky")
    for text in texts:
        _add(mem, text, 0)
    ceil = ceiling(list(texts), "red apple")
    # Weighted (the default): alpha * cosine + (1 - alpha) * bm25 / ceiling.
    for alpha in (DEFAULT_ALPHA, 0.3):
        hits = mem.search("red apple", k=4, alpha=alpha, explain=True, weights={"relevance": 1})
        assert hits[0].record.text == "red apple pie"
        for h in hits:
            e = h.explain
            expected = alpha * max(e["cosine"], 0) + (1 - alpha) * e["bm25"] / ceil
            assert e["relevance"] == pytest.approx(expected, abs=1e-6)
            assert h.score == pytest.approx(expected, abs=1e-6)
    # RRF on request: the rank-based relevance.
    hits = mem.search("red apple", k=4, fusion="rrf", explain=True, weights={"relevance": 1})
    for h in hits:
        e = h.explain
        ranks = [r for r in (e["bm25_rank"], e["vector_rank"]) if r is not None]
        assert e["relevance"] == pytest.approx(sum(1 / (60 + r) for r in ranks) / (2 / 61))
    top = mem.search("red apple", k=1, fusion="rrf", rrf_k=0, weights={"relevance": 1})[0]
    assert top.score == pytest.approx(1.0)
    # threshold drops scores below it.
    hits = mem.search("red apple", k=4, weights={"relevance": 1})
    cut = mem.search("red apple", k=4, threshold=hits[1].score, weights={"relevance": 1})
    assert [h.record.id for h in cut] == [h.record.id for h in hits[:2]]


def test_recall_refreshes_recency(tmp_path: Path) -> None:
    with Memory(tmp_path / "s", WordHashEmbedder(), dedup_window=0) as mem:
        r = mem.add("theta iota", created_at=time.time() - 500 * HOUR)
        mem.add("theta kappa", created_at=time.time() - HOUR)
        first = _by_id(mem.search("theta", explain=True))[r.id]
        assert first.explain["age_hours"] == pytest.approx(499, abs=1e-2)
        assert first.record.access_count == 1
        # The search made both the newest: neither is older now.
        second = _by_id(mem.search("theta", explain=True))[r.id]
        assert second.explain["recency"] == pytest.approx(1.0, abs=1e-4)
        # With a clock-based decay, a recall is an access a moment ago.
        third = _by_id(mem.search("theta", decay=0.01, explain=True))[r.id]
        assert third.explain["age_hours"] == pytest.approx(0.0, abs=1e-3)
        assert mem.get(r.id).access_count == 3
        # Turned off per call: nothing recorded.
        mem.search("theta", track_access=False)
        assert mem.get(r.id).access_count == 3


def test_invalid_knobs_are_refused(mem: Memory) -> None:
    from memlane.errors import InvalidArgumentError

    _add(mem, "alpha", 0)
    for bad in (
        {"weights": {"relevance": 0}},
        {"weights": {"novelty": 1}},
        {"decay": -1},
        {"recency_half_life": 0},
        {"alpha": 1.5},
        {"fusion": "max"},
    ):
        with pytest.raises(InvalidArgumentError):
            mem.search("alpha", **bad)


def test_default_model_relevant_memory_from_a_year_ago_beats_an_irrelevant_one_today(
    onnx_embedder: OnnxEmbedder,
) -> None:
    with Memory(None, onnx_embedder, dedup_window=0) as mem:
        now = time.time()
        mem.add("Bob is allergic to peanuts", created_at=now - YEAR, importance=0.3)
        mem.add("The nightly backup failed at 2am", created_at=now, importance=0.9)
        mem.add("Alice prefers dark mode", created_at=now, importance=0.9)
        mem.add("The team meeting moved to Thursday", created_at=now, importance=0.9)
        hits = mem.search("who can't eat nuts", k=4)
        assert hits[0].record.text == "Bob is allergic to peanuts"
        # Scores say how well a hit matches: the answer stands apart from the rest,
        # and a relevance-scale threshold keeps it alone.
        assert hits[0].score > 2 * hits[1].score
        cut = mem.search("who can't eat nuts", k=4, threshold=0.3)
        assert [h.record.text for h in cut] == ["Bob is allergic to peanuts"]


@pytest.mark.parametrize("precision", ["int8+f16", "f16", "int8"])
def test_reduced_precision_cosines_stay_near_exact(precision: str) -> None:
    emb = WordHashEmbedder()
    texts = [f"theta iota kappa {i} lambda {i % 7}" for i in range(300)]
    q = emb.embed("theta kappa lambda 3")
    tol = 2e-2 if precision == "int8" else 2e-3
    with Memory(None, emb, dedup_window=0, hnsw_precision=precision) as m:
        m.add_many([{"text": t} for t in texts])
        m.wait_indexed()
        hits = m.search("x", k=20, mode="vector", query_embedding=q, explain=True)
        for h in hits:
            assert h.explain is not None
            exact = float(emb.embed(h.record.text) @ q)
            assert h.explain["cosine"] == pytest.approx(exact, abs=tol)
            assert -1.0 <= h.explain["cosine"] <= 1.0


def test_a_score_does_not_move_when_its_vector_is_linked() -> None:
    emb = WordHashEmbedder()
    texts = [f"lambda mu {i} nu {i % 11}" for i in range(3000)]
    q = emb.embed("lambda nu 4")
    with Memory(None, emb, dedup_window=0, track_access=False) as m:
        m.add_many([{"text": t} for t in texts])
        assert m._engine.pending() > 0  # parked: searched exactly until linked
        parked = m.search("x", k=10, mode="vector", query_embedding=q, explain=True)
        m.wait_indexed()
        linked = m.search("x", k=10, mode="vector", query_embedding=q, explain=True)
        assert [h.record.id for h in linked] == [h.record.id for h in parked]
        for a, b in zip(parked, linked, strict=True):
            assert a.explain is not None and b.explain is not None
            assert b.explain["cosine"] == pytest.approx(a.explain["cosine"], abs=1e-5)


def test_vectors_are_unit_scale_for_the_reference() -> None:
    # The reference above compares cosines as dot products of unit vectors.
    v = WordHashEmbedder().embed("red apple")
    assert float(np.linalg.norm(v)) == pytest.approx(1.0, abs=1e-6)
