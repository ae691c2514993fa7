"""An embedding cache keyed by (embedder name, the text or a digest of a long one).

``EmbeddingCache`` is a bounded LRU that several embedders may share;
``CachedEmbedder`` wraps any ``Embedder`` so that
identical texts are embedded once (a batch embeds only its misses, in one call).
``memlane.Memory`` puts one in front of its embedder and, for texts
already stored, reuses the vectors in its database as well.

A cache keeps only what a store can use: a model's answer that is not numbers of the
right shape, or has a vector a store refuses (a NaN or infinity, all zeros, a norm
that cannot be scaled to unit length), is the model's failure
(``EmbedderUnavailableError``) and is not kept, so the text is embedded again when
next asked (a server's one bad answer would otherwise last as long as the process).
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence

import numpy as np

from memlane._core import squared_norm
from memlane.coerce import check_vectors, usable_vectors
from memlane.embeddings._base import (
    Embedder,
    FloatArray,
    check_text,
    check_texts,
    is_asymmetric,
    quoted,
)
from memlane.errors import EmbedderUnavailableError, InvalidArgumentError, shown

__all__ = ["CachedEmbedder", "EmbeddingCache", "text_key"]


#: Texts up to this many characters are their own key; a longer one is keyed by its
#: digest, so that the cache's bound on entries bounds the texts it keeps alive as well.
KEY_CHARS = 512


def text_key(text: str) -> str | bytes:
    """The cache key of the exact text besides the embedder's name: the text itself up
    to ``KEY_CHARS`` characters, else its 32-byte BLAKE2b digest (a str never equals
    bytes). A search's question is looked up before the model runs and kept after it,
    when every cache is cold: a str keeps its hash, so it is hashed once, and a digest
    costs three to six times that hash there (benches/README.md, "The Python around a
    search")."""
    if type(text) is not str:
        # A subclass could compare equal to another text and take its entry.
        text = str.__str__(text)
    if len(text) <= KEY_CHARS:
        return text
    # surrogatepass: a lone surrogate is the embedder's to refuse, as in a short text.
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=32).digest()


def model_vectors(
    name: str, answer: object, texts: list[str], dimension: int, *, one: bool = False
) -> FloatArray:
    """The model ``name``'s ``answer`` for ``texts`` as float32, a row per text (``one``:
    the one vector of a single text), each vector one a store can use; else
    ``EmbedderUnavailableError`` saying what is wrong (the texts were fine: the caller
    can do nothing about it)."""
    if (
        one
        and type(answer) is np.ndarray
        and answer.dtype == np.float32
        and answer.shape == (dimension,)
        and _settled(answer)
    ):
        return answer
    try:
        raw = np.asarray(answer)
    except (TypeError, ValueError) as e:  # rows of different lengths, a broken __array__
        raise EmbedderUnavailableError(f"{name} returned no array of numbers: {e}") from None
    if raw.dtype.kind not in "fiu":  # strings, objects (ints past 64 bits), bools, complex
        raise EmbedderUnavailableError(f"{name} returned {raw.dtype} values, not numbers")
    with np.errstate(over="ignore"):
        vectors = raw.astype(np.float32, copy=False)  # past float32's range: inf, refused
    shape = (dimension,) if one else (len(texts), dimension)
    if vectors.shape != shape:
        raise EmbedderUnavailableError(
            f"{name} returned shape {vectors.shape} for {len(texts)} texts, expected {shape}"
        )
    rows = vectors[None, :] if one else vectors
    usable = usable_vectors(rows)
    if not usable.all():
        i = int(np.flatnonzero(~usable)[0])
        label = f"the vector {name} returned for {quoted(texts[i])}"
        try:
            check_vectors(rows[i : i + 1], None, label)
        except InvalidArgumentError as e:  # says what is wrong with it
            raise EmbedderUnavailableError(str(e)) from None
    result: FloatArray = vectors
    return result


def _settled(vector: FloatArray) -> bool:
    """Whether a sum of squares well inside float32's range settles ``vector`` as usable
    (as ``usable_vectors`` settles a row): a question's vector, on the path of every
    search, is checked so in a tenth of the whole check's time, in the engine's code
    (numpy's dispatch cost a search more after a model run)."""
    return 1e-30 <= squared_norm(vector) <= 1e30


def query_key(embedder: Embedder) -> str:
    """The cache's name for ``embedder``'s question vectors (``embed``): its name, or
    when it is ``asymmetric`` (a question embedded unlike a stored text) a name of
    their own, so that the same words asked never get the vector they were stored with."""
    if is_asymmetric(embedder):
        return f"{embedder.name}\0query"
    return embedder.name


#: A cache entry's key: the embedder's name and ``text_key`` of the text.
Key = tuple[str, str | bytes]


class EmbeddingCache:
    """A thread-safe LRU of vectors keyed by ``(embedder name, text_key(text))``.

    The LRU is an ``OrderedDict`` (its reordering and eviction are C) under this
    cache's lock.
    """

    def __init__(self, maxsize: int = 4096) -> None:
        if isinstance(maxsize, bool) or not isinstance(maxsize, int) or maxsize < 0:
            raise InvalidArgumentError(f"maxsize must be an int >= 0, got {shown(maxsize)}")
        self.maxsize = maxsize
        self._data: OrderedDict[Key, FloatArray] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._data)

    def get(self, name: str, text: str) -> FloatArray | None:
        return self.get_key((name, text_key(text)))

    def put(self, name: str, text: str, vector: FloatArray) -> None:
        self.put_key((name, text_key(text)), vector)

    def get_key(self, key: Key) -> FloatArray | None:
        """``get`` by a key already computed (a miss is then ``put_key`` by it)."""
        with self._lock:
            v = self._data.get(key)
            if v is None:
                self.misses += 1
                return None
            self._data.move_to_end(key)  # a hit becomes the most recently used
            self.hits += 1
            return v

    def put_key(self, key: Key, vector: FloatArray) -> None:
        if self.maxsize == 0:
            return
        # A copy, as the caller's may change; a model's vector is float32 already
        # (``model_vectors``), copied without numpy.array's conversion.
        if type(vector) is np.ndarray and vector.dtype == np.float32:
            v = vector.copy()
        else:
            v = np.array(vector, dtype=np.float32, copy=True)
        v.setflags(write=False)
        with self._lock:
            self._data[key] = v
            self._data.move_to_end(key)
            if len(self._data) > self.maxsize:
                self._data.popitem(last=False)  # the least recently used

    def clear(self) -> None:
        with self._lock:
            self._data.clear()


class CachedEmbedder:
    """``embedder`` with an ``EmbeddingCache`` in front; same name, dimension and
    ``asymmetric``. What the model answers is checked before it is cached: a vector a
    store cannot use is an ``EmbedderUnavailableError`` and is not kept."""

    def __init__(
        self, embedder: Embedder, cache: EmbeddingCache | None = None, maxsize: int = 4096
    ) -> None:
        self.inner = embedder
        self.cache = cache if cache is not None else EmbeddingCache(maxsize)

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def dimension(self) -> int:
        return self.inner.dimension

    @property
    def asymmetric(self) -> bool:
        """The wrapped embedder's: a cache (``Memory``'s) in front of this one must
        key its questions apart too."""
        return is_asymmetric(self.inner)

    def embed(self, text: str) -> FloatArray:
        return self.embed_checked(check_text(text))

    def embed_checked(
        self, text: str, before_model: Callable[[], object] | None = None
    ) -> FloatArray:
        """``embed`` of a text its caller has checked (a search checks its query once);
        ``before_model`` is called just before the model runs, not on a cache hit (a
        search starts the work that needs no vector there)."""
        key = (query_key(self.inner), text_key(text))
        hit = self.cache.get_key(key)
        # A cache shared with an embedder of the same name and another dimension may
        # hold its vector: not this one's.
        if hit is not None and hit.shape[0] == self.inner.dimension:
            return hit.copy()
        if before_model is not None:
            before_model()
        v = model_vectors(self.name, self.inner.embed(text), [text], self.dimension, one=True)
        self.cache.put_key(key, v)
        return v

    def embed_batch(self, texts: Sequence[str]) -> FloatArray:
        items = check_texts(texts)
        dimension = self.dimension
        out = np.empty((len(items), dimension), dtype=np.float32)
        missing: dict[str, list[int]] = {}
        for i, text in enumerate(items):
            hit = self.cache.get(self.name, text)
            if hit is None or hit.shape[0] != dimension:
                missing.setdefault(text, []).append(i)
            else:
                out[i] = hit
        if missing:
            self.fill(missing, out)
        return out

    def fill(self, missing: dict[str, list[int]], out: FloatArray) -> None:
        """Embeds each text of ``missing`` once with the model itself (the cache was
        asked already), caches its vector and writes it into ``out`` at the text's rows;
        a model answer that is not usable vectors of the right shape is an
        ``EmbedderUnavailableError``, and none of it is cached."""
        unique = list(missing)
        answer = self.inner.embed_batch(unique)
        vectors = model_vectors(self.name, answer, unique, self.dimension)
        for text, v in zip(unique, vectors, strict=True):
            self.cache.put(self.name, text, v)
            out[missing[text]] = v

    def __repr__(self) -> str:
        return f"CachedEmbedder({self.inner!r}, cached={len(self.cache)})"
