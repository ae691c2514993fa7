"""memlane serve's keys: loopback without a key, any other address refused without
one; a key limited to a scope never reads or writes another scope's memories, whatever
the request says; a read-only key only reads."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from conftest import StoreFactory, WordHashEmbedder
from memlane import Memory
from memlane.cli import main
from memlane.errors import InvalidArgumentError
from memlane.server import ApiKey, create_app, load_keys

ADMIN, ALICE, READER = "admin-key-0123456789", "alice-key-0123456789", "reader-key-0123456789"


@pytest.fixture
def mem(make_store: StoreFactory, word_embedder: WordHashEmbedder) -> Iterator[Memory]:
    m = make_store("keys", word_embedder)
    yield m
    m.close()


@pytest.fixture
def client(mem: Memory) -> Iterator[TestClient]:
    keys = [
        ApiKey(ADMIN),
        ApiKey(ALICE, {"user_id": "alice"}),
        ApiKey(READER, {}, read_only=True),
    ]
    with TestClient(create_app(mem, keys=keys)) as c:
        yield c


def as_(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def kind(response: Any) -> tuple[int, str]:
    return response.status_code, response.json()["error"]["type"]


def test_every_route_needs_a_known_key(client: TestClient, mem: Memory) -> None:
    assert kind(client.get("/v1/count")) == (401, "Unauthorized")
    assert kind(client.get("/v1/count", headers=as_("wrong-key-0123456789"))) == (
        401,
        "Unauthorized",
    )
    assert kind(client.post("/v1/memories", json={"text": "x"})) == (401, "Unauthorized")
    assert len(mem) == 0
    assert client.get("/v1/count", headers={"X-API-Key": ADMIN}).json() == {"count": 0}


def test_a_scoped_key_never_reaches_another_scope(client: TestClient, mem: Memory) -> None:
    bob = mem.add("Bob's bank PIN is 1234", user_id="bob")
    mine = client.post("/v1/memories", json={"text": "Alice likes tea"}, headers=as_(ALICE))
    assert mine.status_code == 201 and mine.json()["user_id"] == "alice"
    named = {"text": "planted", "user_id": "bob"}
    assert kind(client.post("/v1/memories", json=named, headers=as_(ALICE))) == (
        403,
        "Forbidden",
    )
    batch = {"items": [{"text": "ok"}, {"text": "planted", "user_id": "bob"}]}
    assert kind(client.post("/v1/memories/batch", json=batch, headers=as_(ALICE)))[0] == 403
    assert mem.count(user_id="bob") == 1 and mem.count(user_id="alice") == 1
    hits = client.post("/v1/search", json={"query": "bank PIN"}, headers=as_(ALICE)).json()
    assert [h["record"]["user_id"] for h in hits["hits"]] == ["alice"]
    sneaky = {"query": "bank PIN", "user_id": "bob"}
    assert kind(client.post("/v1/search", json=sneaky, headers=as_(ALICE)))[0] == 403
    # No filter widens the scope: the key's scope is and-ed with it.
    wide = {"query": "bank PIN", "filters": {"user_id": "bob"}}
    assert client.post("/v1/search", json=wide, headers=as_(ALICE)).json() == {"hits": []}
    listed = client.get("/v1/memories", headers=as_(ALICE)).json()
    assert listed["total"] == 1 and listed["records"][0]["user_id"] == "alice"
    assert client.get("/v1/count", headers=as_(ALICE)).json() == {"count": 1}
    for method, path, body in [
        ("GET", f"/v1/memories/{bob.id}", None),
        ("GET", f"/v1/memories/{bob.id}/history", None),
        ("PATCH", f"/v1/memories/{bob.id}", {"text": "changed"}),
        ("POST", f"/v1/memories/{bob.id}/supersede", {"text": "changed"}),
        ("DELETE", f"/v1/memories/{bob.id}", None),
    ]:
        r = client.request(method, path, json=body, headers=as_(ALICE))
        assert kind(r) == (404, "UnknownIdError"), (method, path)
    assert client.post("/v1/delete-all", json={}, headers=as_(ALICE)).json() == {"deleted": 1}
    assert mem.get(bob.id).text == "Bob's bank PIN is 1234"
    assert mem.history(bob.id)[-1].ended is None
    for method, path in [
        ("GET", "/v1/export"),
        ("POST", "/v1/import"),
        ("GET", "/v1/jobs"),
        ("GET", "/v1/upkeep"),
    ]:
        assert kind(client.request(method, path, headers=as_(ALICE))) == (403, "Forbidden")
    stats = client.get("/v1/stats", headers=as_(ALICE)).json()
    # The index's state is the whole store's: a scoped key sees none of it.
    assert stats["records"] == 0 and stats["store"] is None and stats["index"] is None


def test_a_scoped_keys_stats_count_its_own_scopes_alone(client: TestClient, mem: Memory) -> None:
    mem.add_many([{"text": f"bob {i}", "user_id": "bob", "table": f"b{i}"} for i in range(5)])
    mem.add_many([{"text": f"alice {i}", "user_id": "alice", "table": "notes"} for i in range(2)])
    mem.add_many(
        [{"text": f"alice's room {i}", "user_id": "alice", "room_id": "r"} for i in range(3)]
    )
    for limit in (1, 100):
        stats = client.get("/v1/stats", params={"limit": limit}, headers=as_(ALICE)).json()
        assert (stats["records"], stats["table_count"], stats["scope_count"]) == (5, 2, 2)
        assert {s["user_id"] for s in stats["scopes"]} == {"alice"}
        assert set(stats["tables"]) <= {"memories", "notes"}
    assert [s["count"] for s in stats["scopes"]] == [3, 2]
    top = client.get("/v1/stats", params={"limit": 1}, headers=as_(ALICE)).json()
    assert top["tables"] == {"memories": 3} and top["scopes"][0]["room_id"] == "r"
    assert client.get("/v1/stats", headers=as_(ADMIN)).json()["scope_count"] == 7


def test_a_scoped_key_names_no_other_scopes_record_by_a_query_id(
    client: TestClient, mem: Memory
) -> None:
    bob = mem.add("Bob's bank PIN is 1234", id=".", user_id="bob")
    for method, path, body in [
        ("GET", "/v1/memories/-", None),
        ("GET", "/v1/memories/-/history", None),
        ("PATCH", "/v1/memories/-", {"text": "changed"}),
        ("POST", "/v1/memories/-/supersede", {"text": "changed"}),
        ("DELETE", "/v1/memories/-", None),
    ]:
        r = client.request(method, path, params={"id": "."}, json=body, headers=as_(ALICE))
        assert kind(r) == (404, "UnknownIdError"), (method, path)
        assert r.json()["error"]["message"] == "no memory with id '.'"
    assert mem.get(".").text == bob.text and len(mem.history(".")) == 1
    mine = client.get("/v1/memories/-", params={"id": "."}, headers=as_(ADMIN)).json()
    assert mine["text"] == bob.text


def test_a_history_shows_a_scoped_key_only_its_own_versions(
    client: TestClient, mem: Memory
) -> None:
    # An id another scope's deleted memory had, taken again: the history of the id
    # holds that memory's versions too.
    bob = mem.add("Bob's bank PIN is 4321", id="plan", user_id="bob")
    mem.update(bob.id, text="Bob's bank PIN is 8765")
    mem.delete(bob.id)
    made = client.post(
        "/v1/memories", json={"text": "Alice's plan", "id": "plan"}, headers=as_(ALICE)
    )
    assert made.status_code == 201
    assert len(mem.history("plan")) == 3
    got = client.get("/v1/memories/plan/history", headers=as_(ALICE)).json()["versions"]
    assert [(v["record"]["user_id"], v["record"]["text"]) for v in got] == [
        ("alice", "Alice's plan")
    ]


def test_a_read_only_key_reads_and_writes_nothing(client: TestClient, mem: Memory) -> None:
    kept = mem.add("Carol is a pilot")
    assert client.post("/v1/search", json={"query": "pilot"}, headers=as_(READER)).json()["hits"]
    assert client.get(f"/v1/memories/{kept.id}", headers=as_(READER)).status_code == 200
    for method, path, body in [
        ("POST", "/v1/memories", {"text": "x"}),
        ("POST", "/v1/memories/batch", {"items": [{"text": "x"}]}),
        ("PATCH", f"/v1/memories/{kept.id}", {"importance": 1.0}),
        ("POST", f"/v1/memories/{kept.id}/supersede", {"text": "Carol flies no more"}),
        ("DELETE", f"/v1/memories/{kept.id}", None),
        ("POST", "/v1/delete-all", {}),
        ("POST", "/v1/import", None),
    ]:
        r = client.request(method, path, json=body, headers=as_(READER))
        assert kind(r) == (403, "Forbidden"), (method, path)
    assert [r.text for r in mem.list()] == ["Carol is a pilot"]
    assert mem.get(kept.id).importance == 0.5


def test_events_follow_the_keys_scope(client: TestClient, mem: Memory) -> None:
    r = client.get("/v1/events", params={"user_id": "bob"}, headers=as_(ALICE))
    assert kind(r) == (403, "Forbidden")


def test_keys_files_are_checked(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    path.write_text(json.dumps([{"key": ALICE, "scope": {"user_id": "alice"}, "read_only": True}]))
    (key,) = load_keys(path)
    assert key.scope == {"user_id": "alice"} and key.read_only
    assert ALICE not in repr(key)
    for bad in (
        [{"key": "short"}],
        [{"key": ALICE, "scope": {"colour": "red"}}],
        [{"key": ALICE, "extra": 1}],
        {"key": ALICE},
    ):
        path.write_text(json.dumps(bad))
        with pytest.raises(InvalidArgumentError):
            load_keys(path)
    path.write_text("{not json")
    with pytest.raises(InvalidArgumentError, match="not a JSON keys file"):
        load_keys(path)


def test_serve_refuses_an_open_address_without_a_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MEMLANE_API_KEY", raising=False)
    store = str(tmp_path / "s")
    args = ["serve", store, "--create", "--embedder", "none", "--host", "0.0.0.0"]
    assert main(args) == 1
    assert "give an API key" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()  # refused before the store was opened
    assert main([*args[:-2], "--host", "::", "--api-key", "short"]) == 1
    assert "at least 16" in capsys.readouterr().err
