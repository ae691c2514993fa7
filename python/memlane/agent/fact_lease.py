"""One fact check of a scope at a time, across threads and processes.

Two checks of one scope at once each decide from what they read before their model
answered, and a pending fact is never shown to a check, so two copies of one fact, each
stored by one of them, were both kept. A check now holds its scope's lease, a mark of the
store's job book (``Memory.jobs``) taken in one conditional write: a second check finds it
held and leaves its facts pending for the next one, which then sees the first one's
decisions. A lease whose holder is gone (its process ended, or its time passed) is taken
over, so a crash never holds a scope's facts back for long.
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

__all__ = ["LEASE", "one_check"]

#: Seconds a check holds its scope unless renewed: a thread renews it every third of
#: that while the check runs, so a lease its check could not let go (the store failed
#: the drop) holds the scope back a minute at most.
LEASE = 60.0

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

    def end(self) -> list[str]:
        """Stops renewing; the texts the lease may hold."""
        with self.lock:
            self.stop.set()
        self.thread.join()
        return self.texts


@contextlib.contextmanager
def one_check(memory: Memory, table: str, scope: Mapping[str, str]) -> Iterator[bool]:
    """Holds the lease of ``scope``'s fact check in ``table`` for the ``with`` block;
    yields whether it does (False: another check holds it). ``MemlaneError`` when the
    store cannot tell."""
    key = _key(memory, table, scope)
    token = uuid.uuid4().hex
    mine = json.dumps(Holder.here(token, time.time() + LEASE).as_dict())
    with _live_lock:
        _live.add(token)
    renewer: _Renewer | None = None
    try:
        took = memory.jobs.take_mark(key, mine)
        if not took:
            held = memory.jobs.mark(key)
            if held is None:  # let go meanwhile
                took = memory.jobs.take_mark(key, mine)
            elif _gone(held, time.time()):
                took = memory.jobs.take_mark(key, mine, held)
        if took:
            renewer = _Renewer(memory, key, token, mine)
        yield took
    finally:
        with _live_lock:
            _live.discard(token)
        if renewer is not None:
            # A lease not let go passes within LEASE, or this process's next check of
            # the scope takes it over at once.
            with contextlib.suppress(MemlaneError):
                any(memory.jobs.drop_mark(key, held) for held in renewer.end())
