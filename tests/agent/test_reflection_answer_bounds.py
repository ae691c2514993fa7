"""A reflection answer of the wrong shape or far past its budget is refused whole (an
error: the reflection is due again), never applied in part or taken for done."""

from __future__ import annotations

import json
from typing import Any

import pytest

from conftest import WordHashEmbedder
from memlane import Memory
from memlane.agent.parsing import ParseError, extract_json
from memlane.agent.reflection import CHARS_PER_TOKEN, MAX_ANSWER_CHARS, parse_operations, reflect
from upkeep_scripts import agent, turn

FACT = {"op": "remember", "content": "Alice is allergic to peanuts"}


class _Answers:
    """Answers each reflection with the next of ``answers``; keeps every new fact."""

    def __init__(self, *answers: str) -> None:
        self.answers = list(answers)

    def complete(self, messages: Any) -> str:
        if "New facts:" in messages[-1]["content"]:
            return json.dumps({"decisions": []})
        return self.answers.pop(0) if self.answers else json.dumps({"operations": []})


@pytest.mark.parametrize(
    "answer",
    [
        # An object where the list belongs: its own list ("tags") was taken for the
        # operations, each rejected, and the answer reported applied.
        {"operations": {**FACT, "tags": ["health"]}},
        {"ops": {**FACT, "tags": ["health"]}},
        {"memories": [FACT]},
    ],
)
def test_an_answer_of_the_wrong_shape_is_a_parse_error(answer: Any) -> None:
    with pytest.raises(ParseError, match="list of operations"):
        parse_operations(json.dumps(answer), 0)


@pytest.mark.parametrize(
    "answer",
    [
        json.dumps([FACT]),
        f"Here you are:\n```json\n{json.dumps([FACT])}\n```",
        f"See [1]: {json.dumps({'operations': [FACT]})}",
    ],
)
def test_a_list_of_operations_is_read_bare_or_in_its_object(answer: str) -> None:
    ops, rejected = parse_operations(answer, 0)
    assert [op.content for op in ops] == [FACT["content"]] and rejected == []


def test_either_kind_of_value_is_the_first_one_whole() -> None:
    assert extract_json('x {"a": [1]} [2]', object) == {"a": [1]}
    assert extract_json('x [{"a": 1}] {"b": 2}', object) == [{"a": 1}]
    with pytest.raises(ParseError, match="object or array"):
        extract_json("no value here", object)


def test_a_wrong_shaped_answer_is_asked_again_at_the_next_turn(mem: Memory) -> None:
    bad = json.dumps({"operations": {**FACT, "tags": ["health"]}})
    results: list[Any] = []
    am = agent(mem, _Answers(bad, json.dumps({"operations": [FACT]})), on_upkeep=results.append)
    alice = am.event("telegram", 42, 7)
    for text in ("I am allergic to peanuts", "keep that in mind", "thanks"):
        turn(am, alice, text)
        assert am.drain(60)
    am.close()
    first = next(r for r in results if r.kind == "reflection")
    assert first.report.failures[0].trigger == "reflection"
    assert [r.text for r in mem.list("memories")] == [FACT["content"]]


def test_an_answer_past_its_budget_is_refused_whole(mem: Memory) -> None:
    # A 1 MB remember (a server that ignored max_tokens) was stored and split into
    # hundreds of memories, each pending the fact check, ahead of every later fact.
    big = " ".join(f"Sentence {i} of an enormous answer." for i in range(400))
    answer = json.dumps({"operations": [{"op": "remember", "content": big}]})
    assert 100 * CHARS_PER_TOKEN < len(answer) < MAX_ANSWER_CHARS
    report = reflect(mem, _Answers(answer), ["user: hi"], max_tokens=100)
    assert report.error is not None and "more than the 1600" in report.error
    assert mem.count("memories") == 0
    report = reflect(mem, _Answers(answer), ["user: hi"], max_tokens=len(answer) // 10)
    assert report.ok and [r.text for r in report.added] == [big]


def test_an_agents_answer_past_any_budget_is_asked_again(mem: Memory) -> None:
    big = "x " * MAX_ANSWER_CHARS
    flood = json.dumps({"operations": [{"op": "remember", "content": big}]})
    results: list[Any] = []
    am = agent(mem, _Answers(flood, json.dumps({"operations": [FACT]})), on_upkeep=results.append)
    alice = am.event("telegram", 42, 7)
    for text in ("I am allergic to peanuts", "keep that in mind", "thanks"):
        turn(am, alice, text)
        assert am.drain(60)
    am.close()
    first = next(r for r in results if r.kind == "reflection")
    assert "characters, more than" in first.report.failures[0].error
    assert [r.text for r in mem.list("memories")] == [FACT["content"]]


@pytest.fixture
def mem(make_store: Any) -> Any:
    m = make_store("bounds", WordHashEmbedder())
    yield m
    m.close()
