"""Each framework adapter has an offline example (its snippets run in
tests/project/test_snippets.py, from docs/integrations.md)."""

from __future__ import annotations

from pathlib import Path


def test_each_adapter_has_an_example() -> None:
    """tests/project/test_examples.py runs every script in examples/; these must stay among them."""
    examples = Path(__file__).resolve().parents[2] / "examples"
    names = {p.name for p in examples.glob("*.py")}
    assert {"langchain_vectorstore.py", "langgraph_store.py", "llamaindex_store.py"} <= names
