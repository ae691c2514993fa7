"""How a store keeps its vectors (in vectors.log beside the database: each row names its
entry): half floats over the largest component for an index that holds no more, float32
for an f32 index, and both read back."""

from __future__ import annotations

import shutil
import sqlite3
import struct
from pathlib import Path

import numpy as np
import pytest

from conftest import StoreFactory, WordHashEmbedder
from memlane import Memory
from memlane._core import blobs
from memlane._memory.encoding import blob, unblob, unblobs
from memlane.errors import CorruptFileError, InvalidArgumentError

DIM = 16


def blob_lengths(store: Path) -> set[int]:
    """The lengths of the blobs the rows' markers name (tag, offset) in vectors.log,
    whose entries start with rowid and length."""
    with sqlite3.connect(store / "memory.db") as conn:
        markers = [m for (m,) in conn.execute("SELECT embedding FROM records")]
    data = (store / "vectors.log").read_bytes()
    return {struct.unpack_from("<I", data, struct.unpack("<BQ", m)[1] + 8)[0] for m in markers}


def unit(seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=DIM).astype(np.float32)
    out: np.ndarray = v / np.linalg.norm(v)
    return out


def test_the_default_store_keeps_half_floats(tmp_path: Path) -> None:
    with Memory(tmp_path / "s", embedder=WordHashEmbedder(DIM)) as mem:
        rec = mem.add("one", embedding=unit(1))
        mem.add_many([{"text": f"t{i}", "embedding": unit(i + 2)} for i in range(3)])
    # A tag byte, a float32 scale, a float16 per component.
    assert blob_lengths(tmp_path / "s") == {2 * DIM + 5}
    with Memory(tmp_path / "s", embedder=WordHashEmbedder(DIM)) as mem:
        got = mem.get(rec.id, include_embedding=True).embedding
    assert got is not None
    np.testing.assert_allclose(got, unit(1), rtol=0, atol=2**-11)


def test_an_f32_index_keeps_float32(tmp_path: Path) -> None:
    with Memory(tmp_path / "s", embedder=WordHashEmbedder(DIM), hnsw_precision="f32") as mem:
        rec = mem.add("one", embedding=unit(1))
        got = mem.get(rec.id, include_embedding=True).embedding
    assert blob_lengths(tmp_path / "s") == {4 * DIM}
    np.testing.assert_array_equal(got, unit(1))


def test_float32_blobs_of_an_older_store_still_read_and_rebuild(tmp_path: Path) -> None:
    store = tmp_path / "s"
    with Memory(store, embedder=WordHashEmbedder(DIM), hnsw_precision="f32") as mem:
        old = mem.add("old", embedding=unit(1))
    with pytest.warns(RuntimeWarning, match="precision"):
        reopened = Memory(store, embedder=WordHashEmbedder(DIM))
    with reopened as mem:
        new = mem.add("new", embedding=unit(2))
    assert blob_lengths(store) == {4 * DIM, 2 * DIM + 5}
    shutil.rmtree(store / "index")
    with pytest.warns(RuntimeWarning), Memory(store, embedder=WordHashEmbedder(DIM)) as mem:
        for rec, seed in ((old, 1), (new, 2)):
            hit = mem.search("", mode="vector", query_embedding=unit(seed), k=1)
            assert hit[0].record.id == rec.id


@pytest.mark.parametrize("scale", [0.0, 1e-30, 1.0, 1e30])
def test_half_floats_keep_any_vector_the_engine_accepts(scale: float) -> None:
    v = unit(3) * np.float32(scale)
    back = unblob(blob(v, half=True))
    assert back is not None
    np.testing.assert_allclose(back, v, rtol=0, atol=float(np.abs(v).max()) * 2**-11)
    assert np.isfinite(back).all()


@pytest.mark.parametrize("damaged", [b"\x02" + bytes(4 + 2 * DIM), bytes(2 * DIM + 6)])
def test_a_damaged_blob_is_a_corrupt_file(damaged: bytes) -> None:
    with pytest.raises(CorruptFileError, match="stored vector"):
        unblob(damaged)


def test_a_unit_vector_decodes_to_its_own_half_float_rounding() -> None:
    # What the index holds for it, so a store rebuilt from its database scores as the
    # one that wrote it.
    for seed in range(20):
        v = unit(seed)
        back = unblob(blob(v, half=True))
        assert back is not None
        normal = np.abs(v) >= 2**-14  # float16's normal range
        np.testing.assert_array_equal(back[normal], v.astype(np.float16).astype(np.float32)[normal])


@pytest.mark.parametrize("scale", [float("nan"), float("inf"), 0.0, -0.5, 3.0])
def test_a_damaged_scale_is_a_corrupt_file(scale: float) -> None:
    good = blob(unit(4), half=True)
    assert good is not None
    damaged = good[:1] + struct.pack("<f", scale) + good[5:]
    with pytest.raises(CorruptFileError, match="scale"):
        unblob(damaged)


def test_blobs_decode_at_once_as_one_by_one() -> None:
    # Half-float and float32 blobs mixed, as a store that changed precision keeps them.
    vs = [unit(s) * np.float32(10.0 ** (s - 3)) for s in range(6)]
    stored = [blob(v, half=s % 2 == 0) for s, v in enumerate(vs)]
    assert all(b is not None for b in stored)
    got = unblobs(stored, DIM)
    want = np.stack([unblob(b) for b in stored])  # type: ignore[misc]
    np.testing.assert_array_equal(got, want)
    assert unblobs([], DIM).shape == (0, DIM)


@pytest.mark.parametrize(
    "damaged",
    [
        pytest.param(b"\x02" + bytes(4 + 2 * DIM), id="tag"),
        pytest.param(b"\x01" + struct.pack("<f", 3.0) + bytes(2 * DIM), id="scale"),
        pytest.param(bytes(2 * DIM + 6), id="length"),
        pytest.param(bytes(4 * DIM + 4), id="another dimension"),
        pytest.param("text", id="not bytes"),
    ],
)
def test_a_damaged_blob_among_many_is_a_corrupt_file(damaged: object) -> None:
    good = blob(unit(5), half=True)
    with pytest.raises(CorruptFileError, match="stored vector"):
        unblobs([good, damaged, good], DIM)


def numpy_blobs(vectors: np.ndarray, half: bool) -> list[bytes]:
    """The blobs stores wrote before the engine wrote them (numpy's float16 casts)."""
    v = np.ascontiguousarray(vectors, dtype="<f4")
    if not half:
        return [row.tobytes() for row in v]
    n, dim = v.shape
    out = np.empty(n, dtype=[("tag", "u1"), ("scale", "<f4"), ("v", "<f2", (dim,))])
    top = np.abs(v).max(axis=1)
    top[top == 0] = 1
    scale = np.exp2(np.ceil(np.log2(top))).astype("<f4")
    out["tag"], out["scale"], out["v"] = 1, scale, v / scale[:, None]
    return [r.tobytes() for r in out]


def test_the_engine_writes_the_bytes_numpy_wrote() -> None:
    # Unit vectors, and vectors of other magnitudes, tops at a power of two among them.
    rng = np.random.default_rng(7)
    vs = rng.normal(size=(400, DIM)).astype(np.float32)
    vs[:100] /= np.linalg.norm(vs[:100], axis=1, keepdims=True)
    vs[100:] *= np.float32(10.0) ** rng.integers(-30, 30, size=(300, 1)).astype(np.float32)
    vs[390:, 0] = np.float32(2.0) ** np.arange(-5, 5, dtype=np.float32)
    vs[390:, 1:] = 0.0
    vs[389] = 0.0
    for half in (True, False):
        new, old = blobs(vs, half), numpy_blobs(vs, half)
        assert new == old
        np.testing.assert_array_equal(unblobs(new, DIM), unblobs(old, DIM))
    assert blobs(vs[0], True) == numpy_blobs(vs[:1], True)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize("half", [True, False])
def test_a_non_finite_vector_is_not_encoded(bad: float, half: bool) -> None:
    v = np.stack([unit(1), unit(2)])
    v[1, 3] = bad
    with pytest.raises(InvalidArgumentError, match="vector 1 has a non-finite value"):
        blobs(v, half)


def test_a_store_keeps_the_bytes_numpy_wrote(make_store: StoreFactory) -> None:
    mem = make_store("s", WordHashEmbedder(DIM))
    vs = np.stack([unit(s) * np.float32(3.0**s) for s in range(5)])
    recs = mem.add_many([{"text": f"t{i}", "embedding": v} for i, v in enumerate(vs)])
    one = mem.add("one more", embedding=unit(9))
    rows = [mem._db.row_by_id(r.id, embedding=True) for r in [*recs, one]]
    assert [r.embedding for r in rows if r is not None] == numpy_blobs(
        np.vstack([vs, unit(9)]), half=True
    )
