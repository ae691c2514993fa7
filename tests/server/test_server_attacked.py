"""memlane serve against requests made to hurt it, on both backends: web pages of other
origins and rebound host names at a server without keys, bodies and query strings no
JSON reader takes, upload names and paths the file system refuses, ids that hold a
slash, and a read-only key's searches."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.testclient import TestClient

from conftest import LOCAL, StoreFactory, WordHashEmbedder
from memlane import Memory
from memlane.server import ApiKey, create_app

ADMIN, READER = "admin-key-0123456789", "reader-key-0123456789"


@pytest.fixture
def mem(make_store: StoreFactory, word_embedder: WordHashEmbedder) -> Iterator[Memory]:
    m = make_store("attacked", word_embedder)
    yield m
    m.close()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = tmp_path / "docs-root"
    folder.mkdir()
    return folder


@pytest.fixture
def client(mem: Memory, root: Path) -> Iterator[TestClient]:
    with TestClient(create_app(mem, ingest_root=root), base_url=LOCAL) as c:
        yield c


def kind(response: Any) -> tuple[int, str]:
    return response.status_code, response.json()["error"]["type"]


def test_a_server_without_keys_answers_no_page_of_another_origin(
    client: TestClient, mem: Memory
) -> None:
    mem.add("Alice lives in Porto", id="kept")
    # What a page elsewhere makes a browser send without asking: a POST of text/plain.
    for origin in ("http://evil.example", "http://localhost:3000", "null"):
        r = client.post(
            "/v1/delete-all",
            content=b"{}",
            headers={"Origin": origin, "Content-Type": "text/plain"},
        )
        assert kind(r) == (403, "Forbidden") and origin in r.json()["error"]["message"]
        r = client.post("/v1/memories", content=b'{"text": "planted"}', headers={"Origin": origin})
        assert kind(r) == (403, "Forbidden")
    assert [r.id for r in mem.list()] == ["kept"]
    # The inspector's own requests carry its origin, which is the server's.
    r = client.post("/v1/memories", json={"text": "mine"}, headers={"Origin": LOCAL})
    assert r.status_code == 201
    assert client.get("/v1/count").json() == {"count": 2}  # no Origin: a program


def test_a_server_without_keys_answers_only_at_a_loopback_address(
    client: TestClient, mem: Memory
) -> None:
    mem.add("Alice lives in Porto", id="kept")
    # DNS rebinding: a page's own host name, pointed at 127.0.0.1, is in Host.
    for host in ("evil.example:8765", "evil.example", "192.168.1.2:8765"):
        r = client.get("/v1/memories", headers={"Host": host})
        assert kind(r) == (403, "Forbidden") and host in r.json()["error"]["message"]
        assert (
            kind(client.post("/v1/search", json={"query": "x"}, headers={"Host": host}))[0] == 403
        )
        assert client.get("/", headers={"Host": host}).status_code == 403
    for host in ("127.0.0.1:8765", "localhost", "LOCALHOST:1", "[::1]:8765", "api.localhost"):
        r = client.get("/v1/memories", headers={"Host": host, "Origin": f"http://{host}"})
        assert r.status_code == 200 and r.json()["total"] == 1, host


def test_a_server_with_keys_leaves_host_and_origin_to_the_key(mem: Memory) -> None:
    with TestClient(create_app(mem, keys=[ApiKey(ADMIN)])) as c:
        headers = {"Authorization": f"Bearer {ADMIN}", "Origin": "https://app.example"}
        r = c.post("/v1/memories", json={"text": "behind a proxy"}, headers=headers)
        assert r.status_code == 201
        assert c.get("/v1/count", headers={"Origin": "https://app.example"}).status_code == 401


def test_bodies_no_json_reader_takes_are_refused_and_store_nothing(
    client: TestClient, mem: Memory
) -> None:
    record = client.post("/v1/memories", json={"text": "Bob is 30"}).json()["id"]
    deep = b"[" * 100_000 + b"]" * 100_000
    long_int = b'{"text": "x", "importance": ' + b"9" * 5000 + b"}"
    routes = [
        ("POST", "/v1/memories"),
        ("POST", "/v1/memories/batch"),
        ("PATCH", f"/v1/memories/{record}"),
        ("POST", f"/v1/memories/{record}/supersede"),
        ("POST", "/v1/delete-all"),
        ("POST", "/v1/search"),
    ]
    for method, path in routes:
        # UTF-16 and a BOM too: JSON between systems is UTF-8, as the search reads it.
        utf16, bom = '{"text": "x"}'.encode("utf-16"), b'\xef\xbb\xbf{"text": "x"}'
        for body in (deep, b'{"a": ' + deep + b"}", long_int, b'{"text": "\xff x"}', utf16, bom):
            r = client.request(method, path, content=body)
            assert kind(r) == (400, "InvalidArgumentError"), (method, path, r.text[:200])
            # Named in the caller's terms, not with the interpreter's advice or codec.
            message = r.json()["error"]["message"]
            assert "sys." not in message and "codec" not in message, message
            assert "utf-8-sig" not in message, message
    r = client.post("/v1/ingest", content=deep, headers={"Content-Type": "application/json"})
    assert kind(r) == (400, "InvalidArgumentError")
    nested = json.dumps({"a": 1}).replace("1", "[" * 3000 + "]" * 3000)
    for path in ("/v1/memories", "/v1/count"):
        r = client.get(path, params={"filters": nested})
        assert kind(r) == (400, "InvalidArgumentError")
    assert [(r.id, r.text) for r in mem.list()] == [(record, "Bob is 30")]


def test_upload_names_and_paths_the_file_system_refuses_are_the_callers_fault(
    client: TestClient, mem: Memory, root: Path
) -> None:
    # 200 characters, 400 bytes: past what a file system takes in one name.
    r = client.post("/v1/ingest", params={"name": "é" * 200 + ".md"}, content=b"# Notes\n")
    assert kind(r) == (400, "InvalidArgumentError")
    for path in ("a\x00b.md", "a\ud800.md", "x" * 300 + ".md", "sub/" + "y" * 300):
        r = client.post(
            "/v1/ingest",
            content=json.dumps({"path": path}).encode(),
            headers={"Content-Type": "application/json"},
        )
        assert r.status_code in (400, 404), (path, r.text)
        assert str(root) not in r.text
    assert mem.count() == 0


def test_paths_under_the_ingest_root_it_cannot_read_are_named_as_given(
    client: TestClient, mem: Memory, root: Path
) -> None:
    # A symlink loop (a RuntimeError from Python 3.11's resolve), a file that is not
    # there and a name too long: each the caller's fault, none naming the root's place.
    (root / "loop1").symlink_to("loop2")
    (root / "loop2").symlink_to("loop1")
    for path, status in (("loop1", 400), ("missing.md", 404), ("a" * 300, 400)):
        r = client.post("/v1/ingest", json={"path": path, "shared": True})
        assert r.status_code == status, (path, r.text)
        message = r.json()["error"]["message"]
        assert str(root) not in message and path[:20] in message, message
    assert mem.count() == 0


def test_a_root_whose_path_repr_escapes_is_not_named_either(mem: Memory, tmp_path: Path) -> None:
    # A message may quote a path as repr() writes it: a backslash doubled, a tab "\\t".
    root = tmp_path / "back\\slash\tand tab"
    root.mkdir()
    with TestClient(create_app(mem, ingest_root=root), base_url=LOCAL) as c:
        r = c.post("/v1/ingest", json={"path": "a" * 300, "shared": True})
    assert r.status_code == 400, r.text
    message = r.json()["error"]["message"]
    assert "slash" not in message and "tab" not in message and "a" * 20 in message, message


def test_a_record_whose_id_holds_a_slash_is_reached_by_its_routes(
    client: TestClient, mem: Memory
) -> None:
    mem.add("the x", id="x")
    mem.add("slashed", id="a/b")
    mem.add("not x's history", id="x/history")
    assert client.get("/v1/memories/a%2Fb").json()["text"] == "slashed"
    assert client.get("/v1/memories/a%2fb").json()["text"] == "slashed"
    assert client.get("/v1/memories/x%2Fhistory").json()["text"] == "not x's history"
    assert [
        v["record"]["text"] for v in client.get("/v1/memories/x/history").json()["versions"]
    ] == ["the x"]
    versions = client.get("/v1/memories/a%2Fb/history").json()["versions"]
    assert [v["record"]["id"] for v in versions] == ["a/b"]
    r = client.patch("/v1/memories/a%2Fb", json={"importance": 0.9})
    assert r.status_code == 200 and mem.get("a/b").importance == 0.9
    r = client.post("/v1/memories/a%2Fb/supersede", json={"text": "slashed again"})
    assert r.status_code == 201
    assert client.delete("/v1/memories/x%2Fhistory").json() == {"deleted": "x/history"}
    new = r.json()["id"]
    assert sorted(rec.id for rec in mem.list()) == sorted(["x", "a/b", new])
    assert any(v.superseded_by == new for v in mem.history("a/b"))


def test_an_id_a_path_cannot_carry_is_named_in_the_query(client: TestClient, mem: Memory) -> None:
    # A path segment "." or ".." is a step in the path: /v1/memories/./history is the
    # history of the record "history". Such ids go in the query, "-" in the path.
    for rid in (".", "..", "-", "history", "a/b"):
        mem.add(f"the record {rid}", id=rid)
    for rid in (".", "..", "history", "a/b"):
        got = client.get("/v1/memories/-", params={"id": rid, "include_embedding": "true"})
        assert got.json()["text"] == f"the record {rid}" and got.json()["embedding"]
        versions = client.get("/v1/memories/-/history", params={"id": rid}).json()["versions"]
        assert [v["record"]["text"] for v in versions] == [f"the record {rid}"]
    assert client.get("/v1/memories/-").json()["text"] == "the record -"  # no query: "-"
    r = client.patch("/v1/memories/-", params={"id": "."}, json={"importance": 0.9})
    assert r.status_code == 200 and mem.get(".").importance == 0.9
    r = client.post("/v1/memories/-/supersede", params={"id": ".."}, json={"text": "again"})
    assert r.status_code == 201 and mem.history("..")[0].superseded_by == r.json()["id"]
    assert client.delete("/v1/memories/-", params={"id": "."}).json() == {"deleted": "."}
    assert sorted(rec.id for rec in mem.list()) == sorted(
        ["..", "-", "history", "a/b", r.json()["id"]]
    )
    assert mem.get("-").importance != 0.9 and len(mem.history("-")) == 1
    # The id once, and in the query only where the path says "-".
    twice = client.get("/v1/memories/-?id=..&id=history")
    assert kind(twice) == (400, "InvalidArgumentError") and "id is given twice" in twice.text
    beside = client.get("/v1/memories/history", params={"id": ".."})
    assert kind(beside) == (400, "InvalidArgumentError") and "unknown parameter 'id'" in beside.text
    assert kind(client.get("/v1/memories/-", params={"id": "nothing"})) == (404, "UnknownIdError")


def test_every_record_route_refuses_an_id_in_the_query_beside_another(
    client: TestClient, mem: Memory
) -> None:
    # Each route read no query but get's: DELETE /v1/memories/a1?id=.. deleted a1.
    for rid in ("a1", "..", "a/b"):
        mem.add(f"the record {rid}", id=rid)
    for path in ("/v1/memories/a1", "/v1/memories/a%2Fb"):
        for method, tail, body in [
            ("GET", "", None),
            ("GET", "/history", None),
            ("PATCH", "", {"importance": 0.9}),
            ("POST", "/supersede", {"text": "changed"}),
            ("DELETE", "", None),
        ]:
            r = client.request(method, path + tail, params={"id": ".."}, json=body)
            assert kind(r) == (400, "InvalidArgumentError"), (method, path + tail)
            assert "unknown parameter 'id'" in r.text
    assert sorted(rec.id for rec in mem.list()) == ["..", "a/b", "a1"]
    assert all(
        len(mem.history(rid)) == 1 and mem.get(rid).importance == 0.5 for rid in ("a1", "..", "a/b")
    )


def test_a_slashed_id_is_reached_under_a_mount_and_an_encoded_prefix(mem: Memory) -> None:
    mem.add("the x", id="x")
    mem.add("not x's history", id="x/history")
    outer = Starlette(routes=[Mount("/memlane", app=create_app(mem))])
    with TestClient(outer, base_url=LOCAL) as c:
        for path in ("/memlane/v1/memories/x%2Fhistory", "/mem%6Cane/v1/m%65mories/x%2Fhistory"):
            assert c.get(path).json()["text"] == "not x's history", path
        r = c.post("/memlane/v1/memories/x%2Fsupersede", json={"text": "x again"})
        assert r.status_code == 405  # no record route answers a POST to a record's path
        assert mem.history("x")[-1].ended is None  # x itself untouched
    with TestClient(create_app(mem), base_url=LOCAL) as c:
        assert c.get("/v1/m%65mories/x%2Fhistory").json()["text"] == "not x's history"


def test_a_read_only_keys_searches_record_no_access(mem: Memory) -> None:
    mem.add("Alice lives in Porto", id="alice")
    keys = [ApiKey(ADMIN), ApiKey(READER, read_only=True)]
    reader = {"Authorization": f"Bearer {READER}"}
    with TestClient(create_app(mem, keys=keys)) as c:
        for _ in range(3):
            hits = c.post("/v1/search", json={"query": "Alice Porto"}, headers=reader).json()
            assert [h["record"]["id"] for h in hits["hits"]] == ["alice"]
        r = c.post("/v1/search", json={"query": "Alice", "track_access": True}, headers=reader)
        assert kind(r) == (403, "Forbidden")
        assert mem.get("alice").access_count == 0
        admin = {"Authorization": f"Bearer {ADMIN}"}
        assert c.post("/v1/search", json={"query": "Alice Porto"}, headers=admin).status_code == 200
        assert mem.get("alice").access_count == 1


def test_a_path_or_query_that_is_no_utf8_is_refused_not_read_as_another_name(
    client: TestClient, mem: Memory
) -> None:
    # %ff alone is no UTF-8: read with U+FFFD in its place, the delete took the record of
    # that id, which the client never named.
    mem.add("keep me", id="\ufffd")
    mem.add("in a table", table="\ufffd")
    for method, url in (
        ("DELETE", "/v1/memories/%ff"),
        ("GET", "/v1/memories/%ff/history"),
        ("GET", "/v1/memories?table=%ff"),
        ("GET", "/v1/count?table=x%C3"),
    ):
        r = client.request(method, url)
        assert kind(r) == (400, "InvalidArgumentError"), (url, r.text)
        assert "not UTF-8" in r.json()["error"]["message"]
    assert mem.get("\ufffd").text == "keep me" and mem.count() == 2
    # An escape that is UTF-8 still names its record.
    assert client.get("/v1/memories/%EF%BF%BD").json()["text"] == "keep me"
