"""Search scores against hand-computed values: decay, evergreen, recency, composite, fusion."""

from __future__ import annotations

import math
import time
from pathlib import Path

import pytest

from conftest import WordHashEmbedder
from memlane import Memory

HOUR = 3600.0


@pytest.fixture
def mem() -> Memory:
    # Exact vectors, so scores can be held to the formulas at 1e-5.
    m = Memory(None, WordHashEmbedder(), track_access=False, dedup_window=0, hnsw_precision="f32")
    yield m
    m.close()


def _add(mem: Memory, text: str, hours_ago: float, **kw: object) -> str:
    return mem.add(text, created_at=time.time() - hours_ago * HOUR, **kw).id  # type: ignore[arg-type]


def _by_id(hits: list) -> dict:  # type: ignore[type-arg]
    return {h.record.id: h for h in hits}


def test_decay_and_evergreen(mem: Memory) -> None:
    emb = WordHashEmbedder()
    old = _add(mem, "alpha beta", 100)
    new = _add(mem, "alpha beta", 1, agent_id="x")
    pinned = _add(mem, "alpha beta", 1000, evergreen=True, agent_id="y")
    hits = _by_id(
        mem.search(
            "alpha beta",
            k=10,
            mode="vector",
            query_embedding=emb.embed("alpha beta"),
            weights={"relevance": 1.0},
            decay=0.01,
            explain=True,
        )
    )
    # cosine 1: the score is the decay factor exp(-0.01 * hours).
    assert hits[old].score == pytest.approx(math.exp(-0.01 * 100), abs=1e-5)
    assert hits[new].score == pytest.approx(math.exp(-0.01 * 1), abs=1e-5)
    assert hits[pinned].score == pytest.approx(1.0, abs=1e-6)
    assert hits[pinned].explain["decay"] == 1.0 and hits[pinned].explain["recency"] == 1.0
    assert hits[old].explain["decay"] == pytest.approx(math.exp(-1.0), abs=1e-5)


def test_composite_by_hand(mem: Memory) -> None:
    emb = WordHashEmbedder()
    a = _add(mem, "gamma delta", 48, importance=0.9)
    b = _add(mem, "gamma epsilon", 6, importance=0.2)
    q = emb.embed("gamma delta")
    cos_b = float(emb.embed("gamma epsilon") @ q)
    w = {"relevance": 0.5, "importance": 0.3, "recency": 0.2}
    hits = _by_id(
        mem.search(
            "gamma",
            mode="vector",
            query_embedding=q,
            weights=w,
            decay=0.001,
            recency_half_life=24,
            explain=True,
        )
    )

    def expected(cos: float, hours: float, importance: float) -> float:
        decay = math.exp(-0.001 * hours)
        recency = 0.5 ** (hours / 24)
        return 0.5 * max(cos, 0.0) * decay + 0.3 * importance + 0.2 * recency

    assert hits[a].score == pytest.approx(expected(1.0, 48, 0.9), abs=1e-5)
    assert hits[b].score == pytest.approx(expected(cos_b, 6, 0.2), abs=1e-5)
    assert hits[b].explain["recency"] == pytest.approx(0.5**0.25, abs=1e-5)


def test_no_double_penalty(mem: Memory) -> None:
    emb = WordHashEmbedder()
    r = _add(mem, "zeta eta", 200, importance=0.4)
    q = emb.embed("zeta eta")
    # Decay on, weights left to the defaults: recency weighs 0.
    h = mem.search("zeta", mode="vector", query_embedding=q, decay=0.002)[0]
    assert h.record.id == r
    assert h.score == pytest.approx(0.5 * math.exp(-0.002 * 200) + 0.3 * 0.4, abs=1e-5)
    # Decay off: the default recency weight 0.2 with a one-week half-life.
    h = mem.search("zeta", mode="vector", query_embedding=q, decay=0)[0]
    assert h.score == pytest.approx(0.5 + 0.3 * 0.4 + 0.2 * 0.5 ** (200 / 168), abs=1e-5)
    # Decay on with a recency weight the caller set: both apply.
    h = mem.search(
        "zeta",
        mode="vector",
        query_embedding=q,
        decay=0.002,
        weights={"relevance": 0.5, "recency": 0.5},
    )[0]
    assert h.score == pytest.approx(0.5 * math.exp(-0.4) + 0.5 * 0.5 ** (200 / 168), abs=1e-5)


def test_hybrid_rrf_and_thresholds(mem: Memory) -> None:
    for text in ("red apple pie", "green apple tart", "red wine", "blue sky"):
        _add(mem, text, 0)
    hits = mem.search("red apple", k=4, explain=True, weights={"relevance": 1.0}, decay=0)
    lists = 2
    for h in hits:
        e = h.explain
        assert e is not None
        ranks = [r for r in (e["bm25_rank"], e["vector_rank"]) if r is not None]
        rrf = sum(1 / (60 + r) for r in ranks) / (lists / 61)
        assert e["relevance"] == pytest.approx(rrf, abs=1e-9)
        assert h.score == pytest.approx(rrf, abs=1e-9)
    assert hits[0].record.text == "red apple pie"
    assert hits[0].explain["bm25_rank"] == 1 and hits[0].explain["vector_rank"] == 1
    # rrf_k is a parameter.
    top = mem.search("red apple", k=1, rrf_k=0, explain=True, weights={"relevance": 1.0})[0]
    assert top.score == pytest.approx(1.0)
    # threshold drops final scores below it.
    cut = mem.search("red apple", k=4, threshold=hits[1].score, weights={"relevance": 1.0}, decay=0)
    assert [h.record.id for h in cut] == [h.record.id for h in hits[:2]]
    # Weighted fusion: alpha * cosine + (1 - alpha) * bm25 / best bm25.
    w = mem.search(
        "red apple", k=4, fusion="weighted", alpha=0.3, explain=True, weights={"relevance": 1.0}
    )
    best = max(h.explain["bm25"] for h in w)
    for h in w:
        e = h.explain
        expected = 0.3 * max(e["cosine"], 0) + 0.7 * e["bm25"] / best
        assert e["relevance"] == pytest.approx(expected, abs=1e-6)


def test_recall_refreshes_decay(tmp_path: Path) -> None:
    with Memory(tmp_path / "s", WordHashEmbedder(), dedup_window=0) as mem:
        r = mem.add("theta iota", created_at=time.time() - 500 * HOUR)
        first = mem.search("theta", decay=0.01, weights={"relevance": 1.0}, explain=True)[0]
        assert first.explain["decay"] == pytest.approx(math.exp(-5.0), abs=1e-4)
        assert first.record.access_count == 1
        second = mem.search("theta", decay=0.01, weights={"relevance": 1.0}, explain=True)[0]
        assert second.explain["decay"] == pytest.approx(1.0, abs=1e-4)
        assert mem.get(r.id).access_count == 2
        # Turned off per call: nothing recorded.
        mem.search("theta", track_access=False)
        assert mem.get(r.id).access_count == 2


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
