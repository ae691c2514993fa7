"""A snapshot without the live vectors (``snapshot_vectors=False``, an embedded store's
default) holds the graph's links and the vectors of removed slots only; opening fills the
live ones before it replays the changes since the snapshot: an embedded store's from its
vector file (tests/storage/test_vector_log.py tests that file), a PostgreSQL store's
from the database's rows, read ahead while the snapshot loads and filled a chunk at a
time. PostgreSQL's snapshots keep the vectors by default."""

from __future__ import annotations

import shutil
import struct
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest

from conftest import WordHashEmbedder
from conftest import unit_rows as shared_unit_rows
from memlane import CorruptFileError, Memory
from memlane._core import Engine
from memlane._memory import sync, vector_fill
from memlane.records import SearchHit
from memlane.storage.postgres import PostgresStore
from pg_server import PgServer

DIM = 64
N = 300


def unit_rows(n: int, seed: int) -> np.ndarray:
    return shared_unit_rows(n, DIM, seed)


@contextmanager
def no_warnings() -> Iterator[None]:
    """Fails on any warning: a snapshot that could not be used warns and rebuilds."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


def store(path: Path, precision: str | None = None, **kwargs: object) -> Memory:
    """A store whose snapshots leave the live vectors out (``snapshot_vectors=False``)."""
    args = {} if precision is None else {"hnsw_precision": precision}
    kwargs.setdefault("snapshot_vectors", False)
    return Memory(path, WordHashEmbedder(DIM), **args, **kwargs)  # type: ignore[arg-type]


def add_notes(mem: Memory, vectors: np.ndarray) -> list[str]:
    """Stores a note per row of ``vectors`` and waits until they are linked: their ids."""
    added = mem.add_many([{"text": f"note {i}", "embedding": v} for i, v in enumerate(vectors)])
    mem.wait_indexed()
    return [r.id for r in added]


def hits(mem: Memory, queries: np.ndarray, k: int = 10) -> list[list[tuple[str, float]]]:
    def pairs(found: list[SearchHit]) -> list[tuple[str, float]]:
        return [(h.record.id, h.score) for h in found]

    return [
        pairs(mem.search("", mode="vector", query_embedding=q, k=k, track_access=False))
        for q in queries
    ]


def close_without_snapshot(mem: Memory) -> None:
    """Closes ``mem`` as a killed process leaves it: no snapshot of its last changes."""
    mem._sync.closing = True
    mem._finalizer()


def hnsw_bin(path: Path) -> Path:
    (snap,) = (path / "index").glob("snapshot-*")
    return snap / "hnsw.bin"


@pytest.mark.parametrize("precision", [None, "f32"])
def test_a_reopened_store_finds_the_same_hits_with_the_same_scores(
    tmp_path: Path, precision: str | None
) -> None:
    path = tmp_path / "s"
    vectors = unit_rows(N, 1)
    queries = unit_rows(20, 2)
    with store(path, precision) as mem:
        mem.add_many([{"text": f"note {i}", "embedding": v} for i, v in enumerate(vectors)])
        mem.wait_indexed()
        before = hits(mem, queries)
    with no_warnings(), store(path, precision) as mem:
        assert mem._sync.snap_seq > 0 and len(mem._sync.engine.awaiting()) == 0
        assert hits(mem, queries) == before


class _SlowLoad:
    """``Engine`` whose ``load`` ends once the open has read ``rows`` rows ahead (or all
    there are), however long that takes."""

    def __init__(self, rows: int) -> None:
        self.rows, self.read = rows, 0
        self.done = threading.Event()
        if rows == 0:
            self.done.set()

    def __call__(self, *args: object, **kwargs: object) -> Engine:
        return Engine(*args, **kwargs)

    def vectors(self, rows: list[tuple[int, bytes]]) -> None:
        """Counts the rows an open read."""
        self.read += len(rows)
        if not rows or self.read >= self.rows:
            self.done.set()

    def load(self, root: Path) -> tuple[Engine, int, int]:
        assert self.done.wait(60), "the open did not read ahead"
        return Engine.load(root)


@pytest.mark.parametrize("ahead", [0, 7, 20, N])
def test_vectors_read_in_many_chunks_fill_the_same_index(
    pg_server: PgServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ahead: int
) -> None:
    u, cache = pg_server.url(schema=f"chunks_{ahead}"), tmp_path / "cache"
    queries = unit_rows(10, 13)
    with store_at(u, cache) as mem:
        mem.add_many(
            [{"text": f"note {i}", "embedding": v} for i, v in enumerate(unit_rows(N, 12))]
        )
        mem.wait_indexed()
        before = hits(mem, queries)
    # Chunks of 7 rows: one filled while the next is read, the last one short; up to
    # `ahead` rows (whole chunks) read while the snapshot loads, the rest after.
    monkeypatch.setattr(vector_fill, "_FILL_CHUNK", 7)
    monkeypatch.setattr(vector_fill, "_READ_AHEAD", ahead)
    slow = _SlowLoad(min(-(-ahead // 7) * 7, N))
    monkeypatch.setattr(sync, "Engine", slow)
    read = PostgresStore.vectors

    def vectors(self: PostgresStore, after: int, limit: int) -> list[tuple[int, bytes]]:
        rows = read(self, after, limit)
        slow.vectors(rows)
        return rows

    monkeypatch.setattr(PostgresStore, "vectors", vectors)
    read_ahead: list[int] = []
    real = vector_fill.read_ahead

    def counted(*args: Any) -> list[list[tuple[int, bytes]]]:
        chunks = real(*args)
        read_ahead.append(sum(map(len, chunks)))
        return chunks

    monkeypatch.setattr(sync, "read_ahead", counted)
    with no_warnings(), store_at(u, cache) as mem:
        assert mem._sync.snap_seq > 0
        assert hits(mem, queries) == before
    assert read_ahead == [min(-(-ahead // 7) * 7, N)]


def test_the_snapshot_holds_the_links_not_the_live_vectors(tmp_path: Path) -> None:
    path = tmp_path / "s"
    dim = 384
    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((N, dim)).astype(np.float32)
    with Memory(path, WordHashEmbedder(dim), snapshot_vectors=False) as mem:
        mem.add_many([{"text": f"note {i}", "embedding": v} for i, v in enumerate(vectors)])
        mem.wait_indexed()
    # The f16 copies alone would take 768 bytes a vector; the links of a node, at most
    # 32 of 4 bytes on level 0 (a few more on the levels above), are what is left.
    size = hnsw_bin(path).stat().st_size
    assert size < N * 200, size
    with no_warnings(), Memory(path, WordHashEmbedder(dim), snapshot_vectors=False) as mem:
        found = mem.search("", mode="vector", query_embedding=vectors[7], k=1)
        assert found[0].record.text == "note 7"


def test_by_default_a_postgres_snapshot_keeps_the_vectors_and_opens_without_reading_them(
    pg_server: PgServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    u, cache = pg_server.url(schema="default_keeps"), tmp_path / "cache"
    vectors = unit_rows(N, 4)
    queries = unit_rows(10, 5)
    with store_at(u, cache) as mem:  # a snapshot without them
        mem.add_many([{"text": f"note {i}", "embedding": v} for i, v in enumerate(vectors)])
        mem.wait_indexed()
        before = hits(mem, queries)
    (folder,) = (p for p in cache.iterdir() if p.is_dir())
    without = hnsw_bin(folder).stat().st_size
    # Opened with the default, it is filled from the database; its next snapshot (at
    # close, after a change) holds the vectors, and the open after reads none.
    with no_warnings(), Memory(u, WordHashEmbedder(DIM), cache_dir=cache) as mem:
        assert hits(mem, queries) == before
        mem.add("one more", embedding=unit_rows(1, 6)[0])
    assert hnsw_bin(folder).stat().st_size > without + N * DIM * 2
    read: list[int] = []
    monkeypatch.setattr(
        "memlane.storage.sql.SQLStore.vectors",
        lambda self, after, limit: read.append(after) or [],
    )
    with no_warnings(), Memory(u, WordHashEmbedder(DIM), cache_dir=cache) as mem:
        assert len(mem._sync.engine.awaiting()) == 0
        assert hits(mem, queries)[0][0][0] == before[0][0][0]
    assert read == []


@pytest.mark.parametrize("precision", [None, "f32"])
def test_changes_after_the_last_snapshot_reopen_right(
    tmp_path: Path, precision: str | None
) -> None:
    path = tmp_path / "s"
    vectors = unit_rows(N, 4)
    with store(path, precision) as mem:
        ids = add_notes(mem, vectors)
    gone, changed = ids[:20], ids[20:40]
    moved = unit_rows(len(changed), 5)
    added = unit_rows(10, 6)
    mem = store(path, precision, snapshot_every=10**6)
    snap_seq = mem._sync.snap_seq
    for record_id in gone:
        mem.delete(record_id)
    for record_id, v in zip(changed, moved, strict=True):
        mem.update(record_id, embedding=v)
    new_ids = [
        r.id
        for r in mem.add_many([{"text": f"new {i}", "embedding": v} for i, v in enumerate(added)])
    ]
    mem.wait_indexed()
    close_without_snapshot(mem)
    with no_warnings(), store(path, precision) as mem:
        assert mem._sync.snap_seq == snap_seq  # the old snapshot, with the replay on top
        assert len(mem) == N - len(gone) + len(added)
        everything = {
            h.record.id for h in mem.search("", mode="vector", query_embedding=vectors[0], k=N + 20)
        }
        assert everything.isdisjoint(gone)
        for record_id, v in [*zip(changed, moved, strict=True), *zip(new_ids, added, strict=True)]:
            top = mem.search("", mode="vector", query_embedding=v, k=1)[0]
            assert top.record.id == record_id
        for record_id, v in zip(ids[40:60], vectors[40:60], strict=True):
            assert mem.search("", mode="vector", query_embedding=v, k=1)[0].record.id == record_id
        # Later adds reuse the deleted records' slots.
        later = unit_rows(30, 7)
        later_ids = [
            r.id
            for r in mem.add_many(
                [{"text": f"later {i}", "embedding": v} for i, v in enumerate(later)]
            )
        ]
        mem.wait_indexed()
        for record_id, v in zip(later_ids, later, strict=True):
            assert mem.search("", mode="vector", query_embedding=v, k=1)[0].record.id == record_id
        queries = unit_rows(10, 8)
        reopened = hits(mem, queries)
    # The same answers as an index rebuilt from the database.
    shutil.rmtree(path / "index")
    with pytest.warns(RuntimeWarning, match="missing"), store(path, precision) as mem:
        assert [[i for i, _ in q] for q in hits(mem, queries)] == [
            [i for i, _ in q] for q in reopened
        ]


def damage(url: str, schema: str, how: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            f"SELECT rowid, embedding FROM {schema}.records ORDER BY rowid LIMIT 1 OFFSET 5"
        ).fetchone()
        assert row is not None
        rowid, blob = row
        head = b"\x02" + blob[1:5] if how == "tag" else blob[:1] + struct.pack("<f", 3.0)
        blob = head + blob[5:]
        conn.execute(f"UPDATE {schema}.records SET embedding = %s WHERE rowid = %s", (blob, rowid))


@pytest.mark.parametrize("how", ["tag", "scale"])
def test_a_damaged_vector_met_at_open_is_a_corrupt_file(
    pg_server: PgServer, tmp_path: Path, how: str
) -> None:
    u, cache = pg_server.url(schema=f"damaged_{how}"), tmp_path / "cache"
    with store_at(u, cache) as mem:
        mem.add_many(
            [{"text": f"note {i}", "embedding": v} for i, v in enumerate(unit_rows(50, 9))]
        )
        mem.wait_indexed()
    damage(pg_server.url(), f"damaged_{how}", how)
    with pytest.raises(CorruptFileError, match="stored vector"):
        store_at(u, cache)


def test_a_live_record_without_its_vector_in_the_database_rebuilds(
    pg_server: PgServer, tmp_path: Path
) -> None:
    u, cache = pg_server.url(schema="vector_gone"), tmp_path / "cache"
    with store_at(u, cache) as mem:
        recs = mem.add_many([{"text": f"note {i}"} for i in range(50)])
        mem.wait_indexed()
    # A vector gone from under the snapshot, no change logged: the snapshot cannot
    # be completed, so it is not used.
    with psycopg.connect(pg_server.url(), autocommit=True) as conn:
        conn.execute("UPDATE vector_gone.records SET embedding = NULL WHERE id = %s", (recs[3].id,))
    with pytest.warns(RuntimeWarning, match="holds no vector for 1"), store_at(u, cache) as mem:
        assert mem._sync.snap_seq == 0 and len(mem) == 50
        assert mem.search("note 4", k=1)[0].record.text == "note 4"


def test_a_postgres_cache_dir_snapshot_takes_its_vectors_from_the_database(
    pg_server: PgServer, tmp_path: Path
) -> None:
    u = pg_server.url(schema="snapshot_vectors")
    cache = tmp_path / "cache"
    vectors = unit_rows(N, 10)
    with store_at(u, cache) as mem:
        ids = add_notes(mem, vectors)
    (folder,) = (p for p in cache.iterdir() if p.is_dir())
    # Another process changes the store while this one is away.
    moved = unit_rows(1, 11)[0]
    with Memory(u, WordHashEmbedder(DIM), snapshot_vectors=False) as other:
        other.delete(ids[0])
        other.update(ids[1], embedding=moved)
        added = other.add("added elsewhere", embedding=unit_rows(1, 12)[0])
    assert hnsw_bin(folder).stat().st_size < N * 2 * DIM
    with no_warnings(), store_at(u, cache) as mem:
        assert mem._sync.snap_seq > 0 and len(mem) == N
        found = {h.record.id for h in hits_of(mem, vectors[0], N + 5)}
        assert ids[0] not in found and added.id in found
        assert hits_of(mem, moved, 1)[0].record.id == ids[1]
        assert hits_of(mem, vectors[2], 1)[0].record.id == ids[2]


def store_at(url: str, cache: Path) -> Memory:
    return Memory(url, WordHashEmbedder(DIM), cache_dir=cache, snapshot_vectors=False)


def hits_of(mem: Memory, v: np.ndarray, k: int) -> list[SearchHit]:
    return mem.search("", mode="vector", query_embedding=v, k=k, track_access=False)
