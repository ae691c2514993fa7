"""``close`` called more than once at a time: from other threads, from a signal handler
or a finalizer run inside a call on the store, in a child forked meanwhile, after the
first was interrupted. Each returns once the store is released, or at once where
waiting for the first could wait for itself; none hangs."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from conftest import StoreFactory
from memlane import Memory


def _first_close_held(
    mem: Memory, monkeypatch: pytest.MonkeyPatch
) -> tuple[threading.Thread, threading.Event]:
    """A thread whose ``close`` of ``mem`` is held as it writes the snapshot, until the
    event returned is set."""
    sync = mem._sync  # type: ignore[attr-defined]
    saving, go = threading.Event(), threading.Event()
    save = sync.save

    def held() -> None:
        saving.set()
        go.wait()
        save()

    monkeypatch.setattr(sync, "save", held)
    first = threading.Thread(target=mem.close)
    first.start()
    assert saving.wait(60)
    return first, go


def test_a_second_close_returns_once_the_store_is_released(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second ``close`` (the exit hook, a signal handler, another thread) returned at
    once while the first was still writing the snapshot and releasing the store, so a
    process could end with the store half closed. It now returns when the first does."""
    mem = make_store("second_close")
    mem.add("kept", id="r1")
    first, go = _first_close_held(mem, monkeypatch)
    released: list[bool] = []
    second = threading.Thread(
        target=lambda: (mem.close(), released.append(not mem._finalizer.alive))  # type: ignore[attr-defined]
    )
    second.start()
    second.join(0.5)  # the first is held: the second must not have returned
    assert second.is_alive() and not released
    go.set()
    first.join(60)
    second.join(60)
    assert released == [True]
    assert mem.closed
    again = make_store("second_close")
    assert again.get("r1").text == "kept"
    again.close()


def test_close_from_a_signal_handler_inside_close_returns(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A handler that closes the store (on SIGTERM, say) can run on the thread already
    closing it: that second call returns at once instead of waiting for the call it
    interrupted."""
    mem = make_store("signal_close")
    mem.add("kept", id="r1")
    sync = mem._sync  # type: ignore[attr-defined]
    save = sync.save
    handled: list[bool] = []

    def handler(signum: int, frame: object) -> None:
        mem.close()
        handled.append(mem.closed)

    def interrupted() -> None:
        os.kill(os.getpid(), signal.SIGUSR1)  # the handler runs before the next line
        save()

    before = signal.signal(signal.SIGUSR1, handler)
    try:
        monkeypatch.setattr(sync, "save", interrupted)
        mem.close()
    finally:
        signal.signal(signal.SIGUSR1, before)
    assert handled == [True]
    again = make_store("signal_close")
    assert again.get("r1").text == "kept"
    again.close()


def _claimed(mem: Memory) -> None:
    """Waits (bounded) until another thread's close has marked ``mem`` closing."""
    for _ in range(6000):
        if mem.closed:
            return
        threading.Event().wait(0.01)
    raise AssertionError("the first close never began")


def test_a_second_close_on_a_thread_holding_the_database_lock_returns() -> None:
    """A signal handler that closes the store can run on a thread inside a read of an
    in-memory store, which holds the database's lock for the read. With another thread
    already closing (and waiting for that lock), the handler's close waited for it:
    neither could go on. It returns at once there."""
    mem = Memory(None)
    mem.add("kept", id="r1")
    db = mem._sync.db  # type: ignore[attr-defined]
    with db._lock:  # as the read the handler interrupts
        first = threading.Thread(target=mem.close)
        first.start()
        _claimed(mem)
        mem.close()  # the handler's: returns while this thread holds the lock
        assert first.is_alive()  # the first waits for that lock
    first.join(60)
    assert not first.is_alive()


def test_close_in_a_child_forked_while_the_parent_closed(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A child forked while a parent's thread was closing the store inherited a store
    marked closing and never released: its own ``close`` (the exit hook's too) waited
    for good. The child leaves the parent's store alone and returns at once."""
    mem = make_store("forked_closing")
    mem.add("kept", id="r1")
    first, go = _first_close_held(mem, monkeypatch)
    try:
        pid = os.fork()
        if pid == 0:  # the child: close, then leave without the parent's exit hooks
            try:
                mem.close()
                os._exit(0 if mem.closed else 1)
            finally:
                os._exit(2)
        status = None
        for _ in range(6000):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.01)
        else:
            os.kill(pid, signal.SIGKILL)  # it hung
            status = os.waitpid(pid, 0)[1]
        assert status is not None and os.waitstatus_to_exitcode(status) == 0, status
    finally:
        go.set()
        first.join(60)
    again = make_store("forked_closing")
    assert again.get("r1").text == "kept"
    again.close()


def test_closers_waiting_return_when_the_first_close_is_interrupted(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exception out of the first close's release (Ctrl-C as it closed the
    database) left every other ``close`` waiting for good, and the store locked for the
    rest of the process. They return, the first close's error its caller's, and the
    next finishes the release."""
    mem = make_store("interrupted_close")
    db = mem._sync.db  # type: ignore[attr-defined]
    closing_db, go = threading.Event(), threading.Event()
    close_db = db.close

    def interrupted() -> None:
        close_db()
        if not closing_db.is_set():  # the first time only, before the store lock's release
            closing_db.set()
            go.wait()
            raise KeyboardInterrupt

    monkeypatch.setattr(db, "close", interrupted)
    ends: list[str] = []

    def first_close() -> None:
        try:
            mem.close()
        except KeyboardInterrupt:
            ends.append("interrupted")

    first = threading.Thread(target=first_close)
    first.start()
    assert closing_db.wait(60)
    waiting = threading.Thread(target=lambda: (mem.close(), ends.append("waited")))
    waiting.start()
    go.set()
    first.join(60)
    waiting.join(60)
    later = threading.Thread(target=lambda: (mem.close(), ends.append("later")))
    later.start()
    later.join(60)
    assert sorted(ends) == ["interrupted", "later", "waited"], ends
    again = make_store("interrupted_close")  # the store lock was released
    again.close()


def test_close_from_a_signal_handler_inside_a_write_waits_for_its_end(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A handler that closes the store ran inside a write, under the store's lock: close
    released the store under the write (which then met a closed database), and joined
    the store's thread, which hung for good when that thread waited for the lock. The
    close now runs as the write lets go of the lock: the write returns, then the store
    is released."""
    mem = make_store("signal_in_write")
    writer = mem._writer  # type: ignore[attr-defined]
    check_ids = writer._check_ids
    seen: list[bool] = []

    def handler(signum: int, frame: object) -> None:
        mem.close()
        seen.append(mem.closed)  # not yet: the write goes on

    def interrupted(*args: object) -> object:
        os.kill(os.getpid(), signal.SIGUSR1)  # the handler runs before the next line
        return check_ids(*args)

    before = signal.signal(signal.SIGUSR1, handler)
    try:
        monkeypatch.setattr(writer, "_check_ids", interrupted)
        added = mem.add("kept through the close", id="r1")
    finally:
        signal.signal(signal.SIGUSR1, before)
    assert seen == [False] and added.id == "r1"
    assert mem.closed
    again = make_store("signal_in_write")
    assert again.get("r1").text == "kept through the close"
    again.close()
