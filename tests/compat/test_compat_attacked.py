"""memlane.compat.hnswlib against damaged files and out-of-range settings: hnswlib's
``RuntimeError`` for a file it cannot read (naming the caller's file, never a temporary
one), an index left as it was by a failed load, and ``ef`` over hnswlib's whole range."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

import memlane.compat.hnswlib as mhnsw

CORRUPTED = "Index seems to be corrupted or unsupported"


def data(n: int = 50, dim: int = 8, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).random((n, dim), dtype=np.float32)


def saved(path: Path, seed: int = 0, deleted: int | None = None) -> bytes:
    index = mhnsw.Index(space="l2", dim=8)
    index.init_index(100, M=8)
    index.add_items(data(seed=seed))
    if deleted is not None:
        index.mark_deleted(deleted)
    index.save_index(str(path))
    return path.read_bytes()


def damages(raw: bytes) -> dict[str, bytes]:
    return {
        "a flipped byte in the graph": raw[:-10] + bytes([raw[-10] ^ 0xFF]) + raw[-9:],
        "a broken JSON header": raw.replace(b'"kind": "Index"', b'"kind"; "Index"'),
        "a header that is no object": raw.replace(b'{"kind"', b'["kind"', 1),
        "a renamed key in the header": raw.replace(b'"count"', b'"cOunt"'),
        "a key of the wrong type": raw.replace(b'"deleted": [', b'"deleted": 7, "x": ['),
        "deleted labels the graph does not hold": raw.replace(b'"deleted": []', b'"deleted": [3]'),
        "a header naming another kind": raw.replace(b'"kind": "Index"', b'"kind": "Other"'),
        "no graph": raw[: raw.index(b'"num_threads"')],
    }


def test_damaged_files_raise_hnswlibs_runtime_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "index.bin"
    for name, damaged in damages(saved(path)).items():
        path.write_bytes(damaged)
        with pytest.raises(RuntimeError) as caught:
            mhnsw.Index(space="l2", dim=8).load_index(str(path))
        message = str(caught.value)
        assert message.startswith(f"{CORRUPTED}: {str(path)!r} "), name
        assert "memlane-hnswlib-" not in message, name


def test_damaged_hnswlib_file_as_hnswlib_says(tmp_path: Path, hnswlib_peer: ModuleType) -> None:
    theirs = hnswlib_peer.Index(space="l2", dim=8)
    theirs.init_index(100)
    theirs.add_items(data())
    path = tmp_path / "hnswlib.bin"
    theirs.save_index(str(path))
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(RuntimeError, match=f"^{CORRUPTED}$"):
        hnswlib_peer.Index(space="l2", dim=8).load_index(str(path))
    with pytest.raises(RuntimeError, match=f"^{CORRUPTED}: {str(path)!r} "):
        mhnsw.Index(space="l2", dim=8).load_index(str(path))


def state(index: mhnsw.Index, queries: np.ndarray) -> tuple[object, ...]:
    """What a load would change of ``index``, and what it answers."""
    return (
        index.get_ids_list(),
        index.element_count,
        index.max_elements,
        index.M,
        index.ef,
        index.knn_query(queries, k=3)[0].tolist(),
    )


def test_a_failed_load_leaves_the_index_as_it_was(tmp_path: Path) -> None:
    good, bad = tmp_path / "good.bin", tmp_path / "bad.bin"
    saved(good, seed=1, deleted=4)
    index = mhnsw.Index(space="l2", dim=8)
    index.load_index(str(good), max_elements=300)
    index.set_ef(40)
    queries = data(5, seed=9)
    before = state(index, queries)
    for name, damaged in damages(saved(bad, seed=2, deleted=None)).items():
        bad.write_bytes(damaged)
        with pytest.raises(RuntimeError):
            index.load_index(str(bad))
        assert state(index, queries) == before, name
    index.add_items(data(1, seed=3))  # still usable: the next label continues
    assert index.element_count == 51


def test_bfindex_damaged_files(tmp_path: Path) -> None:
    bf = mhnsw.BFIndex(space="l2", dim=8)
    bf.init_index(100)
    bf.add_items(data())
    path = tmp_path / "bf.bin"
    bf.save_index(str(path))
    raw = path.read_bytes()
    for damaged in (
        raw.replace(b'"count": 50', b'"count": 49'),
        raw.replace(b'"count"', b'"cOunt"'),
        raw.replace(b'"kind": "BFIndex"', b'"kind" "BFIndex"'),
    ):
        path.write_bytes(damaged)
        loaded = mhnsw.BFIndex(space="l2", dim=8)
        with pytest.raises(RuntimeError, match=f"^{CORRUPTED}: {str(path)!r} "):
            loaded.load_index(str(path))
        assert loaded.get_current_count() == 0 and loaded.get_max_elements() == 0


@pytest.mark.parametrize("ef", [2**63, 2**64 - 1, 2**31, 0])
def test_ef_takes_hnswlibs_whole_range(hnswlib_peer: ModuleType, ef: int) -> None:
    rows = data()
    results = []
    for module in (hnswlib_peer, mhnsw):
        index = module.Index(space="l2", dim=8)
        index.init_index(100)
        # One thread: a beam of k (ef 0) walks the graph as built, and hnswlib's threads
        # build it in the order the machine's load lets them (a busy run missed a row's
        # own vector at k=3).
        index.add_items(rows, num_threads=1)
        index.set_ef(ef)
        assert index.ef == ef
        index.ef = ef
        assert index.ef == ef
        results.append(index.knn_query(rows[:5], k=3)[0].tolist())
    assert results[0] == results[1]


def test_ef_before_init_and_in_copies() -> None:
    index = mhnsw.Index(space="l2", dim=8)
    index.set_ef(2**63)
    index.init_index(100, ef_construction=2**64 - 1)
    index.add_items(data())
    twin = mhnsw.Index(index)
    assert (twin.ef, twin.ef_construction) == (2**63, 2**64 - 1)
    assert twin.knn_query(data()[:1], k=1)[0][0, 0] == 0


@pytest.mark.parametrize("ef", [2**64, -1])
def test_ef_out_of_hnswlibs_range_is_a_type_error(hnswlib_peer: ModuleType, ef: int) -> None:
    for module in (hnswlib_peer, mhnsw):
        index = module.Index(space="l2", dim=8)
        index.init_index(10)
        with pytest.raises(TypeError):
            index.set_ef(ef)
        with pytest.raises(TypeError):
            index.ef = ef
        assert index.ef == 10
