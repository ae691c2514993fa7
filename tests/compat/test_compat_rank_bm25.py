"""memlane.compat.rank_bm25: rank_bm25's BM25Okapi, BM25L and BM25Plus, same scores.

Scores are held to the formulas written out here, and to rank_bm25 itself when it is
installed (the dev extra installs it), bit for bit, on synthetic corpora and on SciFact
when ``../shared/data/scifact`` is present. rank_bm25's own test of the three classes
(``tests/test_loading.py`` in its repository; its sdist on PyPI ships no tests) is
``test_compat_rank_bm25_loading.py``.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import pickle
import re
from types import ModuleType
from typing import Any

import numpy as np
import pytest

import memlane.compat.rank_bm25 as compat
from conftest import REPO
from memlane import InvalidArgumentError
from memlane.compat.rank_bm25 import BM25L, BM25Okapi, BM25Plus

SCIFACT = REPO.parent / "shared" / "data" / "scifact"

CORPUS = [
    ["hello", "there", "good", "man"],
    ["it", "is", "quite", "windy", "in", "london"],
    ["how", "is", "the", "weather", "today"],
    ["is", "it", "windy", "is", "it"],
    [],
]


@pytest.fixture(scope="module")
def rank_bm25() -> ModuleType:
    if os.environ.get("MEMLANE_REQUIRE_PEERS"):
        return importlib.import_module("rank_bm25")  # CI: a missing peer fails, never skips
    return pytest.importorskip("rank_bm25")


def formula(
    corpus: list[list[str]], query: list[str], k1: float, b: float, eps: float
) -> list[float]:
    """BM25Okapi as rank_bm25 documents it, one document and token at a time."""
    n = len(corpus)
    avgdl = sum(map(len, corpus)) / n
    order: dict[str, int] = {}
    for doc in corpus:
        for token in doc:
            order.setdefault(token, sum(token in d for d in corpus))
    raw = {t: math.log(n - df + 0.5) - math.log(df + 0.5) for t, df in order.items()}
    average = sum(raw.values()) / len(raw)
    idf = {t: (eps * average if v < 0 else v) for t, v in raw.items()}
    scores = []
    for doc in corpus:
        s = 0.0
        for q in query:
            tf = doc.count(q)
            if tf == 0:
                continue  # adds 0 (rank_bm25: 0/0 = NaN for an empty document when b = 1)
            s += idf.get(q, 0.0) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(doc) / avgdl))
        scores.append(s)
    return scores


def formula_l(
    corpus: list[list[str]], query: list[str], k1: float, b: float, delta: float
) -> list[float]:
    """BM25L as rank_bm25 computes it: its term is multiplied by tf."""
    n = len(corpus)
    avgdl = sum(map(len, corpus)) / n
    scores = []
    for doc in corpus:
        s = 0.0
        for q in query:
            tf = doc.count(q)
            if tf == 0:
                continue
            idf = math.log(n + 1) - math.log(sum(q in d for d in corpus) + 0.5)
            c = tf / (1 - b + b * len(doc) / avgdl)
            s += idf * tf * (k1 + 1) * (c + delta) / (k1 + c + delta)
        scores.append(s)
    return scores


def formula_plus(
    corpus: list[list[str]], query: list[str], k1: float, b: float, delta: float
) -> list[float]:
    """BM25+ as rank_bm25 computes it: a document without the token gets delta·idf."""
    n = len(corpus)
    avgdl = sum(map(len, corpus)) / n
    scores = []
    for doc in corpus:
        s = 0.0
        for q in query:
            df = sum(q in d for d in corpus)
            if df == 0:
                continue  # idf 0
            tf = doc.count(q)
            norm = k1 * (1 - b + b * len(doc) / avgdl)
            s += math.log((n + 1) / df) * (delta + (tf * (k1 + 1) / (norm + tf) if tf else 0))
        scores.append(s)
    return scores


def random_corpus(seed: int, docs: int = 300, vocabulary: int = 400) -> list[list[str]]:
    rng = np.random.default_rng(seed)
    # Zipf-like: a few tokens in most documents (negative idf), a long tail.
    weights = 1 / np.arange(1, vocabulary + 1)
    weights /= weights.sum()
    return [
        [f"t{i}" for i in rng.choice(vocabulary, size=rng.integers(0, 40), p=weights)]
        for _ in range(docs)
    ]


@pytest.mark.parametrize(("k1", "b", "eps"), [(1.5, 0.75, 0.25), (1.2, 0.3, 0.5), (2.0, 1.0, 0.0)])
def test_scores_follow_the_formula(k1: float, b: float, eps: float) -> None:
    bm = BM25Okapi(CORPUS, k1=k1, b=b, epsilon=eps)
    for query in (["windy", "london"], ["is", "is", "man"], ["absent"], []):
        got = bm.get_scores(query)
        assert got.dtype == np.float64 and got.shape == (5,)
        np.testing.assert_allclose(got, formula(CORPUS, query, k1, b, eps), rtol=1e-12, atol=0)


def test_statistics_are_rank_bm25s() -> None:
    bm = BM25Okapi(CORPUS)
    assert bm.corpus_size == 5
    assert bm.doc_len == [4, 6, 5, 5, 0]
    assert bm.avgdl == 4.0
    assert bm.doc_freqs[3] == {"is": 2, "it": 2, "windy": 1}
    assert list(bm.doc_freqs[0]) == ["hello", "there", "good", "man"]
    assert bm.doc_freqs[4] == {}
    assert list(bm.idf)[:5] == ["hello", "there", "good", "man", "it"]
    # "is" is in 3 of 5 documents: a negative idf, floored at epsilon * average_idf.
    assert bm.idf["is"] == pytest.approx(0.25 * bm.average_idf)
    assert bm.idf["london"] == pytest.approx(math.log(4.5) - math.log(1.5))
    assert (bm.k1, bm.b, bm.epsilon, bm.tokenizer) == (1.5, 0.75, 0.25, None)


def test_top_n_and_batch_scores() -> None:
    bm = BM25Okapi(CORPUS)
    documents = [" ".join(d) for d in CORPUS]
    top = bm.get_top_n(["windy", "london"], documents, n=2)
    assert top == ["it is quite windy in london", "is it windy is it"]
    scores = bm.get_scores(["windy", "is"])
    batch = bm.get_batch_scores(["windy", "is"], [3, 1, -1, 3])
    assert isinstance(batch, list)
    assert batch == [scores[3], scores[1], scores[4], scores[3]]
    with pytest.raises(AssertionError):
        bm.get_batch_scores(["windy"], [5])
    with pytest.raises(AssertionError, match="don't match the index corpus"):
        bm.get_top_n(["windy"], documents[:3])


def test_a_tokenizer_is_applied_to_the_corpus() -> None:
    def tokenize(text: str) -> list[str]:
        return re.findall(r"\w+", text.lower())

    texts = ["Hello there, good man!", "It is quite windy in London.", "How is the weather?"]
    bm = BM25Okapi(texts, tokenizer=tokenize)
    assert bm.tokenizer is tokenize
    np.testing.assert_array_equal(
        bm.get_scores(["windy"]), BM25Okapi([tokenize(t) for t in texts]).get_scores(["windy"])
    )


def test_bad_corpora_raise_as_rank_bm25_does() -> None:
    with pytest.raises(ZeroDivisionError):
        BM25Okapi([])
    with pytest.raises(ZeroDivisionError):
        BM25Okapi([[], []])
    with pytest.raises(TypeError, match="unhashable"):
        BM25Okapi([["a", ["b"]]])
    # A generator is read once, as rank_bm25 reads it.
    bm = BM25Okapi(d for d in CORPUS)
    assert bm.corpus_size == 5
    # Tokens of other types in a query match nothing.
    np.testing.assert_array_equal(bm.get_scores([1, "windy"]), bm.get_scores(["windy"]))


def test_pickling_keeps_every_score() -> None:
    corpus = random_corpus(3)
    bm = BM25Okapi(corpus, k1=1.3, b=0.6, epsilon=0.1)
    twin = pickle.loads(pickle.dumps(bm))
    assert (twin.k1, twin.b, twin.epsilon) == (1.3, 0.6, 0.1)
    assert twin.idf == bm.idf and twin.doc_freqs == bm.doc_freqs
    np.testing.assert_array_equal(
        twin.get_scores(["t0", "t5", "t77"]), bm.get_scores(["t0", "t5", "t77"])
    )


# -- against rank_bm25 itself -----------------------------------------------------------


CLASSES = ["BM25Okapi", "BM25L", "BM25Plus"]
#: Parameters other than the defaults, per class; b = 1 gives empty documents 0 / 0.
PARAMS = {
    "BM25Okapi": [{"k1": 0.9, "b": 0.4, "epsilon": 0.5}, {"k1": 2.0, "b": 1.0}],
    "BM25L": [{"k1": 0.9, "b": 0.4, "delta": 0.8}, {"k1": 2.0, "b": 1.0}],
    "BM25Plus": [{"k1": 0.9, "b": 0.4, "delta": 0.3}, {"k1": 2.0, "b": 1.0}],
}


def same_scores(ours: Any, theirs: Any) -> None:
    """Equal to the bit, where rank_bm25's are numbers (it gives 0 / 0 = NaN where memlane
    adds nothing)."""
    ours, theirs = np.asarray(ours), np.asarray(theirs)
    assert ours.dtype == np.float64 and ours.shape == theirs.shape
    numbers = ~np.isnan(theirs)
    np.testing.assert_array_equal(ours[numbers], theirs[numbers])
    assert not np.isnan(ours).any()


def assert_same(ours: Any, theirs: Any, queries: list[list[Any]]) -> None:
    assert ours.corpus_size == theirs.corpus_size
    assert ours.avgdl == theirs.avgdl
    assert ours.doc_len == theirs.doc_len
    assert ours.doc_freqs == theirs.doc_freqs
    assert list(ours.idf.items()) == list(theirs.idf.items())
    if hasattr(theirs, "average_idf"):
        assert ours.average_idf == theirs.average_idf
    for query in queries:
        with np.errstate(invalid="ignore"):
            same_scores(ours.get_scores(query), theirs.get_scores(query))


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("name", CLASSES)
def test_same_as_rank_bm25_on_random_corpora(rank_bm25: ModuleType, name: str, seed: int) -> None:
    corpus = random_corpus(seed)
    queries = [[f"t{i}" for i in q] for q in np.random.default_rng(seed).integers(0, 450, (30, 6))]
    for params in ({}, *PARAMS[name]):
        ours = getattr(compat, name)(corpus, **params)
        theirs = getattr(rank_bm25, name)(corpus, **params)
        assert [getattr(ours, p) for p in params] == list(params.values())
        assert_same(ours, theirs, queries)
        docs = [*range(0, 300, 7), -1, -300]
        for query in queries[:5]:
            same_scores(ours.get_batch_scores(query, docs), theirs.get_batch_scores(query, docs))
        documents = [" ".join(d) for d in corpus]
        for query in queries[:10]:
            if np.isnan(theirs.get_scores(query)).any():
                continue  # rank_bm25 ranks its NaNs first
            assert ours.get_top_n(query, documents, n=5) == theirs.get_top_n(query, documents, n=5)


def test_same_as_rank_bm25_on_scifact(rank_bm25: ModuleType) -> None:
    if not (SCIFACT / "corpus.jsonl").is_file():
        pytest.skip(f"SciFact not found at {SCIFACT}")

    def tokenize(text: str) -> list[str]:
        return re.findall(r"\w+", text.lower())

    with (SCIFACT / "corpus.jsonl").open(encoding="utf-8") as f:
        docs = [json.loads(line) for line in f][:2000]
    with (SCIFACT / "queries.jsonl").open(encoding="utf-8") as f:
        queries = [tokenize(json.loads(line)["text"]) for line in f][:50]
    corpus = [tokenize(d["title"] + " " + d["text"]) for d in docs]
    for name in CLASSES:
        assert_same(getattr(compat, name)(corpus), getattr(rank_bm25, name)(corpus), queries)


ODD_CORPORA = {
    "ints": [[1, 2, 3, 2], [2, 3], [4, 5, 6, 4], [7]],
    "mixed": [["a", 1, (2, "b")], [1, 1.0, True, "1"], ["a", "b"], [(2, "b"), None]],
    "surrogates": [["caf\udce9", "x"], ["\ud800", "x", "\ud800"], ["x", "y"], ["y"]],
    "str_then_int": [["a", "b"], ["b", "c"], ["c", 3]],
}
ODD_QUERIES = [
    [1, 2],
    [2, 2.0, "2"],
    ["a", (2, "b"), None, 1],
    ["\ud800", "caf\udce9", "x"],
    ["y", 3, "absent", 99],
    [True, "1"],
    [],
]


@pytest.mark.parametrize("cls", CLASSES)
@pytest.mark.parametrize("name", list(ODD_CORPORA))
def test_tokens_of_any_hashable_type_score_as_in_rank_bm25(
    rank_bm25: ModuleType, name: str, cls: str
) -> None:
    # memlane raised TypeError on int tokens and UnicodeEncodeError on lone surrogates.
    corpus = ODD_CORPORA[name]
    ours, theirs = getattr(compat, cls)(corpus), getattr(rank_bm25, cls)(corpus)
    assert_same(ours, theirs, ODD_QUERIES)
    assert [type(t) for t in ours.idf] == [type(t) for t in theirs.idf]
    for query in ODD_QUERIES:
        docs = [0, 2, -1]
        same_scores(ours.get_batch_scores(query, docs), theirs.get_batch_scores(query, docs))
        assert ours.get_top_n(query, corpus, n=2) == theirs.get_top_n(query, corpus, n=2)
    twin = pickle.loads(pickle.dumps(ours))
    assert twin.doc_freqs == theirs.doc_freqs
    same_scores(twin.get_scores([2, "x"]), theirs.get_scores([2, "x"]))


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("cls", CLASSES)
def test_a_query_of_lone_surrogates_on_a_str_corpus_scores_as_in_rank_bm25(
    rank_bm25: ModuleType, cls: str
) -> None:
    ours, theirs = getattr(compat, cls)(CORPUS), getattr(rank_bm25, cls)(CORPUS)
    for query in (["\ud800", "windy"], iter(["london", "\udfff", 7]), ("\ud83d", "is")):
        listed = list(query)
        same_scores(ours.get_scores(iter(listed)), theirs.get_scores(listed))
        same_scores(ours.get_batch_scores(listed, [1, 3]), theirs.get_batch_scores(listed, [1, 3]))


# -- BM25L and BM25Plus ---------------------------------------------------------------------


@pytest.mark.parametrize(("k1", "b", "delta"), [(1.5, 0.75, 0.5), (1.2, 0.3, 1.0), (0.5, 0.9, 0.0)])
def test_bm25l_and_bm25plus_follow_their_formulas(k1: float, b: float, delta: float) -> None:
    bm_l = BM25L(CORPUS, k1=k1, b=b, delta=delta)
    bm_plus = BM25Plus(CORPUS, k1=k1, b=b, delta=delta)
    for query in (["windy", "london"], ["is", "is", "man"], ["absent"], []):
        want_l = formula_l(CORPUS, query, k1, b, delta)
        np.testing.assert_allclose(bm_l.get_scores(query), want_l, rtol=1e-12, atol=0)
        want_plus = formula_plus(CORPUS, query, k1, b, delta)
        np.testing.assert_allclose(bm_plus.get_scores(query), want_plus, rtol=1e-12, atol=0)
    # BM25Plus: a document without the token still gets delta·idf.
    assert BM25Plus(CORPUS).get_scores(["london"])[0] == pytest.approx(math.log(6 / 1))


def test_bm25l_and_bm25plus_statistics() -> None:
    for bm in (BM25L(CORPUS), BM25Plus(CORPUS)):
        assert (bm.corpus_size, bm.avgdl, bm.doc_len) == (5, 4.0, [4, 6, 5, 5, 0])
        assert bm.doc_freqs[3] == {"is": 2, "it": 2, "windy": 1}
        assert list(bm.idf)[:5] == ["hello", "there", "good", "man", "it"]
        assert not hasattr(bm, "epsilon") and not hasattr(bm, "average_idf")
    assert BM25L(CORPUS).idf["is"] == math.log(6) - math.log(3.5)
    assert BM25Plus(CORPUS).idf["is"] == math.log(6 / 3)
    assert (BM25L(CORPUS).delta, BM25Plus(CORPUS).delta) == (0.5, 1.0)
    assert repr(BM25L(CORPUS, k1=1.2)) == (
        "<memlane.compat.rank_bm25.BM25L(corpus_size=5, k1=1.2, b=0.75, delta=0.5)>"
    )


def tokenize(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


@pytest.mark.parametrize("cls", [BM25Okapi, BM25L, BM25Plus])
def test_every_class_takes_rank_bm25s_calls(cls: Any) -> None:
    texts = [" ".join(doc) for doc in CORPUS]
    bm = cls(texts, tokenizer=tokenize)
    assert bm.tokenizer is tokenize and bm.corpus_size == 5
    scores = bm.get_scores(["windy", "london"])
    assert scores.shape == (5,) and int(scores.argmax()) == 1
    assert bm.get_top_n(["windy", "london"], texts, n=1) == [texts[1]]
    assert bm.get_batch_scores(["windy", "london"], [3, -4]) == [scores[3], scores[1]]
    with pytest.raises(AssertionError):
        bm.get_batch_scores(["windy"], [5])
    with pytest.raises(IndexError):
        bm.get_batch_scores(["windy"], [-6])
    with pytest.raises(TypeError, match="a list of tokens"):
        bm.get_scores("windy")
    twin = pickle.loads(pickle.dumps(bm))
    np.testing.assert_array_equal(twin.get_scores(["is", "it"]), bm.get_scores(["is", "it"]))
    assert twin.tokenizer is tokenize
    # An empty document when b = 1: rank_bm25 divides 0 by 0; here the token adds nothing.
    assert not np.isnan(cls(CORPUS, b=1.0).get_scores(["windy", "is"])).any()
    with pytest.raises(ZeroDivisionError):
        cls([])
    with pytest.raises(ZeroDivisionError):
        cls([[], []])
    for bad in ({"k1": float("nan")}, {"b": "x"}, {"k1": float("inf")}):
        with pytest.raises(InvalidArgumentError):
            cls(CORPUS, **bad)


def test_the_public_names_are_rank_bm25s_classes() -> None:
    # Not the names it imports (Any, np, TypeVar...).
    assert sorted(compat.__all__) == sorted(CLASSES)
    names: dict[str, Any] = {}
    exec("from memlane.compat.rank_bm25 import *", names)
    assert sorted(n for n in names if n != "__builtins__") == sorted(CLASSES)
