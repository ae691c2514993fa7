"""Inputs an attack found mishandled by the adapters: filter keys holding ``.`` or ``\\``,
filters nested thousands deep, bools against numbers, dict keys that are not str, limits
past the engine's ``k``, and malformed LangChain arguments."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from langgraph.store.memory import InMemoryStore
from llama_index.core.schema import TextNode
from llama_index.core.vector_stores import SimpleVectorStore
from llama_index.core.vector_stores.types import (
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
)

import memlane
from memlane.errors import InvalidArgumentError
from memlane.integrations._langgraph_filters import matches
from memlane.integrations.langchain import (
    MemlaneEmbeddings,
    MemlaneVectorStore,
    langchain_embedder,
    metadata_filter,
)
from memlane.integrations.langgraph import MemlaneStore
from memlane.integrations.llamaindex import MemlaneVectorStore as LlamaStore
from memlane.integrations.llamaindex import to_memlane_filter

from .adapter_fakes import WordEmbeddings


@pytest.fixture
def emb() -> WordEmbeddings:
    return WordEmbeddings()


@pytest.fixture
def mem(emb: WordEmbeddings) -> Iterator[memlane.Memory]:
    with memlane.Memory(None, embedder=langchain_embedder(emb), hnsw_precision="f32") as m:
        yield m


def keys(store: Any, flt: Any, prefix: tuple[str, ...] = ("ns",)) -> list[str]:
    return sorted(i.key for i in store.search(prefix, filter=flt))


# -- keys with "." or "\" -------------------------------------------------------------------

ODD_KEYS = {"win": {"C:\\temp": 1}, "esc": {"a\\": "x"}, "dot": {"a.b": 2, "a": {"b": 3}}}
ODD_FILTERS = [
    {"C:\\temp": 1},
    {"a\\": "x"},
    {"a.b": 2},
    {"a": {"b": 3}},
    {"a": {"b": 2}},
]


@pytest.mark.parametrize("flt", ODD_FILTERS)
def test_langgraph_filter_keys_with_dots_and_backslashes(mem: memlane.Memory, flt: Any) -> None:
    ref, store = InMemoryStore(), MemlaneStore(mem)
    for s in (ref, store):
        for k, v in ODD_KEYS.items():
            s.put(("ns",), k, v)
    assert keys(store, flt) == keys(ref, flt)


@pytest.mark.parametrize(("key", "value"), [("file.name", "a.txt"), ("C:\\dir", "x")])
def test_llamaindex_filter_keys_with_dots_and_backslashes(
    mem: memlane.Memory, emb: WordEmbeddings, key: str, value: str
) -> None:
    nodes = [
        TextNode(text="report", id_="n1", metadata={key: value}, embedding=emb.embed_query("r")),
        TextNode(text="other", id_="n2", metadata={"file": {"name": value}, "C:": {"dir": value}}),
    ]
    ref, store = SimpleVectorStore(), LlamaStore(mem)
    ref.add(nodes[:1])
    store.add(nodes)
    filters = MetadataFilters(filters=[MetadataFilter(key=key, value=value)])
    query = VectorStoreQuery(query_embedding=emb.embed_query("r"), similarity_top_k=3)
    query.filters = filters
    assert store.query(query).ids == ref.query(query).ids == ["n1"]
    assert [n.node_id for n in store.get_nodes(filters=filters)] == ["n1"]


# -- deep filters -----------------------------------------------------------------------------


def test_deep_filters_are_refused_not_a_recursion_error(mem: memlane.Memory) -> None:
    deep_and: dict[str, Any] = {"n": 1}
    nested = MetadataFilters(filters=[MetadataFilter(key="n", value=1)])
    deep_value: Any = 1
    for _ in range(5000):
        deep_and = {"$and": [deep_and]}
        nested = MetadataFilters(filters=[nested])
        deep_value = {"n": deep_value}
    for call in (
        lambda: metadata_filter(deep_and),
        lambda: to_memlane_filter(nested),
        lambda: MemlaneStore(mem).search(("a",), filter=deep_value),
        lambda: matches(deep_value, deep_value),
    ):
        with pytest.raises(InvalidArgumentError, match="nested more than 32 levels deep"):
            call()


def test_filters_as_deep_as_the_engine_takes_pass(mem: memlane.Memory) -> None:
    flt: dict[str, Any] = {"n": 1}
    for _ in range(32):
        flt = {"$and": [flt]}
    store = MemlaneVectorStore(WordEmbeddings(), memory=mem)
    store.add_texts(["x"], metadatas=[{"n": 1}])
    assert [d.page_content for d in store.similarity_search("x", filter=flt)] == ["x"]
    with pytest.raises(InvalidArgumentError, match="32 levels"):
        store.similarity_search("x", filter={"$and": [flt]})


# -- bools, numbers and numeric strings -------------------------------------------------------

VALUES = {
    "bool": {"flag": True, "n": True},
    "int": {"flag": 1, "n": 0},
    "float": {"flag": 1.0, "n": 0.5},
    "str": {"flag": "1", "n": 2},
    "numstr": {"s": "5", "v.x": "5", "n": "7"},
}
FILTERS = [
    ({"flag": 1}, ["float", "int"]),
    ({"flag": True}, ["bool"]),
    ({"flag": {"$eq": 1}}, ["float", "int"]),
    ({"flag": {"$ne": 1}}, ["bool", "numstr", "str"]),
    ({"flag": {"$eq": True}}, ["bool"]),
    ({"flag": "1"}, ["str"]),
    ({"n": {"$gt": 0}}, ["float", "str"]),
    ({"n": {"$gte": 0, "$lt": 3}}, ["float", "int", "str"]),
    ({"s": {"$gt": 3}}, []),
    ({"v.x": {"$gt": 3}}, []),
]


@pytest.mark.parametrize(("flt", "expected"), FILTERS)
def test_langgraph_search_admits_what_matches_admits(
    mem: memlane.Memory, flt: Any, expected: list[str]
) -> None:
    """The engine's pre-filter is a superset of the adapter's check, so a search finds
    exactly what the check admits: a bool is never a number, ranges match numbers."""
    store = MemlaneStore(mem)
    for k, v in VALUES.items():
        store.put(("ns",), k, v)
    assert keys(store, flt) == sorted(k for k, v in VALUES.items() if matches(v, flt)) == expected


@pytest.mark.parametrize("flt", [FILTERS[i][0] for i in (0, 2, 3, 5, 6, 7)])
def test_langgraph_filters_as_in_memory_store_where_specified(
    mem: memlane.Memory, flt: Any
) -> None:
    """InMemoryStore's rules (Python's ``==``, ``float()`` for ranges) are memlane's
    without bools (its ``True == 1``) nor numeric strings (its ``float("5")``)."""
    ref, store = InMemoryStore(), MemlaneStore(mem)
    for s in (ref, store):
        for k in ("int", "float"):
            s.put(("ns",), k, VALUES[k])
        s.put(("ns",), "str", {"flag": "one", "n": 2})
    assert keys(store, flt) == keys(ref, flt)


def test_bools_and_numbers_apart_at_any_depth() -> None:
    assert matches({"a": [1, {"b": True}]}, {"a": [1, {"b": True}]})
    assert not matches({"a": [1, {"b": 1}]}, {"a": [1, {"b": True}]})
    assert not matches({"a": [True]}, {"a": {"$eq": [1]}})
    assert matches({"a": 1}, {"a": {"$eq": 1.0}})
    assert not matches({"a": True}, {"a": {"$gte": 1}})


# -- dict keys that are not str ---------------------------------------------------------------


def test_dict_keys_that_are_not_str_are_refused(mem: memlane.Memory, emb: WordEmbeddings) -> None:
    graph = MemlaneStore(mem)
    chain = MemlaneVectorStore(emb, memory=mem)
    for value in ({1: "a"}, {"x": [{2: "a"}]}):
        with pytest.raises(InvalidArgumentError, match="keys must be str at every level"):
            graph.put(("ns",), "k", value)
    with pytest.raises(
        InvalidArgumentError, match=r"metadatas\[0\]: metadata\['m'\] has the key 1"
    ):
        chain.add_texts(["t"], metadatas=[{"m": {1: "a", "1": "b"}}])
    assert mem.count() == 0


# -- limits past the engine's k ---------------------------------------------------------------


def test_a_limit_past_the_engines_k(mem: memlane.Memory, emb: WordEmbeddings) -> None:
    index = {"dims": emb.size, "embed": emb, "fields": ["text"]}
    store = MemlaneStore(mem, index=index)
    for i, t in enumerate(["dark mode", "light mode", "dark theme"]):
        store.put(("docs",), f"k{i}", {"text": t})
    assert len(store.search(("docs",), query="dark", limit=10_000_000)) == 3
    nodes = LlamaStore(mem)
    nodes.add([TextNode(text=t, id_=t, embedding=emb.embed_query(t)) for t in ("a b", "c d")])
    vec = emb.embed_query("a")
    for mode in (VectorStoreQueryMode.DEFAULT, VectorStoreQueryMode.MMR):
        query = VectorStoreQuery(query_embedding=vec, similarity_top_k=5_000_000, mode=mode)
        assert sorted(nodes.query(query).ids or []) == ["a b", "c d"]


# -- malformed LangChain arguments ------------------------------------------------------------


def test_langchain_refuses_a_str_of_texts_and_a_missing_vector(
    mem: memlane.Memory, emb: WordEmbeddings
) -> None:
    with pytest.raises(InvalidArgumentError, match="texts must be a list of str"):
        MemlaneEmbeddings(langchain_embedder(emb)).embed_documents("abc")  # type: ignore[arg-type]
    store = MemlaneVectorStore(emb, memory=mem)
    store.add_texts(["dark mode", "light mode"])
    for call in (
        store.similarity_search_by_vector,
        store.similarity_search_by_vector_with_score,
        store.max_marginal_relevance_search_by_vector,
    ):
        with pytest.raises(InvalidArgumentError, match="embedding must be a vector"):
            call(None, k=2)  # type: ignore[arg-type]
