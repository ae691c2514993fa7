"""Every route refuses (400) a query parameter it does not take, and one given twice, as
GET /v1/memories always did (docs/server.md: "a name the method does not take is
refused"); a delete refuses a body. Before, DELETE /v1/memories/{id}, its history,
/v1/jobs and the routes that read a body ignored their query string, so
``DELETE ...?dry_run=true`` and ``POST /v1/delete-all?dry_run=true`` deleted, and
``export?embeddings=false&embeddings=true`` went by its last value."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from conftest import LOCAL
from memlane import Memory
from memlane.server import create_app


@pytest.fixture
def mem(tmp_path: Path) -> Iterator[Memory]:
    m = Memory(tmp_path / "store", embedder=None)
    yield m
    m.close()


@pytest.fixture
def client(mem: Memory, tmp_path: Path) -> Iterator[TestClient]:
    (tmp_path / "docs").mkdir()
    with TestClient(create_app(mem, ingest_root=tmp_path / "docs"), base_url=LOCAL) as c:
        yield c


def refused(response: Any, name: str) -> None:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "InvalidArgumentError" and name in error["message"], error


def test_a_delete_refuses_what_it_does_not_take(client: TestClient, mem: Memory) -> None:
    kept = mem.add("keep me", user_id="alice")
    refused(client.delete(f"/v1/memories/{kept.id}", params={"dry_run": "true"}), "dry_run")
    body = {"user_id": "bob", "dry_run": True}
    refused(client.request("DELETE", f"/v1/memories/{kept.id}", json=body), "body")
    refused(client.delete("/v1/memories/-", params=f"id={kept.id}&id=x"), "twice")
    assert mem.get(kept.id).text == "keep me"
    # What it takes still works: by path, and by ?id= in the path's place, with an
    # empty body or none.
    assert client.request("DELETE", f"/v1/memories/{kept.id}", json={}).status_code == 200
    other = mem.add("and me")
    assert client.delete("/v1/memories/-", params={"id": other.id}).status_code == 200
    assert mem.count() == 0


def test_history_and_jobs_refuse_unknown_parameters(client: TestClient, mem: Memory) -> None:
    r = mem.add("a fact")
    refused(client.get(f"/v1/memories/{r.id}/history", params={"dry_run": "true"}), "dry_run")
    refused(client.get("/v1/jobs", params={"dry_run": "true"}), "dry_run")
    assert client.get(f"/v1/memories/{r.id}/history").status_code == 200
    assert client.get("/v1/memories/-/history", params={"id": r.id}).status_code == 200
    assert client.get("/v1/jobs").json() == {"jobs": []}


def test_routes_that_read_a_body_refuse_a_query(client: TestClient, mem: Memory) -> None:
    r = mem.add("a fact")
    calls: list[tuple[str, str, dict[str, Any]]] = [
        ("POST", "/v1/memories", {"text": "x"}),
        ("POST", "/v1/memories/batch", {"items": [{"text": "x"}]}),
        ("POST", "/v1/search", {"query": "fact", "mode": "text"}),
        ("POST", "/v1/delete-all", {}),
        ("PATCH", f"/v1/memories/{r.id}", {"importance": 0.9}),
        ("POST", f"/v1/memories/{r.id}/supersede", {"text": "a new fact"}),
    ]
    for method, path, body in calls:
        refused(client.request(method, path, params={"dry_run": "true"}, json=body), "dry_run")
    assert [x.text for x in mem.list()] == ["a fact"] and mem.get(r.id).importance == 0.5
    hits = client.post("/v1/search", json={"query": "fact", "mode": "text"}).json()["hits"]
    assert [h["record"]["id"] for h in hits] == [r.id]


def test_a_parameter_given_twice_is_refused(client: TestClient, mem: Memory) -> None:
    mem.add("a fact")
    refused(client.get("/v1/export", params="embeddings=false&embeddings=true"), "twice")
    assert client.get("/v1/export", params={"embeddings": "false"}).status_code == 200
    exported = client.get("/v1/export").content
    conflict = "on_conflict=skip&on_conflict=error"
    refused(client.post("/v1/import", params=conflict, content=exported), "twice")
    names = "name=a.md&name=b.md"
    refused(client.post("/v1/ingest", params=names, content=b"# Notes\n"), "twice")
    by_path = client.post("/v1/ingest", params={"agent_id": "a"}, json={"path": "x.md"})
    refused(by_path, "query")
    assert mem.count() == 1
