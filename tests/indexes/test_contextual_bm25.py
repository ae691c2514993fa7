"""Contextual BM25: a conversation turn is also scored joined with the previous and the
next turn of its session, so an answer finds the words of the question it answers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import WordHashEmbedder
from memlane import Memory
from memlane._core import DEFAULT_CONTEXT_WEIGHT
from memlane.errors import InvalidArgumentError

T0 = 1_700_000_000.0
QUERY = np.array([1.0, 0.0], dtype=np.float32)


def _vec(cos: float) -> np.ndarray:
    """A unit vector whose cosine with the query is ``cos``."""
    return np.array([cos, np.sqrt(1.0 - cos * cos)], dtype=np.float32)


def _turn(mem: Memory, text: str, session: str, minute: float, cos: float) -> str:
    return mem.add(text, session_id=session, created_at=T0 + 60 * minute, embedding=_vec(cos)).id


def _store(path: Path | None) -> tuple[Memory, dict[str, str]]:
    """The answer ("Yes, every Sunday") shares no word with the query, but the question
    before it does; the beach turn of another session is a hair closer in vector space
    and has no query word near it."""
    mem = Memory(path, WordHashEmbedder(dimension=2), track_access=False, dedup_window=0)
    ids = {
        "question": _turn(mem, "Do you go hiking?", "s1", 0, 0.0),
        "answer": _turn(mem, "Yes, every Sunday morning.", "s1", 1, 0.80),
        "after": _turn(mem, "Nice, see you there.", "s1", 2, 0.0),
        "beach": _turn(mem, "We went to the beach on Sunday.", "s2", 0, 0.82),
        "other": _turn(mem, "Lovely weather today.", "s2", 1, 0.0),
    }
    return mem, ids


def _search(mem: Memory, **kw: Any) -> list[Any]:
    return mem.search(
        "hiking",
        k=5,
        query_embedding=QUERY,
        weights={"relevance": 1},
        explain=True,
        **kw,
    )


def _order(hits: list[Any], ids: dict[str, str]) -> list[str]:
    names = {v: k for k, v in ids.items()}
    return [names[h.record.id] for h in hits]


def _explain(hits: list[Any], id: str) -> dict[str, Any]:
    return next(h.explain for h in hits if h.record.id == id)


def test_an_answer_outranks_an_off_session_turn_through_its_question() -> None:
    mem, ids = _store(None)
    try:
        assert DEFAULT_CONTEXT_WEIGHT > 0
        with_context = _order(_search(mem), ids)
        assert with_context.index("answer") < with_context.index("beach")
        without = _order(_search(mem, context_weight=0.0), ids)
        assert without.index("beach") < without.index("answer")

        hits = _search(mem)
        answer = _explain(hits, ids["answer"])
        assert answer["bm25"] == 0.0
        assert answer["bm25_context"] > 0.0
        assert _explain(hits, ids["beach"])["bm25_context"] == 0.0
    finally:
        mem.close()


def test_records_without_a_session_score_as_they_are() -> None:
    mem = Memory(None, WordHashEmbedder(dimension=2), track_access=False, dedup_window=0)
    try:
        mem.add("hiking boots", embedding=_vec(0.5))
        mem.add("hiking trip", session_id="s", embedding=_vec(0.5))
        by_weight = [
            {h.record.text: (h.score, h.explain) for h in _search(mem, context_weight=w)}
            for w in (0.0, 1.0)
        ]
        for hits in by_weight:
            assert hits["hiking boots"][1]["bm25_context"] is None
            # Alone in its session, a turn's context is itself.
            trip = hits["hiking trip"][1]
            assert trip["bm25_context"] == pytest.approx(trip["bm25"])
        assert by_weight[0]["hiking boots"][0] == by_weight[1]["hiking boots"][0]
    finally:
        mem.close()


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan")])
def test_a_weight_outside_zero_to_one_is_refused(bad: float) -> None:
    mem, _ = _store(None)
    try:
        with pytest.raises(InvalidArgumentError, match="context_weight must be in"):
            _search(mem, context_weight=bad)
        with pytest.raises(InvalidArgumentError, match="context_weight must be a number"):
            _search(mem, context_weight="high")
    finally:
        mem.close()


def test_deleting_the_question_relinks_the_session() -> None:
    mem, ids = _store(None)
    try:
        mem.delete(ids["question"])
        hits = _search(mem)
        assert _explain(hits, ids["answer"])["bm25_context"] == 0.0
        order = _order(hits, ids)
        assert order.index("beach") < order.index("answer")
        # A turn stored later but dated before the answer becomes its neighbour.
        ids["again"] = _turn(mem, "Hiking again this week?", "s1", 0.5, 0.0)
        order = _order(_search(mem), ids)
        assert order.index("answer") < order.index("beach")
    finally:
        mem.close()


def test_the_neighbours_come_back_after_reopening(tmp_path: Path) -> None:
    store = tmp_path / "store"
    mem, ids = _store(store)
    mem.delete(ids["after"])
    before = [(h.record.id, h.explain) for h in _search(mem)]
    mem.snapshot()
    mem.close()
    mem = Memory(store, WordHashEmbedder(dimension=2), track_access=False, dedup_window=0)
    try:
        assert [(h.record.id, h.explain) for h in _search(mem)] == before
    finally:
        mem.close()


def test_a_turn_of_another_user_in_the_same_session_is_no_context() -> None:
    """Scopes are boundaries: bob's question gives alice's answer no words, even where
    the two share a session_id, so a search scoped to alice ranks as if bob's turn did
    not exist."""
    mem = Memory(None, WordHashEmbedder(dimension=2), track_access=False, dedup_window=0)
    try:
        t = T0
        mem.add(
            "Do you go hiking?", session_id="s1", user_id="bob", created_at=t, embedding=_vec(0.0)
        )
        answer = mem.add(
            "Yes, every Sunday morning.",
            session_id="s1",
            user_id="alice",
            created_at=t + 60,
            embedding=_vec(0.80),
        ).id
        hits = mem.search(
            "hiking",
            k=5,
            query_embedding=QUERY,
            user_id="alice",
            weights={"relevance": 1},
            explain=True,
        )
        assert [h.record.id for h in hits] == [answer]
        assert not hits[0].explain["bm25_context"]
    finally:
        mem.close()


def test_a_turn_takes_its_cosine_from_a_nearer_neighbour() -> None:
    """The question turn is far from the query's vector and its answer near: the
    question's cosine takes ``context_weight`` of the gap from its answer's, the answer
    keeps its own, and a turn of no session has none."""
    mem, ids = _store(None)
    with mem:
        none = mem.add("Hiking trails.", embedding=_vec(0.1)).id
        by_id = {h.record.id: h.explain for h in _search(mem, alpha=0.5)}
        question, answer = by_id[ids["question"]], by_id[ids["answer"]]
        assert question["cosine"] == pytest.approx(0.0, abs=1e-6)
        assert question["cosine_context"] == pytest.approx(0.8, abs=1e-3)
        assert answer["cosine_context"] == pytest.approx(0.0, abs=1e-6)
        assert by_id[none]["cosine_context"] is None
        off = {h.record.id: h.explain for h in _search(mem, alpha=0.5, context_weight=0.0)}
        lent = 0.5 * DEFAULT_CONTEXT_WEIGHT * 0.8
        assert question["relevance"] - off[ids["question"]]["relevance"] > lent - 0.02
        # Vector search alone is not lent anything.
        vec = mem.search("hiking", k=5, query_embedding=QUERY, mode="vector", explain=True)
        assert {h.record.id: h.score for h in vec}[ids["question"]] == pytest.approx(0.0, abs=1e-6)
