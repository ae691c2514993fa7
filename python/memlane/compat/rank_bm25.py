"""rank_bm25's ``BM25Okapi``, ``BM25L`` and ``BM25Plus``, with the same scores.

``from memlane.compat.rank_bm25 import BM25Okapi, BM25L, BM25Plus`` in place of
``from rank_bm25 import ...``: the constructors (``k1``, ``b``, and ``epsilon`` for
Okapi, ``delta`` for L and Plus), ``get_scores``, ``get_batch_scores``, ``get_top_n`` and
the attributes (``corpus_size``, ``avgdl``, ``doc_freqs``, ``idf``, ``doc_len``,
``tokenizer``, the parameters, and Okapi's ``average_idf``) behave as rank_bm25's, and
the scores are the same numbers, bit for bit:

- ``BM25Okapi`` is memlane's Rust engine (``rust/core/src/bm25/okapi.rs``), which
  evaluates rank_bm25's formulas, idf floor included, operation for operation, from
  postings instead of one dictionary per document.
- ``BM25L`` and ``BM25Plus``: the engine counts the corpus (tokens, per-document counts,
  lengths); the scores are rank_bm25's formulas evaluated here with numpy, in its order
  of operations, because they are not the engine's: other idfs, and terms the engine
  does not have (BM25L's is multiplied by the token's count, as rank_bm25 writes it;
  BM25Plus gives ``delta · idf`` to documents without the token too).

Tokens are any hashable, as rank_bm25's dictionaries take them: a corpus of ``str``
goes to the engine as it is; one with other tokens (ints, tuples, strings holding lone
surrogates, which UTF-8 cannot carry) is first numbered in a dictionary, so ``1``,
``1.0`` and ``True`` are one token, as in rank_bm25, reported under the first of
them seen.

Differences: a ``tokenizer`` runs in this process (rank_bm25 starts a multiprocessing
pool); the parameters are read-only, and must be finite numbers
([`InvalidArgumentError`][memlane.errors.InvalidArgumentError]); where rank_bm25 divides
0 by 0 for a document without the token (its length term is 0: an empty document with
``b = 1``, or ``k1 = 0``), the token adds nothing here instead of NaN; a corpus with no
token raises ``ZeroDivisionError``, as rank_bm25's ``BM25Okapi`` does (its ``BM25L`` and
``BM25Plus`` build one whose every score is NaN); a query given as one ``str`` raises
``TypeError`` (rank_bm25 takes its characters as the tokens, which is almost always a
query someone forgot to split: pass ``list(query)`` for a corpus of characters).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Iterable, Sequence
from itertools import chain
from typing import Any, ClassVar, TypeVar

import numpy as np
import numpy.typing as npt

from memlane._core import BM25Okapi as _Okapi
from memlane.errors import InvalidArgumentError, shown

__all__ = ["BM25L", "BM25Okapi", "BM25Plus"]

_T = TypeVar("_T")
_Scores = npt.NDArray[np.float64]


def _number(name: str, value: object) -> float:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):  # an int too large for a float
        raise InvalidArgumentError(f"{name} must be a number, got {shown(value)}") from None
    if not math.isfinite(number):
        raise InvalidArgumentError(f"{name} must be finite, got {number}")
    return number


class _BM25(ABC):
    """The corpus, counted by the engine, and the API the three variants share."""

    #: The constructor's parameters after ``corpus`` and ``tokenizer``, as pickled.
    _PARAMS: ClassVar[tuple[str, ...]]

    def __init__(
        self,
        corpus: Iterable[Any],
        tokenizer: Callable[[Any], Sequence[Hashable]] | None,
        k1: float,
        b: float,
        epsilon: float,
    ) -> None:
        self.tokenizer = tokenizer
        docs: Iterable[Any] = corpus
        if tokenizer:
            docs = [tokenizer(doc) for doc in corpus]
        else:
            docs = corpus if isinstance(corpus, list) else list(corpus)
        if not docs:
            raise ZeroDivisionError("division by zero")  # rank_bm25: num_doc / corpus_size
        if not any(len(doc) for doc in docs):
            raise ZeroDivisionError("division by zero")  # rank_bm25: idf_sum / len(idf)
        # Token to the engine's name for it, when the corpus is not all UTF-8 strings.
        self._vocab: dict[Any, str] | None = None
        try:
            self._engine = _Okapi(docs, k1=k1, b=b, epsilon=epsilon)
        except (TypeError, UnicodeEncodeError):
            vocab: dict[Any, str] = {}
            named = [[vocab.setdefault(t, str(len(vocab))) for t in doc] for doc in docs]
            self._engine = _Okapi(named, k1=k1, b=b, epsilon=epsilon)
            self._vocab = vocab
        self.corpus_size: int = len(self._engine)
        self.avgdl: float = self._engine.avgdl
        self._doc_freqs: list[dict[Any, int]] | None = None
        self._doc_len: list[int] | None = None

    def _tokens(self) -> list[Any]:
        """The distinct tokens, in order of first appearance, as the corpus gave them."""
        terms: list[Any] = self._engine.terms()
        if self._vocab is not None:
            tokens = list(self._vocab)
            terms = [tokens[int(k)] for k in terms]
        return terms

    @property
    def doc_freqs(self) -> list[dict[Any, int]]:
        """Per document, token to count (built on first access)."""
        if self._doc_freqs is None:
            freqs: list[dict[Any, int]] = self._engine.doc_freqs()
            if self._vocab is not None:
                tokens = list(self._vocab)
                freqs = [{tokens[int(k)]: n for k, n in doc.items()} for doc in freqs]
            self._doc_freqs = freqs
        return self._doc_freqs

    @property
    def doc_len(self) -> list[int]:
        """Tokens per document."""
        if self._doc_len is None:
            self._doc_len = self._engine.doc_len().tolist()
        return self._doc_len

    @abstractmethod
    def get_scores(self, query: Iterable[Hashable]) -> _Scores:
        """The score of every document for the tokens of ``query``, in corpus order."""

    def _batch(self, query: Iterable[Hashable], docs: list[int]) -> _Scores:
        """The scores of the documents ``docs`` (checked, non-negative)."""
        return self.get_scores(query)[docs]

    def get_batch_scores(self, query: Iterable[Hashable], doc_ids: Iterable[int]) -> list[float]:
        """The scores of the documents ``doc_ids`` (indices into the corpus), as a list."""
        n = self.corpus_size
        ids = [int(d) for d in doc_ids]
        assert all(d < n for d in ids)
        for d in ids:
            if d < -n:
                raise IndexError(f"index {d} is out of bounds for axis 0 with size {n}")
        scores: list[float] = self._batch(query, [d + n if d < 0 else d for d in ids]).tolist()
        return scores

    def get_top_n(self, query: Iterable[Hashable], documents: Sequence[_T], n: int = 5) -> list[_T]:
        """The ``n`` best of ``documents`` (the corpus in its original form), best first."""
        assert self.corpus_size == len(documents), (
            "The documents given don't match the index corpus!"
        )
        scores = self.get_scores(query)
        top_n = np.argsort(scores)[::-1][:n]
        return [documents[i] for i in top_n]

    def __getstate__(self) -> dict[str, Any]:
        # The documents' token counts rebuild the same statistics and scores.
        state = {name: getattr(self, name) for name in self._PARAMS}
        return {**state, "tokenizer": self.tokenizer, "doc_freqs": self.doc_freqs}

    def __setstate__(self, state: dict[str, Any]) -> None:
        docs = [
            [token for token, count in freqs.items() for _ in range(count)]
            for freqs in state["doc_freqs"]
        ]
        params = {name: state[name] for name in self._PARAMS}
        self.__init__(docs, None, **params)  # type: ignore[misc]
        self.tokenizer = state["tokenizer"]

    def __repr__(self) -> str:
        params = ", ".join(f"{name}={getattr(self, name)}" for name in self._PARAMS)
        return (
            f"<memlane.compat.rank_bm25.{type(self).__name__}(corpus_size={self.corpus_size}, "
            f"{params})>"
        )


class BM25Okapi(_BM25):
    """Okapi BM25 over pre-tokenized documents, scoring as ``rank_bm25.BM25Okapi``.

    ``idf(t) = ln(N - n(t) + 0.5) - ln(n(t) + 0.5)``; a negative idf (a token in more
    than half the documents) is replaced by ``epsilon * average_idf``. A document's
    score sums, over the query's tokens (a repeated token counts again),
    ``idf · tf·(k1+1) / (tf + k1·(1 - b + b·len/avgdl))``.
    """

    _PARAMS = ("k1", "b", "epsilon")

    def __init__(
        self,
        corpus: Iterable[Any],
        tokenizer: Callable[[Any], Sequence[Hashable]] | None = None,
        k1: float = 1.5,
        b: float = 0.75,
        epsilon: float = 0.25,
    ) -> None:
        super().__init__(
            corpus, tokenizer, _number("k1", k1), _number("b", b), _number("epsilon", epsilon)
        )
        self.average_idf: float = self._engine.average_idf
        self._idf: dict[Any, float] | None = None

    @property
    def k1(self) -> float:
        return self._engine.k1

    @property
    def b(self) -> float:
        return self._engine.b

    @property
    def epsilon(self) -> float:
        return self._engine.epsilon

    @property
    def idf(self) -> dict[Any, float]:
        """Token to idf, negative ones floored, in order of first appearance."""
        if self._idf is None:
            self._idf = dict(zip(self._tokens(), self._engine.idf().tolist(), strict=True))
        return self._idf

    def get_scores(self, query: Iterable[Hashable]) -> _Scores:
        return self._ask(self._engine.get_scores, query)

    def _batch(self, query: Iterable[Hashable], docs: list[int]) -> _Scores:
        return self._ask(lambda tokens: self._engine.get_batch_scores(tokens, docs), query)

    def _ask(self, call: Callable[[Any], _T], query: Iterable[Hashable]) -> _T:
        """``call`` on ``query`` in the engine's terms: a token the corpus does not hold
        adds nothing, whatever its type."""
        if isinstance(query, str):
            return call(query)  # the engine's error: a query is a list of tokens
        if self._vocab is not None:
            vocab = self._vocab
            return call([vocab[t] for t in query if t in vocab])
        tokens = query if isinstance(query, list | tuple) else list(query)
        try:
            return call(tokens)
        except UnicodeEncodeError:
            # Lone surrogates: not in a corpus of UTF-8 strings, so they match nothing.
            return call([t for t in tokens if isinstance(t, str) and _utf8(t)])


class _Delta(_BM25):
    """BM25L and BM25Plus: the engine's counts, rank_bm25's formulas in numpy."""

    _PARAMS = ("k1", "b", "delta")

    def __init__(
        self,
        corpus: Iterable[Any],
        tokenizer: Callable[[Any], Sequence[Hashable]] | None,
        k1: float,
        b: float,
        delta: float,
    ) -> None:
        # The engine only counts here: its Okapi parameters play no part.
        super().__init__(corpus, tokenizer, 1.5, 0.75, 0.25)
        self._k1, self._b, self._delta = _number("k1", k1), _number("b", b), _number("delta", delta)
        tokens = self._tokens()
        self._ids = {token: i for i, token in enumerate(tokens)}
        # Postings: term i's documents (ascending) and counts are [starts[i]:starts[i+1]].
        names = {name: i for i, name in enumerate(self._engine.terms())}
        counts: list[dict[str, int]] = self._engine.doc_freqs()
        sizes = np.fromiter(map(len, counts), dtype=np.int64, count=len(counts))
        total = int(sizes.sum())
        terms = np.fromiter(map(names.__getitem__, chain.from_iterable(counts)), np.int64, total)
        tfs = np.fromiter(chain.from_iterable(map(dict.values, counts)), np.int64, total)
        order = np.argsort(terms, kind="stable")  # stable: documents stay in order
        self._docs = np.repeat(np.arange(len(counts), dtype=np.int64), sizes)[order]
        self._tfs = tfs[order]
        df = np.bincount(terms, minlength=len(tokens))
        self._starts = np.concatenate(([0], np.cumsum(df)))
        lengths = self._engine.doc_len().astype(np.int64)
        # ``1 - b + b·len/avgdl`` per document, as rank_bm25 writes it: fixed by the corpus
        # and b, so computed once rather than on every query.
        self._norm = 1 - self._b + self._b * lengths / self.avgdl
        n = self.corpus_size
        self._idf_values = [self._idf_of(n, int(freq)) for freq in df]
        self._idf: dict[Any, float] | None = None

    @staticmethod
    @abstractmethod
    def _idf_of(n: int, df: int) -> float:
        """The idf of a token in ``df`` of the ``n`` documents."""

    @property
    def k1(self) -> float:
        return self._k1

    @property
    def b(self) -> float:
        return self._b

    @property
    def delta(self) -> float:
        return self._delta

    @property
    def idf(self) -> dict[Any, float]:
        """Token to idf, in order of first appearance."""
        if self._idf is None:
            self._idf = dict(zip(self._ids, self._idf_values, strict=True))
        return self._idf

    def _terms_of(self, query: Iterable[Hashable]) -> list[int]:
        """The query's tokens the corpus holds, as term numbers, in order and repeated."""
        if isinstance(query, str):
            raise TypeError("query must be a list of tokens (str), not a str")
        ids = self._ids
        return [i for t in query if (i := ids.get(t)) is not None]

    def _postings(self, term: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        start, end = self._starts[term], self._starts[term + 1]
        return self._docs[start:end], self._tfs[start:end]


class BM25L(_Delta):
    """BM25L over pre-tokenized documents, scoring as ``rank_bm25.BM25L``.

    ``idf(t) = ln(N + 1) - ln(n(t) + 0.5)``. With ``c = tf / (1 - b + b·len/avgdl)``, a
    document's score sums, over the query's tokens, ``idf · tf · (k1+1) · (c + delta) /
    (k1 + c + delta)`` (rank_bm25's formula, which multiplies by ``tf``); a document
    without the token adds nothing.
    """

    def __init__(
        self,
        corpus: Iterable[Any],
        tokenizer: Callable[[Any], Sequence[Hashable]] | None = None,
        k1: float = 1.5,
        b: float = 0.75,
        delta: float = 0.5,
    ) -> None:
        super().__init__(corpus, tokenizer, k1, b, delta)

    @staticmethod
    def _idf_of(n: int, df: int) -> float:
        return math.log(n + 1) - math.log(df + 0.5)

    def get_scores(self, query: Iterable[Hashable]) -> _Scores:
        score = np.zeros(self.corpus_size)
        norm = self._norm
        k1, delta = self._k1, self._delta
        for term in self._terms_of(query):
            docs, tf = self._postings(term)
            ctd = tf / norm[docs]
            score[docs] += (
                self._idf_values[term] * tf * (k1 + 1) * (ctd + delta) / (k1 + ctd + delta)
            )
        return score


class BM25Plus(_Delta):
    """BM25+ over pre-tokenized documents, scoring as ``rank_bm25.BM25Plus``.

    ``idf(t) = ln((N + 1) / n(t))``. A document's score sums, over the query's tokens the
    corpus holds, ``idf · (delta + tf·(k1+1) / (k1·(1 - b + b·len/avgdl) + tf))``: a
    document without the token gets ``idf · delta``.
    """

    def __init__(
        self,
        corpus: Iterable[Any],
        tokenizer: Callable[[Any], Sequence[Hashable]] | None = None,
        k1: float = 1.5,
        b: float = 0.75,
        delta: float = 1,
    ) -> None:
        super().__init__(corpus, tokenizer, k1, b, delta)

    @staticmethod
    def _idf_of(n: int, df: int) -> float:
        return math.log((n + 1) / df)

    def get_scores(self, query: Iterable[Hashable]) -> _Scores:
        score = np.zeros(self.corpus_size)
        norm = self._norm
        k1, delta = self._k1, self._delta
        for term in self._terms_of(query):
            docs, tf = self._postings(term)
            part = np.zeros(self.corpus_size)
            part[docs] = tf * (k1 + 1) / (k1 * norm[docs] + tf)
            score += self._idf_values[term] * (delta + part)
        return score


def _utf8(token: str) -> bool:
    try:
        token.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
