"""Automatic garbage collection paused while a replay reads its rows, for the process.

A replay's rows hold no cycles, but each is an object the collector tracks: a million of
them, alive for a batch, set off full collections that took a tenth of a cold open and
freed nothing (benches/README.md, "A cold open in two thirds of the time").
"""

from __future__ import annotations

import contextlib
import gc
import os
import threading
from collections.abc import Iterator

_lock = threading.Lock()
_pausers = 0
# The thresholds the first replay to pause found, until the last one ends.
_saved: tuple[int, ...] | None = None


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """Automatic collection paused, for the whole process, until the last replay that
    paused it ends; other threads' cycles wait for the collection after it.

    Paused by a first threshold of 0 (``gc.set_threshold``), never by ``gc.disable``: the
    caller's own ``gc.disable()`` or ``gc.enable()`` meanwhile stands after the pause, as
    does a threshold the caller sets meanwhile (the pause gives back only its own)."""
    global _pausers, _saved
    with _lock:
        if _pausers == 0:
            _saved = gc.get_threshold()
            gc.set_threshold(0, *_saved[1:])
        _pausers += 1
    try:
        yield
    finally:
        with _lock:
            _pausers -= 1
            if _pausers == 0:
                _resume()


def _resume() -> None:
    """Gives back the thresholds a pause found, unless someone has set others since."""
    global _saved
    saved = _saved
    if saved is not None and gc.get_threshold() == (0, *saved[1:]):
        gc.set_threshold(*saved)
    _saved = None


def after_fork() -> None:
    """A child forked during a replay, or as one began or ended, runs none: its collector
    is as it was before. The thresholds are saved before the pause sets its own and
    forgotten after it gives them back, so a fork between any two of those steps finds
    what to give back."""
    global _lock, _pausers
    _lock = threading.Lock()
    _pausers = 0
    _resume()


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(after_in_child=after_fork)
