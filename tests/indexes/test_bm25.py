"""Tests of memlane.BM25Index: scores against a plain reference, incremental updates
against fresh builds, SciFact quality, persistence, bad input and hostile text."""

from __future__ import annotations

import json
import math
import threading
from collections import Counter
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import memlane
from conftest import REPO
from memlane import (
    BM25Index,
    CorruptFileError,
    InvalidArgumentError,
    MemlaneError,
    NotFoundError,
    UnknownIdError,
)

SHARED = REPO.parent / "shared"
SCIFACT = SHARED / "data" / "scifact"
MISSING = np.uint64(2**64 - 1)
VOCAB = [f"w{i}" for i in range(12)] + ["the", "of", "running", "runs", "café", "東京"]


def reference(
    docs: dict[int, str], query: str, k1: float = 1.2, b: float = 0.75, **analyzer: object
) -> dict[int, float]:
    """Lucene BM25 written out plainly over memlane's analyzer: score of every matching doc."""
    terms = {i: Counter(memlane.analyze(t, **analyzer)) for i, t in docs.items()}  # type: ignore[arg-type]
    n = len(docs)
    lengths = {i: sum(c.values()) for i, c in terms.items()}
    avgdl = sum(lengths.values()) / n if n else 0.0
    df = Counter(t for c in terms.values() for t in c)
    scores: dict[int, float] = {}
    for q in memlane.analyze(query, **analyzer):  # type: ignore[arg-type]
        if df[q] == 0:
            continue
        idf = math.log(1 + (n - df[q] + 0.5) / (df[q] + 0.5))
        for i, c in terms.items():
            tf = c[q]
            if tf:
                norm = k1 * (1 - b + b * lengths[i] / avgdl)
                scores[i] = scores.get(i, 0.0) + idf * tf / (tf + norm)
    return scores


def check_against_reference(
    got: tuple[npt.NDArray[np.uint64], npt.NDArray[np.float32]],
    want: dict[int, float],
    k: int,
) -> None:
    ids, scores = got
    assert ids.dtype == np.uint64 and scores.dtype == np.float32
    assert len(ids) == len(scores) == min(k, len(want))
    # Best first, ties by id.
    for i in range(len(ids) - 1):
        assert (scores[i], -int(ids[i])) > (scores[i + 1], -int(ids[i + 1]))
    for i, s in zip(ids, scores, strict=True):
        assert math.isclose(s, want[int(i)], rel_tol=1e-5)
    # The k best reference scores, whatever the order of near-ties.
    best = sorted(want.values(), reverse=True)[:k]
    np.testing.assert_allclose(scores, best, rtol=1e-5)


def build(docs: dict[int, str], **kw: object) -> BM25Index:
    bm = BM25Index(**kw)  # type: ignore[arg-type]
    bm.add(np.array(list(docs), dtype=np.uint64), list(docs.values()))
    return bm


texts = st.lists(st.sampled_from(VOCAB), min_size=0, max_size=25).map(" ".join)
corpora = st.dictionaries(st.integers(0, 2**64 - 2), texts, min_size=1, max_size=40)


@settings(max_examples=60, deadline=None)
@given(
    corpora,
    st.lists(texts, min_size=1, max_size=5),
    st.floats(0.0, 3.0),
    st.floats(0.0, 1.0),
    st.integers(1, 50),
)
def test_scores_equal_reference(
    docs: dict[int, str], queries: list[str], k1: float, b: float, k: int
) -> None:
    bm = build(docs, k1=k1, b=b)
    assert len(bm) == len(docs)
    for q in queries:
        check_against_reference(bm.search(q, k=k), reference(docs, q, k1, b), k)


@settings(max_examples=30, deadline=None)
@given(corpora, texts, st.data())
def test_allowed_restricts_inside_scoring(
    docs: dict[int, str], q: str, data: st.DataObject
) -> None:
    bm = build(docs)
    allowed = data.draw(st.lists(st.sampled_from(list(docs)), unique=True))
    want = {i: s for i, s in reference(docs, q).items() if i in set(allowed)}
    got = bm.search(q, k=5, allowed=np.array([*allowed, 2**64 - 1], dtype=np.uint64))
    check_against_reference(got, want, 5)


operations = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.dictionaries(st.integers(0, 30), texts, max_size=6)),
        st.tuples(st.just("remove"), st.lists(st.integers(0, 30), unique=True, max_size=6)),
    ),
    max_size=30,
)


@settings(max_examples=60, deadline=None)
@given(operations, st.lists(texts, min_size=1, max_size=4))
def test_updates_equal_a_fresh_build(ops: list[tuple[str, object]], queries: list[str]) -> None:
    bm = BM25Index()
    live: dict[int, str] = {}
    for op, arg in ops:
        if op == "add":
            assert isinstance(arg, dict)
            bm.add(np.array(list(arg), dtype=np.uint64), list(arg.values()))
            live.update(arg)
        else:
            assert isinstance(arg, list)
            present = [i for i in arg if i in live]
            bm.remove(np.array(present, dtype=np.uint64))
            for i in present:
                del live[i]
    assert len(bm) == len(live)
    assert sorted(bm.ids().tolist()) == sorted(live)
    if not live:
        assert all(len(bm.search(q)[0]) == 0 for q in queries)
        return
    fresh = build(live)
    assert bm.vocabulary_size == fresh.vocabulary_size
    for q in queries:
        ids, scores = bm.search(q, k=100)
        fresh_ids, fresh_scores = fresh.search(q, k=100)
        np.testing.assert_allclose(scores, fresh_scores, rtol=1e-6)
        assert set(ids.tolist()) == set(fresh_ids.tolist())
        check_against_reference((ids, scores), reference(live, q), 100)


def test_readd_replaces_text() -> None:
    bm = BM25Index()
    bm.add([1, 2], ["apples and pears", "pears"])
    bm.add([1], ["bananas"])
    assert len(bm) == 2
    assert bm.search("apples")[0].tolist() == []
    assert bm.search("bananas")[0].tolist() == [1]
    assert bm.search("pears")[0].tolist() == [2]


def test_empty_and_stopword_queries_give_nothing() -> None:
    bm = BM25Index()
    for q in ["", "   ", "the of and", "unseen", "🎉"]:
        ids, scores = bm.search(q)
        assert ids.shape == scores.shape == (0,)
    bm.add([7], ["some stored text"])
    for q in ["", "the of and", "unseen"]:
        ids, scores = bm.search(q)
        assert ids.shape == (0,) and ids.dtype == np.uint64 and scores.dtype == np.float32
    assert bm.search("stored", allowed=np.array([], dtype=np.uint64))[0].tolist() == []


def test_search_batch_pads_and_equals_single() -> None:
    docs = {i: f"w{i % 5} w{i % 7} common" for i in range(40)}
    bm = build(docs)
    queries = ["w1 w3", "common", "", "w6", "nothing here"]
    ids, scores = bm.search_batch(queries, k=8)
    assert ids.shape == scores.shape == (5, 8)
    assert ids.dtype == np.uint64 and scores.dtype == np.float32
    for row, q in enumerate(queries):
        one_ids, one_scores = bm.search(q, k=8)
        m = len(one_ids)
        assert ids[row, :m].tolist() == one_ids.tolist()
        np.testing.assert_array_equal(scores[row, :m], one_scores)
        assert (ids[row, m:] == MISSING).all()
        assert np.isneginf(scores[row, m:]).all()
    sub_ids, _ = bm.search_batch(["common"], k=3, allowed=[5, 6])
    assert sorted(sub_ids[0, :2].tolist()) == [5, 6] and sub_ids[0, 2] == MISSING


def test_properties_and_repr() -> None:
    bm = BM25Index(k1=0.9, b=0.4, language="french", stopwords=["le"], fold_accents=True)
    assert (bm.k1, bm.b, bm.language, bm.stopwords) == (0.9, 0.4, "french", ["le"])
    assert bm.stemming is True and bm.fold_accents is True
    assert BM25Index().stopwords is True
    assert BM25Index(stopwords=False).stopwords is False
    assert "BM25Index(" in repr(bm)
    bm.add([3], ["le chat"])
    assert 3 in bm and 4 not in bm and "x" not in bm
    assert bm.vocabulary_size == 1


def test_save_load_round_trip(tmp_path: Path) -> None:
    docs = {i: f"w{i % 3} w{i % 11} café running" for i in range(100)}
    bm = build(docs, k1=1.5, b=0.5, stopwords=["w0"], fold_accents=True)
    bm.remove(list(range(0, 100, 3)))
    path = tmp_path / "index.bm25"
    bm.save(path)
    bm.save(str(path))  # replaces atomically
    assert [p.name for p in tmp_path.iterdir()] == ["index.bm25"]
    back = BM25Index.load(path)
    assert (back.k1, back.b, back.language, back.stopwords) == (1.5, 0.5, "english", ["w0"])
    assert back.fold_accents and back.stemming
    assert len(back) == len(bm) and back.vocabulary_size == bm.vocabulary_size
    for q in ["w1", "w5 cafe", "run", "w0"]:
        a, b = bm.search(q, k=50), back.search(q, k=50)
        assert a[0].tolist() == b[0].tolist()
        np.testing.assert_array_equal(a[1], b[1])
    back.add([1000], ["w1"])
    assert len(back) == len(bm) + 1


def test_damaged_files_are_refused(tmp_path: Path) -> None:
    bm = build({1: "alpha beta", 2: "beta gamma"})
    path = tmp_path / "ix"
    bm.save(path)
    data = path.read_bytes()
    for bad in [data[: len(data) // 2], data[:10], b"", b"garbage" * 10]:
        path.write_bytes(bad)
        with pytest.raises(CorruptFileError):
            BM25Index.load(path)
    flipped = bytearray(data)
    flipped[-3] ^= 0xFF
    path.write_bytes(bytes(flipped))
    with pytest.raises(CorruptFileError, match="checksum"):
        BM25Index.load(path)
    other = tmp_path / "hnsw"
    memlane.HnswIndex(dim=4).save(other)
    with pytest.raises(CorruptFileError, match="BM25"):
        BM25Index.load(other)
    with pytest.raises(NotFoundError):
        BM25Index.load(tmp_path / "missing")


def test_bad_input_changes_nothing() -> None:
    bm = build({1: "alpha", 2: "beta"})
    bad_adds: list[tuple[object, object, type[Exception]]] = [
        ([3, 4], ["x"], InvalidArgumentError),  # lengths differ
        ([3, 3], ["x", "y"], InvalidArgumentError),  # duplicate id in one batch
        ([3], "x", InvalidArgumentError),  # a str, not a list
        ([3, 4], ["x", 5], InvalidArgumentError),  # not a str
        ([3], [None], InvalidArgumentError),
        ([-1], ["x"], InvalidArgumentError),  # not a u64
        (["a"], ["x"], InvalidArgumentError),
        ([3], ["bad \ud800"], InvalidArgumentError),
        ([2**64 - 1], ["x"], InvalidArgumentError),  # reserved for padding
        (3, 4, InvalidArgumentError),
    ]
    for ids, texts_, error in bad_adds:
        with pytest.raises(error):
            bm.add(ids, texts_)  # type: ignore[arg-type]
    with pytest.raises(UnknownIdError):
        bm.remove([1, 99])
    with pytest.raises(InvalidArgumentError):
        bm.remove([1, 1])
    assert sorted(bm.ids().tolist()) == [1, 2]
    assert bm.search("alpha")[0].tolist() == [1]
    for k in [0, -3]:
        with pytest.raises(InvalidArgumentError, match="k must be"):
            bm.search("alpha", k=k)
        with pytest.raises(InvalidArgumentError, match="k must be"):
            bm.search_batch(["alpha"], k=k)
    with pytest.raises(InvalidArgumentError, match="query"):
        bm.search(b"alpha")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="queries"):
        bm.search_batch("alpha")
    with pytest.raises(InvalidArgumentError, match="too large"):
        bm.search_batch(["alpha"] * 10, k=2**40)
    with pytest.raises(InvalidArgumentError, match="language"):
        BM25Index(language="klingon")
    with pytest.raises(InvalidArgumentError, match="b must be"):
        BM25Index(b=1.5)
    with pytest.raises(InvalidArgumentError, match="k1 must be"):
        BM25Index(k1=-1)
    assert issubclass(InvalidArgumentError, MemlaneError)


def test_ids_accept_lists_and_integer_arrays() -> None:
    bm = BM25Index()
    bm.add([2**64 - 2], ["biggest"])
    bm.add(np.array([5], dtype=np.int64), ["five"])
    bm.add(np.array([6], dtype=np.uint32), ["six"])
    assert bm.search("biggest")[0].tolist() == [2**64 - 2]
    assert sorted(bm.ids().tolist()) == [5, 6, 2**64 - 2]


def test_hostile_texts_neither_crash_nor_hang() -> None:
    long_doc = " ".join(f"word{i % 5000}" for i in range(300_000))  # ~3 MB
    hostile = [
        long_doc,
        "x" * 1_000_000,
        "nul\x00bytes\x00inside\x00",
        "\x00" * 1000,
        "東京都に住んでいます" * 1000,
        "🎉" * 10_000,
        "e" + "\u0301" * 10_000,
        "שלום مرحبا ΟΔΥΣΣΕΥΣ",
        "",
    ]
    bm = BM25Index()
    bm.add(np.arange(len(hostile), dtype=np.uint64), hostile)
    assert len(bm) == len(hostile)
    assert bm.search("word42")[0].tolist() == [0]
    assert bm.search("x" * 1_000_000)[0].tolist() == [1]
    assert bm.search("bytes")[0].tolist() == [2]
    assert bm.search("東京")[0].tolist() == [4]
    assert bm.search("שלום")[0].tolist() == [7]
    bm.search(long_doc[:200_000], k=3)
    bm.remove([0, 1])
    bm.add([0], ["short again"])


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(), min_size=1, max_size=5), st.text())
def test_any_unicode_is_indexed_and_searched(docs: list[str], query: str) -> None:
    docs = [d.encode("utf-8", "replace").decode() for d in docs]
    query = query.encode("utf-8", "replace").decode()
    bm = BM25Index(fold_accents=True)
    bm.add(np.arange(len(docs), dtype=np.uint64), docs)
    ids, scores = bm.search(query, k=3)
    assert len(ids) <= 3 and np.isfinite(scores).all() and (scores > 0).all()


def test_concurrent_searches_and_adds() -> None:
    bm = build({i: f"w{i % 10} shared" for i in range(500)})
    errors: list[BaseException] = []

    def searcher() -> None:
        try:
            for _ in range(200):
                assert len(bm.search("shared w3", k=5)[0]) == 5
                bm.search_batch(["w1", "w2"], k=3)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=searcher) for _ in range(3)]
    for t in threads:
        t.start()
    for i in range(500, 1500):
        bm.add([i], [f"w{i % 10} shared"])
        if i % 3 == 0:
            bm.remove([i - 400])
    for t in threads:
        t.join()
    assert not errors
    assert len(bm) == 1500 - len(range(501, 1500, 3))


def _scifact() -> tuple[list[str], list[str], dict[str, str], dict[str, dict[str, int]]]:
    if not (SCIFACT / "corpus.jsonl").is_file():
        pytest.skip(f"SciFact not found at {SCIFACT} (expected ../shared/data/ beside the repo)")
    corpus = [json.loads(line) for line in (SCIFACT / "corpus.jsonl").open(encoding="utf-8")]
    queries = {}
    for line in (SCIFACT / "queries.jsonl").open(encoding="utf-8"):
        q = json.loads(line)
        queries[q["_id"]] = q["text"]
    qrels: dict[str, dict[str, int]] = {}
    for line in (SCIFACT / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        qid, did, score = line.split("\t")
        qrels.setdefault(qid, {})[did] = int(score)
    doc_ids = [d["_id"] for d in corpus]
    texts_ = [f"{d['title']} {d['text']}" for d in corpus]
    return doc_ids, texts_, queries, qrels


def ndcg_at_10(ranked: list[str], relevant: dict[str, int]) -> float:
    dcg = sum(relevant.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranked[:10]))
    ideal = sorted(relevant.values(), reverse=True)[:10]
    return dcg / sum(r / math.log2(i + 2) for i, r in enumerate(ideal))


def test_scifact_ndcg() -> None:
    doc_ids, texts_, queries, qrels = _scifact()
    bm = BM25Index(k1=1.2, b=0.75, language="english", stopwords=True, stemming=True)
    bm.add(np.arange(len(texts_), dtype=np.uint64), texts_)
    qids = list(qrels)
    assert len(qids) == 300
    ids, _ = bm.search_batch([queries[q] for q in qids], k=10)
    ndcg = np.mean(
        [
            ndcg_at_10([doc_ids[j] for j in row if j != MISSING], qrels[q])
            for q, row in zip(qids, ids.tolist(), strict=True)
        ]
    )
    assert ndcg >= 0.675, ndcg
