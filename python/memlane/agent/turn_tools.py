"""The memory tools ``AgentMemory`` hands a loop: ``remember`` keeps to
the length cap (splitting or summarising a long entry) and counts towards the flush
reminder; the core memory tools come with ``core_memory=``, and the long-term notes tools
(``notes_append``, ``notes_replace``) whenever the context shows the notes (unless
``context={"notes": None}``), writing the notes of the event's scope within the limits
the context shows them with."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from memlane.agent.callers import Caller
from memlane.agent.core_memory import CoreMemory
from memlane.agent.facts import pending
from memlane.agent.limits import Limits, fit
from memlane.agent.reports import TriggerFailure
from memlane.agent.tools import MemoryTools
from memlane.notes import Notebook
from memlane.scoping import EventScope

if TYPE_CHECKING:
    from memlane.memory import Memory

log = logging.getLogger("memlane.agent")


class TurnTools(MemoryTools):
    """:class:`MemoryTools` whose ``remember`` keeps to the length cap and counts entries."""

    def __init__(
        self,
        memory: Memory,
        event: EventScope,
        call: Caller | None,
        *,
        table: str,
        core: CoreMemory | None,
        notes: Notebook | None,
        limits: Limits,
        count: Callable[[EventScope, int], None],
    ) -> None:
        super().__init__(memory, event.fields, table=table, core=core, notes=notes)
        self._limits = limits
        self._count = count
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
        if self._call is not None:  # the upkeep's model checks it against what is known
            metadata = pending(metadata)
        pieces = fit(content, self._limits, self._call, failures)
        for f in failures:
            log.warning("memlane: %s failed: %s", f.trigger, f.error)
        if len(pieces) == 1:
            out = super()._remember(pieces[0], type, importance, evergreen, metadata)
            self._count(self._event, 1 if out.get("stored") else 0)
            return out
        group = uuid.uuid4().hex
        ids = []
        for i, piece in enumerate(pieces, 1):
            meta = {**(metadata or {}), "part": i, "parts": len(pieces), "split_group": group}
            ids.append(super()._remember(piece, type, importance, evergreen, meta)["id"])
        self._count(self._event, len(ids))
        return {
            "ok": True,
            "id": ids[0],
            "ids": ids,
            "stored": True,
            "note": f"longer than {self._limits.max_entry_chars} characters: "
            f"stored as {len(ids)} parts",
        }
