"""A Memory nobody holds releases its store at once, by reference counting alone (the
garbage collector is off here): nothing it starts or leaves behind refers back to it,
whether it opened a new store, an existing one, or one whose snapshot it rebuilt, and
whether its background thread is idle or at work. A second Memory on a store this
process holds says that an earlier Memory of this process has it open."""

from __future__ import annotations

import gc
import os
import weakref
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import pytest

from conftest import StoreFactory, WordHashEmbedder
from memlane import Memory
from memlane.errors import StoreLockedError


@pytest.fixture
def no_gc() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def add(mem: Memory) -> None:
    mem.add("x")


def add_and_search(mem: Memory) -> None:
    mem.add("the first note")
    mem.add_many([{"text": f"note {i}"} for i in range(10)])
    assert mem.search("first note", k=1)[0].record.text == "the first note"
    assert mem.search("note", k=1, mode="text")
    mem.get(mem.list(limit=1)[0].id)


def add_for_the_thread(mem: Memory) -> None:
    # More than a write links itself: the background thread links them, and is at work
    # when the Memory is dropped.
    mem.add_many([{"text": f"note {i} about thing {i * 7}"} for i in range(2_000)])
    assert mem._sync.engine.pending()


def drop(open_store: Callable[[], Memory], use: Callable[[Memory], None]) -> None:
    """Opens a store, uses it, drops it: it is freed, its thread stopped, at once."""
    mem = open_store()
    use(mem)
    thread, ref = mem._thread, weakref.ref(mem)
    del mem
    assert ref() is None
    assert not thread.is_alive()


USES = [add, add_and_search, add_for_the_thread]


def rebuilt(shared: bool = False) -> AbstractContextManager[Any]:
    """The warning of an open after a drop, which wrote no snapshot: a shared store's
    cache is no loss, and is built without one."""
    return nullcontext() if shared else pytest.warns(RuntimeWarning, match="missing")


@pytest.mark.parametrize("use", USES)
def test_a_dropped_memory_releases_its_store(
    make_store: StoreFactory, no_gc: None, use: Callable[[Memory], None]
) -> None:
    emb, shared = WordHashEmbedder(), make_store.server is not None
    drop(lambda: make_store("s", emb), use)  # a new store: no snapshot to load
    with rebuilt(shared):
        drop(lambda: make_store("s", emb), use)  # its snapshot was not written: rebuilt
    with rebuilt(shared), make_store("s", emb) as mem:
        assert len(mem) == mem.count()
    drop(lambda: make_store("s", emb), use)  # from its snapshot
    with make_store("s", emb) as mem:  # the same snapshot, and the changes since
        assert len(mem) == mem.count() > 0


@pytest.mark.parametrize("use", [add, add_and_search])
def test_a_dropped_memory_of_the_default_embedder_releases_its_store(
    tmp_path: Path, no_gc: None, use: Callable[[Memory], None]
) -> None:
    path = tmp_path / "s"
    drop(lambda: Memory(path), use)
    with rebuilt():
        drop(lambda: Memory(path), use)
    with rebuilt():
        Memory(path).close()


def test_a_text_only_memory_dropped_releases_its_store(tmp_path: Path, no_gc: None) -> None:
    path = tmp_path / "s"
    drop(lambda: Memory(path, None), add_and_search)
    with rebuilt():
        drop(lambda: Memory(path, None), add_and_search)
    with rebuilt(), Memory(path, None) as mem:
        assert mem.count() == 22


def test_a_damaged_snapshot_rebuilt_then_dropped_releases_its_store(
    tmp_path: Path, no_gc: None
) -> None:
    path, emb = tmp_path / "s", WordHashEmbedder()
    with Memory(path, emb) as mem:
        add_and_search(mem)
    (snapshot,) = (path / "index").glob("snapshot-*")
    (snapshot / "hnsw.bin").write_bytes(b"not a snapshot")
    with pytest.warns(RuntimeWarning, match="corrupt file"):
        drop(lambda: Memory(path, emb), add)
    with pytest.warns(RuntimeWarning, match="corrupt file"):
        Memory(path, emb).close()  # the drop wrote no snapshot over it


def test_a_second_memory_in_the_process_names_the_first(tmp_path: Path) -> None:
    path, emb = tmp_path / "s", WordHashEmbedder()
    first = Memory(path, emb)
    first.add("kept")
    # As a notebook cell that opens the store, run again, meets it.
    with pytest.raises(StoreLockedError, match=r"earlier Memory in this process: close\(\) it"):
        Memory(path, emb)
    assert not first.closed
    first.close()
    with Memory(path, emb) as mem:
        assert [r.text for r in mem.list()] == ["kept"]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
def test_a_forked_child_names_its_parent(tmp_path: Path) -> None:
    """A child inherits its parent's lock, which is not its own: the store is open in
    another process, the parent."""
    path = tmp_path / "s"
    with Memory(path, None):
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover (the child reports through the pipe)
            try:
                Memory(path, None)
                message = "opened"
            except StoreLockedError as e:
                message = str(e)
            except BaseException as e:
                message = repr(e)
            os.write(write, message.encode())
            os._exit(0)
        os.close(write)
        with os.fdopen(read) as f:
            message = f.read()
        os.waitpid(pid, 0)
    assert f"by process {os.getpid()}" in message and "this process" not in message
