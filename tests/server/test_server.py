"""memlane serve's record API, in process (Starlette's test client over the ASGI app),
on both backends: every route does what its Memory method does, every failure is one
JSON error naming memlane's error with a 4xx status, and a failing request stores
nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from conftest import LOCAL, StoreFactory, WordHashEmbedder
from memlane import Memory
from memlane.server import create_app


@pytest.fixture
def mem(make_store: StoreFactory, word_embedder: WordHashEmbedder) -> Iterator[Memory]:
    m = make_store("served", word_embedder)
    yield m
    m.close()


@pytest.fixture
def client(mem: Memory, tmp_path: Path) -> Iterator[TestClient]:
    (tmp_path / "docs").mkdir()
    app = create_app(mem, max_body=4096, max_upload=1 << 20, ingest_root=tmp_path / "docs")
    with TestClient(app, base_url=LOCAL) as c:
        yield c


def error(response: Any) -> tuple[int, str]:
    return response.status_code, response.json()["error"]["type"]


def test_add_get_list_count_and_search(client: TestClient, mem: Memory) -> None:
    r = client.post("/v1/memories", json={"text": "Alice lives in Porto", "user_id": "alice"})
    assert r.status_code == 201
    alice = r.json()
    assert mem.get(alice["id"]).text == "Alice lives in Porto"
    r = client.post(
        "/v1/memories/batch",
        json={"items": [{"text": f"note {i}", "importance": i / 10} for i in range(5)]},
    )
    assert r.status_code == 201 and len(r.json()["records"]) == 5
    assert client.get(f"/v1/memories/{alice['id']}").json()["user_id"] == "alice"
    page = client.get("/v1/memories", params={"limit": 2, "order": "asc"}).json()
    assert page["total"] == 6 and page["next_offset"] == 2
    assert [x["text"] for x in page["records"]] == ["Alice lives in Porto", "note 0"]
    last = client.get("/v1/memories", params={"limit": 2, "offset": 4, "order": "asc"}).json()
    assert [x["text"] for x in last["records"]] == ["note 3", "note 4"]
    assert last["next_offset"] is None
    assert client.get("/v1/count", params={"user_id": "alice"}).json() == {"count": 1}
    flt = json.dumps({"importance": {"$gte": 0.3}})
    assert client.get("/v1/count", params={"filters": flt}).json() == {"count": 3}
    hits = client.post(
        "/v1/search", json={"query": "where does Alice live", "k": 2, "explain": True}
    ).json()["hits"]
    assert hits[0]["record"]["id"] == alice["id"]
    assert set(hits[0]["explain"]) >= {"bm25", "cosine", "boost", "score"}
    vector = mem.embedder.embed("Alice lives in Porto").tolist()  # type: ignore[union-attr]
    given = client.post(
        "/v1/search", json={"query": "", "query_embedding": vector, "mode": "vector", "k": 1}
    ).json()["hits"]
    assert given[0]["record"]["id"] == alice["id"]
    stats = client.get("/v1/stats").json()
    assert stats["records"] == 6 and stats["tables"] == {"memories": 6}
    assert (stats["disk_bytes"] is None) == (mem.path is None)
    if mem.path is not None:
        assert stats["disk_bytes"] >= (mem.path / "memory.db").stat().st_size > 0


def test_history_supersede_update_delete_and_delete_all(client: TestClient, mem: Memory) -> None:
    old = client.post("/v1/memories", json={"text": "Bob is 30", "user_id": "bob"}).json()
    new = client.post(
        f"/v1/memories/{old['id']}/supersede", json={"text": "Bob is 31", "by": "bob"}
    )
    assert new.status_code == 201
    new_id = new.json()["id"]
    changed = client.patch(f"/v1/memories/{new_id}", json={"importance": 0.9}).json()
    assert changed["importance"] == 0.9
    versions = client.get(f"/v1/memories/{new_id}/history").json()["versions"]
    assert [(v["record"]["text"], v["ended"]) for v in versions] == [
        ("Bob is 30", "supersede"),
        ("Bob is 31", "update"),
        ("Bob is 31", None),
    ]
    assert client.delete(f"/v1/memories/{new_id}").json() == {"deleted": new_id}
    assert new_id not in mem
    assert error(client.get(f"/v1/memories/{new_id}")) == (404, "UnknownIdError")
    for i in range(3):
        mem.add(f"room note {i}", room_id="r1")
    mem.add("kept", room_id="r2")
    assert client.post("/v1/delete-all", json={"room_id": "r1"}).json() == {"deleted": 3}
    assert mem.count(room_id="r1") == 0 and mem.count(room_id="r2") == 1


def test_errors_are_json_with_memlane_names_and_store_nothing(
    client: TestClient, mem: Memory
) -> None:
    bad_batch = {"items": [{"text": "fine"}, {"text": "bad", "importance": 7}]}
    assert error(client.post("/v1/memories/batch", json=bad_batch)) == (
        400,
        "InvalidArgumentError",
    )
    assert error(client.post("/v1/memories", json={"txt": "typo"}))[1] == "InvalidArgumentError"
    assert error(client.post("/v1/memories", content=b"{not json")) == (
        400,
        "InvalidArgumentError",
    )
    assert error(client.post("/v1/memories", json=["a list"]))[0] == 400
    assert error(client.post("/v1/search", json={"query": "x", "filters": {"$nope": 1}}))[0] == 400
    assert error(client.get("/v1/memories", params={"limit": "many"}))[0] == 400
    assert error(client.get("/v1/memories/nobody")) == (404, "UnknownIdError")
    assert error(client.get("/v1/nowhere")) == (404, "NotFound")
    assert error(client.put("/v1/memories")) == (405, "MethodNotAllowed")
    first = client.post("/v1/memories", json={"text": "Carol", "id": "c1"})
    assert first.status_code == 201
    stale = client.post("/v1/memories/c1/supersede", json={"text": "Carol 2"}).json()["id"]
    assert error(client.post("/v1/memories/c1/supersede", json={"text": "Carol 3"}))[0] == 400
    assert error(client.post("/v1/memories", json={"text": "again", "id": "c1"}))[0] == 400
    assert (
        error(client.post("/v1/memories", json={"text": "t", "created_at": "yesterday"}))[0] == 400
    )
    assert sorted(r.id for r in mem.list()) == sorted([stale, "c1"])  # c1: closed, kept


def test_a_body_over_the_limit_is_refused_before_it_is_read(
    client: TestClient, mem: Memory
) -> None:
    big = json.dumps({"text": "x" * 5000}).encode()
    r = client.post("/v1/memories", content=big)
    assert error(r) == (413, "PayloadTooLarge")

    def chunked() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
        yield big[:3000]
        yield big[3000:]

    assert error(client.post("/v1/memories", content=chunked())) == (413, "PayloadTooLarge")
    assert len(mem) == 0


def test_export_and_import_round_trip_streamed(client: TestClient, mem: Memory) -> None:
    ids = [r.id for r in mem.add_many([{"text": f"fact {i}"} for i in range(3)])]
    mem.supersede(ids[0], "fact 0, revised")
    exported = client.get("/v1/export", params={"embeddings": "false"})
    assert exported.headers["content-type"].startswith("application/x-ndjson")
    lines = exported.content.decode().splitlines()
    assert len(lines) == 5 and all(json.loads(line) for line in lines)
    mem.delete_all()
    bad = exported.content + b"{broken\n"
    assert error(client.post("/v1/import", content=bad)) == (400, "CorruptFileError")
    assert len(mem) == 0
    assert client.post("/v1/import", content=exported.content).json() == {"imported": 4}
    texts = sorted(r.text for r in mem.list())
    assert texts == ["fact 0", "fact 0, revised", "fact 1", "fact 2"]
    assert client.post("/v1/import?on_conflict=skip", content=exported.content).json() == {
        "imported": 0
    }


def test_ingest_an_upload_and_a_path_under_the_root(
    client: TestClient, mem: Memory, tmp_path: Path
) -> None:
    text = b"# Deploys\n\nTo deploy, run the blue-green script.\n"
    r = client.post("/v1/ingest?name=deploy.md&shared=true", content=text)
    assert r.status_code == 200, r.text
    assert r.json()["ingested"] == {"deploy.md": "deploy.md"} or r.json()["fragments"] >= 1
    assert mem.count("fragments") >= 1
    (tmp_path / "docs" / "faq.md").write_text("# FAQ\n\nThe office opens at nine.\n")
    r = client.post("/v1/ingest", json={"path": "faq.md", "agent_id": "helper"})
    assert r.status_code == 200 and r.json()["fragments"] >= 1
    outside = client.post("/v1/ingest", json={"path": "../elsewhere.md", "shared": True})
    assert error(outside) == (403, "Forbidden")
    assert error(client.post("/v1/ingest?name=../x.md&shared=true", content=text))[0] == 400


def test_jobs_and_the_openapi_schema(client: TestClient, mem: Memory) -> None:
    mem.jobs.put("reflect:alice", '{"turns": 3}')
    assert client.get("/v1/jobs").json() == {
        "jobs": [{"key": "reflect:alice", "value": '{"turns": 3}'}]
    }
    doc = client.get("/openapi.json").json()
    assert doc["openapi"].startswith("3.")
    search = doc["paths"]["/v1/search"]["post"]
    props = search["requestBody"]["content"]["application/json"]["schema"]["properties"]
    # Every option of Memory.search, read from its signature (``**scope``: its keywords).
    import inspect

    from memlane.records import SCOPE_FIELDS

    wanted = set(inspect.signature(Memory.search).parameters) - {"self", "scope"}
    wanted |= set(SCOPE_FIELDS)
    assert set(props) == wanted
    assert props["mode"]["enum"] == ["hybrid", "vector", "text"]
    assert props["explain"] == {"type": "boolean", "default": False}
    listed = {p["name"] for p in doc["paths"]["/v1/memories"]["get"]["parameters"]}
    assert {"limit", "offset", "order", "user_id", "filters"} <= listed
