"""Type stubs of the native module; `python -m mypy.stubtest memlane._core` keeps them honest."""

from collections.abc import Sequence
from os import PathLike
from typing import final

import numpy as np
import numpy.typing as npt

__all__ = ["BM25Index", "HnswIndex", "__version__", "analyze"]

__version__: str

@final
class BM25Index:
    """BM25 keyword index (Lucene's formula) over uint64 ids, updated one text at a time.

    Scores are ``Σ idf(t) · tf / (tf + k1 · (1 - b + b · len / avgdl))`` with
    ``idf = ln(1 + (N - df + 0.5) / (df + 0.5))``, over the terms of
    :func:`analyze`; corpus statistics stay exact under adds and removes.
    Results are ordered by score descending, then id ascending, and equal
    exhaustive scoring. Thread-safe.
    """

    def __new__(
        cls,
        k1: float = 1.2,
        b: float = 0.75,
        language: str = "english",
        stopwords: bool | Sequence[str] = True,
        stemming: bool = True,
        fold_accents: bool = False,
    ) -> BM25Index: ...
    def add(self, ids: npt.ArrayLike, texts: Sequence[str]) -> None:
        """Adds texts under ids (re-adding an id replaces its text); all or nothing."""
    def remove(self, ids: npt.ArrayLike) -> None:
        """Removes ids; raises UnknownIdError, removing nothing, if one is absent."""
    def search(
        self, query: str, k: int = 10, allowed: npt.ArrayLike | None = None
    ) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.float32]]:
        """Best k hits, best first, as (m,) ids and scores with m <= k (real hits only).

        An empty query, or one of stopwords only, gives empty arrays.
        ``allowed`` restricts results to those ids.
        """
    def search_batch(
        self, queries: Sequence[str], k: int = 10, allowed: npt.ArrayLike | None = None
    ) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.float32]]:
        """``search`` for each query in parallel, as (nq, k) ids and scores.

        Rows with fewer than k hits are padded with id ``2**64 - 1`` and score ``-inf``.
        """
    def analyze(self, text: str) -> list[str]:
        """The terms this index's analyzer makes of ``text``."""
    def save(self, path: str | PathLike[str]) -> None:
        """Writes a versioned, checksummed file, atomically replacing any file at ``path``."""
    @staticmethod
    def load(path: str | PathLike[str]) -> BM25Index: ...
    def ids(self) -> npt.NDArray[np.uint64]:
        """Stored ids, in insertion order."""
    def __contains__(self, key: object, /) -> bool: ...
    def __len__(self) -> int: ...
    @property
    def vocabulary_size(self) -> int: ...
    @property
    def k1(self) -> float: ...
    @property
    def b(self) -> float: ...
    @property
    def language(self) -> str: ...
    @property
    def stopwords(self) -> bool | list[str]: ...
    @property
    def stemming(self) -> bool: ...
    @property
    def fold_accents(self) -> bool: ...

def analyze(
    text: str,
    language: str = "english",
    stopwords: bool | Sequence[str] = True,
    stemming: bool = True,
    fold_accents: bool = False,
) -> list[str]:
    """The terms BM25 makes of ``text``: Unicode words, lowercased, stopwords
    removed, Snowball-stemmed, optionally accent-folded; bigrams for scripts
    written without spaces. ``analyze("Running quickly!") == ["run", "quick"]``.
    """

@final
class HnswIndex:
    """An HNSW vector index over uint64 ids.

    Thread-safe: searches run in parallel from any number of threads while
    adds and removes take turns. Distances: cosine ``1 - cos``, ip ``1 - dot``,
    l2 squared Euclidean.
    """

    def __new__(
        cls,
        dim: int,
        metric: str = "cosine",
        m: int = 16,
        ef_construction: int = 200,
        ef: int = 64,
        seed: int = 0,
    ) -> HnswIndex: ...
    def add(self, ids: npt.ArrayLike, vectors: npt.ArrayLike) -> None:
        """Add ``vectors`` (n, dim) under ``ids`` (n,); a present id gets the new vector."""
    def remove(self, ids: npt.ArrayLike) -> None:
        """Remove ``ids``; raises UnknownIdError, removing nothing, if one is absent."""
    def search(
        self,
        queries: npt.ArrayLike,
        k: int = 10,
        ef: int | None = None,
        allowed: npt.ArrayLike | None = None,
    ) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.float32]]:
        """Nearest first, as (nq, k) labels and distances.

        Rows with fewer than ``k`` results are padded with label ``2**64 - 1``
        and distance ``inf``. ``allowed`` restricts results to those ids.
        """
    def save(self, path: str | PathLike[str]) -> None: ...
    @staticmethod
    def load(path: str | PathLike[str]) -> HnswIndex: ...
    def get_vector(self, id: int) -> npt.NDArray[np.float32]: ...
    def ids(self) -> npt.NDArray[np.uint64]: ...
    def memory_bytes(self) -> int: ...
    def __contains__(self, key: object, /) -> bool: ...
    def __len__(self) -> int: ...
    @property
    def dim(self) -> int: ...
    @property
    def metric(self) -> str: ...
    @property
    def m(self) -> int: ...
    @property
    def ef_construction(self) -> int: ...
    @property
    def seed(self) -> int: ...
    @property
    def ef(self) -> int: ...
    @ef.setter
    def ef(self, value: int) -> None: ...
