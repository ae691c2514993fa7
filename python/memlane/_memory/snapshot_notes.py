"""The notes an embedded store's snapshot keeps beside it (which database it belongs to,
what it indexes), read and written, and whether it is of the database's history.

A note is a few bytes: read without blocking and only from a regular file (a FIFO put
in its place held the open forever), written whole or not at all.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from memlane.storage.sqlite import read_epochs

__all__ = ["GENERATION", "INDEXED", "INDEXES", "other_history", "read_note", "write_note"]

#: Beside a snapshot: the id of the database it belongs to.
GENERATION = "store_id"
#: Beside a snapshot: what it indexes beyond the rows as stored (the unique flag, as
#: metadata: encoding.prepare) and the change it was written at. A snapshot an older
#: memlane wrote lacks the flag of the records it indexed, and the change number ties the
#: note to the snapshot it was written with, which an older memlane may have replaced.
INDEXES = "indexes"
INDEXED = "unique"


def other_history(listed: str | None, seq: int, history: int) -> str | None:
    """Why a snapshot at change ``seq`` of epoch ``history`` (0: none) may be of another
    history than the database's epochs (``meta.epochs``, ``listed``: see
    ``storage.sqlite.EPOCHS``), if it may. It is of this one if its epoch is listed and
    it is no newer than the change the next epoch started after: a copy of the database
    that went on apart started epochs the other never listed."""
    epochs = read_epochs(listed)
    if epochs is None:
        return "the database's list of the epochs of its history is damaged"
    if history == 0:
        # Saved before the database listed an epoch: taken under the checks it was
        # written for while its change is before every epoch.
        if not epochs or seq <= epochs[0][1]:
            return None
        return "it names no epoch of the database's history and is newer than the first"
    for i, (epoch, _) in enumerate(epochs):
        if epoch == history:
            if i + 1 < len(epochs) and seq > epochs[i + 1][1]:
                return "a copy of this database wrote it after the two went on apart"
            return None
    return (
        "it is of another copy of this database, written apart from it (a backup and the "
        "store, each written since), or of an epoch older than the database lists"
    )


#: The most a note beside a snapshot holds (an id, or a word and a change number).
_NOTE_BYTES = 256


def read_note(path: Path) -> str | None:
    """The text of a note beside a snapshot (``GENERATION``, ``INDEXES``), or None where
    there is no such note: missing, not ASCII, or no regular file. Opened without
    blocking and checked regular before it is read: a FIFO put in its place held the
    open forever."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, _NOTE_BYTES).decode("ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    finally:
        os.close(fd)


def write_note(path: Path, text: str) -> None:
    """Writes ``text`` to ``path``: a crash leaves the old file or the new one whole."""
    tmp = path.with_suffix(".tmp")
    # Made anew (a FIFO left under its name would hold the write until a reader came).
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
