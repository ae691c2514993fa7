"""What a turn leaves to do, and where it is done: at once in ``after`` (``"inline"``) or
on background workers (``"background"``, the default), so no turn waits for an LLM.

``after`` decides from cheap counters and engine reads which upkeep is due, records the
durable jobs (``memlane.agent.upkeep.jobs``) and hands them over: work that calls
the model (reflection, consolidation, daily logs, step summaries) to one worker, work
that does not (contact profiles, eviction) to another, so a model that hangs never holds
a profile back. Each model call has a time limit, and a call still hung holds off the
next one: a model that never answers costs one thread, not one per turn. Jobs of a kind
and room coalesce while they wait, and a bounded number wait at all: a turn whose job
finds the queue full is told so in its report and the job is due again.

Jobs found in the store are resumed only by an ``AgentMemory`` of the same owner (table,
scope settings and default scope), only when the process that held them is gone, and
only after taking them over in one conditional write. Its holder renews a job's lease
while the job waits or runs, and writes its record, and applies a model's answer, only
while the record is still as it wrote it (``holding``): a job taken over from a holder
that only seemed gone is applied by one of the two.

Model calls run on the worker's thread, an async-only model's on a loop of the upkeep's
own (``callers.upkeep_caller``): never on a turn's loop, which may be closed or idle by
the time the job runs.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import uuid
import warnings
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Literal

from memlane.agent.callers import Caller, LoopThread, Meter, timed, upkeep_caller
from memlane.agent.caps import CURRENT
from memlane.agent.context import default_token_counter
from memlane.agent.daily import DailyLogger
from memlane.agent.facts import CHECK
from memlane.agent.llm import ChatMessage
from memlane.agent.reports import TriggerFailure, TurnReport, UpkeepResult
from memlane.agent.upkeep import cadence
from memlane.agent.upkeep.found import found_again
from memlane.agent.upkeep.holding import Holding
from memlane.agent.upkeep.jobs import (
    Holder,
    Job,
    JobLostError,
    JobRecordError,
    JobSkippedWarning,
    Lease,
    coalesce,
    earlier_windows,
    owner_of,
)
from memlane.agent.upkeep.triggers import (
    Room,
    consolidation_due,
    run_flush,
    store_step_summary,
)
from memlane.agent.upkeep.work import do, finished
from memlane.agent.upkeep.worker import QueueFullError, Worker, WorkerClosedError
from memlane.errors import ClosedError, InvalidArgumentError, MemlaneError, shown
from memlane.scoping import EventScope, exact_scope
from memlane.store import JobOutcome

if TYPE_CHECKING:
    from memlane.agent.loop import AgentMemory
    from memlane.memory import Memory

__all__ = ["Upkeep", "UpkeepMode"]

log = logging.getLogger("memlane.agent")

UpkeepMode = Literal["background", "inline"]
OnUpkeep = Callable[[UpkeepResult], None]

#: Kinds whose work needs no model: they run on a worker of their own.
_LOCAL = frozenset({"profile", "eviction"})
#: The order the triggers run in inline.
_INLINE = ("reflection", "facts", "consolidation", "eviction", "flush", "daily", "profile")
#: How often a running agent looks for jobs that a process gone since left.
_RESCAN = 60.0


class Upkeep:
    """The upkeep of one ``AgentMemory``."""

    def __init__(
        self,
        host: AgentMemory,
        mode: UpkeepMode,
        on_upkeep: OnUpkeep | None,
        timeout: float | None,
        max_pending: int,
    ) -> None:
        if mode not in ("background", "inline"):
            raise InvalidArgumentError(
                f"upkeep must be 'background' or 'inline', got {shown(mode)}"
            )
        if on_upkeep is not None and not callable(on_upkeep):
            raise InvalidArgumentError("on_upkeep must be a callable taking an UpkeepResult")
        # Weak: the workers' threads hold this object, and through a strong reference
        # they would keep the AgentMemory (and its Memory, and the store's lock) alive
        # after its caller dropped it.
        self._host = weakref.ref(host)
        #: Guards the rooms' counters and the profile's read-change-write (the turn's
        #: path takes it too).
        self.lock = threading.RLock()
        self._rooms: dict[tuple[tuple[str, str], ...], Room] = {}
        self.daily = DailyLogger(host.daily)
        self.mode: UpkeepMode = mode
        self.on_upkeep = on_upkeep
        self.timeout = None if timeout is None or math.isinf(timeout) else timeout
        self.owner = owner_of(host.table, host.scopes, host.memory.default_scope)
        self.token = uuid.uuid4().hex
        #: How long a holder on another host is taken for alive without news of it.
        self.lease = 900.0 if self.timeout is None else max(900.0, 4 * self.timeout)
        self.holding = Holding(self._host, self.token, self.lease)
        self.loop = LoopThread("memlane-upkeep-loop")
        run: Callable[[], Callable[[Job, Caller | None], None] | None]
        run = weakref.WeakMethod(self._run)
        lease = Lease(self.token, partial(_ended, self.holding, self.loop))
        #: The job that took the place of each one coalesced away (set by ``merge``, on
        #: the submitting thread, and taken by it).
        self._kept: dict[str, Job] = {}
        merge = partial(_merge, self._kept)
        self.model = Worker(run, "memlane-upkeep", max_pending, lease.ended, merge)
        self.local = Worker(run, "memlane-upkeep-local", max_pending, lease.ended, merge)
        # Dropped without close(): the workers stop (the job running ends first) and
        # the durable jobs left stay recorded for the next AgentMemory.
        weakref.finalize(host, _drop, self.model, self.local)
        self._timed = timed(self.timeout)
        self._scanned: float | None = None
        self._counter: Callable[[str], int] | None = None
        self._skipped: set[str] = set()

    @property
    def host(self) -> AgentMemory:
        host = self._host()
        if host is None:
            raise ClosedError("the AgentMemory of this upkeep was dropped")
        return host

    @property
    def background(self) -> bool:
        return self.mode == "background"

    @property
    def closed(self) -> bool:
        return self.model.closed

    def room(self, event: EventScope) -> Room:
        """The per-room state of ``event``'s room (made at first use)."""
        key = _key(event.history)
        with self.lock:
            return self._rooms.setdefault(key, Room())

    def caller(self, call: Caller | None) -> Caller | None:
        """``call`` with this agent's time limit on each model call."""
        return None if call is None else self._timed(call)

    def _own(self, call: Caller | None) -> Caller | None:
        """The model as the workers call it (None without one), whichever thread or loop
        the turn that hands them the work runs on."""
        return None if call is None else self.caller(upkeep_caller(self.host.llm, self.loop))

    def pending(self) -> list[Job]:
        return sorted(self.model.pending() + self.local.pending(), key=lambda j: j.now)

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
        """The triggers of a turn just stored: run now (inline) or handed to the workers."""
        host = self.host
        if not self.background:
            call = self.caller(call)
            kinds = (
                "reflection",
                "facts",
                "consolidation",
                "eviction",
                "flush",
                "daily",
                "profile",
            )
            for kind in kinds:
                self._guarded(
                    kind,
                    report,
                    partial(
                        do,
                        self.host,
                        self.lock,
                        self.daily,
                        kind,
                        event,
                        room,
                        report,
                        call,
                        now,
                        user,
                    ),
                )
            return
        call = self._own(call)
        self.resume(call)
        scope = _key(event.history)
        jobs: list[Job] = []
        # A reflection at the room's cadence shows its own window and those failed ones
        # left; between, a turn that finds windows left retries them alone.
        with self.lock:
            reflects = host.reflection.enabled and call is not None
            own = cadence.windows(room.since_reflection, host.reflection.every) if reflects else 0
            missed, covers = list[float](), list[str]()
            if own or (reflects and room.reflection_missed):
                room.since_reflection = 0 if own else room.since_reflection
                missed, room.reflection_missed = room.reflection_missed, []
                covers, room.failed_reflections = room.failed_reflections, []
        if own or missed:
            reflection = self._job("reflection", event, now)
            jobs.append(replace(reflection, span=own, ends=earlier_windows(missed, own)))
        # One consolidation, daily log or eviction of a room waits or runs at a time: later
        # turns that find it still due meanwhile do not record more.
        waiting = {j.slot for j in self.pending()}
        try:
            if ("consolidation", scope) not in waiting and consolidation_due(
                host.memory, host.consolidation, event, call, now
            ) is not None:
                jobs.append(self._job("consolidation", event, now))
        except MemlaneError as e:
            report.failures.append(TriggerFailure("consolidation", f"{type(e).__name__}: {e}"))
        try:  # facts the turn's tools remembered, or a check that failed, left pending
            if (
                call is not None
                and ("facts", scope) not in waiting
                # Current versions only: a superseded one is history, never checked, and
                # counting it queued an empty job at every turn.
                and self._count(event, {CHECK: "pending", "valid_to": None})
            ):
                jobs.append(self._job("facts", event, now))
        except MemlaneError as e:
            report.failures.append(TriggerFailure("facts", f"{type(e).__name__}: {e}"))
        self._guarded(
            "flush",
            report,
            lambda: run_flush(host.flush, host.tools, self.lock, room, report, now),
        )
        if ("daily", scope) not in waiting and self.daily.due(event.history, call, now):
            jobs.append(self._job("daily", event, now))
        if host.profiles.enabled and user and user.strip():
            names = [] if event.name is None else [event.name]
            jobs.append(self._job("profile", event, now, user, {"count": 1, "names": names}))
        try:  # the cap's check is an engine count: the eviction itself runs on the worker
            # Current records only, as the eviction counts them: superseded versions
            # would queue an eviction every turn that then has nothing to do.
            over = self._count(event, CURRENT) > host.limits.max_memories
            if over and ("eviction", scope) not in waiting:
                jobs.append(self._job("eviction", event, now))
        except MemlaneError as e:
            report.failures.append(TriggerFailure("eviction", f"{type(e).__name__}: {e}"))
        for job in jobs:
            self._submit(job, call, room, report, covers if job.kind == "reflection" else ())

    def _count(self, event: EventScope, filters: Mapping[str, object]) -> int:
        """The agent's records of exactly ``event``'s scope that match ``filters``: one of
        a scope below it (another agent's, when this one has no agent_id) is not its."""
        host = self.host
        scope, only = exact_scope(host.memory, event.fields)
        return host.memory.count(host.table, filters={**only, **filters}, **scope)

    def _job(
        self,
        kind: Literal["reflection", "consolidation", "facts", "daily", "profile", "eviction"],
        event: EventScope,
        now: float,
        user: str | None = None,
        payload: dict[str, object] | None = None,
    ) -> Job:
        holder = Holder.here(self.token, time.time() + self.lease)
        return Job(
            kind, event, now, user, payload=dict(payload or {}), owner=self.owner, holder=holder
        )

    def _submit(
        self,
        job: Job,
        call: Caller | None,
        room: Room,
        report: TurnReport,
        covers: Sequence[str] = (),
    ) -> None:
        """Records ``job`` (durable, not resumed) and hands it to its worker; ``covers``:
        the records of the failed reflections whose windows it shows, dropped once its
        record shows them, before the worker can finish it (or they could run again)."""
        resumed = job.resumed
        if job.durable and not resumed:  # a job taken over was recorded as it was taken
            try:
                self.holding.record(job)
            except MemlaneError as e:  # not recorded: it is due again next turn
                report.failures.append(TriggerFailure(job.kind, f"{type(e).__name__}: {e}"))
                self._undo(job, room, covers=covers)
                return
            if job.kind == "reflection" and job.span:  # the cadence's, once recorded
                cadence.reflected(self.host.memory, self.host.table, job.event.history, job.now)
        if job.durable:  # its record shows their windows now
            for key in covers:
                self._release(key)
            covers = ()
        worker = self.local if job.kind in _LOCAL else self.model
        try:
            skipped = worker.submit(job, call)
        except WorkerClosedError:  # closed while the turn was stored: left for the next one
            report.failures.append(TriggerFailure(job.kind, "the AgentMemory was closed"))
            return
        except QueueFullError as e:
            report.failures.append(TriggerFailure(job.kind, f"upkeep queue full: {e}"))
            # A resumed one is left to whoever looks next (this agent, in a minute), a
            # new reflection held as a failed one is; others are due again.
            held = job.durable and not resumed and job.kind == "reflection"
            if job.durable and not held:
                self._release(job.key, leave=resumed)
            if not resumed:  # a resumed one's windows stay its own, in its record
                self._undo(job, room, held=held, covers=covers)
            return
        if skipped is not None:  # never a resumed job: those run, done in part or not
            kept = self._kept.pop(skipped.key)
            if job.durable:  # the one kept covers the windows of the other
                try:
                    self.holding.coalesced(kept, skipped)
                except MemlaneError as e:
                    log.warning("memlane: upkeep job %s not recorded again: %s", kept.id, e)

    def _release(self, key: str, leave: bool = False) -> None:
        """Ends the holding of a durable job: done or refused, or left (``leave``)."""
        try:
            self.holding.release(key, leave)
        except MemlaneError as e:
            self.holding.forget(key)
            log.warning("memlane: upkeep job %s stays recorded for now: %s", key, e)

    def step_summary(self, room: Room, call: Caller) -> Callable[[str, str, int], None]:
        """What ``compact`` asks for a step summary in the background."""
        timed_call = self._own(call)

        def ask(key: str, text: str, steps: int) -> None:
            job = Job("compaction", EventScope({}, "", "", ""), 0.0)
            job.payload.update(key=key, text=text, steps=steps, room=room)
            try:
                self.model.submit(job, timed_call)
            except (QueueFullError, WorkerClosedError):
                with self.lock:
                    room.compacting = False

        return ask

    def resume(self, call: Caller | None) -> None:
        """Hands the worker the jobs of this owner whose holder is gone (a killed process,
        a closed AgentMemory), taking each over first; at the first turn, then once a
        minute."""
        mono = time.monotonic()
        if self._scanned is not None and mono - self._scanned < _RESCAN:
            return
        self._scanned = mono
        try:
            left = found_again(self.host.memory, self.owner, self.host.scopes, self._skip)
        except MemlaneError as e:
            log.warning("memlane: pending upkeep could not be read: %s", e)
            return
        for key, text, job, event in left:
            mine = job.taken_over(
                event, self.owner, Holder.here(self.token, time.time() + self.lease)
            )
            try:
                taken = mine.dumps()
                if not self.host.memory.jobs.swap(key, text, taken):
                    continue  # taken over meanwhile by another process
            except JobRecordError as e:  # no room for this holder: read, never taken
                self._skip(key, str(e))
                continue
            except MemlaneError as e:
                log.warning("memlane: upkeep job %s could not be taken over: %s", job.id, e)
                continue
            self.holding.took(key, taken)
            report = TurnReport()
            self._submit(mine, call, self.room(event), report)
            for f in report.failures:  # no turn's report to say it in
                log.warning("memlane: upkeep job %s not resumed now: %s", job.id, f.error)

    def _skip(self, key: str, why: str) -> None:
        if key in self._skipped:
            return
        self._skipped.add(key)
        message = f"memlane: upkeep job record {key!r} skipped (kept in the store): {why}"
        log.warning("%s", message)
        warnings.warn(message, JobSkippedWarning, stacklevel=2)

    # -- the worker's side ----------------------------------------------------------------

    def _run(self, job: Job, call: Caller | None) -> None:
        host = self._host()
        if host is None:  # dropped: a durable job stays recorded for the next AgentMemory
            return
        report = TurnReport()
        if job.kind == "compaction":
            p = job.payload
            if call is not None:
                rep = store_step_summary(
                    host.compaction, p["room"], self.lock, p["key"], p["text"], p["steps"], call
                )
                if rep.error:
                    log.warning("memlane: step compaction failed: %s", rep.error)
            return
        if host.memory.closed:  # the store went first: durable jobs stay recorded in it
            log.debug("memlane: upkeep job %s (%s) not run: the Memory is closed", job.id, job.kind)
            return
        if job.durable:  # still this holder's, with its lease renewed from now
            try:
                self.holding.hold(job.key)
            except JobLostError as e:
                log.warning("memlane: upkeep job %s not run: %s", job.id, e)
                return
            except MemlaneError as e:  # each model answer is checked again before use
                log.warning("memlane: upkeep job %s's lease not renewed: %s", job.id, e)
            if call is not None:
                call = self._fenced(job, call)
        room = self.room(job.event)
        meter = None if call is None else Meter(call, self._tokens())
        call = meter
        lost = False
        try:
            if job.resumed and job.kind == "consolidation" and finished(self.host, job):
                return
            run = partial(
                do,
                host,
                self.lock,
                self.daily,
                job.kind,
                job.event,
                room,
                report,
                call,
                job.now,
                job.user,
                job,
                self.holding,
            )
            self._guarded(job.kind, report, run)
        finally:
            # The reflection's own failure, not a later step's (its fact checks): an
            # answer applied is never asked for again.
            done = report.reflection is not None and report.reflection.error is None
            failed = job.kind == "reflection" and bool(report.failures) and not done
            if job.durable:
                lost = not self.holding.holds(job.key)
                # A failed reflection stays recorded, held, until the room's next one
                # covers it: a process that ends first leaves it to the next AgentMemory.
                if not failed or lost:
                    self._release(job.key)
        if failed and not lost:
            self._undo(job, room, held=job.durable)
        result = UpkeepResult(job.kind, job.now, report)
        if meter is not None:
            result.calls, result.tokens_in, result.tokens_out = (
                meter.calls,
                meter.tokens_in,
                meter.tokens_out,
            )
        with self.lock:
            room.upkeep.append(result)
        _record_outcome(host.memory, result)
        for f in report.failures:
            log.warning("memlane: %s failed (it runs again later): %s", f.trigger, f.error)
        if self.on_upkeep is not None:
            try:
                self.on_upkeep(result)
            except Exception:
                log.exception("memlane: on_upkeep raised")

    def _fenced(self, job: Job, call: Caller) -> Caller:
        """``call``, whose answers are used only while ``job`` is still this holder's:
        each renews its lease, or raises ``JobLostError`` (another process took it over
        meanwhile, and applies its own answer)."""

        def fenced(messages: Sequence[ChatMessage], max_tokens: int | None) -> str:
            answer = call(messages, max_tokens)
            try:
                self.holding.hold(job.key)
            except JobLostError:
                raise
            except MemlaneError as e:  # the store's failure: what applies the answer says so
                log.warning("memlane: upkeep job %s's lease not renewed: %s", job.id, e)
            return answer

        return fenced

    def _undo(self, job: Job, room: Room, held: bool = False, covers: Sequence[str] = ()) -> None:
        """A reflection not run, or failed: its windows are left to the room's next turn
        (``held``: its record too, and those of ``covers``, until one shows them)."""
        if job.kind == "reflection":
            with self.lock:
                room.leave_windows([*job.ends, *[job.now] * job.span])
                room.failed_reflections.extend(covers)
                if held:
                    room.failed_reflections.append(job.key)

    def _tokens(self) -> Callable[[str], int]:
        if self._counter is None:
            self._counter = default_token_counter()
        return self._counter

    @staticmethod
    def _guarded(kind: str, report: TurnReport, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception as e:  # a store error in a trigger: it runs again next turn
            report.failures.append(TriggerFailure(kind, f"{type(e).__name__}: {e}"))

    # -- ending ---------------------------------------------------------------------------

    def drain(self, timeout: float | None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            for worker in (self.model, self.local):
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                if not worker.wait(left):
                    return False
            # a local job may follow a model job of the same turn, and back
            if not self.model.busy() and not self.local.busy():
                return True

    def close(self, timeout: float | None) -> list[Job]:
        deadline = None if timeout is None else time.monotonic() + timeout
        left = self.model.close(timeout)
        rest = None if deadline is None else max(0.0, deadline - time.monotonic())
        return sorted(left + self.local.close(rest), key=lambda j: j.now)


def _record_outcome(memory: Memory, result: UpkeepResult) -> None:
    """Keeps what a job cost and what failed in the store, where another process (the
    server's inspector) reads it."""
    if memory.closed:
        return
    failures = tuple((f.trigger, f.error) for f in result.report.failures)
    outcome = JobOutcome(
        result.kind,
        result.asked_at,
        time.time(),
        result.calls,
        result.tokens_in,
        result.tokens_out,
        failures,
    )
    try:
        memory.jobs.record_outcome(outcome)
    except MemlaneError as e:
        log.warning("memlane: a %s job's outcome was not recorded: %s", result.kind, e)


def _merge(kept: dict[str, Job], newer: Job, older: Job) -> None:
    coalesce(newer, older)
    kept[older.key] = newer


def _ended(holding: Holding, loop: LoopThread) -> None:
    """Neither worker runs a job any more: no lease to renew, no model call to make."""
    holding.stop()
    loop.close()


def _drop(model: Worker, local: Worker) -> None:
    model.close(0)
    local.close(0)


def _key(history: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """A room's key (its scope fields and room)."""
    return tuple(sorted(history.items()))
