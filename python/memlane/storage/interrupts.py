"""Ctrl-C held back over the steps of a write that must not be cut in two.

Python raises ``KeyboardInterrupt`` in the main thread at whichever step it has reached
when SIGINT arrives, after the C call it arrived in has returned. A BEGIN that went
through, then cut off from the code that rolls it back, left the connection in its
transaction (every later write refused); a COMMIT that went through, then cut off from
the bookkeeping of its outcome, left the vector file's end behind the database's (the
next write overwrote committed entries). Those steps run under a ``Hold``: SIGINT's
handler is swapped for one that notes the signal, and the handler the caller had runs
once the hold ends, where the outcome is settled.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

__all__ = ["Hold"]

#: The hold in force in the main thread (the only one Python runs signal handlers in).
_current: Hold | None = None


class Hold:
    """SIGINT noted, not acted on, from this object's making until ``end`` (a no-op when
    not ``active``, outside the main thread, under a hold already in force, or where
    SIGINT's handler is not Python's)."""

    def __init__(self, active: bool = True) -> None:
        global _current
        self._noted: list[tuple[int, FrameType | None]] = []
        self._previous: Callable[[int, FrameType | None], Any] | None = None
        if (
            not active
            or _current is not None
            or threading.current_thread() is not threading.main_thread()
        ):
            return
        previous = signal.getsignal(signal.SIGINT)
        if not callable(previous):  # ignored, the default, or set outside Python
            return
        try:
            signal.signal(signal.SIGINT, self._note)
        except ValueError:  # not the main interpreter
            return
        self._previous, _current = previous, self

    def _note(self, signum: int, frame: FrameType | None) -> None:
        self._noted.append((signum, frame))

    def end(self) -> None:
        """Gives SIGINT back to its handler, and runs it on each signal noted meanwhile
        (the default one raises ``KeyboardInterrupt`` at the first); again, does nothing."""
        global _current
        previous, self._previous = self._previous, None
        if previous is None:
            return
        signal.signal(signal.SIGINT, previous)
        _current = None
        noted, self._noted = self._noted, []
        for signum, frame in noted:
            previous(signum, frame)
