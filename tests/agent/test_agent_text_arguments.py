"""Message contents, system prompts, conversations, scopes and folders that are no text
the agent can use: a memlane error naming the problem and nothing stored, never a raw
RecursionError (a list nested thousands deep), TypeError, AttributeError, ValueError or
UnicodeError."""

from __future__ import annotations

from typing import Any

import pytest

from memlane import AgentMemory, InvalidArgumentError, Memory
from memlane.agent import MESSAGES, SessionScope
from memlane.agent.daily import export_daily
from memlane.agent.reflection import reflect


def _deep(n: int = 5000) -> list[Any]:
    out: list[Any] = []
    inner = out
    for _ in range(n):
        inner.append([])
        inner = inner[0]
    return out


DEEP = _deep()


class Counting:
    """A model that answers no operation, counting its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def complete(self, messages: Any) -> str:
        self.calls += 1
        return '{"operations": []}'


@pytest.fixture
def agent(word_embedder):
    mem = Memory(None, word_embedder)
    am = AgentMemory(mem, SessionScope(), Counting())
    yield am
    am.close()
    mem.close()


@pytest.mark.parametrize(
    ("user", "reply"),
    [
        ([{"type": "text", "text": DEEP}], "ok"),
        ([{"type": "text", "text": b"bytes"}], "ok"),
        ({"a dict": "of no block"}, "ok"),
        ("hello", {"role": "assistant", "content": [{"type": "text", "text": DEEP}]}),
        ("hello", {"role": "assistant", "content": object()}),
    ],
    ids=["deep text", "bytes text", "dict content", "deep reply", "object reply"],
)
def test_a_turn_whose_text_is_no_text_is_refused_and_nothing_stored(agent, user, reply):
    ev = agent.event("telegram", 1, chat_id=1)
    with pytest.raises(InvalidArgumentError, match="must be a str"):
        agent.after(ev, [{"role": "user", "content": user}], reply)
    assert agent.memory.count(MESSAGES) == 0
    if not isinstance(reply, str):
        return
    with pytest.raises(InvalidArgumentError, match=r"messages\[0\]: .*must be a str"):
        agent.before(ev, [{"role": "user", "content": user}])


def test_text_blocks_and_numbers_are_still_read(agent):
    ev = agent.event("telegram", 1, chat_id=1)
    blocks = [{"type": "text", "text": "I live in Lisbon"}, {"type": "image", "data": DEEP}]
    report = agent.after(ev, [{"role": "user", "content": blocks}], {"content": 42})
    assert [r.text for r in report.stored] == ["I live in Lisbon", "42"]


@pytest.mark.parametrize(
    "system", [5, object(), [{"type": "text", "text": DEEP}]], ids=["int", "object", "deep"]
)
def test_a_system_prompt_that_is_no_text_is_refused(agent, system):
    ev = agent.event("telegram", 1, chat_id=1)
    with pytest.raises(InvalidArgumentError, match="must be a str"):
        agent.before_anthropic(ev, system, [{"role": "user", "content": "hello"}])


@pytest.mark.parametrize(
    ("conversation", "scope", "problem"),
    [
        ([DEEP], None, r"conversation\[0\] must be a str or a message"),
        ([{"role": "user", "content": [{"type": "text", "text": DEEP}]}], None, "must be a str"),
        ([{"role": 5, "content": "hi"}], None, r"conversation\[0\] .* str role"),
        ("one string", None, "conversation must be a list"),
        (["I live in Lisbon"], "alice", "scope must be a mapping"),
    ],
)
def test_reflect_refuses_what_is_no_conversation_before_the_model(
    word_embedder, conversation, scope, problem
):
    model = Counting()
    with Memory(None, word_embedder) as mem:
        with pytest.raises(InvalidArgumentError, match=problem):
            reflect(mem, model, conversation, scope=scope)
        assert model.calls == 0 and mem.count() == 0


@pytest.mark.parametrize("folder", ["\ud800", "a\x00b", 5], ids=["surrogate", "NUL", "int"])
def test_daily_export_refuses_a_folder_no_disk_can_name(agent, tmp_path, folder, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ev = agent.event("telegram", 1, chat_id=1)
    with pytest.raises(InvalidArgumentError, match="dir "):
        export_daily(agent.memory, folder, ev)
    assert list(tmp_path.iterdir()) == []
