"""CI's rule for skipped tests, as pytest hooks (imported by conftest.py).

Where `IMG2IMG_FAIL_ON_SKIP` is set (.ci/run sets it) a skipped test is reported as failed: a
missing package or binary must not silently leave an area untested. Only tests marked `gpu` may
be skipped there (no GPU on the machine). Expected failures (xfail) and tests deselected by
marker (e.g. an opt-in benchmark) are not skips.
"""
from __future__ import annotations

import os

import pytest

FAIL_ON_SKIP = "IMG2IMG_FAIL_ON_SKIP"


def _skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    longrepr = report.longrepr
    return longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)


def _fail_the_skip(report, where: str) -> None:
    reason = _skip_reason(report)
    report.outcome = "failed"
    report.longrepr = (f"{where} was skipped ({reason}), but {FAIL_ON_SKIP} is set (CI), where only tests marked "
                       f"gpu may be skipped: install what it needs (scripts/run_tests.sh does for CI).")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    if (report.skipped and os.environ.get(FAIL_ON_SKIP) and not hasattr(report, "wasxfail")
            and item.get_closest_marker("gpu") is None):
        _fail_the_skip(report, item.nodeid)


# A module skipped while it is imported has no test to fail; it is reported at the end, and the
# run fails then (failing its collection instead would interrupt the whole session). This hook also
# runs in the controller of a pytest-xdist run (run_tests.sh's -n 2), which gets the workers'
# skipped collection reports: the controller's exit status is the run's.
_skipped_modules: list[str] = []


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.skipped and os.environ.get(FAIL_ON_SKIP):
        _skipped_modules.append(f"{report.nodeid}: skipped ({_skip_reason(report)}), but {FAIL_ON_SKIP} is set")


def pytest_terminal_summary(terminalreporter) -> None:
    for line in _skipped_modules:
        terminalreporter.write_line(f"FAILED {line}", red=True)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _skipped_modules and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
