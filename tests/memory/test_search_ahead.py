"""A search given text has its BM25 list retrieved on a pool thread while the model embeds
the query (``Engine.search_ahead``), and takes that list only if the engine is unchanged:
the hits are those of a search that retrieved it itself, and a write made while the query
was embedded is found. On both backends."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import StoreFactory, WordHashEmbedder
from memlane import Memory, _core
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


class ExpiringEmbedder(WordHashEmbedder):
    """Runs ``action`` in another thread, then takes as long as a model run, when it
    embeds the query."""

    def __init__(self) -> None:
        super().__init__()
        self.action: Any = None

    def embed(self, text: str) -> np.ndarray:
        action, self.action = self.action, None
        if action is not None:
            writer = threading.Thread(target=action)
            writer.start()
            writer.join()
            time.sleep(0.05)
        return super().embed(text)


@pytest.mark.parametrize("case", ["ttl set", "added expiring"])
def test_a_record_that_expires_while_the_query_is_embedded_is_left_out(
    make_store: StoreFactory, case: str
) -> None:
    """The search judges expiry when its model run is over, in a store whose records
    expired before too ("added expiring": the first record that expires)."""
    embedder = ExpiringEmbedder()
    mem = make_store("expiring", embedder)
    mem.add_many([{"text": f"garden lamp {i}"} for i in range(20)])
    target = mem.add("falcon harbor")
    made: list[Any] = []
    if case == "ttl set":
        embedder.action = lambda: mem.update(target.id, ttl=0.001)
    else:
        embedder.action = lambda: made.append(mem.add("falcon harbor falcon", ttl=0.001))
    hits = mem.search("falcon harbor, new to the cache", k=3, track_access=False)
    assert embedder.action is None, "the model ran"
    gone = target.id if case == "ttl set" else made[0].id
    assert gone not in [h.record.id for h in hits]


def test_a_list_ahead_never_waits_behind_a_writer(
    word_embedder: WordHashEmbedder, tmp_path: Path
) -> None:
    """A pool thread retrieving a list does not wait for the engine's lock: a batch
    being prepared holds a read lock while it waits for the pool, a writer waits for
    that reader, and a list waiting behind the writer would hold the pool forever."""
    # Closed only if nothing hung (a close would wait for the hung threads too).
    local = Memory(tmp_path / "store", word_embedder)
    dim = word_embedder.dimension
    local.add_many([{"text": f"river stone {i}"} for i in range(200)])
    local.wait_indexed()
    engine = local._sync.engine
    row = next(iter(local._sync.rows([next(iter(engine.ids()))]).values()))
    rng = np.random.default_rng(0)
    ids = iter(range(10_000_000, 20_000_000))

    def batch(n: int) -> tuple[list[Any], np.ndarray]:
        rows = []
        for _ in range(n):
            i = next(ids)
            rows.append(row._replace(rowid=i, id=f"x{i}", text=" ".join(rng.choice(WORDS, 4))))
        return rows, rng.standard_normal((n, dim)).astype(np.float32)

    big, small = batch(4000), [batch(1) for _ in range(2000)]
    done = threading.Event()
    searched: list[int] = []

    def prepare() -> None:
        while not done.is_set():
            engine.prepare(big[0], True, big[1])

    def write() -> None:
        for rows, vectors in small:
            engine.apply(engine.prepare(rows, True, vectors))
        done.set()

    def search() -> None:
        request = _core.SearchRequest(5)
        vector = rng.standard_normal(dim).astype(np.float32)
        while not done.is_set():
            now = time.time()
            ahead = engine.search_ahead(request, "river stone", now=now)
            time.sleep(0.001)  # the model's run
            engine.search(request, "river stone", vector, now=now, touch=False, ahead=ahead)
            searched.append(1)

    threads = [threading.Thread(target=f, daemon=True) for f in (prepare, write, search, search)]
    for t in threads:
        t.start()
    # A bound on a hang, far above the few seconds this takes.
    deadline = time.monotonic() + 120
    for t in threads:
        t.join(timeout=max(0.0, deadline - time.monotonic()))
    assert not any(t.is_alive() for t in threads), "a search, a write or a batch never ended"
    local.close()
    assert searched
