"""Fixtures of the pytest-benchmark tests in ``benches/`` (``test_bench_*.py``): the data
sets of ``_bench_data.py`` (which says how a run chooses them), once per session."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

from _bench_data import (
    Corpus,
    Dataset,
    data_choice,
    real_corpus,
    real_dataset,
    size,
    synthetic_corpus,
    synthetic_dataset,
)

# Without pytest-benchmark (the dev extra) there is no ``benchmark`` fixture: collect nothing.
collect_ignore_glob = [] if importlib.util.find_spec("pytest_benchmark") else ["test_bench_*.py"]


def _pick(config: pytest.Config, real: Any, synthetic: Any) -> Any:
    choice = data_choice()
    if choice == "synthetic":
        return synthetic(size(config, real=False))
    got = real(size(config, real=True))
    if isinstance(got, str):
        if choice == "real":
            pytest.skip(f"MEMLANE_BENCH_DATA=real: {got}")
        return synthetic(size(config, real=False))
    return got


@pytest.fixture(scope="session")
def dataset(request: pytest.FixtureRequest) -> Dataset:
    """Vectors with their texts: WordNet's where cached, else generated."""
    data: Dataset = _pick(request.config, real_dataset, synthetic_dataset)
    return data


@pytest.fixture(scope="session")
def corpus(request: pytest.FixtureRequest) -> Corpus:
    """Texts and text queries: WordNet glosses where present, else generated."""
    data: Corpus = _pick(request.config, real_corpus, synthetic_corpus)
    return data


def pytest_benchmark_update_machine_info(config: Any, machine_info: dict[str, Any]) -> None:
    import memlane

    machine_info["memlane"] = memlane._core.__version__
    machine_info["bench_data"] = data_choice()
