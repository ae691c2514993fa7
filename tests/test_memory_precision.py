"""The in-memory index precision of a store: chosen at open, rebuilt when it changes."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from conftest import WordHashEmbedder
from memlane import Memory
from memlane.errors import InvalidArgumentError


def _nearest(m: Memory, probes: list[str]) -> list[str]:
    return [m.search(p, k=1, mode="vector")[0].record.text for p in probes]


def test_reopening_with_another_precision_rebuilds_the_index(tmp_path: Path) -> None:
    emb = WordHashEmbedder()
    texts = [f"note {i} about topic {i % 5}" for i in range(200)]
    with Memory(tmp_path / "s", emb, hnsw_precision="f32") as m:
        m.add_many([{"text": t} for t in texts])
        m.wait_indexed()
        m.snapshot()
        # Each probe's own record is its one nearest vector, whatever the precision.
        probes = [texts[i] for i in (3, 77, 150)]
        assert _nearest(m, probes) == probes
    with pytest.warns(RuntimeWarning, match="precision f32 is not the requested int8\\+f16"):
        m = Memory(tmp_path / "s", emb, hnsw_precision="int8+f16")
    with m:
        assert m._engine.precision == "int8+f16"
        assert len(m) == len(texts)
        m.wait_indexed()  # searched in the rebuilt graph, not among parked vectors
        assert _nearest(m, probes) == probes
    # The rebuilt snapshot is the new precision: no warning the next time.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with Memory(tmp_path / "s", emb, hnsw_precision="int8+f16") as m:
            assert m._engine.precision == "int8+f16" and len(m) == len(texts)


def test_unknown_precision_is_refused_before_anything_opens(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="hnsw_precision must be one of"):
        Memory(tmp_path / "s", WordHashEmbedder(), hnsw_precision="int4")
    assert not (tmp_path / "s").exists()
