"""The jobs an owner finds again in the store: those whose holder is gone (a killed
process, a closed ``AgentMemory``), each with its event as the owner's scopes resolve
it, for the owner to take over.

A failed reflection stays recorded until the room's next reflection, which shows its
window too, is recorded and taken; a process that ended between the two leaves both.
The one that shows the other's window runs, and the other's record is dropped unrun, so
no window is reflected twice."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from memlane.agent.upkeep.jobs import Job, JobRecordError, live_tokens
from memlane.errors import MemlaneError
from memlane.scoping import EventScope, SessionScope

if TYPE_CHECKING:
    from memlane.memory import Memory

__all__ = ["found_again"]

log = logging.getLogger("memlane.agent")

#: A window a recorded job shows: its kind, its scope's history fields, a turn's time.
_Window = tuple[str, tuple[tuple[str, str], ...], float]


def found_again(
    memory: Memory, owner: str, scopes: SessionScope, skip: Callable[[str, str], None]
) -> list[tuple[str, str, Job, EventScope]]:
    """The recorded jobs of ``owner`` whose holder is gone: each key, record, job and
    event. A record that is not a job of this version, or whose scope ``scopes`` do not
    resolve to, goes to ``skip`` with the reason (and stays in the store)."""
    live = live_tokens()
    left: list[tuple[str, str, Job, EventScope]] = []
    for key, text in memory.jobs.items():
        try:
            job = Job.loads(text)
            if job.owner != owner:
                continue  # another agent's
            if job.holder is not None and not job.holder.gone(live, time.time()):
                continue  # its process is alive and runs it
            event = job.resolved(scopes)
            if key != job.key:
                raise JobRecordError("a recorded job's key does not match its content")
        except JobRecordError as e:
            skip(key, str(e))
            continue
        left.append((key, text, job, event))
    # Each window goes to the newest job taken up here that shows it (one that is
    # skipped, or held by a process that may never run it, shows nothing); a job left
    # with no window of its own is dropped unrun.
    newest: dict[_Window, str] = {}
    for key, _, job, _ in sorted(left, key=lambda found: found[2].key):
        for end in _shown(job):
            newest[_window(job, end)] = key
    out = []
    for key, text, job, event in left:
        mine = [newest[_window(job, end)] == key for end in _shown(job)]
        ends = tuple(e for e, kept in zip(job.ends, mine, strict=False) if kept)
        span = job.span if mine and job.span and mine[-1] else 0
        if job.plan is None and (ends, span) != (job.ends, job.span):
            if not ends and not span:
                try:
                    memory.jobs.drop(key, text)
                except MemlaneError as e:
                    log.warning("memlane: upkeep job %s not dropped: %s", job.id, e)
                continue
            job = replace(job, ends=ends, span=span)
        out.append((key, text, job, event))
    return out


def _shown(job: Job) -> list[float]:
    """The turn times of the windows ``job`` shows (none for a job with a plan: it
    applies an answer it has)."""
    if job.plan is not None:
        return []
    return [*job.ends, *([job.now] if job.span else [])]


def _window(job: Job, end: float) -> _Window:
    return (job.kind, tuple(sorted(job.event.history.items())), end)
