"""One model run for the texts that several threads ask to embed at once.

Up to ``lanes`` batches are in flight at a time. A thread that calls while a lane is
free runs its own text at once. Texts that arrive while every lane is busy wait, and
when a batch ends the first of them runs up to ``most`` of them together (more, padded
to the longest, cost more than alone): a server's concurrent searches share the runs'
fixed cost instead of each running the model at once on the same cores. (OnnxEmbedder
spreads a batch over its lanes as it does a batch call's texts: ``in_lanes``.)

Who runs a batch is one of its own callers (the first that waited), so no thread is
kept for it and an embedder nobody holds leaves nothing running.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

__all__ = ["Combiner", "in_lanes"]

T = TypeVar("T")
R = TypeVar("R")


def in_lanes(work: Callable[[T], None], items: list[T], lanes: int) -> None:
    """Calls ``work`` on every item, on up to ``lanes`` threads at once (this one among
    them), each taking the next item when it is done; the first error is raised once
    all have stopped."""
    if lanes <= 1 or len(items) <= 1:
        for item in items:
            work(item)
        return
    pending = iter(items)
    lock = threading.Lock()
    errors: list[BaseException] = []

    def lane() -> None:
        while not errors:
            with lock:
                item = next(pending, None)
            if item is None:
                return
            try:
                work(item)
            except BaseException as e:
                errors.append(e)

    helpers = [threading.Thread(target=lane) for _ in range(min(lanes, len(items)) - 1)]
    for t in helpers:
        t.start()
    lane()
    for t in helpers:
        t.join()
    if errors:
        raise errors[0]


class _Slot(Generic[T, R]):
    """One caller's item and, once its batch ran, its result or the run's error."""

    __slots__ = ("batch", "done", "error", "item", "ready", "result")

    def __init__(self, item: T) -> None:
        self.item = item
        self.ready = threading.Event()  # answered, or given a batch to run
        self.batch: list[_Slot[T, R]] | None = None
        self.done = False
        self.result: R | None = None
        self.error: Exception | None = None

    def answer(self) -> R:
        if self.error is not None:
            raise self.error
        return self.result  # type: ignore[return-value]  # set with done


# Every combiner of the process, restarted in a forked child (``_restart``).
_live: weakref.WeakSet[Combiner[Any, Any]] = weakref.WeakSet()


def _restart_all() -> None:
    for combiner in list(_live):
        combiner._restart()


os.register_at_fork(after_in_child=_restart_all)


class Combiner(Generic[T, R]):
    """Calls ``run`` on the items of the calls that arrive together; ``run`` returns one
    result per item, in order. A call returns its own item's result, or raises the error
    ``run`` raised for its item: a batch that fails is run again item by item. A forked
    child's combiners start empty."""

    def __init__(
        self, run: Callable[[list[T]], Iterable[R]], lanes: int = 1, most: int = 8
    ) -> None:
        self._run = run
        self._most = most
        self._lanes = lanes
        self._restart()
        _live.add(self)

    def _restart(self) -> None:
        """No batch running and none waiting: also a forked child's state, whose lock
        and lanes may have been taken by threads that do not exist in it."""
        self._lock = threading.Lock()
        self._free = self._lanes
        self._waiting: list[_Slot[T, R]] = []

    def __call__(self, item: T) -> R:
        slot: _Slot[T, R] = _Slot(item)
        with self._lock:
            if self._free:
                self._free -= 1
                slot.batch = [slot]
            else:
                self._waiting.append(slot)
        if slot.batch is None:
            self._wait(slot)
            if slot.done:
                return slot.answer()
        assert slot.batch is not None
        self._lead(slot.batch)
        return slot.answer()

    def _wait(self, slot: _Slot[T, R]) -> None:
        try:
            slot.ready.wait()
        except BaseException:  # interrupted (KeyboardInterrupt in the main thread)
            with self._lock:
                if slot in self._waiting:  # nobody counts on it: leave the queue
                    self._waiting.remove(slot)
                    raise
            if slot.batch is not None:  # made the next runner: the others wait for it
                self._lead(slot.batch)
            raise

    def _alone(self, slot: _Slot[T, R]) -> None:
        """Answers ``slot`` with its item run alone, or the error that run raised."""
        try:
            (slot.result,) = self._run([slot.item])
        except Exception as e:
            slot.error = e
        slot.done = True

    def _lead(self, batch: list[_Slot[T, R]]) -> None:
        """Runs ``batch`` (its first slot is this thread's), answers the others, and hands
        the texts that arrived meanwhile to the first of them."""
        try:
            try:
                results = self._run([s.item for s in batch])
                for s, r in zip(batch, results, strict=True):
                    s.result = r
                    s.done = True
            except Exception as e:
                if len(batch) == 1:
                    batch[0].error, batch[0].done = e, True
                else:  # one item's failure (a text the model fails on) is not the others'
                    for s in batch:
                        self._alone(s)
        finally:
            with self._lock:
                # A run stopped by an interrupt answered nobody: its others run next.
                self._waiting[:0] = [s for s in batch[1:] if not s.done]
                following = self._waiting[0] if self._waiting else None
                if following is None:
                    self._free += 1
                else:
                    following.batch = self._waiting[: self._most]
                    del self._waiting[: self._most]
            for s in batch[1:]:
                if s.done:
                    s.ready.set()
            if following is not None:
                following.ready.set()
