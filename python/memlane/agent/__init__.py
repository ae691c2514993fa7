"""The agent layer: memory tools, context assembly, session scoping, consolidation, reflection.

Everything here uses :class:`memlane.Memory`'s public API.
"""

from __future__ import annotations

from memlane.agent.context import (
    MESSAGES,
    Context,
    add_message,
    build_context,
    char_token_count,
    default_token_counter,
    thread_context,
)
from memlane.agent.scope import EventScope, ScopeMode, SessionScope
from memlane.agent.tools import MemoryTools, anthropic_tools, openai_tools

__all__ = [
    "MESSAGES",
    "Context",
    "EventScope",
    "MemoryTools",
    "ScopeMode",
    "SessionScope",
    "add_message",
    "anthropic_tools",
    "build_context",
    "char_token_count",
    "default_token_counter",
    "openai_tools",
    "thread_context",
]
