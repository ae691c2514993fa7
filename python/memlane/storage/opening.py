"""Picks the backend a ``memlane.Memory`` argument names, and opens it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from memlane.errors import InvalidArgumentError, StorageError
from memlane.storage.base import Store
from memlane.storage.lock import StoreLock
from memlane.storage.sqlite import SQLiteStore, check_ours

__all__ = ["Opened", "is_postgres_url", "open_store"]


def is_postgres_url(path: object) -> bool:
    return isinstance(path, str) and path.startswith(("postgresql://", "postgres://"))


@dataclass(frozen=True, slots=True)
class Opened:
    """An open database, where its index snapshots go (if anywhere), the lock on that
    folder, and how messages name the store (never with a password)."""

    db: Store
    index_dir: Path | None
    lock: StoreLock | None
    location: str


def _folder(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InvalidArgumentError(f"cannot create the folder {path}: {e}") from e


def open_store(path: str | Path | None, cache_dir: str | Path | None = None) -> Opened:
    """A store directory (SQLite), ``None`` (SQLite in memory), or a ``postgresql://``
    URL; ``cache_dir`` keeps a PostgreSQL store's index snapshots on local disk."""
    if is_postgres_url(path):
        # Imported here: psycopg is needed only by PostgreSQL stores.
        try:
            from memlane.storage.postgres import PostgresStore
        except ImportError as e:
            raise StorageError(
                f"PostgreSQL stores need psycopg ({e}): pip install 'memlane[postgres]'"
            ) from None

        db = PostgresStore(str(path))
        try:
            if cache_dir is None:
                return Opened(db, None, None, db.location)
            # One folder per store (its id, made at creation), so one cache_dir serves
            # several databases or schemas, and per tenant: a tenant's indexes hold only
            # the rows it sees. The lock keeps two processes from writing one snapshot
            # at once.
            folder = Path(cache_dir) / db.snapshot_folder
            _folder(folder)
            return Opened(db, folder / "index", StoreLock(folder), db.location)
        except BaseException:
            db.close()
            raise
    if cache_dir is not None:
        raise InvalidArgumentError(
            "cache_dir is for PostgreSQL stores; a store directory keeps its own snapshots"
        )
    if path is None:
        return Opened(SQLiteStore(None), None, None, "in memory")
    folder = Path(path)
    if (folder / "memory.db").is_file():
        check_ours(folder / "memory.db")  # before the lock file is made beside it
    _folder(folder)
    lock = StoreLock(folder)
    try:
        return Opened(SQLiteStore(folder / "memory.db"), folder / "index", lock, str(folder))
    except BaseException:
        lock.release()
        raise
