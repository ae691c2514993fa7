"""Reflection with a scripted LLM: operations applied, bad ones rejected, errors lose nothing."""

from __future__ import annotations

import asyncio
import json

import pytest

from memlane.agent.llm import OpenAIChat
from memlane.agent.parsing import ParseError
from memlane.agent.reflection import areflect, parse_operations, reflect

SCOPE = {"user_id": "alice"}
TALK = [
    {"role": "user", "content": "I moved from Berlin to Lisbon last month."},
    {"role": "assistant", "content": "Nice! How is Lisbon?"},
    {"role": "user", "content": "Great. Also, forget that I like jazz, I don't anymore."},
]


def _stored(mem):
    a = mem.add("Alice lives in Berlin", **SCOPE)
    b = mem.add("Alice likes jazz music", **SCOPE)
    c = mem.add("Bob lives in Berlin", user_id="bob")
    return a, b, c


def _numbers(request):
    """The number the prompt gave each memory text."""
    listed = request["messages"][1]["content"].split("\n\nConversation:")[0]
    out = {}
    for line in listed.splitlines()[1:]:
        n, _, text = line.partition(". ")
        out[text] = int(n)
    return out


def test_applies_remember_update_forget(mem, server, llm):
    a, b, c = _stored(mem)

    def answer(body):
        num = _numbers(body)
        assert "Bob lives in Berlin" not in num  # another scope is never shown
        ops = [
            {
                "op": "update",
                "memory": num["Alice lives in Berlin"],
                "content": "Alice lives in Lisbon",
            },
            {"op": "forget", "memory": num["Alice likes jazz music"]},
            {"op": "remember", "content": "Alice moved to Lisbon last month", "type": "episodic"},
            {"op": "remember", "content": "Alice lives in Berlin"},  # now a fresh fact
            {"op": "update", "memory": 17, "content": "invented"},
            {"op": "forget", "memory": "abc"},
            {"op": "shout", "content": "x"},
            {"op": "remember", "content": ""},
            "not an object",
        ]
        return (
            "Sure, here are the operations:\n```json\n"
            + json.dumps({"operations": ops})
            + "\n```\nDone."
        )

    server.push(answer)
    report = reflect(mem, llm, TALK, scope=SCOPE)
    assert report.ok, report.error
    # Superseded: the new version is current, the old one closed and in the history.
    (new,) = report.updated
    assert new.text == "Alice lives in Lisbon" and not mem.get(a.id).current
    assert [(v.record.text, v.by) for v in mem.history(new.id)][-1] == (new.text, "reflection")
    assert report.forgotten == [b.id] and b.id not in mem
    assert [r.text for r in report.added] == [
        "Alice moved to Lisbon last month",
        "Alice lives in Berlin",
    ]
    assert len(report.rejected) == 5
    reasons = " ".join(why for _, why in report.rejected)
    assert "not a listed memory" in reasons and "unknown op" in reasons
    assert c.id in mem and mem.get(c.id).text == "Bob lives in Berlin"
    texts = sorted(r.text for r in mem.list(filters={"valid_to": None}, **SCOPE))
    assert texts == [
        "Alice lives in Berlin",
        "Alice lives in Lisbon",
        "Alice moved to Lisbon last month",
    ]
    # The model saw no ids.
    prompt = server.requests[0]["messages"][1]["content"]
    assert a.id not in prompt and b.id not in prompt


def test_update_replaces_instead_of_duplicating(mem, server, llm):
    a, _, _ = _stored(mem)
    server.push(
        lambda body: json.dumps(
            [
                {
                    "op": "update",
                    "memory": _numbers(body)["Alice lives in Berlin"],
                    "content": "Alice lives in Porto",
                }
            ]
        )
    )
    n = mem.count(**SCOPE)
    report = reflect(mem, llm, ["user: I live in Porto now"], scope=SCOPE)
    (new,) = report.updated
    assert mem.get(a.id).valid_to is not None
    # One current version: the count grows by the closed one, searches see the new one.
    assert mem.count(**SCOPE) == n + 1
    assert mem.count(filters={"valid_to": None}, **SCOPE) == n
    assert [h.record.id for h in mem.search("Porto", 1, **SCOPE)] == [new.id]


def test_two_operations_on_one_memory(mem, server, llm):
    _stored(mem)
    server.push(
        json.dumps(
            {
                "operations": [
                    {"op": "update", "memory": 1, "content": "x"},
                    {"op": "forget", "memory": 1},
                ]
            }
        )
    )
    report = reflect(mem, llm, TALK, scope=SCOPE)
    assert len(report.updated) == 1 and report.forgotten == []
    assert "already changed" in report.rejected[0][1]


@pytest.mark.parametrize(
    "reply",
    ["No changes needed.", '{"operations": "none"}', '{"ops": [', (503, "down"), (401, "no key")],
)
def test_errors_change_nothing(mem, server, llm, reply):
    _stored(mem)
    before = {r.id: r.text for r in mem.list(limit=100)}
    server.push(reply)
    report = reflect(mem, llm, TALK, scope=SCOPE)
    assert not report.ok and report.error
    assert {r.id: r.text for r in mem.list(limit=100)} == before


def test_empty_store_and_empty_operations(mem, server, llm):
    server.push('{"operations": []}')
    report = reflect(mem, llm, TALK, scope=SCOPE)
    assert report.ok and not report.added and report.shown == []
    assert "(none)" in server.requests[0]["messages"][1]["content"]


def test_parse_operations_aliases():
    ops, rejected = parse_operations(
        '[{"action": "ADD", "content": "a", "importance": 3},'
        ' {"operation": "delete", "memory": "2"}]',
        2,
    )
    assert [(o.op, o.index) for o in ops] == [("remember", None), ("forget", 1)]
    assert ops[0].importance == 1.0 and rejected == []
    with pytest.raises(ParseError):
        parse_operations("nothing", 0)


def test_areflect(mem, server):
    a, _, _ = _stored(mem)
    server.push(
        lambda body: json.dumps(
            [
                {
                    "op": "update",
                    "memory": _numbers(body)["Alice lives in Berlin"],
                    "content": "Alice lives in Rome",
                }
            ]
        ),
        (500, "down"),
    )

    async def go():
        llm = OpenAIChat("scripted", base_url=server.base_url, max_retries=0)
        try:
            return await areflect(mem, llm, TALK, scope=SCOPE), await areflect(
                mem, llm, TALK, scope=SCOPE
            )
        finally:
            await llm.aclose()

    ok, failed = asyncio.run(go())
    assert [r.text for r in ok.updated] == ["Alice lives in Rome"] and not mem.get(a.id).current
    assert not failed.ok and "HTTP 500" in (failed.error or "")
