"""``memlane mcp``: the memory tools as an MCP server over stdio."""

from __future__ import annotations

import argparse

from memlane.cli._command import add_scope_arguments, command, open_memory, scope_of

__all__: list[str] = []


def _mcp_arguments(p: argparse.ArgumentParser) -> None:
    add_scope_arguments(p, "every tool call's")


@command(
    "mcp",
    "serve remember/recall/forget/search_knowledge to an MCP client over stdio",
    arguments=_mcp_arguments,
    store=True,
    creates=True,
)
def mcp(args: argparse.Namespace) -> int:
    from memlane.agent.mcp_server import serve_stdio

    with open_memory(args) as mem:
        serve_stdio(mem, scope_of(args))
    return 0
