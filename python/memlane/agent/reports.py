"""What ``AgentMemory`` and its loop adapters report back."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from memlane.agent.consolidation import ConsolidationReport
from memlane.agent.facts import FactReport
from memlane.agent.reflection import ReflectionReport

if TYPE_CHECKING:
    from memlane.agent.profiles import ContactProfile
    from memlane.records import MemoryRecord

__all__ = ["CompactionReport", "TriggerFailure", "TurnReport", "TurnResult", "UpkeepResult"]


@dataclass(slots=True, frozen=True)
class TriggerFailure:
    """A trigger that did not complete: ``trigger`` is ``reflection``, ``consolidation``,
    ``compaction``, ``summarize``, ``eviction``, ``flush``, ``daily`` (a daily log),
    ``profile`` (the contact's profile; that turn is not counted in it) or ``context``
    (``before`` could not build the context block: the model got none that call); it
    runs again later."""

    trigger: str
    error: str


@dataclass(slots=True)
class CompactionReport:
    """One compaction in ``before``: ``status`` ``"compacted"`` or ``"failed"``."""

    status: Literal["compacted", "failed"]
    steps_before: int
    steps_after: int
    summary: str | None = None
    error: str | None = None


@dataclass(slots=True)
class TurnReport:
    """What [`AgentMemory.after`][memlane.AgentMemory.after] did.

    ``stored``: the turn's history records; ``short_term``: its short-term entries;
    ``splits``: ``(what, parts)`` for each entry split by the length cap;
    ``reflection``, ``consolidation``, ``facts`` (the check of new facts): their
    reports when they ran;
    ``compactions``: those ``before`` did since the previous ``after`` of the room;
    ``flush_reminder``: the reminder scheduled for the next ``before``;
    ``evicted``: memories removed by the cap; ``daily_logs``: the daily logs
    written; ``profile``: the speaker's contact profile as updated; ``failures``:
    what failed (and will run again); ``upkeep``: the background upkeep finished
    since the room's previous turn (its failures are in ``failures`` too).

    With background upkeep (the default), a turn's own report holds what the turn
    stored and the flush reminder; what its upkeep does arrives in ``upkeep`` of a
    later turn's report, and through ``AgentMemory``'s ``on_upkeep`` callback.
    """

    stored: list[MemoryRecord] = field(default_factory=list)
    short_term: list[MemoryRecord] = field(default_factory=list)
    splits: list[tuple[str, int]] = field(default_factory=list)
    reflection: ReflectionReport | None = None
    consolidation: ConsolidationReport | None = None
    facts: FactReport | None = None
    compactions: list[CompactionReport] = field(default_factory=list)
    flush_reminder: str | None = None
    evicted: list[MemoryRecord] = field(default_factory=list)
    daily_logs: list[MemoryRecord] = field(default_factory=list)
    profile: ContactProfile | None = None
    failures: list[TriggerFailure] = field(default_factory=list)
    upkeep: list[UpkeepResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures


@dataclass(slots=True)
class UpkeepResult:
    """One background upkeep job done: its ``kind`` (``reflection``, ``consolidation``,
    ``facts``, ``daily``, ``profile``, ``eviction`` or ``compaction``), the time of the
    turn that asked for it, what it did (a [`TurnReport`][memlane.agent.TurnReport]
    holding only that) and what it cost."""

    kind: str
    asked_at: float
    report: TurnReport
    #: Model calls the job made, and their tokens in and out (counted with the default
    #: model's tokenizer: an estimate of what the provider bills).
    calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0

    def cost(self, per_million_in: float, per_million_out: float) -> float:
        """The job's estimated cost at these prices (per million tokens in and out)."""
        return (self.tokens_in * per_million_in + self.tokens_out * per_million_out) / 1e6


@dataclass(slots=True)
class TurnResult:
    """What an adapter's ``run`` returns: the reply's text, the final assistant message,
    the conversation as sent (plus the reply) and the
    [`TurnReport`][memlane.agent.TurnReport]."""

    reply: str
    message: dict[str, Any]
    messages: list[dict[str, Any]]
    report: TurnReport
