"""OrcBot's dedup keys on both backends: a repeated event id (``messageId``, ``eventId``,
``statusMessageId``) within the 5-minute window is one memory whatever its text, in
``add`` and in an ``add_many`` batch; after the window, in another scope or table, or
under the other key, it is a new one. ``sourceId`` names the contact: only the same
source + contact + text is a repeat, and a contact's other messages are all kept. The
window's clock is the writer's ``time.time``, moved here by a fake instead of sleeping."""

from __future__ import annotations

import json
import random
import string
import time

import pytest

import memlane._memory.writer as writer
from conftest import StoreFactory, WordHashEmbedder
from memlane import Memory
from memlane._memory import duplicates
from memlane._memory.duplicates import window_keys


class FakeTime:
    """Stands in for the ``time`` module the writer reads ``time.time()`` from."""

    def __init__(self) -> None:
        self.now = time.time()

    def time(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeTime:
    fake = FakeTime()
    monkeypatch.setattr(writer, "time", fake)
    return fake


@pytest.mark.parametrize("key", ["eventId", "messageId", "statusMessageId"])
def test_a_repeated_id_is_one_memory_within_the_window(
    make_store: StoreFactory, clock: FakeTime, key: str
) -> None:
    with make_store("w", WordHashEmbedder()) as mem:
        first = mem.add("Alice: see you at 6", user_id="alice", metadata={key: "evt-81"})
        clock.now += 299
        # The same delivery again, its text edited on the way: the same memory.
        again = mem.add("Alice: see you at 6pm", user_id="alice", metadata={key: "evt-81"})
        assert (again.id, again.duplicate, again.duplicate_of) == (first.id, "window", first.id)
        assert again.text == first.text  # the stored record, unchanged
        # An int id and its str spelling are one id.
        numeric = mem.add("ping", user_id="alice", metadata={key: 7})
        assert mem.add("pong", user_id="alice", metadata={key: "7"}).id == numeric.id
        assert mem.count(user_id="alice") == 2
        # Another id, another scope, another table, or the other key: new memories.
        other_id = mem.add("Alice: see you at 6", user_id="alice", metadata={key: "evt-82"})
        other_scope = mem.add("Bob: see you at 6", user_id="bob", metadata={key: "evt-81"})
        other_table = mem.add(
            "Alice: see you at 6", table="notes", user_id="alice", metadata={key: "evt-81"}
        )
        other_key = "statusMessageId" if key == "eventId" else "eventId"
        crossed = mem.add("Alice: 6 it is", user_id="alice", metadata={other_key: "evt-81"})
        made = [other_id, other_scope, other_table, crossed]
        assert all(r.duplicate is None for r in made)
        assert len({first.id, *(r.id for r in made)}) == 5
        assert mem.count() == 6


@pytest.mark.parametrize("key", ["eventId", "messageId"])
def test_after_the_window_the_same_id_is_a_new_memory(
    make_store: StoreFactory, clock: FakeTime, key: str
) -> None:
    with make_store("w", WordHashEmbedder()) as mem:
        first = mem.add("deploy finished", agent_id="ops", metadata={key: "job-1"})
        clock.now += 301  # past dedup_window=300
        later = mem.add("deploy finished", agent_id="ops", metadata={key: "job-1"})
        assert later.duplicate is None and later.id != first.id
        # The later one opens a window of its own.
        clock.now += 60
        third = mem.add("deploy finished (retry)", agent_id="ops", metadata={key: "job-1"})
        assert (third.id, third.duplicate) == (later.id, "window")
        assert mem.count(agent_id="ops") == 2


def test_add_many_batch_and_against_the_store(make_store: StoreFactory, clock: FakeTime) -> None:
    with make_store("w", WordHashEmbedder()) as mem:
        recs = mem.add_many(
            [
                {"text": "order shipped", "user_id": "u", "metadata": {"eventId": "e1"}},
                {"text": "order shipped!", "user_id": "u", "metadata": {"eventId": "e1"}},
                {"text": "order shipped", "user_id": "v", "metadata": {"eventId": "e1"}},
                {"text": "refund issued", "user_id": "u", "metadata": {"messageId": "s1"}},
                {"text": "refund issued.", "user_id": "u", "metadata": {"messageId": "s1"}},
            ]
        )
        assert [r.duplicate for r in recs] == [None, "window", None, None, "window"]
        assert recs[1].id == recs[0].id and recs[4].id == recs[3].id
        assert recs[2].id != recs[0].id  # another scope
        assert mem.count() == 3
        # A later batch meets the stored ones in the window.
        clock.now += 120
        more = mem.add_many(
            [
                {"text": "shipped (again)", "user_id": "u", "metadata": {"eventId": "e1"}},
                {"text": "new event", "user_id": "u", "metadata": {"eventId": "e2"}},
            ]
        )
        assert (more[0].id, more[0].duplicate) == (recs[0].id, "window")
        assert more[1].duplicate is None
        clock.now += 301
        last = mem.add_many(
            [{"text": "order shipped", "user_id": "u", "metadata": {"eventId": "e1"}}]
        )
        assert last[0].duplicate is None and mem.count() == 5


def test_the_window_holds_across_a_reopen(make_store: StoreFactory) -> None:
    emb = WordHashEmbedder()
    with make_store("w", emb) as mem:
        first = mem.add("hello", session_id="s", metadata={"eventId": "e9", "messageId": "m9"})
    with make_store("w", emb) as mem:
        by_event = mem.add("hello?", session_id="s", metadata={"eventId": "e9"})
        by_message = mem.add("hello!", session_id="s", metadata={"messageId": "m9"})
        assert by_event.id == by_message.id == first.id
        assert mem.count() == 1


def test_off_when_the_window_is_zero() -> None:
    with Memory(None, WordHashEmbedder(), dedup_window=0) as mem:
        a = mem.add("x", metadata={"eventId": "e"})
        b = mem.add("x", metadata={"eventId": "e"})
        assert a.id != b.id and mem.count() == 2


def test_window_keys_name_each_id_kind_apart() -> None:
    scope = ("memories", None, "u", None, None, None, None)
    keys = window_keys(scope, {"messageId": "1", "statusMessageId": "1", "eventId": "1"}, "h")
    assert len(set(keys)) == 3
    # The two spellings of a message id are one key; a contact alone is no key.
    assert window_keys(scope, {"messageId": "1", "message_id": "1"}, "h") == window_keys(
        scope, {"message_id": "1"}, "h"
    )
    assert window_keys(scope, {"sourceId": "1"}, "h") == []
    assert window_keys(scope, {"eventId": None, "other": "1"}, "h") == []


def test_a_contacts_later_messages_are_all_kept(make_store: StoreFactory, clock: FakeTime) -> None:
    """The issue's reproducer: ``sourceId`` is the contact, not the event."""
    contact = {"source": "telegram", "sourceId": "123456789"}
    with make_store("w", None) as mem:
        first = mem.add("I need the report by Friday", metadata=contact)
        second = mem.add("Also, please book a table for two", metadata=contact)
        assert second.duplicate is None and second.id != first.id
        assert mem.count() == 2
        # The same text from the same contact within the window: one delivery.
        clock.now += 60
        again = mem.add("I need the report  by friday", metadata=contact)
        assert (again.id, again.duplicate) == (first.id, "window")
        # The same text from another contact, or another source: new messages.
        other = mem.add("I need the report by Friday", metadata={**contact, "sourceId": "42"})
        slack = mem.add("I need the report by Friday", metadata={**contact, "source": "slack"})
        assert other.duplicate is None and slack.duplicate is None
        batch = mem.add_many(
            [
                {"text": "one", "metadata": contact},
                {"text": "two", "metadata": contact},
                {"text": "one", "metadata": contact},
            ]
        )
        assert [r.duplicate for r in batch] == [None, None, "window"]
        assert mem.count() == 6
        clock.now += 301
        late = mem.add("I need the report by Friday", metadata=contact)
        assert late.duplicate is None and mem.count() == 7


def test_a_store_with_old_sourceid_keys_keeps_a_contacts_messages(
    make_store: StoreFactory,
) -> None:
    """Earlier versions remembered ``sourceId`` as an event id; a reopened store derives
    that record's keys again (source + contact + text) instead of matching the old key."""
    contact = {"source": "telegram", "sourceId": "123456789"}
    with make_store("w", None) as mem:
        first = mem.add("I need the report by Friday", user_id="u", metadata=contact)
        db = mem._db
        scope = ["memories", None, "u", None, None, None, None]
        legacy = json.dumps(["sourceId", scope, "123456789"])
        with db.transaction() as conn:
            conn.execute(db._q(f"DELETE FROM {db._p}recent"))
            db.remember(conn, [(legacy, first.id, time.time())], time.time() - 300)
    with make_store("w", None) as mem:
        later = mem.add("Also, please book a table for two", user_id="u", metadata=contact)
        assert later.duplicate is None
        again = mem.add("I need the report by Friday", user_id="u", metadata=contact)
        assert (again.id, again.duplicate) == (first.id, "window")
        assert mem.count() == 2


def test_ids_and_scopes_of_any_length_are_one_key_each_on_both_backends(
    make_store: StoreFactory, clock: FakeTime
) -> None:
    """A key holds the scope's values and the message id whole; PostgreSQL's index of
    the window's keys refused an entry past about 2.7 kB (``StorageError``, nothing
    stored), where SQLite kept it. A long key is kept as its digest on both."""
    rng = random.Random(5)
    long_id = "".join(rng.choices(string.ascii_letters, k=10_000))
    agent = "".join(rng.choices(string.ascii_letters, k=3_000))
    emb = WordHashEmbedder()
    with make_store("w", emb) as mem:
        first = mem.add("a long delivery", agent_id=agent, metadata={"messageId": long_id})
        clock.now += 60
        again = mem.add("a long delivery, again", agent_id=agent, metadata={"messageId": long_id})
        assert (again.id, again.duplicate) == (first.id, "window")
        other = mem.add("another", agent_id=agent, metadata={"messageId": long_id[:-1] + "?"})
        assert other.duplicate is None
        contact = mem.add("hi", metadata={"source": "chat", "sourceId": long_id})
        assert contact.duplicate is None
    with make_store("w", emb) as mem:  # the keys as stored are the keys derived again
        assert mem.add("reopened", agent_id=agent, metadata={"messageId": long_id}).id == first.id
        assert mem.count() == 3
    keys = window_keys(("a" * 600,), {"eventId": "e"}, "digest")
    assert len(keys) == 1 and keys[0].startswith("sha256:") and len(keys[0]) == 71


def test_a_long_key_an_earlier_version_stored_whole_still_matches(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Keys were stored whole before; a store reopened within the window remembers them
    as kept now (their digest), or the delivery repeated after the upgrade is stored
    twice."""
    message = "m" * 1_000
    emb = WordHashEmbedder()
    monkeypatch.setattr(duplicates, "_KEY_CHARS", 10**6)  # as an earlier version kept them
    with make_store("w", emb) as mem:
        first = mem.add("the delivery", user_id="u", metadata={"messageId": message})
    monkeypatch.undo()
    with make_store("w", emb) as mem:
        again = mem.add("the delivery, again", user_id="u", metadata={"messageId": message})
        assert (again.id, again.duplicate) == (first.id, "window")
        assert mem.count() == 1
