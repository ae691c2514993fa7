"""A store pins its embedder's name and dimension, so ``Memory`` checks them before it
opens anything: a name that is no non-empty str, or a dimension that is no int of at
least 1, was a ``StorageError`` (a NULL name), a refusal of the same embedder at the
next open (``123`` read back as ``'123'``), a text-only store that contradicted itself
(``''``), or a failure at the first add (``8.9``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import WordHashEmbedder
from memlane import InvalidArgumentError, Memory


def named(name: Any, dimension: Any) -> WordHashEmbedder:
    embedder = WordHashEmbedder(8)
    embedder.name, embedder.dimension = name, dimension
    return embedder


@pytest.mark.parametrize(
    ("name", "dimension", "wrong"),
    [
        (None, 8, "name"),
        (123, 8, "name"),
        ("", 8, "name"),
        ("  ", 8, "name"),
        ("words", 8.9, "dimension"),
        ("words", 0, "dimension"),
        ("words", True, "dimension"),
        ("words", "8", "dimension"),
    ],
)
def test_an_embedder_a_store_cannot_pin_is_refused_before_the_store_is_made(
    tmp_path: Path, name: Any, dimension: Any, wrong: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=f"embedder's {wrong} must be"):
        Memory(tmp_path / "store", named(name, dimension))
    assert not (tmp_path / "store").exists()


def test_a_numpy_int_dimension_is_taken(tmp_path: Path) -> None:
    with Memory(tmp_path / "store", named("words", np.int64(8))) as mem:
        mem.add("a record")
    with Memory(tmp_path / "store", named("words", 8)) as mem:
        assert len(mem) == 1
