"""What each upkeep job does, by its kind (reflection, the fact check, consolidation,
eviction, the flush reminder, daily logs, contact profiles), and how a job found again
after a crash keeps its place: run by ``Upkeep`` (``memlane.agent.upkeep.service``),
inline in ``after`` or on its workers."""

from __future__ import annotations

import contextlib
import threading
from typing import TYPE_CHECKING

from memlane.agent.callers import Budgeted, Caller
from memlane.agent.caps import evict
from memlane.agent.consolidation import SHORT_TERM
from memlane.agent.daily import DailyLogger
from memlane.agent.facts import check_facts, pending
from memlane.agent.profiles import record_contact
from memlane.agent.reflection import Resume
from memlane.agent.reports import TriggerFailure, TurnReport
from memlane.agent.statements import LEARNED, apart
from memlane.agent.upkeep.holding import Holding
from memlane.agent.upkeep.jobs import JOB_OP, JOB_TAG, Job
from memlane.agent.upkeep.triggers import Room, run_consolidation, run_flush, run_reflection
from memlane.errors import InvalidArgumentError, UnknownIdError
from memlane.scoping import EventScope, exact_scope, scope_kwargs

if TYPE_CHECKING:
    from memlane.agent.loop import AgentMemory

__all__ = ["check", "do", "finished", "resume_of"]


def do(
    host: AgentMemory,
    lock: threading.RLock,
    daily: DailyLogger,
    kind: str,
    event: EventScope,
    room: Room,
    report: TurnReport,
    call: Caller | None,
    now: float,
    user: str | None,
    job: Job | None = None,
    holding: Holding | None = None,
) -> None:
    mem = host.memory
    jid = None if job is None else job.id
    rest = (host.table, host.limits, lock, event, room, report, call, now, jid)
    if kind == "reflection":
        resume = None if job is None or holding is None else resume_of(host, job, holding)
        plan = None if job is None else job.plan
        marks = None if call is None else pending({LEARNED: apart()})
        span, ends = (1, ()) if job is None else (job.span, job.ends)
        run_reflection(
            mem,
            host.reflection,
            *rest,
            resume=resume,
            plan=plan,
            marks=marks,
            span=span,
            ends=ends,
        )
        if call is not None:  # what it remembered is checked at once, by the same model
            check(host, event, report, call)
    elif kind == "facts":
        if call is not None:
            check(host, event, report, call)
    elif kind == "consolidation":
        marks = None if call is None else pending(None)
        run_consolidation(mem, host.consolidation, *rest, marks=marks)
        if call is not None:  # the facts it drew are checked at once, by the same model
            check(host, event, report, call)
    elif kind == "eviction":
        evict(mem, host.table, host.limits.max_memories, event, report)
    elif kind == "flush":
        run_flush(host.flush, host.tools, lock, room, report, now)
    elif kind == "daily":
        daily.run(mem, event, report, call, now)
    elif kind == "profile":
        count, names = 1, []
        if job is not None:
            count = int(job.payload.get("count", 1))
            names = list(job.payload.get("names", []))
        if host.profiles.enabled and user and user.strip():
            # Safe beside any other writer of the profile: no lock the turn waits on.
            report.profile = record_contact(
                mem, host.scopes, event, now, host.profiles, count, names
            )


def check(host: AgentMemory, event: EventScope, report: TurnReport, call: Caller) -> None:
    """The check of the scope's pending facts (see ``memlane.agent.facts``)."""
    result = check_facts(host.memory, Budgeted(call, None), host.table, event.fields)
    if report.facts is not None:  # a turn's second check (inline): one report
        result.decisions[:0] = report.facts.decisions
    report.facts = result
    if result.error is not None:
        report.failures.append(TriggerFailure("facts", result.error))


def finished(host: AgentMemory, job: Job) -> bool:
    """Whether a consolidation found again after a crash had stored its work already
    (in one transaction): then its sources go, as they would have, and it is done."""
    tagged = host.memory.list(
        host.table,
        limit=1000,
        filters={JOB_TAG: job.id},
        **scope_kwargs(job.event.fields),
    )
    if not tagged:
        return False
    # The job's scope as stored: the store's default_scope under its own.
    fields, _ = exact_scope(host.memory, job.event.fields)
    for rec in tagged:
        for source in rec.metadata.get("consolidated_from") or []:
            # A record is data from whoever could write the store: only short-term
            # entries of exactly the job's scope go (not another agent's below it).
            with contextlib.suppress(UnknownIdError, InvalidArgumentError):
                entry = host.memory.get(str(source))
                if entry.table == SHORT_TERM and entry.scope == fields:
                    host.memory.delete(entry.id)
    return True


def resume_of(host: AgentMemory, job: Job, holding: Holding) -> Resume:
    """How a reflection job keeps its place: its answer saved in its record before
    anything is stored, only while the job is still ``holding``'s (``JobLostError``
    stops the reflection before it stores anything), and (found again) the operations
    it stored already."""
    done: frozenset[int] = frozenset()
    if job.payload.get("resumed"):
        tagged = host.memory.list(
            host.table,
            limit=1000,
            filters={JOB_TAG: job.id},
            **scope_kwargs(job.event.fields),
        )
        done = frozenset(op for r in tagged if isinstance(op := r.metadata.get(JOB_OP), int))

    def save(plan: dict[str, object]) -> None:
        holding.hold(job.key, lambda held: held.with_plan(dict(plan)))

    return Resume(JOB_OP, None if job.plan is not None else save, done)
