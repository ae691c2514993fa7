"""Every script in ``examples/`` runs to the end (each checks its own results with asserts).

``agent_tools.py`` talks to an OpenAI-compatible server; here it gets the
scripted loopback server of ``chat_server.py``, playing a model that calls tools.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from chat_server import ScriptedChatServer, completion
from conftest import REPO

EXAMPLES = REPO / "examples"
SCRIPTS = sorted(EXAMPLES.glob("*.py"))


def run_example(script: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(
        [sys.executable, str(script), *args],
        cwd=cwd,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, f"{script.name} failed:\n{res.stdout}\n{res.stderr}"
    assert res.stdout.strip(), f"{script.name} printed nothing"
    assert "Traceback" not in res.stderr
    return res


def test_examples_exist() -> None:
    names = {s.stem for s in SCRIPTS}
    assert {
        "basic_search",
        "persistent_store",
        "hybrid_explain",
        "shared_store_agents",
        "rag_knowledge",
        "agent_tools",
        "agent_memory",
        "async_usage",
    } <= names


@pytest.mark.parametrize(
    "script",
    [s for s in SCRIPTS if s.stem not in ("agent_tools", "agent_loop")],
    ids=lambda s: s.stem,
)
def test_example_runs(script: Path, tmp_path: Path) -> None:
    run_example(script, tmp_path)


def tool_call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    body = completion("")
    body["choices"][0]["message"] = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": f"call-{name}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
        ],
    }
    return body


def model(body: dict[str, Any]) -> Any:
    """A stand-in model: remembers, recalls, then answers from what the tool returned."""
    assert {t["function"]["name"] for t in body["tools"]} >= {"remember", "recall"}
    last = body["messages"][-1]
    if last["role"] == "user":
        if "remember" in last["content"]:
            return tool_call(
                "remember", {"content": "Alice is allergic to peanuts", "evergreen": True}
            )
        return tool_call("recall", {"query": "food allergies"})
    result = json.loads(last["content"])
    assert result["ok"], result
    if "memories" in result:
        return f"Avoid peanuts: {result['memories'][0]['content']}."
    return "Noted."


def test_agent_tools_example(tmp_path: Path) -> None:
    with ScriptedChatServer([model] * 4) as server:
        res = run_example(EXAMPLES / "agent_tools.py", tmp_path, "--base-url", server.base_url)
    assert len(server.requests) == 4
    assert "[tool] remember(" in res.stdout and "[tool] recall(" in res.stdout
    assert "assistant: Avoid peanuts: Alice is allergic to peanuts." in res.stdout
    assert "  - Alice is allergic to peanuts (importance 0.5, semantic)" in res.stdout
    tool_message = server.requests[1]["messages"][-1]
    assert tool_message["role"] == "tool" and tool_message["tool_call_id"] == "call-remember"


def _check(prompt: str) -> str:
    """A careful model's check of new facts: a fact about where Alice lives or works
    updates the stored one about the same, when it differs."""
    stored, _, new = prompt.partition("New facts:")
    decisions = []
    for line in new.strip().splitlines():
        label, _, fact = line.partition(". ")
        decision: dict[str, Any] = {"fact": label, "decision": "add", "reason": "new"}
        for attribute in ("Alice lives in", "Alice works as"):
            old = [s for s in stored.splitlines() if attribute in s and attribute in fact]
            if old and fact.split("] ")[-1] not in old[0]:
                number = int(old[0].split(".")[0])
                decision = {
                    "fact": label,
                    "decision": "update",
                    "memory": number,
                    "reason": f"{attribute.split()[-2]} changed",
                }
        decisions.append(decision)
    return json.dumps({"decisions": decisions})


def reflecting_model(body: dict[str, Any]) -> str:
    """A stand-in model for ``agent_loop.py``: chats briefly, when asked to reflect
    remembers where Alice lives, or changes it when she says she moved, and checks new
    facts as a careful model would."""
    if "New facts:" in body["messages"][-1]["content"]:
        return _check(body["messages"][-1]["content"])
    if "long-term memory about a user" not in body["messages"][0]["content"]:
        return "Happy to help."
    prompt = body["messages"][-1]["content"]
    listed = prompt.split("Conversation:")[0]
    if "moved to Berlin" in prompt and "Paris" in listed:
        number = next(
            line.split(".")[0] for line in listed.splitlines() if "Paris" in line and "." in line
        )
        op = {"op": "update", "memory": int(number), "content": "Alice lives in Berlin"}
        return json.dumps({"operations": [op]})
    if "live in Paris" in prompt and "Alice lives in" not in listed:
        op = {"op": "remember", "content": "Alice lives in Paris", "importance": 0.8}
        return json.dumps({"operations": [op]})
    return json.dumps({"operations": []})


def test_agent_loop_example(tmp_path: Path) -> None:
    with ScriptedChatServer([reflecting_model] * 40) as server:
        res = run_example(EXAMPLES / "agent_loop.py", tmp_path, "--base-url", server.base_url)
    assert "[session 1] remembered: Alice lives in Paris" in res.stdout
    assert "[session 3] superseded by: Alice lives in Berlin" in res.stdout
    assert "as of session 2: Alice lives in Paris" in res.stdout
    assert "[session 4] fact-check: update (works changed)" in res.stdout
    # The check of the new fact found nothing to compare with: kept, as its history says.
    assert "history: 'Alice lives in Paris' (add, ended by update (fact-check))" in res.stdout
    assert "history: 'Alice lives in Paris' (update, ended by supersede (reflection))" in res.stdout
