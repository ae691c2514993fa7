"""Picks the backend a ``memlane.Memory`` argument names, and opens it."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from memlane import coerce
from memlane.errors import InvalidArgumentError, StorageError
from memlane.storage.base import Store
from memlane.storage.interrupts import Hold
from memlane.storage.lock import StoreLock
from memlane.storage.sqlite import SQLiteStore
from memlane.storage.sqlite_owner import check_ours

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
    #: A Ctrl-C held since the lock was taken (``interrupts``): the caller ends it once
    #: the code that frees the lock is in force (raised in between, it lost the lock to
    #: the process for good).
    hold: Hold = field(default_factory=Hold)


def _folder(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InvalidArgumentError(f"cannot create the folder {path}: {e}") from e


def _store_folder(path: object) -> Path:
    """The store directory ``path`` names: a ``str`` or a path of one, without a NUL
    byte (no file system takes one), else ``InvalidArgumentError`` naming it."""
    try:
        text = os.fspath(path)  # type: ignore[call-overload]
    except TypeError:
        text = None
    if not isinstance(text, str):
        raise InvalidArgumentError(
            "path must be a store directory (a str or a pathlib.Path), a postgresql:// URL "
            f"or None, got {type(path).__name__}"
        )
    if "\0" in text:
        raise InvalidArgumentError(f"path must not hold a NUL byte, got {text!r}")
    return coerce.path(text, "path")  # a lone surrogate, which no file name can hold


def _database_file(folder: Path) -> bool:
    """Whether the store directory ``folder`` holds a database file; an error the
    system gives (a name longer than it takes, a folder it does not let us read) is
    ``StorageError`` naming the path, as any later refusal of the open is."""
    try:
        return (folder / "memory.db").is_file()
    except OSError as e:
        raise StorageError(f"cannot open the store {folder}: {e.strerror}") from None


def open_store(
    path: str | Path | None, cache_dir: str | Path | None = None, *, held: bool = False
) -> Opened:
    """A store directory (SQLite), ``None`` (SQLite in memory), or a ``postgresql://``
    URL; ``cache_dir`` keeps a PostgreSQL store's index snapshots on local disk. With
    ``held``, a Ctrl-C from the lock's taking is held until the caller ends
    ``Opened.hold``; else until this returns."""
    opened = _open(path, cache_dir)
    if not held:
        try:
            opened.hold.end()
        except BaseException:
            opened.db.close()
            if opened.lock is not None:
                opened.lock.release()
            raise
    return opened


def _open(path: str | Path | None, cache_dir: str | Path | None) -> Opened:
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
            hold = Hold()
            try:
                return Opened(db, folder / "index", StoreLock(folder), db.location, hold)
            except BaseException:
                hold.end()
                raise
        except BaseException:
            db.close()
            raise
    if cache_dir is not None:
        raise InvalidArgumentError(
            "cache_dir is for PostgreSQL stores; a store directory keeps its own snapshots"
        )
    if path is None:
        return Opened(SQLiteStore(None), None, None, "in memory")
    folder = _store_folder(path)
    if _database_file(folder):
        check_ours(folder / "memory.db")  # before the lock file is made beside it
    _folder(folder)
    hold, lock = Hold(), None
    try:
        lock = StoreLock(folder)
        hold.end()  # from here the lock is freed below (and a long migration interruptible)
        store = SQLiteStore(folder / "memory.db")
        return Opened(store, folder / "index", lock, str(folder), Hold())
    except BaseException:
        if lock is not None:
            lock.release()
        hold.end()
        raise
