"""MemoryTools: schemas in both formats and every tool through the dispatcher."""

from __future__ import annotations

import json

import pytest

from memlane import Memory
from memlane.agent import MemoryTools, SessionScope, anthropic_tools, openai_tools
from memlane.agent.memory_tools import TOOL_SCHEMAS


@pytest.fixture
def mem(word_embedder):
    m = Memory(None, word_embedder)
    yield m
    m.close()


def test_schemas_in_both_formats():
    oa = openai_tools()
    an = anthropic_tools()
    assert [t["function"]["name"] for t in oa] == list(TOOL_SCHEMAS)
    assert [t["name"] for t in an] == list(TOOL_SCHEMAS)
    assert {"remember", "recall", "forget", "search_knowledge"} == set(TOOL_SCHEMAS)
    for o, a in zip(oa, an, strict=True):
        assert o["type"] == "function"
        assert o["function"]["parameters"] == a["input_schema"]
        assert a["input_schema"]["type"] == "object"
        json.dumps(o), json.dumps(a)
    remember = an[0]["input_schema"]
    assert remember["required"] == ["content"]
    assert set(remember["properties"]) == {"content", "type", "importance", "evergreen", "metadata"}
    # Copies: mutating one does not change the next.
    oa[0]["function"]["parameters"]["required"].append("x")
    assert openai_tools()[0]["function"]["parameters"]["required"] == ["content"]


def test_remember_recall_forget(mem):
    tools = MemoryTools(mem, scope={"user_id": "alice"})
    r = tools.handle_tool_call(
        "remember",
        {"content": "Alice drinks oat milk coffee", "importance": 0.9, "metadata": {"k": 1}},
    )
    assert r["ok"] and r["stored"]
    rec = mem.get(r["id"])
    assert rec.user_id == "alice" and rec.importance == 0.9 and rec.metadata == {"k": 1}
    # A JSON string works too; a duplicate is reported, not stored twice.
    r2 = tools.handle_tool_call("remember", json.dumps({"content": "Alice drinks oat milk coffee"}))
    assert r2["ok"] and not r2["stored"] and r2["duplicate_of"] == r["id"]
    tools.handle_tool_call("remember", {"content": "Alice climbs on weekends", "type": "episodic"})
    assert mem.count(user_id="alice") == 2

    got = tools.handle_tool_call("recall", {"query": "coffee milk", "limit": 1})
    assert got["ok"] and [m["id"] for m in got["memories"]] == [r["id"]]
    json.dumps(got)
    assert mem.get(r["id"]).access_count == 1  # recall tracks access
    only_episodic = tools.handle_tool_call("recall", {"query": "coffee", "type": "episodic"})
    assert {m["type"] for m in only_episodic["memories"]} == {"episodic"}

    # Another user's tools see nothing and cannot delete alice's memories.
    bob = MemoryTools(mem, scope={"user_id": "bob"})
    assert bob.handle_tool_call("recall", {"query": "coffee"})["memories"] == []
    denied = bob.handle_tool_call("forget", {"id": r["id"]})
    assert denied["error"]["type"] == "not_found"
    assert r["id"] in mem

    gone = tools.handle_tool_call("forget", {"id": r["id"]})
    assert gone["ok"] and r["id"] not in mem
    again = tools.handle_tool_call("forget", {"id": r["id"]})
    assert again == {
        "ok": False,
        "error": {"type": "not_found", "message": again["error"]["message"]},
    }


def test_search_knowledge(mem):
    mem.ingest_text("The office wifi password is hunter2.", source="inline:wifi", shared=True)
    tools = MemoryTools(mem, scope={"user_id": "alice"})
    out = tools.handle_tool_call("search_knowledge", {"query": "wifi password", "limit": 2})
    assert out["ok"] and "hunter2" in out["fragments"][0]["content"]
    assert out["fragments"][0]["source"] == "inline:wifi"


@pytest.mark.parametrize(
    ("name", "args", "kind"),
    [
        ("dance", {}, "unknown_tool"),
        ("remember", "{not json", "invalid_arguments"),
        ("remember", "[1, 2]", "invalid_arguments"),
        ("remember", {}, "invalid_arguments"),
        ("remember", {"content": "   "}, "invalid_arguments"),
        ("remember", {"content": "x", "importance": 2}, "invalid_arguments"),
        ("remember", {"content": "x", "importance": "high"}, "invalid_arguments"),
        ("remember", {"content": "x", "type": "gossip"}, "invalid_arguments"),
        ("remember", {"content": "x", "evergreen": "yes"}, "invalid_arguments"),
        ("remember", {"content": "x", "colour": "red"}, "invalid_arguments"),
        ("remember", {"content": 5}, "invalid_arguments"),
        ("recall", {"query": "x", "limit": 0}, "invalid_arguments"),
        ("recall", {"query": "x", "limit": True}, "invalid_arguments"),
        ("recall", {"query": "x", "limit": 2.5}, "invalid_arguments"),
        ("forget", {"id": "nope"}, "not_found"),
        ("forget", {}, "invalid_arguments"),
        ("search_knowledge", {"query": ""}, "invalid_arguments"),
        # Too long for Python to write in decimal (an internal_error before).
        ("remember", {"content": "x", "importance": 10**5000}, "invalid_arguments"),
        ("recall", {"query": "x", "limit": -(10**5000)}, "invalid_arguments"),
        ("recall", {"query": "x", "limit": 10**400}, "invalid_arguments"),
    ],
)
def test_bad_calls_give_structured_errors(mem, name, args, kind):
    out = MemoryTools(mem).handle_tool_call(name, args)
    assert out["ok"] is False and out["error"]["type"] == kind, out
    assert 0 < len(out["error"]["message"]) < 300
    json.dumps(out)
    assert len(mem) == 0


def test_integral_float_limit_and_nulls_accepted(mem):
    tools = MemoryTools(mem)
    assert tools.handle_tool_call("remember", {"content": "tea", "type": None})["ok"]
    out = tools.handle_tool_call("recall", {"query": "tea", "limit": 3.0})
    assert out["ok"] and len(out["memories"]) == 1


def test_store_errors_do_not_escape(mem):
    tools = MemoryTools(mem)
    mem.close()
    out = tools.handle_tool_call("recall", {"query": "tea"})
    assert out["ok"] is False and out["error"]["type"] in {"store_error", "internal_error"}


def test_tools_bound_to_a_session_scope(mem):
    scope = SessionScope("per-peer", {"telegram:1": "alice", "whatsapp:+1": "alice"})
    on_tg = MemoryTools(mem, scope=scope("telegram", 1, chat_id=10))
    on_wa = MemoryTools(mem, scope=scope("whatsapp", "+1"))
    on_tg.handle_tool_call("remember", {"content": "Alice's cat is called Miso"})
    assert on_wa.handle_tool_call("recall", {"query": "cat name"})["memories"]
