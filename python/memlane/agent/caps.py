"""The limits on what ``AgentMemory`` stores: the entry length cap
(splitting, or summarising) and the per-scope memory cap (eviction)."""

from __future__ import annotations

import hashlib
import json
import logging
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from memlane import coerce
from memlane.agent.callers import Caller
from memlane.agent.consolidation import short_term_item
from memlane.agent.history import MESSAGES, TURN, message_item
from memlane.agent.llm import ChatMessage, LLMError
from memlane.agent.parsing import answer_text
from memlane.agent.reports import TriggerFailure, TurnReport
from memlane.derived_ids import add_derived, held
from memlane.errors import ConflictError, InvalidArgumentError, shown
from memlane.scoping import EventScope, exact_scope

if TYPE_CHECKING:
    from memlane.memory import Memory
    from memlane.records import MemoryRecord

__all__ = ["Limits", "split_text"]

log = logging.getLogger("memlane.agent")

#: Times a split is tried over a memory other writers change meanwhile (a fact check
#: marking it) before it is left whole: its text is kept either way.
_SPLIT_TRIES = 3


@dataclass(frozen=True, slots=True)
class Limits:
    """OrcBot's limits on what is stored.

    Attributes:
        max_entry_chars: the longest entry (1,500 characters). Longer content is
            split into several entries at paragraph, sentence or word boundaries
            (``metadata`` ``part``, ``parts``, ``split_group``), or with
            ``overflow="summarize"`` summarised by the LLM (split when there is no
            LLM or it fails). The room's history is always split, never summarised.
        overflow: ``"split"`` (default) or ``"summarize"``.
        max_memories: current memories (the ``table`` of [`AgentMemory`][memlane.AgentMemory])
            kept per scope (10,000). Past it, the non-evergreen ones with the lowest
            importance, then the fewest accesses, then the oldest last use are
            evicted; evergreen memories are never evicted, and superseded versions
            (a memory's history) neither count nor are evicted.
    """

    max_entry_chars: int = 1500
    overflow: Literal["split", "summarize"] = "split"
    max_memories: int = 10_000

    def __post_init__(self) -> None:
        coerce.count(self.max_entry_chars, "Limits.max_entry_chars", 20)
        coerce.count(self.max_memories, "Limits.max_memories", 1)
        if self.overflow not in ("split", "summarize"):
            raise InvalidArgumentError(
                f"Limits.overflow must be 'split' or 'summarize', got {shown(self.overflow)}"
            )


def split_text(text: str, max_chars: int) -> list[str]:
    """``text`` in pieces of at most ``max_chars`` characters, cut at paragraph, then
    sentence, then word boundaries (inside a word only when one word is longer).

    Nothing is dropped but the whitespace at the cuts: joining the pieces with
    single spaces gives the text with its whitespace runs at the cuts collapsed.
    """
    coerce.count(max_chars, "max_chars", 1)
    text = text.strip()
    pieces: list[str] = []
    while len(text) > max_chars:
        window = text[: max_chars + 1]
        cut = -1
        for pattern in (r"\n\s*\n", r"(?<=[.!?])\s", r"\s"):
            ends = [m.start() for m in re.finditer(pattern, window) if m.start() > 0]
            if ends:
                cut = ends[-1]
                break
        if cut <= 0:
            cut = max_chars
        pieces.append(text[:cut].rstrip())
        text = text[cut:].lstrip()
    if text:
        pieces.append(text)
    return pieces


def fit(
    text: str, limits: Limits, call: Caller | None, failures: list[TriggerFailure]
) -> list[str]:
    """``text`` within the length cap: itself, a summary, or its pieces."""
    cap = limits.max_entry_chars
    if len(text) <= cap:
        return [text]
    if limits.overflow == "summarize" and call is not None:
        prompt: list[ChatMessage] = [
            {
                "role": "system",
                "content": f"Rewrite the text in at most {cap} characters, keeping every "
                "fact, name, number and decision. Answer with the rewritten text only.",
            },
            {"role": "user", "content": text},
        ]
        try:
            summary = answer_text(call(prompt, None), "the summary")
            if len(summary) > cap:
                raise LLMError(f"the summary has {len(summary)} characters (1 to {cap} wanted)")
            return [summary]
        except Exception as e:  # split instead: nothing is lost
            failures.append(TriggerFailure("summarize", f"{type(e).__name__}: {e}"))
    return split_text(text, cap)


def cap_record(
    memory: Memory, limits: Limits, rec: MemoryRecord, call: Caller | None, report: TurnReport
) -> None:
    """A memory a trigger wrote, brought within the length cap.

    Its pieces take its place in one transaction (``add_many`` consuming it, the first
    piece under its id, so what names the memory still finds it): a process killed
    meanwhile leaves it whole or split, never cut to its first piece. One another writer
    changed meanwhile (a fact check marking it) is split as it is now; one whose text
    another writer replaced, or that it deleted, is that writer's and is left."""
    if len(rec.text) <= limits.max_entry_chars:
        return
    pieces = fit(rec.text, limits, call, report.failures)
    if len(pieces) == 1:
        memory.update(rec.id, text=pieces[0])
        return
    group = uuid.uuid4().hex
    for _ in range(_SPLIT_TRIES):
        try:
            memory.add_many(_pieces(rec, pieces, group), consume=[rec])
        except ConflictError:
            now = held(memory, rec.id)
            if now is None or now.valid_to is not None or now.text != rec.text:
                return
            rec = now
            continue
        report.splits.append((f"{rec.type} memory {rec.id}", len(pieces)))
        return
    log.warning(
        "memlane: memory %s changed %d times while it was split; it stays whole (%d characters)",
        rec.id,
        _SPLIT_TRIES,
        len(rec.text),
    )


def _pieces(rec: MemoryRecord, pieces: list[str], group: str) -> list[dict[str, Any]]:
    """The ``add_many`` items of ``rec``'s pieces: its fields and metadata, each piece
    numbered, the first under its id."""
    meta = {**rec.metadata, "parts": len(pieces), "split_group": group}
    fields = {
        "table": rec.table,
        "type": rec.type,
        "speaker": rec.speaker,
        "importance": rec.importance,
        "evergreen": rec.evergreen,
        # When the fact became true, not when it was split: facts are ordered by it.
        "created_at": rec.created_at,
        "expires_at": rec.expires_at,
        **rec.scope,
    }
    items = [
        {**fields, "text": piece, "metadata": {**meta, "part": i}}
        for i, piece in enumerate(pieces, 1)
    ]
    items[0]["id"] = rec.id
    return items


def store_turn(
    memory: Memory,
    limits: Limits,
    event: EventScope,
    said: list[tuple[str, str, str | None]],
    entries: list[str],
    now: float,
    report: TurnReport,
) -> bool:
    """A turn's messages ((role, text, message id), in order; one longer than the cap in
    pieces) and its short-term ``entries``, in one ``add_many``: one transaction, so a
    process killed while it stores leaves the whole turn or none of it.

    Returns whether the turn was delivered again: its first message with an id is
    stored already (see ``_store_keyed``). Such a turn adds no entry and no piece of
    that message; its other messages (the reply) are stored, as the new messages they
    are."""
    action = f"conversation:{event.room_id or event.identity}"
    meta = {"room_id": event.room_id} if event.room_id else None
    short = [
        short_term_item(e, action, event.fields, metadata=meta, created_at=now) for e in entries
    ]
    groups = [
        message_items(limits, event, role, text, now, report, mid) for role, text, mid in said
    ]
    if groups:  # the turn's first message, counted by the reflection cadence
        groups[0][0]["metadata"][TURN] = True
    keyed = next((g for g in groups if "messageId" in g[0]["metadata"]), None)
    if keyed is None:
        items = [item for group in groups for item in group]
        stored = memory.add_many([*items, *short])
        report.stored += stored[: len(items)]
        report.short_term += stored[len(items) :]
        return False
    # The keyed message first: whether it is stored already decides the rest.
    others = [item for group in groups if group is not keyed for item in group]
    stored, again = _store_keyed(memory, event, keyed, others, short)
    if again:
        report.stored += stored
        return True
    # In the turn's order, as the records of a turn without an id.
    by_item = dict(zip(map(id, [*keyed, *others]), stored, strict=False))
    report.stored += [by_item[id(item)] for group in groups for item in group]
    report.short_term += stored[len(keyed) + len(others) :]
    return False


def _store_keyed(
    memory: Memory,
    event: EventScope,
    message: list[dict[str, Any]],
    others: list[dict[str, Any]],
    short: list[dict[str, Any]],
) -> tuple[list[MemoryRecord], bool]:
    """A message with an id (its ``add_many`` items: pieces when long), the turn's
    ``others`` messages and its ``short`` entries, in one ``add_many``: their records in
    that order, and False. When the message is stored already: its first record marked
    ``duplicate="window"`` and the others' records (no entry, no piece), and True.

    The message's first record is kept under an id derived from its room's scope and its
    message id, which the store refuses to hold twice, inside the transaction that would
    store it: a delivery again (after a crash, a restart, from another process at once)
    stores nothing of the batch. A first record stored otherwise (``add_message``, an
    earlier memlane) is known by the store's dedup window only: what the batch stored
    beside it of the message and its entries is deleted again."""
    mid = message[0]["metadata"]["messageId"]
    scope, _ = exact_scope(memory, event.history)
    made: list[MemoryRecord] = []

    def add(rid: str) -> MemoryRecord:
        made[:] = memory.add_many([{**message[0], "id": rid}, *message[1:], *others, *short])
        return made[0]

    def same(rec: MemoryRecord) -> MemoryRecord | None:
        ours = rec.table == MESSAGES and rec.scope == scope
        return rec if ours and rec.metadata.get("messageId") == mid else None

    first, new = add_derived(memory, _message_id(scope, mid), add, same, f"message {mid!r}")
    if not new:
        again = replace(first, duplicate="window", duplicate_of=first.id)
        return [again, *(memory.add_many(others) if others else [])], True
    if first.duplicate is None:
        return made, False
    n = len(message)
    extra = [r.id for r in made[1:n] + made[n + len(others) :] if r.duplicate is None]
    if extra:
        memory.delete_all(filters={"id": {"$in": extra}})
    return [first, *made[n : n + len(others)]], True


def _message_id(scope: Mapping[str, str], message_id: str) -> str:
    """The id a message with a platform id is stored under, from its room's scope."""
    key = json.dumps([MESSAGES, sorted(scope.items()), message_id])
    return "message-" + hashlib.sha256(key.encode()).hexdigest()[:32]


def message_items(
    limits: Limits,
    event: EventScope,
    role: str,
    text: str,
    now: float,
    report: TurnReport,
    message_id: str | None = None,
) -> list[dict[str, Any]]:
    """The ``add_many`` items of one message the agent loop records in the room's history
    (in order, so never skipped for its text alone; skipped as delivered again only by
    its ``message_id``): itself, or its pieces when it is longer than the cap."""
    if len(text) <= limits.max_entry_chars:
        return [message_item(text, event, role, now, message_id=message_id, in_order=True)]
    pieces = split_text(text, limits.max_entry_chars)
    report.splits.append((f"{role} message", len(pieces)))
    meta = {"parts": len(pieces), "split_group": uuid.uuid4().hex}
    first = message_item(
        pieces[0], event, role, now, {**meta, "part": 1}, message_id, in_order=True
    )
    # The other pieces leave out the message id (the dedup window's key), so a piece
    # that repeats an earlier one is kept.
    base = {k: v for k, v in first["metadata"].items() if k != "messageId"}
    return [
        first,
        *(
            {**first, "text": piece, "metadata": {**base, "part": i}}
            for i, piece in enumerate(pieces[1:], 2)
        ),
    ]


def store_message(
    memory: Memory,
    limits: Limits,
    event: EventScope,
    role: str,
    text: str,
    now: float,
    report: TurnReport,
    message_id: str | None = None,
) -> list[MemoryRecord]:
    """One message of ``message_items`` stored in one transaction, every piece or none;
    delivered again (its id stored already), its first record marked so."""
    items = message_items(limits, event, role, text, now, report, message_id)
    if "messageId" not in items[0]["metadata"]:
        return memory.add_many(items)
    return _store_keyed(memory, event, items, [], [])[0]


#: The records eviction counts and chooses from: the current ones. A superseded version
#: is the history of a memory, not a memory of its own (docs/facts.md).
CURRENT = {"valid_to": None}


def evict(memory: Memory, table: str, cap: int, event: EventScope, report: TurnReport) -> None:
    """Past ``cap`` current memories in the event's scope, the lowest-ranked non-evergreen
    current ones go (superseded versions neither count nor are chosen), counted, chosen
    and deleted in one transaction (``Memory.evict``). Exactly the scope: an agent
    without an ``agent_id`` does not evict the memories of the agents that have one."""
    scope, only = exact_scope(memory, event.fields)
    for rec in memory.evict(cap, table, filters=only, **scope):
        report.evicted.append(rec)
        log.info(
            "memlane: evicted memory %s (importance %.2f, %d accesses) past the cap of %d: %r",
            rec.id,
            rec.importance,
            rec.access_count,
            cap,
            rec.text[:80],
        )
    pinned_flt = {"$and": [CURRENT, {"evergreen": True}, only]}
    pinned = memory.count(table, filters=pinned_flt, **scope)
    if pinned > cap:
        log.warning(
            "memlane: %d evergreen memories in scope %s exceed the cap of %d; "
            "evergreen memories are never evicted",
            pinned,
            event.fields,
            cap,
        )
