"""What a write expects of the records it changes or deletes, checked inside its
transaction: that each is stored, current, and (a record given rather than an id) still
the version the caller read (its ``updated_at``, which every rewrite changes and an
access count's flush does not)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from memlane import coerce
from memlane._memory import duplicates
from memlane._memory.encoding import NewRecord
from memlane._memory.querying import visible
from memlane.errors import ConflictError, InvalidArgumentError
from memlane.records import MemoryRecord
from memlane.schema import Row
from memlane.storage import Store


def current_for_write(
    db: Store, conn: Any, record_id: str, change: str, version: float | None = None
) -> Row:
    """The row ``change`` rewrites, read inside its transaction: another writer may have
    deleted or superseded it since the change first read it, or (``version``: the
    ``updated_at`` of the record the caller read) rewritten it since the caller read it
    (``ConflictError``)."""
    row = db.rows_for_write(conn, [record_id]).get(record_id)
    if row is None:
        raise ConflictError(
            f"memory {record_id!r} was deleted by another writer while this {change} ran; "
            "nothing was stored"
        )
    if row.valid_to is not None:
        raise ConflictError(
            f"memory {record_id!r} was superseded by another writer while this {change} ran "
            f"(valid_to {row.valid_to}); nothing was stored ({change} the version that "
            "replaced it)"
        )
    check_version(row, version, change)
    return row


def check_version(row: Row, version: float | None, change: str) -> None:
    """Refuses (``ConflictError``) to ``change`` a record given as the version read
    (its ``updated_at``, ``version``) once another writer rewrote or superseded it: the
    caller judged a text that is no longer the record's. None (an id given): any
    version. A version given that was history already when read is left to
    ``check_current``."""
    if version is None or row.updated_at == version:
        return
    if row.valid_to is not None:
        raise ConflictError(
            f"memory {row.id!r} was superseded since it was read (valid_to "
            f"{row.valid_to}); nothing was stored ({change} the version that replaced it)"
        )
    raise ConflictError(
        f"memory {row.id!r} was rewritten since it was read (updated_at {row.updated_at}, "
        f"not {version}); nothing was stored ({change} the version read now)"
    )


def check_current(row: Row, change: str = "supersede") -> None:
    """A superseded version is history: it is neither changed nor superseded again."""
    if row.valid_to is not None:
        raise InvalidArgumentError(
            f"{row.id!r} was superseded already (valid_to {row.valid_to}); "
            f"{change} the version that replaced it"
        )


def consume_targets(consume: object) -> dict[str, float | None]:
    """``add_many``'s ``consume``, checked before anything is embedded or stored: each
    record's id, with the version it must still be (a record given: its ``updated_at``,
    which every rewrite changes and an access count's flush does not), or None (an id
    given: any current version)."""
    if isinstance(consume, str | bytes | Mapping) or not isinstance(consume, Iterable):
        raise InvalidArgumentError(
            f"consume takes a list of record ids or records, got {type(consume).__name__}"
        )
    out: dict[str, float | None] = {}
    for k, item in enumerate(consume):
        version: float | None = None
        if isinstance(item, MemoryRecord):
            record_id = coerce.text(item.id, f"consume[{k}].id")
            version = coerce.timestamp(item.updated_at, f"consume[{k}].updated_at")
        else:
            record_id = coerce.text(item, f"consume[{k}]")
        seen = out.setdefault(record_id, version)
        if version is not None and seen != version:
            if seen is not None:
                raise InvalidArgumentError(
                    f"consume names two versions of {record_id!r} (updated_at {seen} and "
                    f"{version}); nothing was stored"
                )
            out[record_id] = version
    return out


def consumed_rows(
    db: Store, conn: Any, consumed: Mapping[str, float | None], now: float
) -> list[int]:
    """The rowids of the records ``add_many`` deletes, read in one go inside its
    transaction: each must be stored, current and (where given) the version given then,
    or the items are not stored (``ConflictError``)."""
    rows = db.rows_for_write(conn, list(consumed), embedding=False)
    for record_id, version in consumed.items():
        row = rows.get(record_id)
        if not visible(row, now):
            raise ConflictError(
                f"memory {record_id!r}, which this add_many consumes, is not stored (another "
                "writer deleted it, or it never was); nothing was stored"
            )
        if row.valid_to is not None:
            raise ConflictError(
                f"memory {record_id!r}, which this add_many consumes, was superseded "
                f"(valid_to {row.valid_to}); nothing was stored"
            )
        if version is not None and row.updated_at != version:
            raise ConflictError(
                f"memory {record_id!r}, which this add_many consumes, was rewritten since it "
                f"was read (updated_at {row.updated_at}, not {version}); nothing was stored"
            )
    return [rows[i].rowid for i in consumed]


def check_not_consumed(
    news: list[NewRecord], decision: duplicates.Decision, consumed: Mapping[str, float | None]
) -> None:
    """Refuses an item found a duplicate of a record the same ``add_many`` deletes: it
    would be left unstored, or stored naming a record gone at once."""
    if not consumed:
        return
    gone = set(consumed)
    named = [(i, t) for i, (_, t) in decision.dups.items()] + list(decision.marks.items())
    for i, target in sorted(named):
        if isinstance(target, str) and target in gone:
            raise InvalidArgumentError(
                f"record {i} ({news[i].text[:40]!r}) is a duplicate of {target!r}, which "
                "consume deletes; nothing was stored (store it without unique=True or "
                "dedup-window keys)"
            )
