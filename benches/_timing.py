"""Latency summaries shared by the benchmarks."""

from __future__ import annotations

import numpy as np


def percentiles(samples: list[float]) -> tuple[float, float]:
    """p50 and p99 of durations in seconds, in milliseconds."""
    a = np.asarray(samples) * 1e3
    return float(np.percentile(a, 50)), float(np.percentile(a, 99))
