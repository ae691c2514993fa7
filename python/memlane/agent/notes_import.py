"""Notes imported as memories: OrcBot's files read into an event's notes
(``memlane.Memory.import_notes``), and each new entry of the files that hold facts
remembered by the agent, as its ``remember`` tool does, so that it goes the way of every
fact the agent learns (``memlane.agent.facts``): checked by the upkeep model against
what the scope knows, which it may supersede; without an upkeep model,
``add(unique=True)``'s rules decide.

The notes stay as the files say (the files are the truth for their kind); what the check
decides changes the memories only. ``JOURNAL.md`` is left out: it is the agent's diary
of what it did, not facts about the user or the world.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memlane.agent.reports import TriggerFailure
from memlane.errors import InvalidArgumentError, shown
from memlane.notes_files import NOTE_FILES, kind_notes
from memlane.scoping import EventScope, exact_scope, scope_kwargs

if TYPE_CHECKING:
    from memlane.agent.loop import AgentMemory

__all__ = ["FACT_FILES", "NotesImport", "import_notes"]

#: The files whose entries are facts, remembered when an import brings new ones.
FACT_FILES = ("LEARNING.md", "USER.md", "WORLD.md", "MEMORY.md")


@dataclass(slots=True)
class NotesImport:
    """What ``import_notes`` did: the entries stored per file read (as
    ``memlane.Memory.import_notes`` returns them), the ``remember`` tool's result for
    each new fact (``{"ok": True, "id": ...}``, or its error), and what failed of the
    upkeep run at once (the check itself runs on the upkeep's worker by default)."""

    files: dict[str, int]
    remembered: list[dict[str, Any]] = field(default_factory=list)
    failures: list[TriggerFailure] = field(default_factory=list)


def import_notes(agent: AgentMemory, dir: str | Path, event: EventScope) -> NotesImport:
    """Reads the notes files in ``dir`` into the notes of ``event``'s scope, then
    remembers each entry of ``FACT_FILES`` the scope's notes did not hold before
    (with metadata ``source: "notes"`` and its ``file``) and runs the upkeep a turn
    would, so the new facts are checked at once."""
    if not callable(getattr(agent, "memory_tools", None)) or not isinstance(event, EventScope):
        raise InvalidArgumentError(
            f"agent and event must be an AgentMemory and an EventScope, got "
            f"{shown(agent)} and {shown(event)}"
        )
    mem = agent.memory
    fields, only = exact_scope(mem, event.fields)
    kinds = {name: NOTE_FILES[name] for name in FACT_FILES}
    before = {
        kind: {r.text for r in kind_notes(mem, kind, fields, only)} for kind in kinds.values()
    }
    done = NotesImport(mem.import_notes(dir, **scope_kwargs(event.fields)))
    tools = agent.memory_tools(event)
    for name, kind in kinds.items():
        if not done.files.get(name):  # absent, or as the notes held it
            continue
        for rec in kind_notes(mem, kind, fields, only):
            if rec.text not in before[kind]:
                args = {"content": rec.text, "metadata": {"source": "notes", "file": name}}
                done.remembered.append(tools.handle_tool_call("remember", args))
    if done.remembered:
        done.failures = tools.settle()
    return done
