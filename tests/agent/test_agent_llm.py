"""OpenAIChat against the scripted loopback server, and robust JSON extraction."""

from __future__ import annotations

import asyncio

import pytest

from chat_server import ScriptedChatServer
from memlane import InvalidArgumentError
from memlane.agent.llm import LLM, AsyncLLM, LLMError, OpenAIChat
from memlane.agent.parsing import ParseError, extract_json

MSGS = [{"role": "user", "content": "hi"}]


@pytest.fixture
def server():
    with ScriptedChatServer() as s:
        yield s


def test_complete_sends_the_protocol(server):
    server.push("hello there")
    with OpenAIChat("tiny", base_url=server.base_url, api_key="k", max_tokens=50) as llm:
        assert isinstance(llm, LLM) and isinstance(llm, AsyncLLM)
        assert llm.complete(MSGS) == "hello there"
    (body,) = server.requests
    assert body == {"model": "tiny", "messages": MSGS, "temperature": 0.0, "max_tokens": 50}


def test_retries_then_succeeds(server):
    server.push((503, "busy"), (429, "slow down"), "ok")
    llm = OpenAIChat("m", base_url=server.base_url, max_retries=2, backoff=0)
    assert llm.complete(MSGS) == "ok"
    assert len(server.requests) == 3


def test_gives_up(server):
    server.push((503, "busy"), (503, "busy"))
    llm = OpenAIChat("m", base_url=server.base_url, max_retries=1, backoff=0)
    with pytest.raises(LLMError, match="after 2 attempt"):
        llm.complete(MSGS)
    server.push((400, "bad request"), "never")
    with pytest.raises(LLMError, match="HTTP 400"):
        llm.complete(MSGS)  # not retried
    assert server.script  # "never" was not consumed


def test_bad_bodies(server):
    server.push({"choices": []}, {"choices": [{"message": {"content": None}}]})
    llm = OpenAIChat("m", base_url=server.base_url, max_retries=0)
    with pytest.raises(LLMError, match="unexpected body"):
        llm.complete(MSGS)
    with pytest.raises(LLMError, match="no text"):
        llm.complete(MSGS)
    with pytest.raises(InvalidArgumentError):
        llm.complete("hi")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        llm.complete([{"role": "user"}])


def test_unreachable_and_timeout():
    with ScriptedChatServer() as s:
        url = s.base_url
    llm = OpenAIChat("m", base_url=url, max_retries=1, backoff=0, timeout=1)
    with pytest.raises(LLMError, match="ConnectError"):
        llm.complete(MSGS)


def test_async(server):
    server.push((500, "oops"), "async hello")

    async def go() -> str:
        llm = OpenAIChat("m", base_url=server.base_url, backoff=0)
        try:
            return await llm.acomplete(MSGS)
        finally:
            await llm.aclose()

    assert asyncio.run(go()) == "async hello"


@pytest.mark.parametrize(
    "text",
    [
        '{"a": 1}',
        'Sure! Here it is:\n```json\n{"a": 1}\n```\nHope that helps.',
        '```\n{"a": 1}\n```',
        'The answer is {"a": 1} and that is all {not json}.',
        'Thinking {broken\n{"a": 1}',
    ],
)
def test_extract_json(text):
    assert extract_json(text) == {"a": 1}


def test_extract_json_arrays_and_failures():
    assert extract_json("ops: [1, 2] done", list) == [1, 2]
    for bad in ["", "no json here", '{"a": 1', "[1, 2]"]:
        with pytest.raises(ParseError):
            extract_json(bad)


def test_chat_returns_the_message_with_tool_calls(server):
    call = {"id": "c", "type": "function", "function": {"name": "recall", "arguments": "{}"}}
    body = {"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [call]}}]}
    server.push(body, body)
    llm = OpenAIChat("m", base_url=server.base_url, temperature=None)
    history = [{"role": "user", "content": "hi"}, {"role": "assistant", "tool_calls": [call]}]
    msg = llm.chat(history, tools=[{"type": "function"}], tool_choice="auto")
    assert msg["tool_calls"] == [call]
    assert server.requests[0] == {
        "model": "m",
        "messages": history,
        "tools": [{"type": "function"}],
        "tool_choice": "auto",
    }
    assert asyncio.run(llm.achat(MSGS))["tool_calls"] == [call]
    server.push(body)
    with pytest.raises(LLMError, match="no text"):
        llm.complete(MSGS)  # complete() wants text
