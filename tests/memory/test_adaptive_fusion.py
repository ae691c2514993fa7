"""The default fusion weighs the cosine per query: the list whose best hit stands further
above its 30th weighs more. Two stores whose lists disagree the opposite ways: a rare
word only BM25 sees, and an answer only the vectors see among many turns sharing the
query's one word. No fixed alpha ranks both answers first; the default does, on both
backends, and its relevance is the documented formula."""

from __future__ import annotations

import math

import numpy as np
import pytest

from conftest import StoreFactory, WordHashEmbedder
from memlane import Memory
from memlane._core import ADAPTIVE_HIGH as HIGH
from memlane._core import ADAPTIVE_LOW as LOW
from memlane._core import DEFAULT_ALPHA
from memlane._core import SPREAD_RANK as RANK

DIM = WordHashEmbedder().dimension


def vector(cosine: float, axis: int) -> np.ndarray:
    """A unit vector at ``cosine`` to the query's (the first axis)."""
    v = np.zeros(DIM, dtype=np.float32)
    v[0] = cosine
    v[axis] = math.sqrt(1 - cosine * cosine)
    return v


QUERY = vector(1.0, 1)
#: More than RANK turns besides the answers, so each list has a RANK-th.
FILLERS = 34


def rare_word_store(mem: Memory) -> None:
    """BM25 stands out: one turn holds the query's rare word; the vectors are flat, an
    unrelated turn a little above the rest."""
    rare = "we finally booked the zanzibar ferry " + " ".join(f"detail{i}" for i in range(6))
    rows = [
        {"id": "answer", "text": rare, "embedding": vector(0.10, 2)},
        {"id": "nearest", "text": "a warm island holiday", "embedding": vector(0.40, 3)},
    ]
    rows += [
        {
            "id": f"f{i}",
            "text": f"lunch note {i}",
            "embedding": vector(0.36 + 0.001 * i, 4 + i % 20),
        }
        for i in range(FILLERS)
    ]
    mem.add_many(rows)


def common_word_store(mem: Memory) -> None:
    """The vectors stand out: the answer shares no word with the query, which every
    other turn holds once (BM25's list is flat)."""
    rows = [{"id": "answer", "text": "I go climbing with my sister", "embedding": vector(0.62, 2)}]
    rows += [
        {
            "id": f"f{i}",
            "text": f"weekend note {i}",
            "embedding": vector(0.15 + 0.002 * i, 3 + i % 20),
        }
        for i in range(FILLERS)
    ]
    mem.add_many(rows)


def first(mem: Memory, query: str, **options: object) -> str:
    hits = mem.search(query, 1, query_embedding=QUERY, track_access=False, **options)  # type: ignore[arg-type]
    return hits[0].record.id


@pytest.mark.parametrize(
    ("fill", "query", "loses_at"),
    [
        (rare_word_store, "zanzibar", (DEFAULT_ALPHA,)),
        (common_word_store, "weekend", (0.2, DEFAULT_ALPHA)),
    ],
)
def test_the_default_finds_the_answer_where_a_fixed_weight_does_not(
    make_store: StoreFactory, fill: object, query: str, loses_at: tuple[float, ...]
) -> None:
    mem = make_store("fusion", WordHashEmbedder())
    fill(mem)  # type: ignore[operator]
    for stage in ("parked", "linked"):
        assert first(mem, query) == "answer", stage
        for alpha in loses_at:
            assert first(mem, query, alpha=alpha) != "answer", (stage, alpha)
        mem.wait_indexed()


def test_no_fixed_weight_finds_both_answers(make_store: StoreFactory) -> None:
    rare, common = make_store("rare", WordHashEmbedder()), make_store("common", WordHashEmbedder())
    rare_word_store(rare)
    common_word_store(common)
    for alpha in [i / 20 for i in range(21)]:
        found = (first(rare, "zanzibar", alpha=alpha), first(common, "weekend", alpha=alpha))
        assert found != ("answer", "answer"), alpha
    assert (first(rare, "zanzibar"), first(common, "weekend")) == ("answer", "answer")


def test_the_weight_comes_from_the_two_lists_spreads(make_store: StoreFactory) -> None:
    mem = make_store("formula", WordHashEmbedder())
    rare_word_store(mem)
    mem.wait_indexed()
    hits = mem.search("zanzibar", 50, query_embedding=QUERY, explain=True, weights={"relevance": 1})
    assert len(hits) == FILLERS + 2  # every candidate
    ceiling = hits[0].explain["bm25"] / max(  # type: ignore[index,operator]
        h.explain["relevance"]
        for h in mem.search("zanzibar", 1, mode="text", explain=True)  # type: ignore[index]
    )
    cos = [max(h.explain["cosine"], 0.0) for h in hits]  # type: ignore[index,type-var]
    bm = [(h.explain["bm25"] or 0.0) / ceiling for h in hits]  # type: ignore[index,operator]

    def spread(xs: list[float]) -> float:
        ranked = sorted(xs, reverse=True)
        return ranked[0] - ranked[min(RANK, len(ranked)) - 1]

    sc, sb = spread(cos), spread(bm)
    alpha = LOW + (HIGH - LOW) * sc / (sc + sb)
    assert LOW < alpha < DEFAULT_ALPHA  # BM25 stood out: it weighs more than at the fixed 0.5
    for h, c, b in zip(hits, cos, bm, strict=True):
        assert h.explain["relevance"] == pytest.approx(alpha * c + (1 - alpha) * b, abs=1e-6)  # type: ignore[index]
    # A weight given is used as given.
    fixed = mem.search("zanzibar", 50, query_embedding=QUERY, explain=True, alpha=0.3)
    for h in fixed:
        e = h.explain
        assert e is not None
        want = 0.3 * max(e["cosine"], 0.0) + 0.7 * (e["bm25"] or 0.0) / ceiling  # type: ignore[arg-type,operator]
        assert e["relevance"] == pytest.approx(want, abs=1e-6)
