"""Attacks on the drop-in hnswlib and rank_bm25 of session 70: a ``BFIndex`` initiated
twice emptied itself; a capacity of 2**64 or more was taken and saved into a file that
would not load; whole float labels of 2**63 and more overflowed through int64; a BM25
parameter too large for a float leaked Python's ``OverflowError``."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

import memlane.compat.hnswlib as mhnsw
from memlane.compat import _hnswlib_common
from memlane.compat.rank_bm25 import BM25L, BM25Okapi, BM25Plus
from memlane.errors import InvalidArgumentError

RNG = np.random.default_rng(70)
DATA = RNG.standard_normal((50, 8)).astype(np.float32)


def test_a_bfindex_initiated_twice_keeps_its_labels(hnswlib_peer: ModuleType) -> None:
    for module in (hnswlib_peer, mhnsw):
        index = module.BFIndex(space="l2", dim=8)
        index.init_index(max_elements=100)
        index.add_items(DATA)
        with pytest.raises(RuntimeError, match="already initiated"):
            index.init_index(max_elements=100)
        assert index.get_current_count() == 50


@pytest.mark.parametrize("size", [2**64, 2**70])
def test_a_capacity_no_file_can_hold_is_refused(tmp_path: Path, size: int) -> None:
    index = mhnsw.Index(space="l2", dim=8)
    with pytest.raises(TypeError, match="below 2\\*\\*64"):
        index.init_index(max_elements=size)
    index.init_index(max_elements=100)
    with pytest.raises(TypeError, match="below 2\\*\\*64"):
        index.resize_index(size)
    index.add_items(DATA)
    index.save_index(str(tmp_path / "i.bin"))
    with pytest.raises(TypeError, match="below 2\\*\\*64"):
        mhnsw.Index(space="l2", dim=8).load_index(str(tmp_path / "i.bin"), max_elements=size)
    with pytest.raises(TypeError, match="below 2\\*\\*64"):
        mhnsw.BFIndex(space="l2", dim=8).init_index(max_elements=size)
    loaded = mhnsw.Index(space="l2", dim=8)
    loaded.load_index(str(tmp_path / "i.bin"), max_elements=2**64 - 1)
    assert loaded.get_max_elements() == 2**64 - 1


def test_whole_float_labels_of_2_63_and_more_are_kept(hnswlib_peer: ModuleType) -> None:
    for ids in (np.array([1e19, 5.0]), [np.uint64(2**63 + 2048), 5]):
        got = []
        for module in (hnswlib_peer, mhnsw):
            index = module.Index(space="l2", dim=8)
            index.init_index(max_elements=10)
            index.add_items(DATA[:2], ids)
            got.append(sorted(int(x) for x in index.get_ids_list()))
        assert got[0] == got[1] == sorted(int(x) for x in np.asarray(ids))


@pytest.mark.parametrize("cls", [BM25Okapi, BM25L, BM25Plus])
@pytest.mark.parametrize("name", ["k1", "b"])
def test_a_bm25_parameter_too_large_for_a_float_is_refused(cls: type, name: str) -> None:
    with pytest.raises(InvalidArgumentError, match=f"{name} must be a number"):
        cls([["a", "b"], ["c"]], **{name: 10**400})


def test_a_query_of_more_results_than_one_engine_call_gives_is_asked_in_parts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A million rows asking 250 each (a kNN graph's build) passed the engine's bound of
    # 2**28 results a call and were refused; hnswlib answers them.
    index = mhnsw.Index(space="cosine", dim=8)
    index.init_index(max_elements=100)
    index.add_items(DATA)
    whole = index.knn_query(DATA, k=5)
    evens = index.knn_query(DATA, k=5, filter=lambda label: label % 2 == 0)
    monkeypatch.setattr(_hnswlib_common, "_CALL_RESULTS", 12)  # two rows a call
    for got, want in (
        (index.knn_query(DATA, k=5), whole),
        (index.knn_query(DATA, k=5, filter=lambda label: label % 2 == 0), evens),
    ):
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_allclose(got[1], want[1])
    assert [len(row) for row in index.knn_query_return_lists(DATA, k=13)[0]] == [13] * 50


@pytest.mark.parametrize("kind", ["Index", "BFIndex"])
def test_save_index_writes_through_a_link_keeps_the_mode_and_takes_hnswlibs_paths(
    tmp_path: Path, kind: str
) -> None:
    # The file was written as a temporary one renamed over the target: a symlink was
    # replaced by a regular file, every file saved was 0600 whatever the umask, a name of
    # 250 bytes failed (the temporary name is longer), and a bytes path was refused.
    import os
    import stat

    def made() -> object:
        index = getattr(mhnsw, kind)(space="l2", dim=8)
        index.init_index(max_elements=100)
        index.add_items(DATA)
        return index

    def loaded(path: object) -> int:
        index = getattr(mhnsw, kind)(space="l2", dim=8)
        index.load_index(path)
        return int(index.get_current_count())

    real = tmp_path / "real.bin"
    real.write_bytes(b"")
    real.chmod(0o640)
    link = tmp_path / "link.bin"
    link.symlink_to(real)
    made().save_index(str(link))  # type: ignore[attr-defined]
    assert link.is_symlink() and loaded(str(link)) == 50 and loaded(str(real)) == 50
    assert stat.S_IMODE(real.stat().st_mode) == 0o640
    umask = os.umask(0o022)
    try:
        new = tmp_path / "new.bin"
        made().save_index(new)  # type: ignore[attr-defined]
        assert stat.S_IMODE(new.stat().st_mode) == 0o644
    finally:
        os.umask(umask)
    long, wide = tmp_path / ("n" * 250), tmp_path / ("\U0001f600" * 63)  # 252 bytes
    made().save_index(os.fsencode(long))  # type: ignore[attr-defined]
    made().save_index(wide)  # type: ignore[attr-defined]
    assert loaded(os.fsencode(long)) == 50 and loaded(str(wide)) == 50
    names = ["link.bin", "new.bin", "real.bin", long.name, wide.name]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names)
    with pytest.raises(RuntimeError, match="Cannot open file"):
        loaded(str(tmp_path / "a\0b"))


@pytest.mark.parametrize("space", ["l2", "ip", "cosine"])
def test_bfindex_searches_a_block_of_queries_at_a_time(
    monkeypatch: pytest.MonkeyPatch, hnswlib_peer: ModuleType, space: str
) -> None:
    # Every query's distances to every row were one matrix: 1,000 queries over a million
    # rows asked numpy for 3.7 GiB (a raw MemoryError); hnswlib answers them.
    from memlane.compat import _hnswlib_bruteforce

    queries = RNG.standard_normal((23, 8)).astype(np.float32)
    answers = []
    for module in (hnswlib_peer, mhnsw):
        index = module.BFIndex(space=space, dim=8)
        index.init_index(max_elements=100)
        index.add_items(DATA)
        answers.append(index.knn_query(queries, k=4))
    monkeypatch.setattr(_hnswlib_bruteforce, "_BLOCK_CELLS", 120)  # two queries a block
    blocked = index.knn_query(queries, k=4)
    np.testing.assert_array_equal(blocked[0], answers[1][0])
    np.testing.assert_allclose(blocked[1], answers[1][1], rtol=1e-5, atol=1e-6)
    if space != "cosine":  # hnswlib's BFIndex does not normalise under cosine
        np.testing.assert_array_equal(blocked[0], answers[0][0])
        np.testing.assert_allclose(blocked[1], answers[0][1], rtol=1e-4, atol=1e-5)


def test_bfindex_blocks_are_bounded_by_the_k_nearest_measured_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A block was sized by the rows alone: many queries over few rows measured k x dim
    # values a query again at once (200,000 queries over 20 rows: 1 GiB).
    from memlane.compat import _hnswlib_bruteforce

    index = mhnsw.BFIndex(space="l2", dim=8)
    index.init_index(max_elements=100)
    index.add_items(DATA[:20])
    queries = RNG.standard_normal((100, 8)).astype(np.float32)
    whole = index.knn_query(queries, k=10)
    sizes: list[int] = []
    nearest = _hnswlib_bruteforce.BFIndex._nearest
    monkeypatch.setattr(_hnswlib_bruteforce, "_BLOCK_CELLS", 800)
    monkeypatch.setattr(
        _hnswlib_bruteforce.BFIndex,
        "_nearest",
        lambda self, q, *rest: (sizes.append(len(q)), nearest(self, q, *rest))[1],
    )
    blocked = index.knn_query(queries, k=10)
    assert max(sizes) == 800 // (10 * 8) and sum(sizes) == 100
    np.testing.assert_array_equal(blocked[0], whole[0])
