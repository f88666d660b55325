"""Root conftest: only what is specific to this repository.

The `kernel` / `allow_skip` markers and strict guest mode belong to the plugin
(pytest_lbr/guest_mode.py). This suite tests the installed pytest-lbr (the wheel
ci/setup builds), never this checkout's `pytest_lbr/`: pytest appends the
repository to sys.path (`--import-mode=append`), and every Python process the
tests start (CLI runs, pytester subprocesses, xdist workers) runs with
PYTHONSAFEPATH, so its working directory (often this checkout) is not put first
on its path either. The header names the pytest_lbr under test.
"""

from __future__ import annotations

import os

import pytest

import pytest_lbr

os.environ["PYTHONSAFEPATH"] = "1"


def pytest_report_header() -> str:
    return f"pytest_lbr under test: {pytest_lbr.__file__}"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """How many cases each fuzz test ran (tests/fuzzing.py), under xdist too."""
    lines = [
        f"{report.nodeid}: {value} cases"
        for key in ("", "passed", "failed", "error")
        for report in terminalreporter.stats.get(key, [])
        for name, value in getattr(report, "user_properties", ())
        if name == "fuzz_cases"
    ]
    if lines:
        terminalreporter.section("fuzz cases run")
        for line in sorted(set(lines)):
            terminalreporter.write_line(line)
