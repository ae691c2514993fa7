"""A conversation turn that answers the question before it ("Yes, every Sunday morning."
after "Do you go hiking?") takes a share of that question's likeness to the query
(``answer_weight``): the question says what the answer is about."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import StoreFactory, WordHashEmbedder
from memlane import Memory, OnnxEmbedder
from memlane._core import DEFAULT_ANSWER_WEIGHT
from memlane.errors import InvalidArgumentError

NEAR = np.array([1.0, 0.0], dtype=np.float32)
FAR = np.array([0.0, 1.0], dtype=np.float32)
#: A cosine of 0.6 to the query: above the answer's own, below its question's.
MID = np.array([0.6, 0.8], dtype=np.float32)


def _turns(mem: Memory, turns: list[tuple[str, np.ndarray]], session: str = "s") -> list[str]:
    rows = [
        {"text": t, "embedding": v, "session_id": session, "created_at": 1.7e9 + i}
        for i, (t, v) in enumerate(turns)
    ]
    return [r.id for r in mem.add_many(rows)]


def _search(mem: Memory, **kw: Any) -> dict[str, Any]:
    hits = mem.search(
        "unrelated words",
        k=10,
        query_embedding=NEAR,
        weights={"relevance": 1},
        context_weight=0.0,
        question_weight=0.0,  # the questions' own weight apart
        alpha=0.5,
        explain=True,
        **kw,
    )
    return {h.record.id: h for h in hits}


@pytest.fixture
def mem(make_store: StoreFactory) -> Memory:
    return make_store("answers", WordHashEmbedder(dimension=2), track_access=False, dedup_window=0)


def test_an_answer_takes_a_share_of_the_question_before_it(mem: Memory) -> None:
    question, answer, reply = _turns(
        mem, [("Do you go hiking?", NEAR), ("Yes, every Sunday morning.", FAR), ("Me too.", FAR)]
    )
    (other,) = mem.add_many([{"text": "A record outside any session.", "embedding": MID}])
    off = _search(mem, answer_weight=0.0)
    hits = _search(mem)
    assert hits[answer].explain["cosine_asked"] == pytest.approx(1.0)
    # The question asks, the reply follows an answer, the record has no session.
    for plain in (question, reply, other.id):
        assert hits[plain].explain["cosine_asked"] is None
        assert hits[plain].score == pytest.approx(off[plain].score)
    w = DEFAULT_ANSWER_WEIGHT
    assert off[answer].explain["relevance"] == pytest.approx(0.0, abs=1e-6)
    # No word of the query is stored: the relevance is the cosine lent.
    assert hits[answer].explain["relevance"] == pytest.approx(w, abs=1e-6)
    # At 1 the answer ranks with its question, above the record the model finds nearer.
    full = _search(mem, answer_weight=1.0)
    assert full[answer].score == pytest.approx(full[question].score)
    assert full[answer].score > full[other.id].score


def test_a_reply_that_asks_and_a_turn_after_a_statement_take_nothing(mem: Memory) -> None:
    ids = _turns(
        mem,
        [
            ("Do you go hiking?", NEAR),
            ("Do you?", FAR),  # a question back: it answers nothing
            ("I went hiking once.", NEAR),  # it answers "Do you?", whose cosine is 0
            ("Nice.", FAR),  # after a statement
        ],
    )
    hits = _search(mem)
    assert [hits[i].explain["cosine_asked"] for i in ids] == [None, None, 0.0, None]
    assert hits[ids[1]].score == pytest.approx(_search(mem, answer_weight=0.0)[ids[1]].score)


def test_what_an_answer_takes_follows_rewrites_removals_and_scopes(mem: Memory) -> None:
    question, answer = _turns(mem, [("Where did you go?", NEAR), ("To Porto.", FAR)])
    assert _search(mem)[answer].explain["cosine_asked"] == pytest.approx(1.0)
    mem.update(question, text="I went away.")
    assert _search(mem)[answer].explain["cosine_asked"] is None
    mem.update(question, text="Where did you go?")
    asked = _search(mem)[answer].explain["cosine_asked"]  # the new text's vector's
    assert asked is not None
    mem.update(question, metadata={"seen": True})  # no new text: the mark stays
    assert _search(mem)[answer].explain["cosine_asked"] == pytest.approx(asked)
    # Another session's question is no turn before it.
    (elsewhere,) = _turns(mem, [("Fine, thanks.", FAR)], session="t")
    assert _search(mem)[elsewhere].explain["cosine_asked"] is None
    mem.delete(question)
    assert _search(mem)[answer].explain["cosine_asked"] is None


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan"), "0.4"])
def test_a_bad_answer_weight_is_refused(mem: Memory, bad: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="answer_weight"):
        mem.search("hiking", answer_weight=bad)


def test_the_default_model_finds_an_answer_through_its_question(
    tmp_path: Path, onnx_embedder: OnnxEmbedder
) -> None:
    with Memory(tmp_path / "store", onnx_embedder, dedup_window=0) as mem:
        texts = [
            "How long have you been painting?",
            "For about three years now, mostly on weekends.",
            "The museum downtown reopened after the renovation.",
            "My cousin bought a new bicycle for the race.",
            "We should grab dinner somewhere new next week.",
        ]
        rows = [
            {"text": t, "session_id": "s", "speaker": "ana" if i % 2 else "bo"}
            for i, t in enumerate(texts)
        ]
        ids = [r.id for r in mem.add_many(rows)]
        query = "How many years has Ana been painting?"
        off = mem.search(query, k=5, answer_weight=0.0, explain=True)
        on = mem.search(query, k=5, explain=True)
        answer = {h.record.id: h for h in on}[ids[1]]
        before = {h.record.id: h for h in off}[ids[1]]
        assert answer.explain is not None and before.explain is not None
        assert answer.explain["cosine_asked"] is not None
        assert answer.explain["cosine_asked"] > answer.explain["cosine"]
        assert answer.score > before.score
