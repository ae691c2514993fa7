"""``memlane mcp``: the memory tools as an MCP server over stdio."""

from __future__ import annotations

import argparse
import sys

from memlane.cli._command import add_scope_arguments, command, open_memory, scope_of
from memlane.errors import InvalidArgumentError

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

    if sys.stdin is None or sys.__stdout__ is None:  # `<&-`, `>&-`: no one to speak to
        raise InvalidArgumentError("the MCP server speaks over stdin and stdout: give both")
    with open_memory(args) as mem:
        serve_stdio(mem, scope_of(args))
    return 0
