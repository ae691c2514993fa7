"""Upkeep jobs: what a turn asked of the background worker, as it is kept in the store
(:attr:`memlane.Memory.jobs`) until it is done.

A job names its kind, the event it came from and the turn's time. Work that an LLM does
and that would store something twice if done twice (reflection, consolidation) is
recorded before the turn returns and dropped when done; what it stores carries the
job's id (``metadata["upkeep_job"]``), so a job found again after a crash that already
stored something is finished from what it stored instead of being done again. The other
kinds (daily logs, which the store tells apart by date; profiles; eviction; step
compaction, which only serves the turn in flight) are not recorded.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

from memlane.scoping import EventScope

__all__ = ["DURABLE", "JOB_TAG", "Job", "JobKind"]

JobKind = Literal["reflection", "consolidation", "daily", "profile", "eviction", "compaction"]
#: The kinds kept in the store until done.
DURABLE: frozenset[str] = frozenset({"reflection", "consolidation"})
#: The metadata key naming the job that stored a memory.
JOB_TAG = "upkeep_job"


@dataclass(frozen=True, slots=True)
class Job:
    """One piece of upkeep: ``kind`` for ``event``, asked at the turn's time ``now``."""

    kind: JobKind
    event: EventScope
    now: float
    user: str | None = None
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    #: For step compaction: the steps' text and the summary's cache key.
    payload: dict[str, Any] = field(default_factory=dict)

    @property
    def durable(self) -> bool:
        return self.kind in DURABLE

    @property
    def key(self) -> str:
        # The time first: jobs found again after a crash run in the order they were asked.
        return f"{self.now:020.6f}:{self.id}"

    def dumps(self) -> str:
        e = self.event
        return json.dumps(
            {
                "kind": self.kind,
                "now": self.now,
                "user": self.user,
                "id": self.id,
                "event": {
                    "fields": e.fields,
                    "identity": e.identity,
                    "contact": e.contact,
                    "source": e.source,
                    "room_id": e.room_id,
                    "mode": e.mode,
                    "name": e.name,
                },
            }
        )

    @classmethod
    def loads(cls, text: str) -> Job:
        d = json.loads(text)
        e = d["event"]
        event = EventScope(
            dict(e["fields"]),
            e["identity"],
            e["contact"],
            e["source"],
            e["room_id"],
            e["mode"],
            e["name"],
        )
        return cls(d["kind"], event, float(d["now"]), d["user"], d["id"])
