"""One fact check of a scope at a time, across threads and processes.

Two checks of one scope at once each decide from what they read before their model
answered, and a pending fact is never shown to a check, so two copies of one fact, each
stored by one of them, were both kept. A check now holds its scope's lease, a mark of the
store's job book (``Memory.jobs``) taken in one conditional write. A second check finds it
held and asks the holder for one more round (a second mark), whose reading of the pending
facts comes after the ask, so after the facts the second check was for: they are
checked, beside the first check's decisions, without waiting for another check to come.
A lease whose holder is gone (its process ended, or its time passed) is taken over, so a
crash never holds a scope's facts back for long.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from memlane.agent.holder import Holder
from memlane.errors import InvalidArgumentError, MemlaneError
from memlane.scoping import exact_scope

if TYPE_CHECKING:
    from memlane.memory import Memory

__all__ = ["LEASE", "ROUNDS", "Lease", "one_check"]

#: Seconds a check holds its scope unless renewed: a thread renews it every third of
#: that while the check runs, so a lease its check could not let go (the store failed
#: the drop) holds the scope back a minute at most.
LEASE = 60.0

#: Rounds one holding of a lease runs at most: checks of the scope that keep asking for
#: one more (facts stored without end) leave their ask to the next check then.
ROUNDS = 8

# The leases this process's checks hold now: one of this process not among them was
# left by a check that ended without letting it go (the store failed it).
_live: set[str] = set()
_live_lock = threading.Lock()


def _key(memory: Memory, table: str, scope: Mapping[str, str]) -> str:
    """The lease's key: the table and the exact scope (the store's ``default_scope``
    under it), hashed (a key has a bounded length; a scope may not)."""
    fields, _ = exact_scope(memory, scope)
    text = json.dumps([table, sorted(fields.items())])
    return "facts:" + hashlib.sha256(text.encode()).hexdigest()[:40]


def _ask_key(key: str) -> str:
    """The key of the ask for one more round of the check holding lease ``key``."""
    return "facts-ask:" + key.removeprefix("facts:")


def _gone(held: str, now: float) -> bool:
    """Whether the holder of lease ``held`` is gone (a value that is no holder's is)."""
    try:
        holder = Holder.loads(json.loads(held))
    except (ValueError, RecursionError, InvalidArgumentError):
        return True
    with _live_lock:
        live = frozenset(_live)
    return now > holder.until or holder.gone(live, now)


class _Renewer:
    """Renews a lease held (``mine``) every third of ``LEASE`` until stopped."""

    def __init__(self, memory: Memory, key: str, token: str, mine: str) -> None:
        self.memory, self.key, self.token = memory, key, token
        # The texts the lease may hold as written here: those whose write failed (the
        # commit's answer lost may have stored them), newest first, then the last written
        # for sure. Each renewal, and the drop, is tried over each.
        self.texts = [mine]
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="memlane-fact-lease", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(LEASE / 3):
            new = json.dumps(Holder.here(self.token, time.time() + LEASE).as_dict())
            with self.lock:
                if self.stop.is_set():
                    return
                try:
                    if not any(self.memory.jobs.take_mark(self.key, new, t) for t in self.texts):
                        return  # taken over: the check's own re-reads still guard it
                    self.texts = [new]
                except MemlaneError:  # tried again at the next third (a closed store too)
                    self.texts = [new, *self.texts[:-1]][:3] + self.texts[-1:]

    def holds(self) -> bool:
        """Whether the lease holds a text written here now (False: taken over)."""
        with self.lock:
            return self.memory.jobs.mark(self.key) in self.texts

    def end(self) -> list[str]:
        """Stops renewing; the texts the lease may hold."""
        with self.lock:
            self.stop.set()
        self.thread.join()
        return self.texts


class Lease:
    """A scope's check lease as ``one_check`` gives it: ``held`` while this check holds
    it; the check runs a round of its work each time ``next_round`` says so."""

    def __init__(self, memory: Memory, key: str, token: str) -> None:
        self.memory, self.key, self.ask, self.token = memory, key, _ask_key(key), token
        self.held = False
        self.rounds = 0
        self._renewer: _Renewer | None = None

    def next_round(self, more: bool = False) -> bool:
        """Whether the check runs a round now, holding the lease: its first; then one
        more while the round before left facts unread (``more``: it read a full batch) or
        a check that waited asked for one (up to ``ROUNDS``), the lease let go otherwise.
        Each round's reading of the pending facts follows the ask it answers: the ask is
        dropped before the round is run. ``MemlaneError`` when the store fails a look, or
        the lease's drop with an ask left that this check can then not answer."""
        if self._renewer is None or self.rounds >= ROUNDS:
            return False
        if self.rounds and not self._renewer.holds():  # taken over: its holder answers
            self._renewer.end()
            self._renewer, self.held = None, False
            return False
        if self.rounds == 0 or more or self.memory.jobs.mark(self.ask) is not None:
            return self._begin()
        failed = self.let_go()
        # An ask made after the look above, while the lease was still held, found it
        # held and then could not take it: answered here, or by whoever took it since
        # (a round of theirs begins after their taking, so after this ask).
        if self.memory.jobs.mark(self.ask) is not None:
            if self._take():
                return self._begin()
            if failed is not None:  # held by this check still: the ask waits, said so
                raise failed
        return False

    def _begin(self) -> bool:
        asked = self.memory.jobs.mark(self.ask)
        if asked is not None:
            self.memory.jobs.drop_mark(self.ask, asked)  # False: dropped or made again
        self.rounds += 1
        return True

    def _take(self) -> bool:
        """Takes the lease (free, let go meanwhile, or its holder gone); whether it did."""
        jobs = self.memory.jobs
        mine = json.dumps(Holder.here(self.token, time.time() + LEASE).as_dict())
        took = jobs.take_mark(self.key, mine)
        if not took:
            held = jobs.mark(self.key)
            if held is None:  # let go meanwhile
                took = jobs.take_mark(self.key, mine)
            elif _gone(held, time.time()):
                took = jobs.take_mark(self.key, mine, held)
        if took:
            self.held = True
            self._renewer = _Renewer(self.memory, self.key, self.token, mine)
        return took

    def _take_or_ask(self) -> None:
        """Takes the lease, or asks its holder for one more round; then tries once more,
        since a holder that looked for an ask before this one and let go after this
        check's first try answers it no more."""
        if self._take():
            return
        self.memory.jobs.take_mark(self.ask, self.token)  # False: asked already
        self._take()

    def let_go(self) -> MemlaneError | None:
        """Lets the lease go, if held; the error of a drop the store failed, which leaves
        it held until it passes (see ``LEASE``), or this process's next check takes it
        over."""
        renewer, self._renewer, self.held = self._renewer, None, False
        failed: MemlaneError | None = None
        for held in renewer.end() if renewer is not None else []:
            try:
                if self.memory.jobs.drop_mark(self.key, held):
                    return None
            except MemlaneError as e:
                failed = e
        return failed


@contextlib.contextmanager
def one_check(memory: Memory, table: str, scope: Mapping[str, str]) -> Iterator[Lease]:
    """The lease of ``scope``'s fact check in ``table`` for the ``with`` block: held
    (``Lease.held``), or held by another check, which this one asked for one more round.
    ``MemlaneError`` when the store cannot tell."""
    lease = Lease(memory, _key(memory, table, scope), uuid.uuid4().hex)
    with _live_lock:
        _live.add(lease.token)
    try:
        lease._take_or_ask()
        yield lease
    finally:
        with _live_lock:
            _live.discard(lease.token)
        lease.let_go()
