"""The framework adapters' suites must run, never skip.

Their frameworks come with the ``dev`` extra and the test modules import them
directly, so a missing one is a collection error. A test that skips itself (a
standard suite can) is reported here as a failure, so CI cannot pass with an
adapter left untested.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    if report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = (
            f"an adapter test skipped, which CI counts as a failure: {report.longrepr}"
        )
