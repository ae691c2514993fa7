"""rank_bm25's own test of its three classes (``tests/test_loading.py`` in its repository),
run against memlane.compat.rank_bm25.

rank-bm25's sdist on PyPI (0.2.2) ships no tests, so this file does what that one does,
importing the drop-in as that file imports rank_bm25: the three classes are built from a
tokenized corpus of three documents and hold its size, average length and lengths, and
a tokenizer given to the constructor is applied to raw documents.
"""

from __future__ import annotations

from memlane.compat.rank_bm25 import BM25L, BM25Okapi, BM25Plus

corpus = [
    "Tea is served warm",
    "The London office opens at nine",
    "Rain is expected this evening",
]
tokenized_corpus = [doc.split(" ") for doc in corpus]

algs = [
    BM25Okapi(tokenized_corpus),
    BM25L(tokenized_corpus),
    BM25Plus(tokenized_corpus),
]


def test_corpus_loading() -> None:
    for alg in algs:
        assert alg.corpus_size == 3
        assert alg.avgdl == 5
        assert alg.doc_len == [4, 6, 5]


def tokenizer(doc: str) -> list[str]:
    return doc.split(" ")


def test_tokenizer() -> None:
    for cls in (BM25Okapi, BM25L, BM25Plus):
        bm25 = cls(corpus, tokenizer=tokenizer)
        assert bm25.corpus_size == 3
        assert bm25.avgdl == 5
        assert bm25.doc_len == [4, 6, 5]
