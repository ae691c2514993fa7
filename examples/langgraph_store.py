"""memlane as a LangGraph graph's long-term memory (``store=``), offline.

Needs the extra: pip install "memlane[langgraph]".
Run: python examples/langgraph_store.py
"""

from __future__ import annotations

from typing import Any

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from typing_extensions import TypedDict

from memlane.integrations.langchain import MemlaneEmbeddings
from memlane.integrations.langgraph import MemlaneStore


class State(TypedDict):
    user: str
    message: str
    recalled: list[str]


def remember(state: State, runtime: Runtime[None]) -> dict[str, Any]:
    """Stores what the user said under their namespace."""
    assert runtime.store is not None
    namespace = ("memories", state["user"])
    key = f"m{len(runtime.store.search(namespace, limit=1000))}"
    runtime.store.put(namespace, key, {"text": state["message"]})
    return {}


def recall(state: State, runtime: Runtime[None]) -> dict[str, Any]:
    """Finds the user's memories closest in meaning to the message."""
    assert runtime.store is not None
    found = runtime.store.search(("memories", state["user"]), query=state["message"], limit=2)
    return {"recalled": [item.value["text"] for item in found]}


def main() -> None:
    builder = StateGraph(State)
    builder.add_node("recall", recall)
    builder.add_node("remember", remember)
    builder.add_edge(START, "recall")
    builder.add_edge("recall", "remember")
    builder.add_edge("remember", END)

    # Semantic search over the "text" field with memlane's offline embedder; pass
    # memory=memlane.Memory("dir") to keep the memories on disk.
    index = {"dims": 384, "embed": MemlaneEmbeddings(), "fields": ["text"]}
    with MemlaneStore(index=index) as store:
        graph = builder.compile(store=store)
        for message in ("I am vegetarian", "My sister lives in Porto", "I play the cello"):
            graph.invoke({"user": "alice", "message": message, "recalled": []})
        graph.invoke({"user": "bob", "message": "I love steak", "recalled": []})

        out = graph.invoke(
            {"user": "alice", "message": "what should I cook tonight?", "recalled": []}
        )
        print("recalled for alice:", out["recalled"])
        assert out["recalled"][0] == "I am vegetarian"
        assert "I love steak" not in out["recalled"]  # bob's memories stay bob's

        print("namespaces:", store.list_namespaces(prefix=("memories",)))
        assert store.list_namespaces(prefix=("memories",)) == [
            ("memories", "alice"),
            ("memories", "bob"),
        ]


if __name__ == "__main__":
    main()
