""":class:`AsyncMemory`: the :class:`~memlane.Memory` API with ``async`` methods.

Each call runs the synchronous method in a worker thread
(:func:`asyncio.to_thread`). The engine releases the GIL for its work and
SQLite and HTTP embedders release it while they wait, so concurrent calls
really run in parallel and the event loop never blocks.

Every method has the parameters and types of its :class:`~memlane.Memory`
twin (``tests/test_aio.py`` compares them), so editors and mypy check calls
to either alike.
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import numpy.typing as npt

from memlane import _core
from memlane.embeddings._base import Embedder
from memlane.knowledge.api import AsyncKnowledgeMixin
from memlane.memory import DEFAULT_EMBEDDER, Memory, Mode
from memlane.records import MemoryRecord, SearchHit

__all__ = ["AsyncMemory"]


class AsyncMemory(AsyncKnowledgeMixin):
    """``AsyncMemory(path, embedder, **options)`` opens a :class:`~memlane.Memory`.

    Use it as ``async with AsyncMemory(path) as mem: ...`` or call
    :meth:`close`. ``await AsyncMemory.open(...)`` opens the store in a worker
    thread (opening replays the database, which may take a while).
    """

    #: The :class:`~memlane.Memory` every call runs on.
    sync: Memory

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

    # -- writes ------------------------------------------------------------------------

    async def add(
        self,
        text: str,
        *,
        table: str = "memories",
        type: str = "semantic",
        agent_id: str | None = None,
        user_id: str | None = None,
        room_id: str | None = None,
        world_id: str | None = None,
        session_id: str | None = None,
        namespace: str | None = None,
        importance: float = 0.5,
        evergreen: bool = False,
        metadata: Mapping[str, Any] | None = None,
        embedding: npt.ArrayLike | None = None,
        id: str | None = None,
        created_at: float | datetime | None = None,
        unique: bool = False,
    ) -> MemoryRecord:
        """:meth:`Memory.add <memlane.Memory.add>` in a worker thread."""
        return await asyncio.to_thread(
            self.sync.add,
            text,
            table=table,
            type=type,
            agent_id=agent_id,
            user_id=user_id,
            room_id=room_id,
            world_id=world_id,
            session_id=session_id,
            namespace=namespace,
            importance=importance,
            evergreen=evergreen,
            metadata=metadata,
            embedding=embedding,
            id=id,
            created_at=created_at,
            unique=unique,
        )

    async def add_many(self, items: Iterable[Mapping[str, Any]]) -> builtins.list[MemoryRecord]:
        """:meth:`Memory.add_many <memlane.Memory.add_many>` in a worker thread.

        ``items`` is read into a list first, here, not in the thread.
        """
        return await asyncio.to_thread(self.sync.add_many, list(items))

    async def replace(
        self,
        items: Iterable[Mapping[str, Any]],
        table: str | Sequence[str] | None = None,
        *,
        type: str | Sequence[str] | None = None,
        filters: Mapping[str, Any] | None = None,
        agent_id: str | None = None,
        user_id: str | None = None,
        room_id: str | None = None,
        world_id: str | None = None,
        session_id: str | None = None,
        namespace: str | None = None,
    ) -> tuple[int, builtins.list[MemoryRecord]]:
        """:meth:`Memory.replace <memlane.Memory.replace>` in a worker thread.

        ``items`` is read into a list first, here, not in the thread.
        """
        return await asyncio.to_thread(
            self.sync.replace,
            list(items),
            table,
            type=type,
            filters=filters,
            agent_id=agent_id,
            user_id=user_id,
            room_id=room_id,
            world_id=world_id,
            session_id=session_id,
            namespace=namespace,
        )

    async def update(
        self,
        id: str,
        *,
        text: str | None = None,
        importance: float | None = None,
        metadata: Mapping[str, Any] | None = None,
        evergreen: bool | None = None,
        type: str | None = None,
        embedding: npt.ArrayLike | None = None,
    ) -> MemoryRecord:
        """:meth:`Memory.update <memlane.Memory.update>` in a worker thread."""
        return await asyncio.to_thread(
            self.sync.update,
            id,
            text=text,
            importance=importance,
            metadata=metadata,
            evergreen=evergreen,
            type=type,
            embedding=embedding,
        )

    async def delete(self, id: str) -> None:
        """:meth:`Memory.delete <memlane.Memory.delete>` in a worker thread."""
        await asyncio.to_thread(self.sync.delete, id)

    async def delete_all(
        self,
        table: str | None = None,
        *,
        type: str | Sequence[str] | None = None,
        filters: Mapping[str, Any] | None = None,
        agent_id: str | None = None,
        user_id: str | None = None,
        room_id: str | None = None,
        world_id: str | None = None,
        session_id: str | None = None,
        namespace: str | None = None,
    ) -> int:
        """:meth:`Memory.delete_all <memlane.Memory.delete_all>` in a worker thread."""
        return await asyncio.to_thread(
            self.sync.delete_all,
            table,
            type=type,
            filters=filters,
            agent_id=agent_id,
            user_id=user_id,
            room_id=room_id,
            world_id=world_id,
            session_id=session_id,
            namespace=namespace,
        )

    async def prune(
        self,
        *,
        max_age_days: float | None = None,
        keep_importance_at_least: float | None = None,
        keep_access_count_above: int | None = None,
        table: str | None = "memories",
        now: float | None = None,
        agent_id: str | None = None,
        user_id: str | None = None,
        room_id: str | None = None,
        world_id: str | None = None,
        session_id: str | None = None,
        namespace: str | None = None,
    ) -> builtins.list[MemoryRecord]:
        """:meth:`Memory.prune <memlane.Memory.prune>` in a worker thread."""
        return await asyncio.to_thread(
            self.sync.prune,
            max_age_days=max_age_days,
            keep_importance_at_least=keep_importance_at_least,
            keep_access_count_above=keep_access_count_above,
            table=table,
            now=now,
            agent_id=agent_id,
            user_id=user_id,
            room_id=room_id,
            world_id=world_id,
            session_id=session_id,
            namespace=namespace,
        )

    # -- reads -------------------------------------------------------------------------

    async def get(self, id: str, *, include_embedding: bool = False) -> MemoryRecord:
        """:meth:`Memory.get <memlane.Memory.get>` in a worker thread."""
        return await asyncio.to_thread(self.sync.get, id, include_embedding=include_embedding)

    async def count(
        self,
        table: str | None = None,
        *,
        type: str | Sequence[str] | None = None,
        filters: Mapping[str, Any] | None = None,
        start: float | datetime | None = None,
        end: float | datetime | None = None,
        agent_id: str | None = None,
        user_id: str | None = None,
        room_id: str | None = None,
        world_id: str | None = None,
        session_id: str | None = None,
        namespace: str | None = None,
    ) -> int:
        """:meth:`Memory.count <memlane.Memory.count>` in a worker thread."""
        return await asyncio.to_thread(
            self.sync.count,
            table,
            type=type,
            filters=filters,
            start=start,
            end=end,
            agent_id=agent_id,
            user_id=user_id,
            room_id=room_id,
            world_id=world_id,
            session_id=session_id,
            namespace=namespace,
        )

    async def list(
        self,
        table: str | None = None,
        start: float | datetime | None = None,
        end: float | datetime | None = None,
        limit: int = 50,
        order: Literal["asc", "desc"] = "desc",
        *,
        offset: int = 0,
        type: str | Sequence[str] | None = None,
        filters: Mapping[str, Any] | None = None,
        include_embedding: bool = False,
        agent_id: str | None = None,
        user_id: str | None = None,
        room_id: str | None = None,
        world_id: str | None = None,
        session_id: str | None = None,
        namespace: str | None = None,
    ) -> builtins.list[MemoryRecord]:
        """:meth:`Memory.list <memlane.Memory.list>` in a worker thread."""
        return await asyncio.to_thread(
            self.sync.list,
            table,
            start,
            end,
            limit,
            order,
            offset=offset,
            type=type,
            filters=filters,
            include_embedding=include_embedding,
            agent_id=agent_id,
            user_id=user_id,
            room_id=room_id,
            world_id=world_id,
            session_id=session_id,
            namespace=namespace,
        )

    async def search(
        self,
        query: str,
        k: int = 5,
        *,
        mode: Mode = "hybrid",
        table: str | None = None,
        type: str | Sequence[str] | None = None,
        filters: Mapping[str, Any] | None = None,
        threshold: float | None = None,
        min_similarity: float | None = None,
        weights: Mapping[str, float] | None = None,
        decay: float | None = None,
        recency_half_life: float | None = None,
        fusion: Literal["rrf", "weighted"] = "weighted",
        rrf_k: float = _core.DEFAULT_RRF_K,
        alpha: float = _core.DEFAULT_ALPHA,
        candidates: int | None = None,
        start: float | datetime | None = None,
        end: float | datetime | None = None,
        explain: bool = False,
        query_embedding: npt.ArrayLike | None = None,
        track_access: bool | None = None,
        include_embedding: bool = False,
        agent_id: str | None = None,
        user_id: str | None = None,
        room_id: str | None = None,
        world_id: str | None = None,
        session_id: str | None = None,
        namespace: str | None = None,
    ) -> builtins.list[SearchHit]:
        """:meth:`Memory.search <memlane.Memory.search>` in a worker thread."""
        return await asyncio.to_thread(
            self.sync.search,
            query,
            k,
            mode=mode,
            table=table,
            type=type,
            filters=filters,
            threshold=threshold,
            min_similarity=min_similarity,
            weights=weights,
            decay=decay,
            recency_half_life=recency_half_life,
            fusion=fusion,
            rrf_k=rrf_k,
            alpha=alpha,
            candidates=candidates,
            start=start,
            end=end,
            explain=explain,
            query_embedding=query_embedding,
            track_access=track_access,
            include_embedding=include_embedding,
            agent_id=agent_id,
            user_id=user_id,
            room_id=room_id,
            world_id=world_id,
            session_id=session_id,
            namespace=namespace,
        )

    # -- export and import -------------------------------------------------------------

    async def export_jsonl(self, path: str | Path, *, embeddings: bool = True) -> int:
        """:meth:`Memory.export_jsonl <memlane.Memory.export_jsonl>` in a worker thread."""
        return await asyncio.to_thread(self.sync.export_jsonl, path, embeddings=embeddings)

    async def import_jsonl(
        self, path: str | Path, *, on_conflict: Literal["error", "skip"] = "error"
    ) -> int:
        """:meth:`Memory.import_jsonl <memlane.Memory.import_jsonl>` in a worker thread."""
        return await asyncio.to_thread(self.sync.import_jsonl, path, on_conflict=on_conflict)

    # -- maintenance -------------------------------------------------------------------

    async def snapshot(self) -> None:
        """:meth:`Memory.snapshot <memlane.Memory.snapshot>` in a worker thread."""
        await asyncio.to_thread(self.sync.snapshot)

    async def wait_indexed(self) -> None:
        """:meth:`Memory.wait_indexed <memlane.Memory.wait_indexed>` in a worker thread."""
        await asyncio.to_thread(self.sync.wait_indexed)

    async def close(self) -> None:
        """:meth:`Memory.close <memlane.Memory.close>` in a worker thread."""
        await asyncio.to_thread(self.sync.close)

    def __len__(self) -> int:
        return len(self.sync)

    async def __aenter__(self) -> AsyncMemory:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"Async{self.sync!r}"
