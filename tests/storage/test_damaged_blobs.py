"""A store whose vector blobs are damaged (a length no vector of its dimension has, a
tag or a scale no blob was written with) does not open: the open raises
CorruptFileError naming every record with a damaged blob: on both backends when the
index is rebuilt from the database, and on PostgreSQL when a snapshot takes its vectors
from it."""

from __future__ import annotations

import shutil
import sqlite3
import struct
from contextlib import nullcontext
from pathlib import Path

import psycopg
import pytest

from conftest import StoreFactory, WordHashEmbedder
from memlane import Memory
from memlane.errors import CorruptFileError

DIM = 16
# More rows than a fill reads at a time (2,000) and a replay (4,096): the damaged
# records sit in the first and the last chunks, so every chunk is read to name them.
N = 4_500
DAMAGED = [f"n{i}" for i in (3, 7, 2_100, 4_200, 4_499)]


def fill_store(mem: Memory) -> None:
    mem.add_many([{"text": f"note {i} of the store", "id": f"n{i}"} for i in range(N)])
    mem.wait_indexed()


def set_blobs(make_store: StoreFactory, name: str, ids: list[str], blob: bytes) -> None:
    """Writes ``blob`` as the vector of ``ids``, as a damaged page would: no change logged."""
    if make_store.server is None:
        with sqlite3.connect(make_store.tmp_path / name / "memory.db") as conn:
            conn.executemany(
                "UPDATE records SET embedding = ? WHERE id = ?", [(blob, i) for i in ids]
            )
        return
    schema = make_store._schemas[name]
    with psycopg.connect(make_store.server.url(), autocommit=True) as conn:  # type: ignore[attr-defined]
        for i in ids:
            conn.execute(f"UPDATE {schema}.records SET embedding = %s WHERE id = %s", (blob, i))


def index_folder(make_store: StoreFactory, name: str) -> Path:
    if make_store.server is None:
        return make_store.tmp_path / name / "index"
    return make_store.tmp_path / "cache" / name


def assert_names_every_damaged_record(error: pytest.ExceptionInfo[CorruptFileError]) -> None:
    message = str(error.value)
    assert f"{len(DAMAGED)} stored vector(s)" in message
    for record_id in DAMAGED:
        assert repr(record_id) in message


@pytest.mark.parametrize("snapshot_vectors", [True, False])
@pytest.mark.parametrize(
    "blob",
    [
        pytest.param(bytes(4), id="4 bytes"),
        pytest.param(b"\x02" + struct.pack("<f", 1.0) + bytes(2 * DIM), id="tag"),
        pytest.param(b"\x01" + struct.pack("<f", 3.0) + bytes(2 * DIM), id="scale"),
    ],
)
def test_a_rebuild_over_damaged_blobs_names_them(
    make_store: StoreFactory, snapshot_vectors: bool, blob: bytes
) -> None:
    with make_store("s", WordHashEmbedder(DIM), snapshot_vectors=snapshot_vectors) as mem:
        fill_store(mem)
    set_blobs(make_store, "s", DAMAGED, blob)
    shutil.rmtree(index_folder(make_store, "s"))
    with (
        # Only a store's own missing snapshot is a loss worth a warning.
        pytest.warns(RuntimeWarning) if make_store.server is None else nullcontext(),
        pytest.raises(CorruptFileError, match="is damaged") as error,
    ):
        make_store("s", WordHashEmbedder(DIM), snapshot_vectors=snapshot_vectors)
    assert_names_every_damaged_record(error)


# An embedded store's snapshot takes its vectors from its vector file, not its rows:
# tests/storage/test_vector_log.py damages that file.
ROWS_HOLD_VECTORS = pytest.mark.parametrize("make_store", ["postgres"], indirect=True)


@ROWS_HOLD_VECTORS
def test_a_snapshot_filled_from_damaged_blobs_names_them(make_store: StoreFactory) -> None:
    with make_store("s", WordHashEmbedder(DIM), snapshot_vectors=False) as mem:
        fill_store(mem)
    set_blobs(make_store, "s", DAMAGED, bytes(4))
    with pytest.raises(CorruptFileError, match="is damaged") as error:
        make_store("s", WordHashEmbedder(DIM), snapshot_vectors=False)
    assert_names_every_damaged_record(error)


@ROWS_HOLD_VECTORS
def test_a_store_whose_blobs_are_whole_again_opens(make_store: StoreFactory) -> None:
    """The error is the blobs', not the store's: the same store opens once they are
    whole, and finds the records by their vectors."""
    emb = WordHashEmbedder(DIM)
    with make_store("s", emb, snapshot_vectors=False) as mem:
        fill_store(mem)
        whole = mem.get(DAMAGED[0], include_embedding=True).embedding
    assert whole is not None
    set_blobs(make_store, "s", DAMAGED[:1], bytes(4))
    with pytest.raises(CorruptFileError, match=repr(DAMAGED[0])):
        make_store("s", emb, snapshot_vectors=False)
    set_blobs(make_store, "s", DAMAGED[:1], whole.astype("<f4").tobytes())
    with make_store("s", emb, snapshot_vectors=False) as mem:
        assert len(mem) == N
        hit = mem.search("", mode="vector", query_embedding=whole, k=1)[0]
        assert hit.record.id == DAMAGED[0]


def test_a_record_whose_blob_grew_past_any_index_is_damaged(make_store: StoreFactory) -> None:
    """A blob longer than any vector an index holds is read as damaged, not as a caller's
    bad argument: the caller gave nothing (``get``, ``update``)."""
    with make_store("long", WordHashEmbedder(DIM)) as mem:
        mem.add("note of the store", id="x")
    set_blobs(make_store, "long", ["x"], bytes(4 * 65_537))
    mem = make_store("long", WordHashEmbedder(DIM))
    with pytest.raises(CorruptFileError, match="damaged"):
        mem.get("x", include_embedding=True)
    with pytest.raises(CorruptFileError, match="damaged"):
        mem.update("x", importance=0.9)
