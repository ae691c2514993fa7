"""A read's conditions as typed fields (issue 51): table, type, scope, creation times,
``unique``, versions and expiry are handed to the engine as values, which builds them into
one filter. They must admit exactly the records the same conditions written as a filter
expression admit (both backends), and a bad one is a memlane error naming it."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from conftest import StoreFactory, WordHashEmbedder
from memlane import InvalidArgumentError, Memory
from memlane._core import Admits, SearchRequest

T0 = 1_700_000_000.0


def _fill(mem: Memory) -> None:
    """Records over two tables, three types, two agents and a day each; some unique,
    some superseded, one expiring far ahead."""
    for i in range(24):
        mem.add(
            f"note {i} about apples and pears",
            table=f"t{i % 2}",
            type=f"k{i % 3}",
            agent_id=f"a{i % 4 // 2}",
            created_at=T0 + 86400.0 * i,
            unique=i % 5 == 0,
            expires_at=T0 + 10**9 if i == 7 else None,
        )
    for rec in mem.list(None, limit=100):
        if rec.created_at in (T0 + 86400.0 * 4, T0 + 86400.0 * 9):
            mem.supersede(rec.id, rec.text + " (revised)", at=T0 + 86400.0 * 30)


def _expression(
    table: Any, type: Any, agent: str | None, start: float | None, unique: bool | None
) -> dict[str, Any]:
    """The same conditions written as a caller's filter (what the store built before)."""
    conds: list[dict[str, Any]] = []
    if table is not None:
        conds.append({"table": table} if isinstance(table, str) else {"table": {"$in": table}})
    if type is not None:
        conds.append({"type": type} if isinstance(type, str) else {"type": {"$in": type}})
    if agent is not None:
        conds.append({"agent_id": agent})
    if start is not None:
        conds.append({"created_at": {"$gte": start}})
    if unique is not None:
        key = "metadata.memlane:unique"
        conds.append({key: True} if unique else {key: {"$exists": False}})
    return {"$and": conds} if conds else {}


CASES = list(
    itertools.product(
        [None, "t1", ["t0", "t1"], []],
        [None, "k2", ("k0", "k1")],
        [None, "a1"],
        [None, T0 + 86400.0 * 10],
        [None, True, False],
    )
)


def test_typed_conditions_admit_what_the_expression_admits(
    make_store: StoreFactory, word_embedder: WordHashEmbedder
) -> None:
    mem = make_store("conditions", word_embedder)
    _fill(mem)
    for table, type, agent, start, unique in CASES:
        flt = _expression(table, type, agent, start, unique)
        typed = {"type": type, "agent_id": agent, "start": start, "unique": unique}
        assert mem.count(table, **typed) == mem.count(filters=flt)
        assert [r.id for r in mem.list(table, limit=100, **typed)] == [
            r.id for r in mem.list(None, limit=100, filters=flt)
        ]
        for versions in ({}, {"include_superseded": True}):
            got = mem.search("apples", 30, table=table, track_access=False, **typed, **versions)
            want = mem.search("apples", 30, filters=flt, track_access=False, **versions)
            assert [(h.record.id, h.score) for h in got] == [(h.record.id, h.score) for h in want]


def test_versions_as_typed_fields(
    make_store: StoreFactory, word_embedder: WordHashEmbedder
) -> None:
    mem = make_store("versions", word_embedder)
    _fill(mem)
    every = {h.record.id: h.record for h in mem.search("apples", 60, include_superseded=True)}
    assert len(every) == 26
    for at in (T0 + 86400.0 * 8, T0 + 86400.0 * 31):
        got = {h.record.id for h in mem.search("apples", 60, as_of=at)}
        true_then = {
            i
            for i, r in every.items()
            if r.created_at <= at and (r.valid_to is None or r.valid_to > at)
        }
        assert got == true_then
    # What the store knew between the last add and the first revision: the originals,
    # each current then (a closed version's updated_at is when it was closed).
    originals = [r for r in every.values() if "revised" not in r.text]
    closed = min(r.updated_at for r in originals if r.valid_to is not None)
    between = (max(r.recorded_at for r in originals) + closed) / 2
    known = {h.record.id for h in mem.search("apples", 60, known_at=between)}
    assert known == {i for i, r in every.items() if "revised" not in r.text}


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda m: m.search("x", table=5), "table must be a str or a list of str, got int"),
        (lambda m: m.search("x", type=[1]), "type must be a str, got int"),
        (lambda m: m.search("x", table=["t", " "]), "table must not be empty"),
        (lambda m: m.search("x", table="t\x00"), "table contains a NUL character"),
        (lambda m: m.search("x", table="t\ud800"), "table contains a lone surrogate"),
        (lambda m: m.search("x", unique=1), "unique must be a bool, got int"),
        (lambda m: m.search("x", include_superseded="yes"), "include_superseded must be a bool"),
        (lambda m: m.search("x", as_of=T0, include_superseded=True), "not both"),
        (lambda m: m.search("x", known_at="noon"), "known_at must be a number, got str"),
        (lambda m: m.search("x", filters={"text": "a"}), 'unknown field "text"'),
        (lambda m: m.search(5), "query must be a str, got int"),
        (lambda m: m.search("", mode="text"), "query must not be empty"),
        (lambda m: m.search("q\ud800", mode="text"), "query contains a lone surrogate"),
        (lambda m: m.count(table=5), "table must be a str or a list of str, got int"),
        (lambda m: m.list(type=3.5), "type must be a str or a list of str, got float"),
        # A mapping is no list of names (its keys alone would be read): a JSON object.
        (lambda m: m.search("x", type={"semantic": 1}), "type must be a str or a list of str"),
        (lambda m: m.count(table={"t": 1}), "table must be a str or a list of str, got dict"),
        (lambda m: m.scopes(unique="no"), "unique must be a bool, got str"),
        # An endless iterable was read until memory ran out, aborting the process.
        (lambda m: m.search("x", type=itertools.repeat("t")), "type has more than 65536"),
        (lambda m: m.count(table=itertools.repeat("t")), "table has more than 65536 values"),
    ],
)
def test_bad_conditions_are_named(call: Any, message: str) -> None:
    with Memory(None, WordHashEmbedder(), dedup_window=0) as mem:
        mem.add("x marks the spot", table="t")
        with pytest.raises(InvalidArgumentError) as e:
            call(mem)
        assert message in str(e.value)


def test_the_request_carries_its_conditions() -> None:
    with pytest.raises(InvalidArgumentError, match="not both"):
        SearchRequest(known_at=T0, include_superseded=True)
    with pytest.raises(InvalidArgumentError, match="unknown scope field 'planet'"):
        SearchRequest(scope={"planet": "mars"})
    with Memory(None, WordHashEmbedder(), dedup_window=0) as mem:
        mem.add("pears in the garden", table="t", agent_id="a")
        mem.add("pears in the market", table="u", agent_id="a")
        engine = mem._sync.engine
        request = SearchRequest(5, mode="text", table="u", scope={"agent_id": "a"})
        ids, _, _, _ = engine.search(request, "pears", now=T0)
        assert ids == engine.ids_where(Admits(table="u", scope={"agent_id": "a"})).tolist()
        assert len(ids) == 1 and engine.count(Admits(scope={"agent_id": "a"})) == 2
