"""Who holds a piece of work kept in the store (an upkeep job, the fact check of a scope):
the process, by host, PID namespace, pid and start time, and the object in it, with a
lease. Another process takes the work over once the holder is gone: its process ended
(looked up on the same host), or its lease passed (on another host)."""

from __future__ import annotations

import math
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

from memlane.errors import InvalidArgumentError

__all__ = ["Holder", "finite", "record_text"]


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _started(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot; "" where unknown, or for a
    process that ended and waits for its parent to reap it): a pid reused by another
    process gives another value. None where ``/proc`` does not show it: it ended, or
    belongs to another user under a ``/proc`` mounted ``hidepid``."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rest = _fields(stat)
    if len(rest) <= 19 or (rest[0] in _ENDED and not _running(pid)):
        return ""  # a killed holder not yet reaped (its main thread alone ended: running)
    return rest[19]


#: The states of a process (or thread) that ended.
_ENDED = ("Z", "X")


def _fields(stat: str) -> list[str]:
    """The fields of a ``/proc`` stat line after the name (field 2), which may hold
    spaces and parentheses: those after its last ")"."""
    return stat[stat.rfind(")") + 2 :].split()


def _running(pid: int) -> bool:
    """Whether a thread of process ``pid`` still runs."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return False
    for task in tasks:
        try:
            state = _fields((task / "stat").read_text())[:1]
        except OSError:
            continue
        if state and state[0] not in _ENDED:
            return True
    return False


#: This process's start time, read once (every job and fact check of a turn names its
#: holder), and forgotten in a forked child: a pid names another process once reused.
_own: list[str] = []
os.register_at_fork(after_in_child=_own.clear)


def _own_start() -> str:
    if not _own:
        _own.append(_started(os.getpid()) or "")
    return _own[0]


def _pid_namespace() -> str:
    """This process's PID namespace ("pid:[inode]"; "" where there is none to read)."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


# Containers with host networking share the host name and boot, not their pids: a pid is
# looked up only by a process of the same namespace. A record written before the
# namespace was part of it names another host, whose lease decides.
_HOST = f"{socket.gethostname()}/{_boot_id()}/{_pid_namespace()}"


@dataclass(frozen=True, slots=True)
class Holder:
    """The process (``host``, ``pid``, ``started``) and the ``AgentMemory`` (``token``)
    that run a job; ``until``: the unix time after which a holder on another host is
    taken for gone (on this host the process itself is looked up). ``host`` names the
    host name, its boot and the PID namespace: a process in another container of the
    same host is on another host here."""

    host: str
    pid: int
    started: str
    token: str
    until: float

    @classmethod
    def here(cls, token: str, until: float) -> Holder:
        return cls(_HOST, os.getpid(), _own_start(), token, until)

    def gone(self, live_tokens: frozenset[str], now: float) -> bool:
        """Whether this holder's process (or, in this process, its ``AgentMemory``) is gone."""
        if self.token in live_tokens:
            return False
        if self.host != _HOST:  # its pid means nothing here
            return now > self.until
        if self.pid == os.getpid() and self.started == _own_start():
            return True  # this process, and the AgentMemory that held it is closed
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except OSError:  # another user's process: it exists
            pass
        started = _started(self.pid)
        if started is None:
            # Alive, but ``/proc`` hides it (another user's, ``hidepid``): whether the pid
            # is still the holder's cannot be told, so its lease decides, as on another host.
            return now > self.until
        return bool(self.started) and started != self.started

    def as_dict(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "pid": self.pid,
            "started": self.started,
            "token": self.token,
            "until": self.until,
        }

    @classmethod
    def loads(cls, value: object) -> Holder:
        """The holder ``as_dict`` gave; ``InvalidArgumentError`` naming what is wrong."""
        if not isinstance(value, dict):
            raise InvalidArgumentError("'holder' must be an object")
        pid, until = value.get("pid"), value.get("until")
        if isinstance(pid, bool) or not isinstance(pid, int) or not 0 < pid < 1 << 31:
            raise InvalidArgumentError("holder pid must be a positive int")
        if not finite(until):
            raise InvalidArgumentError("holder 'until' must be a finite number")
        started = value.get("started")
        if not isinstance(started, str):
            raise InvalidArgumentError("holder 'started' must be a str")
        return cls(
            record_text(value.get("host"), "holder.host", 1024),
            pid,
            started,
            record_text(value.get("token"), "holder.token", 64),
            float(until),
        )


def finite(value: object) -> TypeGuard[int | float]:
    """A number a time can be: not a bool, and finite as a float (an int past the
    float range is not)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def record_text(value: object, label: str, limit: int) -> str:
    """``value``, a non-empty str of at most ``limit`` characters that UTF-8 can hold, as a
    record's field ``label`` must be; ``InvalidArgumentError`` naming it otherwise."""
    if not isinstance(value, str) or not value or len(value) > limit:
        raise InvalidArgumentError(f"{label!r} must be a non-empty str")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgumentError(f"{label!r} is not valid text") from None
    return value
