"""Dates a query names ("on 7 May 2023", "in June 2023"): read from its text
(``memlane._memory.dates``) and matched by the engine against the memories'
``created_at``, which lifts the memories created in or near them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import StoreFactory, WordHashEmbedder
from memlane import Memory
from memlane._core import DEFAULT_DATE_WEIGHT
from memlane._memory import dates as dates_module
from memlane._memory.dates import MAX_INTERVALS, named_intervals
from memlane.errors import InvalidArgumentError

QUERY = np.array([1.0, 0.0], dtype=np.float32)
DAY = 86400.0


def _at(y: int, m: int, d: int) -> float:
    return datetime(y, m, d, tzinfo=UTC).timestamp()


def _days(text: str) -> list[tuple[str, str]]:
    """The intervals ``text`` names as ISO dates (the end excluded)."""

    def iso(t: float) -> str:
        return datetime.fromtimestamp(t, UTC).date().isoformat()

    return [(iso(a), iso(b)) for a, b in named_intervals(text)]


# -- the parse ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "days"),
    [
        ("What did Caroline do on 7 May 2023?", [("2023-05-07", "2023-05-08")]),
        ("What did Gina find on 1 February, 2023?", [("2023-02-01", "2023-02-02")]),
        ("on October 13, 2023", [("2023-10-13", "2023-10-14")]),
        ("on 8th December, 2023", [("2023-12-08", "2023-12-09")]),
        ("on December 1,2023", [("2023-12-01", "2023-12-02")]),
        ("Sept. 3, 2021", [("2021-09-03", "2021-09-04")]),
        ("the log of 2023-07-07", [("2023-07-07", "2023-07-08")]),
        ("in June 2023", [("2023-06-01", "2023-07-01")]),
        ("in Dec 2023", [("2023-12-01", "2024-01-01")]),
        ("the week before 9 June 2023", [("2023-06-09", "2023-06-10")]),
        ("in 2010", [("2010-01-01", "2011-01-01")]),
        ("between August 11 and August 15 2023", [("2023-08-11", "2023-08-16")]),
        ("11-15 August 2023", [("2023-08-11", "2023-08-16")]),
        ("from 2009 to 2014", [("2009-01-01", "2015-01-01")]),
        ("Jan 2020 - Feb 2021", [("2020-01-01", "2021-03-01")]),
        ("29 February 2024", [("2024-02-29", "2024-03-01")]),
        (
            "on 1 May 2023 and on 9 July 2023",
            [("2023-05-01", "2023-05-02"), ("2023-07-09", "2023-07-10")],
        ),
    ],
)
def test_absolute_dates_are_read(text: str, days: list[tuple[str, str]]) -> None:
    assert _days(text) == days


@pytest.mark.parametrize(
    "text",
    [
        "What did I do last Friday?",  # relative to nothing the text says
        "When did Melanie go camping in June?",  # no year
        "We need 2023 tokens for 30 people",  # a number, not a year
        "room 2023, floor 7",
        "order 5 May",  # a day without its year
        "31 February 2023",  # no such day
        "29 Feb 2023",
        "year 99999",
        "in 99999",
        "in 12345678901234567890",
        "on 5 mayo 2023",  # not a month
        "12/05/2023",  # which is the day is not said
        "version 2.2023",
        "in 1800",  # outside the years read
    ],
)
def test_what_is_no_date_is_not_taken(text: str) -> None:
    assert named_intervals(text) == []


def test_a_query_names_at_most_a_few_dates() -> None:
    text = " ".join(f"on {d} May 2023," for d in range(1, 30))
    assert len(named_intervals(text)) == MAX_INTERVALS


def test_a_text_of_many_dates_is_read_no_further_than_its_first_ones() -> None:
    # Each date was compared with every year range before it, and dates were read past
    # the few kept: a query of 16,000 of each took 27 s, the GIL held.
    ranges, dates = "2001-2002 " * 20_000, "1 May 2023 " * 20_000
    assert named_intervals(ranges + dates) == named_intervals("2001-2002 " * MAX_INTERVALS)
    got = named_intervals("in 1999 " + dates)
    assert len(got) == MAX_INTERVALS and len(set(got)) == 2  # 1999, then 1 May 2023
    calls = 0
    original = dates_module._interval

    def counted(m: Any) -> Any:
        nonlocal calls
        calls += 1
        return original(m)

    dates_module._interval = counted
    try:
        named_intervals(dates)
    finally:
        dates_module._interval = original
    assert calls == MAX_INTERVALS + 1


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from("0123456789 -,.stndrhMayJuneSeptof\u2013x"), max_size=80))
def test_any_text_parses_to_valid_intervals(text: str) -> None:
    for start, end in named_intervals(text):
        assert start < end


# -- the search ---------------------------------------------------------------------------


def _memory(make_store: StoreFactory, word_embedder: WordHashEmbedder) -> Memory:
    return make_store("dates", WordHashEmbedder(dimension=2), track_access=False, dedup_window=0)


def _store(mem: Memory, items: list[tuple[str, float]]) -> list[str]:
    """Stores ``(text, created_at)`` memories with the same vector."""
    rows = [{"text": t, "created_at": at, "embedding": QUERY} for t, at in items]
    return [r.id for r in mem.add_many(rows)]


def _search(mem: Memory, query: str, **kw: Any) -> list[Any]:
    return mem.search(
        query, k=5, query_embedding=QUERY, weights={"relevance": 1}, explain=True, **kw
    )


def test_a_named_date_ranks_the_memory_of_that_date_first(
    make_store: StoreFactory, word_embedder: WordHashEmbedder
) -> None:
    mem = _memory(make_store, word_embedder)
    # The same words on two dates; the one of the other date was stored first, so it
    # wins every tie (smaller id) and ranks first without the date.
    other, may = _store(
        mem,
        [
            ("Caroline went to the pottery class.", _at(2023, 6, 20)),
            ("Caroline went to the pottery class.", _at(2023, 5, 7) + 3600),
        ],
    )
    for query in (
        "What did Caroline do on 7 May 2023?",
        "What did Caroline do in May 2023?",
        "What did Caroline do on 2023-05-07?",
    ):
        hits = _search(mem, query)
        assert [h.record.id for h in hits] == [may, other], query
        assert [h.explain["date"] for h in hits] == [True, False]
        # The formula: the relevance without the date, lifted by the weight.
        base = {h.record.id: h for h in _search(mem, query, date_weight=0.0)}
        w = DEFAULT_DATE_WEIGHT
        assert hits[0].explain["relevance"] == pytest.approx(
            (base[may].explain["relevance"] + w) / (1 + w)
        )
        assert hits[1].explain["relevance"] == pytest.approx(
            base[other].explain["relevance"] / (1 + w)
        )
        assert base[may].explain["date"] is None
    # Turned off, or a date neither was made near: the tie goes back to the first stored.
    assert [h.record.id for h in _search(mem, "Caroline on 7 May 2023", date_weight=0.0)] == [
        other,
        may,
    ]
    hits = _search(mem, "What did Caroline do on 7 May 2021?")
    assert [h.record.id for h in hits] == [other, may]
    assert [h.explain["date"] for h in hits] == [None, None]
    # Written a few days after the day it tells of, a memory is still of that day.
    assert _search(mem, "What did Caroline do on 15 June 2023?")[0].record.id == other


def test_a_number_that_is_no_date_changes_nothing(
    make_store: StoreFactory, word_embedder: WordHashEmbedder
) -> None:
    mem = _memory(make_store, word_embedder)
    _store(
        mem,
        [
            ("Room 2023 has 7 beds for May.", _at(2023, 5, 7)),
            ("Room 2023 has 7 beds for May.", _at(2023, 1, 1)),
            ("Room 2023 was painted.", _at(2024, 3, 2)),
        ],
    )
    for query in ("beds in room 2023", "7 beds May", "room 2023 of 7 floors"):
        hits = _search(mem, query)
        off = _search(mem, query, date_weight=0.0)
        assert [(h.record.id, h.score) for h in hits] == [(h.record.id, h.score) for h in off]
        assert all(h.explain["date"] is None for h in hits)


@pytest.mark.parametrize(
    "query",
    [
        "on 31 February 2023",
        "in year 99999",
        "on 99999999999999999999 May 2023",
        "in 2199 and 1900",
        "9" * 10_000 + " May 2023",
        "on 7 May 2023 " * 500,
        "on \x00 7 May 2023",
    ],
)
def test_hostile_dates_never_raise(
    make_store: StoreFactory, word_embedder: WordHashEmbedder, query: str
) -> None:
    mem = _memory(make_store, word_embedder)
    _store(mem, [("a note", _at(2023, 5, 7)), ("a note", 0.0)])
    assert len(_search(mem, query)) == 2
    assert len(mem.search(query, k=2)) == 2  # text in, embedded by the store


def test_date_weight_is_checked(make_store: StoreFactory, word_embedder: WordHashEmbedder) -> None:
    mem = _memory(make_store, word_embedder)
    _store(mem, [("a note", _at(2023, 5, 7))])
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(InvalidArgumentError, match="date_weight must be in"):
            _search(mem, "on 7 May 2023", date_weight=bad)
    with pytest.raises(InvalidArgumentError, match="date_weight must be a number"):
        _search(mem, "on 7 May 2023", date_weight="high")
