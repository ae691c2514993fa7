"""A record on its way in (``NewRecord``, from ``validate``) and the
conversions between the schema's ``Row``, the engine and
the ``MemoryRecord`` a caller sees.

``NewRecord`` is a ``MemoryRecord`` (its fields inherited) with what adding it needs
besides. The conversions are derived at import from the one declaration: a record's
stored field is the ``Row`` column of ``RECORD_COLUMNS`` at its place; in a record,
flags are bools, the metadata a dict and the vector an array."""

from __future__ import annotations

import builtins
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from memlane import coerce
from memlane import content_hash as hashing
from memlane._core import Engine, PreparedBatch, blobs, unblobs
from memlane.coerce import FloatArray
from memlane.errors import CorruptFileError, InvalidArgumentError, shown
from memlane.records import SCOPE_FIELDS, STORED, MemoryRecord
from memlane.schema import COLUMNS, FLAGS, PUBLIC_NAMES, RECORD_COLUMNS, Row

# What the store sets; an import may carry them, an add() may not.
_STORE_SET = {
    "updated_at",
    "last_accessed_at",
    "access_count",
    "content_hash",
    "valid_to",
    "recorded_at",
}
#: What an import may carry: a record's stored fields and ``ttl``.
IMPORT_KEYS = frozenset(STORED) | {"ttl"}
#: What add() and add_many() items may hold.
ADD_KEYS = IMPORT_KEYS - _STORE_SET


def _derive(name: str, args: str, body: str) -> Callable[..., Any]:
    """A function made from the schema once, at import (as ``dataclasses`` makes
    ``__init__``), so that a conversion costs one call, not a loop over the fields."""
    scope: dict[str, Any] = {"Row": Row, "MemoryRecord": MemoryRecord}
    exec(f"def {name}({args}):\n    return {body}\n", scope)
    fn: Callable[..., Any] = scope[name]
    return fn


def _to_row(column: str) -> str:
    if column not in RECORD_COLUMNS:  # the store's: the new row's key and its change
        return {"rowid": "rowid", "seq": "seq", "content_seq": "seq"}[column]
    name = PUBLIC_NAMES.get(column, column)
    if column in FLAGS:
        return f"int(n.{name})"
    return {"metadata": "n.metadata_json", "embedding": "blob"}.get(column, f"n.{name}")


def _from_row(column: str) -> str:
    at = COLUMNS.index(column)
    if column in FLAGS:
        return f"bool(r[{at}])"
    return {"metadata": "metadata", "embedding": "embedding"}.get(column, f"r[{at}]")


# NewRecord -> Row, NewRecord -> MemoryRecord (the vector is not handed back), Row ->
# MemoryRecord: positional calls, in each target's own order.
_new_row = _derive("row", "n, rowid, seq, blob", f"Row({', '.join(map(_to_row, COLUMNS))})")
_new_record = _derive(
    "record",
    "n",
    f"MemoryRecord({', '.join('None' if f == 'embedding' else f'n.{f}' for f in STORED)})",
)
_row_record = _derive(
    "record",
    "r, metadata, embedding",
    f"MemoryRecord({', '.join(map(_from_row, RECORD_COLUMNS))})",
)


@dataclass(slots=True)
class NewRecord(MemoryRecord):
    """One record to add, validated: a ``MemoryRecord``'s fields, the metadata's JSON
    text and how to add it."""

    metadata_json: str = "{}"
    # Check for duplicates before storing (add(unique=True)); imports never do.
    dedup: bool = False
    id_given: bool = True

    @property
    def scope_key(self) -> tuple[str | None, ...]:
        """The table and the scope fields (in ``SCOPE_FIELDS`` order): where a
        duplicate is looked for."""
        return (
            self.table,
            self.agent_id,
            self.user_id,
            self.room_id,
            self.world_id,
            self.session_id,
            self.namespace,
        )

    def row(self, rowid: int, seq: int, blob: bytes | None) -> Row:
        row: Row = _new_row(self, rowid, seq, blob)
        return row

    def record(self) -> MemoryRecord:
        """The ``MemoryRecord`` a caller is given (without the vector)."""
        rec: MemoryRecord = _new_record(self)
        return rec


class _Checked(set[str]):
    """Short strings that passed ``coerce.text`` (tables, types, scope values repeat
    from record to record), so a bulk add checks each once; bounded by clearing."""

    def add(self, value: str) -> None:
        if len(self) >= 4096:
            self.clear()
        super().add(value)


checked = _Checked()


def given_id(value: object, importing: bool) -> str:
    """A record's id as given: a new one is bounded (``coerce.record_id``); one a store
    held already (an import, a rewrite) is taken as it was, since earlier versions did
    not bound ids, and a tenant's ids are stored behind its prefix."""
    return coerce.text(value, "id") if importing else coerce.record_id(value, "id")


def validate(
    item: Mapping[str, Any],
    now: float,
    default_scope: Mapping[str, str],
    dim: int | None,
    importing: bool = False,
) -> NewRecord:
    """Checks one add_many() item (or an imported record) completely; see ``new_record``."""
    if not isinstance(item, Mapping):
        raise InvalidArgumentError(f"a record must be a dict, got {type(item).__name__}")
    allowed = IMPORT_KEYS if importing else ADD_KEYS
    if not allowed.issuperset(item):
        raise InvalidArgumentError(f"unknown key(s) {sorted(set(item) - allowed)}")
    return new_record(now, default_scope, dim, importing, **item)


def new_record(
    now: float,
    default_scope: Mapping[str, str],
    dim: int | None,
    importing: bool = False,
    *,
    text: Any = None,
    table: Any = "memories",
    type: Any = "semantic",
    agent_id: Any = None,
    user_id: Any = None,
    room_id: Any = None,
    world_id: Any = None,
    session_id: Any = None,
    namespace: Any = None,
    speaker: Any = None,
    importance: Any = 0.5,
    evergreen: Any = False,
    unique: Any = False,
    metadata: Any = None,
    created_at: Any = None,
    updated_at: Any = None,
    last_accessed_at: Any = None,
    access_count: Any = 0,
    valid_to: Any = None,
    expires_at: Any = None,
    recorded_at: Any = None,
    content_hash: Any = None,  # the store computes it; an import may carry it
    embedding: Any = None,
    id: Any = None,
    ttl: Any = None,
) -> NewRecord:
    """Checks one record's fields (``add``'s keyword arguments, or ``ADD_KEYS``;
    with ``importing``, ``IMPORT_KEYS``) completely; vector values are checked per
    batch by the caller."""
    # Runs once per record of a bulk add: the common cases take fast paths
    # (exact types), anything else goes through the general checks.
    if builtins.type(text) is not str or not text.strip():
        if text is None:
            raise InvalidArgumentError("a record needs a 'text'")
        if not isinstance(text, str):
            raise InvalidArgumentError(f"text must be a str, got {builtins.type(text).__name__}")
        raise InvalidArgumentError("text is empty or whitespace-only")
    coerce.clean(text, "text")
    scope: list[str | None] = []
    given = (agent_id, user_id, room_id, world_id, session_id, namespace)
    for f, v in zip(SCOPE_FIELDS, given, strict=True):
        if v is None:
            scope.append(default_scope.get(f))
        elif builtins.type(v) is str and v in checked:
            scope.append(v)
        else:
            v = coerce.text(v, f)
            scope.append(v)
            checked.add(v)
    agent, user, room, world, session, namespace = scope
    if speaker is not None and (builtins.type(speaker) is not str or speaker not in checked):
        speaker = coerce.text(speaker, "speaker")
        checked.add(speaker)
    if metadata is None or (builtins.type(metadata) is dict and not metadata):
        metadata, metadata_json = {}, "{}"
    else:  # checked: 0, "" or an array is no dict
        metadata, metadata_json = coerce.metadata(metadata)
    created = now if created_at is None else coerce.timestamp(created_at, "created_at")
    updated = now if updated_at is None else coerce.timestamp(updated_at, "updated_at")
    last = (
        created
        if last_accessed_at is None
        else coerce.timestamp(last_accessed_at, "last_accessed_at")
    )
    if builtins.type(access_count) is not int or not 0 <= access_count <= coerce.MAX_COUNT:
        # The 64-bit column's range: a larger count passed this check, then failed while
        # its batch was written, after earlier batches of an import were committed.
        access_count = coerce.count(access_count, "access_count")
    if valid_to is not None:
        valid_to = coerce.timestamp(valid_to, "valid_to")
        if valid_to < created:
            raise InvalidArgumentError(
                "valid_to is before created_at (when the record became true)"
            )
    expires_at = expiry(expires_at, ttl, now, importing)
    recorded = recorded_at if importing else None
    recorded = now if recorded is None else coerce.timestamp(recorded, "recorded_at")
    if builtins.type(importance) is not float or not 0.0 <= importance <= 1.0:
        importance = coerce.number(importance, "importance", 0.0, 1.0)
    if builtins.type(table) is not str or table not in checked:
        table = coerce.text(table, "table")
        checked.add(table)
    kind = type
    if builtins.type(kind) is not str or kind not in checked:
        kind = coerce.text(kind, "type")
        checked.add(kind)
    emb = embedding
    if emb is not None:
        ok = builtins.type(emb) is np.ndarray and emb.dtype == np.float32 and emb.shape == (dim,)
        emb = emb if ok else coerce.vector(emb, "embedding", dim, False)
    record_id = id
    if unique is not False and unique is not True:
        unique = coerce.flag(unique, "unique")
    if evergreen is not False and evergreen is not True:
        evergreen = coerce.flag(evergreen, "evergreen")
    return NewRecord(
        id=coerce.new_id() if record_id is None else given_id(record_id, importing),
        text=text,
        table=table,
        type=kind,
        agent_id=agent,
        user_id=user,
        room_id=room,
        world_id=world,
        session_id=session,
        namespace=namespace,
        speaker=speaker,
        importance=importance,
        evergreen=evergreen,
        metadata=metadata,
        metadata_json=metadata_json,
        embedding=emb,
        created_at=created,
        updated_at=updated,
        last_accessed_at=last,
        access_count=access_count,
        unique=unique and importing,
        content_hash=hashing.content_hash(text),
        dedup=unique and not importing,
        id_given=record_id is not None,
        valid_to=valid_to,
        expires_at=expires_at,
        recorded_at=recorded,
    )


def expiry(expires_at: Any, ttl: Any, now: float, importing: bool = False) -> float | None:
    """When a record expires: ``expires_at``, or ``ttl`` seconds from now (not both). A
    record added already expired is refused; an import keeps what it was given."""
    if ttl is not None:
        if expires_at is not None:
            raise InvalidArgumentError("give expires_at or ttl, not both")
        seconds = coerce.number(ttl, "ttl")
        if seconds <= 0:
            raise InvalidArgumentError(f"ttl must be a number of seconds > 0, got {shown(ttl)}")
        return coerce.timestamp(now + seconds, "ttl")
    if expires_at is None:
        return None
    at = coerce.timestamp(expires_at, "expires_at")
    if not importing and at <= now:
        raise InvalidArgumentError(f"expires_at ({at}) is not in the future")
    return at


def _metadata(row: Row) -> dict[str, Any]:
    """The row's metadata; a damaged file can hold text that is not a JSON object."""
    if row.metadata == "{}":
        return {}
    try:
        value = json.loads(row.metadata)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise CorruptFileError(
            f"record {row.id!r}: its stored metadata is not a JSON object: "
            "the database file is damaged"
        )
    return value


def record(row: Row, pending: tuple[int, float] | None, embedding: bool = False) -> MemoryRecord:
    """The record of a stored row, with the accesses not yet flushed (``pending``)."""
    rec: MemoryRecord = _row_record(
        row, _metadata(row), unblob(row.embedding) if embedding else None
    )
    if pending is not None:
        # Saturated, as the flush stores it (``SQLStore.record_accesses``).
        rec.access_count = min(rec.access_count + pending[0], coerce.MAX_COUNT)
        rec.last_accessed_at = max(rec.last_accessed_at, pending[1])
    return rec


def prepare(
    engine: Engine,
    rows: Sequence[Row],
    *,
    texts: bool,
    vectors: FloatArray | None,
    pending: Mapping[int, tuple[int, float]],
) -> PreparedBatch:
    """The engine's check and analysis of ``rows`` (without changing it), which it
    reads as they are but for two things: ``pending`` holds accesses (count, last
    time) not yet flushed to the rows, which a record read from them shows too
    (``record``), and a unique row's metadata gains ``UNIQUE_KEY`` (the engine's
    filters read metadata, and it has no column for the flag)."""
    if pending:
        rows = [
            r
            if (p := pending.get(r.rowid)) is None
            else r._replace(
                access_count=min(r.access_count + p[0], coerce.MAX_COUNT),
                last_accessed_at=max(r.last_accessed_at, p[1]),
            )
            for r in rows
        ]
    if any(r.uniq for r in rows):
        rows = [r._replace(metadata=unique_metadata(r.metadata)) if r.uniq else r for r in rows]
    return engine.prepare(rows, texts, vectors)


def unique_metadata(text: str) -> str:
    """A stored metadata object's JSON text with ``UNIQUE_KEY`` first."""
    inner = text.strip()[1:-1].strip()
    return f'{{"{coerce.UNIQUE_KEY}":true{"," + inner if inner else ""}}}'


# A vector kept for an index that holds it in half floats at most (every precision but
# f32) is stored that way too, at half the bytes, which are most of a row: scaled half
# floats, 2 * dim + 5 bytes. A store keeps the float32 blobs written before, or by an f32
# index, and reads both. The format is the engine's (``rust/core/src/blob.rs``), which
# writes (``blobs``) and reads (``unblobs``) it, with the checks that name a damaged one.
_HALF_HEADER = 5


def blob(v: FloatArray | None, half: bool) -> bytes | None:
    """A vector as stored (see ``blobs``)."""
    return None if v is None else blobs(v, half)[0]


#: The largest dimension an index takes (the engine refuses more).
MAX_DIM = 65_536


def unblob(b: bytes | None) -> FloatArray | None:
    """A stored vector (see ``blobs``) decoded, its dimension read from its length."""
    if b is None:
        return None
    dim = len(b) // 4 if len(b) % 4 == 0 else (len(b) - _HALF_HEADER) // 2
    if dim > MAX_DIM:  # no index holds it: a damaged row, not a caller's argument
        raise CorruptFileError(f"a stored vector of {len(b)} bytes is damaged (too long)")
    v: FloatArray = unblobs([b], max(dim, 1))[0]
    return v


def as_indexed(b: bytes | None) -> FloatArray | None:
    """The vector the engine indexes for the stored blob ``b``, as one row: the vector as
    the database keeps it (decoded again, not the one given), so that an open reading it
    back (a snapshot's fill, a rebuild) stores the very same values."""
    v = unblob(b)
    return None if v is None else v[None, :]
