"""A search that runs the model for its query retrieves the BM25 list meanwhile, on one
of the engine's threads, and uses it only while the store is as it was: the hits are
those of the same search given its vector, a write made while the model runs is found,
and an embedder that fails leaves nothing behind."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from conftest import StoreFactory, WordHashEmbedder
from memlane import Memory

T0 = 1_700_000_000.0

TEXTS = [
    "the zebra grazes near the river",
    "river otters play in cold water",
    "a zebra crossing on the high street",
    "mountain goats climb the steep cliffs",
    "the otter and the zebra share a zoo enclosure",
    "street lamps light the river path at night",
]
QUERIES = ["zebra river", "otter water", "street at night", "goats", "zoo zebra otter"]


def _fill(mem: Memory) -> None:
    mem.add_many([{"text": t, "created_at": T0 + i} for i, t in enumerate(TEXTS)])


def _ranked(mem: Memory, query: str, **options: object) -> list[tuple[str, float]]:
    hits = mem.search(query, k=4, track_access=False, **options)  # type: ignore[arg-type]
    return [(h.record.text, round(h.score, 6)) for h in hits]


def test_a_text_search_ranks_as_the_same_search_given_its_vector(
    make_store: StoreFactory,
) -> None:
    embedder = WordHashEmbedder()
    by_text, by_vector = make_store("text", embedder), make_store("vector", embedder)
    for mem in (by_text, by_vector):
        _fill(mem)
    for q in QUERIES:
        assert _ranked(by_text, q) == _ranked(by_vector, q, query_embedding=embedder.embed(q))


class Writing(WordHashEmbedder):
    """Adds a memory from another thread while it embeds the query ``when``."""

    def __init__(self) -> None:
        super().__init__()
        self.store: Memory | None = None
        self.when = ""

    def embed(self, text: str) -> np.ndarray:
        if text == self.when and self.store is not None:
            store = self.store
            writer = threading.Thread(
                target=lambda: store.add("a zebra and an otter swim in the river", created_at=T0)
            )
            writer.start()
            writer.join()
        return super().embed(text)


def test_a_memory_added_while_the_query_is_embedded_is_in_the_bm25_list(
    make_store: StoreFactory,
) -> None:
    embedder = Writing()
    mem = make_store("writes", embedder)
    _fill(mem)
    embedder.store, embedder.when = mem, "zebra otter swim"
    hits = mem.search("zebra otter swim", k=3, explain=True, track_access=False)
    assert len(mem) == len(TEXTS) + 1
    top = hits[0]
    assert top.record.text == "a zebra and an otter swim in the river"
    assert top.explain is not None and top.explain["bm25_rank"] == 1


class ModelGone(RuntimeError):
    pass


class Failing(WordHashEmbedder):
    def embed(self, text: str) -> np.ndarray:
        if text.startswith("fail"):
            raise ModelGone("the model is gone")
        return super().embed(text)


def test_a_search_whose_embedder_fails_leaves_the_next_search_whole(
    make_store: StoreFactory,
) -> None:
    embedder = Failing()
    mem, plain = make_store("failing", embedder), make_store("plain", embedder)
    for m in (mem, plain):
        _fill(m)
    for _ in range(20):
        with pytest.raises(ModelGone, match="the model is gone"):
            mem.search("fail zebra river", k=3)
    assert _ranked(mem, "zebra river") == _ranked(plain, "zebra river")
    mem.add("zebra river crossing at dawn", created_at=T0)
    assert _ranked(mem, "zebra crossing")[0][0] == "zebra river crossing at dawn"
