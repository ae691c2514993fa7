"""What ``memlane.Memory`` stores and returns: ``MemoryRecord`` and ``SearchHit``."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, TypedDict

import numpy as np
import numpy.typing as npt

__all__ = ["SCOPE_FIELDS", "MemoryRecord", "ScopeFields", "SearchHit"]


class ScopeFields(TypedDict, total=False):
    """The scope keywords of every record call (``add``, ``search``, ``list``, ``count``,
    ``scopes``, ``delete_all``, ``prune``), each optional: declared here once, and taken
    as ``**scope: Unpack[ScopeFields]``, so that an IDE and mypy still know them."""

    agent_id: str | None
    user_id: str | None
    room_id: str | None
    world_id: str | None
    session_id: str | None
    namespace: str | None


#: The scope fields, in the engine's order. A search or list given one never
#: sees records of another value.
SCOPE_FIELDS: tuple[str, ...] = tuple(ScopeFields.__annotations__)

# Set on the record add() returns; not stored.
_TRANSIENT = ("duplicate", "duplicate_of")


@dataclass(slots=True, eq=True)
class MemoryRecord:
    """One memory.

    Times are unix seconds. ``content_hash`` is the sha256 of the normalised
    text (see ``memlane.content_hash.content_hash``). ``unique`` is True when the
    record was added with ``unique=True`` and no near-duplicate existed, as in
    elizaOS. ``embedding`` is filled only on request (``include_embedding=True``).

    Two timelines (Graphiti's bi-temporal model): ``created_at`` until ``valid_to``
    is when the fact held in the world (the caller may backdate it);
    ``recorded_at`` is when the store learned it (set by the store). A record
    with ``expires_at`` is returned by no read from then on, and maintenance
    removes it (its last version stays in the history).

    ``speaker`` is who said a conversation turn: ``"user"`` for the store's own
    person, the agent's or the other party's name otherwise (None for a record
    that is no turn). A search whose query names a speaker ("I", "my": the user;
    or the speaker's name) lifts that speaker's turns (``speaker_weight``).

    ``duplicate`` and ``duplicate_of`` are set only on a record that
    [`Memory.add`][memlane.Memory.add] returns and are never stored: ``"exact"``,
    ``"near"`` or ``"window"`` when the add met a duplicate of that kind, and
    the id of that duplicate.
    """

    id: str
    text: str
    table: str = "memories"
    type: str = "semantic"
    agent_id: str | None = None
    user_id: str | None = None
    room_id: str | None = None
    world_id: str | None = None
    session_id: str | None = None
    namespace: str | None = None
    speaker: str | None = None
    importance: float = 0.5
    evergreen: bool = False
    unique: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)
    created_at: float = 0.0
    updated_at: float = 0.0
    last_accessed_at: float = 0.0
    access_count: int = 0
    valid_to: float | None = None
    expires_at: float | None = None
    recorded_at: float = 0.0
    content_hash: str = ""
    embedding: npt.NDArray[np.float32] | None = field(default=None, repr=False, compare=False)
    duplicate: str | None = field(default=None, compare=False)
    duplicate_of: str | None = field(default=None, compare=False)

    @property
    def valid_from(self) -> float:
        """When the record became true: its ``created_at``."""
        return self.created_at

    @property
    def current(self) -> bool:
        """Whether the record is still true (no later version superseded it)."""
        return self.valid_to is None

    @property
    def scope(self) -> dict[str, str]:
        """The scope fields that are set."""
        return {f: v for f in SCOPE_FIELDS if (v := getattr(self, f)) is not None}

    def to_dict(self, *, embedding: bool = True) -> dict[str, Any]:
        """Every stored field as plain Python values (the embedding as a list, or None)."""
        out: dict[str, Any] = {name: getattr(self, name) for name in STORED}
        out["metadata"] = dict(self.metadata)
        if embedding:
            vector = self.embedding
            out["embedding"] = None if vector is None else [float(x) for x in vector]
        else:
            del out["embedding"]
        return out


#: The stored fields, which ``to_dict`` writes, in declaration order: read once, not
#: per record (``dataclasses.fields`` was most of the time a server's answer took to
#: write). Each is a column of the ``records`` table, from which ``memlane.schema``
#: derives the table and its ``Row``.
STORED = tuple(f.name for f in fields(MemoryRecord) if f.name not in _TRANSIENT)


@dataclass(slots=True, frozen=True)
class SearchHit:
    """A search result: the record, its final score and, on request, the signals behind it.

    ``explain`` holds ``bm25`` and ``bm25_rank``, ``cosine`` and ``vector_rank``
    (None where the hit was not retrieved that way), ``bm25_context`` (the BM25
    of a conversation turn joined with its neighbours; None without a session),
    ``cosine_context`` (the better cosine of its previous and next turn; None
    without a session or a query vector), ``cosine_asked`` (the cosine of the turn
    before it, if that turn asks and the hit asks nothing: the question it
    answers; None otherwise), ``question`` (how much of the hit's text asks, in
    [0, 1]: the share of its characters in sentences that end with a question mark;
    None where the search did not weigh it: text or vector mode, RRF, or
    ``question_weight=0``),
    ``bm25_speaker`` (whether the query names the hit's speaker; None in a store
    without speakers), ``date`` (whether the hit was created in or near a date the
    query names; None when the date pass did not apply: the query names no date,
    or no candidate was created near one), ``when`` (whether the hit's text tells a
    time; None when the when pass did not apply: the query does not ask when, or no
    candidate tells a time),
    ``relevance`` (fused, in [0, 1]), ``importance``, ``recency``, ``age_hours``
    (from the newest candidate), ``boost`` (the factor applied to the relevance) and
    ``score``.
    """

    record: MemoryRecord
    score: float
    explain: dict[str, float | int | None] | None = None


@dataclass(slots=True, frozen=True)
class MemoryVersion:
    """One version of a memory, as [`Memory.history`][memlane.Memory.history] returns it.

    ``record`` is the memory as this version held it (``record.valid_to`` is set on
    a superseded one). ``event`` is the change that made the version (``"add"``,
    ``"update"`` or ``"supersede"``: a new record opened by
    [`supersede`][memlane.Memory.supersede]), ``at`` when and ``by`` who made it (None
    when not said). ``ended`` is the change that ended it (``"update"``,
    ``"supersede"``, ``"delete"``; None for the current version), with ``ended_at``
    and ``ended_by``; ``superseded_by`` names the record that replaced a
    superseded one.
    """

    record: MemoryRecord
    event: str
    at: float
    by: str | None = None
    ended: str | None = None
    ended_at: float | None = None
    ended_by: str | None = None
    superseded_by: str | None = None
