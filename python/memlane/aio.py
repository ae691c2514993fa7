""":class:`AsyncMemory`: the :class:`~memlane.Memory` API with ``async`` methods.

Each call runs the synchronous method in a worker thread
(:func:`asyncio.to_thread`). The engine releases the GIL for its work and
SQLite and HTTP embedders release it while they wait, so concurrent calls
really run in parallel and the event loop never blocks.
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from memlane.embeddings._base import Embedder
from memlane.knowledge.api import AsyncKnowledgeMixin
from memlane.memory import DEFAULT_EMBEDDER, Memory
from memlane.records import MemoryRecord, SearchHit

__all__ = ["AsyncMemory"]


class AsyncMemory(AsyncKnowledgeMixin):
    """``AsyncMemory(path, embedder, **options)`` opens a :class:`~memlane.Memory`.

    Use it as ``async with AsyncMemory(path) as mem: ...`` or call
    :meth:`close`. ``await AsyncMemory.open(...)`` opens the store in a worker
    thread (opening replays the database, which may take a while).
    """

    def __init__(
        self,
        path: str | Path | None = None,
        embedder: Embedder | None = DEFAULT_EMBEDDER,
        *,
        memory: Memory | None = None,
        **options: Any,
    ) -> None:
        self.sync = memory if memory is not None else Memory(path, embedder, **options)

    @classmethod
    async def open(
        cls,
        path: str | Path | None = None,
        embedder: Embedder | None = DEFAULT_EMBEDDER,
        **options: Any,
    ) -> AsyncMemory:
        memory = await asyncio.to_thread(Memory, path, embedder, **options)
        return cls(memory=memory)

    async def add(self, text: str, **kwargs: Any) -> MemoryRecord:
        return await asyncio.to_thread(self.sync.add, text, **kwargs)

    async def add_many(self, items: Iterable[Mapping[str, Any]]) -> list[MemoryRecord]:
        return await asyncio.to_thread(self.sync.add_many, list(items))

    async def replace(
        self, items: Iterable[Mapping[str, Any]], table: Any = None, **kwargs: Any
    ) -> tuple[int, builtins.list[MemoryRecord]]:
        return await asyncio.to_thread(self.sync.replace, list(items), table, **kwargs)

    async def get(self, id: str, **kwargs: Any) -> MemoryRecord:
        return await asyncio.to_thread(self.sync.get, id, **kwargs)

    async def update(self, id: str, **kwargs: Any) -> MemoryRecord:
        return await asyncio.to_thread(self.sync.update, id, **kwargs)

    async def delete(self, id: str) -> None:
        await asyncio.to_thread(self.sync.delete, id)

    async def delete_all(self, table: str | None = None, **kwargs: Any) -> int:
        return await asyncio.to_thread(self.sync.delete_all, table, **kwargs)

    async def count(self, table: str | None = None, **kwargs: Any) -> int:
        return await asyncio.to_thread(self.sync.count, table, **kwargs)

    async def list(self, table: str | None = None, **kwargs: Any) -> builtins.list[MemoryRecord]:
        return await asyncio.to_thread(self.sync.list, table, **kwargs)

    async def search(self, query: str, k: int = 5, **kwargs: Any) -> builtins.list[SearchHit]:
        return await asyncio.to_thread(self.sync.search, query, k, **kwargs)

    async def export_jsonl(self, path: str | Path, **kwargs: Any) -> int:
        return await asyncio.to_thread(self.sync.export_jsonl, path, **kwargs)

    async def import_jsonl(self, path: str | Path, **kwargs: Any) -> int:
        return await asyncio.to_thread(self.sync.import_jsonl, path, **kwargs)

    async def snapshot(self) -> None:
        await asyncio.to_thread(self.sync.snapshot)

    async def wait_indexed(self) -> None:
        await asyncio.to_thread(self.sync.wait_indexed)

    async def close(self) -> None:
        await asyncio.to_thread(self.sync.close)

    def __len__(self) -> int:
        return len(self.sync)

    async def __aenter__(self) -> AsyncMemory:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"Async{self.sync!r}"
