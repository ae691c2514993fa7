"""A hypothesis state machine (issue 14): random sequences of writes, searches, closes and
reopens on a store, checked after every step against a plain-Python model of it.

The model is a dict of id -> what was written. What is checked: the store holds exactly
the model's records (ids, texts, tables, scopes, metadata); every search hit is a record
the model says matches (table, scope, filters); a scoped search never returns another
scope's record; a record's exact text, searched in text mode, finds it. It runs on SQLite
and on PostgreSQL, bounded so that each takes well under a minute.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
)

from conftest import StoreFactory, WordHashEmbedder
from memlane import Memory
from memlane.errors import UnknownIdError

WORDS = ["apple", "river", "stone", "cloud", "green", "violin", "tiger", "salt"]
TABLES = ["memories", "facts"]
AGENTS = [None, "ann", "bob"]

words = st.lists(st.sampled_from(WORDS), min_size=1, max_size=4)
tables = st.sampled_from(TABLES)
agents = st.sampled_from(AGENTS)
numbers = st.integers(0, 2)
modes = st.sampled_from(["hybrid", "vector", "text"])

_names = itertools.count()


class MemoryModel(RuleBasedStateMachine):
    """Memory against a dict. ``factory`` is set per backend before the machine runs."""

    factory: StoreFactory

    ids = Bundle("ids")

    def __init__(self) -> None:
        super().__init__()
        self.embedder = WordHashEmbedder()
        self.name = f"state{next(_names)}"
        self.mem: Memory | None = None
        self.model: dict[str, dict[str, Any]] = {}
        self.tokens = itertools.count()

    @initialize()
    def open_store(self) -> None:
        self.mem = self._open()

    def _open(self) -> Memory:
        return self.factory(self.name, self.embedder, dedup_window=0.0)

    @property
    def store(self) -> Memory:
        assert self.mem is not None
        return self.mem

    def teardown(self) -> None:
        if self.mem is not None:
            self.mem.close()

    # -- writes --------------------------------------------------------------------------

    def _item(self, ws: list[str], table: str, agent: str | None, n: int) -> dict[str, Any]:
        # A token of its own, so each record's exact text is distinctive.
        text = " ".join([*ws, f"tok{next(self.tokens)}"])
        item: dict[str, Any] = {"text": text, "table": table, "metadata": {"n": n}}
        if agent is not None:
            item["agent_id"] = agent
        return item

    def _keep(self, rec: Any) -> str:
        self.model[rec.id] = {
            "text": rec.text,
            "table": rec.table,
            "agent_id": rec.agent_id,
            "metadata": rec.metadata,
        }
        return str(rec.id)

    @rule(target=ids, ws=words, table=tables, agent=agents, n=numbers)
    def add(self, ws: list[str], table: str, agent: str | None, n: int) -> str:
        item = self._item(ws, table, agent, n)
        return self._keep(self.store.add(**item))

    @rule(
        target=ids,
        batch=st.lists(st.tuples(words, tables, agents, numbers), min_size=1, max_size=4),
    )
    def add_many(self, batch: list[tuple[list[str], str, str | None, int]]) -> Any:
        recs = self.store.add_many([self._item(*b) for b in batch])
        return multiple(*(self._keep(r) for r in recs))

    @rule(id=ids, ws=words, n=numbers)
    def update(self, id: str, ws: list[str], n: int) -> None:
        if id not in self.model:
            with pytest.raises(UnknownIdError):
                self.store.update(id, text="gone")
            return
        text = " ".join([*ws, f"tok{next(self.tokens)}"])
        rec = self.store.update(id, text=text, metadata={"n": n})
        assert rec.text == text
        self.model[id].update(text=text, metadata={"n": n})

    @rule(
        target=ids,
        table=tables,
        agent=agents,
        batch=st.lists(st.tuples(words, numbers), max_size=3),
    )
    def replace(self, table: str, agent: str | None, batch: list[tuple[list[str], int]]) -> Any:
        items = [self._item(ws, table, agent, n) for ws, n in batch]
        gone = self._matching(table, agent, None)
        removed, recs = self.store.replace(items, table, agent_id=agent)
        assert removed == len(gone)
        for id in gone:
            del self.model[id]
        return multiple(*(self._keep(r) for r in recs))

    @rule(id=consumes(ids))
    def delete(self, id: str) -> None:
        if id in self.model:
            self.store.delete(id)
            del self.model[id]
        else:
            with pytest.raises(UnknownIdError):
                self.store.delete(id)

    @rule(table=st.none() | tables, agent=agents, n=st.none() | numbers)
    def delete_all(self, table: str | None, agent: str | None, n: int | None) -> None:
        gone = self._matching(table, agent, n)
        filters = None if n is None else {"n": n}
        assert self.store.delete_all(table, agent_id=agent, filters=filters) == len(gone)
        for id in gone:
            del self.model[id]

    @rule()
    def reopen(self) -> None:
        self.store.close()
        self.mem = None
        self.mem = self._open()

    # -- reads ---------------------------------------------------------------------------

    def _matching(self, table: str | None, agent: str | None, n: int | None) -> set[str]:
        return {
            id
            for id, r in self.model.items()
            if (table is None or r["table"] == table)
            and (agent is None or r["agent_id"] == agent)
            and (n is None or r["metadata"].get("n") == n)
        }

    @rule(
        ws=words,
        k=st.integers(1, 8),
        table=st.none() | tables,
        agent=agents,
        n=st.none() | numbers,
        mode=modes,
    )
    def search(
        self, ws: list[str], k: int, table: str | None, agent: str | None, n: int | None, mode: str
    ) -> None:
        filters = None if n is None else {"n": n}
        hits = self.store.search(
            " ".join(ws), k, table=table, agent_id=agent, filters=filters, mode=mode
        )
        got = [h.record.id for h in hits]
        assert len(got) == len(set(got)) <= k
        allowed = self._matching(table, agent, n)
        assert set(got) <= allowed, (set(got) - allowed, table, agent, n)
        for h in hits:
            assert h.record.text == self.model[h.record.id]["text"]
            if agent is not None:
                assert h.record.agent_id == agent

    @precondition(lambda self: bool(self.model))
    @rule(data=st.data())
    def exact_text_finds_its_record(self, data: st.DataObject) -> None:
        id = data.draw(st.sampled_from(sorted(self.model)))
        r = self.model[id]
        hits = self.store.search(
            r["text"], len(self.model), table=r["table"], agent_id=r["agent_id"], mode="text"
        )
        assert id in [h.record.id for h in hits]

    @invariant()
    def holds_the_model(self) -> None:
        if self.mem is None:
            return
        assert len(self.store) == self.store.count() == len(self.model)
        listed = self.store.list(None, limit=len(self.model) + 1)
        got = {
            r.id: {
                "text": r.text,
                "table": r.table,
                "agent_id": r.agent_id,
                "metadata": r.metadata,
            }
            for r in listed
        }
        assert got == self.model


@pytest.mark.parametrize("backend", ["embedded", "postgres"])
def test_memory_follows_its_model(
    backend: str, tmp_path: Any, request: pytest.FixtureRequest
) -> None:
    server = request.getfixturevalue("pg_server") if backend == "postgres" else None
    MemoryModel.factory = StoreFactory(backend, tmp_path, server)
    run = MemoryModel.TestCase
    run.settings = settings(
        max_examples=25,
        stateful_step_count=30,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    run().runTest()
