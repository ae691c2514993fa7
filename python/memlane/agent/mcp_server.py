"""An MCP server exposing the memory tools over stdio (``memlane mcp STORE``).

Uses the official MCP Python SDK (``pip install "memlane[mcp]"``). The tools
are those of ``MemoryTools`` (``remember``, ``recall``,
``forget``, ``search_knowledge``, and ``notes_append`` / ``notes_replace`` for
the long-term notes of the scope, see ``Notebook``) with
the same JSON schemas; each result is the dispatcher's JSON, as text and as
structured content, with ``isError`` set when ``ok`` is false.

Served for an ``AgentMemory`` and one of its events, the tools are
the event's (``memory_tools``): a fact ``remember``
stores goes the way of every fact the agent learns, checked by the upkeep model against
what the scope knows (at once, since no turn follows); without an upkeep model, or
served for a bare ``Memory``, ``add(unique=True)``'s rules decide.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from memlane.agent.memory_tools import MemoryTools, json_copy
from memlane.errors import InvalidArgumentError, MemlaneError
from memlane.notes import Notebook
from memlane.scoping import EventScope

if TYPE_CHECKING:
    from memlane.agent.loop import AgentMemory
    from memlane.memory import Memory

__all__ = ["build_server", "serve_stdio", "server_tools"]


class MCPUnavailableError(MemlaneError, ImportError):
    """The MCP SDK is not installed."""


def _sdk() -> tuple[Any, Any, Any]:
    try:
        import anyio
        import mcp_types
        from mcp.server.lowlevel import Server
    except ImportError as e:
        raise MCPUnavailableError(
            f"the MCP SDK is not installed ({e}); install it with: pip install 'memlane[mcp]'"
        ) from None
    return Server, mcp_types, anyio


def server_tools(
    memory: Memory | AgentMemory,
    scope: Mapping[str, str] | EventScope | None = None,
    notes: bool = True,
) -> MemoryTools:
    """The tools ``build_server`` serves: those of ``memory`` in ``scope``, or of an
    ``AgentMemory``'s event (``scope``: an ``EventScope``), each ``remember`` followed by
    the upkeep a turn would run (``settle``)."""
    from memlane.agent.loop import AgentMemory

    if isinstance(memory, AgentMemory):
        if not isinstance(scope, EventScope):
            raise InvalidArgumentError(
                "an AgentMemory's tools are an event's: scope must be an EventScope "
                f"(AgentMemory.event(source, contact)), got {type(scope).__name__}"
            )
        tools = memory.memory_tools(scope)
        tools.off_turn = True
        if not notes:
            tools.notes = None
        return tools
    if isinstance(scope, EventScope):
        scope = scope.fields
    return MemoryTools(memory, scope, notes=Notebook(memory, scope) if notes else None)


def build_server(
    memory: Memory | AgentMemory,
    scope: Mapping[str, str] | EventScope | None = None,
    *,
    name: str = "memlane",
    notes: bool = True,
) -> Any:
    """A low-level MCP ``Server`` whose tools run on ``memory`` in ``scope`` (see
    ``server_tools``); ``notes``: offer the long-term notes tools (writing the notes
    of exactly ``scope``)."""
    from memlane import __version__

    server_cls, types, anyio = _sdk()
    tools = server_tools(memory, scope, notes)

    async def list_tools(ctx: Any, params: Any) -> Any:
        return types.ListToolsResult(
            tools=[
                types.Tool(name=n, description=desc, input_schema=json_copy(schema))
                for n, (desc, schema) in tools.schemas().items()
            ]
        )

    async def call_tool(ctx: Any, params: Any) -> Any:
        args = dict(params.arguments or {})
        result = await anyio.to_thread.run_sync(tools.handle_tool_call, params.name, args)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=json.dumps(result, ensure_ascii=False))],
            structured_content=result,
            is_error=not result.get("ok", False),
        )

    return server_cls(name, version=__version__, on_list_tools=list_tools, on_call_tool=call_tool)


def serve_stdio(
    memory: Memory | AgentMemory, scope: Mapping[str, str] | EventScope | None = None
) -> None:
    """Serves the memory tools over stdin/stdout until the client disconnects; every
    request gets one reply, an error for a line that is no request
    (``memlane.agent.mcp_stdio``)."""
    _, _, anyio = _sdk()
    from memlane.agent.mcp_stdio import stdio_transport

    server = build_server(memory, scope)

    async def run() -> None:
        async with stdio_transport() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(run)
