"""The background maintenance thread stops with its store: at close, when the Memory is
garbage-collected, and (after one warning) when the store's folder is deleted under it."""

from __future__ import annotations

import gc
import shutil
import threading
import warnings
from pathlib import Path

import pytest

from memlane import ClosedError, MemlaneError, Memory


def _fill(mem: Memory) -> None:
    mem.add_many([{"text": f"note number {i}"} for i in range(20)])
    mem.search("note", 3, mode="text")  # an access count for the thread to flush


def test_close_joins_the_thread_and_warns_nothing(tmp_path: Path, word_embedder) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mem = Memory(tmp_path / "store", word_embedder)
        thread = mem._thread
        _fill(mem)
        mem._sync.wake.set()
        mem.close()
        assert not thread.is_alive()
        mem._sync.wake.set()  # a late wake-up finds nothing to do
        mem.close()  # idempotent
    assert [str(w.message) for w in caught] == []
    with pytest.raises(ClosedError, match="closed"):
        mem.add("after close")
    with pytest.raises(ClosedError, match="closed"):
        mem.search("after close")


def test_garbage_collected_store_stops_its_thread(tmp_path: Path, word_embedder) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mem = Memory(tmp_path / "store", word_embedder)
        thread = mem._thread
        _fill(mem)
        wake = mem._sync.wake
        del mem
        gc.collect()
        wake.set()
        thread.join(timeout=10)
        assert not thread.is_alive()
    assert [str(w.message) for w in caught] == []
    # The store was released: it opens again (no snapshot without close), everything in it.
    with pytest.warns(RuntimeWarning, match="rebuilding"):
        again = Memory(tmp_path / "store", word_embedder)
    with again:
        assert len(again) == 20


def test_vanished_folder_stops_the_thread_after_one_warning(tmp_path: Path, word_embedder) -> None:
    folder = tmp_path / "store"
    mem = Memory(folder, word_embedder)
    thread = mem._thread
    _fill(mem)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        shutil.rmtree(folder)
        for _ in range(5):
            mem._sync.wake.set()
            thread.join(timeout=0.2)
        thread.join(timeout=10)
        assert not thread.is_alive()
    messages = [str(w.message) for w in caught]
    assert len(messages) == 1, messages
    assert caught[0].category is RuntimeWarning
    assert str(folder) in messages[0] and "gone" in messages[0]
    # Later calls fail at once with a memlane error, and close still releases the store.
    done = threading.Event()
    errors: list[BaseException] = []

    def later_calls() -> None:
        for call in (lambda: mem.add("too late"), lambda: mem.search("note", 3)):
            try:
                call()
            except BaseException as e:
                errors.append(e)
        done.set()

    threading.Thread(target=later_calls, daemon=True).start()
    assert done.wait(timeout=10), "a call on a vanished store hung"
    assert len(errors) == 2 and all(isinstance(e, MemlaneError) for e in errors), errors
    assert all(str(folder) in str(e) for e in errors)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mem.close()
    assert [str(w.message) for w in caught] == []
    assert not folder.exists()  # close did not bring a partial store back
