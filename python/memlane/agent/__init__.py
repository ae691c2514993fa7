"""The agent layer: memory tools, context assembly, session scoping, consolidation, reflection.

Everything here uses :class:`memlane.Memory`'s public API.
"""

from __future__ import annotations

from memlane.agent.scope import EventScope, ScopeMode, SessionScope
from memlane.agent.tools import MemoryTools, anthropic_tools, openai_tools

__all__ = [
    "EventScope",
    "MemoryTools",
    "ScopeMode",
    "SessionScope",
    "anthropic_tools",
    "openai_tools",
]
