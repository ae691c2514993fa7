"""A memory that asks ("What is the Porto weather like?") seldom holds its answer, though
it says the query's words: in weighted fusion it loses ``question_weight`` of its relevance,
in proportion to how much of its text asks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import StoreFactory, WordHashEmbedder, reopen_older_snapshot
from memlane import Memory, OnnxEmbedder
from memlane._core import DEFAULT_QUESTION_WEIGHT
from memlane.errors import InvalidArgumentError

NEAR = np.array([1.0, 0.0], dtype=np.float32)

#: How much of each text asks, in 255ths (rust/core/src/engine/records.rs,
#: `question_share`): all of it, none, and 7 of 20 characters.
ASKS, TELLS, BOTH = "Porto weather?", "Porto weather.", "I went to Porto! And you?"
SHARE = {ASKS: 1.0, TELLS: 0.0, BOTH: 90 / 255}


def _add(mem: Memory, texts: list[str], session: str | None = None) -> list[str]:
    rows = [{"text": t, "embedding": NEAR, "session_id": session} for t in texts]
    return [r.id for r in mem.add_many(rows)]


def _search(mem: Memory, **kw: Any) -> dict[str, Any]:
    hits = mem.search(
        "porto weather", k=10, query_embedding=NEAR, weights={"relevance": 1}, explain=True, **kw
    )
    return {h.record.id: h for h in hits}


@pytest.fixture
def mem(make_store: StoreFactory) -> Memory:
    return make_store(
        "questions", WordHashEmbedder(dimension=2), track_access=False, dedup_window=0
    )


def test_a_memory_that_asks_ranks_below_one_that_tells_the_same(mem: Memory) -> None:
    asks, tells, both = _add(mem, [ASKS, TELLS, BOTH])
    off = _search(mem, question_weight=0.0)
    # The same words and the same vector: alike but for the question mark.
    assert off[asks].score == pytest.approx(off[tells].score)
    hits = _search(mem)
    assert next(iter(hits)) == tells
    for id_, text in ((asks, ASKS), (tells, TELLS), (both, BOTH)):
        assert hits[id_].explain["question"] == pytest.approx(SHARE[text])
        assert off[id_].explain["question"] is None
        lost = 1 - DEFAULT_QUESTION_WEIGHT * SHARE[text]
        assert hits[id_].explain["relevance"] == pytest.approx(off[id_].explain["relevance"] * lost)
    full = _search(mem, question_weight=1.0)
    assert full[asks].explain["relevance"] == pytest.approx(0.0)


def test_a_link_or_a_number_asks_nothing(mem: Memory) -> None:
    link, number = _add(
        mem,
        ["The porto weather is at https://w.example/porto?day=1 today.", "Porto weather: 3.5?1"],
    )
    hits = _search(mem)
    assert hits[link].explain["question"] == 0.0
    assert hits[number].explain["question"] == 0.0


@pytest.mark.parametrize(
    "kw", [{"mode": "text"}, {"mode": "vector"}, {"fusion": "rrf"}, {"question_weight": 0.0}]
)
def test_rank_fusion_and_one_retriever_alone_do_not_weigh_questions(
    mem: Memory, kw: dict[str, Any]
) -> None:
    asks, tells = _add(mem, [ASKS, TELLS])
    hits, off = _search(mem, **kw), _search(mem, **{**kw, "question_weight": 0.0})
    for id_ in (asks, tells):
        assert hits[id_].explain["question"] is None
        assert hits[id_].score == off[id_].score


def test_what_a_memory_asks_follows_its_text(mem: Memory) -> None:
    (id_,) = _add(mem, [ASKS], session="s")
    assert _search(mem)[id_].explain["question"] == pytest.approx(1.0)
    mem.update(id_, text=TELLS)
    assert _search(mem)[id_].explain["question"] == 0.0
    mem.update(id_, text=BOTH)
    assert _search(mem)[id_].explain["question"] == pytest.approx(SHARE[BOTH])
    mem.update(id_, metadata={"seen": True})  # no new text: the share stays
    assert _search(mem)[id_].explain["question"] == pytest.approx(SHARE[BOTH])
    mem.delete(id_)
    (again,) = _add(mem, [TELLS])  # a freed slot starts from the new text
    assert _search(mem)[again].explain["question"] == 0.0


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan"), "0.08"])
def test_a_bad_question_weight_is_refused(mem: Memory, bad: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="question_weight"):
        mem.search("porto", question_weight=bad)


def test_a_store_whose_snapshot_holds_only_whether_texts_ask_is_rebuilt(
    tmp_path: Path,
) -> None:
    store = tmp_path / "store"
    with Memory(store, WordHashEmbedder(dimension=2), track_access=False) as mem:
        (both,) = _add(mem, [BOTH])
        mem.wait_indexed()
    with reopen_older_snapshot(store, WordHashEmbedder(dimension=2), track_access=False) as mem:
        assert _search(mem)[both].explain["question"] == pytest.approx(SHARE[BOTH])


def test_the_default_model_weighs_a_question_below_its_answer(
    tmp_path: Path, onnx_embedder: OnnxEmbedder
) -> None:
    with Memory(tmp_path / "store", onnx_embedder, dedup_window=0) as mem:
        texts = [
            "What's the name of my dentist again?",
            "My dentist is Dr. Alvarez on Main Street.",
            "I need to book a haircut for Friday.",
            "The museum reopened after the renovation.",
        ]
        ids = [r.id for r in mem.add_many([{"text": t, "speaker": "user"} for t in texts])]
        query = "who is my dentist?"
        off = {h.record.id: h for h in mem.search(query, k=4, question_weight=0.0)}
        on = {h.record.id: h for h in mem.search(query, k=4, explain=True)}
        asked, told = ids[0], ids[1]
        assert on[asked].score == pytest.approx(off[asked].score * (1 - DEFAULT_QUESTION_WEIGHT))
        assert on[told].score == pytest.approx(off[told].score)
        assert on[asked].score - on[told].score < off[asked].score - off[told].score
