"""search(..., diversity=λ): maximal marginal relevance in the engine, over the scored
candidates. Near-duplicate memories give their places to a distinct one; compared by
the stored vectors, or by the analysed words in a store without an embedder; on both
backends, through AsyncMemory and the HTTP route; a bad λ is refused by name."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from conftest import LOCAL, StoreFactory, WordHashEmbedder
from memlane import AsyncMemory, Memory
from memlane.agent.context import build_context
from memlane.errors import InvalidArgumentError
from memlane.server import create_app

#: Three ways of saying one thing, and one other thing about the same person.
TEXTS = [
    "Ana lives in Porto",
    "Ana lives in Porto now",
    "Ana still lives in Porto",
    "Ana works as a nurse in a big hospital near her home by the river",
]
DISTINCT = "m3"


def _fill(mem: Memory) -> None:
    mem.add_many([{"id": f"m{i}", "text": t} for i, t in enumerate(TEXTS)])


def _ids(mem: Memory, query: str, k: int, diversity: float) -> list[str]:
    return [h.record.id for h in mem.search(query, k, diversity=diversity, track_access=False)]


def test_with_diversity_the_top_k_holds_the_distinct_memory(make_store: StoreFactory) -> None:
    mem = make_store("diverse", WordHashEmbedder())
    _fill(mem)
    # Parked vectors first, then the same vectors linked into the graph.
    for stage in ("parked", "linked"):
        plain = _ids(mem, "tell me about Ana", 2, 0.0)
        assert DISTINCT not in plain, stage
        diverse = mem.search("tell me about Ana", 2, diversity=0.3, track_access=False)
        assert [h.record.id for h in diverse] == [plain[0], DISTINCT], stage
        # Each hit keeps its own score: the first is the best, the second lower than
        # the copy it displaced.
        scores = {h.record.id: h.score for h in mem.search("tell me about Ana", 4)}
        assert [h.score for h in diverse] == [scores[plain[0]], scores[DISTINCT]]
        # Every hit asked for, the copies after the distinct one.
        assert _ids(mem, "tell me about Ana", 4, 0.3)[:2] == [plain[0], DISTINCT]
        mem.wait_indexed()


def test_a_small_diversity_keeps_the_order_and_zero_is_off(make_store: StoreFactory) -> None:
    mem = make_store("gentle", WordHashEmbedder())
    _fill(mem)
    plain = _ids(mem, "tell me about Ana", 4, 0.0)
    assert _ids(mem, "tell me about Ana", 4, 0) == plain
    # λ = 0.1 moves only near ties: the copies here are far better than the nurse.
    assert _ids(mem, "tell me about Ana", 2, 0.1) == plain[:2]


def test_without_an_embedder_the_words_are_compared(make_store: StoreFactory) -> None:
    mem = make_store("words", None)
    _fill(mem)
    plain = _ids(mem, "Ana", 2, 0.0)
    assert DISTINCT not in plain
    assert _ids(mem, "Ana", 2, 0.3) == [plain[0], DISTINCT]


def test_build_context_passes_diversity_to_its_search(make_store: StoreFactory) -> None:
    mem = make_store("context", WordHashEmbedder())
    mem.add_many([{"id": f"m{i}", "text": t, "room_id": "r"} for i, t in enumerate(TEXTS)])

    def injected(diversity: float) -> list[str]:
        ctx = build_context(
            mem,
            "tell me about Ana",
            {"room_id": "r"},
            inject_limit=2,
            diversity=diversity,
            track_access=False,
        )
        return [r.id for r in ctx.records["memories"]]

    assert DISTINCT not in injected(0.0)
    assert injected(0.3)[1] == DISTINCT
    with pytest.raises(InvalidArgumentError, match="diversity"):
        injected(2.0)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (-0.1, r"diversity must be in \[0, 1\], got -0.1"),
        (1.5, r"diversity must be in \[0, 1\], got 1.5"),
        (float("nan"), r"diversity must be in \[0, 1\], got nan"),
        ("0.3", "diversity must be a number, got str"),
        (True, "diversity must be a number, got bool"),
    ],
)
def test_a_bad_diversity_is_refused_by_name(
    make_store: StoreFactory, value: object, message: str
) -> None:
    mem = make_store("refused", WordHashEmbedder())
    _fill(mem)
    with pytest.raises(InvalidArgumentError, match=message):
        mem.search("Ana", 2, diversity=value)  # type: ignore[arg-type]
    # A refused search records no access.
    assert all(r.access_count == 0 for r in mem.list())


def test_async_search_takes_diversity(tmp_path: Path) -> None:
    async def run() -> list[str]:
        async with AsyncMemory(tmp_path / "a", WordHashEmbedder()) as amem:
            await amem.add_many([{"id": f"m{i}", "text": t} for i, t in enumerate(TEXTS)])
            hits = await amem.search("tell me about Ana", 2, diversity=0.3)
            return [h.record.id for h in hits]

    assert asyncio.run(run())[1] == DISTINCT


def test_the_search_route_forwards_diversity(tmp_path: Path) -> None:
    mem = Memory(tmp_path / "served", WordHashEmbedder())
    _fill(mem)
    (tmp_path / "docs").mkdir()
    app = create_app(mem, max_body=4096, max_upload=1 << 20, ingest_root=tmp_path / "docs")
    with TestClient(app, base_url=LOCAL) as client:
        body = {"query": "tell me about Ana", "k": 2, "diversity": 0.3}
        hits = client.post("/v1/search", json=body).json()["hits"]
        assert hits[1]["record"]["id"] == DISTINCT
        bad = client.post("/v1/search", json={**body, "diversity": 2})
        assert bad.status_code == 400
        assert bad.json()["error"]["type"] == "InvalidArgumentError"
        assert "diversity" in bad.json()["error"]["message"]
    mem.close()
