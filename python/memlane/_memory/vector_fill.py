"""Vectors an open reads back: a snapshot written without its vectors (an embedded
store's default, ``snapshot_vectors=False`` on PostgreSQL) leaves them out. An embedded
store's come from its vector file in one pass (``Engine.fill_log``); a PostgreSQL store's
from the rows with a vector, a chunk at a time, beside the snapshot's load, where a blob
that does not decode is a damaged database, named record by record."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from memlane._core import Engine, unblobs
from memlane.errors import CorruptFileError, InvalidArgumentError
from memlane.schema import Row
from memlane.storage import Store

__all__ = ["NAMED", "damage_error", "damaged_rows", "decodes", "fill", "filled", "read_ahead"]

# Rows whose vectors an open reads from the database at a time (see fill):
# about 1.5 MB of blobs. The engine fills 100,000 vectors in half the time in chunks
# of 2,000 as of 20,000, whose buffers each cost their page faults anew.
_FILL_CHUNK = 2_000
# Rows an open reads ahead while its snapshot loads: about 220 MB at 384 dimensions.
_READ_AHEAD = 250_000
# Records a damaged database's error names (it counts all).
NAMED = 10


def read_ahead(
    db: Store, dim: int | None, snapshot_vectors: bool, loading: Future[Any]
) -> list[list[tuple[int, bytes]]]:
    """The first chunks of the rows with a vector (``Store.vectors``), read until
    ``loading`` is done, at most ``_READ_AHEAD`` rows: they wait in memory. Nothing
    when snapshots are written with their vectors (an older one without them is
    still filled, after it loads)."""
    chunks: list[list[tuple[int, bytes]]] = []
    after = held = 0
    if snapshot_vectors or db.vector_file is not None:
        return chunks  # the snapshot should hold them, or the vector file does
    while dim and held < _READ_AHEAD and not loading.done():
        if not (rows := db.vectors(after, _FILL_CHUNK)):
            break
        chunks.append(rows)
        after, held = rows[-1][0], held + len(rows)
    return chunks


def fill(
    db: Store,
    dim: int | None,
    location: str,
    engine: Engine,
    ahead: list[list[tuple[int, bytes]]],
    pool: ThreadPoolExecutor,
) -> None:
    """Gives ``engine`` the vectors its snapshot left out (an engine snapshot holds
    those of removed slots only): an embedded store's from its vector file, in one pass;
    a PostgreSQL store's from the chunks read ahead, then reading the rows with a vector
    a chunk at a time. The engine ignores
    the rows it does not await: rows added since the snapshot (the replay adds them),
    and rows whose vector it would refuse (stored before vectors were checked, never in
    the index). Live ids left without a vector make ``open`` rebuild: the engine
    refuses to search while any is (``Engine.awaiting``). A damaged blob is
    ``CorruptFileError`` naming every record that has one."""
    if not dim or not len(engine.awaiting()):
        return  # a snapshot that holds its vectors, or an empty graph
    if (path := db.vector_file) is not None:
        # One pass over the file; ids still awaited after it have no vector there.
        engine.fill_log(path, db.vector_file_end())
        return
    after = ahead[-1][-1][0] if ahead else 0
    filling: tuple[Future[None], list[tuple[int, bytes]]] | None = None
    damaged: list[int] = []
    # The engine decodes and fills a chunk (mostly without the GIL) while the next
    # is read: at most two chunks in memory, besides those read ahead. Past a
    # damaged blob the rest is only checked, to name every damaged one.
    while rows := ahead.pop(0) if ahead else db.vectors(after, _FILL_CHUNK):
        after = max(after, rows[-1][0])
        if filling is not None:
            damaged += filled(*filling, dim)
            filling = None
        if damaged:
            damaged += damaged_rows(rows, dim)
        else:
            filling = (pool.submit(engine.fill, rows), rows)
    if filling is not None:
        damaged += filled(*filling, dim)
    if damaged:
        found = db.rows_by_rowid(damaged[:NAMED])
        raise damage_error(location, len(damaged), [found[r].id for r in damaged[:NAMED]])


def damage_error(location: str, count: int, named: Sequence[str]) -> CorruptFileError:
    """The error of ``count`` damaged vector blobs, the first of whose records are
    ``named``."""
    ids = ", ".join(repr(i) for i in named) + (" ..." if count > len(named) else "")
    return CorruptFileError(
        f"the database of {location} is damaged: {count} stored vector(s) cannot be "
        f"read (records {ids}); restore it from a backup"
    )


@contextlib.contextmanager
def refused_as_damage(location: str) -> Iterator[None]:
    """Stored rows the engine refuses as the damage they are: no write makes them (one
    rowid read twice, through an index of a file copied while it was written)."""
    try:
        yield
    except InvalidArgumentError as e:
        raise CorruptFileError(
            f"the database of {location} is damaged: its rows hold what no write makes ({e}); "
            "restore it from a backup"
        ) from None


def refused_vectors(location: str, rows: Sequence[Row]) -> None:
    """Warns of stored vectors that cannot be made unit length (the rows' records are then
    found by their text alone)."""
    ids = ", ".join(repr(r.id) for r in rows[:3]) + (" ..." if len(rows) > 3 else "")
    warnings.warn(
        f"memlane: {len(rows)} stored vector(s) of {location} cannot be scaled to "
        f"unit length (records {ids}); those records are found by their text only. "
        "update(id, embedding=...) or update(id, text=...) gives them a vector again",
        RuntimeWarning,
        stacklevel=6,
    )


def decodes(blob: bytes | None, dim: int) -> bool:
    """Whether the stored vector ``blob`` (or none) decodes to ``dim`` components."""
    if blob is None:
        return True
    try:
        unblobs([blob], dim)
    except CorruptFileError:
        return False
    return True


def damaged_rows(rows: Sequence[tuple[int, bytes]], dim: int) -> list[int]:
    """The rowids of ``rows`` (``(rowid, blob)``) whose blob is damaged."""
    try:
        unblobs([b for _, b in rows], dim)
    except CorruptFileError:
        return [r for r, b in rows if not decodes(b, dim)]
    return []


def filled(filling: Future[None], rows: Sequence[tuple[int, bytes]], dim: int) -> list[int]:
    """Waits for the engine's fill of ``rows``; the rowids of the damaged blobs it met."""
    try:
        filling.result()
    except CorruptFileError:
        if damaged := damaged_rows(rows, dim):
            return damaged
        raise
    return []
