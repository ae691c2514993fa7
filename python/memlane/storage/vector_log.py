"""The vectors of an embedded store, kept once: an append-only file beside the database.

A records row holds a marker (a tag byte and the offset of its entry) where it would
hold its vector's blob; the engine's snapshot holds the graph without the live vectors,
and an open fills them from here in one pass (``Engine.fill_log``). Each vector is then
on disk once, and an open reads it by offset instead of out of a million rows.

Layout (declared once, in ``rust/core/src/vector_log.rs``; encoded and read through
``_core``): a 32-byte header (the format's magic and version, the database's
``store_id``), then entries, each a 16-byte head (rowid, blob length, CRC-32 of rowid,
length and blob) and the blob as ``_core.blobs`` writes it. A write transaction appends
its entries past the end the database records (``meta.vector_log_end``), then their
seal (an entry of rowid 0 holding the chain of the entries before it), syncs the file,
then writes the new end in the same transaction before it commits: an entry the database
names is on disk, and whatever lies past the recorded end (a transaction that rolled
back, or a process killed before its commit) is never read and is overwritten by the
next write. The database also records the last entry, the seal, by offset and checksum,
which an open checks: through the chain, it names every entry before it, so a copy of
the store's file that another copy wrote apart is told apart even where its last entry
is the same, and the newest entry of each record (what the open fills) is the one its
row's marker names. Entries are never rewritten in place: a new vector for a row is a
new entry, and a rollback leaves the row's committed one as it was. A file shorter than
the recorded end, of another store, whose last entry is not the one recorded (another
copy of the store, or an older one), or with an entry whose checksum fails is a damaged
file (``CorruptFileError``), never taken as current. A file written before seals is
told apart by its last entry alone until its first write seals it.

One process writes the file: the store lock keeps a second one out, and the file is
locked too (``flock``, while it is open), so that two writers never append at the
offsets each thinks the end, even where the store lock is not what holds them off (its
lock file removed on a file system that cannot lock a folder).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import TypeGuard

from memlane._core import (
    LOG_ENTRY,
    LOG_HEADER,
    MARKER_BYTES,
    MARKER_TAG,
    log_blobs,
    log_entries,
    log_entry_head,
    log_header,
    log_header_store,
)
from memlane.errors import (
    CorruptFileError,
    MemlaneError,
    NotFoundError,
    StorageError,
    StoreLockedError,
)
from memlane.schema import COLUMNS, Row
from memlane.storage.lock import lock_open_file

__all__ = ["HEADER", "MARKER_BYTES", "MARKER_TAG", "VectorLog", "is_marker"]

#: Bytes before the first entry.
HEADER = LOG_HEADER
_EMBEDDING = COLUMNS.index("embedding")


def is_marker(value: bytes | None) -> TypeGuard[bytes]:
    """Whether a stored ``embedding`` value names an entry of the log."""
    return value is not None and len(value) == MARKER_BYTES and value[0] == MARKER_TAG


class VectorLog:
    """The vector file of one store: appends staged by the one writer inside its
    transaction, reads by marker from any thread (``blobs``: the file mapped, in the core)."""

    def __init__(
        self, path: Path, store_id: str, end: int | None, last: tuple[int, int] | None
    ) -> None:
        """Opens ``path``, written up to ``end``, its last entry at offset ``last[0]``
        with checksum ``last[1]`` (what the database records; ``end`` None: it names no
        entry yet)."""
        self.path = path
        self._store = uuid.UUID(store_id).bytes
        try:
            self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise StorageError(f"cannot open the vector file {path}: {e.strerror}") from None
        try:
            self._lock(path)
            st = os.fstat(self._fd)
            #: The file this store opened (device, inode): reads map the file by its
            #: path, and one moved into its place meanwhile is refused (``_current``).
            self._identity = (st.st_dev, st.st_ino)
            size = st.st_size
            if size < HEADER and (end or HEADER) > HEADER:
                raise self._damaged(f"it is missing or empty where the database has {end} bytes")
            if size < HEADER:
                self._write_header()
            chain = None if size < HEADER else self._check(size, end or HEADER, last)
        except MemlaneError:
            os.close(self._fd)
            raise
        except OSError as e:
            os.close(self._fd)
            raise StorageError(f"cannot read the vector file {path}: {e.strerror}") from None
        except BaseException:
            os.close(self._fd)
            raise
        #: The end the database records, its last entry (offset, checksum), and the
        #: chain of the entries up to it (None: there are none); entries are staged
        #: from ``_staged`` on. Bytes past the end (a write that never committed) are
        #: left to the next write: the file may be the newer one of a database opened
        #: by mistake in an older copy.
        self.end = end or HEADER
        self.last = last
        self._chain = chain
        self._staged = self.end
        self._staged_last = last
        self._staged_chain = chain

    def _lock(self, path: Path) -> None:
        try:
            locked = lock_open_file(self._fd, self)
        except OSError:
            # A file system that cannot lock files: the store lock alone keeps a
            # second process out, as it did before this lock.
            return
        if not locked:
            raise StoreLockedError(
                f"the vector file {path} is open in another process: its store is open "
                "there (one Memory per store)"
            )

    def _check(self, size: int, end: int, last: tuple[int, int] | None) -> int | None:
        """Refuses a file that is not the one the database wrote up to ``end``; the chain
        a write goes on from."""
        store = log_header_store(os.pread(self._fd, HEADER, 0))
        if store is None:
            raise self._damaged("its header is not a memlane vector file's")
        if store != self._store:
            raise self._damaged("it belongs to another store")
        if size < end:
            raise self._damaged(
                f"it holds {size} bytes where the database has written {end}: "
                "an older copy, or cut short"
            )
        if last is None:
            return None
        # Copies of one store share its id: the last entry the database recorded (a
        # seal, which names every entry before it, unless a memlane that predates seals
        # wrote last) tells the copy it wrote from another one, or from an older one
        # that a killed write left longer. Its checksum checked too: the chain it gives
        # is what the next write seals.
        at, crc = last
        head = os.pread(self._fd, LOG_ENTRY, at) if HEADER <= at < end else b""
        entry = log_entry_head(head)
        if entry is None or at + LOG_ENTRY + entry[1] != end or entry[2] != crc:
            raise self._damaged(
                "its last entry is not the one the database recorded: another copy of "
                "the store's file, or an older one"
            )
        whole = log_entry_head(os.pread(self._fd, end - at, at))
        if whole is None or whole[3] is None:
            raise self._damaged(f"the entry at byte {at} does not check")
        return whole[3]

    def _damaged(self, why: str) -> CorruptFileError:
        return CorruptFileError(
            f"the vector file {self.path} is damaged ({why}); restore the store from a backup"
        )

    def _write_header(self) -> None:
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, log_header(self._store), 0)
        os.fsync(self._fd)
        # The file's name must survive a power cut as well as its bytes.
        folder = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)

    @property
    def staged(self) -> bool:
        return self._staged != self.end

    def stage(self, entries: Sequence[tuple[int, bytes]]) -> list[bytes]:
        """Appends ``(rowid, blob)`` entries past the recorded end (unsynced until
        ``sync``); the markers the rows store instead of their blobs."""
        if not entries:
            return []
        data, markers, last, chain = log_entries(
            self._staged,
            self._staged_chain,
            [rowid for rowid, _ in entries],
            [blob for _, blob in entries],
        )
        self._append(data)
        self._staged_last, self._staged_chain = last, chain
        return markers

    def _append(self, data: bytes) -> None:
        """Writes ``data`` at the staged end, and moves it past them."""
        try:
            written = os.pwrite(self._fd, data, self._staged)
        except OSError as e:
            raise StorageError(
                f"cannot write the vector file {self.path}: {e.strerror}; nothing was stored"
            ) from None
        if written != len(data):
            raise StorageError(f"cannot write the vector file {self.path}: a short write")
        self._staged += len(data)

    def _current(self) -> None:
        """Refuses to go on once the path names another file than the one this store
        opened (another store's, or a backup of this one's, moved into its place): reads
        would take its vectors for this store's, and writes would go to a file no later
        open reads. One ``stat``, whatever the store holds."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            raise StorageError(
                f"cannot read the vector file {self.path}: it is gone (removed while this "
                "store was open)"
            ) from None
        except OSError as e:
            raise StorageError(f"cannot read the vector file {self.path}: {e.strerror}") from None
        if (st.st_dev, st.st_ino) != self._identity:
            raise StorageError(
                f"the vector file {self.path} was replaced while this store was open (another "
                "file moved into its place): open the store again"
            )

    def _own_header(self) -> None:
        """Refuses a file whose header names another store: one copied over this one in
        place keeps its inode (a read of 32 bytes)."""
        try:
            head = os.pread(self._fd, HEADER, 0)
        except OSError as e:
            raise StorageError(f"cannot read the vector file {self.path}: {e.strerror}") from None
        if log_header_store(head) != self._store:
            raise self._damaged("its header is no longer this store's: it was overwritten")

    def sync(self) -> tuple[int, tuple[int, int] | None]:
        """Seals the staged entries and makes them durable; the end and the last entry
        (the seal: offset, checksum) the transaction then records."""
        # Checked once per transaction, before its commit: entries written to a file
        # replaced meanwhile would be lost at the next open with the transaction's rows.
        self._current()
        self._own_header()
        seal, _, last, chain = log_entries(self._staged, self._staged_chain, [], [], seal=True)
        self._append(seal)
        self._staged_last, self._staged_chain = last, chain
        try:
            os.fdatasync(self._fd)
        except OSError as e:
            raise StorageError(
                f"cannot sync the vector file {self.path}: {e.strerror}; nothing was stored"
            ) from None
        return self._staged, self._staged_last

    def committed(self) -> None:
        self.end, self.last, self._chain = self._staged, self._staged_last, self._staged_chain

    def rolled_back(self) -> None:
        self._staged, self._staged_last, self._staged_chain = self.end, self.last, self._chain

    def blobs(self, named: Sequence[tuple[int, bytes]]) -> list[bytes]:
        """The blob each ``(rowid, marker)`` of ``named`` names, each entry checked: it is
        that row's, its checksum holds, and it lies within the file's end (a row committed
        a moment ago may name an entry past ``end``: the writer moves ``end`` just after
        its commit, so the staged end counts too). Read together in the core, mapped: a
        replay reads a million."""
        if not named:
            return []
        # The path names this store's file before the map and after it (a file moved
        # into its place in between is caught by the second look), and the file's header
        # still names this store: entries of another store's file, written alike, have
        # the same rowids at the same offsets and check.
        self._current()
        self._own_header()
        try:
            found = log_blobs(
                self.path,
                max(self.end, self._staged),
                [rowid for rowid, _ in named],
                [marker for _, marker in named],
            )
        except NotFoundError:
            raise StorageError(f"cannot read the vector file {self.path}: it is gone") from None
        self._current()
        return found

    def rows_in(self, rows: list[Row]) -> list[Row]:
        """``rows`` with the blob each marker names."""
        named = [i for i, r in enumerate(rows) if is_marker(r.embedding)]
        if not named:
            return rows
        found = self.blobs([(rows[i].rowid, rows[i].embedding) for i in named])  # type: ignore[misc]
        out = list(rows)
        for i, blob in zip(named, found, strict=True):
            r = out[i]
            # Slices joined: a third of ``_replace``'s time, a million times at a replay.
            out[i] = Row._make((*r[:_EMBEDDING], blob, *r[_EMBEDDING + 1 :]))
        return out

    def rows_out(self, rows: Sequence[Row]) -> Sequence[Row]:
        """``rows`` as the database keeps them: each blob staged here (within the write
        transaction) and a marker in its place; a row that holds a marker keeps it."""
        blobs = [
            (i, r.rowid, r.embedding)
            for i, r in enumerate(rows)
            if r.embedding and not is_marker(r.embedding)
        ]
        if not blobs:
            return rows
        markers = self.stage([(rowid, b) for _, rowid, b in blobs])
        out = list(rows)
        for (i, _, _), m in zip(blobs, markers, strict=True):
            out[i] = out[i]._replace(embedding=m)
        return out

    def close_in_child(self) -> None:
        """In a child forked since the file was opened: lets go of the parent's file and
        its lock (see ``storage.lock``); the child's store is refused there."""
        self.close()

    def close(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)
