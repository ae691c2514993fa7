"""The framework adapters' suites must run, never skip.

Their frameworks come with the ``dev`` extra and the test modules import them
directly, so a missing one is a collection error. A test that skips itself (a
standard suite can) is reported here as a failure, so CI cannot pass with an
adapter left untested (the PostgreSQL halves skip where the rest of the tests do).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    # Without PostgreSQL binaries the suites' PostgreSQL halves skip, as the rest of the
    # tests do; CI sets MEMLANE_REQUIRE_PG, which makes that a failure (tests/conftest.py).
    no_pg = "PostgreSQL server binaries" in str(report.longrepr)
    if report.skipped and not hasattr(report, "wasxfail") and not no_pg:
        report.outcome = "failed"
        report.longrepr = (
            f"an adapter test skipped, which CI counts as a failure: {report.longrepr}"
        )
