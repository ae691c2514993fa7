"""EmbeddingCache (an LRU on an OrderedDict under a lock) and CachedEmbedder."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np
import pytest

from memlane.embeddings import CachedEmbedder, EmbeddingCache
from memlane.embeddings.cache import text_key
from memlane.errors import InvalidArgumentError


def vec(x: float) -> np.ndarray:
    return np.full(4, x, dtype=np.float32)


def test_least_recently_used_goes_first() -> None:
    cache = EmbeddingCache(maxsize=2)
    cache.put("m", "a", vec(1))
    cache.put("m", "b", vec(2))
    assert cache.get("m", "a") is not None  # a is now the most recently used
    cache.put("m", "c", vec(3))
    assert len(cache) == 2
    assert cache.get("m", "b") is None
    a, c = cache.get("m", "a"), cache.get("m", "c")
    assert a is not None and c is not None and a[0] == 1 and c[0] == 3
    assert (cache.hits, cache.misses) == (3, 1)


def test_putting_again_refreshes_and_replaces() -> None:
    cache = EmbeddingCache(maxsize=2)
    cache.put("m", "a", vec(1))
    cache.put("m", "b", vec(2))
    cache.put("m", "a", vec(9))
    cache.put("m", "c", vec(3))
    assert cache.get("m", "b") is None
    got = cache.get("m", "a")
    assert got is not None and got[0] == 9


def test_keys_are_per_embedder_and_vectors_are_read_only_copies() -> None:
    cache = EmbeddingCache()
    given = vec(1)
    cache.put("one", "t", given)
    given[0] = 5
    got = cache.get("one", "t")
    assert got is not None and got[0] == 1 and not got.flags.writeable
    assert cache.get("two", "t") is None


def test_size_zero_stores_nothing_and_bad_sizes_raise() -> None:
    cache = EmbeddingCache(maxsize=0)
    cache.put("m", "a", vec(1))
    assert len(cache) == 0 and cache.get("m", "a") is None
    for bad in (-1, 1.5, True, "3"):
        with pytest.raises(InvalidArgumentError):
            EmbeddingCache(maxsize=bad)  # type: ignore[arg-type]


def test_clear() -> None:
    cache = EmbeddingCache()
    cache.put("m", "a", vec(1))
    cache.clear()
    assert len(cache) == 0 and cache.get("m", "a") is None


def test_threads_keep_the_bound() -> None:
    cache = EmbeddingCache(maxsize=64)
    errors: list[BaseException] = []

    def work(t: int) -> None:
        try:
            for i in range(2000):
                cache.put("m", f"{t}-{i % 100}", vec(float(i)))
                cache.get("m", f"{(t + 1) % 4}-{i % 100}")
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(cache) == 64
    assert cache.hits + cache.misses == 4 * 2000


class Counting:
    name = "counting"
    dimension = 4

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def embed(self, text: str) -> np.ndarray:
        return self.embed_batch([text])[0]

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        self.calls.append(list(texts))
        return np.stack([vec(float(len(t))) for t in texts])


def test_cached_embedder_embeds_each_text_once() -> None:
    inner = Counting()
    emb = CachedEmbedder(inner, maxsize=10)
    out = emb.embed_batch(["aa", "b", "aa"])
    assert [row[0] for row in out] == [2, 1, 2]
    assert inner.calls == [["aa", "b"]]
    out = emb.embed_batch(["b", "ccc"])
    assert [row[0] for row in out] == [1, 3] and inner.calls[-1] == ["ccc"]
    assert emb.embed("aa")[0] == 2 and len(inner.calls) == 2


class Asymmetric(Counting):
    """Embeds a question unlike a stored text, as e5's prefixes do."""

    asymmetric = True

    def embed(self, text: str) -> np.ndarray:
        return -self.embed_batch([text])[0]


def test_an_asymmetric_embedders_question_never_gets_a_stored_texts_vector() -> None:
    emb = CachedEmbedder(Asymmetric(), maxsize=10)
    assert emb.embed_batch(["aa"])[0][0] == 2
    assert emb.embed("aa")[0] == -2
    assert emb.embed("aa")[0] == -2 and len(emb.inner.calls) == 2  # the question cached
    assert emb.embed_batch(["aa"])[0][0] == 2 and len(emb.inner.calls) == 2


def test_a_short_text_is_its_own_key_and_a_long_one_a_digest() -> None:
    short, long = "a question", "word " * 200
    assert text_key(short) == short
    key = text_key(long)
    assert isinstance(key, bytes) and len(key) == 32
    assert text_key(long + "x") != key  # the whole text counts, past the first 512
    cache = EmbeddingCache(maxsize=4)
    cache.put("m", short, vec(1))
    cache.put("m", long, vec(2))
    got_short, got_long = cache.get("m", short), cache.get("m", long)
    assert got_short is not None and got_short[0] == 1
    assert got_long is not None and got_long[0] == 2
    assert cache.get("m", long + "x") is None


def test_a_lone_surrogate_is_the_embedders_to_refuse_at_any_length() -> None:
    seen: list[str] = []

    class Refusing:
        name, dimension = "refusing", 4

        def embed(self, text: str) -> np.ndarray:
            seen.append(text)
            raise InvalidArgumentError("text is not valid Unicode")

        def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
            raise AssertionError("not called")

    cached = CachedEmbedder(Refusing())
    for text in ("a \ud800 b", "a \ud800 b " * 100):
        with pytest.raises(InvalidArgumentError):
            cached.embed(text)
    assert len(seen) == 2 and len(cached.cache) == 0


def test_a_str_subclass_cannot_take_another_texts_entry() -> None:
    class Liar(str):
        def __eq__(self, other: object) -> bool:
            return True

        def __hash__(self) -> int:
            return hash("the real question")

    cache = EmbeddingCache()
    cache.put("m", Liar("poison"), vec(9))
    assert cache.get("m", "the real question") is None
    cache.put("m", "the real question", vec(1))
    got = cache.get("m", "the real question")
    assert got is not None and got[0] == 1
