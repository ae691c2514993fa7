"""The OpenAI- and Anthropic-style loop adapters: a whole turn (the model calls, the tools,
``before`` and ``after``) in one ``run``."""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from memlane import coerce, json_depth
from memlane.agent.memory_tools import MemoryTools
from memlane.agent.messages import block_text, check_messages, reply_message
from memlane.agent.reports import TurnReport, TurnResult
from memlane.errors import InvalidArgumentError, shown
from memlane.scoping import EventScope

__all__ = ["AnthropicLoop", "OpenAILoop", "ToolHandler"]

ToolHandler = Callable[[str, Any], Any]


@runtime_checkable
class Turns(Protocol):
    """What the adapters call on an ``AgentMemory``: its turn's two
    ends and its tools. Declared here so that this module needs nothing of loop.py,
    which builds the adapters."""

    tools: bool

    def memory_tools(
        self, event: EventScope, *, loop: asyncio.AbstractEventLoop | None = None
    ) -> MemoryTools: ...

    def before(
        self, event: EventScope, messages: Sequence[Mapping[str, Any]]
    ) -> list[dict[str, Any]]: ...

    async def abefore(
        self, event: EventScope, messages: Sequence[Mapping[str, Any]]
    ) -> list[dict[str, Any]]: ...

    def before_anthropic(
        self, event: EventScope, system: Any, messages: Sequence[Mapping[str, Any]]
    ) -> tuple[Any, list[dict[str, Any]]]: ...

    async def abefore_anthropic(
        self, event: EventScope, system: Any, messages: Sequence[Mapping[str, Any]]
    ) -> tuple[Any, list[dict[str, Any]]]: ...

    def after(
        self,
        event: EventScope,
        messages: Sequence[Mapping[str, Any]],
        reply: Any,
        *,
        message_id: str | int | None = None,
    ) -> TurnReport: ...

    async def aafter(
        self,
        event: EventScope,
        messages: Sequence[Mapping[str, Any]],
        reply: Any,
        *,
        message_id: str | int | None = None,
    ) -> TurnReport: ...


def _maybe_await_sync(value: Any) -> Any:
    if inspect.isawaitable(value):
        raise InvalidArgumentError("the model call returned an awaitable: use arun()")
    return value


def _openai_calls(reply: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The reply's tool calls, each checked: a malformed one is refused as ``reply_message``
    refuses a malformed reply (``InvalidArgumentError``, naming what is wrong)."""
    calls = reply.get("tool_calls")
    if calls is None:
        return []
    if isinstance(calls, str | bytes | Mapping) or not isinstance(calls, Sequence):
        raise InvalidArgumentError(
            f"the model's reply: tool_calls must be a list, got {type(calls).__name__}"
        )
    for i, call in enumerate(calls):
        fn = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
            raise InvalidArgumentError(
                f"the model's reply: tool_calls[{i}] must be a dict whose 'function' is a "
                f"dict with a str 'name', got {shown(call)}"
            )
    return list(calls)


class _Loop:
    def __init__(
        self,
        memory: Turns,
        model: Callable[..., Any],
        *,
        tools: Sequence[Mapping[str, Any]] = (),
        tool_handler: ToolHandler | None = None,
        max_steps: int = 8,
    ) -> None:
        if not isinstance(memory, Turns):
            raise InvalidArgumentError(f"memory must be an AgentMemory, got {shown(memory)}")
        if not callable(model):
            raise InvalidArgumentError("the model call must be callable")
        if tool_handler is not None and not callable(tool_handler):
            raise InvalidArgumentError("tool_handler must be callable")
        coerce.count(max_steps, "max_steps", 1)
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
            args = json_depth.loads(arguments) if isinstance(arguments, str) else arguments
            result = self.tool_handler(name, args)
        except Exception as e:  # the model reads the error and goes on
            return {
                "ok": False,
                "error": {"type": "tool_error", "message": f"{type(e).__name__}: {e}"},
            }
        return result if isinstance(result, dict) else {"ok": True, "result": result}


class OpenAILoop(_Loop):
    """An OpenAI-style chat-completions loop with memory around it.

    ``chat(messages, tools=[...])`` is your model call (e.g.
    [`OpenAIChat.chat`][memlane.OpenAIChat.chat], or a lambda over the OpenAI SDK); it
    returns the assistant message (a dict, a raw completion or an SDK object).
    [`run`][memlane.agent.OpenAILoop.run] does
    [`AgentMemory.before`][memlane.AgentMemory.before], the call, the memory tools (and
    yours, through ``tool_handler(name, args)``) until the model answers without tool
    calls, then [`AgentMemory.after`][memlane.AgentMemory.after].
    ``tools`` are your own tool definitions, sent with the memory tools. A turn
    ends after ``max_steps`` model calls (8) at the latest, with the last reply.
    A reply of no such shape, or whose ``tool_calls`` is not a list of calls each with
    a ``function`` dict naming its tool (a str ``name``), raises ``InvalidArgumentError``
    naming what is wrong; the turn is then not stored (``after`` is not called).
    """

    def _schemas(self, tools: MemoryTools | None) -> dict[str, Any]:
        schemas = (tools.openai() if tools is not None else []) + self.extra_tools
        return {"tools": schemas} if schemas else {}

    def run(self, event: EventScope, messages: Sequence[Mapping[str, Any]]) -> TurnResult:
        """One turn: ``messages`` ends with the user's message."""
        am = self.memory
        tools = am.memory_tools(event) if am.tools else None
        kw = self._schemas(tools)
        msgs = check_messages(messages)
        reply: dict[str, Any] = {"role": "assistant", "content": ""}
        for _ in range(self.max_steps):
            msgs = am.before(event, msgs)
            reply = reply_message(_maybe_await_sync(self.model(msgs, **kw)))
            msgs.append(reply)
            calls = _openai_calls(reply)
            if not calls:
                break
            for call in calls:
                fn = call.get("function") or {}
                result = self._tool(tools, str(fn.get("name")), fn.get("arguments"))
                msgs.append(
                    {"role": "tool", "tool_call_id": call.get("id"), "content": json.dumps(result)}
                )
        report = am.after(event, msgs, reply)
        return TurnResult(block_text(reply.get("content")), reply, msgs, report)

    async def arun(self, event: EventScope, messages: Sequence[Mapping[str, Any]]) -> TurnResult:
        """The async form of [`run`][memlane.agent.OpenAILoop.run]; ``chat`` may be async
        (e.g. [`OpenAIChat.achat`][memlane.OpenAIChat.achat])."""
        am = self.memory
        tools = am.memory_tools(event, loop=asyncio.get_running_loop()) if am.tools else None
        kw = self._schemas(tools)
        msgs = check_messages(messages)
        reply: dict[str, Any] = {"role": "assistant", "content": ""}
        for _ in range(self.max_steps):
            msgs = await am.abefore(event, msgs)
            out = self.model(msgs, **kw)
            reply = reply_message(await out if inspect.isawaitable(out) else out)
            msgs.append(reply)
            calls = _openai_calls(reply)
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
        return TurnResult(block_text(reply.get("content")), reply, msgs, report)


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
    if isinstance(content, bytes | Mapping) or not isinstance(content, Sequence):
        raise InvalidArgumentError(
            "the model's reply: content must be a str or a list of content blocks, "
            f"got {type(content).__name__}"
        )
    blocks = []
    for i, b in enumerate(content):
        if not isinstance(b, Mapping) and callable(getattr(b, "model_dump", None)):
            b = b.model_dump()
        if not isinstance(b, Mapping) or not isinstance(b.get("type"), str):
            raise InvalidArgumentError(
                f"the model's reply: content[{i}] must be a content block (a dict with a "
                f"str 'type'), got {shown(b)}"
            )
        if b["type"] == "tool_use" and not isinstance(b.get("name"), str):
            raise InvalidArgumentError(
                f"the model's reply: content[{i}] is a tool_use block without a str 'name'"
            )
        blocks.append(dict(b))
    return {"role": "assistant", "content": blocks}


class AnthropicLoop(_Loop):
    """An Anthropic-style Messages loop with memory around it.

    ``create(system=..., messages=[...], tools=[...])`` is your model call (e.g. a
    lambda over ``client.messages.create``); it returns the assistant message (a
    dict with content blocks, or an SDK object). The memory block goes into
    ``system``; ``tool_use`` blocks are answered with ``tool_result`` blocks. A reply
    whose ``content`` is not a str or a list of content blocks (dicts with a str
    ``type``; a ``tool_use`` one with a str ``name``) raises ``InvalidArgumentError``
    naming what is wrong; the turn is then not stored (``after`` is not called).
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
        msgs = check_messages(messages)
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
        return TurnResult(block_text(reply["content"]), reply, msgs, report)

    async def arun(
        self, event: EventScope, messages: Sequence[Mapping[str, Any]], system: Any = ""
    ) -> TurnResult:
        """The async form of [`run`][memlane.agent.AnthropicLoop.run]; ``create`` may be
        async."""
        am = self.memory
        tools = am.memory_tools(event, loop=asyncio.get_running_loop()) if am.tools else None
        kw = self._schemas(tools)
        msgs = check_messages(messages)
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
        return TurnResult(block_text(reply["content"]), reply, msgs, report)
