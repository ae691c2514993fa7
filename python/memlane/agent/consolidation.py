"""Tiers: short-term memories scoped to an action, consolidated by an LLM into long-term ones.

Short-term entries live in the ``short_term`` table with ``metadata.action_id``;
``complete_action`` removes an action's entries. When a scope holds
``threshold`` short-term entries, ``consolidate`` asks the LLM to summarise
the oldest ``batch`` into one episodic memory (``summary``, with ``facts``,
``pending``, ``tone``, ``preferences`` and ``confidence`` in its metadata, and as
OrcBot's, ``reason``: ``"threshold"`` when the scope held ``threshold`` entries,
``"forced"`` otherwise, and ``messageTypes``: the kinds of the entries summarised,
each entry's ``metadata["messageType"]``, ``"text"`` when it has none) and
stores each fact as a semantic memory, and removes the source entries, all in one
transaction (``add_many(..., consume=)``): an LLM error or an unparsable answer loses
nothing and is reported, of two consolidations of the same entries at once (two
agents of one owner) one stores and the other stores nothing, and an entry rewritten
while the model answered (its new text unsummarised) makes it store nothing. A
consolidation reads exactly its scope (``exact_scope``): one without an ``agent_id`` leaves
the entries of the agents that have one. Its facts were said with the latest of the
entries they come from: they carry that entry's time (``created_at``) and the order it was
learnt in (``metadata["learned"]``), so the fact check (``memlane.agent.facts``) does not
take what a late consolidation draws from old turns for newer than what was said since.

The defaults are OrcBot's per-contact consolidation (its ``interactionBatchSize``): a
scope (a contact's memory) is summarised 12 entries at a time once it holds 12, so an
episode covers at most 12 turns and the context's 5 newest episodes the last 60.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from memlane import times
from memlane.agent.llm import LLM, AsyncLLM, ChatMessage
from memlane.agent.parsing import MAX_ANSWER_CHARS, MAX_OPERATIONS, ParseError, extract_json
from memlane.agent.statements import LEARNED, latest_learned, learned, said_together
from memlane.errors import ConflictError, InvalidArgumentError, MemlaneError, UnknownIdError, shown
from memlane.scoping import exact_scope, scope_kwargs

if TYPE_CHECKING:
    from memlane.aio import AsyncMemory
    from memlane.memory import Memory
    from memlane.records import MemoryRecord

__all__ = [
    "SHORT_TERM",
    "ConsolidationReport",
    "aconsolidate",
    "add_short_term",
    "complete_action",
    "consolidate",
    "parse_summary",
    "short_term_tier",
]

#: The table of short-term entries.
SHORT_TERM = "short_term"

_SYSTEM = (
    "You consolidate an AI agent's short-term memory. Read the entries and answer with one "
    "JSON object and nothing else, with these keys: "
    '"summary" (str: what happened, in a few sentences), '
    '"facts" (list of str: durable facts about the user or the world, each self-contained), '
    '"pending" (list of str: open tasks or promises), '
    '"tone" (str: the conversation\'s tone), '
    '"preferences" (list of str: the user\'s stated preferences), '
    '"confidence" (number from 0 to 1).'
)


@dataclass(slots=True)
class ConsolidationReport:
    """What [`consolidate`][memlane.consolidate] did.

    ``status`` is ``"skipped"`` (below the threshold; or, ``error`` saying so, its
    entries were consolidated, rewritten or removed by another writer while the model
    answered: nothing was stored), ``"consolidated"`` or ``"failed"`` (``error`` says why; nothing
    was removed).
    """

    status: Literal["skipped", "consolidated", "failed"]
    pending_entries: int = 0
    episodic: MemoryRecord | None = None
    semantic: list[MemoryRecord] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    error: str | None = None
    raw: str | None = None


def sync_memory(mem: Memory | AsyncMemory) -> Memory:
    """The ``Memory`` behind an ``AsyncMemory`` (or itself)."""
    from memlane.aio import AsyncMemory

    return mem.sync if isinstance(mem, AsyncMemory) else mem


def add_short_term(
    mem: Memory,
    text: str,
    action_id: str,
    *,
    scope: Mapping[str, str] | None = None,
    importance: float = 0.5,
    metadata: Mapping[str, Any] | None = None,
    created_at: float | None = None,
) -> MemoryRecord:
    """Stores a short-term entry belonging to action ``action_id`` (``created_at``: unix
    seconds, default now)."""
    return mem.add(**short_term_item(text, action_id, scope, importance, metadata, created_at))


def short_term_item(
    text: str,
    action_id: str,
    scope: Mapping[str, str] | None = None,
    importance: float = 0.5,
    metadata: Mapping[str, Any] | None = None,
    created_at: float | None = None,
) -> dict[str, Any]:
    """The ``add`` arguments of ``add_short_term`` (so a turn's
    entries can be stored with its messages, in one transaction)."""
    if not isinstance(action_id, str) or not action_id.strip():
        raise InvalidArgumentError("action_id must be a non-empty str")
    # The order the entry was learnt in: the facts consolidated from it carry it.
    meta = {LEARNED: learned(), **(metadata or {}), "action_id": action_id}
    return {
        "text": text,
        "table": SHORT_TERM,
        "type": "short_term",
        "importance": importance,
        "metadata": meta,
        "created_at": created_at,
        **scope_kwargs(scope),
    }


def complete_action(mem: Memory, action_id: str, *, scope: Mapping[str, str] | None = None) -> int:
    """Removes the short-term entries of a completed action; returns how many."""
    if not isinstance(action_id, str) or not action_id.strip():
        raise InvalidArgumentError("action_id must be a non-empty str")
    # One by one (an action holds few entries): delete() also frees the entries'
    # dedup-window keys, which delete_all() does not (a repeated message would then fail).
    n = 0
    while batch := mem.list(
        SHORT_TERM, limit=500, filters={"action_id": action_id}, **scope_kwargs(scope)
    ):
        before = n
        for rec in batch:
            try:
                mem.delete(rec.id)
            except UnknownIdError:
                continue
            n += 1
        if n == before:  # only entries deleted meanwhile: done
            break
    return n


def _str_list(value: object, key: str, raw: object) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ParseError(f"{key!r} must be a list of strings", raw=raw)
    return [v.strip() for v in value if v.strip()]


def parse_summary(text: object) -> dict[str, Any]:
    """The consolidation JSON from a model's answer, checked; raises ``ParseError``
    (with the answer as ``raw``)."""
    data = extract_json(text)
    summary = data.get("summary")
    if not isinstance(summary, str) or not summary.strip():
        raise ParseError("'summary' must be a non-empty string", raw=text)
    tone = data.get("tone") or ""
    if not isinstance(tone, str):
        raise ParseError("'tone' must be a string", raw=text)
    confidence = data.get("confidence", 0.5)
    # An int is finite however long; math.isfinite and float() would overflow on a huge one.
    if (
        isinstance(confidence, bool)
        or not isinstance(confidence, int | float)
        or (isinstance(confidence, float) and not math.isfinite(confidence))
    ):
        raise ParseError("'confidence' must be a number", raw=text)
    return {
        "summary": summary.strip(),
        "facts": _str_list(data.get("facts"), "facts", text),
        "pending": _str_list(data.get("pending"), "pending", text),
        "tone": tone.strip(),
        "preferences": _str_list(data.get("preferences"), "preferences", text),
        "confidence": float(min(max(confidence, 0.0), 1.0)),
    }


def _prompt(entries: Sequence[MemoryRecord]) -> list[ChatMessage]:
    lines = []
    for rec in entries:
        stamp = times.stamp(rec.created_at, "%Y-%m-%d %H:%M")
        lines.append(f"[{stamp}] {' '.join(rec.text.split())}")
    return [
        {"role": "system", "content": _SYSTEM},
        {"role": "user", "content": "Short-term entries, oldest first:\n" + "\n".join(lines)},
    ]


def short_term_tier(
    mem: Memory, scope: Mapping[str, str] | None, oldest: int
) -> tuple[int, list[MemoryRecord]]:
    """How many short-term entries exactly ``scope`` holds, and its ``oldest`` (0: none)
    oldest first: a scope without an ``agent_id`` does not hold the entries of the agents
    that have one, which another agent's model must not summarise."""
    fields, only = exact_scope(mem, scope or {})
    count = mem.count(SHORT_TERM, filters=only, **fields)
    if count == 0 or oldest == 0:
        return count, []
    return count, mem.list(SHORT_TERM, limit=oldest, order="asc", filters=only, **fields)


def _select(
    mem: Memory, scope: Mapping[str, str] | None, threshold: int, batch: int, force: bool
) -> tuple[int, list[MemoryRecord]]:
    for label, v in (("threshold", threshold), ("batch", batch)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise InvalidArgumentError(f"{label} must be an int >= 1, got {shown(v)}")
    pending, _ = short_term_tier(mem, scope, 0)
    if pending == 0 or (pending < threshold and not force):
        return pending, []
    return short_term_tier(mem, scope, batch)


def _message_type(entry: MemoryRecord) -> str:
    kind = entry.metadata.get("messageType")
    return kind if isinstance(kind, str) and kind else "text"


def _why(pending: int, threshold: int, metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    """What is stored with a consolidation's memories: its reason, then the caller's."""
    return {"reason": "threshold" if pending >= threshold else "forced", **(metadata or {})}


def _store(
    mem: Memory,
    kw: dict[str, Any],
    table: str,
    pending: int,
    entries: list[MemoryRecord],
    answer: object,
    metadata: Mapping[str, Any] | None = None,
    marks: Mapping[str, Any] | None = None,
) -> ConsolidationReport:
    extra = dict(metadata or {})
    # A report keeps the answer when it is text; otherwise the error names what came back.
    raw = answer if isinstance(answer, str) else None
    if raw is not None and len(raw) > MAX_ANSWER_CHARS:
        why = f"the answer has {len(raw)} characters, more than the {MAX_ANSWER_CHARS} an "
        error = f"ParseError: {why}answer may have"
        return ConsolidationReport("failed", pending, error=error, raw=raw)
    try:
        data = parse_summary(answer)
    except ParseError as e:
        return ConsolidationReport("failed", pending, error=f"ParseError: {e}", raw=raw)
    if len(data["facts"]) > MAX_OPERATIONS:  # a runaway answer would flood the scope
        why = f"{len(data['facts'])} facts, more than the {MAX_OPERATIONS} an answer may hold"
        return ConsolidationReport("failed", pending, error=f"ParseError: {why}", raw=raw)
    source_ids = [r.id for r in entries]
    meta = {k: data[k] for k in ("facts", "pending", "tone", "preferences", "confidence")}
    # The facts were said with the latest entry, not when the model answered: the check
    # orders them by that (a late run's "lives in Paris" must not replace the "Oslo"
    # said since). Without an entry's order, their time alone orders them.
    last = latest_learned(entries)
    said = {k: v for k, v in (marks or {}).items() if k != LEARNED}
    if LEARNED in last.metadata:
        said[LEARNED] = last.metadata[LEARNED]
    items: list[dict[str, Any]] = [
        {
            "text": data["summary"],
            "table": table,
            "type": "episodic",
            "importance": 0.5 + 0.3 * data["confidence"],
            "metadata": {
                **meta,
                "consolidated_from": source_ids,
                "messageTypes": sorted({_message_type(r) for r in entries}),
                "start": entries[0].created_at,
                "end": entries[-1].created_at,
                **extra,
            },
            **kw,
        }
    ]
    items += [
        {
            "text": fact,
            "table": table,
            "type": "semantic",
            "importance": 0.6,
            "unique": True,
            "metadata": {
                "source": "consolidation",
                "confidence": data["confidence"],
                **extra,
                **said_together(said, i),
            },
            "created_at": max(r.created_at for r in entries),
            **kw,
        }
        for i, fact in enumerate(dict.fromkeys(data["facts"]))
    ]
    try:
        # One transaction: the summary and facts stored, their sources gone, or nothing.
        # The entries as shown to the model: one rewritten since is not summarised.
        stored = mem.add_many(items, consume=entries)
    except ConflictError as e:  # another consolidation (or complete_action) came first
        why = f"its entries were consolidated or removed meanwhile, or rewritten: {e}"
        return ConsolidationReport("skipped", pending, error=why, raw=raw)
    except MemlaneError as e:
        return ConsolidationReport("failed", pending, error=f"{type(e).__name__}: {e}", raw=raw)
    return ConsolidationReport(
        "consolidated",
        pending - len(source_ids),
        episodic=stored[0],
        semantic=[r for r in stored[1:] if r.duplicate is None],
        removed=source_ids,
        raw=raw,
    )


def consolidate(
    mem: Memory,
    llm: LLM,
    *,
    scope: Mapping[str, str] | None = None,
    threshold: int = 12,
    batch: int = 12,
    table: str = "memories",
    force: bool = False,
    metadata: Mapping[str, Any] | None = None,
    marks: Mapping[str, Any] | None = None,
) -> ConsolidationReport:
    """Summarises the oldest ``batch`` short-term entries of exactly ``scope`` (None: the
    entries with no scope field beyond the store's ``default_scope``) once ``threshold``
    exist: what the summary and its facts say stays in the scope it was said in.

    Call it after adding short-term entries: below the threshold it only
    counts (``"skipped"``). ``force=True`` consolidates whatever there is (at
    least one entry). Never raises for the LLM: its errors and unusable
    answers (one longer than ``MAX_ANSWER_CHARS`` characters, or of more than
    ``MAX_OPERATIONS`` facts, is not one it was asked for) give a ``"failed"`` report
    and leave every entry in place.
    ``metadata`` is added to what it stores (the agent's upkeep names its job),
    ``marks`` to the facts only (the check of new facts marks them).
    """
    kw = scope_kwargs(scope)
    pending, entries = _select(mem, scope, threshold, batch, force)
    if not entries:
        return ConsolidationReport("skipped", pending)
    try:
        raw = llm.complete(_prompt(entries))
    except Exception as e:  # the LLM's failure must not lose or raise anything
        return ConsolidationReport("failed", pending, error=f"{type(e).__name__}: {e}")
    why = _why(pending, threshold, metadata)
    return _store(mem, kw, table, pending, entries, raw, why, marks)


async def aconsolidate(
    mem: Memory | AsyncMemory,
    llm: AsyncLLM,
    *,
    scope: Mapping[str, str] | None = None,
    threshold: int = 12,
    batch: int = 12,
    table: str = "memories",
    force: bool = False,
    metadata: Mapping[str, Any] | None = None,
) -> ConsolidationReport:
    """``consolidate`` with an async LLM (``acomplete``); store calls run in a worker thread."""
    sync = sync_memory(mem)
    kw = scope_kwargs(scope)
    pending, entries = await asyncio.to_thread(_select, sync, scope, threshold, batch, force)
    if not entries:
        return ConsolidationReport("skipped", pending)
    try:
        raw = await llm.acomplete(_prompt(entries))
    except Exception as e:  # the LLM's failure must not lose or raise anything
        return ConsolidationReport("failed", pending, error=f"{type(e).__name__}: {e}")
    why = _why(pending, threshold, metadata)
    return await asyncio.to_thread(_store, sync, kw, table, pending, entries, raw, why)
