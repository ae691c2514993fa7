"""Context assembly and OrcBot's thread context."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import WordHashEmbedder
from memlane import InvalidArgumentError, Memory
from memlane.agent import SessionScope
from memlane.agent.context import build_context, char_token_count, default_token_counter
from memlane.agent.history import MESSAGES, add_message, thread_context

SCOPES = SessionScope("per-peer", {"telegram:1": "alice", "whatsapp:+1": "alice"})


@pytest.fixture
def mem(word_embedder):
    m = Memory(None, word_embedder)
    yield m
    m.close()


def _fill(mem):
    ev = SCOPES.resolve("telegram", 1, chat_id=100)
    for i in range(30):
        add_message(
            mem,
            f"message number {i} about hiking trails and mountain weather " * (1 + i % 3),
            ev,
            role="user" if i % 2 == 0 else "assistant",
            created_at=1_700_000_000 + i,
        )
    for i in range(10):
        mem.add(f"Alice likes hiking route {i} in the Alps with friends", **ev.fields)
    mem.ingest_text(
        "\n\n".join(f"Trail {i}: the mountain hut opens in June. " * 5 for i in range(8)),
        source="inline:trails",
        shared=True,
    )
    return ev


def test_default_counter_is_the_wordpiece_tokenizer():
    count = default_token_counter()
    assert count is not char_token_count  # the tokenizer package is a test dependency
    assert count("hello world") == 2
    assert count("unbelievably") > 1  # word pieces
    assert count("") == 0
    assert char_token_count("abcde") == 2


@pytest.mark.parametrize("counter", [None, char_token_count])
@pytest.mark.parametrize("max_tokens", [40, 200, 1000])
def test_budgets_never_exceeded(mem, counter, max_tokens):
    ev = _fill(mem)
    count = counter or default_token_counter()
    ctx = build_context(
        mem, "hiking mountain weather", ev, max_tokens, count_tokens=counter, min_score=None
    )
    # The shares of what the message leaves; no profile or daily log was stored, so
    # theirs goes to the others.
    left = max_tokens - ctx.reserved
    assert ctx.reserved == count("hiking mountain weather")
    assert ctx.budgets["contact"] == ctx.budgets["daily"] == 0
    assert sum(ctx.budgets.values()) <= left
    assert ctx.budgets["history"] >= int(left * 0.5)
    for name, lines in ctx.sections.items():
        block = "\n".join([f"## {name}", *lines]) if lines else ""
        assert ctx.tokens[name] <= ctx.budgets[name], (name, ctx.tokens)
        assert count(block) <= ctx.budgets[name] + 3  # title words differ from the header
    assert count(ctx.text) <= left
    assert ctx.total_tokens <= left
    if max_tokens >= 200:  # no profile or daily log was stored
        assert all(ctx.sections[k] for k in ("history", "knowledge", "memories"))
        assert len(ctx.sections["memories"]) <= 20  # the inject limit
        assert "## Recent conversation" in ctx.text and "## What you remember" in ctx.text
    # History is the newest messages, shown oldest first.
    hist = ctx.records["history"]
    assert [r.created_at for r in hist] == sorted(r.created_at for r in hist)
    if hist:
        assert hist[-1].text.startswith("message number 29")


def test_sections_and_limits(mem):
    ev = _fill(mem)
    ctx = build_context(mem, "hiking Alps friends", ev, 5000, inject_limit=2, min_score=None)
    assert len(ctx.sections["memories"]) == 2
    assert len(ctx.sections["history"]) == 20  # history_limit
    assert ctx.sections["knowledge"] and "mountain hut" in ctx.sections["knowledge"][0]
    only = build_context(mem, "hiking", ev, 500, budget={"memories": 1.0}, min_score=None)
    assert only.sections["history"] == [] and only.sections["knowledge"] == []
    assert only.sections["memories"]
    # A minimum similarity above every hit injects nothing.
    none = build_context(mem, "hiking", ev, 500, min_score=0.999)
    assert none.sections["memories"] == []
    # Another person's context holds none of alice's history or memories.
    bob = build_context(mem, "hiking", SCOPES.resolve("telegram", 2, chat_id=7), 2000)
    assert bob.sections["history"] == [] and bob.sections["memories"] == []


def test_bad_budgets(mem):
    with pytest.raises(InvalidArgumentError, match="more than 1"):
        build_context(mem, "x", {}, 100, budget={"history": 0.8, "memories": 0.8})
    with pytest.raises(InvalidArgumentError, match="unknown budget"):
        build_context(mem, "x", {}, 100, budget={"jokes": 0.1})
    with pytest.raises(InvalidArgumentError, match="max_tokens"):
        build_context(mem, "x", {}, 0)
    # Shares are taken in floats: beyond them was a raw OverflowError.
    with pytest.raises(InvalidArgumentError, match="max_tokens must be at most"):
        build_context(mem, "x", {}, 10**309)
    assert build_context(mem, "x", {}, 2**63 - 1).sections is not None


def test_long_line_cut_to_fit(mem):
    mem.add("word " * 2000)
    ctx = build_context(mem, "word", {}, 100, budget={"memories": 1.0}, min_score=None)
    (line,) = ctx.sections["memories"]
    assert line.endswith("…") and ctx.tokens["memories"] <= 100


def test_thread_context(mem):
    tg = SCOPES.resolve("telegram", 1, chat_id=100)
    wa = SCOPES.resolve("whatsapp", "+1", chat_id=200)
    bob = SCOPES.resolve("telegram", 2, chat_id=100)
    t0 = 1_700_000_000
    add_message(mem, "My passport number ends in 42, remember for the visa", tg, created_at=t0)
    for i in range(20):
        add_message(mem, f"small talk {i} " + "x" * 500 * (i == 19), wa, created_at=t0 + 10 + i)
    add_message(mem, "See you  soon", tg, created_at=t0 + 100)
    add_message(mem, "see you soon", wa, created_at=t0 + 101)  # the same text again
    add_message(mem, "Bob's visa passport question", bob, created_at=t0 + 200)
    lines = thread_context(mem, "visa passport", tg)
    assert len(lines) <= 16
    # The relevant old message is there, with the last 8 (across linked platforms).
    assert "passport number ends in 42" in lines[0]
    assert any("small talk 19" in line for line in lines)
    assert not any("Bob" in line for line in lines)
    assert all(len(line) <= 420 for line in lines)
    assert any(line.endswith("…") for line in lines)
    texts = [line.split(": ", 1)[1].lower() for line in lines]
    assert texts.count("see you soon") == 1 and len(texts) == len(set(texts))
    stamps = [line[1:17] for line in lines]
    assert stamps == sorted(stamps)
    assert mem.count(MESSAGES) == 24


_WORDS = st.text(
    alphabet=st.sampled_from("abcdefghij klmnop,.!?é中\n"), min_size=1, max_size=300
).filter(lambda t: t.strip())


@settings(max_examples=25, deadline=None)
@given(
    texts=st.lists(_WORDS, min_size=1, max_size=12),
    max_tokens=st.integers(1, 400),
    shares=st.tuples(st.floats(0, 0.6), st.floats(0, 0.4)),
    chars=st.booleans(),
)
def test_budgets_property(texts, max_tokens, shares, chars):
    ev = SCOPES.resolve("telegram", 1, chat_id=5)
    counter = char_token_count if chars else None
    count = counter or default_token_counter()
    budget = {"history": shares[0], "memories": shares[1]}
    with Memory(None, WordHashEmbedder()) as mem:
        for i, t in enumerate(texts):
            add_message(mem, t, ev, created_at=1_700_000_000 + i)
            mem.add(t, **ev.fields)
        ctx = build_context(
            mem, texts[0], ev, max_tokens, budget=budget, min_score=None, count_tokens=counter
        )
    left = max(max_tokens - count(texts[0]), 0)
    assert ctx.reserved == count(texts[0])
    assert count(ctx.text) <= left
    # Spare tokens move between the sections given a share, never past the shares' sum.
    assert sum(ctx.budgets.values()) <= int(left * budget["history"]) + int(
        left * budget["memories"]
    )
    for name in ("history", "memories"):
        assert ctx.tokens[name] <= ctx.budgets[name]
        if budget[name] == 0:
            assert ctx.tokens[name] == 0


def test_repeated_messages(mem):
    ev = SCOPES.resolve("telegram", 1, chat_id=3)
    first = add_message(mem, "ok", ev)
    again = add_message(mem, "ok", ev)  # a duplicate delivery
    assert again.id == first.id and again.duplicate == "window"
    r1 = add_message(mem, "Noted!", ev, role="assistant")
    r2 = add_message(mem, "Noted!", ev, role="assistant")
    assert r1.id != r2.id and r2.duplicate is None
    assert r1.metadata["to"] == "telegram:1" and "contact" not in r1.metadata
    assert mem.count(MESSAGES) == 3


def test_min_score_is_a_similarity(onnx_embedder):
    with Memory(None, onnx_embedder) as mem:
        for text in (
            "Alice is allergic to peanuts",
            "The car needs new tyres before winter",
            "Alice prefers green tea in the morning",
        ):
            mem.add(text, user_id="alice")
        scope = {"user_id": "alice"}
        food = build_context(mem, "Can I eat peanut butter?", scope, 500)
        assert food.sections["memories"][0] == "- Alice is allergic to peanuts"
        assert "- The car needs new tyres before winter" not in food.sections["memories"]
        for unrelated in ("What is the capital of France?", "hello"):
            assert build_context(mem, unrelated, scope, 500).records["memories"] == []
        assert len(build_context(mem, "hello", scope, 500, min_score=None).records["memories"]) == 3
        with pytest.raises(InvalidArgumentError, match="min_score"):
            build_context(mem, "x", scope, 500, min_score=2)
        with pytest.raises(InvalidArgumentError, match="min_score"):
            build_context(mem, "x", scope, 500, min_score="high")
    # The default floor was measured for the default model's cosines: another
    # embedder gets none unless given one.
    with Memory(None, WordHashEmbedder()) as other:
        other.add("Alice is allergic to peanuts")
        assert build_context(other, "the capital of France", {}, 500).sections["memories"]
        assert not build_context(other, "the capital of France", {}, 500, min_score=0.9).sections[
            "memories"
        ]
    with Memory(None, None) as text_only:  # no similarity: no minimum
        text_only.add("Alice is allergic to peanuts")
        assert build_context(text_only, "peanuts", {}, 500).sections["memories"]


def _history_and_knowledge(mem):
    """A room with a long history and many relevant fragments, and no memory."""
    ev = SCOPES.resolve("telegram", 1, chat_id=100)
    for i in range(40):
        add_message(
            mem,
            f"message {i}: we talked about mountain huts, trails and the weather " * 3,
            ev,
            created_at=1_700_000_000 + i,
        )
    for i in range(30):
        mem.ingest_text(
            f"Hut {i}: the mountain hut on trail {i} opens in June and sleeps {i + 4} guests.",
            source=f"inline:hut-{i}",
            shared=True,
        )
    return ev


def test_an_empty_section_gives_its_share_to_the_others(mem):
    ev = _history_and_knowledge(mem)
    ctx = build_context(mem, "mountain hut June", ev, 1000)
    assert ctx.sections["memories"] == [] and ctx.sections["daily"] == []
    assert ctx.sections["history"] and ctx.sections["knowledge"]
    # Before, the empty sections kept their 35 %: 650 tokens used at most.
    assert ctx.total_tokens > 900
    count = default_token_counter()
    assert count(ctx.text) <= 1000 - ctx.reserved
    assert sum(ctx.budgets.values()) <= 1000 - ctx.reserved
    for name, used in ctx.tokens.items():
        assert used <= ctx.budgets[name]
    # Both full sections grew past their own share, in proportion to it.
    assert ctx.budgets["history"] > 500 and ctx.budgets["knowledge"] > 300
    # A section left out of the shares gets none of the spare tokens.
    only = build_context(mem, "mountain hut June", ev, 1000, budget={"knowledge": 0.3})
    assert only.sections["history"] == [] and 0 < only.tokens["knowledge"] <= 300


def test_knowledge_fills_up_to_20_fragments_while_the_budget_lasts(mem):
    ev = _history_and_knowledge(mem)
    wide = build_context(mem, "mountain hut June guests", ev, 20_000)
    assert len(wide.sections["knowledge"]) == 20
    assert len(wide.records["knowledge"]) == 20
    narrow = build_context(mem, "mountain hut June guests", ev, 600)
    assert 0 < len(narrow.sections["knowledge"]) < 20
    assert narrow.tokens["knowledge"] <= narrow.budgets["knowledge"]


def test_the_budget_reserves_the_system_prompt_and_the_message(mem):
    ev = _history_and_knowledge(mem)
    count = default_token_counter()
    message = "which mountain hut opens in June? " * 10
    system = "You are a helpful hiking guide. Answer briefly. " * 30
    ctx = build_context(mem, message, ev, 1000, system_prompt=system)
    assert ctx.reserved == count(message) + count(system) > 300
    assert count(ctx.text) <= 1000 - ctx.reserved
    assert count(ctx.text) + count(system) + count(message) <= 1000
    assert sum(ctx.budgets.values()) <= 1000 - ctx.reserved
    # Without a system prompt the message alone is reserved.
    plain = build_context(mem, message, ev, 1000)
    assert plain.reserved == count(message)
    assert ctx.total_tokens < plain.total_tokens <= 1000 - count(message)
    # A prompt that takes the whole budget leaves no context, and no error.
    full = build_context(mem, message, ev, 200, system_prompt=system)
    assert full.text == "" and full.total_tokens == 0
    with pytest.raises(InvalidArgumentError, match="system_prompt"):
        build_context(mem, message, ev, 1000, system_prompt=3)
    with pytest.raises(InvalidArgumentError, match="message"):
        build_context(mem, None, ev, 1000)


def test_what_should_i_cook_finds_the_vegan_fact(onnx_embedder):
    with Memory(None, onnx_embedder) as mem:
        event = SCOPES.resolve("telegram", 1, chat_id=100)
        mem.add("Alice is vegan", **event.fields)
        ctx = build_context(mem, "what should I cook?", event)
        assert ctx.sections["memories"] == ["- Alice is vegan"]
        assert "Alice is vegan" in ctx.text
