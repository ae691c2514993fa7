"""Automatic memory around any agent loop: ``AgentMemory`` and its two calls.

>>> memory = AgentMemory(Memory("./agent-memory"), llm=OpenAIChat("m"))   # doctest: +SKIP
>>> messages = memory.before(event, messages)     # context + tool instructions injected
>>> report = memory.after(event, messages, reply)  # turn stored, triggers run

``before`` builds the context block (``build_context``) and, when tools
are on, the memory tools' usage instructions, and puts them in the system prompt
(``"first_only"``: once per turn; ``"every_iteration"``: rebuilt at every model call of
the turn); it also compacts a long step history. ``after`` stores the turn in the room's
history (and as a short-term entry) and runs the triggers (reflection, consolidation,
the flush reminder, step compaction, daily logs, contact profiles: when each fires is
in ``memlane.agent.upkeep.triggers``) and the limits (``Limits``): an entry
longer than 1,500 characters is split into several entries (or summarised), never cut;
past 10,000 memories in a scope, the least important, least used, oldest are evicted
(evergreen ones never), each eviction reported and logged.

With ``core_memory=`` on, pinned core memory blocks (as Letta's; see
``memlane.agent.core_memory``) of the event's scope head the memory block at
every ``before``, counted against ``max_tokens``, and the model edits them with
the ``core_memory_append`` / ``core_memory_replace`` tools.

A failing LLM (HTTP error, timeout, unparsable answer) never raises out of ``before``
or ``after`` and loses nothing: the turn is stored first, the trigger stays due and
runs again at the next turn, and the failure is in the report
(``TurnReport.failures``). Triggers that need an LLM do nothing without one (the
daily log is then an extract of the day's messages; see ``memlane.agent.daily``).

Time-based triggers read ``clock`` (default ``time.time``), and the entries
``after`` writes and what its tools remember carry its time, so tests can move time
without sleeping and a conversation can be replayed at its own dates.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from memlane import coerce
from memlane.agent.adapters import AnthropicLoop, OpenAILoop
from memlane.agent.adapters import ToolHandler as ToolHandler
from memlane.agent.callers import Caller, sync_caller, thread_caller
from memlane.agent.caps import Limits, fit, split_text, store_turn
from memlane.agent.consolidation import sync_memory
from memlane.agent.context import (
    Context,
    build_context,
    check_context_options,
)
from memlane.agent.core_memory import CoreMemory, Shared, block_limits
from memlane.agent.daily import DailyLog
from memlane.agent.injection import inject, inject_openai
from memlane.agent.llm import LLM, AsyncLLM
from memlane.agent.messages import (
    block_text,
    check_messages,
    last_user_text,
    reply_message,
)
from memlane.agent.profiles import ContactProfile, Profiles, contact_profile
from memlane.agent.reports import (
    CompactionReport,
    TriggerFailure,
    TurnReport,
    TurnResult,
    UpkeepResult,
)
from memlane.agent.turn_tools import TurnTools
from memlane.agent.upkeep import cadence
from memlane.agent.upkeep.jobs import Job
from memlane.agent.upkeep.service import Upkeep, UpkeepMode
from memlane.agent.upkeep.triggers import FLUSH_MESSAGE as FLUSH_MESSAGE
from memlane.agent.upkeep.triggers import (
    Compaction,
    Consolidation,
    FlushReminder,
    Reflection,
)
from memlane.errors import ClosedError, InvalidArgumentError, shown
from memlane.notes import NOTE_LIMITS, Notebook
from memlane.scoping import EventScope, SessionScope, platform_id

if TYPE_CHECKING:
    from memlane.aio import AsyncMemory
    from memlane.memory import Memory

__all__ = [
    "AgentMemory",
    "AnthropicLoop",
    "Compaction",
    "CompactionReport",
    "Consolidation",
    "DailyLog",
    "FlushReminder",
    "InjectMode",
    "Limits",
    "OpenAILoop",
    "Profiles",
    "Reflection",
    "TriggerFailure",
    "TurnReport",
    "TurnResult",
    "UpkeepResult",
    "split_text",
]

log = logging.getLogger("memlane.agent")

InjectMode = Literal["first_only", "every_iteration"]

# -- AgentMemory ------------------------------------------------------------------------------


class AgentMemory:
    """Memory around an agent loop: ``before`` each model call, ``after`` each turn.

    Args:
        memory: the store (a [`Memory`][memlane.Memory], or an
            [`AsyncMemory`][memlane.AsyncMemory] whose store is used).
        scopes: maps platform events to scopes (default ``SessionScope()``:
            per-peer); [`event`][memlane.AgentMemory.event] resolves one.
        llm: the model for reflection, consolidation, compaction and summaries;
            without one those triggers do nothing.
        max_tokens: the prompt's token budget for what memory adds (see
            [`build_context`][memlane.build_context]): the system prompt as given and
            the user's message come off it first, pinned core memory blocks next, and
            the context block gets the rest.
        tools: inject the memory tools' instructions (and let the adapters
            offer and run the tools).
        inject: ``"first_only"`` (the block is built at a turn's first model
            call and kept) or ``"every_iteration"`` (rebuilt at every call, so it
            shows what the tools just stored).
        reflection: when facts are drawn from the conversation (None: the defaults).
        consolidation: when the short-term tier is consolidated.
        flush: when the model is reminded to save what matters.
        compaction: when a turn's step history is compacted.
        daily: the daily logs.
        profiles: the contact profiles.
        limits: the limits on what is stored.
        table: where memories live.
        context: more keyword arguments for [`build_context`][memlane.build_context]
            (``budget``, ``inject_limit``, ``min_score``, ...).
        core_memory: pinned core memory blocks per scope (event ``fields``): True for
            ``persona`` and ``human`` of 2,000 characters each, or ``{label: limit}`` (a
            [`Shared`][memlane.agent.Shared] limit: one block for every agent of the same
            user); always in the memory block, their tokens taken from ``max_tokens``.
        clock: unix seconds now (default ``time.time``).
        upkeep: ``"background"`` (the default): reflection, consolidation, daily logs,
            profile updates, eviction and step summaries run on a background worker,
            so ``before`` and ``after`` never wait for an LLM; the jobs that would
            store twice if done twice are kept in the store until done, and resumed
            by the next AgentMemory on it after a crash. ``"inline"``: all of it runs
            in ``after`` (and step compaction in ``before``), as the turn's report shows.
        on_upkeep: called on the worker with each
            [`UpkeepResult`][memlane.agent.UpkeepResult] (what a job did, its failures
            included); the results also reach the next turn's ``TurnReport.upkeep``.
        upkeep_timeout: seconds a model call of the upkeep may take (None: no limit);
            past it the job fails and is due again, and no new call starts while the
            late one has not returned.
        max_pending: upkeep jobs that may wait at once, on each of the two workers (one
            for model calls, one for profiles and eviction); jobs of one kind and room
            coalesce while they wait, so this bounds how many rooms wait at once.
    """

    def __init__(
        self,
        memory: Memory | AsyncMemory,
        scopes: SessionScope | None = None,
        llm: LLM | AsyncLLM | None = None,
        *,
        max_tokens: int = 2000,
        tools: bool = True,
        inject: InjectMode = "first_only",
        reflection: Reflection | None = None,
        consolidation: Consolidation | None = None,
        flush: FlushReminder | None = None,
        compaction: Compaction | None = None,
        daily: DailyLog | None = None,
        profiles: Profiles | None = None,
        limits: Limits | None = None,
        table: str = "memories",
        context: Mapping[str, Any] | None = None,
        clock: Callable[[], float] | None = None,
        core_memory: bool | Mapping[str, int | Shared] = False,
        upkeep: UpkeepMode = "background",
        on_upkeep: Callable[[UpkeepResult], None] | None = None,
        upkeep_timeout: float | None = 120.0,
        max_pending: int = 100,
    ) -> None:
        if inject not in ("first_only", "every_iteration"):
            raise InvalidArgumentError(
                f"inject must be 'first_only' or 'every_iteration', got {shown(inject)}"
            )
        if llm is not None and not isinstance(llm, LLM | AsyncLLM):
            raise InvalidArgumentError(
                f"llm must have complete() or acomplete(), got {type(llm).__name__}"
            )
        if scopes is not None and not isinstance(scopes, SessionScope):
            raise InvalidArgumentError(f"scopes must be a SessionScope, got {shown(scopes)}")
        coerce.count(max_tokens, "max_tokens", 1)
        coerce.count(max_pending, "max_pending", 1)
        if upkeep_timeout is not None and not coerce.seconds(upkeep_timeout, "upkeep_timeout"):
            raise InvalidArgumentError("upkeep_timeout must be > 0 (or None: no limit)")
        for value, kind in (
            (reflection, Reflection),
            (consolidation, Consolidation),
            (flush, FlushReminder),
            (compaction, Compaction),
            (daily, DailyLog),
            (profiles, Profiles),
            (limits, Limits),
        ):
            if value is not None and not isinstance(value, kind):
                raise InvalidArgumentError(f"expected a {kind.__name__}, got {shown(value)}")
        check_context_options(context or {})
        if clock is not None and not callable(clock):
            raise InvalidArgumentError("clock must be a callable returning unix seconds")
        blocks = block_limits(core_memory)
        self.memory: Memory = sync_memory(memory)
        self.scopes = scopes or SessionScope()
        self.llm = llm
        self.max_tokens = max_tokens
        self.tools = bool(tools)
        self.inject: InjectMode = inject
        self.reflection = reflection or Reflection()
        self.consolidation = consolidation or Consolidation()
        self.flush = flush or FlushReminder()
        self.compaction = compaction or Compaction()
        self.daily = daily or DailyLog()
        self.profiles = profiles or Profiles()
        self.limits = limits or Limits()
        self.table = table
        self.context_options = dict(context or {})
        self.clock: Callable[[], float] = clock or time.time
        self.core_blocks = blocks
        self._core_ready: set[tuple[tuple[str, str], ...]] = set()
        self._token = uuid.uuid4().hex[:8]
        self._upkeep = Upkeep(self, upkeep, on_upkeep, upkeep_timeout, max_pending)
        self._lock = self._upkeep.lock

    # -- small public helpers ----------------------------------------------------------------

    def event(
        self,
        source: str,
        contact_id: str | int,
        chat_id: str | int | None = None,
        *,
        name: str | None = None,
        message_id: str | int | None = None,
    ) -> EventScope:
        """The scope of a platform event (``scopes.resolve``); ``name``: the sender's
        display name, kept in their contact profile; ``message_id``: the platform's id
        of the message, so that a message delivered twice is stored once."""
        return self.scopes.resolve(source, contact_id, chat_id, name=name, message_id=message_id)

    def contact(self, event: EventScope) -> ContactProfile | None:
        """The profile of the contact behind ``event`` (None if never seen)."""
        self._check_event(event)
        return contact_profile(self.memory, event)

    def memory_tools(
        self, event: EventScope, *, loop: asyncio.AbstractEventLoop | None = None
    ) -> TurnTools:
        """The memory tools bound to the event's scope, for a loop of your own (their
        ``remember`` keeps to the length cap and counts towards the flush reminder).
        ``loop``: the event loop an async-only LLM runs on, when the tools are called
        from a worker thread."""
        self._check_event(event)
        notes = None
        if (limits := self.context_options.get("notes", NOTE_LIMITS)) is not None:
            notes = Notebook(self.memory, event.fields, limits=limits, clock=self.clock)
        return TurnTools(
            self.memory,
            event,
            self._caller(loop),
            table=self.table,
            core=self.core(event),
            notes=notes,
            limits=self.limits,
            count=self._count,
            upkeep=self._upkeep,
        )

    def context(
        self,
        event: EventScope,
        message: str,
        max_tokens: int | None = None,
        system_prompt: str | None = None,
    ) -> Context:
        """The [`build_context`][memlane.build_context] of ``message`` with this object's budget (or
        ``max_tokens``) and options; the message and ``system_prompt`` come off the
        budget first."""
        self._check_event(event)
        budget = self.max_tokens if max_tokens is None else max_tokens
        return build_context(
            self.memory,
            message,
            event,
            budget,
            daily_limit=self.daily.days,
            profile=self.profiles.in_context,
            system_prompt=system_prompt,
            **self.context_options,
        )

    def core(self, event: EventScope) -> CoreMemory | None:
        """The core memory blocks of the event's scope (defined at first use), or None
        without ``core_memory``."""
        self._check_event(event)
        if not self.core_blocks:
            return None
        shared = {k: v for k, v in self.core_blocks.items() if isinstance(v, Shared)}
        core = CoreMemory(self.memory, event.fields, shared=shared)
        key = tuple(sorted(core.scope.items()))
        if key not in self._core_ready:
            for label, limit in self.core_blocks.items():
                core.define(label, limit=limit)
            with self._lock:
                self._core_ready.add(key)
        return core

    # -- before -----------------------------------------------------------------------------

    def before(
        self, event: EventScope, messages: Sequence[Mapping[str, Any]]
    ) -> list[dict[str, Any]]:
        """``messages`` (OpenAI style: the system prompt is a ``system`` message) with the
        memory block in the system prompt and a long step history compacted.

        Returns a new list; ``messages`` is left as it was.
        """
        return inject_openai(self, event, messages, self._caller())

    async def abefore(
        self, event: EventScope, messages: Sequence[Mapping[str, Any]]
    ) -> list[dict[str, Any]]:
        """The async form of [`before`][memlane.AgentMemory.before]: store calls in a thread."""
        call = self._caller(asyncio.get_running_loop())
        return await asyncio.to_thread(inject_openai, self, event, messages, call)

    def before_anthropic(
        self, event: EventScope, system: Any, messages: Sequence[Mapping[str, Any]]
    ) -> tuple[Any, list[dict[str, Any]]]:
        """[`before`][memlane.AgentMemory.before] for Anthropic's Messages API, where the
        system prompt (a str or text blocks) is separate: returns ``(system, messages)``."""
        return inject(self, event, system, messages, self._caller())

    async def abefore_anthropic(
        self, event: EventScope, system: Any, messages: Sequence[Mapping[str, Any]]
    ) -> tuple[Any, list[dict[str, Any]]]:
        """The async form of [`before_anthropic`][memlane.AgentMemory.before_anthropic]."""
        call = self._caller(asyncio.get_running_loop())
        return await asyncio.to_thread(inject, self, event, system, messages, call)

    # -- after ------------------------------------------------------------------------------

    def after(
        self,
        event: EventScope,
        messages: Sequence[Mapping[str, Any]],
        reply: Any,
        *,
        message_id: str | int | None = None,
    ) -> TurnReport:
        """Stores the turn (the last user message of ``messages``, or the one ``before``
        saw where a compaction summarised it, and ``reply``) in the room's history, then
        runs the triggers; returns what happened. The user messages before the last are
        taken as history, stored by their own turns: call it once a platform message.

        Every turn is kept, a repeated short reply too; ``message_id`` (default: the
        event's) is the platform's id of the user's message: a message delivered again
        with the same id in the same room, however late (the store's ``dedup_window`` does
        not bound it), is stored once, and is no new turn (no short-term entry, not counted
        towards the triggers or the profile). The turn is stored in one transaction, so a
        delivery cut short by a crash stored nothing and the next one stores it whole.

        ``reply`` is the model's final answer: a str, an assistant message (OpenAI's
        or Anthropic's, with content blocks), a raw chat completion or an SDK object.
        Store errors while storing the turn raise; nothing a trigger or the LLM does
        raises.
        """
        return self._after(event, messages, reply, self._caller(), message_id)

    async def aafter(
        self,
        event: EventScope,
        messages: Sequence[Mapping[str, Any]],
        reply: Any,
        *,
        message_id: str | int | None = None,
    ) -> TurnReport:
        """The async form of [`after`][memlane.AgentMemory.after] (store calls in a worker
        thread; an async LLM's calls run on the event loop)."""
        call = self._caller(asyncio.get_running_loop())
        return await asyncio.to_thread(self._after, event, messages, reply, call, message_id)

    def _after(
        self,
        event: EventScope,
        messages: Sequence[Mapping[str, Any]],
        reply: Any,
        call: Caller | None,
        message_id: str | int | None = None,
    ) -> TurnReport:
        self._check_open()
        self._check_event(event)
        mid = event.message_id if message_id is None else platform_id(message_id, "message_id")
        msgs = check_messages(messages)
        answer = block_text(reply_message(reply).get("content")).strip()
        room = self._upkeep.room(event)
        report = TurnReport()
        with self._lock:
            report.compactions, room.compactions = room.compactions, []
            report.failures, room.failures = room.failures, []
            report.upkeep, room.upkeep = room.upkeep, []
        report.failures += [
            TriggerFailure("compaction", c.error or "") for c in report.compactions if c.error
        ]
        report.failures += [f for done in report.upkeep for f in done.report.failures]
        user = last_user_text(msgs) or room.user_text
        now = coerce.timestamp(self.clock(), "clock()")
        # 1. The turn, before anything that can fail: one transaction, one embedding batch
        # (a message with an id first, so a redelivery adds no entry: see store_turn).
        said = [
            (role, text, mid if role == "user" else None)
            for role, text in (("user", user), ("assistant", answer))
            if text and text.strip()
        ]
        entries: list[str] = []
        if self.consolidation.record_turns and (user or answer):
            digest = "\n".join(
                f"{who}: {' '.join(t.split())}"
                for who, t in (("user", user), ("assistant", answer))
                if t
            )
            # No LLM on the turn's path in the background: an over-long entry is split.
            # Inline, the summary is an upkeep call, within upkeep_timeout (split if not).
            summarise = None if self._upkeep.background else self._upkeep.caller(call)
            entries = fit(digest, self.limits, summarise, report.failures)
            if len(entries) > 1:
                report.splits.append(("short-term entry", len(entries)))
        again = store_turn(self.memory, self.limits, event, said, entries, now, report)
        # The room's turns since its last reflection, counted in the store: other objects
        # and processes take turns in the room and reflect it too.
        counted = None
        if not again and self.reflection.enabled and call is not None:
            read, mark = cadence.read(self.memory, self.table, event.history)
            if read:
                counted = cadence.turns_after(self.memory, event.history, mark, now)
        with self._lock:
            if not again:  # a message delivered again is no new turn
                room.turns += 1
                room.since_reflection = room.since_reflection + 1 if counted is None else counted
            room.user_text = None
        new = [r for r in (*report.stored, *report.short_term) if r.duplicate is None]
        self._count(event, len(new))
        # 2. The triggers: each on its own, none raises (on the worker, by default); a
        # message delivered again is not counted in its sender's profile again.
        self._upkeep.after_turn(event, room, report, call, now, None if again else user)
        if not self._upkeep.background:
            for f in report.failures:
                log.warning("memlane: %s failed (it runs again later): %s", f.trigger, f.error)
        return report

    # -- upkeep -----------------------------------------------------------------------------

    def drain(self, timeout: float | None = None) -> bool:
        """Waits until the upkeep handed to the background worker so far is done (at most
        ``timeout`` seconds); True when nothing is left pending."""
        return self._upkeep.drain(timeout)

    async def adrain(self, timeout: float | None = None) -> bool:
        """The async form of [`drain`][memlane.AgentMemory.drain]."""
        return await asyncio.to_thread(self._upkeep.drain, timeout)

    def pending_upkeep(self) -> list[Job]:
        """The upkeep jobs handed to the worker and not done yet, oldest first."""
        return self._upkeep.pending()

    def close(self, timeout: float | None = 30.0) -> list[Job]:
        """Waits up to ``timeout`` seconds for the pending upkeep, then stops the worker
        (the job running finishes; the others are not started) and returns the jobs
        left. Reflection and consolidation jobs left stay recorded in the store and run
        when an AgentMemory is next used on it. The Memory stays open."""
        left = self._upkeep.close(timeout)
        if left:
            log.warning(
                "memlane: AgentMemory closed with %d upkeep job(s) not done: %s",
                len(left),
                ", ".join(sorted({j.kind for j in left})),
            )
        return left

    async def aclose(self, timeout: float | None = 30.0) -> list[Job]:
        """The async form of [`close`][memlane.AgentMemory.close]."""
        return await asyncio.to_thread(self.close, timeout)

    # -- internals --------------------------------------------------------------------------

    def _caller(self, loop: asyncio.AbstractEventLoop | None = None) -> Caller | None:
        if self.llm is None:
            return None
        return sync_caller(self.llm) if loop is None else thread_caller(self.llm, loop)

    def _check_open(self) -> None:
        if self._upkeep.closed:
            raise ClosedError("this AgentMemory is closed: make a new one (its Memory is open)")

    def _check_event(self, event: object) -> None:
        if not isinstance(event, EventScope):
            raise InvalidArgumentError(
                "event must be an EventScope (AgentMemory.event(source, contact, chat)), "
                f"got {type(event).__name__}"
            )

    def _count(self, event: EventScope, n: int) -> None:
        room = self._upkeep.room(event)
        with self._lock:
            room.new_entries += n

    def openai(self, chat: Callable[..., Any], **options: Any) -> OpenAILoop:
        """An [`OpenAILoop`][memlane.agent.OpenAILoop] around ``chat(messages, tools=...)``
        (options: ``tools``, ``tool_handler``, ``max_steps``)."""
        return OpenAILoop(self, chat, **options)

    def anthropic(self, create: Callable[..., Any], **options: Any) -> AnthropicLoop:
        """An [`AnthropicLoop`][memlane.agent.AnthropicLoop] around
        ``create(system=, messages=, tools=)``."""
        return AnthropicLoop(self, create, **options)

    def __repr__(self) -> str:
        return (
            f"AgentMemory(scopes={self.scopes!r}, llm={self.llm!r}, inject={self.inject!r}, "
            f"tools={self.tools})"
        )
