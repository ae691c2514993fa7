"""The README's drop-in snippets ("Use it from ...": hnswlib, rank_bm25) run as written."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def compat_snippets() -> dict[str, str]:
    """The section's Python blocks that import a memlane.compat module, by module."""
    text = README.read_text(encoding="utf-8")
    start = text.index("## Use it from")
    end = text.find("\n## ", start + 1)
    section = text[start : end if end != -1 else len(text)]
    found: dict[str, str] = {}
    for block in re.findall(r"```python\n(.*?)```", section, flags=re.S):
        for name in ("hnswlib", "rank_bm25"):
            if f"memlane.compat.{name}" in block:
                found[name] = block
    return found


def test_each_drop_in_has_a_snippet() -> None:
    assert set(compat_snippets()) == {"hnswlib", "rank_bm25"}


@pytest.mark.parametrize("name", ["hnswlib", "rank_bm25"])
def test_snippet_runs(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    scope: dict[str, Any] = {}
    exec(compile(compat_snippets()[name], f"README.md ({name})", "exec"), scope)
    if name == "hnswlib":
        labels, distances = scope["labels"], scope["distances"]
        assert labels.shape == distances.shape == (5, 3)
        assert labels[:, 0].tolist() == [0, 1, 2, 3, 4]  # each vector finds itself
        vectors = scope["vectors"]
        unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
        distance = 1 - unit[:5] @ unit[::2].T
        exact = np.argsort(distance, axis=1)[:, :3] * 2  # row i of unit[::2] is label 2i
        np.testing.assert_array_equal(scope["fast"], exact)  # half the labels: scanned exactly
        assert np.all(scope["even"] % 2 == 0)
        overlap = [len(set(a) & set(b)) for a, b in zip(scope["even"], exact, strict=True)]
        assert np.mean(overlap) >= 2.5
    else:
        assert scope["scores"].shape == (3,) and scope["scores"].argmax() == 0
        assert scope["best"] == ["dogs chase cats"]
