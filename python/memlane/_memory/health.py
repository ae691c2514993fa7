"""How an open store stands: its index beside the database's change log, its snapshot
and its size on disk (``memlane.Memory.stats``)."""

from __future__ import annotations

import contextlib
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from memlane._memory.sync import IndexSync

__all__ = ["StoreStats", "stats"]


@dataclass(frozen=True, slots=True)
class StoreStats:
    """What ``memlane.Memory.stats`` reports, read when it is called."""

    #: Records in the in-memory index: every version kept, superseded and expired ones
    #: too, until they are deleted.
    indexed: int
    #: The vectors' dimension and the index's precision (None: a store without vectors).
    dimension: int | None
    precision: str | None
    #: Vectors added and not yet linked into the graph: searches scan them one by one
    #: (found as surely, more slowly) until the background links them.
    vectors_pending: int
    #: The newest change the index holds, and the database's newest (beyond the index's:
    #: changes of other processes this one has not followed yet).
    seq: int
    database_seq: int
    #: The change the newest snapshot reflects (0: none yet), when it was written (None:
    #: no snapshot on disk), the changes the index holds beyond it, and how many changes
    #: make the next one due.
    snapshot_seq: int
    snapshot_at: float | None
    changes_since_snapshot: int
    snapshot_due: int
    #: Deletions the change log keeps (collected once a snapshot holds them; on
    #: PostgreSQL kept for a retention period, for processes that follow).
    tombstones: int
    #: The database's file with its write-ahead log (None: PostgreSQL, or a store in
    #: memory), and the index snapshots (None: no index folder).
    database_bytes: int | None
    index_bytes: int | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def stats(sync: IndexSync) -> StoreStats:
    engine, db = sync.engine, sync.db
    snapshot_seq = sync.snap_seq
    snapshot_at = None
    if sync.index_dir is not None:
        # Written into a staging folder and renamed: its files' time is the snapshot's.
        records = sync.index_dir / f"snapshot-{snapshot_seq:020}" / "records.bin"
        with contextlib.suppress(OSError):  # none yet, or replaced meanwhile
            snapshot_at = records.stat().st_mtime
    database: Path | None = getattr(db, "path", None)
    return StoreStats(
        indexed=len(engine),
        dimension=engine.dim,
        precision=engine.precision,
        vectors_pending=engine.pending(),
        seq=sync.seq,
        database_seq=db.seq(),
        snapshot_seq=snapshot_seq,
        snapshot_at=snapshot_at,
        changes_since_snapshot=sync.changes,
        snapshot_due=sync.snapshot_due(),
        tombstones=db.count_tombstones(),
        database_bytes=None if database is None else _size(database.parent, database.name),
        index_bytes=None if sync.index_dir is None else _size(sync.index_dir),
    )


def _size(folder: Path, prefix: str = "") -> int:
    """The bytes of the files under ``folder`` whose name starts with ``prefix`` (at its
    top only, with one)."""
    total = 0
    for root, dirs, files in os.walk(folder):  # a folder gone meanwhile is skipped
        if prefix:
            dirs.clear()
        for name in files:
            if name.startswith(prefix):
                # A snapshot replaced meanwhile, or a name that is no file it can measure
                # (a link that loops, one it may not read): nothing of the store's.
                with contextlib.suppress(OSError):
                    total += os.stat(os.path.join(root, name)).st_size
    return total
