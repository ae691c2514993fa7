"""build_context's arguments: a scope that is neither an EventScope nor a dict of scope
fields (None above all, which would read every scope's memories), a limit that is not an
int >= 0 and a token counter's answer that is not one are InvalidArgumentErrors naming
them, and nothing is read or recorded. On both backends."""

from __future__ import annotations

import math

import numpy as np
import pytest

from memlane import InvalidArgumentError, Memory
from memlane.agent.context import build_context, char_token_count


@pytest.fixture
def stocked(mem: Memory) -> Memory:
    mem.add("alice's diagnosis: tea allergy", agent_id="alice")
    mem.add("bob's tea order", agent_id="bob")
    return mem


def _accessed(mem: Memory) -> int:
    return sum(r.access_count for r in mem.list())


@pytest.mark.parametrize("scope", [None, "alice", 3, ["agent_id", "alice"]])
def test_a_scope_that_is_not_one_is_refused(stocked: Memory, scope: object) -> None:
    with pytest.raises(InvalidArgumentError, match="scope must be an EventScope or a dict"):
        build_context(stocked, "tea?", scope, min_score=None)  # type: ignore[arg-type]
    assert _accessed(stocked) == 0


def test_a_scope_field_given_as_none_is_refused(stocked: Memory) -> None:
    # {"agent_id": request.agent_id} for a request without one narrowed nothing, and so
    # put bob's memories in alice's context.
    with pytest.raises(InvalidArgumentError, match=r"scope field\(s\) \['agent_id'\] are None"):
        build_context(stocked, "tea?", {"agent_id": None}, min_score=None)
    assert _accessed(stocked) == 0


def test_scopes_that_are_read(stocked: Memory) -> None:
    alice = build_context(stocked, "tea?", {"agent_id": "alice"}, min_score=None)
    assert {r.agent_id for r in alice.records["memories"]} == {"alice"}
    # {}: no field narrows it (the store's default_scope, none here).
    every = build_context(stocked, "tea?", {}, min_score=None)
    assert {r.agent_id for r in every.records["memories"]} == {"alice", "bob"}


@pytest.mark.parametrize(
    "option", ["inject_limit", "history_limit", "knowledge_limit", "daily_limit"]
)
@pytest.mark.parametrize("value", ["5", None, math.nan, -3, 2.0, True])
def test_a_limit_that_is_not_a_count_is_refused(
    stocked: Memory, option: str, value: object
) -> None:
    with pytest.raises(InvalidArgumentError, match=f"{option} must be an int >= 0"):
        build_context(stocked, "tea?", {"agent_id": "alice"}, **{option: value})  # type: ignore[arg-type]
    assert _accessed(stocked) == 0


@pytest.mark.parametrize("option", ["inject_limit", "history_limit", "knowledge_limit"])
def test_a_limit_of_zero_turns_its_section_off(stocked: Memory, option: str) -> None:
    ctx = build_context(stocked, "tea?", {"agent_id": "alice"}, min_score=None, **{option: 0})
    assert ctx.sections["memories"] == (
        [] if option == "inject_limit" else ["- alice's diagnosis: tea allergy"]
    )


@pytest.mark.parametrize("answer", [None, "3", math.nan, -1, 2.5, True])
def test_a_token_counters_bad_answer_is_refused(stocked: Memory, answer: object) -> None:
    with pytest.raises(InvalidArgumentError, match="count_tokens must return an int >= 0"):
        build_context(
            stocked,
            "tea?",
            {"agent_id": "alice"},
            count_tokens=lambda text: answer,  # type: ignore[arg-type,return-value]
        )
    with pytest.raises(InvalidArgumentError, match="count_tokens must be a callable"):
        build_context(stocked, "tea?", {"agent_id": "alice"}, count_tokens=3)  # type: ignore[arg-type]
    assert _accessed(stocked) == 0


def test_a_token_counter_may_answer_a_numpy_int(stocked: Memory) -> None:
    plain = build_context(stocked, "tea?", {}, 500, count_tokens=char_token_count, min_score=None)
    numpy_counted = build_context(
        stocked,
        "tea?",
        {},
        500,
        count_tokens=lambda text: np.int64(char_token_count(text)),  # type: ignore[arg-type,return-value]
        min_score=None,
    )
    assert numpy_counted.text == plain.text
    assert numpy_counted.tokens == plain.tokens
    assert all(type(n) is int for n in numpy_counted.tokens.values())


def test_each_text_is_counted_once(stocked: Memory) -> None:
    # A section's lines were counted for its demand, then again as it was filled.
    for i in range(30):
        stocked.add(f"tea note {i}: " + "green and black " * (i % 7), agent_id="alice")
    seen: list[str] = []

    def counting(text: str) -> int:
        seen.append(text)
        return char_token_count(text)

    ctx = build_context(
        stocked, "tea?", {"agent_id": "alice"}, 120, count_tokens=counting, min_score=None
    )
    assert ctx.sections["memories"]
    repeated = {t for t in seen if seen.count(t) > 1}
    assert not repeated, repeated
    # The counts kept are the counter's: the same context with every text counted anew.
    again = build_context(
        stocked,
        "tea?",
        {"agent_id": "alice"},
        120,
        count_tokens=char_token_count,
        min_score=None,
    )
    assert (again.sections, again.tokens) == (ctx.sections, ctx.tokens)
