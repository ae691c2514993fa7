"""Hostile model answers: every parser of LLM output gives a value or a ParseError (a
failure in the report for reflect, consolidate and the agent's triggers), does work
linear in the answer's length, and loses nothing stored."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memlane import AgentMemory, MemlaneError, Memory
from memlane.agent import (
    DAILY,
    MESSAGES,
    Compaction,
    Consolidation,
    DailyLog,
    FlushReminder,
    Limits,
    Profiles,
    Reflection,
    SessionScope,
)
from memlane.agent.consolidation import (
    SHORT_TERM,
    aconsolidate,
    add_short_term,
    consolidate,
    parse_summary,
)
from memlane.agent.parsing import MAX_DEPTH, ParseError, extract_json
from memlane.agent.reflection import areflect, parse_operations, reflect
from memlane.agent.upkeep.triggers import summarise_steps

SCOPE = {"user_id": "alice"}
TALK = [{"role": "user", "content": "I moved from Berlin to Lisbon."}]
OPS = {"operations": [{"op": "remember", "content": "Alice lives in Lisbon"}]}
SUMMARY = {"summary": "Alice looked at hotels.", "facts": ["Alice travels"], "confidence": 0.8}

# Answers no parser can use: each must give a ParseError, never another exception.
HOSTILE: list[Any] = [
    None,
    42,
    b'{"operations": []}',
    {"operations": []},
    "",
    "   \n",
    "no json here",
    "[" * 5000,
    "{" * 5000,
    '{"a":' * 5000,
    '{"operations": ' * 5000,
    "]" * 5000 + "}" * 5000,
    '"' * 5000,
    "\\" * 5000,
    "x" * 1_000_000,
    '{"operations": [' * 40,  # cut off, as by max_tokens
    "```json\n" + "[" * 3000 + "\n```",
]


class Scripted:
    """An LLM whose answer is whatever the test gives it."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.calls = 0

    def complete(self, messages: Any) -> Any:
        self.calls += 1
        return self.answer

    async def acomplete(self, messages: Any) -> Any:
        self.calls += 1
        return self.answer


@pytest.fixture
def store(word_embedder):
    with Memory(None, word_embedder) as m:
        yield m


def _short_term(mem: Memory, n: int = 3) -> list[str]:
    return [add_short_term(mem, f"step {i}: hotels", "a1", scope=SCOPE).id for i in range(n)]


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


# -- the reproducers ------------------------------------------------------------------


@pytest.mark.parametrize("answer", HOSTILE, ids=lambda a: repr(a)[:30])
def test_hostile_answers_give_a_parse_error_with_the_answer(answer):
    for parse in (
        lambda a: extract_json(a),
        lambda a: extract_json(a, list),
        lambda a: parse_operations(a, 2),
        parse_summary,
    ):
        with pytest.raises(ParseError) as e:
            parse(answer)
        assert e.value.raw is answer
    assert issubclass(ParseError, MemlaneError) and issubclass(ParseError, ValueError)


@pytest.mark.parametrize("answer", HOSTILE, ids=lambda a: repr(a)[:30])
def test_reflect_reports_a_hostile_answer_and_changes_nothing(store, answer):
    kept = {
        store.add("Alice lives in Berlin", **SCOPE).id,
        store.add("Alice likes jazz", **SCOPE).id,
    }
    report = reflect(store, Scripted(answer), TALK, scope=SCOPE)
    assert not report.ok and (report.error or "").startswith("ParseError: ")
    assert report.raw == (answer if isinstance(answer, str) else None)
    assert {r.id for r in store.list(**SCOPE)} == kept
    assert report.added == report.updated == [] and report.forgotten == []


@pytest.mark.parametrize("answer", HOSTILE, ids=lambda a: repr(a)[:30])
def test_consolidate_reports_a_hostile_answer_and_loses_nothing(store, answer):
    entries = _short_term(store)
    report = consolidate(store, Scripted(answer), scope=SCOPE, force=True)
    assert report.status == "failed" and (report.error or "").startswith("ParseError: ")
    assert report.raw == (answer if isinstance(answer, str) else None)
    assert report.removed == [] and report.episodic is None
    assert [r.id for r in store.list(SHORT_TERM, order="asc", **SCOPE)] == entries
    assert store.count("memories", **SCOPE) == 0


def test_async_forms_report_a_none_answer(store):
    entries = _short_term(store)
    llm = Scripted(None)
    reflected = asyncio.run(areflect(store, llm, TALK, scope=SCOPE))
    consolidated = asyncio.run(aconsolidate(store, llm, scope=SCOPE, force=True))
    assert "NoneType" in (reflected.error or "") and reflected.error.startswith("ParseError")
    assert consolidated.status == "failed" and "NoneType" in (consolidated.error or "")
    assert store.count(SHORT_TERM, **SCOPE) == len(entries) and llm.calls == 2


def test_huge_integers_are_clamped_not_overflowed(store):
    huge = "1" + "0" * 400
    summary = parse_summary(f'{{"summary": "s", "confidence": {huge}}}')
    assert summary["confidence"] == 1.0
    assert parse_summary(f'{{"summary": "s", "confidence": -{huge}}}')["confidence"] == 0.0
    ops, rejected = parse_operations(
        f'[{{"op": "remember", "content": "c", "importance": {huge}}}]', 0
    )
    assert ops[0].importance == 1.0 and rejected == []
    # Past Python's limit on integer digits the number is not JSON json will read.
    with pytest.raises(ParseError):
        parse_summary('{"summary": "s", "confidence": 1' + "0" * 5000 + "}")


def test_nesting_is_bounded(store):
    deep: Any = {"ok": True}
    for _ in range(MAX_DEPTH - 1):
        deep = [deep]
    assert extract_json(json.dumps(deep), list) == deep
    assert extract_json(json.dumps([deep]) + ' then {"b": 1}') == {"ok": True}
    # Past the bound the outer levels are refused and the deepest MAX_DEPTH remain.
    too_deep = "[" * (MAX_DEPTH + 5) + "]" * (MAX_DEPTH + 5)
    assert _depth(extract_json(too_deep, list)) == MAX_DEPTH
    with pytest.raises(ParseError, match=f"deeper than {MAX_DEPTH}"):
        extract_json("[" * 100_000, list)
    # An answer too deep for reflection is reported, not raised (within the length an
    # answer may have: a longer one is refused unread).
    report = reflect(store, Scripted('{"operations": ' + "[" * 50_000), TALK, scope=SCOPE)
    assert report.error and "deeper than" in report.error and store.count() == 0


def _decode_work(monkeypatch: pytest.MonkeyPatch, budget: int) -> list[int]:
    """The characters each json decode may read (its text from the start index), failing
    the test as soon as their sum passes ``budget``.

    json's errors also count the lines before the failure, so a decode that fails
    costs as much as the text it was given, not only what it read.
    """
    work: list[int] = []
    total = 0
    real = json.JSONDecoder.raw_decode

    def measured(self: json.JSONDecoder, s: str, idx: int = 0) -> tuple[Any, int]:
        nonlocal total
        work.append(len(s) - idx)
        total += work[-1]
        if total > budget:
            raise AssertionError(f"{len(work)} decodes over {total} characters: not linear")
        return real(self, s, idx)

    monkeypatch.setattr(json.JSONDecoder, "raw_decode", measured)
    return work


LARGE = 1_350_000


def test_a_large_answer_is_parsed_in_linear_work(store, monkeypatch):
    # Every "{" sits in a string that runs to the end of the text when read from that
    # "{": decoding from each in turn took minutes.
    answer = '{"a": "{' * (LARGE // 8) + "\nThe answer:\n" + json.dumps(OPS)
    work = _decode_work(monkeypatch, budget=len(answer))
    assert extract_json(answer) == OPS
    assert parse_operations(answer, 0)[0][0].content == "Alice lives in Lisbon"
    # Asked in tokens enough for it: an answer past its budget is refused unread.
    report = reflect(store, Scripted(answer), TALK, scope=SCOPE, max_tokens=len(answer))
    assert report.ok and [r.text for r in report.added] == ["Alice lives in Lisbon"]
    assert report.raw == answer and work


@pytest.mark.parametrize(
    "answer",
    [
        '{"a": "{' * (LARGE // 8),  # no value at all
        '{"a": 1 x}\n' * (LARGE // 11),  # many values, each wrong near its end
        '{x {"a": [1, {"b": 2 y}]} }' * (LARGE // 27),
    ],
    ids=["strings", "many", "nested"],
)
def test_a_large_answer_without_json_is_refused_in_linear_work(monkeypatch, answer):
    _decode_work(monkeypatch, budget=4 * len(answer))
    for kind in (dict, list):
        with pytest.raises(ParseError) as e:
            extract_json(answer, kind)
        assert e.value.raw is answer and f"{len(answer)} characters" in str(e.value)


# -- the agent's turn -----------------------------------------------------------------

OFF = {
    "reflection": Reflection(enabled=False),
    "consolidation": Consolidation(enabled=False),
    "flush": FlushReminder(enabled=False),
    "compaction": Compaction(enabled=False),
    "profiles": Profiles(enabled=False),
    "daily": DailyLog(enabled=False),
}


class Clock:
    def __init__(self) -> None:
        self.now = 1_790_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("answer", [None, 42, "[" * 5000], ids=repr)
def test_a_turn_reports_a_hostile_answer_and_stores_the_turn(store, answer):
    clock, llm = Clock(), Scripted(answer)
    settings_ = {**OFF, "reflection": Reflection(every=1), "daily": DailyLog()}
    # Inline, so that the turn's own report shows its triggers' failures.
    am = AgentMemory(
        store, SessionScope("per-peer"), llm, clock=clock, upkeep="inline", **settings_
    )
    alice = am.event("telegram", 42, 7)
    msgs = am.before(alice, [{"role": "user", "content": "I live in Lisbon"}])
    report = am.after(alice, msgs, "noted")
    assert [f.trigger for f in report.failures] == ["reflection"]
    assert report.failures[0].error.startswith("ParseError: ")
    clock.now += 86400.0
    msgs = am.before(alice, [{"role": "user", "content": "good morning"}])
    report = am.after(alice, msgs, "hi")
    assert sorted(f.trigger for f in report.failures) == ["daily", "reflection"]
    daily = next(f for f in report.failures if f.trigger == "daily")
    if not isinstance(answer, str):
        assert daily.error.startswith("ParseError: ") and type(answer).__name__ in daily.error
    assert store.count(MESSAGES, **alice.history) == 4 and store.count(DAILY) == 0


# Plain-text answers (a summary) that are no text, or text no store can keep.
UNSTORABLE: list[Any] = [None, 42, b"a summary", "  \n", "a summary \x00 of it", "a \ud800 summary"]


@pytest.mark.parametrize("answer", UNSTORABLE, ids=repr)
def test_a_summary_no_store_can_keep_is_reported_and_the_text_split(store, answer):
    """``overflow="summarize"``: a summary that is not text both databases can store is a
    ParseError in the report, and what was too long is stored in parts instead, the turn
    whole, and a fact the agent remembers too."""
    limits = Limits(max_entry_chars=100, overflow="summarize")
    am = AgentMemory(
        store, SessionScope("per-peer"), Scripted(answer), upkeep="inline", limits=limits, **OFF
    )
    alice = am.event("telegram", 42, 7)
    user = "I moved to Berlin last week, and my new phone number is 555-0101. " * 2
    report = am.after(alice, [{"role": "user", "content": user}], "Noted.")
    failed = [f.error for f in report.failures if f.trigger == "summarize"]
    assert failed and all(e.startswith("ParseError: the summary ") for e in failed)
    *said, reply = [r.text for r in report.stored]
    assert " ".join(said).split() == user.split() and reply == "Noted."
    assert len(report.short_term) > 1
    fact = "Alice moved to Berlin in May 2024. Her phone number is 555-0101; she prefers email."
    out = am.memory_tools(alice).handle_tool_call("remember", {"content": fact * 2})
    assert out["ok"] is True and len(out["ids"]) > 1
    am.close()


@pytest.mark.parametrize("answer", UNSTORABLE, ids=repr)
def test_a_summary_of_steps_no_store_can_keep_is_reported(answer):
    summary, report = summarise_steps(Compaction(), "step 1\n\nstep 2", 2, lambda *_: answer)
    assert summary is None and report.status == "failed"
    assert report.error is not None and report.error.startswith("ParseError: the summary ")


# -- fuzzing --------------------------------------------------------------------------

TOKENS = [
    *'[]{}":,\\ \n\t1a-.e',
    '"a"',
    '\\"',
    "\\u00e9",
    "\\ud800",
    "```",
    "```json\n",
    "true",
    "null",
    "1e999",
    "[" * 20,
    "]" * 20,
    '{"a": ' * 10,
    "}" * 10,
    '{"operations": [',
    '{"op": "remember", "content": "x"}',
    '{"op": "forget", "memory": 1}',
    '{"summary": "s", "facts": ["f"]}',
    '"confidence": 1' + "0" * 400,
    "Sure! Here's the JSON: ",
]
jsonish = st.lists(st.sampled_from(TOKENS), max_size=60).map("".join)
anything = st.text(st.characters(exclude_categories=()), max_size=300)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=20,
)
prose = st.text(st.characters(exclude_characters="[]{}`"), max_size=40)
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))


def _reference(text: str, kind: type) -> Any:
    """The answer's meaning, the slow way: the first ``{`` (or ``[``) at which json reads
    a value of ``kind`` at most MAX_DEPTH deep, looking inside code fences first."""
    opener = "{" if kind is dict else "["
    decoder = json.JSONDecoder()
    fenced = re.findall(r"```[ \t]*(?:json[c5]?|JSON)?[ \t]*\n?(.*?)```", text, re.DOTALL)
    for chunk in [*fenced, text]:
        for start in [i for i, c in enumerate(chunk) if c == opener]:
            try:
                value, _ = decoder.raw_decode(chunk, start)
            except (ValueError, RecursionError):
                continue
            if _depth(value) <= MAX_DEPTH:
                return value
    raise ParseError("none")


def _outcome(parse: Any, *args: Any) -> Any:
    try:
        return ("value", parse(*args))
    except ParseError:
        return ("ParseError",)


@FUZZ
@given(st.one_of(jsonish, anything), st.sampled_from([dict, list]))
def test_extract_json_gives_the_first_value_or_a_parse_error(text, kind):
    outcome = _outcome(extract_json, text, kind)
    assert outcome == _outcome(_reference, text, kind)
    if outcome[0] == "value":
        assert isinstance(outcome[1], kind)


@FUZZ
@given(prose, json_values, prose)
def test_a_value_in_prose_is_found(before, value, after):
    text = f"{before}{json.dumps(value)}{after}"
    for kind in (dict, list):
        if isinstance(value, kind):
            assert extract_json(text, kind) == value
        elif not isinstance(value, dict | list | str):
            with pytest.raises(ParseError):
                extract_json(text, kind)


@FUZZ
@given(st.one_of(jsonish, anything, st.none(), st.integers()), st.integers(0, 3))
def test_reflection_and_consolidation_parsers_give_a_result_or_a_parse_error(text, shown):
    try:
        ops, rejected = parse_operations(text, shown)
    except ParseError as e:
        assert e.raw is text
    else:
        assert all(op.op in ("remember", "update", "forget") for op in ops)
        assert all(isinstance(why, str) for _, why in rejected)
    try:
        summary = parse_summary(text)
    except ParseError as e:
        assert e.raw is text
    else:
        assert summary["summary"] and 0.0 <= summary["confidence"] <= 1.0


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.one_of(jsonish, st.none()))
def test_reflect_and_consolidate_never_raise(word_embedder, answer):
    with Memory(None, word_embedder) as mem:
        first = mem.add("Alice lives in Berlin", **SCOPE)
        entries = _short_term(mem)
        report = reflect(mem, Scripted(answer), TALK, scope=SCOPE)
        assert report.error is None or report.error.startswith("ParseError: ")
        if report.error is not None:
            assert first.id in mem
        result = consolidate(mem, Scripted(answer), scope=SCOPE, force=True)
        if result.status == "failed":
            assert (result.error or "").startswith(("ParseError: ", "InvalidArgumentError: "))
            assert mem.count(SHORT_TERM, **SCOPE) == len(entries)
        else:
            assert result.status == "consolidated" and result.episodic is not None


def test_an_answer_holding_a_lone_surrogate_is_used_and_counted(store):
    # The job's meter counts the answer's tokens with the default tokenizer, which
    # refuses a lone surrogate: every retry of the job failed there, before the parse,
    # although the operations it holds are sound.
    answer = json.dumps({**OPS, "note": "\ud800"}, ensure_ascii=False)
    am = AgentMemory(
        store,
        SessionScope("per-peer"),
        Scripted(answer),
        **{**OFF, "reflection": Reflection(every=1)},
    )
    alice = am.event("telegram", 42, 7)
    am.after(alice, am.before(alice, TALK), "noted")
    assert am.drain(30)
    done = am.after(alice, am.before(alice, TALK), "noted").upkeep
    assert [(o.kind, o.report.failures) for o in done][:1] == [("reflection", [])]
    assert done[0].tokens_out > 0
    assert [r.text for r in store.list("memories")] == ["Alice lives in Lisbon"]
    am.close()
