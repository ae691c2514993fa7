"""A key limited to a scope never rewrites nor deletes another scope's record, even when
the record it checked is deleted and another scope's record takes its id between the
check and the write: the scope holds inside the write's transaction. Before, PATCH,
supersede and DELETE checked the record (a read) and then wrote by the bare id, so
alice's key wrote over bob's record that had taken the id meanwhile.

The interleaving is made, not waited for: the Memory's write methods are wrapped to
delete alice's record and add bob's under its id once, just before they write."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from conftest import LOCAL, StoreFactory, WordHashEmbedder
from memlane import Memory
from memlane.server import ApiKey, create_app

ALICE, BOB = "alice-key-0123456789", "bob-key-0123456789"
ID = "profile-42"
BOBS = "bob's own profile"


@pytest.fixture
def mem(make_store: StoreFactory, word_embedder: WordHashEmbedder) -> Iterator[Memory]:
    m = make_store("scope_race", word_embedder)
    yield m
    m.close()


@pytest.fixture
def client(mem: Memory) -> Iterator[TestClient]:
    keys = [ApiKey(ALICE, {"user_id": "alice"}), ApiKey(BOB, {"user_id": "bob"})]
    with TestClient(create_app(mem, keys=keys), base_url=LOCAL) as c:
        yield c


def as_(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def before_each_write(
    mem: Memory, monkeypatch: pytest.MonkeyPatch, meanwhile: Callable[[], object]
) -> list[str]:
    """Runs ``meanwhile`` once, at the first write a request makes (update, supersede,
    delete or delete_all of ``mem``), just before it; the calls made, by name."""
    calls: list[str] = []

    def wrap(name: str) -> Callable[..., Any]:
        real = getattr(mem, name)

        @functools.wraps(real)  # the server reads the parameters a route takes from it
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            if not calls:
                meanwhile()
            calls.append(name)
            return real(*args, **kwargs)

        return wrapped

    for name in ("update", "supersede", "delete", "delete_all"):
        monkeypatch.setattr(mem, name, wrap(name))
    return calls


def bob_takes_the_id(mem: Memory) -> Callable[[], object]:
    delete, add = mem.delete, mem.add  # the real ones, before they are wrapped

    def swap() -> None:
        delete(ID)  # alice's other client deletes her record
        add(BOBS, id=ID, user_id="bob", metadata={"by": "bob"})  # bob's client adds his

    return swap


def bobs_record_is_untouched(mem: Memory) -> None:
    got = mem.get(ID)
    assert (got.user_id, got.text, got.metadata) == ("bob", BOBS, {"by": "bob"})
    # The id's history: alice's record as she deleted it, then bob's as he added it.
    versions = [(v.record.user_id, v.record.text) for v in mem.history(ID)]
    assert versions == [("alice", "alice's profile"), ("bob", BOBS)]


@pytest.mark.parametrize(
    ("method", "tail", "body"),
    [
        ("PATCH", "", {"text": "written by alice's key", "metadata": {"by": "alice"}}),
        ("POST", "/supersede", {"text": "written by alice's key"}),
        ("DELETE", "", None),
    ],
)
def test_a_record_another_scope_took_meanwhile_is_not_written(
    client: TestClient,
    mem: Memory,
    monkeypatch: pytest.MonkeyPatch,
    method: str,
    tail: str,
    body: dict[str, Any] | None,
) -> None:
    mem.add("alice's profile", id=ID, user_id="alice")
    calls = before_each_write(mem, monkeypatch, bob_takes_the_id(mem))
    r = client.request(method, f"/v1/memories/{ID}{tail}", json=body, headers=as_(ALICE))
    assert calls  # the request reached its write: the interleaving happened
    # As if alice's record had been deleted first: no word of bob's record.
    assert (r.status_code, r.json()["error"]["type"]) == (404, "UnknownIdError"), r.text
    assert "bob" not in r.text
    monkeypatch.undo()
    bobs_record_is_untouched(mem)
    assert mem.count() == 1


def test_bobs_key_still_writes_his_record(client: TestClient, mem: Memory) -> None:
    mem.add(BOBS, id=ID, user_id="bob")
    r = client.patch(f"/v1/memories/{ID}", json={"importance": 0.9}, headers=as_(BOB))
    assert r.status_code == 200 and r.json()["importance"] == pytest.approx(0.9)
    assert client.patch(f"/v1/memories/{ID}", json={}, headers=as_(ALICE)).status_code == 404
    assert client.delete(f"/v1/memories/{ID}", headers=as_(ALICE)).status_code == 404
    assert client.delete(f"/v1/memories/{ID}", headers=as_(BOB)).json() == {"deleted": ID}
    assert mem.count() == 0


def test_a_rewrite_of_her_own_record_meanwhile_is_written_over(
    client: TestClient, mem: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request names a record by id: alice's record rewritten between the check and
    the write (by her other client) is still hers, and the request writes the version
    it finds, as before."""
    mem.add("alice's profile", id=ID, user_id="alice")
    update = mem.update
    calls = before_each_write(mem, monkeypatch, lambda: update(ID, importance=0.2))
    r = client.patch(f"/v1/memories/{ID}", json={"text": "alice, again"}, headers=as_(ALICE))
    assert r.status_code == 200, r.text
    assert calls[0] == "update"
    monkeypatch.undo()
    got = mem.get(ID)
    assert got.text == "alice, again" and got.importance == pytest.approx(0.2)


def test_a_record_superseded_meanwhile_is_a_conflict(
    client: TestClient, mem: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Superseded between the check and the write: 409, as when it is superseded while
    the write embeds its text (the version read is history; nothing is stored)."""
    mem.add("alice's profile", id=ID, user_id="alice")
    supersede = mem.supersede
    before_each_write(mem, monkeypatch, lambda: supersede(ID, "alice's newer profile"))
    r = client.patch(f"/v1/memories/{ID}", json={"text": "alice, again"}, headers=as_(ALICE))
    assert (r.status_code, r.json()["error"]["type"]) == (409, "ConflictError"), r.text
    monkeypatch.undo()
    assert mem.get(ID).text == "alice's profile" and mem.get(ID).valid_to is not None


@pytest.mark.parametrize("key", [ALICE, None], ids=["scoped", "unscoped"])
def test_a_record_rewritten_again_and_again_meanwhile_is_still_written(
    mem: Memory, monkeypatch: pytest.MonkeyPatch, key: str | None
) -> None:
    """Rewritten by other requests of its scope before each of ten tries: the change is
    still made (3 tries answered 409 under four clients PATCHing one record; an
    unscoped key's change is made by id, as before)."""
    keys = [ApiKey(ALICE, {"user_id": "alice"}), ApiKey("admin-key-0123456789")]
    mem.add("alice's profile", id=ID, user_id="alice")
    update, rewrites = mem.update, []

    def rewritten(*args: Any, **kwargs: Any) -> Any:
        if len(rewrites) < 10:
            rewrites.append(update(ID, importance=0.1 + len(rewrites) / 100))
        return update(*args, **kwargs)

    monkeypatch.setattr(mem, "update", functools.wraps(update)(rewritten))
    with TestClient(create_app(mem, keys=keys), base_url=LOCAL) as c:
        who = as_(key or "admin-key-0123456789")
        r = c.patch(f"/v1/memories/{ID}", json={"text": "alice, again"}, headers=who)
    assert r.status_code == 200, r.text
    assert mem.get(ID).text == "alice, again"


def test_a_scoped_delete_sees_what_a_scoped_get_sees(
    make_store: StoreFactory, word_embedder: WordHashEmbedder
) -> None:
    """Over a store with a default_scope, a record of another namespace that the key's
    scope holds: GET and PATCH found it, DELETE answered 404."""
    mem = make_store("default-scope", word_embedder, default_scope={"namespace": "prod"})
    mem.add("alice's staging note", id=ID, user_id="alice", namespace="staging")
    keys = [ApiKey(ALICE, {"user_id": "alice"})]
    with TestClient(create_app(mem, keys=keys), base_url=LOCAL) as c:
        assert c.get(f"/v1/memories/{ID}", headers=as_(ALICE)).status_code == 200
        assert c.delete(f"/v1/memories/{ID}", headers=as_(ALICE)).json() == {"deleted": ID}
    assert ID not in mem
    mem.close()
