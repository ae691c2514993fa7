"""A question that asks when ("When did Maria adopt Shadow?") lifts the memories whose
text tells a time ("I adopted her last week"): the engine's when pass (``when_weight``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from conftest import StoreFactory, WordHashEmbedder
from memlane import Memory
from memlane._core import DEFAULT_WHEN_WEIGHT
from memlane.errors import InvalidArgumentError

QUERY = np.array([1.0, 0.0], dtype=np.float32)


def _memory(make_store: StoreFactory) -> Memory:
    return make_store("when", WordHashEmbedder(dimension=2), track_access=False, dedup_window=0)


def _store(mem: Memory, texts: list[str]) -> list[str]:
    """Stores ``texts`` with the same vector and the same creation time."""
    rows = [{"text": t, "created_at": 1.7e9, "embedding": QUERY} for t in texts]
    return [r.id for r in mem.add_many(rows)]


def _search(mem: Memory, query: str, **kw: Any) -> list[Any]:
    return mem.search(
        query, k=5, query_embedding=QUERY, weights={"relevance": 1}, explain=True, **kw
    )


def test_a_question_asking_when_ranks_the_memory_that_tells_a_time_first(
    make_store: StoreFactory,
) -> None:
    mem = _memory(make_store)
    # The same words of the question in both; the one that says nothing of the time
    # was stored first, so it wins the tie without the pass.
    plain, timed = _store(
        mem,
        ["Maria adopted Shadow, a pup.", "Maria adopted Shadow, a pup, last week."],
    )
    for query in (
        "When did Maria adopt Shadow?",
        "How long has Maria had Shadow the pup?",
        "In which month did Maria adopt Shadow?",
    ):
        off = {h.record.id: h for h in _search(mem, query, when_weight=0.0)}
        hits = _search(mem, query)
        assert [h.record.id for h in hits] == [timed, plain], query
        assert [h.explain["when"] for h in hits] == [True, False]
        assert off[timed].explain["when"] is None
        w = DEFAULT_WHEN_WEIGHT
        assert hits[0].explain["relevance"] == pytest.approx(
            (off[timed].explain["relevance"] + w) / (1 + w)
        )
        assert hits[1].explain["relevance"] == pytest.approx(
            off[plain].explain["relevance"] / (1 + w)
        )
    # A question that does not ask when ranks as without the pass.
    for query in ("Did Maria adopt Shadow?", "Maria adopted what?", "What time is it?"):
        hits = _search(mem, query)
        off = _search(mem, query, when_weight=0.0)
        assert [(h.record.id, h.score) for h in hits] == [(h.record.id, h.score) for h in off]
        assert all(h.explain["when"] is None for h in hits)


@pytest.mark.parametrize(
    ("text", "tells"),
    [
        ("We met yesterday.", True),
        ("We met three weeks ago.", True),
        ("We meet next month.", True),
        ("We met on Friday.", True),
        ("Her birthday is on March 2.", True),
        ("We met in May 2023.", True),
        ("We met at the park.", False),
        ("We march on.", False),
        ("The last one was fine.", False),
        # Words the stemmer folds into common ones, and words of other senses.
        ("I even liked the last note.", False),
        ("Even if they come, we meet.", False),
        ("Water comes from the spring.", False),
    ],
)
def test_what_tells_a_time(make_store: StoreFactory, text: str, tells: bool) -> None:
    mem = _memory(make_store)
    _store(mem, [text, "We met them, a note."])
    hits = {h.record.text: h for h in _search(mem, "When did we meet?")}
    # The pass applies only when some candidate tells a time.
    assert hits[text].explain["when"] == (True if tells else None)


def test_a_store_without_time_words_is_unchanged(make_store: StoreFactory) -> None:
    mem = _memory(make_store)
    _store(mem, ["apples and pears", "pears and plums"])
    hits = _search(mem, "When were the pears bought?")
    off = _search(mem, "When were the pears bought?", when_weight=0.0)
    assert [(h.record.id, h.score) for h in hits] == [(h.record.id, h.score) for h in off]
    assert all(h.explain["when"] is None for h in hits)
    # Text in, embedded by the store, in every mode.
    for mode in ("hybrid", "text", "vector"):
        assert mem.search("When were the pears bought?", k=2, mode=mode)


def test_when_weight_is_checked(make_store: StoreFactory) -> None:
    mem = _memory(make_store)
    _store(mem, ["a note from yesterday"])
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(InvalidArgumentError, match="when_weight must be in"):
            _search(mem, "When was the note?", when_weight=bad)
    with pytest.raises(InvalidArgumentError, match="when_weight must be a number"):
        _search(mem, "When was the note?", when_weight="high")
