"""What one add or add_many asks of the embedding path: the cache once per text, the
texts' checks once, the model once per distinct text; and ``add`` stores what
``add_many`` stores for the same fields, with the same refusals."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

import memlane.embeddings._base as base
import memlane.embeddings.cache as cache_module
from conftest import StoreFactory, WordHashEmbedder
from memlane.errors import EmbedderUnavailableError, InvalidArgumentError


class Checked(WordHashEmbedder):
    """An embedder that checks its texts as the package's embedders do."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[list[str]] = []

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        items = base.check_texts(texts)
        self.batches.append(items)
        return super().embed_batch(items)


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the calls of ``check_texts``, wherever the embedding path calls it."""
    calls: list[int] = []
    real = base.check_texts

    def counting(texts: Sequence[str]) -> list[str]:
        calls.append(len(texts))
        return real(texts)

    monkeypatch.setattr(base, "check_texts", counting)
    monkeypatch.setattr(cache_module, "check_texts", counting)
    return calls


def test_an_add_asks_the_cache_and_checks_its_text_once(
    make_store: StoreFactory, checks: list[int]
) -> None:
    embedder = Checked()
    mem = make_store("s", embedder)
    cache = mem._writer.embedder.cache  # type: ignore[union-attr]
    mem.add("a first text")
    assert (cache.hits, cache.misses) == (0, 1)
    assert checks == [1] and embedder.batches == [["a first text"]]
    mem.add("a first text", id="again")  # from the cache
    assert (cache.hits, cache.misses) == (1, 1)
    assert checks == [1]


def test_add_many_asks_the_cache_once_per_text_and_the_model_once_per_distinct_text(
    make_store: StoreFactory, checks: list[int]
) -> None:
    embedder = Checked()
    mem = make_store("s", embedder)
    cache = mem._writer.embedder.cache  # type: ignore[union-attr]
    mem.add("stored before")
    cache.clear()
    hits, misses = cache.hits, cache.misses
    texts = ["one", "two", "one", "stored before"]
    records = mem.add_many([{"text": t} for t in texts])
    assert (cache.hits - hits, cache.misses - misses) == (0, 4)
    # A stored record's vector is no source (it may be one a caller gave): the model
    # sees each distinct text once, the stored one too.
    assert embedder.batches[-1] == ["one", "two", "stored before"]
    assert checks == [1, 3]
    got = [mem.get(r.id, include_embedding=True).embedding for r in records]
    np.testing.assert_array_equal(got[0], got[2])
    assert (cache.hits, cache.misses) == (hits, misses + 4)
    mem.add_many([{"text": "two"}, {"text": "one"}])
    assert (cache.hits - hits, cache.misses - misses) == (2, 4)


class Wrong(WordHashEmbedder):
    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        return np.zeros((len(texts) + 1, self.dimension), dtype=np.float32)


def test_a_model_answer_of_the_wrong_shape_stores_nothing(make_store: StoreFactory) -> None:
    mem = make_store("s", Wrong())
    with pytest.raises(EmbedderUnavailableError, match=r"returned shape \(2, 32\) for 1 texts"):
        mem.add("a text")
    assert len(mem) == 0


FIELDS: dict[str, Any] = {
    "table": "notes",
    "type": "episodic",
    "agent_id": "ag",
    "user_id": "us",
    "room_id": "ro",
    "world_id": "wo",
    "session_id": "se",
    "namespace": "na",
    "speaker": "user",
    "importance": 0.75,
    "evergreen": True,
    "metadata": {"k": [1, "v"]},
    "created_at": 1_000_000.0,
    "ttl": 3600.0,
}


def test_add_stores_what_add_many_stores(make_store: StoreFactory) -> None:
    mem = make_store("s", WordHashEmbedder())
    one = mem.add("the same fields", id="one", **FIELDS)
    (many,) = mem.add_many([{"text": "the same fields", "id": "many", **FIELDS}])
    a, b = mem.get("one").to_dict(), mem.get("many").to_dict()
    for d in (a, b):
        for volatile in ("id", "updated_at", "recorded_at", "expires_at"):
            del d[volatile]
    assert a == b
    assert one.to_dict(embedding=False)["metadata"] == many.metadata == {"k": [1, "v"]}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"importance": 2.0}, "importance"),
        ({"agent_id": 3}, "agent_id"),
        ({"ttl": -1.0}, "ttl must be a number of seconds > 0"),
        ({"ttl": 5.0, "expires_at": 9e9}, "give expires_at or ttl, not both"),
        ({"embedding": [1.0, 2.0]}, "embedding"),
        ({"evergreen": "yes"}, "evergreen"),
    ],
)
def test_add_refuses_what_add_many_refuses(
    make_store: StoreFactory, fields: dict[str, Any], message: str
) -> None:
    mem = make_store("s", WordHashEmbedder())
    with pytest.raises(InvalidArgumentError, match=message) as single:
        mem.add("a text", **fields)
    with pytest.raises(InvalidArgumentError, match=message) as many:
        mem.add_many([{"text": "a text", **fields}])
    assert str(many.value) == f"record 0: {single.value}"
    assert len(mem) == 0


def test_a_vector_one_scope_gave_is_not_the_models_for_another_scope(
    make_store: StoreFactory,
) -> None:
    # A stored record with the same text is no source of the model's vector: a vector
    # agent A gave would otherwise become agent B's memory's and, through the cache,
    # the query vector of every search of that text.
    embedder = Checked()
    text = "the quarterly report is due on friday"
    model = embedder.embed(text)
    given = np.zeros_like(model)
    given[-1] = 1.0
    assert float(given @ model) < 0.5
    mem = make_store("s", embedder)
    mem.add(text, agent_id="A", embedding=given)
    mem.update(mem.add("another text", agent_id="A").id, text=text, embedding=given)
    mem.close()
    mem = make_store("s", embedder)  # a new process's cache: empty
    b = mem.add(text, agent_id="B")
    stored = mem.get(b.id, include_embedding=True).embedding
    np.testing.assert_allclose(stored, model, atol=2e-3)
    hit = mem.search(text, agent_id="B", mode="vector", k=1, explain=True)[0]
    assert hit.record.id == b.id and hit.explain["cosine"] > 0.99
    # The given vector never reaches the cache: a search of the text in a third scope
    # is the model's.
    c = mem.add("friday is when the quarterly report is due", agent_id="C")
    got = mem.search(text, agent_id="C", mode="vector", k=1, explain=True)[0]
    want = float(embedder.embed(c.text) @ model)
    assert got.record.id == c.id and got.explain["cosine"] == pytest.approx(want, abs=2e-3)
    assert embedder.batches.count([text]) >= 1
