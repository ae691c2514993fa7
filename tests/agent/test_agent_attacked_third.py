"""What an attack on the agent's upkeep found: a contact whose display name or id was
longer than a job record held (every reflection of the room failed, for good), message
contents stored as nothing while the turn said all was well, and a kept reflection
answer applied under the categories of whoever resumed it. Each test fails on the code
before its fix."""

from __future__ import annotations

import json
from typing import Any

import pytest

from conftest import WordHashEmbedder
from memlane import AgentMemory, InvalidArgumentError, Memory
from memlane.agent import Reflection, SessionScope
from memlane.agent.reflection import Extraction, Resume, reflect, reflect_planned
from memlane.agent.upkeep.jobs import Job
from memlane.scoping import MAX_PLATFORM_TEXT
from upkeep_scripts import QUIET


class Remembers:
    """Remembers one fact; decides nothing in a fact check."""

    def complete(self, messages: Any) -> str:
        if "New facts:" in messages[-1]["content"]:
            return json.dumps({"decisions": []})
        return json.dumps({"operations": [{"op": "remember", "content": "The user likes tea"}]})


def turn(am: AgentMemory, event: Any, text: str) -> Any:
    return am.after(event, am.before(event, [{"role": "user", "content": text}]), "ok")


@pytest.mark.parametrize(
    ("name", "contact"),
    [("B" * MAX_PLATFORM_TEXT, 42), ("Bob", "c" * MAX_PLATFORM_TEXT)],
    ids=["long name", "long contact id"],
)
def test_a_long_name_or_contact_id_is_reflected(tmp_path: Any, name: str, contact: Any) -> None:
    mem = Memory(tmp_path / "store", WordHashEmbedder())
    am = AgentMemory(mem, SessionScope(), Remembers(), reflection=Reflection(every=2), **QUIET)
    event = am.event("telegram", contact, 7, name=name)
    turn(am, event, "I like tea")
    turn(am, event, "really, tea")
    assert am.drain(60)
    report = turn(am, event, "a third turn")
    assert am.drain(60)
    assert [f for done in report.upkeep for f in done.report.failures] == []
    assert [r.text for r in mem.list("memories")] == ["The user likes tea"]
    assert not list(mem.jobs.items())
    am.close()
    mem.close()


def test_a_name_or_id_longer_than_a_job_holds_is_refused_at_the_event() -> None:
    scope = SessionScope()
    too_long = MAX_PLATFORM_TEXT + 1
    with pytest.raises(InvalidArgumentError, match=f"name is {too_long} characters"):
        scope.resolve("telegram", 42, 7, name="B" * too_long)
    for args in (("telegram", "c" * too_long, 7), ("telegram", 42, "r" * too_long)):
        with pytest.raises(InvalidArgumentError, match=f"is {too_long} characters"):
            scope.resolve(*args)


@pytest.mark.parametrize(
    "content",
    [b"I am allergic to peanuts", [["I am allergic to peanuts"]], [True], [object()]],
    ids=["bytes", "nested list", "bool block", "object block"],
)
def test_content_the_agent_cannot_read_is_refused_not_dropped(tmp_path: Any, content: Any) -> None:
    with Memory(tmp_path / "store", WordHashEmbedder()) as mem:
        am = AgentMemory(mem, SessionScope(), None, upkeep="inline", **QUIET)
        event = am.event("telegram", 1, 7)
        with pytest.raises(InvalidArgumentError, match="content"):
            am.before(event, [{"role": "user", "content": content}])
        with pytest.raises(InvalidArgumentError, match="content"):
            am.after(event, [{"role": "user", "content": content}], "Noted.")
        with pytest.raises(InvalidArgumentError, match="system prompt"):
            am.before_anthropic(event, b"You are helpful", [{"role": "user", "content": "hi"}])
        assert mem.count(None) == 0
        am.close()


def test_responses_api_text_blocks_and_numbers_in_a_list_are_text(tmp_path: Any) -> None:
    with Memory(tmp_path / "store", WordHashEmbedder()) as mem:
        am = AgentMemory(mem, SessionScope(), None, upkeep="inline", **QUIET)
        event = am.event("telegram", 1, 7)
        content = [{"type": "input_text", "text": "I am allergic to peanuts"}, 42]
        am.after(event, [{"role": "user", "content": content}], "Noted.")
        texts = [r.text for r in mem.list("messages", order="asc", **event.history)]
        assert texts == ["I am allergic to peanuts\n42", "Noted."]
        am.close()


def test_a_kept_answer_is_applied_under_the_categories_it_was_asked_under() -> None:
    mem = Memory(None, WordHashEmbedder())
    raw = json.dumps(
        {"operations": [{"op": "remember", "content": "Tea daily", "category": "habit"}]}
    )
    kept: list[dict[str, Any]] = []

    class Answers:
        def complete(self, messages: Any) -> str:
            return raw

    def crash(plan: dict[str, Any]) -> None:
        kept.append(plan)
        raise KeyboardInterrupt  # the process dies once the answer is kept

    with pytest.raises(KeyboardInterrupt):
        reflect(
            mem,
            Answers(),
            ["user: I drink tea every day"],
            scope={"user_id": "u"},
            extraction=Extraction(categories=("habit",)),
            resume=Resume("op", save=crash),
        )
    # Through the job record, as a resuming process reads it.
    job = Job.loads(json.dumps({**json.loads(_a_job()), "plan": kept[0]}))
    assert job.plan is not None and job.plan["categories"] == ["habit"]
    report = reflect_planned(
        mem,
        job.plan,
        scope={"user_id": "u"},
        resume=Resume("op"),
        extraction=Extraction(categories=("preference",)),  # the resumer's own
    )
    assert [r.text for r in report.added] == ["Tea daily"] and not report.rejected
    mem.close()


def _a_job() -> str:
    """A recorded reflection job's JSON, as an agent writes it."""
    event = SessionScope().resolve("telegram", 42, 7)
    return Job("reflection", event, 1.7e9, owner="agent-owner").dumps()
