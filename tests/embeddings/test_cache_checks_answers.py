"""CachedEmbedder keeps only vectors a store can use: a model's bad answer (not numbers,
the wrong shape, NaN or infinity, all zeros, a norm that cannot be scaled to unit
length) is its ``EmbedderUnavailableError`` and is not cached, so the text is embedded
again once the model answers well. The wrappers (CachedEmbedder, LazyEmbedder) say
whether what they wrap is ``asymmetric``, so that a store's cache in front of them
keeps a question's vector apart from a stored text's."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import WordHashEmbedder
from memlane import Memory
from memlane.embeddings import CachedEmbedder, EmbeddingCache
from memlane.embeddings.lazy import LazyEmbedder
from memlane.errors import EmbedderMismatchError, EmbedderUnavailableError

DIM = 4
GOOD = np.array([1.0, 0.3, 0.2, 0.1], dtype=np.float32)

# A bad vector for one text: each is the model's failure, none the caller's.
BAD: dict[str, Callable[[], Any]] = {
    "zeros": lambda: np.zeros(DIM, dtype=np.float32),
    "nan": lambda: np.array([1.0, np.nan, 0.0, 0.0], dtype=np.float32),
    "inf": lambda: np.array([np.inf, 0.0, 0.0, 0.0], dtype=np.float32),
    "norm past float32": lambda: np.full(DIM, 1e38, dtype=np.float32),
    "subnormal norm": lambda: np.full(DIM, 1e-45, dtype=np.float32),
    "past float32's range": lambda: [1e300, 0.0, 0.0, 0.0],
    "wrong dimension": lambda: np.ones(DIM + 1, dtype=np.float32),
    "strings": lambda: ["a", "b", "c", "d"],
    "None": lambda: None,
    "complex": lambda: np.ones(DIM, dtype=np.complex64),
}


class Flaky:
    """Answers ``bad()`` for every text while ``broken``, else ``GOOD``; counts calls."""

    name = "test:flaky"
    dimension = DIM

    def __init__(self, bad: Callable[[], Any]) -> None:
        self.bad = bad
        self.broken = True
        self.calls = 0

    def _one(self) -> Any:
        return self.bad() if self.broken else GOOD.copy()

    def embed(self, text: str) -> Any:
        self.calls += 1
        return self._one()

    def embed_batch(self, texts: Sequence[str]) -> Any:
        self.calls += 1
        rows = [self._one() for _ in texts]
        if any(r is None or (isinstance(r, list) and isinstance(r[0], str)) for r in rows):
            return rows[0]  # not rows at all
        return np.stack([np.asarray(r) for r in rows])


@pytest.mark.parametrize("kind", BAD)
def test_a_bad_answer_is_the_models_failure_and_is_not_cached(kind: str) -> None:
    model = Flaky(BAD[kind])
    cached = CachedEmbedder(model)
    asks: list[Callable[[], object]] = [
        lambda: cached.embed("a question"),
        lambda: cached.embed_batch(["a text"]),
    ]
    for call in asks:
        with pytest.raises(EmbedderUnavailableError):
            call()
    assert len(cached.cache) == 0
    model.broken = False
    calls = model.calls
    np.testing.assert_array_equal(cached.embed("a question"), GOOD)
    np.testing.assert_array_equal(cached.embed_batch(["a text"]), GOOD[None, :])
    assert model.calls == calls + 2  # asked again, not answered from the cache


@pytest.mark.parametrize(
    ("layout", "answer"),
    [
        ("a strided view", lambda: np.repeat(GOOD, 2)[::2]),
        ("big-endian", lambda: GOOD.astype(">f4")),
        ("float64", lambda: GOOD.astype(np.float64)),
    ],
)
def test_a_good_vector_in_another_layout_is_taken(layout: str, answer: Callable[[], Any]) -> None:
    # The question's quick check reads a contiguous float32 vector; any other layout
    # goes the whole check's way and is taken as the same vector.
    model = Flaky(answer)
    cached = CachedEmbedder(model)
    np.testing.assert_array_equal(cached.embed("a question"), GOOD)
    np.testing.assert_array_equal(cached.embed("a question"), GOOD)
    assert model.calls == 1


def test_the_cache_keeps_a_float32_copy_of_what_it_is_given() -> None:
    cache = EmbeddingCache(4)
    given = np.array([1.0, 2.0], dtype=np.float32)
    cache.put("m", "a", given)
    cache.put("m", "b", [1.0, 2.0])
    given[0] = 9.0
    for text in ("a", "b"):
        kept = cache.get("m", text)
        assert kept is not None and kept.dtype == np.float32
        np.testing.assert_array_equal(kept, [1.0, 2.0])


def test_the_message_says_what_is_wrong_and_names_the_text() -> None:
    cached = CachedEmbedder(Flaky(BAD["zeros"]))
    with pytest.raises(EmbedderUnavailableError, match=r"test:flaky returned for 'b' is all zeros"):
        cached.embed_batch(["a", "b"][1:])
    with pytest.raises(EmbedderUnavailableError, match=r"non-finite"):
        CachedEmbedder(Flaky(BAD["nan"])).embed("q")
    with pytest.raises(EmbedderUnavailableError, match=r"returned shape \(5,\) for 1 texts"):
        CachedEmbedder(Flaky(BAD["wrong dimension"])).embed("q")


@pytest.mark.parametrize("op", ["add", "search"])
def test_a_store_embeds_the_text_again_once_the_model_recovers(tmp_path: Path, op: str) -> None:
    model = Flaky(BAD["zeros"])
    model.broken = False
    with Memory(tmp_path / "store", embedder=model) as mem:
        mem.add("seed")
        model.broken = True

        def run() -> object:
            return mem.add("the text") if op == "add" else mem.search("the text", 3)

        with pytest.raises(EmbedderUnavailableError, match="all zeros"):
            run()
        assert len(mem) == 1
        model.broken = False
        calls = model.calls
        run()
        assert model.calls == calls + 1
        assert len(mem) == (2 if op == "add" else 1)


class Asymmetric:
    """A question's vector unlike a stored text's, as e5's prefixes make them."""

    name = "test:asymmetric"
    dimension = DIM
    asymmetric = True
    QUERY = np.array([1.0, 0.0, 0.0, 0.0], dtype=np.float32)
    PASSAGE = np.array([0.0, 1.0, 0.0, 0.0], dtype=np.float32)

    def embed(self, text: str) -> np.ndarray:
        return self.QUERY.copy()

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self.PASSAGE] * len(texts))


def lazy_asymmetric() -> LazyEmbedder:
    return LazyEmbedder(Asymmetric, Asymmetric.name, DIM, asymmetric=True)


@pytest.mark.parametrize(
    "wrap",
    [
        lambda: CachedEmbedder(Asymmetric()),
        lazy_asymmetric,
        lambda: CachedEmbedder(lazy_asymmetric()),
    ],
    ids=["cached", "lazy", "cached-lazy"],
)
def test_a_wrapped_asymmetric_embedder_stays_asymmetric(
    tmp_path: Path, wrap: Callable[[], Any]
) -> None:
    embedder = wrap()
    assert embedder.asymmetric is True
    with Memory(tmp_path / "store", embedder=embedder) as mem:
        mem.search("dark mode", 1)  # the question first
        record = mem.add("dark mode")  # then the same words stored
        stored = mem.get(record.id, include_embedding=True).embedding
        assert stored is not None
        np.testing.assert_allclose(np.asarray(stored, dtype=np.float64), Asymmetric.PASSAGE)


def test_a_symmetric_embedder_wrapped_stays_symmetric() -> None:
    assert CachedEmbedder(Flaky(BAD["zeros"])).asymmetric is False
    assert LazyEmbedder(Asymmetric, Asymmetric.name, DIM).asymmetric is False


def test_a_lazy_embedder_that_builds_another_kind_is_refused() -> None:
    lazy = LazyEmbedder(Asymmetric, Asymmetric.name, DIM)  # announced symmetric
    with pytest.raises(EmbedderMismatchError, match="is not the one announced"):
        lazy.embed("dark mode")


def _in_six_byte_records(values: np.ndarray) -> np.ndarray:
    """A float32 view of ``values`` whose stride (6 bytes) is no whole element."""
    records = np.zeros(values.size, dtype=[("v", "<f4"), ("pad", "<u2")])
    records["pad"] = 0x3F80  # what a reader stepping 4 bytes at a time would take
    records["v"] = values
    view = records["v"]
    assert view.strides == (6,)
    return view


@pytest.mark.parametrize(
    "values",
    [np.array([0.25, 0.25, 0.25, np.nan]), np.full(DIM, 1e-40)],
    ids=["nan", "subnormal norm"],
)
def test_a_bad_vector_whose_stride_is_no_whole_element_is_refused(values: np.ndarray) -> None:
    model = Flaky(lambda: _in_six_byte_records(values))
    cached = CachedEmbedder(model)
    with pytest.raises(EmbedderUnavailableError):
        cached.embed("a question")
    assert len(cached.cache) == 0


def test_a_shared_cache_never_gives_a_vector_of_another_dimension() -> None:
    # Two embedders of one name (``openai:<model>`` on two servers) and two dimensions
    # shared a cache: the second was given the first's 8 values, or numpy's ValueError.
    cache = EmbeddingCache(100)
    small = CachedEmbedder(WordHashEmbedder(8, name="same"), cache)
    large = CachedEmbedder(WordHashEmbedder(16, name="same"), cache)
    assert small.embed("hello").shape == (8,)
    assert large.embed("hello").shape == (16,)
    assert large.embed_batch(["hello", "other"]).shape == (2, 16)
    assert small.embed_batch(["hello"]).shape == (1, 8)
