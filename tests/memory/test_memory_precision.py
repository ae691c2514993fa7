"""The in-memory index of a store: its precision, chosen at open and rebuilt when it
changes; its search beam, the caller's at every open; its graph knobs, checked first."""

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


def test_the_search_beam_given_at_open_applies_to_a_loaded_snapshot(tmp_path: Path) -> None:
    # ef is a search-time setting: a store reopened from its snapshot searches with the
    # beam asked for now, not the one it was saved with.
    emb = WordHashEmbedder()
    with Memory(tmp_path / "s", emb, hnsw_ef=16) as m:
        m.add_many([{"text": f"note {i} about topic {i % 5}"} for i in range(300)])
        m.wait_indexed()
        m.snapshot()
        assert m._engine.ef == 16
    with Memory(tmp_path / "s", emb, hnsw_ef=200) as m:
        assert m._engine.pending() == 0  # loaded, not rebuilt
        assert m._engine.ef == 200


@pytest.mark.parametrize(
    ("knob", "value"),
    [
        ("hnsw_ef", 0),
        ("hnsw_ef", -1),
        ("hnsw_ef", 2**70),
        ("hnsw_ef", True),
        ("hnsw_ef_construction", 2**64),
        ("hnsw_ef_construction", 1.5),
        ("hnsw_m", 1),
        ("hnsw_m", 201),
        ("hnsw_m", "16"),
    ],
)
def test_graph_knobs_are_checked_before_anything_opens(
    tmp_path: Path, knob: str, value: object
) -> None:
    # Also without an embedder (no graph): a bad value is refused, never ignored.
    for emb in (WordHashEmbedder(), None):
        with pytest.raises(InvalidArgumentError, match=knob):
            Memory(tmp_path / "s", emb, **{knob: value})  # type: ignore[arg-type]
        assert not (tmp_path / "s").exists()
