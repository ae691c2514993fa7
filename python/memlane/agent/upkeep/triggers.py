"""The triggers ``AgentMemory`` runs: their settings, the per-room
state that says when they are due, and what each does when it fires (step compaction in
``before``; reflection, consolidation and the flush reminder in ``after``):

=================  ==========================================================  ============
trigger            fires                                                       settings
=================  ==========================================================  ============
reflection         every 10 turns of a room: the last 20 messages, up to 50    Reflection
                   stored memories shown, 500 output tokens
consolidation      12 short-term entries in the scope (a contact's), or the    Consolidation
                   oldest is 10 minutes old (the oldest 12 are summarised)
flush reminder     25 new entries since the last one, 30-minute cooldown: the  FlushReminder
                   next ``before`` asks the model to save what matters
step compaction    more than 10 steps: the first 2 and last 5 kept, the        Compaction
                   middle summarised (in ``before``)
daily log          the first turn of a day: each of the last 7 days with       DailyLog
                   messages and no log gets one (LLM summary, or an extract
                   without one); the newest 3 go into the context
contact profile    every turn: the speaker's aliases, platform ids, last seen  Profiles
                   and message count (``memlane.agent.profiles``)
=================  ==========================================================  ============
"""

from __future__ import annotations

import hashlib
import logging
import math
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from memlane import coerce
from memlane.agent.callers import Budgeted, Caller
from memlane.agent.caps import Limits, cap_record
from memlane.agent.consolidation import SHORT_TERM, consolidate
from memlane.agent.history import MESSAGES
from memlane.agent.llm import ChatMessage
from memlane.agent.messages import SUMMARY_TAG, group_steps, render_step
from memlane.agent.parsing import answer_text
from memlane.agent.reflection import Extraction, Resume, reflect, reflect_planned
from memlane.agent.reports import CompactionReport, TriggerFailure, TurnReport, UpkeepResult
from memlane.agent.upkeep import cadence
from memlane.agent.upkeep.jobs import JOB_TAG, earlier_windows
from memlane.errors import InvalidArgumentError
from memlane.scoping import EventScope, exact_scope

if TYPE_CHECKING:
    from memlane.memory import Memory
    from memlane.records import MemoryRecord

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
            [`OpenAIChat`][memlane.OpenAIChat] (500).
        enabled: False turns it off.
        prompt: the instructions of what to remember, in place of memlane's (the answer's
            format is always added).
        categories: the kinds of fact it may remember (e.g. ``("preference",
            "biography")``): each remembered fact names one, kept as
            ``metadata["category"]``.
    """

    every: int = 10
    window: int = 20
    shown: int = 50
    max_output_tokens: int = 500
    enabled: bool = True
    prompt: str | None = None
    categories: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for label in ("every", "window", "shown", "max_output_tokens"):
            coerce.count(getattr(self, label), f"Reflection.{label}", 1)
        if self.prompt is not None and (
            not isinstance(self.prompt, str) or not self.prompt.strip()
        ):
            raise InvalidArgumentError("Reflection.prompt must be a non-empty str or None")
        cats = self.categories
        if isinstance(cats, str) or not all(isinstance(c, str) and c.strip() for c in cats):
            raise InvalidArgumentError("Reflection.categories must be a sequence of non-empty str")
        object.__setattr__(self, "categories", tuple(c.strip() for c in cats))

    @property
    def extraction(self) -> Extraction:
        return Extraction(self.prompt, self.categories)


@dataclass(frozen=True, slots=True)
class Consolidation:
    """Consolidation of the short-term tier, as OrcBot consolidates each contact's
    interactions: in batches of 12 (its ``interactionBatchSize``), within 10 minutes.

    Attributes:
        threshold: short-term entries in the scope that trigger it (12).
        batch: the oldest entries summarised at once (12).
        max_age: seconds after which the oldest entry triggers it however few
            there are (600: 10 minutes). OrcBot's heartbeat consolidates a contact
            whose newest entry is 10 minutes old; the trigger runs at a turn of the
            contact, whose entry is new, so the oldest is what can be old.
        record_turns: ``after`` stores each turn as a short-term entry (True).
        enabled: False turns the trigger off (turns are still recorded).
    """

    threshold: int = 12
    batch: int = 12
    max_age: float = 600.0
    record_turns: bool = True
    enabled: bool = True

    def __post_init__(self) -> None:
        coerce.count(self.threshold, "Consolidation.threshold", 1)
        coerce.count(self.batch, "Consolidation.batch", 1)
        coerce.seconds(self.max_age, "Consolidation.max_age")


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
        coerce.count(self.entries, "FlushReminder.entries", 1)
        coerce.seconds(self.cooldown, "FlushReminder.cooldown")
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
        coerce.count(self.keep_first, "Compaction.keep_first", 0)
        coerce.count(self.keep_last, "Compaction.keep_last", 0)
        coerce.count(self.max_output_tokens, "Compaction.max_output_tokens", 1)
        coerce.count(self.max_steps, "Compaction.max_steps", self.keep_first + self.keep_last + 1)


@dataclass(slots=True)
class Room:
    turns: int = 0
    since_reflection: int = 0
    #: The turn times of the windows failed reflections left unreflected: the room's
    #: next turn retries them (up to ``MAX_SPAN`` windows in all).
    reflection_missed: list[float] = field(default_factory=list)
    #: The records of those failed reflections, still held: a process that ends before
    #: the room's next reflection leaves them to the next AgentMemory; that reflection,
    #: recorded, covers them and drops them.
    failed_reflections: list[str] = field(default_factory=list)
    new_entries: int = 0
    last_flush: float | None = None
    flush_due: str | None = None
    user_text: str | None = None
    compactions: list[CompactionReport] = field(default_factory=list)
    failures: list[TriggerFailure] = field(default_factory=list)
    #: Step summaries by the key of the steps they summarise (see ``step_keys``).
    summaries: dict[str, str] = field(default_factory=dict)
    #: A step summary is being written in the background.
    compacting: bool = False
    #: Background upkeep done since the room's last ``after``.
    upkeep: list[UpkeepResult] = field(default_factory=list)

    def leave_windows(self, windows: Sequence[float]) -> None:
        """Leaves ``windows`` (turn times) to the room's next turn; the caller holds
        the lock that guards the room."""
        self.reflection_missed = list(earlier_windows([*self.reflection_missed, *windows]))


def step_keys(rendered: list[str]) -> list[str]:
    """The key of each prefix of ``rendered`` steps (one hash fed step by step)."""
    h = hashlib.sha256()
    keys = []
    for text in rendered:
        h.update(text.encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
        keys.append(h.hexdigest())
    return keys


def summarise_steps(
    cfg: Compaction, text: str, steps: int, call: Caller
) -> tuple[str | None, CompactionReport]:
    """The LLM's summary of ``text`` (``steps`` steps), and the report of it."""
    prompt: list[ChatMessage] = [
        {"role": "system", "content": _COMPACT_SYSTEM},
        {"role": "user", "content": f"Steps, oldest first:\n\n{text}"},
    ]
    try:
        summary = answer_text(call(prompt, cfg.max_output_tokens), "the summary")
    except Exception as e:  # the loop goes on with every step kept
        report = CompactionReport("failed", steps, steps, error=f"{type(e).__name__}: {e}")
        log.warning("memlane: compaction failed: %s", report.error)
        return None, report
    return summary, CompactionReport("compacted", steps, steps, summary)


def compact(
    cfg: Compaction,
    room: Room,
    lock: threading.RLock,
    msgs: list[dict[str, Any]],
    call: Caller | None,
    background: Callable[[str, str, int], None] | None = None,
) -> list[dict[str, Any]]:
    """``msgs`` with the middle steps replaced by a summary, when there are too many.

    Inline (``background`` None), the summary of the whole middle is written now. With
    ``background``, the longest run of middle steps already summarised is replaced and
    the rest kept as they are; ``background(key, text, steps)`` is asked for the
    summary of the whole middle, for a later call of the turn (one at a time per room).
    """
    if not cfg.enabled or call is None:
        return msgs
    steps = group_steps(msgs)
    if len(steps) <= cfg.max_steps:
        return msgs
    end = len(steps) - cfg.keep_last
    middle = steps[cfg.keep_first : end]
    rendered = [render_step(s) for s in middle]
    keys = step_keys(rendered)
    with lock:
        done = next((n for n in range(len(keys), 0, -1) if keys[n - 1] in room.summaries), 0)
        summary = room.summaries.get(keys[done - 1]) if done else None
    if done < len(keys):
        text = "\n\n".join(rendered)
        if background is not None:
            with lock:
                asking, room.compacting = not room.compacting, True
            if asking:
                background(keys[-1], text, len(middle))
        else:
            summary, report = summarise_steps(cfg, text, len(steps), call)
            if summary is None:
                with lock:
                    room.compactions.append(report)
                return msgs
            done = len(keys)
            keep = cfg.keep_first + 1 + cfg.keep_last
            with lock:
                room.summaries = {keys[-1]: summary}  # the newest only
                room.compactions.append(CompactionReport("compacted", len(steps), keep, summary))
    if summary is None:
        return msgs
    note = {
        "role": "user",
        "content": f"{SUMMARY_TAG} ({done} steps)\n{summary}",
    }
    kept = [m for s in steps[: cfg.keep_first] for m in s]
    rest = [m for s in middle[done:] for m in s]
    tail = [m for s in steps[end:] for m in s]
    return [*kept, note, *rest, *tail]


def store_step_summary(
    cfg: Compaction,
    room: Room,
    lock: threading.RLock,
    key: str,
    text: str,
    steps: int,
    call: Caller,
) -> CompactionReport:
    """The background half of ``compact``: the summary, kept for the room's next call."""
    summary, report = summarise_steps(cfg, text, steps, call)
    with lock:
        room.compacting = False
        if summary is not None:
            room.summaries = {key: summary}
        room.compactions.append(report)
    return report


def run_reflection(
    memory: Memory,
    cfg: Reflection,
    table: str,
    limits: Limits,
    lock: threading.RLock,
    event: EventScope,
    room: Room,
    report: TurnReport,
    call: Caller | None,
    now: float,
    job: str | None = None,
    *,
    resume: Resume | None = None,
    plan: dict[str, Any] | None = None,
    marks: dict[str, Any] | None = None,
    span: int = 1,
    ends: tuple[float, ...] = (),
) -> None:
    """Reflection over the room's last messages up to the turn at ``now``, once
    ``cfg.every`` turns have passed (``job``: the upkeep job running it, named in what
    it stores; the job decided it was due; ``resume``: how the job keeps its place;
    ``plan``: the model's answer the job kept before a crash, applied without the model).
    What it stores is dated at the end of the latest window it shows, when that was said
    (a retry's is earlier than its turn), and it changes no memory stated after that."""
    metadata = None if job is None else {JOB_TAG: job}
    if plan is not None and resume is not None:  # the model answered before a crash
        result = reflect_planned(
            memory,
            plan,
            scope=event.fields,
            table=table,
            now=max([*ends, *[now] * span], default=now),
            metadata=metadata,
            resume=resume,
            marks=marks,
            extraction=cfg.extraction,
        )
    elif not cfg.enabled or call is None:
        return
    else:
        if job is None:  # inline: what is due, and the windows failed reflections left
            with lock:
                span = cadence.windows(room.since_reflection, cfg.every)
                if not span and not room.reflection_missed:
                    return
                room.since_reflection = 0 if span else room.since_reflection
                ends = earlier_windows([*room.reflection_missed, *ends], span)
                room.reflection_missed = []
            if span:  # inline, the windows left are this object's own (see agents.md)
                cadence.reflected(memory, table, event.history, now)
        # Exactly the room's scope: an agent without agent_id is not shown another's turns.
        history, only = exact_scope(memory, event.history)
        # A job that took the place of waiting or failed ones shows what each would have
        # shown, each message once, in the order said. Windows that end at one time (a
        # clock that gave two turns one reading) are counted back together.
        windows = Counter(ends)
        if span:  # a retry of failed windows alone has none of its own
            windows[now] += span
        try:
            shown: dict[str, MemoryRecord] = {}
            for end, count in sorted(windows.items()):
                limit = cfg.window * count
                said = memory.list(MESSAGES, end=_after(end), limit=limit, filters=only, **history)
                for r in said[::-1]:
                    shown.setdefault(r.id, r)
            recent = sorted(shown.values(), key=lambda r: r.created_at)
            window = [
                {"role": str(r.metadata.get("role", "user")), "content": r.text} for r in recent
            ]
            result = reflect(
                memory,
                Budgeted(call, cfg.max_output_tokens),
                window,
                scope=event.fields,
                table=table,
                k=cfg.shown,
                now=max(windows, default=now),
                metadata=metadata,
                resume=resume,
                marks=marks,
                extraction=cfg.extraction,
                max_tokens=cfg.max_output_tokens,
            )
        except BaseException:
            if job is None:  # a store error: the windows wait as a model's failure's do
                with lock:
                    room.leave_windows([*ends, *[now] * span])
            raise
    report.reflection = result
    if result.error is not None:
        report.failures.append(TriggerFailure("reflection", result.error))
        if job is None:  # shown by the room's next reflection
            with lock:
                room.leave_windows([*ends, *[now] * span])
        return
    for rec in [*result.added, *result.updated]:
        cap_record(memory, limits, rec, call, report)
    with lock:
        room.new_entries += len(result.added)


def consolidation_due(
    memory: Memory, cfg: Consolidation, event: EventScope, call: Caller | None, now: float
) -> bool | None:
    """Whether consolidation of the scope's short-term tier is due: None if not, else
    whether it is forced (the oldest entry is old, the tier not full)."""
    if not cfg.enabled or call is None:
        return None
    # Exactly the scope's entries: an agent without an agent_id is not due for the
    # entries of the agents with one that share its other fields.
    scope, only = exact_scope(memory, event.fields)
    pending = memory.count(SHORT_TERM, filters=only, **scope)
    if pending == 0:
        return None
    if pending >= cfg.threshold:
        return False
    oldest = memory.list(SHORT_TERM, limit=1, order="asc", filters=only, **scope)
    if not oldest or now - oldest[0].created_at < cfg.max_age:
        return None
    return True


def run_consolidation(
    memory: Memory,
    cfg: Consolidation,
    table: str,
    limits: Limits,
    lock: threading.RLock,
    event: EventScope,
    room: Room,
    report: TurnReport,
    call: Caller | None,
    now: float,
    job: str | None = None,
    marks: dict[str, Any] | None = None,
) -> None:
    """Consolidation of the scope's short-term tier, when it is full or its oldest is old
    (``job``: the upkeep job running it, named in what it stores; ``marks``: added to the
    facts it stores, for the check of new facts)."""
    force = consolidation_due(memory, cfg, event, call, now)
    if force is None or call is None:
        return
    result = consolidate(
        memory,
        Budgeted(call, None),
        scope=event.fields,
        threshold=cfg.threshold,
        batch=cfg.batch,
        table=table,
        force=force,
        metadata=None if job is None else {JOB_TAG: job},
        marks=marks,
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
    room: Room,
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


def _after(t: float) -> float:
    """The first time after ``t`` (``list``'s ``end`` is exclusive)."""
    return math.nextafter(t, math.inf)
