"""POST /v1/import's refusals name the line of the request's body, never the temporary
file the server keeps it in, on both backends."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from conftest import LOCAL, StoreFactory, WordHashEmbedder
from memlane import Memory
from memlane.server import create_app

GOOD = json.dumps({"text": "fine"})


@pytest.fixture
def mem(make_store: StoreFactory, word_embedder: WordHashEmbedder) -> Iterator[Memory]:
    m = make_store("import-body", word_embedder)
    yield m
    m.close()


@pytest.fixture
def client(mem: Memory) -> Iterator[TestClient]:
    with TestClient(create_app(mem), base_url=LOCAL) as c:
        yield c


@pytest.mark.parametrize(
    ("body", "status", "kind", "message"),
    [
        (GOOD + '\n{"text": "cut', 400, "CorruptFileError", "line 2 of the body: not JSON"),
        (GOOD + "\n" + '{"text": 5}', 400, "InvalidArgumentError", "line 2 of the body: text"),
        (
            json.dumps({"id": "a", "text": "x"}) + "\n" + json.dumps({"id": "a", "text": "y"}),
            400,
            "InvalidArgumentError",
            "line 2 of the body: id 'a' is given twice in the file (first at line 1)",
        ),
        (
            json.dumps({"text": "t", "embedding": [0.1] * 7}),
            400,
            "DimensionMismatchError",
            "line 1 of the body: embedding has shape (7,)",
        ),
        (
            json.dumps({"history": {"text": "t", "event": "nope", "at": 1}}),
            400,
            "InvalidArgumentError",
            "line 1 of the body: history event must be one of",
        ),
    ],
)
def test_a_refused_line_is_named_in_the_body(
    client: TestClient, mem: Memory, body: str, status: int, kind: str, message: str
) -> None:
    r = client.post("/v1/import", content=body.encode())
    error = r.json()["error"]
    assert (r.status_code, error["type"]) == (status, kind)
    assert error["message"].startswith(message), error["message"]
    assert "memlane-import-" not in error["message"] and "import.jsonl" not in error["message"]
    assert len(mem) == 0


def test_an_id_already_stored_is_named_in_the_body(client: TestClient, mem: Memory) -> None:
    held = mem.add("already here")
    r = client.post("/v1/import", content=f"{GOOD}\n{json.dumps({'id': held.id, 'text': 'z'})}")
    error = r.json()["error"]
    assert (r.status_code, error["type"]) == (409, "DuplicateIdError")
    assert error["message"] == (
        f"line 2 of the body: id {held.id!r} is already stored "
        "(on_conflict='skip' skips stored ids)"
    )
    assert len(mem) == 1
