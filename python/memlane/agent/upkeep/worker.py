"""The background worker: one thread that runs upkeep jobs in the order they came, so an
agent's turn hands its LLM work over and returns (Letta's sleep-time agents, in process)."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable

from memlane.agent.callers import Caller
from memlane.agent.upkeep.jobs import Job

__all__ = ["Worker"]

log = logging.getLogger("memlane.agent")


class Worker:
    """Runs ``run(job, call)`` for each job submitted (``call``: the LLM as the turn that
    asked had it), one at a time, on a daemon thread that starts with the first job.
    ``run`` must not raise (an exception is logged)."""

    def __init__(
        self, run: Callable[[Job, Caller | None], None], name: str = "memlane-upkeep"
    ) -> None:
        self._run = run
        self._name = name
        self._queue: queue.SimpleQueue[tuple[Job, Caller | None] | None] = queue.SimpleQueue()
        self._lock = threading.Condition()
        self._waiting: list[Job] = []  # submitted, not finished (the running one first)
        self._thread: threading.Thread | None = None
        self._closed = False

    def submit(self, job: Job, call: Caller | None) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError("the upkeep worker is closed")
            self._waiting.append(job)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
                self._thread.start()
        self._queue.put((job, call))

    def pending(self) -> list[Job]:
        """Jobs submitted and not finished, oldest first."""
        with self._lock:
            return list(self._waiting)

    def wait(self, timeout: float | None = None) -> bool:
        """Waits until every job submitted so far has finished; False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while self._waiting:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._lock.wait(left)
        return True

    def close(self, timeout: float | None) -> list[Job]:
        """Waits up to ``timeout`` for the jobs, then stops: the job running goes on to its
        end, the others are not started. Returns the jobs left (not finished)."""
        self.wait(timeout)
        with self._lock:
            self._closed = True
            left = list(self._waiting)
        self._queue.put(None)
        return left

    def _loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            job, call = item
            with self._lock:
                if self._closed:  # closed before it started: it stays to do (durable ones)
                    self._waiting.remove(job)
                    self._lock.notify_all()
                    continue
            try:
                self._run(job, call)
            except Exception:  # run() reports its own failures; this is a bug's last net
                log.exception("memlane: upkeep job %s (%s) failed", job.id, job.kind)
            finally:
                with self._lock:
                    self._waiting.remove(job)
                    self._lock.notify_all()
