"""A room's messages as the store keeps them: ``add_message`` (one message of a
conversation, in the ``messages`` table under the event's room, with ``metadata``
``role``, ``contact`` or ``sender``, and ``identity``), ``message_item`` (its ``add``
arguments, so a turn's messages go in one ``add_many``), attachments (elizaOS's), the
line a message reads as in a context, and OrcBot's ``thread_context``: the last
messages from the same contact and the most relevant ones, merged in time order."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from memlane import coerce, times
from memlane.errors import InvalidArgumentError
from memlane.scoping import EventScope, agents_apart, platform_id, scope_kwargs

if TYPE_CHECKING:
    from memlane.memory import Memory
    from memlane.records import MemoryRecord

__all__ = [
    "MESSAGES",
    "TURN",
    "add_message",
    "attachment_fields",
    "message_item",
    "message_line",
    "thread_context",
]

#: The table messages live in.
MESSAGES = "messages"
#: The metadata key marking a turn's first message in the history (what the reflection
#: cadence counts: a turn may hold no user text, a message may be split in pieces). The
#: agent's alone: a message added with it in its metadata is stored without it.
TURN = "memlane:turn"


def add_message(
    mem: Memory,
    text: str,
    scope: EventScope,
    *,
    role: str = "user",
    created_at: float | None = None,
    metadata: Mapping[str, Any] | None = None,
    message_id: str | None = None,
    in_order: bool = False,
    attachments: Sequence[Mapping[str, Any]] | None = None,
) -> MemoryRecord:
    """Stores one message of a conversation in the ``messages`` table under the event's room.

    The store's ``dedup_window`` (OrcBot's guard against duplicate deliveries) skips
    a message delivered again, returning the earlier record: one with the same
    ``message_id`` (for a user's message, ``scope.message_id`` when not given), kept as
    ``metadata["messageId"]``; or, for a user's message without an id, the same
    text from the same contact (``metadata["contact"]``). ``in_order=True`` is for
    messages the caller records once each, in order, as the agent loop does: a
    repeated short reply ("yes") is a new message then, so the contact is kept as
    ``metadata["sender"]``, which no window compares. The agent's replies (any other
    ``role``) carry ``metadata["to"]`` and are never skipped by their text. The
    record's ``speaker`` is the ``role`` (``"user"``, ``"assistant"``).

    ``attachments`` (elizaOS's: dicts with an ``id``, and ``url``, ``title``,
    ``contentType``, ...) are kept as given in ``metadata["attachments"]``; their ids
    and content types also as ``attachmentIds`` and ``attachmentTypes``, lists of str
    a filter reads (``{"attachmentTypes": "image"}``: the messages with an image).
    """
    item = message_item(text, scope, role, created_at, metadata, message_id, in_order)
    if attachments is not None:
        item["metadata"].update(attachment_fields(attachments))
    return mem.add(**item)


def attachment_fields(attachments: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A message's attachments as its metadata keeps them (see ``add_message``)."""
    if isinstance(attachments, str | bytes | Mapping) or not isinstance(attachments, Sequence):
        raise InvalidArgumentError("attachments must be a list of dicts")
    for a in attachments:
        if not isinstance(a, Mapping) or not isinstance(a.get("id"), str) or not a["id"]:
            raise InvalidArgumentError("each attachment must be a dict with a non-empty str 'id'")
        kind = a.get("contentType")
        if kind is not None and not isinstance(kind, str):
            raise InvalidArgumentError("an attachment's 'contentType' must be a str")
    return {
        "attachments": [dict(a) for a in attachments],
        "attachmentIds": [a["id"] for a in attachments],
        "attachmentTypes": sorted({a["contentType"] for a in attachments if a.get("contentType")}),
    }


def message_item(
    text: str,
    scope: EventScope,
    role: str = "user",
    created_at: float | None = None,
    metadata: Mapping[str, Any] | None = None,
    message_id: str | None = None,
    in_order: bool = False,
) -> dict[str, Any]:
    """The ``add`` arguments of ``add_message`` (so a turn's
    messages can be stored in one ``add_many``, one transaction)."""
    _check_scope(scope)
    role = coerce.text(role, "role")
    if metadata is not None and not isinstance(metadata, Mapping):
        raise InvalidArgumentError(f"metadata must be a dict, got {type(metadata).__name__}")
    in_order = coerce.flag(in_order, "in_order")
    mid = None if message_id is None else platform_id(message_id, "message_id")
    if mid is None and role == "user":
        mid = scope.message_id
    meta: dict[str, Any] = {
        **{k: v for k, v in (metadata or {}).items() if k != TURN},
        "role": role,
        "identity": scope.identity,
        "source": scope.source,
    }
    if role != "user":
        meta["to"] = scope.contact
    elif in_order or mid is not None:
        meta["sender"] = scope.contact
    else:
        meta["contact"] = scope.contact
    if mid is not None:
        meta["messageId"] = mid
    return {
        "text": text,
        "table": MESSAGES,
        "type": "message",
        "metadata": meta,
        "created_at": created_at,
        # As mem0 and the chat APIs name the parties: a search in the first person
        # ("what did I say about ...") lifts the user's own messages.
        "speaker": role,
        **scope_kwargs(scope.history),
    }


def message_line(rec: MemoryRecord, max_chars: int | None = None) -> str:
    """A message as the context shows it: its time, who said it, its text on one line
    (cut at ``max_chars``, with "…")."""
    stamp = times.stamp(rec.created_at, "%Y-%m-%d %H:%M")
    who = rec.metadata.get("role") or rec.metadata.get("identity") or "user"
    line = f"[{stamp}] {who}: {' '.join(rec.text.split())}"
    if max_chars is not None and len(line) > max_chars:
        line = line[: max_chars - 1] + "…"
    return line


def thread_context(
    mem: Memory,
    message: str,
    scope: EventScope,
    *,
    recent: int = 8,
    relevant: int = 8,
    max_line: int = 420,
) -> list[str]:
    """OrcBot's thread context: the contact's last ``recent`` messages and the ``relevant``
    most relevant, merged in time order, without duplicates, each line cut at ``max_line``
    characters.

    "The same contact" is the canonical identity, so in per-peer mode a
    person's messages on every linked platform count.
    """
    _check_scope(scope)
    if not isinstance(message, str):
        raise InvalidArgumentError(f"message must be a str, got {type(message).__name__}")
    recent = coerce.count(recent, "recent")
    relevant = coerce.count(relevant, "relevant")
    max_line = coerce.count(max_line, "max_line", low=2)
    fields = scope_kwargs(scope.fields)
    # The contact's messages to this agent, not to another agent of the store.
    mine = agents_apart(mem, fields, {"identity": scope.identity})
    picked: dict[str, MemoryRecord] = {}
    recent_ids: list[str] = []
    if recent > 0:
        for rec in mem.list(MESSAGES, limit=recent, filters=mine, **fields):
            picked[rec.id] = rec
            recent_ids.append(rec.id)
    if relevant > 0 and message.strip():
        for hit in mem.search(
            message, relevant, table=MESSAGES, filters=mine, track_access=False, **fields
        ):
            picked.setdefault(hit.record.id, hit.record)
    # A turn's messages share its time (by id, a reply could read before its question):
    # the recent ones in the order the store lists them (newest first), the others (found
    # by relevance, older) before them, the user's first and a long message's pieces
    # in order.
    listed = {rec_id: -i for i, rec_id in enumerate(recent_ids)}

    def when(r: MemoryRecord) -> tuple[float, int, int, int]:
        if r.id in listed:
            return (r.created_at, 1, 0, listed[r.id])
        part = r.metadata.get("part")
        piece = part if isinstance(part, int) and not isinstance(part, bool) else 0
        return (r.created_at, 0, r.metadata.get("role", "user") != "user", piece)

    ordered = sorted(picked.values(), key=when)
    lines: list[str] = []
    seen: set[str] = set()
    for rec in ordered:
        key = " ".join(rec.text.split()).lower()
        if key in seen:  # the same text sent twice reads once
            continue
        seen.add(key)
        lines.append(message_line(rec, max_line))
    return lines


def _check_scope(scope: object) -> None:
    # A dict of scope fields lacks what a message needs: the contact, identity and room.
    if not isinstance(scope, EventScope):
        raise InvalidArgumentError(
            f"scope must be an EventScope (SessionScope.resolve(...)), got {type(scope).__name__}"
        )
