"""The README's "Use it from ..." snippets for the framework adapters run as written."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def adapter_snippets() -> dict[str, str]:
    """The section's Python blocks that use memlane.integrations, by framework."""
    text = README.read_text(encoding="utf-8")
    start = text.index("## Use it from")
    end = text.find("\n## ", start + 1)
    section = text[start : end if end != -1 else len(text)]
    found: dict[str, str] = {}
    for block in re.findall(r"```python\n(.*?)```", section, flags=re.S):
        for name in ("langgraph", "llamaindex", "langchain"):
            if f"memlane.integrations.{name} import" in block:
                found[name] = block
                break
    return found


def test_every_adapter_has_a_snippet() -> None:
    assert set(adapter_snippets()) == {"langchain", "langgraph", "llamaindex"}


@pytest.mark.parametrize("name", ["langchain", "langgraph", "llamaindex"])
def test_snippet_runs(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    scope: dict[str, Any] = {}
    exec(compile(adapter_snippets()[name], f"README.md ({name})", "exec"), scope)
    try:
        if name == "langchain":
            assert [d.page_content for d in scope["docs"]] == ["Alice prefers dark mode"]
            assert [d.page_content for d in scope["hybrid"]] == ["Alice prefers dark mode"]
        elif name == "langgraph":
            assert [i.value["text"] for i in scope["items"]] == ["Alice is vegetarian"]
        else:
            result = scope["result"]
            assert [n.get_content() for n in result.nodes] == ["Deploys use the blue-green script"]
    finally:
        scope["store"].close()


def test_each_adapter_has_an_example() -> None:
    """tests/test_examples.py runs every script in examples/; these must stay among them."""
    examples = Path(__file__).resolve().parents[2] / "examples"
    names = {p.name for p in examples.glob("*.py")}
    assert {"langchain_vectorstore.py", "langgraph_store.py", "llamaindex_store.py"} <= names
