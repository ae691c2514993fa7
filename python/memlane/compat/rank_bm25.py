"""rank_bm25's ``BM25Okapi`` with the same scores, computed by memlane's Rust engine.

``from memlane.compat.rank_bm25 import BM25Okapi`` in place of
``from rank_bm25 import BM25Okapi``: the constructor, ``get_scores``,
``get_batch_scores``, ``get_top_n`` and the attributes (``corpus_size``, ``avgdl``,
``doc_freqs``, ``idf``, ``doc_len``, ``average_idf``, ``k1``, ``b``, ``epsilon``,
``tokenizer``) behave as rank_bm25's, and the scores are the same numbers: the engine
evaluates rank_bm25's formulas, idf floor included, operation for operation, from
postings instead of one dictionary per document.

Tokens are any hashable, as rank_bm25's dictionaries take them: a corpus of ``str``
goes to the engine as it is; one with other tokens (ints, tuples, strings holding lone
surrogates, which UTF-8 cannot carry) is first numbered in a dictionary, so ``1``,
``1.0`` and ``True`` are one token, as in rank_bm25, reported under the first of
them seen.

Differences: a ``tokenizer`` runs in this process (rank_bm25
starts a multiprocessing pool); ``k1``, ``b`` and ``epsilon`` are read-only, since the
index is computed once from them; an empty document scores 0 where rank_bm25's
``0 / 0`` gives NaN (``b = 1``).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from memlane._core import BM25Okapi as _Okapi

__all__ = ["BM25Okapi"]

T = TypeVar("T")


class BM25Okapi:
    """Okapi BM25 over pre-tokenized documents, scoring as ``rank_bm25.BM25Okapi``.

    ``idf(t) = ln(N - n(t) + 0.5) - ln(n(t) + 0.5)``; a negative idf (a token in more
    than half the documents) is replaced by ``epsilon * average_idf``. A document's
    score sums, over the query's tokens (a repeated token counts again),
    ``idf · tf·(k1+1) / (tf + k1·(1 - b + b·len/avgdl))``.
    """

    def __init__(
        self,
        corpus: Iterable[Any],
        tokenizer: Callable[[Any], Sequence[Hashable]] | None = None,
        k1: float = 1.5,
        b: float = 0.75,
        epsilon: float = 0.25,
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
            self._engine = _Okapi(docs, k1=float(k1), b=float(b), epsilon=float(epsilon))
        except (TypeError, UnicodeEncodeError):
            vocab: dict[Any, str] = {}
            named = [[vocab.setdefault(t, str(len(vocab))) for t in doc] for doc in docs]
            self._engine = _Okapi(named, k1=float(k1), b=float(b), epsilon=float(epsilon))
            self._vocab = vocab
        self.corpus_size: int = len(self._engine)
        self.avgdl: float = self._engine.avgdl
        self.average_idf: float = self._engine.average_idf
        self._doc_freqs: list[dict[Any, int]] | None = None
        self._idf: dict[Any, float] | None = None
        self._doc_len: list[int] | None = None

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
    def idf(self) -> dict[Any, float]:
        """Token to idf, negative ones floored, in order of first appearance."""
        if self._idf is None:
            terms: list[Any] = self._engine.terms()
            if self._vocab is not None:
                tokens = list(self._vocab)
                terms = [tokens[int(k)] for k in terms]
            self._idf = dict(zip(terms, self._engine.idf().tolist(), strict=True))
        return self._idf

    @property
    def doc_len(self) -> list[int]:
        """Tokens per document."""
        if self._doc_len is None:
            self._doc_len = self._engine.doc_len().tolist()
        return self._doc_len

    def get_scores(self, query: Iterable[Hashable]) -> npt.NDArray[np.float64]:
        """The score of every document for the tokens of ``query``, in corpus order."""
        return self._ask(self._engine.get_scores, query)

    def _ask(self, call: Callable[[Any], T], query: Iterable[Hashable]) -> T:
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

    def get_batch_scores(self, query: Iterable[Hashable], doc_ids: Iterable[int]) -> list[float]:
        """The scores of the documents ``doc_ids`` (indices into the corpus), as a list."""
        n = self.corpus_size
        ids = [int(d) for d in doc_ids]
        assert all(d < n for d in ids)
        for d in ids:
            if d < -n:
                raise IndexError(f"index {d} is out of bounds for axis 0 with size {n}")
        docs = [d + n if d < 0 else d for d in ids]
        scores: list[float] = self._ask(
            lambda tokens: self._engine.get_batch_scores(tokens, docs), query
        ).tolist()
        return scores

    def get_top_n(self, query: Iterable[Hashable], documents: Sequence[T], n: int = 5) -> list[T]:
        """The ``n`` best of ``documents`` (the corpus in its original form), best first."""
        assert self.corpus_size == len(documents), (
            "The documents given don't match the index corpus!"
        )
        scores = self.get_scores(query)
        top_n = np.argsort(scores)[::-1][:n]
        return [documents[i] for i in top_n]

    def __getstate__(self) -> dict[str, Any]:
        # The documents' token counts rebuild the same statistics and scores.
        return {
            "k1": self.k1,
            "b": self.b,
            "epsilon": self.epsilon,
            "tokenizer": self.tokenizer,
            "doc_freqs": self.doc_freqs,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        docs = [
            [token for token, count in freqs.items() for _ in range(count)]
            for freqs in state["doc_freqs"]
        ]
        self.__init__(  # type: ignore[misc]
            docs, None, k1=state["k1"], b=state["b"], epsilon=state["epsilon"]
        )
        self.tokenizer = state["tokenizer"]

    def __repr__(self) -> str:
        return (
            f"<memlane.compat.rank_bm25.BM25Okapi(corpus_size={self.corpus_size}, "
            f"k1={self.k1}, b={self.b}, epsilon={self.epsilon})>"
        )


def _utf8(token: str) -> bool:
    try:
        token.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
