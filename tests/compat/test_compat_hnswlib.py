"""memlane.compat.hnswlib: hnswlib's API and behaviour on memlane's HNSW index.

Distances and recall are checked against a brute-force reference written here; the
exceptions, messages, shapes and attributes against hnswlib itself when it is installed
(the dev extra installs it; those tests skip without it).
"""

from __future__ import annotations

import copy
import itertools
import pickle
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

import memlane.compat.hnswlib as mhnsw

SPACES = ["l2", "ip", "cosine"]


def clustered(n: int, dim: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = np.random.default_rng(7).standard_normal((20, dim)).astype(np.float32) * 3
    return (centres[np.arange(n) % 20] + rng.standard_normal((n, dim))).astype(np.float32)


def exact(space: str, data: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """The distances of every query to every row, as the docs define them."""
    if space == "l2":
        return ((queries[:, None, :] - data[None, :, :]) ** 2).sum(-1)
    if space == "ip":
        return 1 - queries @ data.T
    qn = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    dn = data / np.linalg.norm(data, axis=1, keepdims=True)
    return 1 - qn @ dn.T


def recall(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.mean([len(set(g) & set(w)) / len(w) for g, w in zip(got, want, strict=True)]))


def build(module: Any, space: str, data: np.ndarray, **kw: Any) -> Any:
    index = module.Index(space=space, dim=data.shape[1])
    index.init_index(max_elements=kw.pop("max_elements", len(data)), **kw)
    index.add_items(data)
    return index


# -- results ----------------------------------------------------------------------------


@pytest.mark.parametrize("space", SPACES)
def test_distances_and_recall_match_brute_force(space: str) -> None:
    data = clustered(2000, 24, seed=1)
    queries = clustered(50, 24, seed=2)
    index = build(mhnsw, space, data, ef_construction=100, M=16)
    index.set_ef(64)
    labels, distances = index.knn_query(queries, k=10)
    assert labels.shape == distances.shape == (50, 10)
    assert labels.dtype == np.uint64 and distances.dtype == np.float32
    full = exact(space, data, queries)
    want = np.argsort(full, axis=1)[:, :10]
    assert recall(labels, want) >= 0.95
    # Each distance is the defined distance to the returned label, ascending.
    picked = np.take_along_axis(full, labels.astype(np.int64), axis=1)
    np.testing.assert_allclose(distances, picked, rtol=1e-4, atol=1e-4)
    assert np.all(np.diff(distances, axis=1) >= 0)


def test_a_single_vector_query_gives_one_row_and_k_zero_gives_empty_rows() -> None:
    data = clustered(100, 8, seed=3)
    index = build(mhnsw, "l2", data)
    labels, distances = index.knn_query(data[5])
    assert labels.shape == (1, 1) and labels[0, 0] == 5 and distances[0, 0] == 0
    labels, distances = index.knn_query(data[:3], k=0)
    assert labels.shape == distances.shape == (3, 0)
    labels, _ = index.knn_query(data[:4].astype(np.float64).tolist(), k=2)
    assert labels[:, 0].tolist() == [0, 1, 2, 3]
    # hnswlib reads past a short query; this raises as add_items does.
    with pytest.raises(RuntimeError, match=r"^Wrong dimensionality of the vectors$"):
        index.knn_query(data[:2, :5])


def test_cosine_stores_unit_vectors_and_ip_raw_ones() -> None:
    data = clustered(50, 8, seed=4)
    cos = build(mhnsw, "cosine", data)
    stored = cos.get_items([3, 7])
    np.testing.assert_allclose(np.linalg.norm(stored, axis=1), 1, rtol=1e-6)
    np.testing.assert_allclose(stored[0], data[3] / np.linalg.norm(data[3]), rtol=1e-5)
    ip = build(mhnsw, "ip", data)
    np.testing.assert_array_equal(ip.get_items([3]), data[3:4])
    # No ids: every vector (as later hnswlib versions do), in one consistent order.
    everything = ip.get_items()
    assert everything.shape == (50, 8)
    np.testing.assert_array_equal(everything, ip.get_items(ip.get_ids_list()))
    assert ip.get_items([], return_type="list") == []
    ip.ef_search_default = 33  # the later name of ef
    assert ip.ef == 33


# -- filters ----------------------------------------------------------------------------


def test_a_callable_filter_is_asked_about_the_labels_the_search_reaches() -> None:
    data = clustered(5000, 16, seed=5)
    index = build(mhnsw, "l2", data, ef_construction=100)
    index.set_ef(10)
    asked: list[int] = []

    def even(label: int) -> bool:
        asked.append(label)
        return label % 2 == 0

    labels, _ = index.knn_query(data, k=1, filter=even, num_threads=1)
    assert np.all(labels % 2 == 0)
    # Even rows find themselves; odd rows a neighbour.
    assert np.mean(labels[:, 0] == np.arange(len(data))) == pytest.approx(0.5, abs=2e-3)
    assert all(isinstance(x, int) for x in asked[:10])
    # A graph search: far fewer calls than one per label per query.
    assert len(asked) < len(data) * len(data) / 20


def test_a_filter_that_raises_stops_the_query() -> None:
    index = build(mhnsw, "l2", clustered(200, 8, seed=6))

    def broken(label: int) -> bool:
        raise KeyError(label)

    with pytest.raises(KeyError):
        index.knn_query(clustered(3, 8, seed=7), k=2, filter=broken)


@pytest.mark.parametrize("kind", ["array", "set", "list", "range", "frozenset"])
def test_allowed_labels_give_the_same_answer_as_the_equivalent_callable(kind: str) -> None:
    data = clustered(3000, 16, seed=8)
    queries = clustered(40, 16, seed=9)
    index = build(mhnsw, "cosine", data)
    index.set_ef(100)
    allowed = range(0, 3000, 7)
    given = {
        "array": np.array(allowed, dtype=np.int64),
        "set": set(allowed),
        "list": list(allowed),
        "range": allowed,
        "frozenset": frozenset(allowed),
    }[kind]
    labels, _ = index.knn_query(queries, k=5, filter=given)
    assert np.all(labels % 7 == 0)
    keep = np.array(allowed)
    full = exact("cosine", data[keep], queries)
    want = keep[np.argsort(full, axis=1)[:, :5]]
    # A small allowed set is scanned exactly.
    assert recall(labels, want) >= 0.99
    by_callable, _ = index.knn_query(queries, k=5, filter=lambda x: x % 7 == 0)
    assert recall(labels, by_callable) >= 0.95


LABELS = np.array([*range(3, 600, 5), *range(2**63, 2**63 + 80, 4)], dtype=np.uint64)


def labelled(kind: str) -> tuple[Any, np.ndarray]:
    """An index of each kind holding LABELS (gaps and labels above 2**63), and its data."""
    data = clustered(len(LABELS), 8, seed=31)
    index = mhnsw.Index(space="l2", dim=8) if kind == "hnsw" else mhnsw.BFIndex("l2", 8)
    index.init_index(max_elements=len(LABELS))
    index.add_items(data, LABELS)
    if kind == "hnsw":
        index.set_ef(len(LABELS))  # every label reachable: the answer is exact
    return index, data


def expected(data: np.ndarray, query: np.ndarray, keep: Callable[[int], bool]) -> list[int]:
    mask = np.array([keep(int(x)) for x in LABELS])
    order = np.argsort(exact("l2", data[mask], query[None, :])[0], kind="stable")
    return [int(x) for x in LABELS[mask][order]]


def found(index: Any, query: np.ndarray, allowed: Any, size: int) -> list[int]:
    """The labels ``allowed`` lets through, nearest first (``size`` of them expected)."""
    if isinstance(index, mhnsw.Index):
        return list(index.knn_query_return_lists(query, k=len(LABELS), filter=allowed)[0][0])
    if size == 0:  # BFIndex has no list form: fewer than k raises
        with pytest.raises(RuntimeError, match="contiguous 2D array"):
            index.knn_query(query, k=1, filter=allowed)
        return []
    return [int(x) for x in index.knn_query(query, k=size, filter=allowed)[0][0]]


RANGES = [
    range(0, 10**12),
    range(10**12, -(10**12), -1),
    range(-7, 10**12, 5),
    range(3, 2**64 + 10**6, 10),
    range(10**12, 0, -15),
    range(2**63, 2**64 - 1, 8),
    range(2**63 + 4, 2**63 + 5),
    range(-(10**12), 0),
    range(2**70, 2**71),
]


@pytest.mark.parametrize("kind", ["hnsw", "bf"])
@pytest.mark.parametrize("allowed", RANGES, ids=repr)
def test_a_huge_range_filter_is_intersected_with_the_labels_held(kind: str, allowed: range) -> None:
    index, data = labelled(kind)
    want = expected(data, data[7], lambda x: x in allowed)
    assert found(index, data[7], allowed, len(want)) == want


@pytest.mark.parametrize("kind", ["hnsw", "bf"])
@pytest.mark.parametrize("shape", ["range", "set", "generator"])
def test_a_filter_larger_than_the_index_costs_what_the_index_holds(kind: str, shape: str) -> None:
    # The old code turned the whole filter into an array: 80 MB for 10**7 labels,
    # 3.4 GB (and minutes) for range(0, 10**12), forever for itertools.count().
    index, data = labelled(kind)
    drawn = 0

    def counted(labels: Any) -> Any:
        nonlocal drawn
        for label in labels:
            drawn += 1
            yield label

    big = set(range(10**6)) | {int(x) for x in LABELS[-3:]} if shape == "set" else None
    given = {
        "range": lambda: range(10**7),
        "set": lambda: big,
        "generator": lambda: counted(range(10**7)),
    }[shape]
    if shape == "set":
        want = sorted(int(x) for x in LABELS if int(x) in big)
    else:
        want = [int(x) for x in LABELS if x < 10**7]  # the labels above 2**63 are not in it
    found(index, data[7], given(), len(want))  # numpy's lazy imports are not the filter's
    drawn = 0
    tracemalloc.start()
    try:
        labels = found(index, data[7], given(), len(want))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000
    assert sorted(labels) == want
    if shape == "generator":
        assert drawn == 10**7  # the labels above 2**63 were looked for till the end


@pytest.mark.parametrize("kind", ["hnsw", "bf"])
def test_an_endless_filter_stops_once_every_label_held_was_seen(kind: str) -> None:
    held = LABELS[LABELS < 2**63]
    data = clustered(len(held), 8, seed=32)
    index = mhnsw.Index(space="l2", dim=8) if kind == "hnsw" else mhnsw.BFIndex("l2", 8)
    index.init_index(max_elements=len(held))
    index.add_items(data, held)
    endless = itertools.count()
    labels, _ = index.knn_query(data[0], k=3, filter=endless)
    assert labels[0, 0] == held[0]
    assert next(endless) == int(held.max()) + 1  # nothing drawn past the last label held


def test_non_integer_labels_in_an_iterable_filter_are_refused() -> None:
    index, data = labelled("hnsw")
    with pytest.raises(TypeError, match="integers"):
        index.knn_query(data[0], k=1, filter=iter(["a"]))


def test_too_few_allowed_labels_raise_hnswlibs_error() -> None:
    index = build(mhnsw, "l2", clustered(100, 8, seed=10))
    with pytest.raises(RuntimeError, match="contiguous 2D array"):
        index.knn_query(clustered(1, 8, seed=11), k=3, filter=[1, 2])
    with pytest.raises(RuntimeError, match="contiguous 2D array"):
        index.knn_query(clustered(1, 8, seed=11), k=3, filter=lambda x: x < 2)
    with pytest.raises(RuntimeError, match="contiguous 2D array"):
        index.knn_query(clustered(1, 8, seed=11), k=101)
    # The list form returns what there is instead.
    labels, distances = index.knn_query_return_lists(clustered(2, 8, seed=11), k=3, filter=[1, 2])
    assert [sorted(row) for row in labels] == [[1, 2], [1, 2]]
    assert all(len(d) == 2 and isinstance(d[0], float) for d in distances)
    labels, _ = index.knn_query_return_lists(clustered(2, 8, seed=11), k=4)
    assert [len(row) for row in labels] == [4, 4]


# -- deletes, replacement, capacity -----------------------------------------------------


def test_mark_deleted_hides_a_label_until_unmarked() -> None:
    data = clustered(500, 8, seed=12)
    index = build(mhnsw, "l2", data)
    index.mark_deleted(10)
    labels, _ = index.knn_query(data[10], k=5)
    assert 10 not in labels
    assert index.element_count == 500 == index.get_current_count()
    assert sorted(index.get_ids_list()) == list(range(500))
    with pytest.raises(RuntimeError, match=r"^Label not found$"):
        index.get_items([10])
    index.unmark_deleted(10)
    labels, distances = index.knn_query(data[10], k=1)
    assert labels[0, 0] == 10 and distances[0, 0] == 0
    np.testing.assert_array_equal(index.get_items([10]), data[10:11])


def test_adding_a_deleted_label_restores_it_with_the_new_vector() -> None:
    data = clustered(100, 8, seed=13)
    index = build(mhnsw, "l2", data)
    index.mark_deleted(4)
    index.add_items(data[50], ids=[4])
    assert index.get_items([4])[0].tolist() == data[50].tolist()
    assert index.element_count == 100


def test_replace_deleted_reuses_places_of_deleted_labels() -> None:
    data = clustered(60, 8, seed=14)
    index = mhnsw.Index("l2", 8)
    index.init_index(max_elements=50, allow_replace_deleted=True)
    index.add_items(data[:50])
    with pytest.raises(RuntimeError, match="exceeds the specified limit"):
        index.add_items(data[50:51], ids=[100])
    for label in range(5):
        index.mark_deleted(label)
    index.add_items(data[50:55], ids=range(100, 105), replace_deleted=True)
    assert index.element_count == 50
    ids = set(index.get_ids_list())
    assert set(range(100, 105)) <= ids and not ids & set(range(5))
    labels, _ = index.knn_query(data[50:55], k=1)
    assert labels[:, 0].tolist() == list(range(100, 105))
    with pytest.raises(RuntimeError, match=r"^Label not found$"):
        index.unmark_deleted(0)


def test_capacity_resize_and_default_labels() -> None:
    data = clustered(30, 4, seed=15)
    index = mhnsw.Index("ip", 4)
    index.init_index(10)
    index.add_items(data[:6])
    with pytest.raises(RuntimeError, match=r"^The number of elements exceeds the specified limit$"):
        index.add_items(data[6:12])
    # The rows before the full one went in; the default labels did not move on.
    assert index.element_count == 10
    with pytest.raises(RuntimeError, match="Cannot resize"):
        index.resize_index(9)
    index.resize_index(20)
    assert index.max_elements == 20 == index.get_max_elements()
    # After the failed call the default labels start at 6 again: these update 6..9.
    index.add_items(data[12:16])
    assert sorted(index.get_ids_list()) == list(range(10))
    np.testing.assert_array_equal(index.get_items([6]), data[12:13])
    index.add_items(data[16:18])
    assert sorted(index.get_ids_list()) == list(range(12))


def test_non_finite_vectors_are_refused_before_anything_changes() -> None:
    index = mhnsw.Index("cosine", 4)
    index.init_index(10)
    index.add_items(np.eye(4, dtype=np.float32))
    bad = np.array([[1, 2, 3, 4], [np.nan, 0, 0, 1]], dtype=np.float32)
    with pytest.raises(ValueError, match="finite"):
        index.add_items(bad, ids=[7, 8])
    assert index.element_count == 4 and sorted(index.get_ids_list()) == [0, 1, 2, 3]
    index.add_items(bad[:1], ids=[7])
    assert index.element_count == 5


def test_labels_given_twice_in_one_add_keep_the_last_vector() -> None:
    data = clustered(4, 4, seed=16)
    index = mhnsw.Index("l2", 4)
    index.init_index(10)
    index.add_items(data[:3], ids=[7, 7, 8])
    assert index.element_count == 2
    np.testing.assert_array_equal(index.get_items([7]), data[1:2])


# -- persistence ------------------------------------------------------------------------


def test_save_and_load_keep_results_deletes_and_hnswlibs_load_rules(tmp_path: Path) -> None:
    data = clustered(1000, 16, seed=17)
    queries = clustered(20, 16, seed=18)
    index = build(mhnsw, "cosine", data, max_elements=1200, M=12, ef_construction=80)
    index.set_ef(50)
    index.mark_deleted(3)
    path = tmp_path / "index.bin"
    index.save_index(str(path))
    assert path.stat().st_size == index.index_file_size()
    loaded = mhnsw.Index("cosine", 16)
    loaded.load_index(str(path))
    assert (loaded.M, loaded.ef_construction, loaded.element_count) == (12, 80, 1000)
    assert loaded.ef == 10 and loaded.max_elements == 1200
    loaded.set_ef(50)
    np.testing.assert_array_equal(
        loaded.knn_query(queries, k=5)[0], index.knn_query(queries, k=5)[0]
    )
    assert 3 in loaded.get_ids_list()
    loaded.unmark_deleted(3)
    assert loaded.knn_query(data[3], k=1)[0][0, 0] == 3
    bigger = mhnsw.Index("cosine", 16)
    bigger.load_index(path, max_elements=5000)
    assert bigger.max_elements == 5000
    smaller = mhnsw.Index("cosine", 16)
    smaller.load_index(path, max_elements=10)
    assert smaller.max_elements == 1200
    with pytest.raises(RuntimeError, match=r"^Cannot open file$"):
        mhnsw.Index("l2", 16).load_index(str(tmp_path / "missing.bin"))
    (tmp_path / "junk.bin").write_bytes(b"not an index")
    with pytest.raises(RuntimeError):
        mhnsw.Index("cosine", 16).load_index(str(tmp_path / "junk.bin"))


@pytest.mark.parametrize("copier", ["pickle", "deepcopy", "constructor", "keyword"])
def test_copies_keep_everything(copier: Any) -> None:
    data = clustered(500, 8, seed=19)
    index = build(mhnsw, "l2", data, max_elements=600, M=8, allow_replace_deleted=True)
    index.ef = 77
    index.num_threads = 3
    index.mark_deleted(9)
    make: Callable[[Any], Any] = {
        "pickle": lambda i: pickle.loads(pickle.dumps(i)),
        "deepcopy": copy.deepcopy,
        "constructor": mhnsw.Index,
        "keyword": lambda i: mhnsw.Index(index=i),
    }[copier]
    twin = make(index)
    assert (twin.ef, twin.M, twin.max_elements, twin.element_count, twin.num_threads) == (
        77,
        8,
        600,
        500,
        3,
    )
    assert (twin.space, twin.dim) == ("l2", 8)
    np.testing.assert_array_equal(
        twin.knn_query(data[:20], k=3)[0], index.knn_query(data[:20], k=3)[0]
    )
    twin.add_items(data[:1], ids=[1000], replace_deleted=True)
    assert 9 not in twin.get_ids_list() and 9 in index.get_ids_list()
    fresh = pickle.loads(pickle.dumps(mhnsw.Index("ip", 5)))
    fresh.init_index(3)
    fresh.add_items(np.eye(5, dtype=np.float32)[:3])
    assert fresh.get_current_count() == 3


# -- BFIndex ----------------------------------------------------------------------------


@pytest.mark.parametrize("space", SPACES)
def test_bfindex_is_exact(space: str, tmp_path: Path) -> None:
    data = clustered(700, 12, seed=20)
    queries = clustered(30, 12, seed=21)
    bf = mhnsw.BFIndex(space=space, dim=12)
    bf.init_index(max_elements=700)
    bf.add_items(data)
    labels, distances = bf.knn_query(queries, k=7)
    full = exact(space, data, queries)
    np.testing.assert_array_equal(labels, np.argsort(full, axis=1, kind="stable")[:, :7])
    np.testing.assert_allclose(distances, np.sort(full, axis=1)[:, :7], rtol=1e-4, atol=1e-4)
    bf.delete_vector(int(labels[0, 0]))
    bf.delete_vector(123456)  # unknown: ignored
    assert bf.get_current_count() == 699
    assert labels[0, 0] not in bf.knn_query(queries[:1], k=7)[0]
    odd, _ = bf.knn_query(queries, k=3, filter=lambda x: x % 2 == 1)
    assert np.all(odd % 2 == 1)
    same, _ = bf.knn_query(queries, k=3, filter=np.arange(1, 700, 2))
    np.testing.assert_array_equal(odd, same)
    bf.save_index(str(tmp_path / "bf.bin"))
    again = mhnsw.BFIndex(space, 12)
    again.load_index(str(tmp_path / "bf.bin"))
    assert again.get_current_count() == 699 and again.get_max_elements() == 700
    np.testing.assert_array_equal(again.knn_query(queries, k=7)[0], bf.knn_query(queries, k=7)[0])
    with pytest.raises(RuntimeError, match="exceeds the specified limit"):
        again.add_items(data[:2], ids=[5000, 5001])


# -- against hnswlib itself -------------------------------------------------------------


def scenario(module: Any, tmp: Path) -> list[Any]:
    """One run of many calls, recording what each returned or raised."""
    log: list[Any] = []

    def do(f: Callable[[], Any]) -> None:
        try:
            out = f()
        except Exception as e:
            log.append(("raise", type(e).__name__, str(e).splitlines()[0]))
            return
        if isinstance(out, tuple) and len(out) == 2 and isinstance(out[0], np.ndarray):
            log.append(("knn", out[0].shape, out[0].dtype.str, out[1].dtype.str, out[0].tolist()))
        elif isinstance(out, np.ndarray):
            log.append(("array", out.shape, out.dtype.str, np.round(out, 5).tolist()))
        else:
            log.append(("value", out))

    rng = np.random.default_rng(0)
    d = rng.random((12, 4)).astype(np.float32)
    do(lambda: module.Index("nope", 4))
    p = module.Index(space="l2", dim=4)
    do(lambda: (p.space, p.dim, p.ef))
    p.init_index(max_elements=6, ef_construction=40, M=8, random_seed=3)
    do(lambda: p.init_index(6))
    do(lambda: (p.ef, p.M, p.ef_construction, p.max_elements, p.element_count))
    do(lambda: p.add_items(d[:4]))
    do(lambda: p.add_items(d[4:8]))  # two fit, then full
    do(lambda: (p.get_current_count(), p.get_max_elements(), sorted(p.get_ids_list())))
    do(lambda: p.add_items(d[:2], [0]))
    do(lambda: p.add_items(d[:, :3]))
    do(lambda: p.add_items(np.zeros((2, 2, 4))))
    do(lambda: p.add_items(d[8], 3))
    do(lambda: p.add_items(d[:2], ids=[-1, 2]))
    do(lambda: p.knn_query(d[8], k=1))
    do(lambda: p.knn_query(d[:2], k=7))
    do(lambda: p.knn_query(d[:2], k=0))
    do(lambda: p.knn_query(d[:2], k=2, filter=lambda x: x % 2 == 0))
    do(lambda: p.mark_deleted(1))
    do(lambda: p.mark_deleted(1))
    do(lambda: p.mark_deleted(42))
    do(lambda: sorted(p.get_ids_list()))
    do(lambda: (p.element_count, p.get_current_count()))
    do(lambda: p.knn_query(d[1], k=5))
    do(lambda: p.knn_query(d[1], k=6))
    do(lambda: p.get_items([1]))
    do(lambda: p.get_items([0, 2]))
    do(lambda: p.get_items([0], return_type="list"))
    do(lambda: p.get_items([0], return_type="tuple"))
    do(lambda: p.get_items(0))
    do(lambda: p.unmark_deleted(1))
    do(lambda: p.unmark_deleted(1))
    do(lambda: p.unmark_deleted(42))
    do(lambda: p.resize_index(3))
    do(lambda: p.resize_index(8))
    do(lambda: p.add_items(d[9:10], replace_deleted=True))
    p.set_ef(1)
    do(lambda: p.ef)
    do(lambda: p.knn_query(d[0], k=3))
    p.ef = 25
    p.set_num_threads(3)
    do(lambda: (p.ef, p.num_threads))
    do(lambda: setattr(p, "M", 3))
    do(lambda: setattr(p, "element_count", 3))
    p.mark_deleted(2)
    p.save_index(str(tmp / f"{module.__name__}.bin"))
    q = module.Index("l2", 4)
    q.load_index(str(tmp / f"{module.__name__}.bin"))
    do(lambda: (q.ef, q.M, q.ef_construction, q.element_count, q.max_elements))
    do(lambda: sorted(q.get_ids_list()))
    do(lambda: q.get_items([2]))
    do(lambda: q.add_items(d[0:1], replace_deleted=True))
    r = pickle.loads(pickle.dumps(p))
    do(lambda: (r.ef, r.M, r.element_count, r.max_elements, r.num_threads))
    do(lambda: module.Index("l2", 4).load_index(str(tmp / "missing.bin")))
    a = module.Index("cosine", 4)
    a.init_index(10, allow_replace_deleted=True)
    a.add_items(d[:3])
    a.mark_deleted(0)
    do(lambda: a.add_items(d[:1], ids=[0]))
    do(lambda: a.add_items(d[3:4], ids=[10], replace_deleted=True))
    do(lambda: (sorted(a.get_ids_list()), a.element_count))
    do(lambda: a.add_items(d[4:5], ids=[11], replace_deleted=True))
    do(lambda: (sorted(a.get_ids_list()), a.element_count))
    do(lambda: a.get_items([10]))
    do(lambda: a.knn_query(d[3], k=1))
    b = module.BFIndex("ip", 4)
    b.init_index(3)
    do(lambda: b.add_items(d[:4]))
    do(lambda: b.add_items(d[:3]))
    do(lambda: b.knn_query(d[:2], k=2))
    do(lambda: b.delete_vector(1))
    do(lambda: b.delete_vector(55))
    do(lambda: (b.get_current_count(), b.get_max_elements()))
    do(lambda: b.knn_query(d[:1], k=1, filter=lambda x: x == 2))
    return log


def test_every_call_returns_or_raises_as_hnswlib_does(
    hnswlib_peer: ModuleType, tmp_path: Path
) -> None:
    ours = scenario(mhnsw, tmp_path)
    theirs = scenario(hnswlib_peer, tmp_path)
    assert len(ours) == len(theirs)
    for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        if a[0] == b[0] == "array":
            assert a[:3] == b[:3], i
            np.testing.assert_allclose(a[3], b[3], atol=1e-5, err_msg=str(i))
        elif a[0] == b[0] == "raise" and a[1] == "AttributeError":
            assert b[1] == "AttributeError", i  # Python words it its own way
        else:
            assert a == b, (i, a, b)


@pytest.mark.parametrize("space", SPACES)
def test_files_written_by_hnswlib_load(
    hnswlib_peer: ModuleType, space: str, tmp_path: Path
) -> None:
    data = clustered(800, 16, seed=26)
    queries = clustered(30, 16, seed=27)
    theirs = build(hnswlib_peer, space, data, max_elements=900, M=12, ef_construction=60)
    theirs.mark_deleted(5)
    theirs.mark_deleted(6)
    theirs.save_index(str(tmp_path / "hnswlib.bin"))
    ours = mhnsw.Index(space, 16)
    ours.load_index(path_to_index=str(tmp_path / "hnswlib.bin"))
    assert (ours.M, ours.ef_construction, ours.max_elements, ours.element_count) == (
        12,
        60,
        900,
        800,
    )
    assert sorted(ours.get_ids_list()) == sorted(theirs.get_ids_list())
    np.testing.assert_allclose(ours.get_items([0, 9]), theirs.get_items([0, 9]), rtol=1e-6)
    ours.set_ef(64)
    labels, _ = ours.knn_query(queries, k=5)
    keep = np.array([i for i in range(800) if i not in (5, 6)])
    full = exact(space, data[keep], queries)
    assert recall(labels, keep[np.argsort(full, axis=1)[:, :5]]) >= 0.95
    with pytest.raises(RuntimeError, match="already deleted"):
        ours.mark_deleted(5)
    ours.unmark_deleted(6)
    assert ours.knn_query(data[6], k=1, filter=[6, 5])[0][0, 0] == 6  # 5 stays hidden
    # A brute-force index file too, and a file of another dimension is refused.
    bf = hnswlib_peer.BFIndex(space=space, dim=16)
    bf.init_index(max_elements=900)
    bf.add_items(data)
    bf.save_index(str(tmp_path / "bf.bin"))
    exact_ours = mhnsw.BFIndex(space, 16)
    exact_ours.load_index(str(tmp_path / "bf.bin"))
    assert exact_ours.get_current_count() == 800 and exact_ours.get_max_elements() == 900
    np.testing.assert_array_equal(
        exact_ours.knn_query(queries, k=5)[0],
        np.argsort(exact(space, data, queries), axis=1, kind="stable")[:, :5],
    )
    with pytest.raises(RuntimeError, match="hnswlib Index file of dim 8"):
        mhnsw.Index(space, 8).load_index(str(tmp_path / "hnswlib.bin"))


@pytest.mark.parametrize("space", SPACES)
def test_recall_and_distances_agree_with_hnswlib(hnswlib_peer: ModuleType, space: str) -> None:
    data = clustered(3000, 32, seed=22)
    queries = clustered(100, 32, seed=23)
    want = np.argsort(exact(space, data, queries), axis=1)[:, :10]
    results = {}
    for module in (mhnsw, hnswlib_peer):
        index = build(module, space, data, ef_construction=100, M=16)
        index.set_ef(50)
        results[module.__name__] = index.knn_query(queries, k=10)
    (ours_l, ours_d), (ref_l, ref_d) = results.values()
    assert recall(ours_l, want) >= recall(ref_l, want) - 0.02
    # Where both return the same label, they report the same distance.
    same = ours_l == ref_l
    np.testing.assert_allclose(ours_d[same], ref_d[same], rtol=1e-4, atol=1e-4)


def test_bfindex_agrees_with_hnswlibs(hnswlib_peer: ModuleType) -> None:
    data = clustered(500, 16, seed=24)
    queries = clustered(20, 16, seed=25)
    out = []
    for module in (mhnsw, hnswlib_peer):
        bf = module.BFIndex(space="l2", dim=16)
        bf.init_index(max_elements=500)
        bf.add_items(data)
        out.append(bf.knn_query(queries, k=5))
    np.testing.assert_array_equal(out[0][0], out[1][0])
    np.testing.assert_allclose(out[0][1], out[1][1], rtol=1e-5, atol=1e-5)


# -- the engine methods the drop-in is built on -----------------------------------------


def test_hnswindex_hide_unhide_release_and_search_where(tmp_path: Path) -> None:
    from memlane import HnswIndex, InvalidArgumentError, UnknownIdError

    data = clustered(300, 8, seed=28)
    index = HnswIndex(8, metric="l2")
    index.add(np.arange(300), data)
    index.hide([3, 4])
    assert 3 not in index and len(index) == 298
    assert index.hidden().tolist() == [3, 4]
    assert 3 not in index.search(data[3], k=5)[0]
    with pytest.raises(UnknownIdError):
        index.hide([3])  # not live
    with pytest.raises(UnknownIdError):
        index.unhide([5])  # not hidden
    index.save(tmp_path / "i")
    loaded = HnswIndex.load(tmp_path / "i")
    assert loaded.hidden().tolist() == [3, 4]
    loaded.unhide([3])
    assert loaded.search(data[3], k=1)[0][0, 0] == 3
    loaded.release([4])
    assert loaded.hidden().size == 0 and 4 not in loaded
    seen: list[int] = []
    labels, _ = loaded.search_where(data[:2], lambda i: seen.append(i) or i % 3 == 0, k=4)
    assert np.all(labels % 3 == 0) and seen and all(type(i) is int for i in seen)
    with pytest.raises(InvalidArgumentError):
        loaded.search_where(data[:1], "not callable", k=1)  # type: ignore[arg-type]
