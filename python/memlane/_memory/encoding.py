"""A record on its way in (:class:`NewRecord`, from :func:`validate`) and the
conversions between the schema's :class:`~memlane.schema.Row`, the engine's
columns and the :class:`~memlane.records.MemoryRecord` a caller sees."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from memlane import coerce
from memlane._core import Engine, PreparedBatch
from memlane.coerce import FloatArray
from memlane.dedup import content_hash
from memlane.errors import CorruptFileError, InvalidArgumentError
from memlane.records import SCOPE_FIELDS, MemoryRecord
from memlane.schema import ENGINE_COLUMNS, Row

#: What add() and add_many() items may hold.
ADD_KEYS = frozenset(
    {
        "text",
        "table",
        "type",
        *SCOPE_FIELDS,
        "importance",
        "evergreen",
        "metadata",
        "embedding",
        "id",
        "created_at",
        "unique",
        "expires_at",
        "ttl",
    }
)
# What an import may carry besides the add() keys.
IMPORT_KEYS = ADD_KEYS | {
    "updated_at",
    "last_accessed_at",
    "access_count",
    "content_hash",
    "valid_to",
    "recorded_at",
}


@dataclass(slots=True)
class NewRecord:
    """One record to add, validated."""

    id: str
    text: str
    table: str
    type: str
    scope: tuple[str | None, ...]
    importance: float
    evergreen: bool
    metadata: dict[str, Any]
    metadata_json: str
    embedding: FloatArray | None
    created_at: float
    updated_at: float
    last_accessed_at: float
    access_count: int
    unique: bool
    content_hash: str
    # Check for duplicates before storing (add(unique=True)); imports never do.
    dedup: bool = False
    id_given: bool = True
    valid_to: float | None = None
    expires_at: float | None = None
    recorded_at: float = 0.0

    def row(self, rowid: int, seq: int, blob: bytes | None) -> Row:
        agent, user, room, world, session, namespace = self.scope
        return Row(
            rowid,
            self.id,
            self.text,
            self.table,
            self.type,
            agent,
            user,
            room,
            world,
            session,
            namespace,
            self.importance,
            int(self.evergreen),
            int(self.unique),
            self.metadata_json,
            self.created_at,
            self.updated_at,
            self.last_accessed_at,
            self.access_count,
            self.valid_to,
            self.expires_at,
            self.recorded_at,
            self.content_hash,
            blob,
            seq,
            seq,
        )

    def record(self) -> MemoryRecord:
        agent, user, room, world, session, namespace = self.scope
        return MemoryRecord(
            id=self.id,
            text=self.text,
            table=self.table,
            type=self.type,
            agent_id=agent,
            user_id=user,
            room_id=room,
            world_id=world,
            session_id=session,
            namespace=namespace,
            importance=self.importance,
            evergreen=self.evergreen,
            unique=self.unique,
            metadata=self.metadata,
            created_at=self.created_at,
            updated_at=self.updated_at,
            last_accessed_at=self.last_accessed_at,
            access_count=self.access_count,
            valid_to=self.valid_to,
            expires_at=self.expires_at,
            recorded_at=self.recorded_at,
            content_hash=self.content_hash,
        )


class _Checked(set[str]):
    """Short strings that passed :func:`coerce.text` (tables, types, scope values repeat
    from record to record), so a bulk add checks each once; bounded by clearing."""

    def add(self, value: str) -> None:
        if len(self) >= 4096:
            self.clear()
        super().add(value)


checked = _Checked()


def validate(
    item: Mapping[str, Any],
    now: float,
    default_scope: Mapping[str, str],
    dim: int | None,
    importing: bool = False,
) -> NewRecord:
    """Checks one add() item completely; vector values are checked per batch by the caller."""
    # Runs once per record of a bulk add: the common cases take fast paths
    # (exact types), anything else goes through the general checks.
    if not isinstance(item, Mapping):
        raise InvalidArgumentError(f"a record must be a dict, got {type(item).__name__}")
    allowed = IMPORT_KEYS if importing else ADD_KEYS
    if not allowed.issuperset(item):
        raise InvalidArgumentError(f"unknown key(s) {sorted(set(item) - allowed)}")
    get = item.get
    text = get("text")
    if type(text) is not str or not text.strip():
        if text is None:
            raise InvalidArgumentError("a record needs a 'text'")
        if not isinstance(text, str):
            raise InvalidArgumentError(f"text must be a str, got {type(text).__name__}")
        raise InvalidArgumentError("text is empty or whitespace-only")
    coerce.clean(text, "text")
    scope: list[str | None] = []
    for f in SCOPE_FIELDS:
        v = get(f)
        if v is None:
            scope.append(default_scope.get(f))
        elif type(v) is str and v in checked:
            scope.append(v)
        else:
            scope.append(coerce.text(v, f))
            checked.add(v)
    meta = get("metadata")
    metadata, metadata_json = ({}, "{}") if not meta else coerce.metadata(meta)
    created = get("created_at")
    created = now if created is None else coerce.timestamp(created, "created_at")
    updated = get("updated_at")
    updated = now if updated is None else coerce.timestamp(updated, "updated_at")
    last = get("last_accessed_at")
    last = created if last is None else coerce.timestamp(last, "last_accessed_at")
    access_count = get("access_count", 0)
    if type(access_count) is not int or access_count < 0:
        raise InvalidArgumentError("access_count must be an int >= 0")
    valid_to = get("valid_to")
    if valid_to is not None:
        valid_to = coerce.timestamp(valid_to, "valid_to")
        if valid_to < created:
            raise InvalidArgumentError(
                "valid_to is before created_at (when the record became true)"
            )
    expires_at = _expiry(get("expires_at"), get("ttl"), now, importing)
    recorded = get("recorded_at") if importing else None
    recorded = now if recorded is None else coerce.timestamp(recorded, "recorded_at")
    importance = get("importance", 0.5)
    if type(importance) is not float or not 0.0 <= importance <= 1.0:
        importance = coerce.number(importance, "importance", 0.0, 1.0)
    table = get("table", "memories")
    if type(table) is not str or table not in checked:
        checked.add(coerce.text(table, "table"))
    kind = get("type", "semantic")
    if type(kind) is not str or kind not in checked:
        checked.add(coerce.text(kind, "type"))
    emb = get("embedding")
    if emb is not None:
        ok = type(emb) is np.ndarray and emb.dtype == np.float32 and emb.shape == (dim,)
        emb = emb if ok else coerce.vector(emb, "embedding", dim, False)
    record_id = get("id")
    unique = get("unique", False)
    if unique is not False and unique is not True:
        unique = coerce.flag(unique, "unique")
    evergreen = get("evergreen", False)
    if evergreen is not False and evergreen is not True:
        evergreen = coerce.flag(evergreen, "evergreen")
    return NewRecord(
        id=coerce.new_id() if record_id is None else coerce.text(record_id, "id"),
        text=text,
        table=table,
        type=kind,
        scope=tuple(scope),
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
        content_hash=content_hash(text),
        dedup=unique and not importing,
        id_given=record_id is not None,
        valid_to=valid_to,
        expires_at=expires_at,
        recorded_at=recorded,
    )


def _expiry(expires_at: Any, ttl: Any, now: float, importing: bool) -> float | None:
    """When a record expires: ``expires_at``, or ``ttl`` seconds from now (not both). A
    record added already expired is refused; an import keeps what it was given."""
    if ttl is not None:
        if expires_at is not None:
            raise InvalidArgumentError("give expires_at or ttl, not both")
        seconds = coerce.number(ttl, "ttl")
        if seconds <= 0:
            raise InvalidArgumentError(f"ttl must be a number of seconds > 0, got {ttl!r}")
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
    access_count, last = row.access_count, row.last_accessed_at
    if pending is not None:
        access_count += pending[0]
        last = max(last, pending[1])
    return MemoryRecord(
        id=row.id,
        text=row.text,
        table=row.tbl,
        type=row.type,
        agent_id=row.agent_id,
        user_id=row.user_id,
        room_id=row.room_id,
        world_id=row.world_id,
        session_id=row.session_id,
        namespace=row.namespace,
        importance=row.importance,
        evergreen=bool(row.evergreen),
        unique=bool(row.uniq),
        metadata=_metadata(row),
        created_at=row.created_at,
        updated_at=row.updated_at,
        last_accessed_at=last,
        access_count=access_count,
        valid_to=row.valid_to,
        expires_at=row.expires_at,
        recorded_at=row.recorded_at,
        content_hash=row.content_hash,
        embedding=unblob(row.embedding) if embedding else None,
    )


def prepare(
    engine: Engine,
    rows: Sequence[Row],
    *,
    texts: bool,
    vectors: FloatArray | None,
    pending: Mapping[int, int],
) -> PreparedBatch:
    """The engine's check and analysis of ``rows`` (without changing it), passed as one
    batch of columns in :data:`~memlane.schema.ENGINE_COLUMNS` order. ``pending`` holds
    access counts not yet flushed to the rows."""
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(Row._fields)
    by_name = dict(zip(Row._fields, columns, strict=True))
    if pending:
        counts = zip(by_name["rowid"], by_name["access_count"], strict=True)
        by_name["access_count"] = tuple(n + pending.get(r, 0) for r, n in counts)
    return engine.prepare(
        np.fromiter(by_name["rowid"], dtype=np.uint64, count=len(rows)),
        by_name["text"] if texts else None,
        vectors,
        [by_name[c] for c in ENGINE_COLUMNS],
    )


def blob(v: FloatArray | None) -> bytes | None:
    return None if v is None else np.ascontiguousarray(v, dtype="<f4").tobytes()


def unblob(b: bytes | None) -> FloatArray | None:
    if b is None:
        return None
    v: FloatArray = np.frombuffer(b, dtype="<f4").astype(np.float32)
    return v
