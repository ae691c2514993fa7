"""The memory tools ``AgentMemory`` hands a loop: ``remember`` keeps to
the length cap (splitting or summarising a long entry) and counts towards the flush
reminder; the core memory tools come with ``core_memory=``, and the long-term notes tools
(``notes_append``, ``notes_replace``) whenever the context shows the notes (unless
``context={"notes": None}``), writing the notes of the event's scope within the limits
the context shows them with.

A fact ``remember`` stores is marked for the upkeep model's check, which the event's next
turn runs; tools called outside any turn (an MCP server's, a notes import) run it at
once with ``TurnTools.settle``, or after each fact with ``off_turn=True``."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from memlane import coerce
from memlane.agent.callers import Caller
from memlane.agent.caps import Limits, fit
from memlane.agent.core_memory import CoreMemory
from memlane.agent.facts import pending, restated
from memlane.agent.history import MESSAGES
from memlane.agent.memory_tools import MemoryTools
from memlane.agent.reports import TriggerFailure, TurnReport
from memlane.agent.statements import LEARNED, RESTATED
from memlane.notes import Notebook
from memlane.scoping import EventScope, agents_apart, scope_kwargs

if TYPE_CHECKING:
    from memlane.agent.upkeep.service import Upkeep
    from memlane.memory import Memory

log = logging.getLogger("memlane.agent")

#: The metadata ids under which the store's dedup window knows a record.
WINDOW_IDS = ("messageId", "message_id", "eventId", "statusMessageId")
#: What joins a call's id and a piece's place in the pieces' ids (a unit separator).
PIECE = "\x1f"


class TurnTools(MemoryTools):
    """``MemoryTools`` whose ``remember`` keeps to the length cap and counts entries.

    ``off_turn``: True when the tools are called outside any turn of the event (an MCP
    server's): each ``remember`` is then followed by ``settle``.
    """

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
        upkeep: Upkeep | None = None,
    ) -> None:
        super().__init__(memory, event.fields, table=table, core=core, notes=notes)
        self._limits = limits
        self._count = count
        self._event = event
        self._call = call
        self._upkeep = upkeep
        self.off_turn = False

    def settle(self) -> list[TriggerFailure]:
        """Runs the upkeep a turn of the event would, for what was stored outside any
        turn: the facts ``remember`` marked are checked by the upkeep model, on its
        worker (or at once, with ``upkeep="inline"``), as every fact the agent learns.
        Returns what failed at once; without an upkeep model nothing is marked, and
        ``add(unique=True)``'s rules were the whole check."""
        report = TurnReport()
        if self._upkeep is not None:
            now = coerce.timestamp(self._upkeep.host.clock(), "clock()")
            room = self._upkeep.room(self._event)
            self._upkeep.after_turn(self._event, room, report, self._call, now, None)
        for f in report.failures:
            log.warning("memlane: %s failed (it runs again later): %s", f.trigger, f.error)
        return report.failures

    def _remember(
        self,
        content: str,
        type: str = "semantic",
        importance: float = 0.5,
        evergreen: bool = False,
        metadata: Mapping[str, Any] | None = None,
        created_at: float | None = None,
    ) -> dict[str, Any]:
        failures: list[TriggerFailure] = []
        # When a statement was made is the agent's to keep, not the model's to claim.
        metadata = {k: v for k, v in (metadata or {}).items() if k not in (LEARNED, RESTATED)}
        if self._call is not None:  # the upkeep's model checks it against what is known
            metadata = pending(metadata)
        # No LLM on the turn's path in the background: an over-long memory is split, as
        # `after` splits an entry. Inline, the summary is an upkeep call within
        # upkeep_timeout (one that runs past it is split instead, its answer thrown away).
        if self._upkeep is None:
            summarise = self._call
        else:
            summarise = None if self._upkeep.background else self._upkeep.caller(self._call)
        pieces = fit(content, self._limits, summarise, failures)
        for f in failures:
            log.warning("memlane: %s failed: %s", f.trigger, f.error)
        # Dated by the agent's clock, as its turns and notes are: a reflection of the
        # turns around it compares their times.
        now = created_at
        if now is None and self._upkeep is not None:
            now = coerce.timestamp(self._upkeep.host.clock(), "clock()")
        if len(pieces) == 1:
            out = super()._remember(pieces[0], type, importance, evergreen, metadata, now)
            self._said_again(out, now, metadata)
            self._count(self._event, 1 if out.get("stored") else 0)
            if self.off_turn:
                self.settle()
            return out
        group = {"parts": len(pieces), "split_group": uuid.uuid4().hex}
        # Each piece is known to the dedup window by the call's ids and its place (after a
        # separator no platform's id holds), so a call delivered again stores none of them
        # in the write that would, and no piece is taken for a repeat of another.
        items = []
        for i, piece in enumerate(pieces, 1):
            meta = {**(metadata or {}), **group, "part": i}
            if i > 1:
                meta |= {k: f"{v}{PIECE}{i}" for k, v in meta.items() if k in WINDOW_IDS}
            items.append({"text": piece, "metadata": meta, "unique": self.unique})
        common = {"table": self.table, "type": type, "importance": float(importance)}
        common |= {"evergreen": evergreen, "created_at": now, **self.scope}
        # One transaction: a process killed while it stores leaves the whole or none.
        records = self.memory.add_many([{**common, **item} for item in items])
        ids = [rec.id for rec in records if rec.id != rec.duplicate_of]  # those stored
        first = records[0]
        if first.duplicate == "window" and ids:  # delivered again, longer (an edit): one
            self.memory.delete_all(self.table, filters={"id": {"$in": ids}}, **self.scope)
            ids = []
        if not ids:
            out = {"ok": True, "id": first.id, "stored": False}
            out |= {"duplicate": first.duplicate, "duplicate_of": first.duplicate_of}
            self._said_again(out, now, metadata)
            return out
        self._count(self._event, len(ids))
        if self.off_turn:
            self.settle()
        return {
            "ok": True,
            "id": ids[0],
            "ids": ids,
            "stored": True,
            "note": f"longer than {self._limits.max_entry_chars} characters: "
            f"stored as {len(ids)} parts"
            + ("" if len(ids) == len(pieces) else f" ({len(pieces) - len(ids)} held already)"),
        }

    def _said_again(
        self, out: Mapping[str, Any], now: float | None, metadata: Mapping[str, Any] | None
    ) -> None:
        """A fact refused as the very words of a memory is kept in it as said again (for
        the check of facts against what was said since), unless it was said again since
        the room's last turn: what a reflection or a consolidation states is dated at a
        turn, and a model repeating itself in a loop would add a version at each call."""
        if self._call is None or out.get("duplicate") != "exact":
            return
        history = scope_kwargs(self._event.history)
        only = agents_apart(self.memory, history)  # the room's turns with this agent
        last = self.memory.list(MESSAGES, limit=1, filters=only, **history)
        if last:
            said = time.time() if now is None else now
            restated(self.memory, out["duplicate_of"], said, metadata or {}, last[0].created_at)
