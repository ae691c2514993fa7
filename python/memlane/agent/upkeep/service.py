"""What a turn leaves to do, and where it is done: at once in ``after`` (``"inline"``) or
on the background worker (``"background"``, the default), so no turn waits for an LLM.

``after`` decides from cheap counters and engine reads which upkeep is due, records the
durable jobs (:mod:`~memlane.agent.upkeep.jobs`) and hands them to the worker. The
worker runs each with the trigger functions of :mod:`~memlane.agent.upkeep.triggers`,
files what it did under the room (the next turn's :attr:`TurnReport.upkeep`), calls
``on_upkeep`` and logs failures; a failure never reaches a turn as an exception.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Literal

from memlane.agent.callers import Caller
from memlane.agent.limits import evict
from memlane.agent.reports import TriggerFailure, TurnReport, UpkeepResult
from memlane.agent.upkeep.jobs import JOB_TAG, Job
from memlane.agent.upkeep.triggers import (
    Room,
    consolidation_due,
    run_consolidation,
    run_flush,
    run_reflection,
    store_step_summary,
)
from memlane.agent.upkeep.worker import Worker
from memlane.errors import InvalidArgumentError, MemlaneError, UnknownIdError
from memlane.scoping import EventScope, scope_kwargs

if TYPE_CHECKING:
    from memlane.agent.loop import AgentMemory

__all__ = ["Upkeep", "UpkeepMode"]

log = logging.getLogger("memlane.agent")

UpkeepMode = Literal["background", "inline"]
OnUpkeep = Callable[[UpkeepResult], None]


class Upkeep:
    """The upkeep of one :class:`~memlane.agent.AgentMemory`."""

    def __init__(self, host: AgentMemory, mode: UpkeepMode, on_upkeep: OnUpkeep | None) -> None:
        if mode not in ("background", "inline"):
            raise InvalidArgumentError(f"upkeep must be 'background' or 'inline', got {mode!r}")
        if on_upkeep is not None and not callable(on_upkeep):
            raise InvalidArgumentError("on_upkeep must be a callable taking an UpkeepResult")
        self.host = host
        self.mode: UpkeepMode = mode
        self.on_upkeep = on_upkeep
        self.worker = Worker(self._run)
        self._resumed = False

    @property
    def background(self) -> bool:
        return self.mode == "background"

    # -- a turn's upkeep ------------------------------------------------------------------

    def after_turn(
        self,
        event: EventScope,
        room: Room,
        report: TurnReport,
        call: Caller | None,
        now: float,
        user: str | None,
    ) -> None:
        """The triggers of a turn just stored: run now (inline) or handed to the worker."""
        host = self.host
        if not self.background:
            for kind in ("reflection", "consolidation", "eviction", "flush", "daily", "profile"):
                self._guarded(
                    kind, report, partial(self._do, kind, event, room, report, call, now, user)
                )
            return
        self.resume(call)
        # One job of a kind per scope waits at a time: while a consolidation waits for
        # the LLM, later turns that find the tier still full do not queue more.
        waiting = {(j.kind, _key(j.event.history)) for j in self.worker.pending()}
        scope = _key(event.history)
        jobs: list[Job] = []
        with host._lock:
            due = host.reflection.enabled and call is not None
            due = due and room.since_reflection >= host.reflection.every
            if due:
                room.since_reflection = 0
        if due:
            jobs.append(Job("reflection", event, now))
        try:
            if ("consolidation", scope) not in waiting and consolidation_due(
                host.memory, host.consolidation, event, call, now
            ) is not None:
                jobs.append(Job("consolidation", event, now))
        except MemlaneError as e:
            report.failures.append(TriggerFailure("consolidation", f"{type(e).__name__}: {e}"))
        self._guarded(
            "flush",
            report,
            lambda: run_flush(host.flush, host.tools, host._lock, room, report, now),
        )
        if ("daily", scope) not in waiting and host._daily.due(event.history, call, now):
            jobs.append(Job("daily", event, now))
        if host.profiles.enabled and user and user.strip():
            jobs.append(Job("profile", event, now, user))
        try:  # the cap's check is an engine count: the eviction itself runs on the worker
            over = (
                host.memory.count(host.table, **scope_kwargs(event.fields))
                > host.limits.max_memories
            )
            if over and ("eviction", scope) not in waiting:
                jobs.append(Job("eviction", event, now))
        except MemlaneError as e:
            report.failures.append(TriggerFailure("eviction", f"{type(e).__name__}: {e}"))
        for job in jobs:
            if job.durable:
                try:
                    host.memory.jobs.put(job.key, job.dumps())
                except MemlaneError as e:  # not recorded: it is due again next turn
                    report.failures.append(TriggerFailure(job.kind, f"{type(e).__name__}: {e}"))
                    self._undo(job, room)
                    continue
            self.worker.submit(job, call)

    def step_summary(self, room: Room, call: Caller) -> Callable[[str, str, int], None]:
        """What :func:`compact` asks for a step summary in the background."""

        def ask(key: str, text: str, steps: int) -> None:
            job = Job("compaction", EventScope({}, "", "", ""), 0.0)
            job.payload.update(key=key, text=text, steps=steps, room=room)
            self.worker.submit(job, call)

        return ask

    def resume(self, call: Caller | None) -> None:
        """Hands the jobs a killed process left in the store to the worker (once)."""
        if self._resumed:
            return
        self._resumed = True
        try:
            left = self.host.memory.jobs.items()
        except MemlaneError as e:
            log.warning("memlane: pending upkeep could not be read: %s", e)
            return
        for _, text in left:
            job = Job.loads(text)
            job.payload["resumed"] = True
            self.worker.submit(job, call)

    # -- the worker's side ----------------------------------------------------------------

    def _run(self, job: Job, call: Caller | None) -> None:
        host = self.host
        report = TurnReport()
        if job.kind == "compaction":
            p = job.payload
            if call is not None:
                rep = store_step_summary(
                    host.compaction, p["room"], host._lock, p["key"], p["text"], p["steps"], call
                )
                if rep.error:
                    log.warning("memlane: step compaction failed: %s", rep.error)
            return
        if host.memory.closed:  # the store went first: durable jobs stay recorded in it
            log.debug("memlane: upkeep job %s (%s) not run: the Memory is closed", job.id, job.kind)
            return
        room = host._room(job.event)
        try:
            if job.payload.get("resumed") and self._finished(job):
                return
            run = partial(
                self._do, job.kind, job.event, room, report, call, job.now, job.user, job.id
            )
            self._guarded(job.kind, report, run)
        finally:
            if job.durable:
                try:
                    host.memory.jobs.drop(job.key)
                except MemlaneError as e:
                    log.warning("memlane: upkeep job %s stays recorded: %s", job.id, e)
        if job.kind == "reflection" and report.failures:
            self._undo(job, room)
        result = UpkeepResult(job.kind, job.now, report)
        with host._lock:
            room.upkeep.append(result)
        for f in report.failures:
            log.warning("memlane: %s failed (it runs again later): %s", f.trigger, f.error)
        if self.on_upkeep is not None:
            try:
                self.on_upkeep(result)
            except Exception:
                log.exception("memlane: on_upkeep raised")

    def _finished(self, job: Job) -> bool:
        """Whether a job found again after a crash had stored its work already (then its
        last step is done here and it is not run again)."""
        host = self.host
        tagged = host.memory.list(
            host.table, limit=100, filters={JOB_TAG: job.id}, **scope_kwargs(job.event.fields)
        )
        if not tagged:
            return False
        if job.kind == "consolidation":  # the entries it summarised go, as they would have
            for rec in tagged:
                for source in rec.metadata.get("consolidated_from") or []:
                    with contextlib.suppress(UnknownIdError):
                        host.memory.delete(source)
        return True

    def _undo(self, job: Job, room: Room) -> None:
        if job.kind == "reflection":
            with self.host._lock:
                room.since_reflection = max(room.since_reflection, self.host.reflection.every)

    def _do(
        self,
        kind: str,
        event: EventScope,
        room: Room,
        report: TurnReport,
        call: Caller | None,
        now: float,
        user: str | None,
        job: str | None = None,
    ) -> None:
        host = self.host
        mem, lock = host.memory, host._lock
        rest = (host.table, host.limits, lock, event, room, report, call, now, job)
        if kind == "reflection":
            run_reflection(mem, host.reflection, *rest)
        elif kind == "consolidation":
            run_consolidation(mem, host.consolidation, *rest)
        elif kind == "eviction":
            evict(mem, host.table, host.limits.max_memories, event, report)
        elif kind == "flush":
            run_flush(host.flush, host.tools, lock, room, report, now)
        elif kind == "daily":
            host._daily.run(mem, event, report, call, now)
        elif kind == "profile":
            host._profile(event, user, report, now)

    @staticmethod
    def _guarded(kind: str, report: TurnReport, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception as e:  # a store error in a trigger: it runs again next turn
            report.failures.append(TriggerFailure(kind, f"{type(e).__name__}: {e}"))

    # -- ending ---------------------------------------------------------------------------

    def drain(self, timeout: float | None) -> bool:
        return self.worker.wait(timeout)

    def close(self, timeout: float | None) -> list[Job]:
        return self.worker.close(timeout)


def _key(history: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """A room's key (its scope fields and room)."""
    return tuple(sorted(history.items()))
