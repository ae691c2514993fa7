"""A search given text has its BM25 list retrieved on a pool thread while the model embeds
the query (``Engine.search_ahead``), and takes that list only if the engine is unchanged:
the hits are those of a search that retrieved it itself, and a write made while the query
was embedded is found. On both backends."""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import pytest

from conftest import StoreFactory, WordHashEmbedder
from memlane import Memory
from memlane.embeddings.cache import CachedEmbedder

WORDS = [
    "river",
    "stone",
    "garden",
    "lamp",
    "winter",
    "violin",
    "harbor",
    "pepper",
    "candle",
    "meadow",
    "copper",
    "falcon",
]


def fill(mem: Memory, n: int = 240) -> None:
    rng = np.random.default_rng(4)
    mem.add_many(
        [
            {
                "text": " ".join(rng.choice(WORDS, size=int(rng.integers(2, 7)))),
                "agent_id": ("a", "b", "c")[i % 3],
                "importance": float(rng.random()),
            }
            for i in range(n)
        ]
    )
    # Linked: a parked vector's cosine is exact, a linked one's read from its code.
    mem.wait_indexed()


class EngineSpy:
    """The store's engine, noting the ``ahead`` each search is given."""

    def __init__(self, engine: Any) -> None:
        self._engine = engine
        self.given: list[object] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def __len__(self) -> int:
        return len(self._engine)

    def __contains__(self, item: object) -> bool:
        return item in self._engine

    def search(self, *args: Any, **kwargs: Any) -> Any:
        self.given.append(kwargs.get("ahead"))
        return self._engine.search(*args, **kwargs)


def without_ahead(monkeypatch: pytest.MonkeyPatch) -> None:
    """Searches embed without starting their list ahead."""
    embed_checked = CachedEmbedder.embed_checked

    def alone(self: CachedEmbedder, text: str, before_model: Any = None) -> Any:
        return embed_checked(self, text)

    monkeypatch.setattr(CachedEmbedder, "embed_checked", alone)


def shown(hits: list[Any]) -> list[tuple[str, float]]:
    return [(h.record.text, round(h.score, 12)) for h in hits]


def test_the_hits_are_those_of_a_search_without_a_list_ahead(
    make_store: StoreFactory, word_embedder: WordHashEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two stores of the same records: neither search answers from the other's caches.
    ahead, alone = make_store("ahead", word_embedder), make_store("alone", word_embedder)
    for m in (ahead, alone):
        fill(m)
    spy = EngineSpy(ahead._sync.engine)
    monkeypatch.setattr(ahead._sync, "engine", spy)
    rng = np.random.default_rng(9)
    asked = [
        (" ".join(rng.choice(WORDS, size=2)) + f" {i}", scope)
        for i in range(12)
        for scope in ({}, {"agent_id": "a"})
    ]
    # Relevance alone: the two stores' records were made at other times.
    kw: dict[str, Any] = {"k": 5, "track_access": False, "weights": {"relevance": 1}}
    with_lists = [shown(ahead.search(q, **kw, **s)) for q, s in asked]
    assert len(spy.given) == len(asked)
    assert all(a is not None for a in spy.given), "every search was given a list ahead"
    without_ahead(monkeypatch)
    assert with_lists == [shown(alone.search(q, **kw, **s)) for q, s in asked]
    assert all(with_lists)


class WritingEmbedder(WordHashEmbedder):
    """Embeds the query ``asked`` only after another thread stored ``written``, a
    moment after the model was asked to run."""

    asked = "falcon harbor"
    written = "falcon harbor falcon harbor"

    def __init__(self) -> None:
        super().__init__()
        self.store: Memory | None = None

    def embed(self, text: str) -> np.ndarray:
        vector = super().embed(text)
        if text == self.asked and self.store is not None:
            store = self.store
            # The list ahead was most likely retrieved in this pause; the search must
            # not take it, as the write below changes the engine.
            time.sleep(0.05)
            writer = threading.Thread(target=lambda: store.add(self.written, agent_id="a"))
            writer.start()
            writer.join()
        return vector


def test_a_write_made_while_the_query_is_embedded_is_found(make_store: StoreFactory) -> None:
    embedder = WritingEmbedder()
    mem = make_store("written", embedder)
    fill(mem)
    embedder.store = mem
    hits = mem.search(WritingEmbedder.asked, k=5, explain=True)
    written = [h for h in hits if h.record.text == WritingEmbedder.written]
    assert written, "the record written while the query was embedded"
    # In the BM25 list, first: a list read before the write would not hold it (its BM25
    # score would be filled in, with no rank).
    assert written[0].explain is not None and written[0].explain["bm25_rank"] == 1
