"""Automatic memory around any agent loop: :class:`AgentMemory` and its two calls.

>>> memory = AgentMemory(Memory("./agent-memory"), llm=OpenAIChat("m"))   # doctest: +SKIP
>>> messages = memory.before(event, messages)     # context + tool instructions injected
>>> report = memory.after(event, messages, reply)  # turn stored, triggers run

``before`` builds the context block (:func:`~memlane.agent.build_context`) and, when tools
are on, the memory tools' usage instructions, and puts them in the system prompt
(``"first_only"``: once per turn; ``"every_iteration"``: rebuilt at every model call of
the turn); it also compacts a long step history. ``after`` stores the turn in the room's
history (and as a short-term entry) and runs the triggers:

=================  ==========================================================  ============
trigger            fires                                                       settings
=================  ==========================================================  ============
reflection         every 10 turns of a room: the last 20 messages, up to 50    Reflection
                   stored memories shown, 500 output tokens
consolidation      30 short-term entries in the scope, or the oldest is 10     Consolidation
                   minutes old (the oldest 20 are summarised)
flush reminder     25 new entries since the last one, 30-minute cooldown: the  FlushReminder
                   next ``before`` asks the model to save what matters
step compaction    more than 10 steps: the first 2 and last 5 kept, the        Compaction
                   middle summarised (in ``before``)
=================  ==========================================================  ============

and the limits (:class:`Limits`): an entry longer than 1,500 characters is split into
several entries (or summarised), never cut; past 10,000 memories in a scope, the least
important, least used, oldest are evicted (evergreen ones never), each eviction
reported and logged.

A failing LLM (HTTP error, timeout, unparsable answer) never raises out of ``before``
or ``after`` and loses nothing: the turn is stored first, the trigger stays due and
runs again at the next turn, and the failure is in the report
(:attr:`TurnReport.failures`). Triggers that need an LLM do nothing without one.

Time-based triggers read ``clock`` (default :func:`time.time`), and the entries
``after`` writes carry its time, so tests can move time without sleeping.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import json
import logging
import re
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from memlane.agent.consolidation import (
    SHORT_TERM,
    ConsolidationReport,
    add_short_term,
    consolidate,
    sync_memory,
)
from memlane.agent.context import MESSAGES, Context, add_message, build_context
from memlane.agent.llm import LLM, AsyncLLM, ChatMessage, LLMError, OpenAIChat
from memlane.agent.reflection import ReflectionReport, reflect
from memlane.agent.scope import EventScope, SessionScope
from memlane.agent.tools import MemoryTools
from memlane.errors import InvalidArgumentError, MemlaneError, UnknownIdError

if TYPE_CHECKING:
    from memlane.aio import AsyncMemory
    from memlane.memory import Memory
    from memlane.records import MemoryRecord

__all__ = [
    "AgentMemory",
    "AnthropicLoop",
    "Compaction",
    "CompactionReport",
    "Consolidation",
    "FlushReminder",
    "InjectMode",
    "Limits",
    "OpenAILoop",
    "Reflection",
    "TriggerFailure",
    "TurnReport",
    "TurnResult",
    "split_text",
]

log = logging.getLogger("memlane.agent")

InjectMode = Literal["first_only", "every_iteration"]

_OPEN = "<memlane-memory"
_CLOSE = "</memlane-memory>"
_BLOCK = re.compile(r"\n*<memlane-memory[^>]*>.*?</memlane-memory>", re.DOTALL)
_TURN = re.compile(r'<memlane-memory turn="([^"]*)">')
_SUMMARY_TAG = "[memlane: summary of earlier steps]"

TOOL_INSTRUCTIONS = (
    "## Memory tools\n"
    "You have a long-term memory that outlasts this conversation.\n"
    "- `recall`: search it before answering anything about the user, their preferences "
    "or earlier conversations.\n"
    "- `remember`: store one durable fact, preference or event per call (importance 0 to 1; "
    "evergreen for what must never fade, such as allergies).\n"
    "- `forget`: delete a memory by the id recall or remember gave, when it is wrong or "
    "the user asks.\n"
    "- `search_knowledge`: search the ingested documents.\n"
    "What you remember above was found for this message; recall finds more."
)

FLUSH_MESSAGE = (
    "## Save what matters\n"
    "{entries} new entries were written to memory since the last reminder. Before they are "
    "consolidated, store with `remember` any durable fact, preference or decision from "
    "this conversation that is not already in memory."
)

#: What ``context=`` may set: build_context's options but the ones AgentMemory passes.
_CONTEXT_OPTIONS = frozenset(inspect.signature(build_context).parameters) - {
    "mem",
    "message",
    "scope",
    "max_tokens",
}

_COMPACT_SYSTEM = (
    "You compact an AI agent's step history. Summarise the steps below in a few sentences: "
    "what was tried, what each tool returned that is still needed, decisions made and what "
    "remains open. Answer with the summary only."
)


def _int(value: object, label: str, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidArgumentError(f"{label} must be an int >= {minimum}, got {value!r}")


def _seconds(value: object, label: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise InvalidArgumentError(f"{label} must be a number of seconds >= 0, got {value!r}")


# -- settings ---------------------------------------------------------------------------------


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
        max_memories: memories (the ``table`` of :class:`AgentMemory`) kept per
            scope (10,000). Past it, the non-evergreen ones with the lowest
            importance, then the fewest accesses, then the oldest last use are
            evicted; evergreen memories are never evicted.
    """

    max_entry_chars: int = 1500
    overflow: Literal["split", "summarize"] = "split"
    max_memories: int = 10_000

    def __post_init__(self) -> None:
        _int(self.max_entry_chars, "Limits.max_entry_chars", 20)
        _int(self.max_memories, "Limits.max_memories", 1)
        if self.overflow not in ("split", "summarize"):
            raise InvalidArgumentError(
                f"Limits.overflow must be 'split' or 'summarize', got {self.overflow!r}"
            )


# -- reports ----------------------------------------------------------------------------------


@dataclass(slots=True, frozen=True)
class TriggerFailure:
    """A trigger that did not complete: ``trigger`` is ``reflection``, ``consolidation``,
    ``compaction``, ``summarize``, ``eviction``, ``flush`` or ``context`` (``before`` could
    not build the context block: the model got none that call); it runs again later."""

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
    """What :meth:`AgentMemory.after` did.

    ``stored``: the turn's history records; ``short_term``: its short-term entries;
    ``splits``: ``(what, parts)`` for each entry split by the length cap;
    ``reflection``, ``consolidation``: their reports when they ran;
    ``compactions``: those ``before`` did since the previous ``after`` of the room;
    ``flush_reminder``: the reminder scheduled for the next ``before``;
    ``evicted``: memories removed by the cap; ``failures``: what failed (and will
    run again).
    """

    stored: list[MemoryRecord] = field(default_factory=list)
    short_term: list[MemoryRecord] = field(default_factory=list)
    splits: list[tuple[str, int]] = field(default_factory=list)
    reflection: ReflectionReport | None = None
    consolidation: ConsolidationReport | None = None
    compactions: list[CompactionReport] = field(default_factory=list)
    flush_reminder: str | None = None
    evicted: list[MemoryRecord] = field(default_factory=list)
    failures: list[TriggerFailure] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures


@dataclass(slots=True)
class TurnResult:
    """What an adapter's ``run`` returns: the reply's text, the final assistant message,
    the conversation as sent (plus the reply) and the :class:`TurnReport`."""

    reply: str
    message: dict[str, Any]
    messages: list[dict[str, Any]]
    report: TurnReport


# -- text helpers -----------------------------------------------------------------------------


def split_text(text: str, max_chars: int) -> list[str]:
    """``text`` in pieces of at most ``max_chars`` characters, cut at paragraph, then
    sentence, then word boundaries (inside a word only when one word is longer).

    Nothing is dropped but the whitespace at the cuts: joining the pieces with
    single spaces gives the text with its whitespace runs at the cuts collapsed.
    """
    _int(max_chars, "max_chars", 1)
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


def _block_text(content: Any) -> str:
    """The text of a message's content: a str, or the text parts of a list of blocks."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        parts = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, Mapping) and block.get("type") == "text":
                parts.append(str(block.get("text", "")))
        return "\n".join(p for p in parts if p)
    return str(content)


def _has_tool_result(content: Any) -> bool:
    return (
        isinstance(content, Sequence)
        and not isinstance(content, str)
        and any(isinstance(b, Mapping) and b.get("type") == "tool_result" for b in content)
    )


def _is_user_text(message: Mapping[str, Any]) -> bool:
    """A message the user wrote (not a tool result, not a compaction summary)."""
    if message.get("role") != "user":
        return False
    content = message.get("content")
    if _has_tool_result(content):
        return False
    text = _block_text(content)
    return bool(text.strip()) and not text.startswith(_SUMMARY_TAG)


def _last_user_text(messages: Sequence[Mapping[str, Any]]) -> str | None:
    for m in reversed(messages):
        if _is_user_text(m):
            return _block_text(m.get("content"))
    return None


def _reply_message(reply: Any) -> dict[str, Any]:
    """An assistant message from a str, a message dict, a raw completion or an SDK object."""
    if isinstance(reply, str):
        return {"role": "assistant", "content": reply}
    if not isinstance(reply, Mapping) and callable(getattr(reply, "model_dump", None)):
        reply = reply.model_dump()
    if isinstance(reply, Mapping):
        choices = reply.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], Mapping):
            message = choices[0].get("message")
            if isinstance(message, Mapping):
                return dict(message)
        if "content" in reply or "tool_calls" in reply:
            return {"role": "assistant", **dict(reply)}
    raise InvalidArgumentError(
        "reply must be a str, an assistant message dict, a chat completion or an SDK "
        f"message object, got {type(reply).__name__}"
    )


def _kw(scope: Mapping[str, str]) -> dict[str, Any]:
    return dict(scope)


def _check_messages(messages: object) -> list[dict[str, Any]]:
    if isinstance(messages, str | bytes) or not isinstance(messages, Sequence):
        raise InvalidArgumentError("messages must be a list of {role, content} dicts")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping) or not isinstance(m.get("role"), str):
            raise InvalidArgumentError(f"messages[{i}] must be a dict with a str 'role'")
        out.append(dict(m))
    return out


def _steps(messages: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Messages grouped into steps: each with the tool results that answer it."""
    steps: list[list[dict[str, Any]]] = []
    for m in messages:
        joins = m.get("role") == "tool" or (
            m.get("role") == "user" and _has_tool_result(m.get("content"))
        )
        if joins and steps:
            steps[-1].append(m)
        else:
            steps.append([m])
    return steps


def _render_step(step: Sequence[Mapping[str, Any]], limit: int = 2000) -> str:
    lines = []
    for m in step:
        role = m.get("role", "?")
        text = _block_text(m.get("content"))
        content = m.get("content")
        if isinstance(content, Sequence) and not isinstance(content, str):
            for b in content:
                if isinstance(b, Mapping) and b.get("type") == "tool_use":
                    text += f"\ncalled {b.get('name')}({json.dumps(b.get('input'))})"
                elif isinstance(b, Mapping) and b.get("type") == "tool_result":
                    text += f"\nresult: {_block_text(b.get('content'))}"
        for call in m.get("tool_calls") or ():
            if isinstance(call, Mapping):
                fn = call.get("function") or {}
                text += f"\ncalled {fn.get('name')}({fn.get('arguments')})"
        text = " ".join(text.split())
        if len(text) > limit:  # a prompt, not a stored entry
            text = text[: limit - 1] + "…"
        lines.append(f"{role}: {text}")
    return "\n".join(lines)


def _with_block(system: Any, block: str | None) -> Any:
    """The system prompt (a str or a list of text blocks) with our block replaced."""
    if isinstance(system, Sequence) and not isinstance(system, str):
        kept = [
            b for b in system if not (isinstance(b, Mapping) and _OPEN in str(b.get("text", "")))
        ]
        return kept + ([{"type": "text", "text": block}] if block else [])
    base = _BLOCK.sub("", system or "").rstrip()
    if not block:
        return base
    return f"{base}\n\n{block}" if base else block


def _block_turn(system: Any) -> str | None:
    m = _TURN.search(_block_text(system) if not isinstance(system, str) else system)
    return m.group(1) if m else None


# -- the LLM, sync or from a worker thread ----------------------------------------------------

Caller = Callable[[Sequence[ChatMessage], int | None], str]


def _content(message: Mapping[str, Any], where: str) -> str:
    content = message.get("content")
    if not isinstance(content, str):
        raise LLMError(f"{where} returned no text content (got {type(content).__name__})")
    return content


def _sync_caller(llm: Any) -> Caller:
    def call(messages: Sequence[ChatMessage], max_tokens: int | None) -> str:
        if isinstance(llm, OpenAIChat) and max_tokens is not None:
            return _content(llm.chat(messages, max_tokens=max_tokens), llm.url)
        if isinstance(llm, LLM):
            return llm.complete(messages)
        raise LLMError(f"{type(llm).__name__} has no complete(); use the async calls")

    return call


def _thread_caller(llm: Any, loop: asyncio.AbstractEventLoop) -> Caller:
    """Called from a worker thread: async LLM calls run on ``loop``."""
    sync = _sync_caller(llm)

    def call(messages: Sequence[ChatMessage], max_tokens: int | None) -> str:
        coro: Awaitable[Any]
        if isinstance(llm, OpenAIChat):
            opts: dict[str, Any] = {} if max_tokens is None else {"max_tokens": max_tokens}
            coro = llm.achat(messages, **opts)
            msg = asyncio.run_coroutine_threadsafe(_awaited(coro), loop).result()
            return _content(msg, llm.url)
        if isinstance(llm, AsyncLLM):
            return str(
                asyncio.run_coroutine_threadsafe(_awaited(llm.acomplete(messages)), loop).result()
            )
        return sync(messages, max_tokens)

    return call


async def _awaited(aw: Awaitable[Any]) -> Any:
    return await aw


class _Budgeted:
    """An :class:`LLM` for :func:`reflect` and :func:`consolidate` over a caller."""

    def __init__(self, call: Caller, max_tokens: int | None) -> None:
        self._call = call
        self._max_tokens = max_tokens

    def complete(self, messages: Sequence[ChatMessage]) -> str:
        return self._call(messages, self._max_tokens)


# -- per-room state ---------------------------------------------------------------------------


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


class _Tools(MemoryTools):
    """:class:`MemoryTools` whose ``remember`` keeps to the length cap and counts entries."""

    def __init__(self, owner: AgentMemory, event: EventScope, call: Caller | None) -> None:
        super().__init__(owner.memory, event.fields, table=owner.table)
        self._owner = owner
        self._event = event
        self._call = call

    def _remember(
        self,
        content: str,
        type: str = "semantic",
        importance: float = 0.5,
        evergreen: bool = False,
        metadata: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        failures: list[TriggerFailure] = []
        pieces = self._owner._fit(content, self._call, failures)
        for f in failures:
            log.warning("memlane: %s failed: %s", f.trigger, f.error)
        if len(pieces) == 1:
            out = super()._remember(pieces[0], type, importance, evergreen, metadata)
            self._owner._count(self._event, 1 if out.get("stored") else 0)
            return out
        group = uuid.uuid4().hex
        ids = []
        for i, piece in enumerate(pieces, 1):
            meta = {**(metadata or {}), "part": i, "parts": len(pieces), "split_group": group}
            ids.append(super()._remember(piece, type, importance, evergreen, meta)["id"])
        self._owner._count(self._event, len(ids))
        return {
            "ok": True,
            "id": ids[0],
            "ids": ids,
            "stored": True,
            "note": f"longer than {self._owner.limits.max_entry_chars} characters: "
            f"stored as {len(ids)} parts",
        }


# -- AgentMemory ------------------------------------------------------------------------------


class AgentMemory:
    """Memory around an agent loop: :meth:`before` each model call, :meth:`after` each turn.

    Args:
        memory: the store (a :class:`~memlane.Memory`, or an
            :class:`~memlane.AsyncMemory` whose store is used).
        scopes: maps platform events to scopes (default ``SessionScope()``:
            per-peer); :meth:`event` resolves one.
        llm: the model for reflection, consolidation, compaction and summaries
            (an :class:`~memlane.agent.LLM` or :class:`~memlane.agent.AsyncLLM`);
            without one those triggers do nothing.
        max_tokens: the context block's token budget (see :func:`build_context`).
        tools: inject the memory tools' instructions (and let the adapters
            offer and run the tools).
        inject: ``"first_only"`` (the block is built at a turn's first model
            call and kept) or ``"every_iteration"`` (rebuilt at every call, so it
            shows what the tools just stored).
        reflection, consolidation, flush, compaction, limits: the triggers' and
            limits' settings (the defaults when None).
        table: where memories live.
        context: more keyword arguments for :func:`build_context`
            (``budget``, ``inject_limit``, ``min_score``, ...).
        clock: unix seconds now (default :func:`time.time`).
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
        limits: Limits | None = None,
        table: str = "memories",
        context: Mapping[str, Any] | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        if inject not in ("first_only", "every_iteration"):
            raise InvalidArgumentError(
                f"inject must be 'first_only' or 'every_iteration', got {inject!r}"
            )
        if llm is not None and not isinstance(llm, LLM | AsyncLLM):
            raise InvalidArgumentError(
                f"llm must have complete() or acomplete(), got {type(llm).__name__}"
            )
        if scopes is not None and not isinstance(scopes, SessionScope):
            raise InvalidArgumentError(f"scopes must be a SessionScope, got {scopes!r}")
        _int(max_tokens, "max_tokens", 1)
        for value, kind in (
            (reflection, Reflection),
            (consolidation, Consolidation),
            (flush, FlushReminder),
            (compaction, Compaction),
            (limits, Limits),
        ):
            if value is not None and not isinstance(value, kind):
                raise InvalidArgumentError(f"expected a {kind.__name__}, got {value!r}")
        unknown = set(context or {}) - _CONTEXT_OPTIONS
        if unknown:
            raise InvalidArgumentError(
                f"unknown build_context option(s) {sorted(unknown)}; "
                f"expected some of {sorted(_CONTEXT_OPTIONS)}"
            )
        if clock is not None and not callable(clock):
            raise InvalidArgumentError("clock must be a callable returning unix seconds")
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
        self.limits = limits or Limits()
        self.table = table
        self.context_options = dict(context or {})
        self.clock: Callable[[], float] = clock or time.time
        self._rooms: dict[tuple[tuple[str, str], ...], _Room] = {}
        self._lock = threading.RLock()
        self._token = uuid.uuid4().hex[:8]

    # -- small public helpers ----------------------------------------------------------------

    def event(
        self, source: str, contact_id: str | int, chat_id: str | int | None = None
    ) -> EventScope:
        """The scope of a platform event (``scopes.resolve``)."""
        return self.scopes.resolve(source, contact_id, chat_id)

    def memory_tools(
        self, event: EventScope, *, loop: asyncio.AbstractEventLoop | None = None
    ) -> MemoryTools:
        """The memory tools bound to the event's scope, for a loop of your own (their
        ``remember`` keeps to the length cap and counts towards the flush reminder).
        ``loop``: the event loop an async-only LLM runs on, when the tools are called
        from a worker thread."""
        self._check_event(event)
        return _Tools(self, event, self._caller(loop))

    def context(self, event: EventScope, message: str) -> Context:
        """The :func:`build_context` of ``message`` with this object's budget and options."""
        self._check_event(event)
        return build_context(self.memory, message, event, self.max_tokens, **self.context_options)

    # -- before -----------------------------------------------------------------------------

    def before(
        self, event: EventScope, messages: Sequence[Mapping[str, Any]]
    ) -> list[dict[str, Any]]:
        """``messages`` (OpenAI style: the system prompt is a ``system`` message) with the
        memory block in the system prompt and a long step history compacted.

        Returns a new list; ``messages`` is left as it was.
        """
        return self._before_openai(event, messages, self._caller())

    async def abefore(
        self, event: EventScope, messages: Sequence[Mapping[str, Any]]
    ) -> list[dict[str, Any]]:
        """The async form of :meth:`before` (store calls in a worker thread)."""
        call = self._caller(asyncio.get_running_loop())
        return await asyncio.to_thread(self._before_openai, event, messages, call)

    def before_anthropic(
        self, event: EventScope, system: Any, messages: Sequence[Mapping[str, Any]]
    ) -> tuple[Any, list[dict[str, Any]]]:
        """:meth:`before` for Anthropic's Messages API, where the system prompt (a str or a
        list of text blocks) is separate: returns ``(system, messages)``."""
        return self._before(event, system, messages, self._caller())

    async def abefore_anthropic(
        self, event: EventScope, system: Any, messages: Sequence[Mapping[str, Any]]
    ) -> tuple[Any, list[dict[str, Any]]]:
        """The async form of :meth:`before_anthropic`."""
        call = self._caller(asyncio.get_running_loop())
        return await asyncio.to_thread(self._before, event, system, messages, call)

    def _before_openai(
        self, event: EventScope, messages: Sequence[Mapping[str, Any]], call: Caller | None
    ) -> list[dict[str, Any]]:
        msgs = _check_messages(messages)
        at = next((i for i, m in enumerate(msgs) if m["role"] in ("system", "developer")), None)
        system = None if at is None else msgs[at].get("content")
        rest = msgs if at is None else msgs[:at] + msgs[at + 1 :]
        system, rest = self._before(event, system, rest, call)
        head = {"role": "system" if at is None else msgs[at]["role"], "content": system}
        if at is not None:
            head = {**msgs[at], "content": system}
        index = 0 if at is None else at
        return [*rest[:index], head, *rest[index:]]

    def _before(
        self,
        event: EventScope,
        system: Any,
        messages: Sequence[Mapping[str, Any]],
        call: Caller | None,
    ) -> tuple[Any, list[dict[str, Any]]]:
        self._check_event(event)
        msgs = _check_messages(messages)
        room = self._room(event)
        user = _last_user_text(msgs)
        if user is not None:
            with self._lock:
                room.user_text = user
        msgs = self._compact(room, msgs, call)
        turn = f"{self._token}:{room.turns}"
        if self.inject == "first_only" and _block_turn(system) == turn:
            return system, msgs
        query = user if user is not None else (room.user_text or "")
        parts: list[str] = []
        if query.strip():
            try:
                parts.append(self.context(event, query).text)
            except InvalidArgumentError:
                raise
            except MemlaneError as e:  # the store or the embedder failed: no context this call
                failure = TriggerFailure("context", f"{type(e).__name__}: {e}")
                log.warning("memlane: the context could not be built: %s", failure.error)
                with self._lock:
                    room.failures.append(failure)
        if self.tools:
            parts.append(TOOL_INSTRUCTIONS)
            with self._lock:
                reminder, room.flush_due = room.flush_due, None
            if reminder:
                parts.append(reminder)
        body = "\n\n".join(p for p in parts if p)
        block = f'<memlane-memory turn="{turn}">\n{body}\n{_CLOSE}'
        return _with_block(system, block), msgs

    def _compact(
        self, room: _Room, msgs: list[dict[str, Any]], call: Caller | None
    ) -> list[dict[str, Any]]:
        cfg = self.compaction
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
                with self._lock:
                    room.compactions.append(report)
                return msgs
            with self._lock:
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

    # -- after ------------------------------------------------------------------------------

    def after(
        self, event: EventScope, messages: Sequence[Mapping[str, Any]], reply: Any
    ) -> TurnReport:
        """Stores the turn (the last user message of ``messages`` and ``reply``) in the room's
        history, then runs the triggers; returns what happened.

        ``reply`` is the model's final answer: a str, an assistant message (OpenAI's
        or Anthropic's, with content blocks), a raw chat completion or an SDK object.
        Store errors while storing the turn raise; nothing a trigger or the LLM does
        raises.
        """
        return self._after(event, messages, reply, self._caller())

    async def aafter(
        self, event: EventScope, messages: Sequence[Mapping[str, Any]], reply: Any
    ) -> TurnReport:
        """The async form of :meth:`after` (store calls in a worker thread; an async LLM's
        calls run on the event loop)."""
        call = self._caller(asyncio.get_running_loop())
        return await asyncio.to_thread(self._after, event, messages, reply, call)

    def _after(
        self,
        event: EventScope,
        messages: Sequence[Mapping[str, Any]],
        reply: Any,
        call: Caller | None,
    ) -> TurnReport:
        self._check_event(event)
        msgs = _check_messages(messages)
        answer = _block_text(_reply_message(reply).get("content")).strip()
        room = self._room(event)
        report = TurnReport()
        with self._lock:
            report.compactions, room.compactions = room.compactions, []
            report.failures, room.failures = room.failures, []
        report.failures += [
            TriggerFailure("compaction", c.error or "") for c in report.compactions if c.error
        ]
        user = _last_user_text(msgs) or room.user_text
        now = float(self.clock())
        # 1. The turn, before anything that can fail.
        for role, text in (("user", user), ("assistant", answer)):
            if text and text.strip():
                report.stored += self._store_message(event, role, text, now, report)
        if self.consolidation.record_turns and (user or answer):
            digest = "\n".join(
                f"{who}: {' '.join(t.split())}"
                for who, t in (("user", user), ("assistant", answer))
                if t
            )
            pieces = self._fit(digest, call, report.failures)
            if len(pieces) > 1:
                report.splits.append(("short-term entry", len(pieces)))
            action = f"conversation:{event.room_id or event.identity}"
            for piece in pieces:
                report.short_term.append(
                    add_short_term(
                        self.memory,
                        piece,
                        action,
                        scope=event.fields,
                        metadata={"room_id": event.room_id} if event.room_id else None,
                        created_at=now,
                    )
                )
        with self._lock:
            room.turns += 1
            room.since_reflection += 1
            room.user_text = None
        self._count(event, len(report.stored) + len(report.short_term))
        # 2. The triggers: each on its own, none raises.
        for trigger in (self._reflect, self._consolidate, self._evict, self._flush):
            try:
                trigger(event, room, report, call, now)
            except Exception as e:  # a store error in a trigger: it runs again next turn
                name = _NAMES[trigger.__name__]
                report.failures.append(TriggerFailure(name, f"{type(e).__name__}: {e}"))
        for f in report.failures:
            log.warning("memlane: %s failed (it runs again later): %s", f.trigger, f.error)
        return report

    def _store_message(
        self, event: EventScope, role: str, text: str, now: float, report: TurnReport
    ) -> list[MemoryRecord]:
        """One message in the room's history, in pieces when it is longer than the cap."""
        pieces = split_text(text, self.limits.max_entry_chars)
        if len(pieces) == 1:
            return [add_message(self.memory, text, event, role=role, created_at=now)]
        report.splits.append((f"{role} message", len(pieces)))
        group = uuid.uuid4().hex
        meta = {"parts": len(pieces), "split_group": group}
        first = add_message(
            self.memory, pieces[0], event, role=role, created_at=now, metadata={**meta, "part": 1}
        )
        if first.duplicate == "window":  # the whole message delivered again: stored already
            return [first]
        # The other pieces leave out "contact" (the dedup window's key), so a piece that
        # repeats an earlier one is kept: add_message's metadata, with "sender" for it.
        base = {k: v for k, v in first.metadata.items() if k != "contact"}
        if role == "user":
            base["sender"] = event.contact
        rest = self.memory.add_many(
            [
                {
                    "text": piece,
                    "table": MESSAGES,
                    "type": "message",
                    "metadata": {**base, "part": i},
                    "created_at": now,
                    **_kw(event.history),
                }
                for i, piece in enumerate(pieces[1:], 2)
            ]
        )
        return [first, *rest]

    def _reflect(
        self, event: EventScope, room: _Room, report: TurnReport, call: Caller | None, now: float
    ) -> None:
        cfg = self.reflection
        if not cfg.enabled or call is None or room.since_reflection < cfg.every:
            return
        recent = self.memory.list(MESSAGES, limit=cfg.window, **_kw(event.history))[::-1]
        window = [{"role": str(r.metadata.get("role", "user")), "content": r.text} for r in recent]
        result = reflect(
            self.memory,
            _Budgeted(call, cfg.max_output_tokens),
            window,
            scope=event.fields,
            table=self.table,
            k=cfg.shown,
        )
        report.reflection = result
        if result.error is not None:
            report.failures.append(TriggerFailure("reflection", result.error))
            return
        with self._lock:
            room.since_reflection = 0
        for rec in [*result.added, *result.updated]:
            self._cap_record(rec, call, report)
        self._count(event, len(result.added))

    def _consolidate(
        self, event: EventScope, room: _Room, report: TurnReport, call: Caller | None, now: float
    ) -> None:
        cfg = self.consolidation
        if not cfg.enabled or call is None:
            return
        pending = self.memory.count(SHORT_TERM, **_kw(event.fields))
        if pending == 0:
            return
        force = False
        if pending < cfg.threshold:
            oldest = self.memory.list(SHORT_TERM, limit=1, order="asc", **_kw(event.fields))
            if not oldest or now - oldest[0].created_at < cfg.max_age:
                return
            force = True
        result = consolidate(
            self.memory,
            _Budgeted(call, None),
            scope=event.fields,
            threshold=cfg.threshold,
            batch=cfg.batch,
            table=self.table,
            force=force,
        )
        report.consolidation = result
        if result.status == "failed":
            report.failures.append(TriggerFailure("consolidation", result.error or "failed"))
            return
        made = [r for r in [result.episodic, *result.semantic] if r is not None]
        for rec in made:
            self._cap_record(rec, call, report)
        self._count(event, len(made))

    def _evict(
        self, event: EventScope, room: _Room, report: TurnReport, call: Caller | None, now: float
    ) -> None:
        cap = self.limits.max_memories
        total = self.memory.count(self.table, **_kw(event.fields))
        if total <= cap:
            return
        candidates: list[MemoryRecord] = []
        page = 1000
        while True:
            batch = self.memory.list(
                self.table,
                limit=page,
                offset=len(candidates),
                order="asc",
                filters={"evergreen": False},
                **_kw(event.fields),
            )
            candidates += batch
            if len(batch) < page:
                break
        if len(candidates) < total - cap:
            log.warning(
                "memlane: %d evergreen memories in scope %s exceed the cap of %d; "
                "evergreen memories are never evicted",
                total - len(candidates),
                event.fields,
                cap,
            )
        candidates.sort(
            key=lambda r: (r.importance, r.access_count, max(r.created_at, r.last_accessed_at))
        )
        for rec in candidates[: total - cap]:
            try:
                self.memory.delete(rec.id)
            except UnknownIdError:  # deleted meanwhile
                continue
            report.evicted.append(rec)
            log.info(
                "memlane: evicted memory %s (importance %.2f, %d accesses) past the cap of %d: %r",
                rec.id,
                rec.importance,
                rec.access_count,
                cap,
                rec.text[:80],
            )

    def _flush(
        self, event: EventScope, room: _Room, report: TurnReport, call: Caller | None, now: float
    ) -> None:
        cfg = self.flush
        if not cfg.enabled or not self.tools:
            return
        with self._lock:
            if room.new_entries < cfg.entries:
                return
            if room.last_flush is not None and now - room.last_flush < cfg.cooldown:
                return
            room.flush_due = cfg.message.replace("{entries}", str(room.new_entries))
            room.last_flush = now
            room.new_entries = 0
            report.flush_reminder = room.flush_due

    # -- internals --------------------------------------------------------------------------

    def _caller(self, loop: asyncio.AbstractEventLoop | None = None) -> Caller | None:
        if self.llm is None:
            return None
        return _sync_caller(self.llm) if loop is None else _thread_caller(self.llm, loop)

    def _check_event(self, event: object) -> None:
        if not isinstance(event, EventScope):
            raise InvalidArgumentError(
                "event must be an EventScope (AgentMemory.event(source, contact, chat)), "
                f"got {type(event).__name__}"
            )

    def _room(self, event: EventScope) -> _Room:
        key = tuple(sorted(event.history.items()))
        with self._lock:
            room = self._rooms.get(key)
            if room is None:
                room = self._rooms[key] = _Room()
            return room

    def _count(self, event: EventScope, n: int) -> None:
        room = self._room(event)
        with self._lock:
            room.new_entries += n

    def _fit(self, text: str, call: Caller | None, failures: list[TriggerFailure]) -> list[str]:
        """``text`` within the length cap: itself, a summary, or its pieces."""
        cap = self.limits.max_entry_chars
        if len(text) <= cap:
            return [text]
        if self.limits.overflow == "summarize" and call is not None:
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

    def _cap_record(self, rec: MemoryRecord, call: Caller | None, report: TurnReport) -> None:
        """A memory a trigger wrote, brought within the length cap."""
        if len(rec.text) <= self.limits.max_entry_chars:
            return
        pieces = self._fit(rec.text, call, report.failures)
        if len(pieces) == 1:
            self.memory.update(rec.id, text=pieces[0])
            return
        group = uuid.uuid4().hex
        meta = {**rec.metadata, "parts": len(pieces), "split_group": group}
        self.memory.update(rec.id, text=pieces[0], metadata={**meta, "part": 1})
        self.memory.add_many(
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

    def openai(self, chat: Callable[..., Any], **options: Any) -> OpenAILoop:
        """An :class:`OpenAILoop` around ``chat(messages, tools=...)`` (options: ``tools``,
        ``tool_handler``, ``max_steps``)."""
        return OpenAILoop(self, chat, **options)

    def anthropic(self, create: Callable[..., Any], **options: Any) -> AnthropicLoop:
        """An :class:`AnthropicLoop` around ``create(system=, messages=, tools=)``."""
        return AnthropicLoop(self, create, **options)

    def __repr__(self) -> str:
        return (
            f"AgentMemory(scopes={self.scopes!r}, llm={self.llm!r}, inject={self.inject!r}, "
            f"tools={self.tools})"
        )


_NAMES = {
    "_reflect": "reflection",
    "_consolidate": "consolidation",
    "_evict": "eviction",
    "_flush": "flush",
}


# -- adapters ---------------------------------------------------------------------------------

ToolHandler = Callable[[str, Any], Any]


def _maybe_await_sync(value: Any) -> Any:
    if inspect.isawaitable(value):
        raise InvalidArgumentError("the model call returned an awaitable: use arun()")
    return value


class _Loop:
    def __init__(
        self,
        memory: AgentMemory,
        model: Callable[..., Any],
        *,
        tools: Sequence[Mapping[str, Any]] = (),
        tool_handler: ToolHandler | None = None,
        max_steps: int = 8,
    ) -> None:
        if not isinstance(memory, AgentMemory):
            raise InvalidArgumentError(f"memory must be an AgentMemory, got {memory!r}")
        if not callable(model):
            raise InvalidArgumentError("the model call must be callable")
        if tool_handler is not None and not callable(tool_handler):
            raise InvalidArgumentError("tool_handler must be callable")
        _int(max_steps, "max_steps", 1)
        self.memory = memory
        self.model = model
        self.extra_tools = [dict(t) for t in tools]
        self.tool_handler = tool_handler
        self.max_steps = max_steps

    def _tool(self, tools: MemoryTools | None, name: str, arguments: Any) -> dict[str, Any]:
        """A tool call's result; never raises."""
        if tools is not None and name in tools.names:
            return tools.handle_tool_call(name, arguments)
        if self.tool_handler is None:
            return {
                "ok": False,
                "error": {"type": "unknown_tool", "message": f"unknown tool {name!r}"},
            }
        try:
            args = json.loads(arguments) if isinstance(arguments, str) else arguments
            result = self.tool_handler(name, args)
        except Exception as e:  # the model reads the error and goes on
            return {
                "ok": False,
                "error": {"type": "tool_error", "message": f"{type(e).__name__}: {e}"},
            }
        return result if isinstance(result, dict) else {"ok": True, "result": result}


class OpenAILoop(_Loop):
    """An OpenAI-style chat-completions loop with memory around it.

    ``chat(messages, tools=[...])`` is your model call (e.g. :meth:`OpenAIChat.chat`,
    or a lambda over the OpenAI SDK); it returns the assistant message (a dict, a
    raw completion or an SDK object). :meth:`run` does :meth:`AgentMemory.before`,
    the call, the memory tools (and yours, through ``tool_handler(name, args)``)
    until the model answers without tool calls, then :meth:`AgentMemory.after`.
    ``tools`` are your own tool definitions, sent with the memory tools. A turn
    ends after ``max_steps`` model calls (8) at the latest, with the last reply.
    """

    def _schemas(self, tools: MemoryTools | None) -> dict[str, Any]:
        schemas = (tools.openai() if tools is not None else []) + self.extra_tools
        return {"tools": schemas} if schemas else {}

    def run(self, event: EventScope, messages: Sequence[Mapping[str, Any]]) -> TurnResult:
        """One turn: ``messages`` ends with the user's message."""
        am = self.memory
        tools = am.memory_tools(event) if am.tools else None
        kw = self._schemas(tools)
        msgs = _check_messages(messages)
        reply: dict[str, Any] = {"role": "assistant", "content": ""}
        for _ in range(self.max_steps):
            msgs = am.before(event, msgs)
            reply = _reply_message(_maybe_await_sync(self.model(msgs, **kw)))
            msgs.append(reply)
            calls = reply.get("tool_calls") or []
            if not calls:
                break
            for call in calls:
                fn = call.get("function") or {}
                result = self._tool(tools, str(fn.get("name")), fn.get("arguments"))
                msgs.append(
                    {"role": "tool", "tool_call_id": call.get("id"), "content": json.dumps(result)}
                )
        report = am.after(event, msgs, reply)
        return TurnResult(_block_text(reply.get("content")), reply, msgs, report)

    async def arun(self, event: EventScope, messages: Sequence[Mapping[str, Any]]) -> TurnResult:
        """The async form of :meth:`run`; ``chat`` may be async (e.g. :meth:`OpenAIChat.achat`)."""
        am = self.memory
        tools = am.memory_tools(event, loop=asyncio.get_running_loop()) if am.tools else None
        kw = self._schemas(tools)
        msgs = _check_messages(messages)
        reply: dict[str, Any] = {"role": "assistant", "content": ""}
        for _ in range(self.max_steps):
            msgs = await am.abefore(event, msgs)
            out = self.model(msgs, **kw)
            reply = _reply_message(await out if inspect.isawaitable(out) else out)
            msgs.append(reply)
            calls = reply.get("tool_calls") or []
            if not calls:
                break
            for call in calls:
                fn = call.get("function") or {}
                result = await asyncio.to_thread(
                    self._tool, tools, str(fn.get("name")), fn.get("arguments")
                )
                msgs.append(
                    {"role": "tool", "tool_call_id": call.get("id"), "content": json.dumps(result)}
                )
        report = await am.aafter(event, msgs, reply)
        return TurnResult(_block_text(reply.get("content")), reply, msgs, report)


def _anthropic_reply(raw: Any) -> dict[str, Any]:
    if not isinstance(raw, Mapping) and callable(getattr(raw, "model_dump", None)):
        raw = raw.model_dump()
    if not isinstance(raw, Mapping) or "content" not in raw:
        raise InvalidArgumentError(
            f"the model call must return an Anthropic message, got {type(raw).__name__}"
        )
    content = raw["content"]
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    return {"role": "assistant", "content": [dict(b) for b in content]}


class AnthropicLoop(_Loop):
    """An Anthropic-style Messages loop with memory around it.

    ``create(system=..., messages=[...], tools=[...])`` is your model call (e.g. a
    lambda over ``client.messages.create``); it returns the assistant message (a
    dict with content blocks, or an SDK object). The memory block goes into
    ``system``; ``tool_use`` blocks are answered with ``tool_result`` blocks.
    """

    def _schemas(self, tools: MemoryTools | None) -> dict[str, Any]:
        schemas = (tools.anthropic() if tools is not None else []) + self.extra_tools
        return {"tools": schemas} if schemas else {}

    def _results(self, tools: MemoryTools | None, reply: Mapping[str, Any]) -> list[dict[str, Any]]:
        out = []
        for b in reply["content"]:
            if b.get("type") != "tool_use":
                continue
            result = self._tool(tools, str(b.get("name")), b.get("input"))
            block: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": b.get("id"),
                "content": json.dumps(result),
            }
            if result.get("ok") is False:
                block["is_error"] = True
            out.append(block)
        return out

    def run(
        self, event: EventScope, messages: Sequence[Mapping[str, Any]], system: Any = ""
    ) -> TurnResult:
        """One turn: ``messages`` ends with the user's message; ``system`` is your prompt."""
        am = self.memory
        tools = am.memory_tools(event) if am.tools else None
        kw = self._schemas(tools)
        msgs = _check_messages(messages)
        reply: dict[str, Any] = {"role": "assistant", "content": []}
        for _ in range(self.max_steps):
            system, msgs = am.before_anthropic(event, system, msgs)
            raw = _maybe_await_sync(self.model(system=system, messages=msgs, **kw))
            reply = _anthropic_reply(raw)
            msgs.append(reply)
            results = self._results(tools, reply)
            if not results:
                break
            msgs.append({"role": "user", "content": results})
        report = am.after(event, msgs, reply)
        return TurnResult(_block_text(reply["content"]), reply, msgs, report)

    async def arun(
        self, event: EventScope, messages: Sequence[Mapping[str, Any]], system: Any = ""
    ) -> TurnResult:
        """The async form of :meth:`run`; ``create`` may be async."""
        am = self.memory
        tools = am.memory_tools(event, loop=asyncio.get_running_loop()) if am.tools else None
        kw = self._schemas(tools)
        msgs = _check_messages(messages)
        reply: dict[str, Any] = {"role": "assistant", "content": []}
        for _ in range(self.max_steps):
            system, msgs = await am.abefore_anthropic(event, system, msgs)
            out = self.model(system=system, messages=msgs, **kw)
            reply = _anthropic_reply(await out if inspect.isawaitable(out) else out)
            msgs.append(reply)
            results = await asyncio.to_thread(self._results, tools, reply)
            if not results:
                break
            msgs.append({"role": "user", "content": results})
        report = await am.aafter(event, msgs, reply)
        return TurnResult(_block_text(reply["content"]), reply, msgs, report)
