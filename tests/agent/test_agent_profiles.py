"""Contact profiles kept by AgentMemory.after on both backends: linked platforms share one
profile, aliases accumulate without repeats, last seen follows the (fake) clock, agents and
scope modes keep theirs apart, and the speaker's profile is in the context block."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

from chat_server import ScriptedChatServer
from conftest import StoreFactory
from memlane import AgentMemory, InvalidArgumentError, Memory
from memlane.agent import (
    CONTACTS,
    Compaction,
    Consolidation,
    DailyLog,
    FlushReminder,
    OpenAIChat,
    Profiles,
    Reflection,
    SessionScope,
    contact_profile,
)

LINKS = {"telegram:42": "alice", "whatsapp:+1555": "alice"}
OFF = {
    "reflection": Reflection(enabled=False),
    "consolidation": Consolidation(enabled=False),
    "flush": FlushReminder(enabled=False),
    "compaction": Compaction(enabled=False),
    "daily": DailyLog(enabled=False),
    # What each trigger does, as the turn's own report shows it (tests/agent/test_agent_upkeep.py
    # runs them in the background).
    "upkeep": "inline",
}
START = datetime(2026, 11, 20, 9, 0, tzinfo=UTC).timestamp()


class Clock:
    """An injectable clock: time moves only when the test says so."""

    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return self.now


def agent(mem: Memory, clock: Clock, scopes: SessionScope | None = None, **settings: Any):
    scopes = scopes or SessionScope("per-peer", LINKS)
    return AgentMemory(mem, scopes, clock=clock, context={"min_score": None}, **{**OFF, **settings})


def turn(am: AgentMemory, event, text: str, reply: str = "ok"):
    msgs = am.before(event, [{"role": "user", "content": text}])
    return msgs, am.after(event, msgs, reply)


def test_linked_platforms_share_one_profile(make_store: StoreFactory, word_embedder) -> None:
    clock = Clock()
    with make_store("p", word_embedder) as mem:
        am = agent(mem, clock)
        on_telegram = am.event("telegram", 42, 7, name="Alice")
        _, report = turn(am, on_telegram, "hi from telegram")
        assert report.ok and report.profile is not None
        first = report.profile
        assert (first.contact, first.aliases, first.message_count) == ("alice", ("Alice",), 1)
        # The links name her WhatsApp id before she writes from there.
        assert first.platform_ids == {"telegram": ("42",), "whatsapp": ("+1555",)}
        clock.now += 3600
        on_whatsapp = am.event("whatsapp", "+1555", "grp", name="Ally")
        _, report = turn(am, on_whatsapp, "hi from whatsapp")
        both = am.contact(on_telegram)
        assert both == am.contact(on_whatsapp) == report.profile
        assert both is not None and both.id == first.id  # updated in place
        assert both.aliases == ("Alice", "Ally") and both.message_count == 2
        assert (both.first_seen, both.last_seen) == (START, START + 3600)
        assert mem.count(CONTACTS) == 1
        # A search finds the profile by an alias.
        hits = mem.search("Ally", 1, table=CONTACTS, **on_whatsapp.fields)
        assert hits and hits[0].record.id == both.id
        # Someone else has a profile of their own.
        _, report = turn(am, am.event("telegram", 99, 7, name="Bob"), "hello")
        assert report.profile is not None and report.profile.contact == "telegram:99"
        assert mem.count(CONTACTS) == 2 and am.contact(on_telegram) == both


def test_aliases_accumulate_without_repeats_and_last_seen_follows_the_clock(
    make_store: StoreFactory, word_embedder
) -> None:
    clock = Clock()
    with make_store("p", word_embedder) as mem:
        am = agent(mem, clock, profiles=Profiles(max_aliases=3))
        names = ["Alice", "alice", "  Alice  ", "Ali", None, "ALI", "Al", "Alice B."]
        for i, name in enumerate(names):
            clock.now = START + 600 * i
            event = am.event("telegram", 42, 7, name=name)
            _, report = turn(am, event, f"message number {i}")
            assert report.profile is not None
            assert report.profile.last_seen == clock.now
            assert report.profile.first_seen == START
        profile = am.contact(am.event("telegram", 42))
        assert profile is not None
        # Case- and whitespace-insensitive repeats are one alias; the cap keeps the newest 3.
        assert profile.aliases == ("Ali", "Al", "Alice B.")
        assert profile.message_count == len(names)
        # A turn with no user message is not the contact speaking.
        clock.now += 60
        am.after(am.event("telegram", 42, 7), [{"role": "system", "content": "s"}], "hi?")
        again = am.contact(am.event("telegram", 42))
        assert again is not None and again.message_count == len(names)
        assert again.last_seen == START + 600 * (len(names) - 1)


def test_agents_and_modes_keep_profiles_apart(make_store: StoreFactory, word_embedder) -> None:
    clock = Clock()
    with make_store("p", word_embedder) as mem:
        one = agent(mem, clock, SessionScope("per-peer", LINKS, agent_id="one"))
        two = agent(mem, clock, SessionScope("per-peer", LINKS, agent_id="two"))
        turn(one, one.event("telegram", 42, 7, name="Alice"), "hello one")
        turn(one, one.event("telegram", 42, 7), "hello again one")
        assert two.contact(two.event("telegram", 42)) is None
        turn(two, two.event("telegram", 42, 7, name="Al"), "hello two")
        p1, p2 = one.contact(one.event("telegram", 42)), two.contact(two.event("telegram", 42))
        assert p1 is not None and p2 is not None and p1.id != p2.id
        assert (p1.aliases, p1.message_count) == (("Alice",), 2)
        assert (p2.aliases, p2.message_count) == (("Al",), 1)
        # per-channel-peer ignores links: one profile per platform identity, no linked ids.
        chan = agent(mem, clock, SessionScope("per-channel-peer", LINKS, agent_id="three"))
        turn(chan, chan.event("telegram", 42, 7), "from telegram")
        turn(chan, chan.event("whatsapp", "+1555", 8), "from whatsapp")
        tg = chan.contact(chan.event("telegram", 42))
        wa = chan.contact(chan.event("whatsapp", "+1555"))
        assert tg is not None and wa is not None and tg.id != wa.id
        assert (tg.contact, tg.platform_ids) == ("telegram:42", {"telegram": ("42",)})
        # "main" mode: one shared memory, still one profile per person.
        main = agent(mem, clock, SessionScope("main", LINKS, agent_id="four"))
        turn(main, main.event("telegram", 42, 7), "main one")
        turn(main, main.event("whatsapp", "+1555", 7), "main two")
        turn(main, main.event("telegram", 5, 7), "main three")
        alice = contact_profile(mem, main.event("whatsapp", "+1555"))
        assert alice is not None and alice.message_count == 2
        assert mem.count(CONTACTS, agent_id="four") == 2


def test_the_speakers_profile_is_in_the_context(make_store: StoreFactory, word_embedder) -> None:
    clock = Clock()
    with make_store("p", word_embedder) as mem:
        am = agent(mem, clock)
        alice = am.event("telegram", 42, 7, name="Alice")
        first, _ = turn(am, alice, "do you know me?")
        assert "Who you are talking to" not in first[0]["content"]  # not seen yet
        msgs, _ = turn(am, alice, "and now?")
        block = msgs[0]["content"]
        assert "## Who you are talking to\nContact alice, also known as Alice; " in block
        assert "on telegram 42, whatsapp +1555; 1 message since 2026-11-20" in block
        # Someone else's profile is never shown to them.
        bob = am.event("telegram", 99, 7)
        assert (
            "Contact alice" not in am.before(bob, [{"role": "user", "content": "hi"}])[0]["content"]
        )
        ctx = am.context(alice, "hi")
        assert ctx.sections["contact"] and ctx.tokens["contact"] <= ctx.budgets["contact"]
        # Kept but not shown; or not kept at all.
        hidden = agent(mem, clock, profiles=Profiles(in_context=False))
        msgs, report = turn(hidden, alice, "hidden?")
        assert "Who you are talking to" not in msgs[0]["content"] and report.profile is not None
        off = agent(mem, clock, profiles=Profiles(enabled=False))
        _, report = turn(off, off.event("telegram", 7, 7), "nobody keeps me")
        assert report.profile is None and off.contact(off.event("telegram", 7)) is None


def test_async_after_keeps_profiles(make_store: StoreFactory, word_embedder) -> None:
    clock = Clock()
    with ScriptedChatServer() as server, make_store("p", word_embedder) as mem:
        llm = OpenAIChat("scripted", base_url=server.base_url, max_retries=0, timeout=5)
        am = AgentMemory(mem, SessionScope("per-peer", LINKS), llm, clock=clock, **OFF)
        event = am.event("telegram", 42, 7, name="Alice")

        async def go() -> None:
            msgs = await am.abefore(event, [{"role": "user", "content": "async hello"}])
            report = await am.aafter(event, msgs, "hi")
            assert report.ok and report.profile is not None

        asyncio.run(go())
        llm.close()
        assert server.requests == []  # profiles need no LLM
        profile = am.contact(event)
        assert profile is not None and profile.message_count == 1


def test_bad_input_is_refused_before_anything_is_stored(word_embedder) -> None:
    with Memory(None, word_embedder) as mem:
        am = agent(mem, Clock())
        for name in ("", "   ", 3):
            with pytest.raises(InvalidArgumentError, match="name"):
                am.event("telegram", 42, 7, name=name)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError, match="max_aliases"):
            Profiles(max_aliases=0)
        with pytest.raises(InvalidArgumentError, match="Profiles"):
            agent(mem, Clock(), profiles=DailyLog())
        with pytest.raises(InvalidArgumentError, match="EventScope"):
            am.contact("telegram:42")  # type: ignore[arg-type]
        assert mem.count() == 0
