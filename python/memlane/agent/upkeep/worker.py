"""The background worker: a thread that runs upkeep jobs in the order they came, so an
agent's turn hands its LLM work over and returns (Letta's sleep-time agents, in process).

Its queue is bounded twice: jobs of one slot (kind and room) coalesce while they wait,
the newest taking the place of the older, and at most ``limit`` jobs wait at once. A job
found again after a crash never coalesces: it may have done part of its work."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from memlane.agent.callers import Caller
from memlane.agent.upkeep.jobs import Job

__all__ = ["QueueFullError", "Worker", "WorkerClosedError"]

log = logging.getLogger("memlane.agent")


class QueueFullError(Exception):
    """The worker holds ``limit`` jobs already (the job was not queued)."""


class WorkerClosedError(Exception):
    """The worker was closed (the job was not queued)."""


@dataclass(slots=True)
class _Entry:
    job: Job
    call: Caller | None


class Worker:
    """Runs ``run(job, call)`` for each job submitted (``call``: the LLM as the turn that
    asked had it), one at a time, on a daemon thread that starts with the first job.
    ``run`` must not raise (an exception is logged). ``run`` is a weak reference: the
    thread never keeps its owner alive (a job whose owner is gone is not run).
    ``on_end`` is called once no job of this worker runs any more after ``close``;
    ``merge(newer, older)`` when ``newer`` takes the place of the waiting ``older``
    (under the worker's lock)."""

    def __init__(
        self,
        run: Callable[[], Callable[[Job, Caller | None], None] | None],
        name: str,
        limit: int,
        on_end: Callable[[], None] | None = None,
        merge: Callable[[Job, Job], None] | None = None,
    ) -> None:
        self._run = run
        self._merge = merge
        self._name = name
        self._limit = limit
        self._on_end = on_end
        self._cv = threading.Condition()
        self._queue: deque[_Entry] = deque()
        self._slots: dict[Hashable, _Entry] = {}
        self._running: Job | None = None
        self._thread: threading.Thread | None = None
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def submit(self, job: Job, call: Caller | None) -> Job | None:
        """Queues ``job``, or coalesces it with the job of its slot that waits: the newer
        of the two waits, and the other is returned (it will not run; None if there was
        none). A resumed job is never returned: it runs ahead of the job of its slot
        that waits, so that one sees what it did. Raises ``QueueFullError`` when
        ``limit`` jobs wait already, ``WorkerClosedError`` once closed."""
        with self._cv:
            if self._closed:
                raise WorkerClosedError("the upkeep worker is closed")
            slot = job.slot
            waiting = None if slot is None else self._slots.get(slot)
            if waiting is not None and not job.resumed:
                if waiting.job.now > job.now:  # asked before the one waiting: it covers it
                    if self._merge is not None:
                        self._merge(waiting.job, job)
                    return job
                old, waiting.job, waiting.call = waiting.job, job, call
                if self._merge is not None:
                    self._merge(job, old)
                return old
            if len(self._queue) >= self._limit:
                raise QueueFullError(f"{self._limit} upkeep jobs wait already")
            entry = _Entry(job, call)
            if job.resumed:  # in no slot: a job of its slot asked later must not replace it
                at = len(self._queue) if waiting is None else self._index(waiting)
                self._queue.insert(at, entry)
            else:
                self._queue.append(entry)
                if slot is not None:
                    self._slots[slot] = entry
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
                self._thread.start()
            self._cv.notify_all()
        return None

    def _index(self, entry: _Entry) -> int:
        # By identity: two entries may hold equal jobs.
        return next(i for i, e in enumerate(self._queue) if e is entry)

    def pending(self) -> list[Job]:
        """Jobs submitted and not finished, oldest first (the running one first)."""
        with self._cv:
            head = [] if self._running is None else [self._running]
            return head + [e.job for e in self._queue]

    def busy(self) -> bool:
        with self._cv:
            return self._running is not None or bool(self._queue)

    def wait(self, timeout: float | None = None) -> bool:
        """Waits until every job submitted so far has finished; False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cv:
            while self._running is not None or self._queue:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cv.wait(left)
        return True

    def close(self, timeout: float | None) -> list[Job]:
        """Waits up to ``timeout`` for the jobs, then stops: the job running goes on to its
        end, the others are not started. Returns the jobs left (not finished)."""
        self.wait(timeout)
        with self._cv:
            left = self.pending()
            self._queue.clear()
            self._slots.clear()
            if not self._closed:
                self._closed = True
                if self._running is None:
                    self._ended()
            self._cv.notify_all()
        return left

    def _ended(self) -> None:
        if self._on_end is not None:
            self._on_end()

    def _loop(self) -> None:
        while True:
            with self._cv:
                while not self._queue and not self._closed:
                    self._cv.wait()
                if not self._queue:  # closed, nothing left to start
                    break
                entry = self._queue.popleft()
                slot = entry.job.slot
                if slot is not None and self._slots.get(slot) is entry:  # not a resumed job's
                    del self._slots[slot]
                self._running = entry.job
            try:
                run = self._run()
                if run is not None:
                    run(entry.job, entry.call)
                del run
            except Exception:  # run() reports its own failures; this is a bug's last net
                log.exception("memlane: upkeep job %s (%s) failed", entry.job.id, entry.job.kind)
            finally:
                with self._cv:
                    # Ended before anyone waiting on this job is told it finished.
                    if self._closed:
                        self._ended()
                    self._running = None
                    self._cv.notify_all()
