"""The triggers :class:`~memlane.agent.AgentMemory` runs: their settings, the per-room
state that says when they are due, and what each does when it fires (step compaction in
``before``; reflection, consolidation and the flush reminder in ``after``)."""

from __future__ import annotations

import hashlib
import logging
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from memlane.agent.callers import Caller, _Budgeted
from memlane.agent.checks import _int, _seconds
from memlane.agent.consolidation import SHORT_TERM, consolidate
from memlane.agent.context import MESSAGES
from memlane.agent.limits import Limits, _kw, cap_record
from memlane.agent.llm import ChatMessage, LLMError
from memlane.agent.messages import _SUMMARY_TAG, _render_step, _steps
from memlane.agent.reflection import reflect
from memlane.agent.reports import CompactionReport, TriggerFailure, TurnReport
from memlane.agent.scope import EventScope
from memlane.errors import InvalidArgumentError

if TYPE_CHECKING:
    from memlane.memory import Memory

__all__ = ["FLUSH_MESSAGE", "Compaction", "Consolidation", "FlushReminder", "Reflection"]

log = logging.getLogger("memlane.agent")

FLUSH_MESSAGE = (
    "## Save what matters\n"
    "{entries} new entries were written to memory since the last reminder. Before they are "
    "consolidated, store with `remember` any durable fact, preference or decision from "
    "this conversation that is not already in memory."
)

_COMPACT_SYSTEM = (
    "You compact an AI agent's step history. Summarise the steps below in a few sentences: "
    "what was tried, what each tool returned that is still needed, decisions made and what "
    "remains open. Answer with the summary only."
)


@dataclass(frozen=True, slots=True)
class Reflection:
    """Reflection every ``every`` turns of a room (Nous's defaults).

    Attributes:
        every: turns between reflections (10).
        window: the room's last messages shown to the model (20).
        shown: stored memories shown at most (50).
        max_output_tokens: the answer's budget, sent as ``max_tokens`` to an
            :class:`OpenAIChat` (500).
        enabled: False turns it off.
    """

    every: int = 10
    window: int = 20
    shown: int = 50
    max_output_tokens: int = 500
    enabled: bool = True

    def __post_init__(self) -> None:
        for label in ("every", "window", "shown", "max_output_tokens"):
            _int(getattr(self, label), f"Reflection.{label}", 1)


@dataclass(frozen=True, slots=True)
class Consolidation:
    """Consolidation of the short-term tier (OrcBot's triggers).

    Attributes:
        threshold: short-term entries in the scope that trigger it (30).
        batch: the oldest entries summarised at once (20).
        max_age: seconds after which the oldest entry triggers it however few
            there are (600: 10 minutes).
        record_turns: ``after`` stores each turn as a short-term entry (True).
        enabled: False turns the trigger off (turns are still recorded).
    """

    threshold: int = 30
    batch: int = 20
    max_age: float = 600.0
    record_turns: bool = True
    enabled: bool = True

    def __post_init__(self) -> None:
        _int(self.threshold, "Consolidation.threshold", 1)
        _int(self.batch, "Consolidation.batch", 1)
        _seconds(self.max_age, "Consolidation.max_age")


@dataclass(frozen=True, slots=True)
class FlushReminder:
    """OrcBot's memory-flush reminder: after ``entries`` new entries in a room, the next
    ``before`` tells the model to save what matters, at most once per ``cooldown``.

    Attributes:
        entries: new entries (history, short-term, memories) that trigger it (25).
        cooldown: seconds between two reminders (1800: 30 minutes).
        message: the text, with ``{entries}`` filled in.
        enabled: False turns it off. It needs the tools (``tools=True``).
    """

    entries: int = 25
    cooldown: float = 1800.0
    message: str = FLUSH_MESSAGE
    enabled: bool = True

    def __post_init__(self) -> None:
        _int(self.entries, "FlushReminder.entries", 1)
        _seconds(self.cooldown, "FlushReminder.cooldown")
        if not isinstance(self.message, str) or not self.message.strip():
            raise InvalidArgumentError("FlushReminder.message must be a non-empty str")


@dataclass(frozen=True, slots=True)
class Compaction:
    """Step-history compaction in ``before`` (OrcBot's).

    A step is a message after the system prompt, with the tool results that answer it.
    Past ``max_steps`` steps, the first ``keep_first`` and last ``keep_last`` are kept and
    the ones between are replaced by one message with the LLM's summary.

    Attributes:
        max_steps: steps allowed before compacting (10).
        keep_first, keep_last: steps kept as they are (2 and 5).
        max_output_tokens: the summary's budget (500).
        enabled: False turns it off.
    """

    max_steps: int = 10
    keep_first: int = 2
    keep_last: int = 5
    max_output_tokens: int = 500
    enabled: bool = True

    def __post_init__(self) -> None:
        _int(self.keep_first, "Compaction.keep_first", 0)
        _int(self.keep_last, "Compaction.keep_last", 0)
        _int(self.max_output_tokens, "Compaction.max_output_tokens", 1)
        _int(self.max_steps, "Compaction.max_steps", self.keep_first + self.keep_last + 1)


@dataclass(slots=True)
class _Room:
    turns: int = 0
    since_reflection: int = 0
    new_entries: int = 0
    last_flush: float | None = None
    flush_due: str | None = None
    user_text: str | None = None
    compactions: list[CompactionReport] = field(default_factory=list)
    failures: list[TriggerFailure] = field(default_factory=list)
    summaries: dict[str, str] = field(default_factory=dict)


def compact(
    cfg: Compaction,
    room: _Room,
    lock: threading.RLock,
    msgs: list[dict[str, Any]],
    call: Caller | None,
) -> list[dict[str, Any]]:
    """``msgs`` with the middle steps replaced by a summary, when there are too many."""
    if not cfg.enabled or call is None:
        return msgs
    steps = _steps(msgs)
    if len(steps) <= cfg.max_steps:
        return msgs
    end = len(steps) - cfg.keep_last
    middle = steps[cfg.keep_first : end]
    text = "\n\n".join(_render_step(s) for s in middle)
    key = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    summary = room.summaries.get(key)
    if summary is None:
        prompt: list[ChatMessage] = [
            {"role": "system", "content": _COMPACT_SYSTEM},
            {"role": "user", "content": f"Steps, oldest first:\n\n{text}"},
        ]
        try:
            summary = call(prompt, cfg.max_output_tokens).strip()
            if not summary:
                raise LLMError("the model returned an empty summary")
        except Exception as e:  # the loop goes on with every step kept
            report = CompactionReport(
                "failed", len(steps), len(steps), error=f"{type(e).__name__}: {e}"
            )
            log.warning("memlane: compaction failed: %s", report.error)
            with lock:
                room.compactions.append(report)
            return msgs
        with lock:
            room.summaries = {key: summary}  # the newest only
            room.compactions.append(
                CompactionReport(
                    "compacted", len(steps), cfg.keep_first + 1 + cfg.keep_last, summary
                )
            )
    note = {
        "role": "user",
        "content": f"{_SUMMARY_TAG} ({len(middle)} steps)\n{summary}",
    }
    kept = [m for s in steps[: cfg.keep_first] for m in s]
    tail = [m for s in steps[end:] for m in s]
    return [*kept, note, *tail]


def run_reflection(
    memory: Memory,
    cfg: Reflection,
    table: str,
    limits: Limits,
    lock: threading.RLock,
    event: EventScope,
    room: _Room,
    report: TurnReport,
    call: Caller | None,
    now: float,
) -> None:
    """Reflection over the room's last messages, once ``cfg.every`` turns have passed."""
    if not cfg.enabled or call is None or room.since_reflection < cfg.every:
        return
    recent = memory.list(MESSAGES, limit=cfg.window, **_kw(event.history))[::-1]
    window = [{"role": str(r.metadata.get("role", "user")), "content": r.text} for r in recent]
    result = reflect(
        memory,
        _Budgeted(call, cfg.max_output_tokens),
        window,
        scope=event.fields,
        table=table,
        k=cfg.shown,
        now=now,
    )
    report.reflection = result
    if result.error is not None:
        report.failures.append(TriggerFailure("reflection", result.error))
        return
    with lock:
        room.since_reflection = 0
    for rec in [*result.added, *result.updated]:
        cap_record(memory, limits, rec, call, report)
    with lock:
        room.new_entries += len(result.added)


def run_consolidation(
    memory: Memory,
    cfg: Consolidation,
    table: str,
    limits: Limits,
    lock: threading.RLock,
    event: EventScope,
    room: _Room,
    report: TurnReport,
    call: Caller | None,
    now: float,
) -> None:
    """Consolidation of the scope's short-term tier, when it is full or its oldest is old."""
    if not cfg.enabled or call is None:
        return
    pending = memory.count(SHORT_TERM, **_kw(event.fields))
    if pending == 0:
        return
    force = False
    if pending < cfg.threshold:
        oldest = memory.list(SHORT_TERM, limit=1, order="asc", **_kw(event.fields))
        if not oldest or now - oldest[0].created_at < cfg.max_age:
            return
        force = True
    result = consolidate(
        memory,
        _Budgeted(call, None),
        scope=event.fields,
        threshold=cfg.threshold,
        batch=cfg.batch,
        table=table,
        force=force,
    )
    report.consolidation = result
    if result.status == "failed":
        report.failures.append(TriggerFailure("consolidation", result.error or "failed"))
        return
    made = [r for r in [result.episodic, *result.semantic] if r is not None]
    for rec in made:
        cap_record(memory, limits, rec, call, report)
    with lock:
        room.new_entries += len(made)


def run_flush(
    cfg: FlushReminder,
    tools: bool,
    lock: threading.RLock,
    room: _Room,
    report: TurnReport,
    now: float,
) -> None:
    """The flush reminder for the next ``before``, after enough new entries and the cooldown."""
    if not cfg.enabled or not tools:
        return
    with lock:
        if room.new_entries < cfg.entries:
            return
        if room.last_flush is not None and now - room.last_flush < cfg.cooldown:
            return
        room.flush_due = cfg.message.replace("{entries}", str(room.new_entries))
        room.last_flush = now
        room.new_entries = 0
        report.flush_reminder = room.flush_due
