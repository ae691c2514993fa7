"""search(..., rerank=): an access is recorded for the hits the caller gets (the first k
of the reranker's order) and for no other, none when the reranker fails; a reranker's
answer that is not hits it was given is an InvalidArgumentError naming it. On both
backends."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Coroutine, Sequence
from typing import Any

import pytest

from conftest import StoreFactory, WordHashEmbedder
from memlane import Memory
from memlane.aio import AsyncMemory
from memlane.errors import InvalidArgumentError
from memlane.records import SearchHit


def _store(make_store: StoreFactory, name: str = "rerank-access") -> Memory:
    mem = make_store(name, WordHashEmbedder())
    mem.add_many([{"id": f"m{i}", "text": f"tea note {i}"} for i in range(30)])
    return mem


def _accessed(mem: Memory) -> dict[str, int]:
    """The records with an access, and how many, as the store reads them back."""
    return {r.id: r.access_count for r in mem.list(limit=100) if r.access_count}


def _engine_accessed(mem: Memory) -> int:
    """The records the engine counts an access of (its filters read its own columns)."""
    return mem.count(filters={"access_count": {"$gt": 0}})


def test_only_the_hits_returned_are_accessed(make_store: StoreFactory) -> None:
    mem = _store(make_store)
    handed: list[int] = []

    def backwards(query: str, hits: list[SearchHit]) -> Sequence[SearchHit]:
        handed.append(len(hits))
        return hits[::-1]

    got = mem.search("tea", 2, rerank=backwards)
    assert handed == [20]  # the reranker saw 20 hits; the caller got 2
    assert _accessed(mem) == {h.record.id: 1 for h in got}
    assert _engine_accessed(mem) == 2
    # Each record returned shows the access just recorded, as a search without one does.
    assert [h.record.access_count for h in got] == [1, 1]
    assert all(h.record.last_accessed_at >= h.record.created_at for h in got)

    def one_new(query: str, hits: list[SearchHit]) -> Sequence[SearchHit]:
        return [h for h in hits if not h.record.access_count][-1:]

    one = mem.search("tea", 5, rerank=one_new)
    assert len(one) == 1 and one[0].record.id not in {h.record.id for h in got}
    assert _accessed(mem) == {h.record.id: 1 for h in [*got, *one]}
    assert _engine_accessed(mem) == 3
    # None kept: none accessed.
    assert mem.search("tea", 3, rerank=lambda q, hits: []) == []
    assert _engine_accessed(mem) == 3


def test_a_failing_reranker_records_no_access(make_store: StoreFactory) -> None:
    mem = _store(make_store)

    def fails(query: str, hits: list[SearchHit]) -> Sequence[SearchHit]:
        raise RuntimeError("model crashed")

    with pytest.raises(RuntimeError, match="model crashed"):
        mem.search("tea", 3, rerank=fails)
    with pytest.raises(InvalidArgumentError):
        mem.search("tea", 3, rerank=lambda q, hits: [*hits[:2], hits[0]])
    assert _accessed(mem) == {}
    assert _engine_accessed(mem) == 0


def test_reranked_searches_follow_track_access(make_store: StoreFactory) -> None:
    mem = _store(make_store)
    assert mem.search("tea", 3, rerank=lambda q, h: h, track_access=False)
    assert _accessed(mem) == {} and _engine_accessed(mem) == 0
    # Asked for: the counts the store keeps are those of the hits returned.
    got = mem.search("tea", 3, rerank=lambda q, h: h[::-1], track_access=True)
    assert _accessed(mem) == {h.record.id: 1 for h in got}


def test_a_store_without_access_tracking_records_none(make_store: StoreFactory) -> None:
    mem = make_store("untracked", WordHashEmbedder(), track_access=False)
    mem.add_many([{"text": f"tea note {i}"} for i in range(25)])
    assert len(mem.search("tea", 3, rerank=lambda q, h: h[::-1])) == 3
    assert _accessed(mem) == {} and _engine_accessed(mem) == 0


def test_the_counts_saved_are_those_of_the_hits_returned(make_store: StoreFactory) -> None:
    mem = _store(make_store, "rerank-saved")
    got = mem.search("tea", 2, rerank=lambda q, hits: hits[::-1])
    mem.close()
    again = make_store("rerank-saved", WordHashEmbedder())
    assert _accessed(again) == {h.record.id: 1 for h in got}


class _Unprintable:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (None, "rerank must return the hits it was given .*got None"),
        (3, "rerank must return the hits it was given .*got 3"),
        ([_Unprintable()], "rerank must return hits it was given.*_Unprintable"),
    ],
)
def test_an_answer_that_is_not_hits_is_refused(
    make_store: StoreFactory, answer: object, message: str
) -> None:
    mem = _store(make_store)
    with pytest.raises(InvalidArgumentError, match=message):
        mem.search("tea", 3, rerank=lambda q, hits: answer)  # type: ignore[arg-type,return-value]
    assert _accessed(mem) == {}


def test_a_reranker_that_cannot_take_query_and_hits_is_refused(make_store: StoreFactory) -> None:
    mem = _store(make_store)
    with pytest.raises(InvalidArgumentError, match="rerank must be a callable"):
        mem.search("tea", 3, rerank=lambda q: [])  # type: ignore[arg-type,misc]
    assert _accessed(mem) == {}


def test_an_async_reranker_is_refused_and_its_coroutine_closed(make_store: StoreFactory) -> None:
    mem = _store(make_store)
    made: list[Coroutine[Any, Any, Sequence[SearchHit]]] = []

    async def backwards(query: str, hits: list[SearchHit]) -> Sequence[SearchHit]:
        return hits[::-1]

    def rerank(query: str, hits: list[SearchHit]) -> Any:
        made.append(backwards(query, hits))
        return made[-1]

    async def search() -> list[SearchHit]:
        return await AsyncMemory(memory=mem).search("tea", 3, rerank=rerank)

    with pytest.raises(InvalidArgumentError, match="async rerankers are not supported"):
        asyncio.run(search())
    with pytest.raises(InvalidArgumentError, match="async rerankers are not supported"):
        mem.search("tea", 3, rerank=backwards)  # type: ignore[arg-type]
    # Closed, so it never warns that it was not awaited.
    assert [inspect.getcoroutinestate(c) for c in made] == [inspect.CORO_CLOSED]
    assert _accessed(mem) == {}
