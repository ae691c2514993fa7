"""The agent layer: memory tools, context assembly, session scoping, consolidation, reflection.

Everything here uses ``memlane.Memory``'s public API.

- ``memlane.agent.memory_tools``: ``remember``/``recall``/``forget``/``search_knowledge``
  schemas (OpenAI and Anthropic) and ``MemoryTools`` with its dispatcher.
- ``memlane.scoping``: ``SessionScope``, platform events to scopes.
- ``memlane.agent.context``: ``build_context``, ``thread_context``, messages.
- ``memlane.agent.llm``: the ``LLM`` protocol and ``OpenAIChat``.
- ``memlane.agent.consolidation``: the short-term tier and ``consolidate``.
- ``memlane.agent.reflection``: ``reflect``.
- ``memlane.agent.loop``: ``AgentMemory`` (``before``/``after`` around any agent
  loop), over ``memlane.agent.upkeep.triggers`` (reflection, consolidation, flush reminder,
  compaction), ``memlane.agent.daily`` (daily logs), ``memlane.agent.profiles``
  (contact profiles), ``memlane.agent.caps`` (the length and count caps) and
  ``memlane.agent.reports``; ``memlane.agent.adapters``: the OpenAI- and
  Anthropic-style loop adapters.
- ``memlane.agent.core_memory``: ``CoreMemory``, pinned blocks (as Letta's) that
  ``AgentMemory(core_memory=...)`` always shows and the model edits with two tools.
- ``memlane.agent.mcp_server``: ``memlane mcp`` (needs ``memlane[mcp]``).
"""

from __future__ import annotations

from memlane.agent.consolidation import (
    SHORT_TERM,
    ConsolidationReport,
    aconsolidate,
    add_short_term,
    complete_action,
    consolidate,
)
from memlane.agent.context import (
    Context,
    build_context,
    char_token_count,
    default_token_counter,
)
from memlane.agent.core_memory import CORE, Block, CoreMemory, CoreMemoryLimitError, Shared
from memlane.agent.daily import DAILY, DailyLog
from memlane.agent.history import MESSAGES, add_message, thread_context
from memlane.agent.llm import LLM, AsyncLLM, LLMError, OpenAIChat
from memlane.agent.loop import (
    AgentMemory,
    AnthropicLoop,
    Compaction,
    Consolidation,
    FlushReminder,
    Limits,
    OpenAILoop,
    Reflection,
    TurnReport,
    TurnResult,
    UpkeepResult,
)
from memlane.agent.memory_tools import MemoryTools, anthropic_tools, openai_tools
from memlane.agent.parsing import ParseError, extract_json
from memlane.agent.profiles import (
    CONTACTS,
    ContactProfile,
    Profiles,
    contact_profile,
    record_contact,
)
from memlane.agent.reflection import ReflectionReport, areflect, reflect
from memlane.agent.upkeep.jobs import JobSkippedWarning
from memlane.scoping import EventScope, ScopeMode, SessionScope

__all__ = [
    "CONTACTS",
    "CORE",
    "DAILY",
    "LLM",
    "MESSAGES",
    "SHORT_TERM",
    "AgentMemory",
    "AnthropicLoop",
    "AsyncLLM",
    "Block",
    "Compaction",
    "Consolidation",
    "ConsolidationReport",
    "ContactProfile",
    "Context",
    "CoreMemory",
    "CoreMemoryLimitError",
    "DailyLog",
    "EventScope",
    "FlushReminder",
    "JobSkippedWarning",
    "LLMError",
    "Limits",
    "MemoryTools",
    "OpenAIChat",
    "OpenAILoop",
    "ParseError",
    "Profiles",
    "Reflection",
    "ReflectionReport",
    "ScopeMode",
    "SessionScope",
    "Shared",
    "TurnReport",
    "TurnResult",
    "UpkeepResult",
    "aconsolidate",
    "add_message",
    "add_short_term",
    "anthropic_tools",
    "areflect",
    "build_context",
    "char_token_count",
    "complete_action",
    "consolidate",
    "contact_profile",
    "default_token_counter",
    "extract_json",
    "openai_tools",
    "record_contact",
    "reflect",
    "thread_context",
]
