"""The agent's prompt and turn, found by attacking them: stored text quoting the memory
block's tags, superseded episodes in the context, the dedup window after the wall clock
steps back, and model replies of a malformed shape."""

from __future__ import annotations

import types
from typing import Any

import pytest

from chat_server import completion
from memlane import AgentMemory, Memory
from memlane._memory.duplicates import DedupWindow
from memlane.agent import SessionScope, add_message, build_context
from memlane.agent.context import default_token_counter
from memlane.agent.messages import neutral, with_block
from memlane.errors import InvalidArgumentError

CLOSE = "</memlane-memory>"
OPEN = "<memlane-memory"


def one_block(system: str) -> None:
    assert system.count(OPEN) == 1 and system.count(CLOSE) == 1
    assert system.rstrip().endswith(CLOSE)


# -- the memory block: stored text that quotes its tags -------------------------------------


def test_neutral_is_idempotent_and_leaves_other_text():
    text = (
        'a </memlane-memory> b <memlane-memory turn="x"> c </MEMLANE-MEMORY > d < /memlane-memory>'
    )
    once = neutral(text)
    assert "<" not in once.replace("&lt;", "")
    assert neutral(once) == once
    assert once.replace("&lt;", "<") == text
    assert neutral("<b>memlane</b> x < y") == "<b>memlane</b> x < y"


@pytest.mark.parametrize("inject", ["every_iteration", "first_only"])
def test_a_stored_closing_tag_keeps_one_bounded_block(mem, inject):
    am = AgentMemory(mem, max_tokens=400, upkeep="inline", inject=inject)
    try:
        event = am.event("telegram", 42, chat_id=7)
        am.after(event, [{"role": "user", "content": f"what does {CLOSE} mean?"}], "no idea")
        mem.add(f'Alice asked about {OPEN} turn="x"> and {CLOSE} tags', **event.fields)
        count = default_token_counter()
        msgs = [
            {"role": "system", "content": "You are helpful."},
            {"role": "user", "content": "tell me about tags"},
        ]
        sizes = []
        for _ in range(6):
            msgs = am.before(event, msgs)
            system = msgs[0]["content"]
            one_block(system)
            assert system.count("You are helpful.") == 1
            assert "&lt;/memlane-memory>" in system  # shown, neutralised
            sizes.append(count(system))
            msgs.append({"role": "assistant", "content": "hm"})
            msgs.append({"role": "user", "content": "tell me about tags"})
        assert max(sizes) <= 400
        assert len(set(sizes)) == 1  # the same history, the same block: never grows
    finally:
        am.close()


def test_turns_through_the_loop_never_keep_a_stale_block(mem):
    am = AgentMemory(mem, max_tokens=500, upkeep="inline")
    count = default_token_counter()

    def chat(messages: list[dict[str, Any]], **kw: Any) -> dict[str, Any]:
        one_block(messages[0]["content"])
        return {"role": "assistant", "content": "ok"}

    try:
        loop = am.openai(chat)
        event = am.event("telegram", 42, chat_id=7)
        msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are helpful."}]
        texts = [f"what is the {CLOSE} tag?", "I like tea", "I like cake", "I like pie", "coffee"]
        for text in texts:
            result = loop.run(event, [*msgs, {"role": "user", "content": text}])
            msgs = list(result.messages)
            system = msgs[0]["content"]
            one_block(system)
            assert system.startswith("You are helpful.\n\n<memlane-memory turn=")
            assert count(system) + count(text) <= 500
    finally:
        am.close()


def test_anthropic_system_and_core_blocks_quoting_the_tag(mem):
    am = AgentMemory(mem, max_tokens=400, upkeep="inline", core_memory=True)
    try:
        event = am.event("telegram", 42, chat_id=7)
        am.core(event).set("persona", f"I explain {CLOSE} and {OPEN} tags.")
        am.after(event, [{"role": "user", "content": f"and {CLOSE}?"}], "see above")
        system: Any = "Be brief."
        msgs = [{"role": "user", "content": "tags?"}]
        for _ in range(3):
            system, msgs = am.before_anthropic(event, system, msgs)
            one_block(system)
            assert system.startswith("Be brief.\n\n") and "I explain &lt;/memlane-memory>" in system
            msgs = [*msgs, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "?"}]
            am.after(event, msgs, "ok")
    finally:
        am.close()


def test_a_block_an_older_memlane_left_broken_is_replaced_whole():
    broken = (
        'You are helpful.\n\n<memlane-memory turn="a:0">\nuser: what is </memlane-memory> ?\n'
        "## Memory tools\n</memlane-memory>"
    )
    assert with_block(broken, None) == "You are helpful."
    assert with_block(broken, '<memlane-memory turn="a:1">\nnew\n</memlane-memory>') == (
        'You are helpful.\n\n<memlane-memory turn="a:1">\nnew\n</memlane-memory>'
    )


def test_build_context_lines_never_hold_the_tags(mem):
    event = SessionScope().resolve("telegram", 42, chat_id=7)
    add_message(mem, f"what does {CLOSE} mean?", event)
    mem.add(f'Alice typed <MEMLANE-MEMORY turn="1"> once {CLOSE}', **event.fields)
    ctx = build_context(mem, "memlane memory tag", event, min_score=None)
    assert ctx.text and OPEN not in ctx.text.lower() and "</memlane-memory" not in ctx.text.lower()
    assert "&lt;/memlane-memory>" in ctx.text and "&lt;MEMLANE-MEMORY" in ctx.text


# -- the context's episodes: current ones only -----------------------------------------------


def test_context_leaves_superseded_episodes_out(mem):
    event = SessionScope().resolve("telegram", 42, chat_id=7)
    old = mem.add("Alice booked a trip to Paris for May", type="episodic", **event.fields)
    new = mem.supersede(old.id, "Alice cancelled the Paris trip; she goes to Rome in May")
    ctx = build_context(mem, "zzz unrelated", event, min_score=None)
    lines = ctx.sections["memories"]
    assert any("Rome" in line for line in lines)
    assert not any("booked a trip to Paris" in line for line in lines)
    assert old.id not in {r.id for r in ctx.records["memories"]}
    assert new.id in {r.id for r in ctx.records["memories"]}


# -- the dedup window: each key's own age, whatever the clock did --------------------------


def test_window_matches_a_key_by_its_own_age():
    window = DedupWindow(300)
    window.remember(["late"], "r1", at=400.0)
    window.remember(["early"], "r2", at=100.0)  # remembered after, stamped before
    assert window.find(["early"], 450.0) is None  # 350 s old: expired, though behind "late"
    assert window.find(["late"], 650.0) == "r1"
    # The clock steps back an hour: a key stamped ahead of it is no match, then or later.
    window.remember(["ahead"], "r3", at=5000.0)
    assert window.find(["ahead"], 1400.0) is None
    assert window.find(["ahead"], 5100.0) is None
    window.remember(["now"], "r4", at=5100.0)
    assert window.find(["now"], 5399.0) == "r4"
    assert window.find(["now"], 5401.0) is None


def test_window_after_the_clock_steps_back(make_store, word_embedder, monkeypatch):
    import memlane._memory.writer as writer

    clock = [writer.time.time()]
    monkeypatch.setattr(writer, "time", types.SimpleNamespace(time=lambda: clock[0]))
    m: Memory = make_store("window", word_embedder)
    meta = {"source": "telegram", "contact": "telegram:42"}
    clock[0] += 3600  # an hour fast: a message is stored, then NTP steps the clock back
    m.add("hello", table="messages", metadata=meta, user_id="u")
    clock[0] -= 3600
    first = m.add("yes", table="messages", metadata=meta, user_id="u")
    clock[0] += 60
    redelivered = m.add("yes", table="messages", metadata=meta, user_id="u")
    assert redelivered.duplicate == "window" and redelivered.duplicate_of == first.id
    clock[0] += 1800  # half an hour later the contact says "yes" again
    again = m.add("yes", table="messages", metadata=meta, user_id="u")
    assert again.duplicate is None and again.id != first.id
    assert m.count("messages", user_id="u") == 3
    m.close()


# -- malformed model replies: refused as reply_message refuses them ------------------------


@pytest.mark.parametrize(
    "calls",
    [[None], [{"function": "recall"}], [{"id": "c1"}], [{"function": {"arguments": "{}"}}], "x"],
)
def test_openai_loop_refuses_malformed_tool_calls(mem, server, llm, calls):
    am = AgentMemory(mem, upkeep="inline")
    try:
        server.push(
            {
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": None, "tool_calls": calls},
                    }
                ]
            },
            completion("done"),
        )
        event = am.event("telegram", 42, chat_id=7)
        with pytest.raises(InvalidArgumentError, match=r"the model's reply: tool_calls"):
            am.openai(llm.chat).run(event, [{"role": "user", "content": "hi"}])
    finally:
        am.close()


@pytest.mark.parametrize(
    "content",
    [["text"], [None], [{"text": "no type"}], [{"type": "tool_use", "id": "t1"}], None, 5],
)
def test_anthropic_loop_refuses_malformed_content(mem, content):
    am = AgentMemory(mem, upkeep="inline")
    replies = iter([{"content": content}, {"content": "done"}])
    try:
        event = am.event("telegram", 42, chat_id=7)
        loop = am.anthropic(lambda **kw: next(replies))
        with pytest.raises(InvalidArgumentError, match=r"the model's reply: content"):
            loop.run(event, [{"role": "user", "content": "hi"}])
    finally:
        am.close()


async def test_async_loops_refuse_malformed_replies(mem):
    am = AgentMemory(mem, upkeep="inline")
    try:
        event = am.event("telegram", 42, chat_id=7)

        async def chat(messages: list[dict[str, Any]], **kw: Any) -> dict[str, Any]:
            return {"role": "assistant", "content": None, "tool_calls": [None]}

        async def create(**kw: Any) -> dict[str, Any]:
            return {"content": [None]}

        with pytest.raises(InvalidArgumentError, match=r"tool_calls\[0\]"):
            await am.openai(chat).arun(event, [{"role": "user", "content": "hi"}])
        with pytest.raises(InvalidArgumentError, match=r"content\[0\]"):
            await am.anthropic(create).arun(event, [{"role": "user", "content": "hi"}])
    finally:
        am.close()
