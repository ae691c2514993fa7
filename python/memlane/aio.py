"""``AsyncMemory``: the ``Memory`` API with ``async`` methods.

Each call runs the synchronous method in a worker thread
(``asyncio.to_thread``). The engine releases the GIL for its work and
SQLite and HTTP embedders release it while they wait, so concurrent calls
really run in parallel and the event loop never blocks.

Every method is made from its ``Memory`` twin by ``_in_thread``, so it has the
twin's parameters and types by construction (declared once): editors and mypy
check calls to either alike, and ``tests/memory/test_aio.py`` holds them to it. The
API reference lists them as the async methods they are (its Griffe extension,
``docs/reference/extension.py``, reads them from this class).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar, cast

from memlane.embeddings import Embedder
from memlane.errors import InvalidArgumentError
from memlane.memory import DEFAULT_EMBEDDER, Memory

__all__ = ["AsyncMemory"]

P = ParamSpec("P")
R = TypeVar("R")


def _in_thread(
    method: Callable[Concatenate[Memory, P], R],
) -> Callable[Concatenate[AsyncMemory, P], Coroutine[Any, Any, R]]:
    """An async method that runs ``method`` on the wrapped Memory in a worker thread,
    with ``method``'s signature."""
    name = method.__name__

    async def call(self: AsyncMemory, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return cast(R, await asyncio.to_thread(getattr(self.sync, name), *args, **kwargs))

    call.__name__ = name
    call.__qualname__ = f"AsyncMemory.{name}"
    call.__doc__ = f"[`Memory.{name}`][memlane.Memory.{name}] in a worker thread."
    call.__wrapped__ = method  # type: ignore[attr-defined]  # inspect.signature reads it
    return call


class AsyncMemory:
    """The [`Memory`][memlane.Memory] API with ``async`` methods, each running its
    ``Memory`` twin in a worker thread.

    Use it as ``async with AsyncMemory(path) as mem: ...`` or call
    [`close`][memlane.AsyncMemory.close]. [`open`][memlane.AsyncMemory.open] opens the
    store in a worker thread (opening replays the database, which may take a while).

    Cancelling a call (``asyncio.wait_for``'s timeout, ``Task.cancel``) ends the wait,
    not the work: a thread cannot be stopped, so the call runs to its end, and a write
    may be stored after its caller saw ``CancelledError`` (or is refused, when the store
    was closed meanwhile). A write to retry after a cancel should name its record: an
    ``id`` (``await mem.get(id)`` says whether it landed; adding it again is refused),
    or for an agent's turn its ``message_id`` (a redelivery is known).

    Args:
        path: as for [`Memory`][memlane.Memory].
        embedder: as for [`Memory`][memlane.Memory].
        memory: an open ``Memory`` to wrap instead of opening one (then no other
            argument is given).
        **options: the other keyword arguments of [`Memory`][memlane.Memory].
    """

    sync: Memory
    """The [`Memory`][memlane.Memory] every call runs on."""

    def __init__(
        self,
        path: str | Path | None = None,
        embedder: Embedder | None = DEFAULT_EMBEDDER,
        *,
        memory: Memory | None = None,
        **options: Any,
    ) -> None:
        if memory is not None and (path is not None or embedder is not DEFAULT_EMBEDDER or options):
            # They would open a store; the one given is already open, with its own.
            raise InvalidArgumentError(
                "AsyncMemory takes either memory= (an open Memory) or the arguments that "
                "open one (path, embedder, options), not both"
            )
        self.sync = memory if memory is not None else Memory(path, embedder, **options)

    @classmethod
    async def open(
        cls,
        path: str | Path | None = None,
        embedder: Embedder | None = DEFAULT_EMBEDDER,
        **options: Any,
    ) -> AsyncMemory:
        """Opens the store in a worker thread: ``await AsyncMemory.open(path, ...)``
        takes the arguments of [`Memory`][memlane.Memory]."""
        memory = await asyncio.to_thread(Memory, path, embedder, **options)
        return cls(memory=memory)

    # Writes.
    add = _in_thread(Memory.add)
    add_many = _in_thread(Memory.add_many)
    replace = _in_thread(Memory.replace)
    update = _in_thread(Memory.update)
    supersede = _in_thread(Memory.supersede)
    history = _in_thread(Memory.history)
    delete = _in_thread(Memory.delete)
    delete_all = _in_thread(Memory.delete_all)
    prune = _in_thread(Memory.prune)
    evict = _in_thread(Memory.evict)
    renew = _in_thread(Memory.renew)
    expire = _in_thread(Memory.expire)
    import_jsonl = _in_thread(Memory.import_jsonl)
    # Reads.
    get = _in_thread(Memory.get)
    count = _in_thread(Memory.count)
    list = _in_thread(Memory.list)
    scopes = _in_thread(Memory.scopes)
    search = _in_thread(Memory.search)
    export_jsonl = _in_thread(Memory.export_jsonl)
    # Knowledge.
    ingest = _in_thread(Memory.ingest)
    ingest_config = _in_thread(Memory.ingest_config)
    ingest_text = _in_thread(Memory.ingest_text)
    # (mypy: a method with **options could take `self` by keyword; it never does.)
    search_knowledge = _in_thread(Memory.search_knowledge)  # type: ignore[arg-type]
    search_documents = _in_thread(Memory.search_documents)  # type: ignore[arg-type]
    # The watch runs in threads of its own; its stop() returns within a debounce.
    watch = _in_thread(Memory.watch)
    list_documents = _in_thread(Memory.list_documents)
    get_fragments = _in_thread(Memory.get_fragments)
    remove_document = _in_thread(Memory.remove_document)
    clear_knowledge = _in_thread(Memory.clear_knowledge)
    # OrcBot's long-term files.
    export_notes = _in_thread(Memory.export_notes)
    import_notes = _in_thread(Memory.import_notes)
    # Upkeep.
    snapshot = _in_thread(Memory.snapshot)
    wait_indexed = _in_thread(Memory.wait_indexed)
    refresh = _in_thread(Memory.refresh)
    stats = _in_thread(Memory.stats)

    async def close(self) -> None:
        """[`Memory.close`][memlane.Memory.close] in a worker thread."""
        # A thread of its own, not one of the shared workers, which calls in flight may
        # all hold: close tells them at once (a write waiting for a pooled PostgreSQL
        # connection is then refused) instead of queueing behind them.
        thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memlane-close")
        try:
            await asyncio.get_running_loop().run_in_executor(thread, self.sync.close)
        finally:
            thread.shutdown(wait=False)

    close.__wrapped__ = Memory.close  # type: ignore[attr-defined]  # as _in_thread's

    def __len__(self) -> int:
        return len(self.sync)

    async def __aenter__(self) -> AsyncMemory:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"Async{self.sync!r}"
