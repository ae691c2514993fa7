"""``bench_agent_upkeep.py``'s main path once, small (12 turns, an LLM stub of 0.05 s), so
that it cannot rot: it checks what was stored and reported, never a timing."""

from __future__ import annotations

import pytest

import bench_agent_upkeep as bench


def test_bench_agent_upkeep_runs(capsys: pytest.CaptureFixture[str]) -> None:
    runs = bench.main(["--turns", "12", "--llm-latency", "0.05", "--quiet"])
    assert bench.check(runs) == []
    (run,) = runs
    for mode in bench.MODES:
        x = run["modes"][mode]
        assert len(x["before_s"]) == len(x["after_s"]) == 12
        assert x["messages_stored"] == 24  # every turn: the user's message and the reply
        # One reflection (turn 10), which stored the stub's two facts.
        assert x["reflections"] == 1 and x["reflection_facts"] == [2]
        assert x["llm_calls"].get("reflection") == 1
        assert x["failures"] == [] and x["jobs_left"] == []
    background = run["modes"]["background"]
    assert background["upkeep_jobs"].get("reflection") == 1
    assert len(background["trigger_to_done_s"]) == 1  # its on_upkeep result arrived
    assert run["modes"]["inline"]["upkeep_jobs"] == {}  # done in after(), not on a worker
    out = capsys.readouterr().out
    assert "inline/background p99" in out and "PROBLEM" not in out
