"""The store's search defaults are the ones the benchmarks chose."""

from __future__ import annotations

import inspect
from pathlib import Path

from conftest import WordHashEmbedder
from memlane import Memory

# benches/bench_disk.py, 100,000 WordNet glosses, queries not in the store: recall@10
# 0.9725 at ef 64, 0.9859 at 96, 0.9898-0.9906 at 128 over four builds, 0.9922 at 144
# (issue 37's goal: 0.99), at about 6x chromadb's speed once settled.
CHOSEN_EF = 144


def test_the_default_search_beam_is_the_benchmarked_one(tmp_path: Path) -> None:
    assert inspect.signature(Memory.__init__).parameters["hnsw_ef"].default == CHOSEN_EF
    with Memory(tmp_path / "s", WordHashEmbedder()) as mem:
        assert mem._sync.engine_args["ef"] == CHOSEN_EF
