"""Memory.events: every change this process commits reaches the subscribers of its
scope, in commit order, and a slow subscriber never holds up a write."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from conftest import StoreFactory, WordHashEmbedder
from memlane import Memory
from memlane.errors import InvalidArgumentError


@pytest.fixture
def mem(make_store: StoreFactory, word_embedder: WordHashEmbedder) -> Memory:
    return make_store("events", word_embedder)


def drain(sub: Any) -> list[dict[str, Any]]:
    out = []
    while (event := sub.get(timeout=0)) is not None:
        out.append(event)
    return out


def test_adds_supersedes_updates_deletes_and_expiry_are_told(mem: Memory) -> None:
    with mem.events.subscribe(user_id="alice") as alice, mem.events.subscribe() as everyone:
        a = mem.add("Alice lives in Porto", user_id="alice")
        b = mem.add("Bob lives in Oslo", user_id="bob")
        new = mem.supersede(a.id, "Alice lives in Lisbon")
        mem.update(new.id, importance=0.9)
        mem.delete(new.id)
        mem.add_many([{"text": "Alice likes tea", "user_id": "alice", "ttl": 0.001}])
        swept = mem._writer.expire(new.created_at + 3600)
        mem.delete_all(user_id="bob")
        got = drain(alice)
        every = drain(everyone)
    assert swept == 1
    assert [(e["type"], e["record"]["text"]) for e in got] == [
        ("add", "Alice lives in Porto"),
        ("supersede", "Alice lives in Lisbon"),
        ("update", "Alice lives in Lisbon"),
        ("delete", "Alice lives in Lisbon"),
        ("add", "Alice likes tea"),
        ("expire", "Alice likes tea"),
    ]
    assert got[1]["supersedes"] == a.id and got[1]["id"] == new.id
    assert got[2]["record"]["importance"] == 0.9
    assert all(e["record"]["user_id"] == "alice" for e in got)
    assert "embedding" not in got[0]["record"]
    bob = [(e["type"], e["id"]) for e in every if e["record"]["user_id"] == "bob"]
    assert bob == [("add", b.id), ("delete", b.id)]


def test_a_full_queue_drops_the_oldest_and_never_blocks_the_writer(mem: Memory) -> None:
    sub = mem.events.subscribe(max_queue=2)
    mem.add_many([{"text": f"note {i}"} for i in range(6)])  # returns: nobody reads yet
    assert sub.lost == 4
    assert sub.get(timeout=0) == {"type": "lost", "count": 4}  # told first, unasked
    assert [sub.get(timeout=0)["record"]["text"] for _ in range(2)] == ["note 4", "note 5"]  # type: ignore[index]
    assert sub.get(timeout=0) is None
    for i in (6, 7, 8):
        mem.add(f"note {i}")
    assert sub.lost == 5
    assert sub.get(timeout=0) == {"type": "lost", "count": 1}
    assert [sub.get(timeout=0)["record"]["text"] for _ in range(2)] == ["note 7", "note 8"]  # type: ignore[index]
    sub.close()
    mem.add("note 9")
    assert sub.get(timeout=0) is None


def test_a_callback_runs_on_its_own_thread_and_a_slow_one_holds_up_no_write(
    mem: Memory,
) -> None:
    release, seen, done = threading.Event(), [], threading.Event()

    def slow(event: dict[str, Any]) -> None:
        release.wait()
        seen.append(event["record"]["text"])
        if len(seen) == 3:
            done.set()

    sub = mem.events.subscribe(slow, user_id="alice")
    for text in ("one", "two", "three"):
        mem.add(text, user_id="alice")  # the callback is stuck in its first call
    assert seen == []
    release.set()
    assert done.wait(30)
    assert seen == ["one", "two", "three"]
    sub.close()


def test_bad_subscriptions_are_refused(mem: Memory) -> None:
    with pytest.raises(InvalidArgumentError, match="colour"):
        mem.events.subscribe(colour="red")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="max_queue"):
        mem.events.subscribe(max_queue=0)
    with pytest.raises(InvalidArgumentError, match="callable"):
        mem.events.subscribe(42)  # type: ignore[arg-type]


def test_closing_the_store_ends_its_subscriptions(mem: Memory) -> None:
    sub = mem.events.subscribe()
    ended = threading.Event()

    def follow() -> None:
        for _ in sub:
            pass
        ended.set()

    threading.Thread(target=follow, daemon=True).start()
    mem.close()
    assert ended.wait(30) and sub.closed


def test_replace_tells_its_deletes_and_its_adds(mem: Memory) -> None:
    old = mem.add("Alice's old profile", user_id="alice")
    with mem.events.subscribe(user_id="alice") as sub:
        _, (new,) = mem.replace([{"text": "Alice's profile", "user_id": "alice"}], user_id="alice")
        got = drain(sub)
    assert [(e["type"], e["id"], e.get("by")) for e in got] == [
        ("delete", old.id, "replace"),
        ("add", new.id, None),
    ]
