"""The record's one shape across the boundary and a search's one request: the engine
finds the fields it reads by name in ``schema.Row``'s; ``Memory.search``'s options are checked once,
by ``_core.SearchRequest``, with the messages callers have always seen; explain comes back
as typed values."""

from __future__ import annotations

import ast
import inspect
import math
from collections.abc import Iterator
from dataclasses import fields
from typing import Any, NamedTuple

import numpy as np
import pytest

from conftest import WordHashEmbedder
from memlane import InvalidArgumentError, Memory, schema
from memlane._core import Admits, Engine, SearchRequest
from memlane.records import MemoryRecord


@pytest.fixture
def mem() -> Iterator[Memory]:
    m = Memory(None, WordHashEmbedder(), dedup_window=0)
    m.add_many([{"text": f"note {i} about apples"} for i in range(5)])
    m.add("a text with no shared word")
    yield m
    m.close()


def test_the_engine_reads_the_fields_of_row_by_name() -> None:
    values = dict(zip(schema.COLUMNS, (1, "a", "the apple", "memories", "semantic"), strict=False))
    values |= {f: None for f in schema.COLUMNS if f.endswith("_id")}
    values |= {"namespace": None, "speaker": None, "metadata": "{}", "embedding": None}
    values |= {"importance": 0.5, "evergreen": 0, "uniq": 0, "created_at": 5.0}
    values |= {"updated_at": 5.0, "last_accessed_at": 5.0, "access_count": 0, "valid_to": None}
    values |= {"expires_at": None, "recorded_at": 5.0, "content_hash": "", "seq": 1}
    values["content_seq"] = 1
    engine = Engine(None)
    # Fields in another order read the same: the engine finds them by name.
    backwards = NamedTuple("Backwards", [(f, Any) for f in reversed(schema.COLUMNS)])  # type: ignore[misc]
    engine.apply(engine.prepare([backwards(**values)], True))
    admitted = {"id": "a", "table": "memories", "importance": 0.5, "created_at": 5.0}
    assert engine.ids_where(Admits(admitted)).tolist() == [1]
    lacking = NamedTuple("Lacking", [(f, Any) for f in schema.COLUMNS if f != "speaker"])  # type: ignore[misc]
    del values["speaker"]
    with pytest.raises(InvalidArgumentError, match="record 0: a row must have the field 'speaker'"):
        engine.prepare([lacking(**values)], True)
    with pytest.raises(
        InvalidArgumentError, match=r"record 0: a row must be a memlane\.schema\.Row"
    ):
        engine.prepare([tuple(values.values())], True)
    public = [schema.PUBLIC_NAMES.get(c, c) for c in schema.RECORD_COLUMNS]
    assert [f.name for f in fields(MemoryRecord)][: len(public)] == public


def test_the_schema_does_not_import_the_native_module() -> None:
    tree = ast.parse(inspect.getsource(schema))
    imported = {
        a.name
        for n in ast.walk(tree)
        if isinstance(n, ast.Import | ast.ImportFrom)
        for a in n.names
    }
    modules = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert "_core" not in imported and "memlane._core" not in modules


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"k": 0}, "k must be an int >= 1, got 0"),
        ({"k": True}, "k must be an int >= 1, got True"),
        ({"k": 2**64}, f"k must be at most {2**63 - 1}, got {2**64}"),
        ({"mode": "fast"}, "mode must be one of {'hybrid', 'vector', 'text'}, got 'fast'"),
        ({"mode": 3}, "mode must be one of {'hybrid', 'vector', 'text'}, got 3"),
        ({"threshold": "high"}, "threshold must be a number, got str"),
        ({"threshold": math.inf}, "threshold must be a finite number, got inf"),
        ({"threshold": 10**400}, "threshold is too large for a float"),
        ({"min_similarity": 1.5}, "min_similarity must be in [-1.0, 1.0], got 1.5"),
        ({"weights": [1.0]}, "weights must be a dict, got list"),
        (
            {"weights": {"age": 1.0}},
            "unknown weight(s) ['age']; expected ['importance', 'recency', 'relevance']",
        ),
        ({"weights": {"recency": -1}}, "weights['recency'] must be in [0.0, None], got -1.0"),
        ({"weights": {"relevance": 0.0}}, "weights must not all be 0"),
        ({"decay": -0.5}, "decay must be in [0.0, None], got -0.5"),
        ({"recency_half_life": 0}, "recency_half_life must be in [1e-09, None], got 0.0"),
        ({"candidates": 0}, "candidates must be an int >= 1, got 0"),
        ({"candidates": 2.0}, "candidates must be an int >= 1, got 2.0"),
        ({"candidates": 2**30}, f"candidates must be at most {2**24}, got {2**30}"),
        ({"fusion": "max"}, "fusion must be one of {'rrf', 'weighted'}, got \"max\""),
        ({"fusion": "rrf", "rrf_k": -1.0}, "rrf_k must be a finite number >= 0, got -1"),
        ({"alpha": 2.0}, "alpha must be in [0, 1], got 2"),
        ({"track_access": 1}, "track_access must be a bool, got int"),
    ],
)
def test_bad_options_are_refused_with_their_message(
    mem: Memory, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidArgumentError) as e:
        mem.search("apples", **kwargs)
    assert str(e.value) == message


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"explain": 1}, "explain must be a bool, got int"),
        ({"fusion": 5}, "fusion must be one of {'rrf', 'weighted'}, got 5"),
        ({"rrf_k": "60"}, "rrf_k must be a number, got str"),
    ],
)
def test_options_the_engine_took_as_given_are_checked_too(
    mem: Memory, kwargs: dict[str, Any], message: str
) -> None:
    # These reached the engine's argument conversion, which raised TypeError.
    with pytest.raises(InvalidArgumentError) as e:
        mem.search("apples", **kwargs)
    assert str(e.value) == message


def test_a_k_under_the_limit_is_searched_whatever_its_depth(mem: Memory) -> None:
    # Its default depth, four times k, passed the limit a search may return, and the
    # refusal named a k of four times the one given.
    assert len(mem.search("apples", k=5_000_000)) == len(mem.search("apples", k=100))
    with pytest.raises(InvalidArgumentError, match=f"^k = {2**24 + 1} is too large"):
        mem.search("apples", k=2**24 + 1)


def test_numpy_numbers_and_bools_are_taken() -> None:
    r = SearchRequest(
        3, threshold=np.float32(0.25), decay=np.int64(0), explain=np.True_, track_access=np.False_
    )
    assert (r.k, r.explain, r.track_access, r.candidates) == (3, True, False, 50)
    assert SearchRequest(k=40).candidates == 160
    assert SearchRequest().mode == "hybrid" and SearchRequest().track_access is None


def test_explain_gives_ints_for_ranks_and_none_for_absent_signals(mem: Memory) -> None:
    hits = mem.search("apples", k=10, explain=True)
    assert hits and all(h.explain is not None for h in hits)
    for h in hits:
        assert h.explain is not None
        assert set(h.explain) == {
            "bm25",
            "bm25_rank",
            "bm25_context",
            "bm25_speaker",
            "date",
            "when",
            "cosine",
            "cosine_context",
            "cosine_asked",
            "vector_rank",
            "question",
            "relevance",
            "importance",
            "recency",
            "age_hours",
            "boost",
            "score",
        }
        for name in ("bm25_rank", "vector_rank"):
            rank = h.explain[name]
            assert rank is None or (type(rank) is int and rank >= 1)
        assert type(h.explain["score"]) is float and h.explain["score"] == h.score
    text_only = mem.search("apples", k=10, mode="text", explain=True)
    assert all(h.explain is not None and h.explain["vector_rank"] is None for h in text_only)
    assert mem.search("apples", k=3)[0].explain is None
