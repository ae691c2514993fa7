"""The seeds' memory semantics as memlane holds them: elizaOS's message fields and
Nous's injected memories and default search scope (both backends where a store is used)."""

from __future__ import annotations

import inspect
import re

import pytest

from conftest import REPO, StoreFactory, WordHashEmbedder
from memlane.agent import SessionScope, add_message, build_context
from memlane.errors import InvalidArgumentError

SCOPES = SessionScope("per-channel-peer")


def test_message_fields_of_elizaos_are_kept_and_filterable(
    make_store: StoreFactory, word_embedder: WordHashEmbedder
) -> None:
    mem = make_store("eliza", word_embedder)
    ev = SCOPES.resolve("discord", "u1", chat_id="c1")
    photo = {"id": "att-1", "url": "https://example.org/cat.png", "contentType": "image"}
    notes = {"id": "att-2", "title": "notes.pdf", "contentType": "document"}
    with_photo = add_message(
        mem,
        "look at my cat",
        ev,
        metadata={"entityId": "ent-1", "sessionKey": "sess-1"},
        attachments=[photo, notes],
    )
    add_message(mem, "no files here", ev, metadata={"entityId": "ent-2", "sessionKey": "sess-1"})

    kept = mem.get(with_photo.id).metadata
    assert kept["attachments"] == [photo, notes]
    assert kept["entityId"] == "ent-1" and kept["sessionKey"] == "sess-1"

    def texts(flt: dict[str, object]) -> set[str]:
        return {r.text for r in mem.list("messages", filters=flt)}

    assert texts({"entityId": "ent-1"}) == {"look at my cat"}
    assert texts({"sessionKey": "sess-1"}) == {"look at my cat", "no files here"}
    assert texts({"attachmentTypes": "image"}) == {"look at my cat"}
    assert texts({"attachmentIds": "att-2"}) == {"look at my cat"}
    assert texts({"attachmentIds": {"$exists": False}}) == {"no files here"}
    hits = mem.search("cat", filters={"entityId": "ent-1", "attachmentTypes": "image"})
    assert [h.record.id for h in hits] == [with_photo.id]


@pytest.mark.parametrize(
    "bad", ["att-1", {"id": "att-1"}, [{"url": "x"}], [{"id": ""}], [{"id": "a", "contentType": 3}]]
)
def test_bad_attachments_store_nothing(
    make_store: StoreFactory, word_embedder: WordHashEmbedder, bad: object
) -> None:
    mem = make_store("eliza", word_embedder)
    ev = SCOPES.resolve("discord", "u1", chat_id="c1")
    with pytest.raises(InvalidArgumentError, match="attachment"):
        add_message(mem, "hello", ev, attachments=bad)  # type: ignore[arg-type]
    assert mem.count("messages") == 0


def test_injected_memories_as_documented(
    make_store: StoreFactory, word_embedder: WordHashEmbedder
) -> None:
    default = inspect.signature(build_context).parameters["inject_limit"].default
    agents_md = (REPO / "docs" / "agents.md").read_text(encoding="utf-8")
    said = re.search(r"memories \(`inject_limit`, up to (\d+)", agents_md)
    assert said is not None and int(said.group(1)) == default
    mem = make_store("nous", word_embedder)
    ev = SCOPES.resolve("telegram", 1)
    mem.add_many([{"text": f"Alice hikes trail {i} in spring", **ev.fields} for i in range(30)])
    ctx = build_context(mem, "which trail does Alice hike?", ev, 20_000, min_score=None)
    assert len(ctx.records["memories"]) == default == 20
    nous = build_context(mem, "which trail does Alice hike?", ev, 20_000, inject_limit=5)
    assert len(nous.records["memories"]) == 5


def test_default_scope_is_the_default_search_scope(
    make_store: StoreFactory, word_embedder: WordHashEmbedder
) -> None:
    # Nous's default_search_scope: the scopes a search covers when the call names none.
    mem = make_store("nous", word_embedder, default_scope={"agent_id": "a"})
    mem.add("tea for alice", user_id="alice")
    mem.add("tea for the agent")
    mem.add("tea for another agent", agent_id="b")
    assert {h.record.text for h in mem.search("tea", k=10)} == {
        "tea for alice",
        "tea for the agent",
    }
    assert [h.record.text for h in mem.search("tea", k=10, user_id="alice")] == ["tea for alice"]
    assert [h.record.text for h in mem.search("tea", k=10, agent_id="b")] == [
        "tea for another agent"
    ]


def test_per_peer_partitions_as_orcbot_per_channel_peer_without_links() -> None:
    # OrcBot's default scoping is per-channel-peer; memlane's per-peer groups the same
    # events the same way when no identities are linked, and only differs by honouring links.
    events = [("telegram", 1, 10), ("telegram", 1, 11), ("telegram", 2, 10), ("discord", 1, 10)]

    def partition(scopes: SessionScope) -> list[set[int]]:
        groups: dict[tuple[tuple[str, str], ...], set[int]] = {}
        for i, (source, contact, chat) in enumerate(events):
            key = tuple(sorted(scopes.resolve(source, contact, chat_id=chat).fields.items()))
            groups.setdefault(key, set()).add(i)
        return sorted(groups.values(), key=min)

    assert SessionScope().mode == "per-peer"
    assert partition(SessionScope()) == partition(SessionScope("per-channel-peer"))
    assert partition(SessionScope()) == [{0, 1}, {2}, {3}]
    linked = {"telegram:1": "alice", "discord:1": "alice"}
    assert partition(SessionScope("per-peer", linked)) == [{0, 1, 3}, {2}]
    assert partition(SessionScope("per-channel-peer", linked)) == [{0, 1}, {2}, {3}]


def test_newest_episodes_follow_the_relevant_memories(
    make_store: StoreFactory, word_embedder: WordHashEmbedder
) -> None:
    # OrcBot puts the 5 newest episodic summaries in the prompt, whatever the message.
    mem = make_store("orcbot", word_embedder)
    ev = SCOPES.resolve("telegram", 1)
    mem.add("Alice is vegan", **ev.fields)
    for day in range(7):
        mem.add(
            f"Episode {day}: we talked about train tickets",
            type="episodic",
            created_at=1_700_000_000 + day * 86_400,
            **ev.fields,
        )
    mem.add("Episode of someone else", type="episodic", user_id="telegram:2")
    ctx = build_context(mem, "what does Alice eat?", ev, 20_000, min_score=None, inject_limit=1)
    lines = ctx.sections["memories"]
    assert lines[0] == "- Alice is vegan"
    assert [line.split(") ")[1] for line in lines[1:]] == [
        f"Episode {day}: we talked about train tickets" for day in (6, 5, 4, 3, 2)
    ]
    assert [r.type for r in ctx.records["memories"]] == ["semantic"] + ["episodic"] * 5
    # An episode that is also a relevant hit is shown once.
    ctx = build_context(mem, "Episode 6 train tickets", ev, 20_000, min_score=None, inject_limit=1)
    assert sum("Episode 6" in line for line in ctx.sections["memories"]) == 1
    assert len(ctx.sections["memories"]) == 5
    none = build_context(mem, "what does Alice eat?", ev, 20_000, inject_limit=1, episodic_limit=0)
    assert len(none.sections["memories"]) == 1
    with pytest.raises(InvalidArgumentError, match="episodic_limit"):
        build_context(mem, "x", ev, episodic_limit=-1)
