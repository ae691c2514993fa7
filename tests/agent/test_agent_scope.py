"""SessionScope: modes, identity links, and isolation in a real store."""

from __future__ import annotations

import pytest

from memlane import InvalidArgumentError, Memory
from memlane.agent import SessionScope

LINKS = {"telegram:123": "alice", "whatsapp:+1555": "alice"}


def test_per_peer_links_identities():
    s = SessionScope("per-peer", LINKS, agent_id="bot")
    tg = s.resolve("telegram", 123, chat_id=-5)
    wa = s.resolve("WhatsApp", "+1555")
    assert (
        tg.fields
        == wa.fields
        == {"agent_id": "bot", "user_id": "alice", "session_id": "peer:alice"}
    )
    assert tg.identity == "alice" and tg.contact == "telegram:123"
    assert tg.room_id == "telegram:-5" and wa.room_id is None
    assert tg.history == {**tg.fields, "room_id": "telegram:-5"}
    other = s.resolve("telegram", 999)
    assert other.fields["user_id"] == "telegram:999"


def test_per_channel_peer_keeps_platforms_apart():
    s = SessionScope("per-channel-peer", LINKS)
    tg, wa = s("telegram", 123), s("whatsapp", "+1555")
    assert tg != wa
    assert tg["user_id"] == "telegram:123"
    assert s.resolve("telegram", 123).identity == "alice"


def test_main_mode_shares_everything():
    s = SessionScope("main", LINKS)
    assert s("telegram", 1) == s("discord", 2) == {"session_id": "main"}


def test_bad_arguments():
    with pytest.raises(InvalidArgumentError, match="mode must be one of"):
        SessionScope("global")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        SessionScope(identity_links={"alice": "x"})
    with pytest.raises(InvalidArgumentError):
        SessionScope().resolve("", 1)
    with pytest.raises(InvalidArgumentError):
        SessionScope().resolve("telegram", True)  # type: ignore[arg-type]


@pytest.mark.parametrize(("mode", "shared"), [("per-peer", True), ("per-channel-peer", False)])
def test_memory_shared_across_platforms_only_per_peer(word_embedder, mode, shared):
    s = SessionScope(mode, LINKS)  # type: ignore[arg-type]
    with Memory(None, word_embedder) as mem:
        mem.add("Alice is allergic to peanuts", **s("telegram", 123))
        hits = mem.search("peanuts allergy", **s("whatsapp", "+1555"))
        assert bool(hits) is shared
        # A stranger never sees it.
        assert mem.search("peanuts allergy", **s("telegram", 42)) == []


@pytest.mark.parametrize("bad", ["Bob\ud800", "B\x00b"], ids=["surrogate", "nul"])
@pytest.mark.parametrize("where", ["source", "contact_id", "chat_id", "name", "message_id"])
def test_text_no_store_can_hold_is_refused_by_the_event(bad, where):
    # Accepted, a name reached the store only in the contact's profile, after the turn
    # was stored: the turn was never counted, and no later try could count it.
    args = {"source": "telegram", "contact_id": 1, "chat_id": 2, "name": "Bob", "message_id": 3}
    args[where] = bad
    with pytest.raises(InvalidArgumentError, match=where):
        SessionScope().resolve(**args)


@pytest.mark.parametrize("where", ["agent_id", "namespace"])
def test_a_scope_setting_no_store_can_hold_is_refused(where):
    with pytest.raises(InvalidArgumentError, match=where):
        SessionScope(**{where: "a\ud800"})
