"""`memlane mcp` driven by a real MCP client session over stdio."""

from __future__ import annotations

import json
import sys

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
