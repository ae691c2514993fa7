"""memlane serve's search route, on both backends: answered as Memory.search answers,
whether it runs on the event loop (given a vector, or by text alone, over a store
directory) or in a worker thread (a model to run, or PostgreSQL); its body read by
orjson, its answer written by orjson or, for what orjson cannot write, by json."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from conftest import LOCAL, StoreFactory, WordHashEmbedder
from memlane import Memory
from memlane.server import create_app

TEXTS = ["Alice lives in Porto", "Bob plays chess on Sundays", "Carol keeps bees in Lyon"]


@pytest.fixture
def mem(make_store: StoreFactory, word_embedder: WordHashEmbedder) -> Iterator[Memory]:
    m = make_store("searched", word_embedder)
    m.add_many([{"text": t, "user_id": "u", "importance": 0.2 * i} for i, t in enumerate(TEXTS)])
    yield m
    m.close()


@pytest.fixture
def client(mem: Memory) -> Iterator[TestClient]:
    with TestClient(create_app(mem), base_url=LOCAL) as c:
        yield c


def hits(client: TestClient, **body: Any) -> list[dict[str, Any]]:
    r = client.post("/v1/search", json=body)
    assert r.status_code == 200, r.text
    found: list[dict[str, Any]] = r.json()["hits"]
    return found


@pytest.mark.parametrize(
    "asked",
    [
        {"mode": "vector", "vector": True},
        {"mode": "hybrid", "vector": True},
        {"mode": "hybrid"},
        {"mode": "text"},
    ],
    ids=["given-vector", "hybrid-given-vector", "hybrid-by-text", "text-alone"],
)
def test_a_search_answers_as_memory_search_does(
    client: TestClient, mem: Memory, asked: dict[str, Any]
) -> None:
    options: dict[str, Any] = {"k": 3, "mode": asked["mode"], "explain": True}
    options["filters"] = {"importance": {"$gte": 0.1}}
    options["track_access"] = False
    if asked.get("vector"):
        assert mem.embedder is not None
        options["query_embedding"] = mem.embedder.embed("where do bees live").tolist()
    expected = mem.search("where does Carol keep bees", **options)
    got = hits(client, query="where does Carol keep bees", **options)
    assert [h["record"]["id"] for h in got] == [h.record.id for h in expected]
    assert [h["score"] for h in got] == [h.score for h in expected]
    assert [h["explain"] for h in got] == [h.explain for h in expected]
    assert got[0]["record"]["text"] == "Carol keeps bees in Lyon"


def test_a_search_that_asks_for_much_is_searched_off_the_event_loop(
    client: TestClient, mem: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A long query (BM25 reads every word), many hits or candidates, diversity, or a
    # filter of thousands of conditions, on the event loop would hold every other
    # client's request while it runs.
    on_loop: list[bool] = []
    search = mem.search

    @functools.wraps(search)  # the route reads the arguments it takes from the signature
    def noted(*args: Any, **kwargs: Any) -> Any:
        try:
            asyncio.get_running_loop()
            on_loop.append(True)
        except RuntimeError:
            on_loop.append(False)
        return search(*args, **kwargs)

    monkeypatch.setattr(mem, "search", noted)
    asked: list[dict[str, Any]] = [
        {"query": "bees"},
        {"query": "bees " * 2000},
        {"query": "bees", "k": 1000},
        {"query": "bees", "candidates": 5000},
        {"query": "bees", "diversity": 0.5},  # compares the candidates pairwise
        {"query": "bees", "filters": {"$or": [{"importance": {"$gte": 0}}] * 2000}},
    ]
    for options in asked:
        got = hits(client, **{"mode": "text", "k": 1, "track_access": False, **options})
        assert got[0]["record"]["text"] == "Carol keeps bees in Lyon"
    # On the loop only for a store directory; PostgreSQL's rows are read in a thread.
    assert on_loop == [mem.path is not None, False, False, False, False, False]


def test_a_refused_search_is_a_json_error(client: TestClient) -> None:
    r = client.post("/v1/search", json={"query": "", "query_embedding": [0.5, 0.5], "k": 2})
    assert r.status_code == 400
    assert r.json()["error"]["type"] == "DimensionMismatchError"
    for body in (b'{"query": NaN}', b'{"query": "\\ud800"}', b"\xff", b'{"query": "x",'):
        r = client.post("/v1/search", content=body)
        assert (r.status_code, r.json()["error"]["type"]) == (400, "InvalidArgumentError")


def test_a_hit_with_an_integer_past_64_bits_is_written_exactly(
    client: TestClient, mem: Memory
) -> None:
    big = {"big": 2**70, "small": -(2**63) - 1, "pi": 3.14159}
    added = mem.add("Dan collects old maps", metadata=big)
    assert mem.embedder is not None
    vector = mem.embedder.embed("Dan collects old maps").tolist()
    found = hits(client, query="", query_embedding=vector, mode="vector", k=1)
    assert found[0]["record"]["id"] == added.id
    assert found[0]["record"]["metadata"] == big


def test_an_add_keeps_an_integer_past_64_bits(client: TestClient, mem: Memory) -> None:
    # A write's body is read by json, which keeps such an integer (orjson would round it).
    big = {"big": 2**70, "small": -(2**63) - 1}
    r = client.post("/v1/memories", json={"text": "Erin counts stars", "metadata": big})
    assert r.status_code == 201, r.text
    assert mem.get(r.json()["id"]).metadata == big


def test_a_search_answered_before_the_router_keeps_its_checks(mem: Memory) -> None:
    """A search skips Starlette's router and middleware (server/app.py), not what they
    check: the body limit (declared, or counted as it arrives), the path's other methods,
    the error handlers; and nothing it refuses reaches the store."""
    with TestClient(create_app(mem, max_body=64), base_url=LOCAL) as client:
        big = b'{"query": "' + b"x" * 100 + b'"}'
        refused = client.post("/v1/search", content=big)
        assert (refused.status_code, refused.json()["error"]["type"]) == (413, "PayloadTooLarge")

        def chunked() -> Iterator[bytes]:
            yield big[:50]
            yield big[50:]

        assert client.post("/v1/search", content=chunked()).status_code == 413
        wrong = client.get("/v1/search")
        assert (wrong.status_code, wrong.json()["error"]["type"]) == (405, "MethodNotAllowed")
        for body in (b"[1, 2]", b'{"query": "x", "kk": 1}', b'{"k": 2}'):
            r = client.post("/v1/search", content=body)
            assert (r.status_code, r.json()["error"]["type"]) == (400, "InvalidArgumentError")
        r = client.post("/v1/search", json={"query": "Porto", "mode": "text", "k": 1})
        assert r.headers["content-type"] == "application/json"
        assert r.json()["hits"][0]["record"]["text"] == "Alice lives in Porto"
    assert sum(r.access_count for r in mem.list()) == 1  # the one search that ran


def _asgi(app: Any, path: str, body: bytes | None, root_path: str = "") -> list[dict[str, Any]]:
    """One POST through ``app`` as a server would call it, and what the app sent;
    ``body`` None: the client is gone before its body arrives."""
    sent: list[dict[str, Any]] = []
    given = [] if body is None else [{"type": "http.request", "body": body, "more_body": False}]
    messages = iter(given)

    async def receive() -> dict[str, Any]:
        return next(messages, {"type": "http.disconnect"})

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    headers = [] if body is None else [(b"content-length", b"%d" % len(body))]
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
        "scheme": "http", "path": path, "raw_path": path.encode(), "root_path": root_path,
        "query_string": b"", "headers": headers,
        "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 2),
    }  # fmt: skip
    asyncio.run(app(scope, receive, send))
    return sent


def test_under_a_root_path_the_router_reads_the_path(mem: Memory) -> None:
    """Mounted under a prefix, a search is where the router puts it, not at the bare path."""
    app, body = create_app(mem), b'{"query": "Porto", "mode": "text"}'
    assert _asgi(app, "/api/v1/search", body, root_path="/api")[0]["status"] == 200
    assert _asgi(app, "/v1/search", body, root_path="/v1")[0]["status"] == 404


def test_a_client_gone_before_its_body_is_not_a_bug(
    mem: Memory, caplog: pytest.LogCaptureFixture
) -> None:
    """Nothing to answer and nothing logged as a bug (which a 500 would be)."""
    app = create_app(mem)
    with caplog.at_level(logging.ERROR, logger="memlane.server"):
        assert _asgi(app, "/v1/search", None) == []
        assert _asgi(app, "/v1/memories", None) == []
    assert caplog.records == []
    assert len(mem) == len(TEXTS)


def test_a_closed_store_is_409_closed(mem: Memory) -> None:
    with TestClient(create_app(mem), base_url=LOCAL) as client:
        mem.close()
        for r in (client.post("/v1/search", json={"query": "Porto"}), client.get("/v1/count")):
            assert (r.status_code, r.json()["error"]["type"]) == (409, "ClosedError")


def test_a_request_that_meets_the_store_closing_is_409_closed(
    mem: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request that reached the database as the store closed got 503 (a bare
    ``StorageError``); it is the closed store's 409, as a request after close."""
    known = mem.list(limit=1)[0].id
    db = mem._sync.db  # type: ignore[attr-defined]
    row_by_id = db.row_by_id

    def closing(*args: object, **kwargs: object) -> object:
        mem.close()
        return row_by_id(*args, **kwargs)

    with TestClient(create_app(mem), base_url=LOCAL) as client:
        monkeypatch.setattr(db, "row_by_id", closing)
        r = client.get(f"/v1/memories/{known}")
        assert (r.status_code, r.json()["error"]["type"]) == (409, "StoreClosedError")
