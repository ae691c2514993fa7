"""The durable jobs an ``Upkeep`` holds, each as its record was last written by it.

A holder on another host is taken for gone once its lease (``Holder.until``) has passed,
so a holder renews the lease of every job it holds, waiting or running, on a thread of
its own (no turn waits for it). Every write of a held record is conditional on the record
being the text this holder wrote last, checked in the write's own transaction: once
another process took a job over (or the record went), its first holder writes nothing
more of it, stores nothing more from it (``hold`` raises ``JobLostError`` after each
model answer, before the answer is applied) and leaves the other's record alone.

A write that failed may still have been stored: a PostgreSQL commit whose connection was
cut is applied or not, and may become visible only after a read that follows it. So a
holder keeps each text it may have written last (the last one written for sure, and
those written since with the outcome unknown), and writes again over whichever of them
the record holds; it builds on the newest.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from memlane.agent.upkeep.jobs import Holder, Job, JobLostError
from memlane.errors import ClosedError, MemlaneError

if TYPE_CHECKING:
    from memlane.agent.loop import AgentMemory
    from memlane.store import JobBook

__all__ = ["Holding"]

log = logging.getLogger("memlane.agent")

#: The texts whose write failed kept at most beside the last written for sure (a lease
#: renewal fails every third of a lease while the store does): the newest.
_UNKNOWN = 3


class Holding:
    """The records of the jobs held by ``token`` (leases of ``lease`` seconds), by key."""

    def __init__(self, host: weakref.ref[AgentMemory], token: str, lease: float) -> None:
        self._host = host
        self._token = token
        self.lease = lease
        #: Guards ``_held`` and each conditional write with it: the worker's and the
        #: renewer's writes of one record must not both start from one text.
        self._lock = threading.Lock()
        #: The texts each record may hold as this holder wrote it: those whose write
        #: failed, newest first, then the last written for sure.
        self._held: dict[str, list[str]] = {}
        #: The records whose release met a store error, as ``_held`` keeps them, and
        #: whether each was to be left rather than dropped: tried again at the next
        #: release and renewal, or they would stay held by this live holder, run by none.
        self._ending: dict[str, tuple[list[str], bool]] = {}
        #: By job: the records of the jobs it took the place of that its record does not
        #: show (a store error when it was written), ended with it.
        self._covered: dict[str, list[tuple[str, list[str]]]] = {}
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    def _jobs(self) -> JobBook:
        host = self._host()
        if host is None:
            raise ClosedError("the AgentMemory of this upkeep was dropped")
        return host.memory.jobs

    def holder(self) -> Holder:
        return Holder.here(self._token, time.time() + self.lease)

    def holds(self, key: str) -> bool:
        with self._lock:
            return key in self._held

    def record(self, job: Job) -> None:
        """Records a new job, held from now (``MemlaneError``: it was not recorded)."""
        text = job.held_by(self.holder()).dumps()
        # A new key: no other writer knows it yet, so the write needs no lock.
        self._jobs().put(job.key, text)
        self.took(job.key, text)

    def took(self, key: str, text: str) -> None:
        """Holds job ``key``, whose record is ``text`` (written by this holder)."""
        with self._lock:
            self._held[key] = [text]
            self._ending.pop(key, None)
            if self._renewer is None:
                self._renewer = threading.Thread(
                    target=_renew_loop,
                    args=(weakref.ref(self), self._stop, self.lease / 3),
                    name="memlane-upkeep-lease",
                    daemon=True,
                )
                self._renewer.start()

    def hold(self, key: str, change: Callable[[Job], Job] | None = None) -> None:
        """Writes job ``key`` again with its lease renewed (and ``change`` made to it) if
        its record is still as this holder wrote it; ``JobLostError`` if not (the job is
        then no longer held). A store error leaves it held, the text it tried among
        those its record may hold."""
        with self._lock:
            texts = self._held.get(key)
            if texts is None:
                raise JobLostError(f"upkeep job {key} is not held here any more")
            job = Job.loads(texts[0])
            new = (job if change is None else change(job)).held_by(self.holder()).dumps()
            if not self._swap(key, texts, new):
                del self._held[key]
                self._leave_covered(key)
                raise JobLostError(f"upkeep job {key} was taken over by another process")

    def _swap(self, key: str, texts: list[str], new: str) -> bool:
        """Writes ``new`` over whichever of ``texts`` job ``key``'s record holds (lock
        held); False if none. A store error leaves ``new`` among the texts it may hold."""
        jobs = self._jobs()
        try:
            for text in texts:
                if jobs.swap(key, text, new):
                    texts[:] = [new]
                    return True
        except MemlaneError:  # the last written for sure stays, at the end
            texts[:] = [new, *texts[:-1]][:_UNKNOWN] + texts[-1:]
            raise
        return False

    def coalesced(self, kept: Job, dropped: Job) -> None:
        """``kept`` took the place of ``dropped`` (and its windows, ``kept.ends``): kept's
        record is written with them, then the other is dropped. A crash between the two
        loses neither: a job found again whose windows a newer one shows is dropped unrun
        (``found.py``). Should kept's record not show them (a store error, or another
        process took kept over), the other's record ends with kept, or is left for
        whoever looks next."""
        with self._lock:
            old = self._held.pop(dropped.key, None)
            held = self._held.get(kept.key)
            if held is None:  # kept already ran to its end: the other goes
                if old is not None:
                    self._end(dropped.key, old, leave=False)
                return
            new = replace(Job.loads(held[0]), ends=kept.ends).held_by(self.holder()).dumps()
            try:
                ours = self._swap(kept.key, held, new)
            except MemlaneError:
                if old is not None:  # kept shows its windows here, its record may not
                    self._covered.setdefault(kept.key, []).append((dropped.key, old))
                raise
            if not ours:
                del self._held[kept.key]
                log.warning("memlane: upkeep job %s was taken over by another process", kept.id)
            if old is not None:  # a job taken over elsewhere does not show its windows
                self._end(dropped.key, old, leave=not ours)

    def _drop(self, key: str, texts: list[str]) -> bool:
        """Drops job ``key``'s record if it holds one of ``texts``; whether it did."""
        jobs = self._jobs()
        return any(jobs.drop(key, text) for text in texts)

    def release(self, key: str, leave: bool = False) -> None:
        """Ends the holding of job ``key``: drops its record (done), or with ``leave``
        writes it again with no holder (for whoever looks next); a record another
        process took over is left as it is."""
        self._end_again()
        with self._lock:
            texts = self._held.pop(key, None)
            if texts is None:
                return
            # The records of the jobs whose windows it showed in their place go with it.
            for covered, held in self._covered.pop(key, []):
                self._ending[covered] = (held, leave)
            self._end(key, texts, leave)
        self._end_again()

    def _end(self, key: str, texts: list[str], leave: bool) -> None:
        """Drops or leaves job ``key``'s record (lock held); a store error keeps it among
        those to end again."""
        try:
            if leave:
                done = self._swap(key, texts, Job.loads(texts[0]).held_by(None).dumps())
            else:
                done = self._drop(key, texts)
        except MemlaneError:
            self._ending[key] = (texts, leave)
            raise
        if not done:
            log.warning("memlane: upkeep job %s was taken over by another process", key)

    def _end_again(self) -> None:
        """Ends the records whose release met a store error, while it lasts."""
        with self._lock:
            for key, (texts, leave) in list(self._ending.items()):
                del self._ending[key]
                try:
                    self._end(key, texts, leave)
                except ClosedError:
                    raise
                except MemlaneError as e:
                    log.warning("memlane: upkeep job %s stays recorded: %s", key, e)
                    return

    def forget(self, key: str) -> None:
        """No longer holds job ``key`` (its record stays as it is, or is ended again if
        its release met a store error)."""
        with self._lock:
            self._held.pop(key, None)
            self._leave_covered(key)

    def _leave_covered(self, key: str) -> None:
        """The records of the jobs whose windows job ``key`` was to show in their place,
        left for whoever looks next (lock held): ``key`` shows them no more."""
        for covered, held in self._covered.pop(key, []):
            self._ending[covered] = (held, True)

    def renew(self) -> None:
        """Renews the lease of every job held (what the renewer does every third of one),
        and ends again the records whose release met a store error."""
        self._end_again()
        with self._lock:
            keys = list(self._held)
        for key in keys:
            try:
                self.hold(key)
            except JobLostError as e:
                log.warning("memlane: %s", e)
            except ClosedError:  # the AgentMemory or its Memory went: nothing to renew
                raise
            except MemlaneError as e:  # tried again at the next renewal
                log.warning("memlane: upkeep job %s's lease not renewed: %s", key, e)

    def stop(self) -> None:
        """No lease to renew any more (a record whose release met a store error stays for
        the next ``AgentMemory``: ``close`` waits for no store)."""
        self._stop.set()


def _renew_loop(ref: weakref.ref[Holding], stop: threading.Event, every: float) -> None:
    # A weak reference: the thread never keeps its Upkeep (nor its AgentMemory) alive.
    while not stop.wait(every):
        holding = ref()
        if holding is None:
            return
        try:
            holding.renew()
        except ClosedError:  # the AgentMemory or its Memory went: nothing to renew
            return
        del holding
