"""A full agent loop: user message -> context -> model reply (scripted server) -> tool calls
-> memories written -> the next turn, on another platform, recalls them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from chat_server import ScriptedChatServer
from memlane import Memory
from memlane.agent import MemoryTools, OpenAIChat, SessionScope, add_message, build_context

SCOPES = SessionScope(
    "per-peer", {"telegram:42": "alice", "whatsapp:+1555": "alice"}, agent_id="bot"
)


def tool_call(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": call_id,
                            "type": "function",
                            "function": {"name": name, "arguments": json.dumps(args)},
                        }
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ]
    }


def run_turn(mem, llm, source, contact, chat, text, max_steps=4):
    """What an agent does with one incoming message."""
    event = SCOPES.resolve(source, contact, chat)
    context = build_context(mem, text, event, 1000, min_score=None)
    tools = MemoryTools(mem, event.fields)
    add_message(mem, text, event, role="user")
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a helpful bot.\n\n" + context.text},
        {"role": "user", "content": text},
    ]
    for _ in range(max_steps):
        reply = llm.chat(messages, tools=tools.openai())
        messages.append(reply)
        calls = reply.get("tool_calls") or []
        if not calls:
            add_message(mem, reply["content"], event, role="assistant")
            return reply["content"], context
        for call in calls:
            result = tools.handle_tool_call(call["function"]["name"], call["function"]["arguments"])
            messages.append(
                {"role": "tool", "tool_call_id": call["id"], "content": json.dumps(result)}
            )
    raise AssertionError("the model never answered")


@pytest.fixture
def mem(word_embedder):
    m = Memory(None, word_embedder)
    yield m
    m.close()


def test_agent_loop(mem):
    seen: list[dict[str, Any]] = []

    def first_remember(body):
        seen.append(body)
        assert {t["function"]["name"] for t in body["tools"]} >= {"remember", "recall"}
        return tool_call(
            "c1",
            "remember",
            {"content": "Alice is allergic to peanuts", "importance": 0.95, "evergreen": True},
        )

    def then_confirm(body):
        tool_msg = body["messages"][-1]
        assert tool_msg["role"] == "tool" and json.loads(tool_msg["content"])["ok"]
        return "Got it, no peanuts for you."

    def second_recall(body):
        seen.append(body)
        system = body["messages"][0]["content"]
        # The context already carries the memory, across platforms (per-peer, linked).
        assert "Alice is allergic to peanuts" in system
        return tool_call("c2", "recall", {"query": "peanuts allergy", "limit": 3})

    def then_answer(body):
        result = json.loads(body["messages"][-1]["content"])
        assert result["memories"][0]["content"] == "Alice is allergic to peanuts"
        return "How about an apple? (no peanuts, as you asked)"

    def third_bad_then_fixed(body):
        return tool_call("c3", "remember", {"content": "Alice likes apples", "importance": "very"})

    def fix(body):
        result = json.loads(body["messages"][-1]["content"])
        assert result["error"]["type"] == "invalid_arguments"  # read by the model, not raised
        return tool_call("c4", "remember", {"content": "Alice likes apples", "importance": 0.6})

    with (
        ScriptedChatServer(
            [
                first_remember,
                then_confirm,
                second_recall,
                then_answer,
                third_bad_then_fixed,
                fix,
                "Noted!",
            ]
        ) as server,
        OpenAIChat("scripted", base_url=server.base_url, max_retries=0) as llm,
    ):
        reply, ctx1 = run_turn(mem, llm, "telegram", 42, 7, "Remember I'm allergic to peanuts")
        assert reply == "Got it, no peanuts for you."
        assert ctx1.sections["memories"] == []  # nothing known yet

        reply, ctx2 = run_turn(mem, llm, "whatsapp", "+1555", 9, "Suggest a snack for me")
        assert "apple" in reply
        assert any("peanuts" in line for line in ctx2.sections["memories"])

        reply, ctx3 = run_turn(mem, llm, "telegram", 42, 7, "I love apples by the way")
        assert reply == "Noted!"
        # The room's history holds the first turn's exchange.
        history = "\n".join(ctx3.sections["history"])
        assert "allergic to peanuts" in history and "no peanuts for you" in history
        assert server.script == type(server.script)()

    stored = {r.text: r for r in mem.list("memories", user_id="alice")}
    assert set(stored) == {"Alice is allergic to peanuts", "Alice likes apples"}
    assert stored["Alice is allergic to peanuts"].evergreen
    assert stored["Alice is allergic to peanuts"].access_count >= 1  # recalled
    assert stored["Alice likes apples"].importance == 0.6
    assert mem.count("messages", user_id="alice") == 6
    # Another person shares none of it.
    bob = SCOPES.resolve("telegram", 7, 7)
    assert build_context(mem, "peanuts", bob, 1000, min_score=None).sections["memories"] == []
