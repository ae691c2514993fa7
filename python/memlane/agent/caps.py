"""The limits on what ``AgentMemory`` stores: the entry length cap
(splitting, or summarising) and the per-scope memory cap (eviction)."""

from __future__ import annotations

import logging
import re
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from memlane import coerce
from memlane.agent.callers import Caller
from memlane.agent.consolidation import short_term_item
from memlane.agent.history import MESSAGES, add_message, message_item
from memlane.agent.llm import ChatMessage, LLMError
from memlane.agent.reports import TriggerFailure, TurnReport
from memlane.errors import InvalidArgumentError, shown
from memlane.scoping import EventScope, scope_kwargs

if TYPE_CHECKING:
    from memlane.memory import Memory
    from memlane.records import MemoryRecord

__all__ = ["Limits", "split_text"]

log = logging.getLogger("memlane.agent")


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
            summary = call(prompt, None).strip()
            if not summary or len(summary) > cap:
                raise LLMError(f"the summary has {len(summary)} characters (1 to {cap} wanted)")
            return [summary]
        except Exception as e:  # split instead: nothing is lost
            failures.append(TriggerFailure("summarize", f"{type(e).__name__}: {e}"))
    return split_text(text, cap)


def cap_record(
    memory: Memory, limits: Limits, rec: MemoryRecord, call: Caller | None, report: TurnReport
) -> None:
    """A memory a trigger wrote, brought within the length cap."""
    if len(rec.text) <= limits.max_entry_chars:
        return
    pieces = fit(rec.text, limits, call, report.failures)
    if len(pieces) == 1:
        memory.update(rec.id, text=pieces[0])
        return
    group = uuid.uuid4().hex
    meta = {**rec.metadata, "parts": len(pieces), "split_group": group}
    memory.update(rec.id, text=pieces[0], metadata={**meta, "part": 1})
    memory.add_many(
        [
            {
                "text": piece,
                "table": rec.table,
                "type": rec.type,
                "importance": rec.importance,
                "evergreen": rec.evergreen,
                "metadata": {**meta, "part": i},
                **rec.scope,
            }
            for i, piece in enumerate(pieces[1:], 2)
        ]
    )
    report.splits.append((f"{rec.type} memory {rec.id}", len(pieces)))


def store_turn(
    memory: Memory,
    limits: Limits,
    event: EventScope,
    said: list[tuple[str, str, str | None]],
    entries: list[str],
    now: float,
    report: TurnReport,
) -> bool:
    """A turn's messages ((role, text, message id), in order) and its short-term
    ``entries``, in one ``add_many`` (one transaction, one embedding batch) when every
    message fits the length cap; a longer one is stored in pieces on its own.

    Returns whether the turn was delivered again: a message of it with an id the store's
    dedup window had seen (stored once, ``duplicate="window"``). Such a turn adds no
    short-term entry, so a message with an id is stored before its entries, in a
    transaction of its own: the window's answer, given under the store's write lock,
    decides them even when two deliveries race."""
    action = f"conversation:{event.room_id or event.identity}"
    meta = {"room_id": event.room_id} if event.room_id else None
    short = [
        short_term_item(e, action, event.fields, metadata=meta, created_at=now) for e in entries
    ]
    keyed = any(mid is not None for _, _, mid in said)
    messages: list[MemoryRecord] = []
    if all(len(text) <= limits.max_entry_chars for _, text, _ in said):
        items = [
            message_item(text, event, role, now, message_id=mid, in_order=True)
            for role, text, mid in said
        ]
        stored = memory.add_many(items if keyed else [*items, *short])
        report.stored += stored[: len(items)]
        if not keyed:
            report.short_term += stored[len(items) :]
            return False
        messages = stored
    else:
        for role, text, mid in said:
            messages += store_message(memory, limits, event, role, text, now, report, mid)
        report.stored += messages
    if any(r.duplicate == "window" for r in messages):
        return True
    report.short_term += memory.add_many(short) if short else []
    return False


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
    """One message the agent loop records in the room's history (in order, so never
    skipped for its text alone; skipped as delivered again only by its
    ``message_id``), in pieces when it is longer than the cap."""
    pieces = split_text(text, limits.max_entry_chars)
    if len(pieces) == 1:
        return [
            add_message(
                memory, text, event, role=role, created_at=now, message_id=message_id, in_order=True
            )
        ]
    report.splits.append((f"{role} message", len(pieces)))
    group = uuid.uuid4().hex
    meta = {"parts": len(pieces), "split_group": group}
    first = add_message(
        memory,
        pieces[0],
        event,
        role=role,
        created_at=now,
        metadata={**meta, "part": 1},
        message_id=message_id,
        in_order=True,
    )
    if first.duplicate == "window":  # the whole message delivered again: stored already
        return [first]
    # The other pieces leave out the message id (the dedup window's key), so a piece
    # that repeats an earlier one is kept.
    base = {k: v for k, v in first.metadata.items() if k != "messageId"}
    rest = memory.add_many(
        [
            {
                "text": piece,
                "table": MESSAGES,
                "type": "message",
                "metadata": {**base, "part": i},
                "created_at": now,
                "speaker": role,
                **scope_kwargs(event.history),
            }
            for i, piece in enumerate(pieces[1:], 2)
        ]
    )
    return [first, *rest]


#: The records eviction counts and chooses from: the current ones. A superseded version
#: is the history of a memory, not a memory of its own (docs/facts.md).
CURRENT = {"valid_to": None}


def evict(memory: Memory, table: str, cap: int, event: EventScope, report: TurnReport) -> None:
    """Past ``cap`` current memories in the event's scope, the lowest-ranked non-evergreen
    current ones go (superseded versions neither count nor are chosen), counted, chosen
    and deleted in one transaction (``Memory.evict``)."""
    scope = scope_kwargs(event.fields)
    for rec in memory.evict(cap, table, **scope):
        report.evicted.append(rec)
        log.info(
            "memlane: evicted memory %s (importance %.2f, %d accesses) past the cap of %d: %r",
            rec.id,
            rec.importance,
            rec.access_count,
            cap,
            rec.text[:80],
        )
    pinned = memory.count(table, filters={"$and": [CURRENT, {"evergreen": True}]}, **scope)
    if pinned > cap:
        log.warning(
            "memlane: %d evergreen memories in scope %s exceed the cap of %d; "
            "evergreen memories are never evicted",
            pinned,
            event.fields,
            cap,
        )
