"""`memlane mcp` driven as a client that writes its lines and closes the server's stdin
(`memlane mcp STORE < requests.jsonl`): every request it read gets its reply before it
stops, and a message nests at most 64 levels deep wherever it nests."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from memlane import Memory
from memlane.agent.mcp_stdio import MAX_DEPTH, check_line

pytest.importorskip("anyio")
pytest.importorskip("mcp")

SERVER = [sys.executable, "-m", "memlane", "mcp", "--embedder", "none", "--user", "alice"]

#: A bound on one run of the server, so that a server that never stops fails the test
#: instead of hanging it; no result depends on how long a run takes.
HANG = 180

INIT = {
    "jsonrpc": "2.0",
    "id": "init",
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "eof", "version": "1"},
    },
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def _remember(rid: object, content: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": rid,
        "method": "tools/call",
        "params": {"name": "remember", "arguments": {"content": content}},
    }


def _ping(rid: object, **members: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": "ping", **members}


def _nested(levels: int) -> Any:
    """Arrays nested ``levels`` deep."""
    value: list[Any] = []
    for _ in range(levels - 1):
        value = [value]
    return value


def _serve(store: Path, messages: list[Any]) -> list[dict[str, Any]]:
    """The replies of `memlane mcp` to ``messages`` (objects, or raw lines), all written
    at once before its stdin is closed; the server must stop, and cleanly."""
    lines = b"".join(
        (m if isinstance(m, bytes) else json.dumps(m).encode()) + b"\n" for m in messages
    )
    done = subprocess.run(
        [*SERVER, "--store", str(store)],
        input=lines,
        capture_output=True,
        timeout=HANG,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return [json.loads(line) for line in done.stdout.splitlines()]


def _store(tmp_path: Path) -> Path:
    store = tmp_path / "store"
    Memory(store, None).close()
    return store


def _replies_by_id(replies: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    by_id: dict[str, list[dict[str, Any]]] = {}
    for reply in replies:
        by_id.setdefault(json.dumps(reply.get("id")), []).append(reply)
    return by_id


def test_every_request_read_before_the_end_of_input_gets_its_reply(tmp_path: Path) -> None:
    """The replies of the tool calls still running when stdin ended were dropped, though
    the calls were performed: init and ping were answered, none of the ten calls."""
    store = _store(tmp_path)
    calls = [_remember(n, f"fact {n}: the blue door is number {n * 7}") for n in range(10)]
    replies = _serve(store, [INIT, INITIALIZED, _ping("ping"), *calls])

    ids = Counter(json.dumps(r.get("id")) for r in replies)
    assert ids == Counter(json.dumps(rid) for rid in ["init", "ping", *range(10)])
    results = {r["id"]: r["result"] for r in replies if r["id"] in range(10)}
    assert all(not r["isError"] and r["structuredContent"]["ok"] for r in results.values())
    # Each reply reports the memory its call stored.
    with Memory(store, None) as mem:
        stored = {rec.id: rec.text for rec in mem.list(limit=100)}
    assert {r["structuredContent"]["id"] for r in results.values()} == set(stored)
    assert sorted(stored.values()) == sorted(c["params"]["arguments"]["content"] for c in calls)


def test_the_end_of_input_waits_for_every_request_but_a_cancelled_one(tmp_path: Path) -> None:
    """Ids the SDK takes for one ("7" and 7, and 8 twice) are each answered, and a
    request the client cancelled, which the SDK never answers, holds up nothing."""
    store = _store(tmp_path)
    cancel = {
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": "1", "reason": "changed my mind"},
    }
    requests = [
        _remember(1, "Alice cancelled this"),
        _remember(2, "Alice likes tea"),
        _remember("7", "Alice likes jam"),
        _remember(7, "Alice likes toast"),
        _remember(8, "Alice likes honey"),
        _remember(8, "Alice likes butter"),
    ]
    messages = [INIT, INITIALIZED, requests[0], cancel, *requests[1:], _ping("last")]
    by_id = _replies_by_id(_serve(store, messages))

    # The cancelled call may have been answered before the cancel reached it.
    assert len(by_id.pop(json.dumps(1), [])) <= 1
    assert {rid: len(got) for rid, got in by_id.items()} == {
        json.dumps(rid): n
        for rid, n in [("init", 1), (2, 1), ("7", 1), (7, 1), (8, 2), ("last", 1)]
    }
    for rid in (2, "7", 7, 8):
        for reply in by_id[json.dumps(rid)]:
            assert reply["result"]["structuredContent"]["ok"] is True, reply


@pytest.mark.parametrize(
    "where",
    ["outside params", "inside params", "in a tool's arguments", "a notification", "a response"],
)
def test_a_message_nests_at_most_max_depth_levels_wherever_it_nests(where: str) -> None:
    """The limit held for params alone: 65 to 499 levels in another member, or in a
    response, were served."""

    def message(levels: int) -> dict[str, Any]:
        # The message is the first level, each member below adds its own.
        if where == "outside params":
            return _ping(1, x=_nested(levels - 1))
        if where == "inside params":
            return _ping(1, params={"x": _nested(levels - 2)})
        if where == "in a tool's arguments":
            content = {"content": "x", "metadata": {"x": _nested(levels - 4)}}
            return {**_remember(1, "x"), "params": {"name": "remember", "arguments": content}}
        if where == "a notification":
            return {**INITIALIZED, "x": _nested(levels - 1)}
        return {"jsonrpc": "2.0", "id": 1, "result": {"x": _nested(levels - 2)}}

    served, reply = check_line(json.dumps(message(MAX_DEPTH)).encode())
    assert served is not None and reply is None
    for levels in (MAX_DEPTH + 1, 100, 499):
        served, reply = check_line(json.dumps(message(levels)).encode())
        assert served is None and reply is not None, levels
        assert reply["error"]["code"] == -32602, reply
        assert f"nests deeper than {MAX_DEPTH} levels" in reply["error"]["message"]
        assert reply["id"] == (None if where == "a notification" else 1)


def test_the_server_refuses_a_message_nested_too_deep_outside_params(tmp_path: Path) -> None:
    store = _store(tmp_path)
    replies = _serve(
        store,
        [
            INIT,
            INITIALIZED,
            _ping("deep", x=_nested(MAX_DEPTH)),  # one level too many: the message is one
            _ping("deeper", x=_nested(499)),
            {"jsonrpc": "2.0", "id": "reply", "result": {"x": _nested(MAX_DEPTH)}},
            _ping("fits", x=_nested(MAX_DEPTH - 1)),
        ],
    )
    by_id = _replies_by_id(replies)
    for rid in ("deep", "deeper", "reply"):
        (reply,) = by_id[json.dumps(rid)]
        assert reply["error"]["code"] == -32602, reply
        assert f"nests deeper than {MAX_DEPTH} levels" in reply["error"]["message"]
    (fits,) = by_id[json.dumps("fits")]
    assert fits["result"] == {}
    assert set(by_id) == {json.dumps(rid) for rid in ("init", "deep", "deeper", "reply", "fits")}
