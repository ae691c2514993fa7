"""Agent tools: a function-calling model uses memlane's memory tools through a local
OpenAI-compatible server (llama.cpp's llama-server, Ollama, vLLM, LM Studio, ...).

The model gets the tools' schemas (``MemoryTools.openai()``); each tool call it
makes runs through ``MemoryTools.handle_tool_call``, which never raises: bad
arguments come back to the model as a structured error it can correct.

Run: python examples/agent_tools.py --base-url http://127.0.0.1:8080/v1 --model NAME
(the server must support ``tools``; nothing here calls an outside service)
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

import httpx

import memlane
from memlane.agent import MemoryTools

SYSTEM = (
    "You are a helpful assistant with long-term memory. Use the remember tool for "
    "facts about the user worth keeping, and recall before answering personal questions."
)


def chat(
    client: httpx.Client, model: str, tools: MemoryTools, user: str, max_steps: int = 5
) -> str:
    """One user turn: call the model, run the tools it asks for, until it answers."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": user},
    ]
    for _ in range(max_steps):
        response = client.post(
            "/chat/completions",
            json={"model": model, "messages": messages, "tools": tools.openai(), "temperature": 0},
        )
        response.raise_for_status()
        message = response.json()["choices"][0]["message"]
        messages.append(message)
        calls = message.get("tool_calls") or []
        if not calls:
            return str(message.get("content") or "")
        for call in calls:
            name, arguments = call["function"]["name"], call["function"]["arguments"]
            result = tools.handle_tool_call(name, arguments)
            print(f"  [tool] {name}({arguments}) -> {json.dumps(result)[:160]}")
            messages.append(
                {"role": "tool", "tool_call_id": call["id"], "content": json.dumps(result)}
            )
    raise RuntimeError(f"no answer after {max_steps} model calls")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", default=os.environ.get("OPENAI_BASE_URL"), required=False)
    parser.add_argument("--model", default="local-model")
    args = parser.parse_args()
    if not args.base_url:
        parser.error("give --base-url of a local OpenAI-compatible server (or $OPENAI_BASE_URL)")

    with memlane.Memory() as mem, httpx.Client(base_url=args.base_url, timeout=120) as client:
        # The tools act in one scope: this agent's memories about this user.
        tools = MemoryTools(mem, scope={"agent_id": "assistant", "user_id": "alice"})
        for turn in (
            "Please remember that I'm allergic to peanuts.",
            "Can you suggest a snack for me?",
        ):
            print(f"user: {turn}")
            print(f"assistant: {chat(client, args.model, tools, turn)}\n")
        print("stored for alice:")
        for record in mem.list(user_id="alice"):
            print(f"  - {record.text} (importance {record.importance}, {record.type})")


if __name__ == "__main__":
    main()
