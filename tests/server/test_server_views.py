"""What the inspector reads from the record API, in process, on both backends: pages
sorted by importance, uses or last use; the upkeep's jobs waiting and the outcomes of
those done, with their cost; and how the store's index stands (Memory.stats)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from conftest import LOCAL, StoreFactory, WordHashEmbedder
from memlane import Memory
from memlane.server import create_app
from memlane.store import OUTCOMES_KEPT, JobOutcome

WORDS = [
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
]


@pytest.fixture
def mem(make_store: StoreFactory, word_embedder: WordHashEmbedder) -> Iterator[Memory]:
    m = make_store("viewed", word_embedder)
    yield m
    m.close()


@pytest.fixture
def client(mem: Memory) -> Iterator[TestClient]:
    with TestClient(create_app(mem), base_url=LOCAL) as c:
        yield c


def pages(client: TestClient, **params: Any) -> list[str]:
    """Every page of GET /v1/memories with ``params``, 5 at a time, followed by its
    next_offset: the texts in order."""
    texts: list[str] = []
    offset: int | None = 0
    while offset is not None:
        page = client.get("/v1/memories", params={**params, "limit": 5, "offset": offset})
        assert page.status_code == 200, page.json()
        body = page.json()
        texts += [r["text"] for r in body["records"]]
        offset = body["next_offset"]
    return texts


def test_pages_sorted_by_importance_and_by_use(client: TestClient, mem: Memory) -> None:
    mem.add_many(
        [
            {
                "text": f"{word} note",
                "importance": (i % 4) / 4,
                "created_at": 1_000_000 + i,
                "user_id": "alice" if i < 10 else "bob",
            }
            for i, word in enumerate(WORDS)
        ]
    )
    for word in ("bravo", "bravo", "bravo", "echo"):  # echo is the last one used
        assert mem.search(word, k=1, mode="text")[0].record.text == f"{word} note"
    alice = mem.list(limit=100, user_id="alice")
    assert len(alice) == 10

    def by(*fields: str) -> list[str]:
        ranked = sorted(alice, key=lambda r: tuple(getattr(r, f) for f in fields), reverse=True)
        return [r.text for r in ranked]

    # Ties are the newest first, page after page.
    assert pages(client, user_id="alice", sort="importance") == by("importance", "created_at")
    assert pages(client, user_id="alice", sort="importance", order="asc") == list(
        reversed(by("importance", "created_at"))
    )
    used = pages(client, user_id="alice", sort="access_count")
    assert used[:2] == ["bravo note", "echo note"]
    assert used == by("access_count", "created_at")
    assert pages(client, user_id="alice", sort="last_accessed_at")[:2] == [
        "echo note",
        "bravo note",
    ]
    # Filters and the total apply as they do by time.
    flt = json.dumps({"importance": {"$gte": 0.5}})
    page = client.get("/v1/memories", params={"sort": "importance", "filters": flt}).json()
    assert (
        page["total"] == 6 and [r["importance"] for r in page["records"]] == [0.75] * 3 + [0.5] * 3
    )
    assert pages(client, user_id="alice") == by("created_at")  # by time, as before
    bad = client.get("/v1/memories", params={"sort": "size"})
    assert bad.status_code == 400 and bad.json()["error"]["type"] == "InvalidArgumentError"
    doc = client.get("/openapi.json").json()
    (sort,) = [p for p in doc["paths"]["/v1/memories"]["get"]["parameters"] if p["name"] == "sort"]
    assert sort["schema"]["enum"] == [
        "created_at",
        "importance",
        "access_count",
        "last_accessed_at",
    ]


def test_upkeep_shows_jobs_waiting_and_what_those_done_cost(
    client: TestClient, mem: Memory
) -> None:
    holder = {"host": "box/1", "pid": 7, "started": "1", "token": "t", "until": 200.0}
    mem.jobs.put(
        "0100:a", json.dumps({"v": 2, "kind": "reflection", "now": 100.0, "holder": holder})
    )
    mem.jobs.put("0101:b", "not a job")
    mem.jobs.record_outcome(JobOutcome("reflection", 10.0, 12.0, 2, 3000, 400))
    failed = JobOutcome("facts", 11.0, 13.0, 1, 1000, 100, (("facts", "TimeoutError: slow"),))
    mem.jobs.record_outcome(failed)
    state = client.get("/v1/upkeep", params={"per_million_in": 0.5, "per_million_out": 2}).json()
    assert state["waiting"] == [
        {
            "key": "0100:a",
            "kind": "reflection",
            "asked_at": 100.0,
            "holder": {"host": "box/1", "pid": 7, "until": 200.0},
        },
        {"key": "0101:b", "kind": None, "asked_at": None, "holder": None},
    ]
    newest, oldest = state["done"]
    assert newest == {
        "kind": "facts",
        "asked_at": 11.0,
        "done_at": 13.0,
        "calls": 1,
        "tokens_in": 1000,
        "tokens_out": 100,
        "failures": [{"what": "facts", "error": "TimeoutError: slow"}],
        "cost": pytest.approx(0.0007),
    }
    assert oldest["kind"] == "reflection" and oldest["cost"] == pytest.approx(0.0023)
    assert state["totals"] == {
        "jobs": 2,
        "failed": 1,
        "calls": 3,
        "tokens_in": 4000,
        "tokens_out": 500,
        "cost": pytest.approx(0.003),
    }
    assert state["by_kind"]["facts"]["failed"] == 1 and state["by_kind"]["reflection"]["calls"] == 2
    assert state["kept"] == OUTCOMES_KEPT
    unpriced = client.get("/v1/upkeep").json()
    assert unpriced["totals"]["cost"] is None and unpriced["done"][0]["cost"] is None
    for params in ({"per_million_in": "-1"}, {"per_million_out": "nan"}, {"price": "1"}):
        r = client.get("/v1/upkeep", params=params)
        assert r.status_code == 400 and r.json()["error"]["type"] == "InvalidArgumentError"


def test_stats_say_how_the_index_stands(client: TestClient, mem: Memory) -> None:
    added = mem.add_many([{"text": f"{word} fact"} for word in WORDS[:3]])
    mem.delete(added[0].id)
    index = client.get("/v1/stats").json()["index"]
    assert set(index) == set(mem.stats().to_dict())
    assert index["indexed"] == 2 and index["tombstones"] == 1
    assert index["dimension"] == mem.embedder.dimension  # type: ignore[union-attr]
    assert index["seq"] == index["database_seq"] and index["changes_since_snapshot"] >= 2
    mem.wait_indexed()
    mem.snapshot()
    index = client.get("/v1/stats").json()["index"]
    assert index["vectors_pending"] == 0
    assert index["snapshot_seq"] == index["seq"] and index["changes_since_snapshot"] == 0
    if mem.path is None:  # PostgreSQL: no database file here
        assert index["database_bytes"] is None
    else:
        assert index["snapshot_at"] is not None and index["index_bytes"] > 0
        assert index["database_bytes"] >= (mem.path / "memory.db").stat().st_size > 0


def test_stats_show_the_largest_tables_and_scopes_a_limit_asks_for(
    client: TestClient, mem: Memory
) -> None:
    # Table t<i> holds i + 1 records of user a and one of user b.
    mem.add_many(
        [
            {"text": f"{user} note {j}", "table": f"t{i}", "user_id": user}
            for i in range(6)
            for user, n in (("a", i + 1), ("b", 1))
            for j in range(n)
        ]
    )
    every = [s.to_dict() for s in mem.scopes()]
    assert len(every) == 12
    full = client.get("/v1/stats").json()
    # A store of fewer scopes than the default limit: every one, as Memory.scopes has them.
    assert full["scopes"] == every and full["scope_count"] == 12
    assert full["tables"] == {f"t{i}": i + 2 for i in range(6)} and full["table_count"] == 6
    assert full["records"] == 27

    def shown(stats: dict[str, Any]) -> list[tuple[str, str]]:
        return [(s["table"], s["user_id"]) for s in stats["scopes"]]

    top = client.get("/v1/stats", params={"limit": 3}).json()
    assert shown(top) == [("t3", "a"), ("t4", "a"), ("t5", "a")]  # in Memory.scopes' order
    assert top["tables"] == {"t3": 5, "t4": 6, "t5": 7}
    assert (top["records"], top["table_count"], top["scope_count"]) == (27, 6, 12)
    # Of scopes of one record each, the first in Memory.scopes' order: by table.
    tied = client.get("/v1/stats", params={"limit": 7}).json()
    assert shown(tied) == [("t0", "a"), ("t0", "b")] + [(f"t{i}", "a") for i in range(1, 6)]
    none = client.get("/v1/stats", params={"limit": 0}).json()
    assert none["scopes"] == [] and none["tables"] == {} and none["records"] == 27
    assert none["scope_count"] == 12 and none["index"] == full["index"]


def test_stats_show_100_scopes_unless_asked(client: TestClient, mem: Memory) -> None:
    mem.add_many([{"text": f"note {i}", "user_id": f"u{i:03}"} for i in range(105)])
    mem.add("another", user_id="u104")
    stats = client.get("/v1/stats").json()
    assert len(stats["scopes"]) == 100 and stats["scope_count"] == 105
    assert stats["scopes"][0]["user_id"] == "u104" and stats["records"] == 106
    assert len(client.get("/v1/stats", params={"limit": 200}).json()["scopes"]) == 105


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("limit=x", "limit must be an int >= 0, got 'x'"),
        ("limit=1.5", "limit must be an int >= 0, got '1.5'"),
        ("limit=", "limit must be an int >= 0, got ''"),
        ("limit=-1", "limit must be an int >= 0, got -1"),
        (f"limit={2**63}", "limit must be at most 9223372036854775807"),
        ("limit=" + "9" * 5000, "limit must be an int >= 0, got '99999"),
        ("limit=1&limit=2", "limit is given twice"),
        ("limt=20", "unknown parameter 'limt'; this call takes limit"),
    ],
)
def test_stats_refuse_a_limit_that_is_no_count(
    client: TestClient, query: str, message: str
) -> None:
    r = client.get("/v1/stats?" + query)
    assert r.status_code == 400 and r.json()["error"]["type"] == "InvalidArgumentError"
    assert message in r.json()["error"]["message"]
