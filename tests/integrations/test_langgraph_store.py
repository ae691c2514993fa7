"""memlane's LangGraph ``BaseStore``: the same calls on LangGraph's ``InMemoryStore`` and on
``MemlaneStore`` give the same answers; scopes stay partitions; TTL; a graph's ``store=``."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchOp,
)
from langgraph.store.memory import InMemoryStore
from typing_extensions import TypedDict

import memlane
from memlane.integrations.langchain import langchain_embedder
from memlane.integrations.langgraph import MemlaneStore

from .adapter_fakes import WordEmbeddings

ITEMS: list[tuple[tuple[str, ...], str, dict[str, Any]]] = [
    (("users", "alice", "prefs"), "theme", {"text": "prefers dark mode", "n": 1, "tag": "ui"}),
    (("users", "alice", "prefs"), "food", {"text": "allergic to peanuts", "n": 2, "tag": "health"}),
    (
        ("users", "alice", "facts"),
        "city",
        {"text": "lives in Lisbon", "n": 3, "meta": {"src": "chat"}},
    ),
    (("users", "bob", "prefs"), "theme", {"text": "prefers light mode", "n": 4, "tag": "ui"}),
    (("users", "bob", "facts"), "job", {"text": "works as a nurse", "n": 5, "tags": ["a", "b"]}),
    (("docs", "v1"), "readme", {"text": "dark mode setup guide", "n": 6}),
    (("docs", "v2"), "readme", {"text": "light theme and dark mode", "n": 7}),
]


def index(embeddings: WordEmbeddings, fields: list[str] | None = None) -> dict[str, Any]:
    return {"dims": embeddings.size, "embed": embeddings, "fields": fields or ["text"]}


@pytest.fixture
def stores(make_store: Any) -> Iterator[tuple[BaseStore, MemlaneStore]]:
    """An ``InMemoryStore`` and a ``MemlaneStore`` with the same index config, the latter
    on each backend (a directory, and PostgreSQL)."""
    emb = WordEmbeddings()
    with make_store("lg", langchain_embedder(emb), hnsw_precision="f32") as mem:
        yield InMemoryStore(index=index(emb)), MemlaneStore(mem, index=index(emb))


@pytest.fixture
def plain_stores(make_store: Any) -> Iterator[tuple[BaseStore, MemlaneStore]]:
    with make_store("lg-plain", None) as mem:
        yield InMemoryStore(), MemlaneStore(mem)


def fill(*stores: BaseStore) -> None:
    for store in stores:
        for ns, key, value in ITEMS:
            store.put(ns, key, value)


def keys(items: list[Any]) -> list[tuple[tuple[str, ...], str]]:
    return [(tuple(i.namespace), i.key) for i in items]


def same_search(a: BaseStore, b: BaseStore, prefix: tuple[str, ...], **kwargs: Any) -> list[Any]:
    """Both stores' results, asserted equal: keys and values in order, scores within 1e-4."""
    got_a, got_b = a.search(prefix, **kwargs), b.search(prefix, **kwargs)
    assert keys(got_b) == keys(got_a), kwargs
    assert [i.value for i in got_b] == [i.value for i in got_a]
    for x, y in zip(got_a, got_b, strict=True):
        if x.score is None:
            assert y.score is None
        else:
            assert y.score == pytest.approx(x.score, abs=1e-4)
    return got_b


def test_get_put_update_delete_match(stores: tuple[BaseStore, MemlaneStore]) -> None:
    theirs, ours = stores
    fill(theirs, ours)
    for ns, key, _ in ITEMS:
        a, b = theirs.get(ns, key), ours.get(ns, key)
        assert a is not None and b is not None
        assert (tuple(b.namespace), b.key, b.value) == (tuple(a.namespace), a.key, a.value)
    assert ours.get(("users", "alice", "prefs"), "missing") is None
    assert ours.get(("nobody",), "theme") is None
    for store in (theirs, ours):
        store.put(("users", "alice", "prefs"), "theme", {"text": "prefers solarized", "n": 9})
        store.delete(("users", "bob", "facts"), "job")
        store.delete(("users", "bob", "facts"), "never-was")
    got = ours.get(("users", "alice", "prefs"), "theme")
    assert got is not None and got.value == {"text": "prefers solarized", "n": 9}
    assert ours.get(("users", "bob", "facts"), "job") is None
    assert len(ours.memory) == len(ITEMS) - 1  # an update replaced its record
    same_search(theirs, ours, ("users", "alice", "prefs"), limit=10)


def test_update_keeps_created_at_and_moves_updated_at(
    stores: tuple[Any, MemlaneStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    import memlane.integrations.langgraph as adapter

    _, ours = stores
    monkeypatch.setattr(adapter, "_now", lambda: 1_000_000.0)
    ours.put(("a",), "k", {"text": "one"})
    first = ours.get(("a",), "k")
    monkeypatch.setattr(adapter, "_now", lambda: 1_000_005.0)
    ours.put(("a",), "k", {"text": "two"})
    second = ours.get(("a",), "k")
    assert first is not None and second is not None
    assert first.created_at == second.created_at == first.updated_at
    assert (second.updated_at - first.updated_at).total_seconds() == 5


def test_search_without_query_matches(stores: tuple[BaseStore, MemlaneStore]) -> None:
    theirs, ours = stores
    fill(theirs, ours)
    # One namespace: insertion order in both.
    same_search(theirs, ours, ("users", "alice", "prefs"))
    same_search(theirs, ours, ("users", "alice", "prefs"), limit=1, offset=1)
    # Namespaces filled one after the other: the same order too.
    same_search(theirs, ours, ("users",))
    same_search(theirs, ours, ("users",), limit=2, offset=3)
    same_search(theirs, ours, ())
    same_search(theirs, ours, ("nothing",))
    filters: list[dict[str, Any]] = [
        {"tag": "ui"},
        {"n": {"$gt": 2}},
        {"n": {"$gte": 2, "$lt": 5}},
        {"n": {"$ne": 4}},
        {"tag": {"$eq": "health"}},
        {"tag": {"$ne": "ui"}},
        {"meta": {"src": "chat"}},
        {"tags": ["a", "b"]},
        {"tags": ["a"]},
        {"tag": "ui", "n": 4},
        {"missing": None},
    ]
    for flt in filters:
        same_search(theirs, ours, (), filter=flt)
        same_search(theirs, ours, ("users",), filter=flt, limit=1)


def test_semantic_search_matches(stores: tuple[BaseStore, MemlaneStore]) -> None:
    theirs, ours = stores
    fill(theirs, ours)
    for query in ("dark mode", "peanuts allergy", "light theme", "nurse in Lisbon"):
        got = same_search(theirs, ours, (), query=query, limit=4)
        assert got[0].score is not None
        same_search(theirs, ours, ("users",), query=query, limit=2, offset=1)
        same_search(theirs, ours, (), query=query, filter={"tag": "ui"})
        same_search(theirs, ours, ("docs",), query=query, filter={"n": {"$gte": 7}})
    best = ours.search((), query="dark mode setup guide", limit=1)
    assert keys(best) == [(("docs", "v1"), "readme")]
    assert best[0].score == pytest.approx(1.0, abs=1e-4)


def test_semantic_search_many_fields_and_unindexed(stores: tuple[BaseStore, MemlaneStore]) -> None:
    theirs, ours = stores
    notes = [
        ("n1", {"title": "garden", "body": "tomatoes need sun", "tags": ["plants", "summer"]}),
        ("n2", {"title": "kitchen", "body": "bread needs flour", "tags": ["baking"]}),
        ("n3", {"title": "garage", "body": "the bike has a flat tyre", "tags": []}),
    ]
    for store in (theirs, ours):
        for key, value in notes:
            store.put(("notes",), key, value, index=["title", "body", "tags[*]"])
        store.put(("notes",), "raw", {"title": "not indexed at all"}, index=False)
    for query in ("sun tomatoes", "baking bread", "kitchen", "summer plants", "bike"):
        got = same_search(theirs, ours, ("notes",), query=query, limit=5)
        # The unindexed item comes last, unscored.
        assert got[-1].key == "raw" and got[-1].score is None
    # Each item once, scored by its best field.
    assert ours.search(("notes",), query="summer", limit=2)[0].key == "n1"


def test_search_ignores_query_without_index(
    plain_stores: tuple[BaseStore, MemlaneStore],
) -> None:
    theirs, ours = plain_stores
    fill(theirs, ours)
    assert ours.memory.embedder is None  # nothing embedded
    same_search(theirs, ours, ("users",), query="dark mode")


def test_list_namespaces_matches(stores: tuple[BaseStore, MemlaneStore]) -> None:
    theirs, ours = stores
    fill(theirs, ours)
    calls: list[dict[str, Any]] = [
        {},
        {"prefix": ("users",)},
        {"prefix": ("users", "*", "prefs")},
        {"suffix": ("prefs",)},
        {"suffix": ("*",), "max_depth": 2},
        {"prefix": ("users",), "suffix": ("facts",)},
        {"max_depth": 1},
        {"max_depth": 2, "limit": 2, "offset": 1},
        {"prefix": ("nope",)},
    ]
    for call in calls:
        assert ours.list_namespaces(**call) == theirs.list_namespaces(**call), call
    for store in (theirs, ours):
        store.delete(("docs", "v1"), "readme")
    # The one difference: InMemoryStore still lists a namespace whose last item went
    # (its dict stays); memlane lists namespaces that hold items, as LangGraph's
    # PostgreSQL store does.
    assert theirs.list_namespaces(prefix=("docs",)) == [("docs", "v1"), ("docs", "v2")]
    assert ours.list_namespaces(prefix=("docs",)) == [("docs", "v2")]


def test_batch_reads_before_writes_and_last_put_wins(
    stores: tuple[BaseStore, MemlaneStore],
) -> None:
    theirs, ours = stores
    fill(theirs, ours)
    ops = [
        PutOp(("users", "alice", "prefs"), "theme", {"text": "blue", "n": 10}),
        GetOp(("users", "alice", "prefs"), "theme"),
        SearchOp(("users", "alice"), {"n": {"$lte": 2}}, 10, 0, None),
        SearchOp((), None, 3, 0, "dark mode"),
        ListNamespacesOp((MatchCondition("prefix", ("users",)),), None, 100, 0),
        PutOp(("new",), "k", {"text": "first"}),
        PutOp(("new",), "k", {"text": "second"}),
        PutOp(("users", "bob", "facts"), "job", None),
    ]
    got_a, got_b = theirs.batch(ops), ours.batch(ops)
    assert got_b[0] is None and got_b[5] is None
    assert got_b[1] is not None and got_a[1] is not None
    assert got_b[1].value == got_a[1].value == ITEMS[0][2]
    assert keys(got_b[2]) == keys(got_a[2])
    assert keys(got_b[3]) == keys(got_a[3])
    assert got_b[4] == got_a[4]
    for store in (theirs, ours):
        item = store.get(("new",), "k")
        assert item is not None and item.value == {"text": "second"}
        assert store.get(("users", "bob", "facts"), "job") is None


def test_abatch_and_async_methods(stores: tuple[BaseStore, MemlaneStore]) -> None:
    theirs, ours = stores

    async def run(store: BaseStore) -> tuple[Any, ...]:
        for ns, key, value in ITEMS:
            await store.aput(ns, key, value)
        await store.adelete(("docs", "v2"), "readme")
        got = await store.aget(("users", "alice", "prefs"), "food")
        found = await store.asearch(("users",), query="light mode", limit=3)
        spaces = await store.alist_namespaces(prefix=("users",), max_depth=2)
        return got.value if got else None, keys(found), spaces

    assert asyncio.run(run(ours)) == asyncio.run(run(theirs))


def test_invalid_namespaces_and_filters(stores: tuple[Any, MemlaneStore]) -> None:
    _, ours = stores
    with pytest.raises(InvalidNamespaceError):
        ours.put((), "k", {"a": 1})
    with pytest.raises(InvalidNamespaceError):
        ours.put(("a.b",), "k", {"a": 1})
    with pytest.raises(InvalidNamespaceError):
        ours.batch([GetOp(("a.b",), "k")])
    with pytest.raises(InvalidNamespaceError):
        ours.put(("langgraph",), "k", {"a": 1})
    ours.put(("a",), "k", {"n": 1})
    with pytest.raises(ValueError, match="operator"):
        ours.search(("a",), filter={"n": {"$regex": "x"}})
    # A value that is no JSON is a memlane error naming the key, and stores nothing.
    deep: list[Any] = []
    for _ in range(100_000):
        deep = [deep]
    for value in ({"t": {1, 2}}, {"t": b"x"}, {("a",): 1}, {"t": object()}, {"t": deep}):
        with pytest.raises(memlane.InvalidArgumentError, match="the value of 'bad' must be JSON"):
            ours.put(("a",), "bad", value)
    assert ours.get(("a",), "bad") is None


def test_scopes_are_partitions(tmp_path: Path) -> None:
    emb = WordEmbeddings()
    with memlane.Memory(tmp_path / "store", embedder=None) as mem:
        alice = MemlaneStore(mem, scope={"user_id": "alice"})
        bob = MemlaneStore(mem, scope={"user_id": "bob"})
        alice.put(("prefs",), "theme", {"text": "dark"})
        bob.put(("prefs",), "theme", {"text": "light"})
        bob.put(("secrets",), "pin", {"text": "1234"})
        got = alice.get(("prefs",), "theme")
        assert got is not None and got.value == {"text": "dark"}
        assert alice.get(("secrets",), "pin") is None
        assert [i.value for i in alice.search(())] == [{"text": "dark"}]
        assert alice.list_namespaces() == [("prefs",)]
        alice.delete(("prefs",), "theme")
        theirs = bob.get(("prefs",), "theme")
        assert theirs is not None and theirs.value == {"text": "light"}
        assert {r.user_id for r in mem.list(table="langgraph")} == {"bob"}
    # Semantic search stays in scope too.
    shared = memlane.Memory(embedder=MemlaneStore(index=index(emb)).memory.embedder)
    with shared:
        a = MemlaneStore(shared, index=index(emb), scope={"agent_id": "a"})
        b = MemlaneStore(shared, index=index(emb), scope={"agent_id": "b"})
        a.put(("m",), "1", {"text": "dark mode"})
        b.put(("m",), "1", {"text": "dark mode exactly"})
        b.put(("m",), "2", {"text": "dark mode"})
        found = a.search(("m",), query="dark mode", limit=10)
        assert [(i.key, i.value["text"]) for i in found] == [("1", "dark mode")]


def test_durable_store_reopens(tmp_path: Path) -> None:
    emb = WordEmbeddings()
    path = tmp_path / "store"
    store = MemlaneStore(path=path, index=index(emb))
    store.put(("users", "alice"), "theme", {"text": "prefers dark mode"})
    store.close()
    with MemlaneStore(path=path, index=index(emb)) as again:
        got = again.get(("users", "alice"), "theme")
        assert got is not None and got.value == {"text": "prefers dark mode"}
        assert keys(again.search(("users",), query="dark mode")) == [(("users", "alice"), "theme")]


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The wall clock (``time.time``) memlane's expiry reads, stopped at 2030-01-01 00:00 UTC
    and moved by the test: ``clock[0] += seconds``."""
    now = [1_893_456_000.0]
    monkeypatch.setattr(time, "time", lambda: now[0])
    return now


@pytest.fixture
def ttl_store(make_store: Any, clock: list[float]) -> Iterator[MemlaneStore]:
    """A store with a default TTL of an hour whose items index two fields (so an item
    is two records), on each backend."""
    emb = WordEmbeddings()
    with make_store("lg-ttl", langchain_embedder(emb), hnsw_precision="f32") as mem:
        yield MemlaneStore(mem, index=index(emb, ["text", "title"]), ttl={"default_ttl": 60})


def records(store: MemlaneStore, ns: tuple[str, ...], key: str) -> list[memlane.MemoryRecord]:
    """The item's records (one per indexed field), as the memory holds them."""
    base = store._base_id(ns, key)
    found = store.memory.list("langgraph", filters={"metadata.lg.item": base}, limit=10)
    assert found, key
    return found


def expiries(store: MemlaneStore, ns: tuple[str, ...], key: str) -> set[float | None]:
    return {r.expires_at for r in records(store, ns, key)}


def threads() -> set[threading.Thread]:
    return set(threading.enumerate())


def test_ttl_is_the_records_expires_at(ttl_store: MemlaneStore, clock: list[float]) -> None:
    store, t0 = ttl_store, clock[0]
    doc = {"text": "dark mode", "title": "theme"}
    store.put(("s",), "short", doc, ttl=1)
    store.put(("s",), "default", doc)
    store.put(("s",), "forever", doc, ttl=None)
    assert len(records(store, ("s",), "short")) == 2
    assert expiries(store, ("s",), "short") == {t0 + 60}  # LangGraph's ttl is in minutes
    assert expiries(store, ("s",), "default") == {t0 + 3600}
    assert expiries(store, ("s",), "forever") == {None}
    # The expiry is the memory's, not the adapter's own metadata.
    assert all("exp" not in r.metadata["lg"] for r in records(store, ("s",), "short"))
    # A put without a TTL ends the expiry.
    store.put(("s",), "short", doc, ttl=None)
    assert expiries(store, ("s",), "short") == {None}
    for bad in (0, -1, float("nan"), float("inf")):
        with pytest.raises(memlane.InvalidArgumentError, match="ttl must be a number of minutes"):
            store.put(("s",), "bad", doc, ttl=bad)
    assert store.get(("s",), "bad") is None


def test_an_expired_item_is_gone_without_a_sweeper(
    ttl_store: MemlaneStore, clock: list[float]
) -> None:
    store = ttl_store
    before = threads()
    doc = {"text": "dark mode", "title": "theme"}
    store.put(("s",), "short", doc, ttl=1)
    store.put(("t",), "short", doc, ttl=1)
    store.put(("s",), "forever", doc, ttl=None)
    store.start_ttl_sweeper(0.01)
    assert threads() == before  # the adapter runs no thread of its own
    clock[0] += 30
    assert store.get(("s",), "short", refresh_ttl=False) is not None
    assert len(store.search(("s",), query="dark mode", refresh_ttl=False)) == 2
    clock[0] += 30  # 60 s after the put: expired
    assert store.get(("s",), "short") is None
    assert [i.key for i in store.search(("s",))] == ["forever"]
    assert [i.key for i in store.search((), query="dark mode")] == ["forever"]
    assert store.list_namespaces() == [("s",)]
    for ns in (("s",), ("t",)):
        with pytest.raises(memlane.UnknownIdError):
            store.memory.get(store._base_id(ns, "short"))
    assert store.memory.count("langgraph") == 2  # the two records of "forever"
    # Nothing was swept, by the store's maintenance or otherwise: sweep_ttl removes the
    # two items now (four records), and then nothing.
    assert store.sweep_ttl() == 2
    assert store.sweep_ttl() == 0
    assert store.stop_ttl_sweeper(timeout=5)
    assert threads() == before


def test_a_read_refreshes_the_records_expiry(ttl_store: MemlaneStore, clock: list[float]) -> None:
    store, t0 = ttl_store, clock[0]
    doc = {"text": "dark mode", "title": "theme"}
    store.put(("s",), "k", doc)
    store.put(("s",), "fixed", doc, ttl=None)
    clock[0] += 100
    store.get(("s",), "k", refresh_ttl=False)
    store.search(("s",), refresh_ttl=False)
    assert expiries(store, ("s",), "k") == {t0 + 3600}
    store.get(("s",), "k")  # refresh_on_read defaults to True
    assert expiries(store, ("s",), "k") == {t0 + 100 + 3600}
    clock[0] += 100
    store.search(("s",), query="dark mode")
    assert expiries(store, ("s",), "k") == {t0 + 200 + 3600}
    assert expiries(store, ("s",), "fixed") == {None}  # no TTL, nothing to refresh
    item = store.get(("s",), "k", refresh_ttl=False)
    assert item is not None and item.updated_at == item.created_at  # a refresh is no update
    # Nor a version: reads at every step do not grow the store's history.
    for rec in records(store, ("s",), "k"):
        assert [v.event for v in store.memory.history(rec.id)] == ["add"]
    clock[0] += 3599
    assert store.get(("s",), "k", refresh_ttl=False) is not None  # refreshed, so still here
    clock[0] += 1
    assert store.get(("s",), "k") is None


def test_items_written_with_the_adapters_old_expiry(make_store: Any, clock: list[float]) -> None:
    """Items an earlier adapter wrote kept their expiry in ``metadata.lg.exp`` (no
    ``expires_at``): opening the store moves it to ``expires_at`` and deletes the items
    already past it, and so does ``sweep_ttl`` for any that came later (an import)."""
    emb = WordEmbeddings()
    t0 = clock[0]
    doc = {"text": "dark mode", "title": "theme"}
    with make_store("lg-old", langchain_embedder(emb), hnsw_precision="f32") as mem:

        def write_old(key: str, exp: float) -> None:
            old = MemlaneStore(mem, index=index(emb, ["text", "title"]))
            old.put(("s",), key, doc)
            for rec in records(old, ("s",), key):
                lg = {**rec.metadata["lg"], "ttl": 10.0, "exp": exp}
                mem.update(rec.id, metadata={**rec.metadata, "lg": lg})

        write_old("live", t0 + 600)
        write_old("dead", t0 - 1)
        store = MemlaneStore(mem, index=index(emb, ["text", "title"]), ttl={"default_ttl": 10})
        assert expiries(store, ("s",), "live") == {t0 + 600}
        assert all("exp" not in r.metadata["lg"] for r in records(store, ("s",), "live"))
        assert store.get(("s",), "dead", refresh_ttl=False) is None
        assert mem.count("langgraph") == 2  # the two records of "live": "dead" is gone
        # The TTL it was written with (10 minutes) is what a read restarts.
        assert store.get(("s",), "live") is not None
        assert expiries(store, ("s",), "live") == {t0 + 600}  # 10 min from now
        clock[0] += 1
        store.search(("s",), query="dark mode")
        assert expiries(store, ("s",), "live") == {t0 + 601}
        write_old("late", t0 + 5)
        clock[0] += 10  # "late" is past its old expiry
        assert store.sweep_ttl() == 1
        assert [i.key for i in store.search(("s",))] == ["live"]
        clock[0] += 600
        assert store.search(("s",)) == []


class State(TypedDict):
    user: str
    text: str
    recalled: list[str]


def test_usable_as_a_graphs_store() -> None:
    """A compiled graph gets the store injected into its nodes (``store=``)."""
    from langgraph.runtime import Runtime

    def remember(state: State, runtime: Runtime[None]) -> dict[str, Any]:
        assert runtime.store is not None
        runtime.store.put(
            ("memories", state["user"]), str(len(state["text"])), {"text": state["text"]}
        )
        return {}

    def recall(state: State, runtime: Runtime[None]) -> dict[str, Any]:
        assert runtime.store is not None
        found = runtime.store.search(("memories", state["user"]), query=state["text"], limit=3)
        return {"recalled": [i.value["text"] for i in found]}

    builder = StateGraph(State)
    builder.add_node("remember", remember)
    builder.add_node("recall", recall)
    builder.add_edge(START, "remember")
    builder.add_edge("remember", "recall")
    builder.add_edge("recall", END)
    with MemlaneStore(index=index(WordEmbeddings())) as store:
        graph = builder.compile(store=store)
        graph.invoke({"user": "alice", "text": "likes green tea", "recalled": []})
        out = graph.invoke({"user": "alice", "text": "green tea or coffee?", "recalled": []})
        assert out["recalled"][0] == "green tea or coffee?"
        assert "likes green tea" in out["recalled"]
        other = graph.invoke({"user": "bob", "text": "tea", "recalled": []})
        assert other["recalled"] == ["tea"]


def test_index_without_embed_uses_the_memorys_embedder() -> None:
    """An index config without "embed" searches with memlane's own (offline ONNX) model."""
    with MemlaneStore(index={"dims": 384, "fields": ["text"]}) as store:
        store.put(("kb",), "tea", {"text": "Green tea has less caffeine than coffee"})
        store.put(("kb",), "bike", {"text": "Check the tyre pressure before a long ride"})
        found = store.search(("kb",), query="which drink keeps me awake?", limit=1)
        assert [i.key for i in found] == ["tea"] and found[0].score is not None


def test_config_errors() -> None:
    emb = WordEmbeddings()
    # dims is trusted (nothing is embedded at construction); vectors of another length
    # are refused at the first put.
    with MemlaneStore(index={"dims": 7, "embed": emb}) as wrong:
        with pytest.raises(memlane.DimensionMismatchError):
            wrong.put(("a",), "k", {"text": "hello"})
        assert wrong.get(("a",), "k") is None
    with (
        memlane.Memory(embedder=langchain_embedder(emb)) as mem,
        pytest.raises(ValueError, match="dims"),
    ):
        MemlaneStore(mem, index={"dims": 7, "embed": emb})
    with memlane.Memory(embedder=None) as text_only:
        with pytest.raises(ValueError, match="embedder"):
            MemlaneStore(text_only, index={"dims": 32, "fields": ["text"]})
        with pytest.raises(ValueError, match="scope key"):
            MemlaneStore(text_only, scope={"tenant": "x"})


def test_an_items_records_are_refreshed_in_one_transaction(
    ttl_store: MemlaneStore, clock: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process killed during a refresh leaves an item's records expiring together: the
    refresh of all of them is one ``renew``, one transaction."""
    store, t0 = ttl_store, clock[0]
    doc = {"text": "dark mode", "title": "theme"}
    store.put(("s",), "a", doc)
    store.put(("s",), "b", doc, ttl=5)
    calls: list[list[str]] = []
    renew = store.memory.renew

    def counted(ids: list[str], **kwargs: Any) -> int:
        calls.append(list(ids))
        return renew(ids, **kwargs)

    monkeypatch.setattr(store.memory, "renew", counted)
    clock[0] += 10
    assert len(store.search(("s",), query="dark mode")) == 2
    # One call per TTL, each holding both records of its item.
    assert sorted(len(c) for c in calls) == [2, 2]
    assert expiries(store, ("s",), "a") == {t0 + 10 + 3600}
    assert expiries(store, ("s",), "b") == {t0 + 10 + 300}
