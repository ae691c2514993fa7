"""``Row``: one row of the ``records`` table.

Generated from ``MemoryRecord`` by ``memlane.schema.row_source``: do not edit;
``memlane.schema.write_row()`` rewrites it.
"""

from __future__ import annotations

from typing import NamedTuple


class Row(NamedTuple):
    """One stored record as the database holds it: ``MemoryRecord``'s stored
    fields (a flag as 0 or 1, the metadata as JSON text, the vector as a blob)
    between the store's own columns, the row's key and its change numbers."""

    rowid: int
    id: str
    text: str
    tbl: str
    type: str
    agent_id: str | None
    user_id: str | None
    room_id: str | None
    world_id: str | None
    session_id: str | None
    namespace: str | None
    speaker: str | None
    importance: float
    evergreen: int
    uniq: int
    metadata: str
    created_at: float
    updated_at: float
    last_accessed_at: float
    access_count: int
    valid_to: float | None
    expires_at: float | None
    recorded_at: float
    content_hash: str
    embedding: bytes | None
    seq: int
    content_seq: int
