"""How ``MemlaneStore`` stores an item: the value, key and namespace once (on its first
record), namespace prefixes as fixed-size digests, so an item's size is linear in its
value and namespace; and items an earlier release stored (every record holding the value,
the prefixes joined) still read, search and list right."""

from __future__ import annotations

import json
from typing import Any

import pytest
from langchain_core.embeddings import Embeddings

import memlane
from memlane.integrations.langchain import langchain_embedder
from memlane.integrations.langgraph import MemlaneStore

from .adapter_fakes import WordEmbeddings

FIELDS = ["messages[*].content"]


def index(emb: Embeddings, dims: int, fields: list[str]) -> dict[str, Any]:
    return {"dims": dims, "embed": emb, "fields": fields}


def metadata_size(mem: memlane.Memory) -> int:
    return sum(len(json.dumps(r.metadata)) for r in mem.list("langgraph", limit=10_000))


def test_many_indexed_texts_store_the_value_once() -> None:
    emb = WordEmbeddings(8)
    with memlane.Memory(None, embedder=langchain_embedder(emb), hnsw_precision="f32") as mem:
        store = MemlaneStore(mem, index=index(emb, 8, FIELDS))
        messages = [{"role": "user", "content": f"message {i} " + "y" * 90} for i in range(200)]
        value = {"messages": messages}
        store.put(("threads", "t1"), "history", value)
        records = mem.list("langgraph", limit=1000)
        assert len(records) == 200
        # Was 200 copies of the value (quadratic in the number of texts); each later
        # text holds its item and the namespace's prefix digests, a fixed size.
        assert metadata_size(mem) < len(json.dumps(value)) + 200 * 200
        first = records[0].metadata["lg"]
        assert [r.metadata["lg"] for r in records if r.metadata["lg"]["part"] == 7] == [
            {"item": first["item"], "part": 7, "vec": True, "pre": first["pre"]}
        ]
        item = store.get(("threads", "t1"), "history")
        assert item is not None and item.value == value
        # A hit on any text finds the item, through its first record.
        (hit,) = store.search(("threads",), query="message 150", limit=1)
        assert (hit.key, hit.value) == ("history", value)
        assert hit.score is not None


def test_a_long_namespace_is_stored_in_linear_space() -> None:
    with memlane.Memory(None, embedder=None) as mem:
        store = MemlaneStore(mem)
        ns = tuple(f"{i:03d}" + "x" * 296 for i in range(100))
        store.put(ns, "k", {"v": 1})
        # Was every prefix joined: about 100 * 100 * 300 / 2 characters.
        assert metadata_size(mem) < 2 * sum(len(x) for x in ns)
        assert [i.key for i in store.search(ns[:50])] == ["k"]
        assert store.search((*ns[:49], "other")) == []
        assert store.list_namespaces(prefix=ns[:3], max_depth=2) == [ns[:2]]


def make_old(mem: memlane.Memory) -> None:
    """Rewrites every record of the store as an earlier release wrote it: each holds the
    item, with its namespace prefixes joined (``path``)."""
    records = mem.list("langgraph", limit=1000)
    firsts = {r.metadata["lg"]["item"]: r.metadata["lg"] for r in records}
    for rec in records:
        lg = dict(firsts[rec.metadata["lg"]["item"]])
        ns = lg.pop("ns")
        del lg["pre"]
        path = [".".join(ns[: i + 1]) for i in range(len(ns))]
        lg.update(ns=ns, path=path, part=rec.metadata["lg"]["part"])
        mem.update(rec.id, metadata={"lg": lg})


@pytest.mark.parametrize("old", [False, True], ids=["new", "earlier-release"])
def test_search_prefix_and_filter_read_through_the_first_record(old: bool) -> None:
    emb = WordEmbeddings()
    with memlane.Memory(None, embedder=langchain_embedder(emb), hnsw_precision="f32") as mem:
        store = MemlaneStore(mem, index=index(emb, emb.size, ["title", "tags[*]"]))
        value = {"title": "garden notes", "tags": ["tomato", "basil"], "n": 1}
        store.put(("a", "x"), "k1", value)
        store.put(("b", "x"), "k1", value)  # the same texts, in another namespace
        store.put(("a", "y"), "k2", {**value, "n": 2})
        if old:
            make_old(mem)
            assert all("path" in r.metadata["lg"] for r in mem.list("langgraph", limit=100))

        def found(prefix: tuple[str, ...], **kwargs: Any) -> list[tuple[tuple[str, ...], str]]:
            return [(i.namespace, i.key) for i in store.search(prefix, **kwargs)]

        # "basil" is the best match of each item's last record (part 2).
        assert found(("a",), query="basil", filter={"n": 1}) == [(("a", "x"), "k1")]
        assert sorted(found(("a",), query="basil")) == [(("a", "x"), "k1"), (("a", "y"), "k2")]
        assert found(("b",), query="basil", filter={"n": 2}) == []
        assert found(("a", "y"), filter={"n": 2}) == [(("a", "y"), "k2")]
        item = store.get(("b", "x"), "k1")
        assert item is not None and item.value == value
        assert store.list_namespaces(prefix=("a",)) == [("a", "x"), ("a", "y")]
        # An update writes the item as this release does.
        store.put(("a", "x"), "k1", {**value, "n": 3})
        assert found(("a",), query="tomato", filter={"n": 3}) == [(("a", "x"), "k1")]
        assert found(("a",), query="tomato", filter={"n": 1}) == []
