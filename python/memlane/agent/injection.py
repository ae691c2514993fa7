"""What ``AgentMemory.before`` puts in front of the model at each call: the memory block
in the system prompt (pinned core memory blocks, the context for the user's message, the
memory tools' instructions, a due flush reminder), and the turn's step history compacted
when it grows long. ``after``, the turn's other half, is ``memlane.agent.loop``'s."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from memlane.agent.callers import Caller
from memlane.agent.context import token_counter
from memlane.agent.messages import (
    BLOCK_CLOSE,
    CORE_TOOL_INSTRUCTIONS,
    NOTES_TOOL_INSTRUCTIONS,
    TOOL_INSTRUCTIONS,
    block_text,
    block_turn,
    check_messages,
    check_system,
    last_user_text,
    neutral,
    with_block,
)
from memlane.agent.reports import TriggerFailure
from memlane.agent.upkeep.triggers import compact
from memlane.errors import InvalidArgumentError, MemlaneError
from memlane.scoping import EventScope

if TYPE_CHECKING:
    from memlane.agent.loop import AgentMemory

__all__ = ["inject", "inject_openai"]

log = logging.getLogger("memlane.agent")


def inject_openai(
    agent: AgentMemory,
    event: EventScope,
    messages: Sequence[Mapping[str, Any]],
    call: Caller | None,
) -> list[dict[str, Any]]:
    """``inject`` for OpenAI's messages, whose system prompt is a ``system`` (or
    ``developer``) message: the block goes into it, or into a new one first."""
    msgs = check_messages(messages)
    at = next((i for i, m in enumerate(msgs) if m["role"] in ("system", "developer")), None)
    system = None if at is None else msgs[at].get("content")
    rest = msgs if at is None else msgs[:at] + msgs[at + 1 :]
    system, rest = inject(agent, event, system, rest, call)
    head = {"role": "system" if at is None else msgs[at]["role"], "content": system}
    if at is not None:
        head = {**msgs[at], "content": system}
    index = 0 if at is None else at
    return [*rest[:index], head, *rest[index:]]


def inject(
    agent: AgentMemory,
    event: EventScope,
    system: Any,
    messages: Sequence[Mapping[str, Any]],
    call: Caller | None,
) -> tuple[Any, list[dict[str, Any]]]:
    """``system`` with the memory block of ``event``'s turn in it (pinned core blocks,
    the context for the last user message, the tools' instructions, a due flush
    reminder), and ``messages`` with a long step history compacted. With
    ``inject="first_only"`` a block already made for this turn is kept as it is."""
    agent._check_open()
    agent._check_event(event)
    check_system(system)
    msgs = check_messages(messages)
    room = agent._upkeep.room(event)
    user = last_user_text(msgs)
    if user is not None:
        with agent._lock:
            room.user_text = user
    ask = None
    if agent._upkeep.background and call is not None:
        ask = agent._upkeep.step_summary(room, call)
    # Inline, the summary is written now, on this turn's path: within upkeep_timeout.
    timed = agent._upkeep.caller(call)
    msgs = compact(agent.compaction, room, agent._lock, msgs, timed, ask)
    turn = f"{agent._token}:{room.turns}"
    if agent.inject == "first_only" and block_turn(system) == turn:
        return system, msgs
    query = user if user is not None else (room.user_text or "")
    parts: list[str] = []
    try:
        core = agent.core(event)
        pinned = "" if core is None else neutral(core.render())  # always shown, first
        counter = token_counter(agent.context_options.get("count_tokens"))
        budget = agent.max_tokens - (counter(pinned + "\n\n") if pinned else 0)
        parts.append(pinned)
        if query.strip() and budget > 0:
            # The prompt as the caller wrote it (without a block of ours).
            given = with_block(system, None)
            text = given if isinstance(given, str) else block_text(given)
            parts.append(agent.context(event, query, budget, text or None).text)
    except InvalidArgumentError:
        raise
    except MemlaneError as e:  # the store or the embedder failed: no context this call
        failure = TriggerFailure("context", f"{type(e).__name__}: {e}")
        log.warning("memlane: the context could not be built: %s", failure.error)
        with agent._lock:
            room.failures.append(failure)
    if agent.tools:
        parts.append(TOOL_INSTRUCTIONS)
        if agent.context_options.get("notes", True) is not None:
            parts.append(NOTES_TOOL_INSTRUCTIONS)
        if agent.core_blocks:
            parts.append(CORE_TOOL_INSTRUCTIONS)
        with agent._lock:
            reminder, room.flush_due = room.flush_due, None
        if reminder:
            parts.append(reminder)
    # Stored text (core blocks, messages, memories, notes) never holds the block's tags.
    body = neutral("\n\n".join(p for p in parts if p))
    block = f'<memlane-memory turn="{turn}">\n{body}\n{BLOCK_CLOSE}'
    return with_block(system, block), msgs
