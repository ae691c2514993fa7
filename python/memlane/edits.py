"""An edit of a stored record while other writers may change it: the edit is applied to
the version it finds current, and applied again to the version another writer left
when that writer got there first, so no edit overwrites another.

The model's edits of core memory blocks (``memlane.agent.CoreMemory``) go through
here: a block is one record, so the store's refusal to supersede a version no longer
current makes the check of its limit part of the transaction that stores the edit. A
notes file is many records, and its edits are made under its head instead
(``memlane.notes_files.write_entries``), tried up to ``ATTEMPTS`` times as well.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from memlane.errors import ConflictError, InvalidArgumentError, UnknownIdError

if TYPE_CHECKING:
    from memlane.records import MemoryRecord
    from memlane.store import MemoryStore

__all__ = ["ATTEMPTS", "latest", "rewrite"]

#: Tries of an edit whose record other writers keep changing under it.
ATTEMPTS = 32


def latest(mem: MemoryStore, rec: MemoryRecord) -> MemoryRecord | None:
    """The current version of ``rec`` (following its supersessions), None if deleted.

    Read from the database, not the index (which shows another process's writes only
    once it has followed them). A history read while another writer supersedes the
    record may end at a version that writer just closed: it is read again."""
    for _ in range(ATTEMPTS):
        try:
            now = mem.get(rec.id)
        except UnknownIdError:
            return None
        if now.current:
            return now
        versions = mem.history(rec.id)
        last = versions[-1] if versions else None
        if last is None or last.ended == "delete":
            return None
        if last.ended is None:
            try:
                found = mem.get(last.record.id)
            except UnknownIdError:
                continue  # deleted meanwhile: the next read says so
            if found.current:
                return found
    return None


def rewrite(
    mem: MemoryStore,
    rec: MemoryRecord,
    change: Callable[[MemoryRecord], tuple[str, dict[str, Any] | None] | None],
    *,
    keep_date: bool = False,
    by: str | None = None,
    gone: str | None = None,
    find: Callable[[], MemoryRecord | None] | None = None,
) -> MemoryRecord:
    """Supersedes ``rec`` with ``change(rec)`` (its new text and metadata, None: no change),
    and when another writer changed the record first, applies ``change`` again to the
    version that writer left: the store refuses to supersede a version that is no longer
    current, or that was rewritten in place since it was read (``ConflictError``), so no
    edit overwrites another.
    ``keep_date``: the new version keeps the record's ``created_at``; ``find``: reads
    the current version again after a conflict (default: following the history).
    Raises ``UnknownIdError`` (saying ``gone``) if the record was
    deleted meanwhile."""
    for _ in range(ATTEMPTS):
        new = change(rec)
        if new is None:
            return rec
        text, metadata = new
        try:
            at = rec.created_at if keep_date else None
            # The record read, not its id: one rewritten in place since is refused
            # (ConflictError), and the change is made again on what it holds now.
            return mem.supersede(rec, text, at=at, by=by, metadata=metadata)
        except ConflictError:
            pass
        except InvalidArgumentError:
            now = latest(mem, rec)
            if now is not None and now.id == rec.id:
                raise  # the edit itself is refused, not a race
        except UnknownIdError:
            pass
        current = find() if find is not None else latest(mem, rec)
        if current is None:
            raise UnknownIdError(
                gone or f"{rec.id!r} was deleted by another writer during the edit"
            )
        rec = current
    raise ConflictError(
        f"{rec.id!r} was changed by other writers {ATTEMPTS} times during one edit; "
        "nothing of this edit was stored"
    )
