"""`memlane mcp` driven by a real MCP client session over stdio."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading

import pytest

import memlane
from memlane import Memory

anyio = pytest.importorskip("anyio")
pytest.importorskip("mcp")

from mcp.client.session import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402


async def _session_run(store, calls):
    params = StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "memlane",
            "mcp",
            "--store",
            str(store),
            "--embedder",
            "none",
            "--user",
            "alice",
        ],
    )
    out = []
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        init = await session.initialize()
        out.append(init.server_info)
        listed = await session.list_tools()
        out.append({t.name: t.input_schema for t in listed.tools})
        for name, args in calls:
            result = await session.call_tool(name, args)
            text = result.content[0].text
            out.append((json.loads(text), result.is_error, result.structured_content))
    return out


def test_mcp_over_stdio(tmp_path):
    store = tmp_path / "store"
    with Memory(store, None) as mem:
        bob = mem.add("Bob likes tea", user_id="bob")
        mem.ingest_text(
            "The boiler manual: reset by holding the red button.",
            source="inline:boiler",
            shared=True,
        )

    calls = [
        ("remember", {"content": "Alice takes her coffee black", "importance": 0.8}),
        ("recall", {"query": "coffee"}),
        ("recall", {"query": "tea"}),
        ("search_knowledge", {"query": "boiler reset"}),
        ("remember", {"content": "x", "importance": 5}),
        ("forget", {"id": bob.id}),
        ("explode", {}),
    ]
    info, tools, remembered, coffee, tea, knowledge, bad, forget_bob, unknown = anyio.run(
        _session_run, store, calls
    )
    assert (info.name, info.version) == ("memlane", memlane.__version__)
    assert set(tools) == {
        "remember",
        "recall",
        "forget",
        "search_knowledge",
        "notes_append",
        "notes_replace",
    }
    assert tools["remember"]["required"] == ["content"]
    result, is_error, structured = remembered
    assert result["ok"] and not is_error and structured == result
    assert [m["id"] for m in coffee[0]["memories"]] == [result["id"]]
    assert tea[0]["memories"] == []  # bob's memory is out of scope
    assert "red button" in knowledge[0]["fragments"][0]["content"]
    assert bad[1] is True and bad[0]["error"]["type"] == "invalid_arguments"
    assert forget_bob[0]["error"]["type"] == "not_found"
    assert unknown[0]["error"]["type"] == "unknown_tool"

    with Memory(store, None) as mem:
        rec = mem.get(result["id"])
        assert rec.user_id == "alice" and rec.importance == 0.8
        assert bob.id in mem


def test_mcp_needs_a_store(tmp_path, capsys):
    from memlane.cli import main

    assert main(["mcp", "--store", str(tmp_path / "missing"), "--embedder", "none"]) == 1
    assert "no memlane store" in capsys.readouterr().err


# -- every line gets its reply --------------------------------------------------------------

#: How long a reply may take (a bounded wait: a line that gets none fails the test).
WAIT = 15


class RawClient:
    """`memlane mcp` as a subprocess written to line by line, raw bytes and all; its
    replies are read on a thread, so every wait for one is bounded."""

    def __init__(self, store):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "memlane", "mcp", "--store", str(store), "--embedder", "none"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.replies: queue.Queue[dict] = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.replies.put(json.loads(line))

    def send(self, line: bytes) -> None:
        self.proc.stdin.write(line + b"\n")
        self.proc.stdin.flush()

    def next(self) -> dict:
        try:
            return self.replies.get(timeout=WAIT)
        except queue.Empty:
            raise AssertionError(f"no reply within {WAIT} s") from None

    def until(self, rid) -> list[dict]:
        """Every reply up to and including the one to ``rid``."""
        got = [self.next()]
        while got[-1].get("id") != rid:
            got.append(self.next())
        return got

    def request(self, rid, method: str, params: dict | None = None) -> dict:
        message = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            message["params"] = params
        self.send(json.dumps(message).encode())
        (reply,) = self.until(rid)
        return reply

    def close(self) -> tuple[int, bytes]:
        self.proc.stdin.close()
        try:
            code = self.proc.wait(timeout=WAIT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("the server did not stop at the end of its input") from None
        return code, self.proc.stderr.read()


def _call(rid, name: str, arguments: str) -> bytes:
    return (
        b'{"jsonrpc":"2.0","id":'
        + rid
        + b',"method":"tools/call","params":{"name":"'
        + name.encode()
        + b'","arguments":'
        + arguments.encode()
        + b"}}"
    )


#: name -> (the line, the reply's id, its error code, or "tool" for a tool's error result,
#: or None for a line that is no request, and words its message must hold).
HOSTILE = {
    "lone surrogate in the id": (
        b'{"jsonrpc":"2.0","id":"\\ud800","method":"tools/call",'
        b'"params":{"name":"recall","arguments":{"query":"x"}}}',
        None,
        -32600,
        "lone surrogate",
    ),
    "lone surrogate in content": (
        _call(b"11", "remember", '{"content":"tea \\ud800"}'),
        11,
        "tool",
        "lone surrogate",
    ),
    "lone surrogate in query": (
        _call(b"12", "recall", '{"query":"\\udfff"}'),
        12,
        "tool",
        "lone surrogate",
    ),
    "lone surrogate in a tool's name": (
        b'{"jsonrpc":"2.0","id":13,"method":"tools/call","params":{"name":"\\ud800"}}',
        13,
        -32602,
        "params.name holds a lone surrogate",
    ),
    "params a string": (
        b'{"jsonrpc":"2.0","id":14,"method":"tools/call","params":"recall"}',
        14,
        -32600,
        "params must be an object",
    ),
    "params a list": (
        b'{"jsonrpc":"2.0","id":15,"method":"tools/call","params":["recall",{}]}',
        15,
        -32600,
        "params must be an object",
    ),
    "malformed JSON": (b'{"jsonrpc":"2.0","id":16,', None, -32700, "Parse error"),
    "not UTF-8": (
        b'{"jsonrpc":"2.0","id":17,"method":"tools/call",'
        b'"params":{"name":"recall","arguments":{"query":"t\xffa"}}}',
        None,
        -32700,
        "not UTF-8",
    ),
    "an id of 5,000 digits": (
        b'{"jsonrpc":"2.0","id":' + b"9" * 5000 + b',"method":"ping"}',
        None,
        -32700,
        "digits",
    ),
    "an id past 64 bits": (
        b'{"jsonrpc":"2.0","id":' + b"9" * 40 + b',"method":"ping"}',
        None,
        -32600,
        "64 bits",
    ),
    "nested 10,000 deep": (
        b'{"jsonrpc":"2.0","id":18,"method":"ping","params":{"a":'
        + b"[" * 10_000
        + b"]" * 10_000
        + b"}}",
        None,
        -32700,
        "the line nests deeper than 500 levels",  # the parser's bound, not the params'
    ),
    "arguments nested 100 deep": (
        _call(b"19", "remember", '{"content":"x","metadata":' + '{"a":' * 100 + "1" + "}" * 101),
        19,
        -32602,
        "nests deeper than 64 levels",
    ),
    "an id that is an object": (
        b'{"jsonrpc":"2.0","id":{"n":1},"method":"ping"}',
        None,
        -32600,
        "id must be a string or an integer",
    ),
    "an id that is null": (b'{"jsonrpc":"2.0","id":null,"method":"ping"}', None, -32600, "null"),
    "no method": (b'{"jsonrpc":"2.0","id":20}', 20, -32600, "no method"),
    "not JSON-RPC 2.0": (b'{"id":21,"method":"ping"}', 21, -32600, '"jsonrpc"'),
    "a batch": (
        b'[{"jsonrpc":"2.0","id":22,"method":"ping"},{"jsonrpc":"2.0","id":23,"method":"ping"}]',
        None,
        -32600,
        "batches",
    ),
    "an empty batch": (b"[]", None, -32600, "batches"),
    "a number": (b"42", None, -32600, "a message is an object"),
    "NaN": (_call(b"24", "remember", '{"content":"x","importance":NaN}'), None, -32700, "NaN"),
    "a notification with params a string": (
        b'{"jsonrpc":"2.0","method":"notifications/initialized","params":"x"}',
        None,
        -32600,
        "params must be an object",
    ),
    "a reply from the client": (b'{"jsonrpc":"2.0","id":"c1","result":{}}', None, None, ""),
    "a blank line": (b"   ", None, None, ""),
}


def test_mcp_answers_every_line_and_keeps_serving(tmp_path):
    """The issue's trial: a tools/call with a lone surrogate in id, content or query, or
    with params a string or a list, got no reply at all, nor did malformed JSON."""
    store = tmp_path / "store"
    Memory(store, None).close()
    client = RawClient(store)
    try:
        init = client.request(
            0,
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "1"},
            },
        )
        assert init["result"]["serverInfo"]["name"] == "memlane"
        client.send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
        for n, (name, (line, rid, code, words)) in enumerate(HOSTILE.items()):
            client.send(line)
            client.send(
                json.dumps({"jsonrpc": "2.0", "id": f"ping-{n}", "method": "ping"}).encode()
            )
            got = client.until(f"ping-{n}")[:-1]
            if code == "tool" and not got:  # a tool runs on a thread: the ping may be first
                got = [client.next()]
            if code is None:
                assert got == [], name
                continue
            assert len(got) == 1, (name, got)
            (reply,) = got
            assert reply["id"] == rid, name
            if code == "tool":
                result = reply["result"]
                assert result["isError"] is True, name
                error = result["structuredContent"]["error"]
                assert error["type"] == "invalid_arguments" and words in error["message"], name
            else:
                assert reply["error"]["code"] == code, (name, reply)
                assert words in reply["error"]["message"], (name, reply)
        # And it still serves.
        done = client.request(
            100, "tools/call", {"name": "remember", "arguments": {"content": "Alice drinks tea"}}
        )
        assert done["result"]["structuredContent"]["ok"] is True
        found = client.request(101, "tools/call", {"name": "recall", "arguments": {"query": "tea"}})
        memories = found["result"]["structuredContent"]["memories"]
        assert [m["content"] for m in memories] == ["Alice drinks tea"]
    finally:
        code, err = client.close()
    assert code == 0, err
    with Memory(store, None) as mem:
        assert [r.text for r in mem.list(limit=10)] == ["Alice drinks tea"]  # nothing else stored


def test_a_reply_that_cannot_be_written_becomes_an_error():
    import mcp_types as types
    from mcp.shared.message import SessionMessage

    from memlane.agent.mcp_stdio import writable

    bad = types.JSONRPCResponse(jsonrpc="2.0", id=7, result={"text": "tea \ud800"})
    reply = writable(SessionMessage(bad)).message
    assert reply.id == 7 and reply.error.code == -32603
    assert "lone surrogate" in reply.error.message
    good = SessionMessage(types.JSONRPCResponse(jsonrpc="2.0", id=8, result={"text": "tea"}))
    assert writable(good) is good
